// ONNX Runtime's library, bound at run time (see ort_library.h).
#include "ort_library.h"

#include <dlfcn.h>

#include <cstdio>

#include "errors.h"
#include "files.h"
#include "runtime_log.h"
#include "text.h"

namespace edgekit {

namespace {

constexpr uint32_t kApiVersion = 21;
constexpr const char* kLibrary = "libonnxruntime.so";

void on_log(void*, OrtLoggingLevel severity, const char*, const char*, const char*, const char* message) {
  bool is_error = severity >= ORT_LOGGING_LEVEL_ERROR;
  std::string text = message ? message : "";
  if (debug_enabled()) std::fprintf(err_stream(), "[onnxruntime] %s\n", one_line(text, 500).c_str());
  log_runtime_line(text, is_error);
}

}  // namespace

bool dtype_of(int code, DType* dtype) {
  switch (code) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: *dtype = DType::Float32; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: *dtype = DType::UInt8; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: *dtype = DType::Int8; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: *dtype = DType::UInt16; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: *dtype = DType::Int16; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: *dtype = DType::Int32; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: *dtype = DType::Int64; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: *dtype = DType::Bool; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: *dtype = DType::Float16; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: *dtype = DType::Float64; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: *dtype = DType::UInt32; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: *dtype = DType::UInt64; return true;
    default: return false;
  }
}

ONNXTensorElementDataType code_of(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    case DType::UInt8: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
    case DType::Int8: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
    case DType::UInt16: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16;
    case DType::Int16: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16;
    case DType::Int32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
    case DType::Int64: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    case DType::Bool: return ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
    case DType::Float16: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
    case DType::Float64: return ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE;
    case DType::UInt32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32;
    case DType::UInt64: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64;
  }
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

Ort& ort() {
  static Ort o;
  return o;
}

void check(OrtStatus* status, const std::string& what) {
  if (status == nullptr) return;
  const OrtApi* api = ort().api;
  std::string message = api->GetErrorMessage(status);
  api->ReleaseStatus(status);
  throw RunError(what + ": " + one_line(message, 600));
}

void bind_library() {
  Ort& o = ort();
  if (o.api != nullptr) return;
  std::string path = join_path(join_path(executable_dir(), "lib"), kLibrary);
  if (!is_file(path)) {
    throw RunError("the ONNX Runtime library " + path + " is missing (a native ONNX bundle carries it in lib/); "
                   "rebuild the bundle");
  }
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw RunError("cannot load the ONNX Runtime library " + path + ": " + one_line(why ? why : "dlopen failed", 300));
  }
  using GetApiBase = const OrtApiBase* (*)();
  auto get_base = reinterpret_cast<GetApiBase>(::dlsym(handle, "OrtGetApiBase"));
  const OrtApiBase* base = get_base ? get_base() : nullptr;
  if (base == nullptr) throw RunError(path + " is not an ONNX Runtime library (it has no OrtGetApiBase)");
  const char* version = base->GetVersionString();
  const OrtApi* api = base->GetApi(kApiVersion);
  if (api == nullptr) {
    throw RunError(format("the ONNX Runtime library %s (version %s) does not serve C API %u; it needs 1.21 or later",
                          path.c_str(), version ? version : "unknown", kApiVersion));
  }
  o.api = api;
  o.version = version ? version : "unknown";
  check(api->CreateEnvWithCustomLogger(on_log, nullptr, ORT_LOGGING_LEVEL_WARNING, "edgekit-run", &o.env),
        "ONNX Runtime would not start");
  check(api->GetAllocatorWithDefaultOptions(&o.allocator), "ONNX Runtime has no CPU allocator");
  check(api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &o.cpu), "ONNX Runtime has no CPU memory");
}

}  // namespace edgekit
