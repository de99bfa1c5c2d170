// ModuleScope: marks the extent of a module's forward for an observer such as
// the flops profiler (runtime/profiling/flops_profiler.h).
//
// LibTorch's C++ modules have no forward hooks (forward() is not virtual), so a
// profiler cannot wrap a module from outside. A model opts in instead: the first
// line of its forward is `ModuleScope scope(this);`, and the observer installed
// on this thread sees enter(module) and, when the scope closes, exit(module),
// properly nested. With no observer installed, a scope costs one thread-local
// read.
//
// Threads: the observer is per thread (the thread that runs the forward);
// install and remove it on that thread. Observers must not throw.
#pragma once

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace tessera::models {

class ModuleScopeObserver {
 public:
  virtual ~ModuleScopeObserver() = default;
  virtual void enter(const torch::nn::Module* module) = 0;
  virtual void exit(const torch::nn::Module* module) = 0;
};

// The observer of the calling thread (nullptr: none), and replacing it.
// Returns the previous one so that a caller can restore it.
ModuleScopeObserver* module_scope_observer();
ModuleScopeObserver* set_module_scope_observer(ModuleScopeObserver* observer);

class ModuleScope {
 public:
  explicit ModuleScope(const torch::nn::Module* module)
      : module_(module), observer_(module_scope_observer()) {
    if (observer_ != nullptr) observer_->enter(module_);
  }
  ~ModuleScope() {
    if (observer_ != nullptr) observer_->exit(module_);
  }
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  const torch::nn::Module* module_;
  ModuleScopeObserver* observer_;  // the one that saw enter() also sees exit()
};

}  // namespace tessera::models
