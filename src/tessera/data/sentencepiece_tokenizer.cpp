#include "tessera/data/sentencepiece_tokenizer.h"

#include "tessera/core/check.h"
#include "tessera/data/added_token_matcher.h"

#ifdef TESSERA_WITH_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace tessera::data {

#ifdef TESSERA_WITH_SENTENCEPIECE

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
  std::unique_ptr<AddedTokenMatcher> specials;  // control symbols and <unk>

  void encode_piece(std::string_view text, const std::string& path,
                    std::vector<int64_t>& out) const {
    std::vector<int> ids;
    const auto status = processor.Encode(text, &ids);
    TS_CHECK_T(ConfigError, status.ok(), "SentencePiece model ", path,
               " failed to encode: ", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path), impl_(std::make_unique<Impl>()) {
  const auto status = impl_->processor.Load(model_path);
  TS_CHECK_T(ConfigError, status.ok(), "cannot load SentencePiece model ", model_path, ": ",
             status.ToString());
  std::vector<AddedToken> specials;
  for (int id = 0; id < impl_->processor.GetPieceSize(); ++id) {
    if (impl_->processor.IsControl(id) || impl_->processor.IsUnknown(id)) {
      AddedToken token;
      token.content = impl_->processor.IdToPiece(id);
      token.id = id;
      token.special = true;
      if (!token.content.empty()) specials.push_back(token);
    }
  }
  impl_->specials = std::make_unique<AddedTokenMatcher>(specials);
}

std::vector<int64_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<AddedTokenMatcher::Piece> pieces;
  impl_->specials->split(text, pieces);
  std::vector<int64_t> ids;
  for (const auto& piece : pieces) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
    } else {
      impl_->encode_piece(piece.text, path_, ids);
    }
  }
  return ids;
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (int64_t id : ids) {
    TS_CHECK_T(ConfigError, id >= 0 && id < vocab_size(), "token id ", id,
               " is outside the vocabulary [0, ", vocab_size(), ") of ", description());
    narrow.push_back(static_cast<int>(id));
  }
  std::string text;
  const auto status = impl_->processor.Decode(narrow, &text);
  TS_CHECK_T(ConfigError, status.ok(), "SentencePiece model ", path_,
             " failed to decode: ", status.ToString());
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }

#else  // !TESSERA_WITH_SENTENCEPIECE

struct SentencePieceTokenizer::Impl {};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path) : path_(model_path) {
  TS_THROW(ConfigError, "cannot load SentencePiece model ", model_path,
           ": this Tessera was built without libsentencepiece; install libsentencepiece-dev "
           "(scripts/install-deps.sh) and rebuild");
}
std::vector<int64_t> SentencePieceTokenizer::encode(std::string_view) const { return {}; }
std::string SentencePieceTokenizer::decode(const std::vector<int64_t>&) const { return {}; }
int64_t SentencePieceTokenizer::vocab_size() const { return 0; }

#endif

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

}  // namespace tessera::data
