// A GPT saved through the checkpoint writer and loaded into a differently
// initialized GPT produces identical logits.
#include <gtest/gtest.h>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/module_state.h"
#include "tessera/models/gpt.h"
#include "testing/files.h"

namespace tessera {
namespace {

TEST(ModuleCheckpoint, GptRoundTrip) {
  testing::TempDir tmp("modckpt");
  const std::string& dir = tmp.path();
  models::GPTConfig c;
  c.block_size = 8;
  c.n_embd = 16;
  models::GPT saved(c);
  c.seed = 99;
  models::GPT restored(c);
  auto idx = torch::randint(0, 256, {2, 8}, torch::kLong);

  checkpoint::CheckpointWriter writer(dir, std::make_shared<checkpoint::LocalCoordinator>());
  checkpoint::CheckpointState state;
  state.replicated = checkpoint::module_state(*saved, "model.");
  writer.save(3, state);

  auto path = checkpoint::latest_checkpoint(dir);
  ASSERT_TRUE(path.has_value());
  auto reader = checkpoint::CheckpointReader::open(*path);
  EXPECT_FALSE(torch::equal(saved->forward(idx), restored->forward(idx)));
  checkpoint::load_module_state(*restored, reader.replicated(), "model.");
  EXPECT_TRUE(torch::equal(saved->forward(idx), restored->forward(idx)));
  c.n_embd = 32;
  models::GPT wrong(c);
  EXPECT_THROW(checkpoint::load_module_state(*wrong, reader.replicated(), "model."),
               CheckpointError);
}

}  // namespace
}  // namespace tessera
