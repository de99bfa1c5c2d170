// Engine::save_checkpoint / load_checkpoint: a minimal single-directory format.
//   model.pt      rank 0: parameters and buffers (torch::serialize archive)
//   optimizer.pt  rank 0: optimizer state
//   rng_rank<r>.pt every rank: its CPU generator state
//   state.json    rank 0, written last (atomic rename): counters, client state
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>

#include <filesystem>
#include <fstream>

#include "tessera/core/check.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/optimizer_factory.h"

namespace tessera::runtime {
namespace {

namespace fs = std::filesystem;
constexpr int kFormatVersion = 1;

std::string rng_file(const std::string& dir, int rank) {
  return dir + "/rng_rank" + std::to_string(rank) + ".pt";
}

at::Tensor rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

void Engine::save_checkpoint(const std::string& dir, const nlohmann::json& client_state) {
  const int rank = group_->rank();
  std::error_code ec;
  fs::create_directories(dir, ec);
  TS_CHECK_T(CheckpointError, !ec, "cannot create checkpoint directory '", dir, "': ",
             ec.message());
  try {
    if (rank == 0) {
      fs::remove(dir + "/state.json", ec);  // incomplete until rewritten below
      torch::serialize::OutputArchive model_archive;
      module().save(model_archive);
      model_archive.save_to(dir + "/model.pt");
      torch::serialize::OutputArchive opt_archive;
      optimizer_->save(opt_archive);
      opt_archive.save_to(dir + "/optimizer.pt");
    }
    torch::serialize::OutputArchive rng_archive;
    rng_archive.write("cpu", rng_state());
    rng_archive.save_to(rng_file(dir, rank));
  } catch (const c10::Error& e) {
    TS_THROW(CheckpointError, "writing checkpoint '", dir, "' failed: ",
             e.what_without_backtrace());
  }
  group_->barrier()->wait();
  if (rank == 0) {
    nlohmann::json state = {{"format", kFormatVersion},
                            {"global_steps", global_steps_},
                            {"micro_steps", micro_steps_},
                            {"world_size", group_->size()},
                            {"scheduler", config_.scheduler.type},
                            {"client_state", client_state}};
    const std::string tmp = dir + "/state.json.tmp";
    {
      std::ofstream out(tmp);
      out << state.dump(2) << "\n";
      TS_CHECK_T(CheckpointError, out.good(), "cannot write '", tmp, "': disk full?");
    }
    fs::rename(tmp, dir + "/state.json", ec);
    TS_CHECK_T(CheckpointError, !ec, "cannot commit checkpoint '", dir, "': ", ec.message());
  }
  group_->barrier()->wait();
}

nlohmann::json Engine::load_checkpoint(const std::string& dir) {
  const std::string state_path = dir + "/state.json";
  TS_CHECK_T(CheckpointError, fs::exists(state_path), "checkpoint '", dir,
             "' is missing or incomplete (no state.json); pick a completed checkpoint");
  nlohmann::json state;
  try {
    std::ifstream in(state_path);
    state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TS_THROW(CheckpointError, "checkpoint '", dir, "': state.json is corrupt: ", e.what());
  }
  try {
    torch::serialize::InputArchive model_archive;
    model_archive.load_from(dir + "/model.pt");
    {
      at::NoGradGuard no_grad;
      module().load(model_archive);
    }
    torch::serialize::InputArchive opt_archive;
    opt_archive.load_from(dir + "/optimizer.pt");
    optimizer_->load(opt_archive);
    const std::string rng = rng_file(dir, group_->rank());
    if (fs::exists(rng)) {
      torch::serialize::InputArchive rng_archive;
      rng_archive.load_from(rng);
      at::Tensor s;
      rng_archive.read("cpu", s);
      set_rng_state(s);
    }
  } catch (const c10::Error& e) {
    TS_THROW(CheckpointError, "loading checkpoint '", dir, "' failed (does it belong to this "
             "model?): ", e.what_without_backtrace());
  }
  global_steps_ = state.value("global_steps", int64_t{0});
  micro_steps_ = state.value("micro_steps", int64_t{0});
  set_learning_rate(*optimizer_, lr());
  group_->barrier()->wait();
  return state.value("client_state", nlohmann::json::object());
}

}  // namespace tessera::runtime
