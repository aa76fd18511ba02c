// The ExecuTorch glue: the runtime's set-up (kernel libraries, thread pool), a loaded program's
// forward method, its inputs' planned sizes, and calls on numpy-style arrays.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "npy.h"

namespace edgekit {

// ExecuTorch's kernel libraries, loaded at start when they sit in <binary dir>/lib/ (a program
// with operators outside the XNNPACK delegate needs them).
extern const char* const kKernelLibraries[2];

struct RuntimeSetup {
  int64_t threads = -1;  // the pool's thread count; -1 when the pool could not be made
  std::vector<std::string> kernels;  // the kernel libraries loaded
};

// Once per process, before any program loads: runtime_init, the kernel libraries, the thread pool
// sized to `threads` (it cannot be resized safely under a loaded delegate). RunError on failure.
const RuntimeSetup& init_runtime(int64_t threads);
std::vector<std::string> registered_backends();
size_t registered_operator_count();

struct TensorMeta {
  std::string tag = "Tensor";  // the EValue tag; only tensors are fed
  int code = 6;                // ExecuTorch ScalarType
  bool known = true;           // whether code maps to a dtype edgekit-run makes
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;  // the planned (largest) sizes
  bool is_tensor() const { return tag == "Tensor"; }
  std::string dtype_text() const;  // "float32", or "ExecuTorch scalar type N"
};

class Model {
 public:
  // Loads the program (verified) and, with load_method, its forward method and planned memory.
  // RunError naming the file when it will not load.
  Model(const std::string& path, bool load_method = true);
  ~Model();

  const std::vector<TensorMeta>& inputs() const;
  const std::vector<TensorMeta>& outputs() const;
  // The outputs' names where the file holds them (ONNX), else none (an ExecuTorch program).
  std::vector<std::string> output_names() const;
  const std::vector<std::string>& method_names() const;
  const std::vector<std::string>& backends_used() const;  // by forward, in plan order, once each
  const std::vector<int64_t>& planned_buffers() const;    // bytes of forward's planned buffers
  int64_t batch_bound() const;  // the largest batch (axis 0) every input is planned for

  // UsageError for arrays the program was not planned for (count, rank, an axis past its
  // bound (axis 0 too with batch_too), dtype).
  void check_fits(const std::vector<std::string>& names, const std::vector<const Array*>& arrays,
                  bool batch_too) const;
  // Keeps arrays (checked, axis 0 included) as the inputs of call().
  void bind(std::vector<Array> arrays);
  // One call on the bound inputs: set_input for each, then execute. RunError on failure.
  void call();
  // Every output (only the first with first_only), as float32, for inputs in forward's order;
  // batches past batch_bound() run in chunks of it, joined along axis 0.
  std::vector<Array> predict_all(const std::vector<const Array*>& arrays, bool first_only = false);
  // The first output, as predict_all's.
  Array predict(const std::vector<const Array*>& arrays);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace edgekit
