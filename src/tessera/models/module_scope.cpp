#include "tessera/models/module_scope.h"

namespace tessera::models {
namespace {
thread_local ModuleScopeObserver* t_observer = nullptr;
}  // namespace

ModuleScopeObserver* module_scope_observer() { return t_observer; }

ModuleScopeObserver* set_module_scope_observer(ModuleScopeObserver* observer) {
  ModuleScopeObserver* previous = t_observer;
  t_observer = observer;
  return previous;
}

}  // namespace tessera::models
