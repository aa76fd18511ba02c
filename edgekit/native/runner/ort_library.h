// ONNX Runtime's library for the ONNX Runtime backend (ort_backend.cpp).
//
// The library is the one the onnxruntime wheel ships, in <binary dir>/lib/libonnxruntime.so. It is
// bound at run time (dlopen, then OrtGetApiBase()->GetApi(21)): its symbols are versioned per
// release (VERS_1.32.0, ...), so a link against one release's library would refuse every other,
// while the C API's function table is append-only and API 21 is served by 1.21 and every later one.
#pragma once

#include <string>

#include <onnxruntime_c_api.h>

#include "npy.h"

namespace edgekit {

// The library, bound once per process.
struct Ort {
  const OrtApi* api = nullptr;
  std::string version = "unknown";
  OrtEnv* env = nullptr;
  OrtAllocator* allocator = nullptr;  // the default CPU allocator (names, outputs)
  OrtMemoryInfo* cpu = nullptr;       // where the inputs' bytes live
  int threads = 1;
};

Ort& ort();
// Opens the library and its environment (logging into the runtime log), once; RunError naming the
// file when it is missing, not ONNX Runtime's, or too old for API 21.
void bind_library();
// The status's message as a RunError (the status released); nothing when it is null (success).
void check(OrtStatus* status, const std::string& what);
// ONNX's tensor element types (onnx.proto TensorProto.DataType) and the arrays edgekit-run makes.
bool dtype_of(int code, DType* dtype);
ONNXTensorElementDataType code_of(DType dtype);

}  // namespace edgekit
