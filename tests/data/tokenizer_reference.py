#!/usr/bin/env python3
"""Hugging Face `tokenizers`' side of test_tokenizers.cpp: reference tokenizers and ids.

usage: tokenizer_reference.py create OUT_DIR [MEGABYTES]
           writes OUT_DIR/text.txt, about MEGABYTES (default 1) of multilingual text
           made here from a seeded RNG (Latin with accents, Cyrillic, Greek, CJK,
           Arabic, Hebrew, Devanagari, emoji, digits, whitespace runs, special-token
           strings), and tokenizers trained on it, each with Hugging Face's ids for
           the whole text (little-endian int32, <name>.ids):
             gpt2/      byte-level BPE, GPT-2 pre-tokenizer: tokenizer.json (with
                        added tokens) and vocab.json + merges.txt (without);
                        ids in gpt2_json.ids and gpt2_files.ids
             llama3/    byte-level BPE, Llama-3 split regex, ignore_merges, added
                        tokens with lstrip/rstrip and single_word: tokenizer.json;
                        llama3.ids
             spm/       SentencePiece BPE with byte fallback (Llama's settings),
                        tokenizer.model; spm.ids are the ids of transformers'
                        LlamaTokenizerFast converted from that model (a `tokenizers`
                        Tokenizer), checked here against the sentencepiece library
                        (with "<s>", "</s>", "<unk>" in the text as their ids)
       tokenizer_reference.py time OUT_DIR NAME REPEATS
           prints "hf_seconds S tokens N lines_seconds S2 tokens N2" for each
           repeat, each with a freshly loaded tokenizer NAME (gpt2, llama3, spm):
           Hugging Face encoding OUT_DIR/text.txt in one call, then its lines
           with one encode_batch call (RAYON_NUM_THREADS=1 keeps it on one thread).

Every encode is add_special_tokens=False: ids of the text itself, no BOS/EOS.
Exits 0 when all is well, 1 on a problem, 3 when a module is missing.
"""
import os
import random
import re
import struct
import sys
import time
import unicodedata

try:
    import sentencepiece as spm
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from tokenizers import AddedToken
    from transformers import LlamaTokenizerFast
except ImportError as e:
    print(f"tokenizer_reference.py: cannot import tokenizers, transformers and sentencepiece "
          f"with {sys.executable} ({e}); run scripts/install-deps.sh")
    sys.exit(3)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<mask>", "<s>", "</s>", "<unk>"]

WORDS = {
    "en": "the of and to in is was for that with as on by it from at be this are which "
          "license software program you may not copy modify distribute terms conditions "
          "work source code rights free public general version any other such under "
          "don't isn't we'll they're I've she'd it's you'll HTTP JSON OpenSSL".split(),
    "fr": "été où déjà français garçon naïve cœur à très élève Noël forêt hôpital "
          "fenêtre château œuvre ça".split(),
    "de": "Straße Größe für über schön Mädchen Übung Fußgänger ärgerlich Bäume".split(),
    "es": "niño mañana año corazón canción pingüino está qué cómo".split(),
    "pl": "zażółć gęślą jaźń łódź źdźbło świętość".split(),
    "vi": "Tiếng Việt người chữ được những đường".split(),
    "ru": "привет мир язык программа данные обучение модель быстро ещё объём".split(),
    "el": "γειά σου κόσμε αλφάβητο ελληνικά μάθηση δεδομένα ψυχή".split(),
    "zh": "我们 学习 数据 模型 训练 中文 分词 你好 世界 机器 语言 的 是 了".split(),
    "ja": "こんにちは 世界 日本語 カタカナ ひらがな 東京 学習 です ます".split(),
    "ko": "안녕하세요 세계 한국어 데이터 모델 학습".split(),
    "ar": "مرحبا بالعالم اللغة العربية البيانات نموذج تعلم".split(),
    "he": "שלום עולם שפה עברית נתונים".split(),
    "hi": "नमस्ते दुनिया भाषा हिन्दी डेटा मॉडल".split(),
    "th": "สวัสดี ภาษาไทย ข้อมูล".split(),
}
EMOJI = "😀 🚀 👍🏽 ❤️ 🎉 🤖 👨‍👩‍👧 🇫🇷 ✨ 🐍".split()
PUNCT = [".", ",", "!", "?", ";", ":", "...", " - ", " — ", "(", ")", "\"", "'", "«", "»",
         "“", "”", "¿", "¡", "、", "。", "，", "؟", "#", "$", "%", "&", "*", "+", "=", "/",
         "@", "[", "]", "{", "}", "|", "~", "^", "`", "<", ">", "_", "\\"]
SPACES = [" ", "  ", "   ", "\t", " \t ", "\n", "\n\n", " \n", "\r\n", "\u00a0", "\u3000",
          "\u2009", "      "]


def token_of(rng):
    r = rng.random()
    if r < 0.06:
        return str(rng.randint(0, 10 ** rng.randint(1, 9)))
    if r < 0.08:
        return f"{rng.randint(0, 999)}.{rng.randint(0, 99)}"
    if r < 0.10:
        return rng.choice(EMOJI)
    if r < 0.22:
        return rng.choice(PUNCT)
    lang = rng.choice(list(WORDS))
    word = rng.choice(WORDS[lang])
    s = rng.random()
    if s < 0.08:
        return word.capitalize()
    if s < 0.10:
        return word.upper()
    return word


def make_text(n_bytes, seed=20250101):
    """Sentences of words, numbers, emoji and punctuation with varied whitespace,
    and a sweep over the code points to append to them."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n_bytes:
        sentence = []
        for _ in range(rng.randint(3, 25)):
            sentence.append(token_of(rng))
            sentence.append(" " if rng.random() < 0.8 else rng.choice(SPACES))
        if rng.random() < 0.01:
            sentence.append(rng.choice(SPECIALS))
        sentence.append(rng.choice([".\n", ". ", "!\n\n", "?\n", "\n", " "]))
        chunk = "".join(sentence)
        parts.append(chunk)
        size += len(chunk.encode("utf-8"))
    return "".join(parts), code_point_sweep(rng)


def code_point_sweep(rng):
    """Every 5th code point of planes 0-1 assigned in Unicode 14, in runs of 1-8
    between spaces or letters: regex classes (\\p{L}, \\p{N}, \\s) must agree on
    each. Unicode 14 is the version of Debian 12's PCRE2 (10.42); HF's Oniguruma
    knows letters assigned since, which PCRE2 sees as unassigned (docs/data.md).
    "Assigned" is Python's database: Unicode 14 for Python 3.11, Debian 12's."""
    chars = [chr(c) for c in range(1, 0x20000, 5) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    out, i = [], 0
    while i < len(chars):
        n = rng.randint(1, 8)
        out.append("".join(chars[i:i + n]) + rng.choice([" ", "a", "1", "\n", ""]))
        i += n
    # Every whitespace and format character, alone and in runs, between words.
    spaces = [chr(c) for c in [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, 0x180E,
                               *range(0x2000, 0x200F), 0x2028, 0x2029, 0x202F, 0x205F,
                               0x2060, 0x3000, 0xFEFF]]
    for sp in spaces:
        out.append(f"x{sp}y {sp}{sp}z{sp}\n{sp} 1{sp}2 ")
    # single_word tokens next to letters, digits, marks and punctuation.
    out.append("mañana xmañana mañanax 1mañana mañana٣ _mañana_ émañana (mañana) "
               "mañanaé мmañana mañana<mask>mañana  <mask>  mañana\n")
    return "".join(out)


def write_ids(path, ids):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}i", *ids))


def byte_level_bpe(text, vocab_size, split):
    """A byte-level BPE trained on `text`; `split` is the regex pre-tokenizer step."""
    tok = Tokenizer(models.BPE(ignore_merges=(split is not None)))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split is None)
    tok.pre_tokenizer = byte_level if split is None else pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated"), byte_level])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text[i:i + 4096] for i in range(0, len(text), 4096)], trainer)
    return tok


def create_gpt2(out, text):
    os.makedirs(f"{out}/gpt2", exist_ok=True)
    tok = byte_level_bpe(text, 2000, None)
    tok.model.save(f"{out}/gpt2")  # vocab.json + merges.txt: no added tokens
    write_ids(f"{out}/gpt2_files.ids", tok.encode(text, add_special_tokens=False).ids)
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(f"{out}/gpt2/tokenizer.json")
    ids = Tokenizer.from_file(f"{out}/gpt2/tokenizer.json").encode(text, add_special_tokens=False).ids
    write_ids(f"{out}/gpt2_json.ids", ids)
    return len(ids)


def create_llama3(out, text):
    os.makedirs(f"{out}/llama3", exist_ok=True)
    tok = byte_level_bpe(text, 3000, LLAMA3_PATTERN)
    tok.add_special_tokens(["<|begin_of_text|>", "<|eot_id|>"])
    tok.add_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=False),
                    AddedToken("mañana", single_word=True, special=False)])
    tok.save(f"{out}/llama3/tokenizer.json")
    ids = Tokenizer.from_file(f"{out}/llama3/tokenizer.json").encode(
        text, add_special_tokens=False).ids
    write_ids(f"{out}/llama3.ids", ids)
    return len(ids)


def hf_sentencepiece(model):
    """The `tokenizers` Tokenizer transformers converts from a Llama-style .model:
    legacy=True with add_prefix_space=True keeps SentencePiece's dummy prefix."""
    return LlamaTokenizerFast(vocab_file=model, from_slow=True, legacy=True,
                              add_prefix_space=True).backend_tokenizer


def spm_ids(sp, text):
    """The sentencepiece library's ids with control symbols and <unk> in the text
    taken as their ids and the text between them encoded piece by piece: what HF's
    converted tokenizer does with them as added tokens."""
    specials = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())
                if sp.is_control(i) or sp.is_unknown(i)}
    pattern = "(" + "|".join(re.escape(p) for p in sorted(specials, key=len, reverse=True)) + ")"
    ids = []
    for part in re.split(pattern, text):
        if part in specials:
            ids.append(specials[part])
        elif part:
            ids += sp.encode(part)
    return ids


def create_spm(out, text, train_text):
    os.makedirs(f"{out}/spm", exist_ok=True)
    with open(f"{out}/spm/train.txt", "w", encoding="utf-8") as f:
        f.write(train_text)  # without the sweep: each rare character would need a piece
    spm.SentencePieceTrainer.train(
        input=f"{out}/spm/train.txt", model_prefix=f"{out}/spm/tokenizer", model_type="bpe",
        vocab_size=2000, byte_fallback=True, split_digits=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, character_coverage=0.9995,
        allow_whitespace_only_pieces=True, max_sentence_length=1 << 20, num_threads=1,
        minloglevel=2)
    os.remove(f"{out}/spm/train.txt")
    model = f"{out}/spm/tokenizer.model"
    hf = hf_sentencepiece(model)
    ids = hf.encode(text, add_special_tokens=False).ids
    lib = spm_ids(spm.SentencePieceProcessor(model_file=model), text)
    if ids != lib:
        first = next((i for i, (a, b) in enumerate(zip(ids, lib)) if a != b), min(len(ids), len(lib)))
        print(f"tokenizer_reference.py: HF's converted tokenizer and sentencepiece disagree on the "
              f"text: {len(ids)} vs {len(lib)} ids, first difference at id {first}")
        return -1
    write_ids(f"{out}/spm.ids", ids)
    return len(ids)


def create(out, megabytes):
    body, sweep = make_text(int(megabytes * 1e6))
    text = body + sweep
    with open(f"{out}/text.txt", "w", encoding="utf-8", newline="") as f:
        f.write(text)
    counts = {"gpt2": create_gpt2(out, text), "llama3": create_llama3(out, text),
              "spm": create_spm(out, text, body)}
    print(f"tokenizer_reference.py: {len(text.encode('utf-8'))} bytes, ids "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0 if min(counts.values()) > 0 else 1


def hf_tokenizer(out, name):
    if name == "spm":
        return hf_sentencepiece(f"{out}/spm/tokenizer.model")
    return Tokenizer.from_file(f"{out}/{name}/tokenizer.json")


def time_hf(out, name, repeats):
    with open(f"{out}/text.txt", encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.splitlines(keepends=True)
    for _ in range(repeats):
        tok = hf_tokenizer(out, name)
        start = time.perf_counter()
        n = len(tok.encode(text, add_special_tokens=False).ids)
        whole = time.perf_counter() - start
        tok = hf_tokenizer(out, name)
        start = time.perf_counter()
        n_lines = sum(len(e.ids) for e in tok.encode_batch(lines, add_special_tokens=False))
        print(f"hf_seconds {whole:.6f} tokens {n} "
              f"lines_seconds {time.perf_counter() - start:.6f} tokens {n_lines}")
    return 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "create":
        return create(argv[1], float(argv[2]) if len(argv) > 2 else 1.0)
    if len(argv) == 4 and argv[0] == "time":
        return time_hf(argv[1], argv[2], int(argv[3]))
    print(__doc__)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
