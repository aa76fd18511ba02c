// The ExecuTorch backend's facts (backend.h) and the runtime's set-up, once per process:
// runtime_init, the kernel libraries beside the binary (dlopen: they register their operators
// from static initializers) and the XNNPACK thread pool.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"  // in ExecuTorch's headers
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/runtime.h>
#pragma GCC diagnostic pop

#include "backend.h"
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

#ifndef EDGEKIT_EXECUTORCH_VERSION
#define EDGEKIT_EXECUTORCH_VERSION "unknown"
#endif

namespace edgekit {

namespace et = executorch::runtime;

const BackendFacts& backend() {
  static const BackendFacts facts{"executorch-native", "executorch", "ExecuTorch", "executorch", ".pte"};
  return facts;
}

std::string runtime_version() { return EDGEKIT_EXECUTORCH_VERSION; }

bool looks_like_model(const std::string& path) {  // "ET" and two digits at offset 4: the flatbuffer's file identifier
  FILE* fh = std::fopen(path.c_str(), "rb");
  if (!fh) return false;
  char head[8];
  size_t got = std::fread(head, 1, 8, fh);
  std::fclose(fh);
  return got == 8 && head[4] == 'E' && head[5] == 'T' && head[6] >= '0' && head[6] <= '9' && head[7] >= '0' &&
         head[7] <= '9';
}

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
