#include "tessera/data/distributed_sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tessera/core/check.h"

namespace tessera::data {

std::string SamplerState::to_json() const {
  return nlohmann::json{{"epoch", epoch}, {"position", position}}.dump();
}

SamplerState SamplerState::from_json(const std::string& text) {
  SamplerState s;
  try {
    auto j = nlohmann::json::parse(text);
    s.epoch = j.at("epoch").get<int64_t>();
    s.position = j.at("position").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    TS_THROW(ConfigError, "sampler state '", text,
             "' is not {\"epoch\": int, \"position\": int}: ", e.what());
  }
  TS_CHECK_T(ConfigError, s.epoch >= 0 && s.position >= 0, "sampler state '", text,
             "' has a negative epoch or position");
  return s;
}

SamplerState SamplerState::resharded(int saved_world, int world) const {
  TS_CHECK_T(ConfigError, saved_world >= 1 && world >= 1, "sampler state: world sizes must be >= 1, got ",
             saved_world, " and ", world);
  if (saved_world == world) return *this;
  const int64_t consumed = position * saved_world;
  TS_CHECK_T(ConfigError, consumed % world == 0, "the saved data position (", consumed,
             " samples of epoch ", epoch, " dealt to ", saved_world,
             " ranks) does not split evenly over ", world,
             " ranks; resume with a world size that divides it (keep train_batch_size a multiple "
             "of both world sizes)");
  return SamplerState{epoch, consumed / world};
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  TS_CHECK_T(ConfigError, dataset_size >= 0, "DistributedSampler: dataset size must be >= 0, got ",
             dataset_size);
  TS_CHECK_T(ConfigError, num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ",
             num_replicas);
  TS_CHECK_T(ConfigError, rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
             " is outside [0, ", num_replicas, ")");
  if (options.drop_last) {
    num_samples_ = dataset_size / num_replicas;
    TS_CHECK_T(ConfigError, num_samples_ > 0, "DistributedSampler: drop_last with ", dataset_size,
               " samples and ", num_replicas,
               " replicas leaves every rank empty; use a larger dataset or drop_last=false");
  } else {
    num_samples_ = (dataset_size + num_replicas - 1) / num_replicas;
  }
  build_indices();
}

void DistributedSampler::set_epoch(int64_t epoch) {
  TS_CHECK_T(ConfigError, epoch >= 0, "DistributedSampler: epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  position_ = 0;
  build_indices();
}

void DistributedSampler::build_indices() {
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  if (options_.shuffle && dataset_size_ > 0) {
    // Same generator and seed on every rank -> the same permutation everywhere.
    auto gen = at::detail::createCPUGenerator(options_.seed + static_cast<uint64_t>(epoch_));
    at::Tensor perm = at::randperm(dataset_size_, gen, at::TensorOptions().dtype(at::kLong));
    std::copy(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + dataset_size_, order.begin());
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) order[static_cast<size_t>(i)] = i;
  }
  const int64_t total = total_size();
  if (total <= dataset_size_) {
    order.resize(static_cast<size_t>(total));  // drop_last (or exact multiple)
  } else {
    // Pad by wrapping around to the start (repeatedly, if the dataset is tiny).
    for (int64_t i = dataset_size_; i < total; ++i) {
      order.push_back(order[static_cast<size_t>(i % dataset_size_)]);
    }
  }
  indices_.clear();
  indices_.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_) {
    indices_.push_back(order[static_cast<size_t>(i)]);
  }
}

std::vector<int64_t> DistributedSampler::next_batch(int64_t batch_size) {
  TS_CHECK(batch_size > 0, "DistributedSampler::next_batch: batch_size must be > 0, got ",
           batch_size);
  const int64_t n = std::min(batch_size, remaining());
  std::vector<int64_t> out(indices_.begin() + position_, indices_.begin() + position_ + n);
  position_ += n;
  return out;
}

void DistributedSampler::load_state(const SamplerState& state) {
  set_epoch(state.epoch);
  TS_CHECK_T(ConfigError, state.position >= 0 && state.position <= num_samples_,
             "DistributedSampler: saved position ", state.position, " is outside [0, ",
             num_samples_, "]; was the checkpoint made with another dataset or world size?");
  position_ = state.position;
}

}  // namespace tessera::data
