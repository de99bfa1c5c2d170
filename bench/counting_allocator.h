// CountingAllocator: a wrapper around LibTorch's CPU allocator that counts the
// bytes of live tensor storages and their high-water mark, so benchmarks report
// memory measured, not computed. Install it before any tensor exists:
//   static CountingAllocator counting(c10::GetDefaultCPUAllocator());
//   c10::SetCPUAllocator(&counting, /*priority=*/100);
// Memory that does not come from LibTorch's allocator (posix_memalign'd I/O
// buffers, for one) is not counted. Thread-safe.
#pragma once

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_map>

// Counts the bytes of live CPU tensor storages and their high-water mark. The
// pointer is its own context (LibTorch's raw_allocate() requires it), so sizes
// are looked up at free.
class CountingAllocator : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) {
    base_ = base;
    base_free_ = base->raw_deleter();
  }
  c10::DataPtr allocate(size_t n) override {
    void* data = base_->raw_allocate(n);
    int64_t now = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sizes_[data] = n;
      live_ += static_cast<int64_t>(n);
      now = live_;
      peak_ = std::max(peak_, now);
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  static int64_t live() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }
  // Restarts the high-water mark at the current live bytes.
  static void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = live_;
  }
  static int64_t peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  static void release(void* p) {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sizes_.find(p);
      if (it != sizes_.end()) {
        live_ -= static_cast<int64_t>(it->second);
        sizes_.erase(it);
      }
    }
    base_free_(p);
  }
  static inline c10::Allocator* base_ = nullptr;
  static inline c10::DeleterFnPtr base_free_ = nullptr;
  static inline std::mutex mu_;
  static inline std::unordered_map<void*, size_t> sizes_;
  static inline int64_t live_ = 0;
  static inline int64_t peak_ = 0;
};
