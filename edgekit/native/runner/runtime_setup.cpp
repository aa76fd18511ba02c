// The runtime's set-up, once per process: runtime_init, the kernel libraries beside the binary
// (dlopen: they register their operators from static initializers) and the XNNPACK thread pool.
#include <dlfcn.h>

#include <cstdint>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"  // in ExecuTorch's headers
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/runtime.h>
#pragma GCC diagnostic pop

#include "errors.h"
#include "files.h"
#include "program.h"
#include "text.h"


// The wheel ships no threadpool.h; these are the (non-virtual) members libexecutorch_threadpool.so exports.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  bool _unsafe_reset_threadpool(uint32_t num_threads);
  size_t get_thread_count() const;
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace edgekit {

namespace et = executorch::runtime;

const char* const kKernelLibraries[2] = {"libexecutorch_kernels_optimized.so", "libexecutorch_kernels_quantized.so"};

const RuntimeSetup& init_runtime(int64_t threads) {
  static RuntimeSetup setup;
  static bool done = false;
  if (done) return setup;
  done = true;
  et::runtime_init();
  std::string lib = join_path(executable_dir(), "lib");
  for (const char* name : kKernelLibraries) {
    std::string path = join_path(lib, name);
    if (!is_file(path)) continue;
    if (!::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      const char* why = ::dlerror();
      throw RunError("cannot load the kernel library " + path + ": " + one_line(why ? why : "dlopen failed", 200));
    }
    setup.kernels.push_back(name);
  }
  auto* pool = executorch::extension::threadpool::get_threadpool();
  if (pool != nullptr) {
    if (threads > 0 && pool->get_thread_count() != static_cast<size_t>(threads)) {
      pool->_unsafe_reset_threadpool(static_cast<uint32_t>(threads));
    }
    setup.threads = static_cast<int64_t>(pool->get_thread_count());
  }
  return setup;
}

std::vector<std::string> registered_backends() {
  std::vector<std::string> names;
  size_t n = et::get_num_registered_backends();
  for (size_t i = 0; i < n; ++i) {
    auto name = et::get_backend_name(i);
    if (name.ok() && name.get() != nullptr) names.push_back(name.get());
  }
  return names;
}

size_t registered_operator_count() { return et::get_registered_kernels().size(); }

}  // namespace edgekit
