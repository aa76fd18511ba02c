// The ONNX Runtime backend (program.h, backend.h): ONNX models run through ONNX Runtime's C API,
// on the library ort_library.cpp binds at run time.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "backend.h"
#include "errors.h"
#include "files.h"
#include "ort_library.h"
#include "program.h"
#include "runtime_log.h"
#include "text.h"
#include "watchdog.h"

namespace edgekit {

namespace {

constexpr int64_t kUnbounded = std::numeric_limits<int32_t>::max();  // a dynamic batch axis

// A name ONNX Runtime allocated, copied out and freed.
std::string take_name(char* name) {
  std::string out = name ? name : "";
  if (name) ort().allocator->Free(ort().allocator, name);
  return out;
}

// An input tensor over an Array's bytes (ONNX Runtime reads them in place).
struct InputValue {
  OrtValue* value = nullptr;
  InputValue(const Array& array, const std::string& name) {
    const OrtApi* api = ort().api;
    check(api->CreateTensorWithDataAsOrtValue(ort().cpu, const_cast<char*>(array.data.data()), array.data.size(),
                                              array.shape.data(), array.shape.size(), code_of(array.dtype), &value),
          "ONNX Runtime refused input " + py_repr(name));
  }
  ~InputValue() {
    if (value) ort().api->ReleaseValue(value);
  }
  InputValue(const InputValue&) = delete;
  InputValue& operator=(const InputValue&) = delete;
};

}  // namespace

const BackendFacts& backend() {
  static const BackendFacts facts{"onnxruntime-native", "onnx", "ONNX Runtime", "onnxruntime", ".onnx"};
  return facts;
}

std::string runtime_version() {
  if (ort().api == nullptr) {
    try {
      bind_library();
    } catch (const RunError&) {
      return "unknown (its library did not load)";
    }
  }
  return ort().version;
}

bool looks_like_model(const std::string& path) {  // an ONNX ModelProto starts with ir_version (field 1, varint)
  FILE* fh = std::fopen(path.c_str(), "rb");
  if (!fh) return false;
  int first = std::fgetc(fh);
  std::fclose(fh);
  return first == 0x08;
}


const RuntimeSetup& init_runtime(int64_t threads) {
  static RuntimeSetup setup;
  static bool done = false;
  if (done) return setup;
  bind_library();
  done = true;
  ort().threads = threads > 0 ? static_cast<int>(threads) : 1;
  setup.threads = ort().threads;
  return setup;
}

std::vector<std::string> registered_backends() { return {"CPUExecutionProvider"}; }

size_t registered_operator_count() { return 0; }  // ONNX Runtime lists no kernel registry through its C API

std::string TensorMeta::dtype_text() const {
  return known ? dtype_name(dtype) : format("ONNX element type %d", code);
}

struct Model::Impl {
  std::string name;
  OrtSession* session = nullptr;
  std::vector<std::string> input_names, output_names;
  std::vector<TensorMeta> inputs, outputs;
  std::vector<std::string> methods{"main"};
  std::vector<std::string> backends{"CPUExecutionProvider"};
  std::vector<int64_t> planned;  // ONNX Runtime plans its memory itself: none to report
  std::vector<Array> bound;
  std::vector<std::unique_ptr<InputValue>> bound_values;

  [[noreturn]] void fail(const std::string& why) const {
    throw RunError("cannot load " + name + " as an ONNX model: " + why + runtime_detail());
  }

  TensorMeta describe(OrtTypeInfo* info) {
    const OrtApi* api = ort().api;
    TensorMeta t;
    const OrtTensorTypeAndShapeInfo* tensor = nullptr;
    OrtStatus* status = api->CastTypeInfoToTensorInfo(info, &tensor);
    if (status != nullptr || tensor == nullptr) {
      if (status) api->ReleaseStatus(status);
      t.tag = "NotTensor";
      t.known = false;
      return t;
    }
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    check(api->GetTensorElementType(tensor, &type), "cannot read " + name + "'s tensor types");
    check(api->GetDimensionsCount(tensor, &rank), "cannot read " + name + "'s tensor shapes");
    t.sizes.assign(rank, -1);
    if (rank) check(api->GetDimensions(tensor, t.sizes.data(), rank), "cannot read " + name + "'s tensor shapes");
    t.code = static_cast<int>(type);
    t.known = dtype_of(t.code, &t.dtype);
    return t;
  }

  void run(const std::vector<const OrtValue*>& values, std::vector<OrtValue*>& results) {
    const OrtApi* api = ort().api;
    std::vector<const char*> in_names, out_names;
    for (const auto& n : input_names) in_names.push_back(n.c_str());
    for (const auto& n : output_names) out_names.push_back(n.c_str());
    results.assign(out_names.size(), nullptr);
    StepTimer step("running " + name);
    clear_runtime_errors();
    OrtStatus* status = api->Run(session, nullptr, in_names.data(), values.data(), values.size(), out_names.data(),
                                 out_names.size(), results.data());
    if (status != nullptr) {
      std::string message = api->GetErrorMessage(status);
      api->ReleaseStatus(status);
      throw RunError("ONNX Runtime could not run " + name + ": " + one_line(message, 600));
    }
  }

  void release(std::vector<OrtValue*>& results) {
    for (OrtValue* v : results) {
      if (v) ort().api->ReleaseValue(v);
    }
    results.clear();
  }

  // Output `index` of a run, as float32.
  Array output(OrtValue* value, size_t index) {
    std::string what = index == 0 ? "first output" : format("output %zu", index);
    const OrtApi* api = ort().api;
    int is_tensor = 0;
    check(api->IsTensor(value, &is_tensor), "cannot read " + name + "'s output");
    if (!is_tensor) throw RunError("the model's " + what + " is not a tensor");
    OrtTensorTypeAndShapeInfo* info = nullptr;
    check(api->GetTensorTypeAndShape(value, &info), "cannot read " + name + "'s output");
    std::unique_ptr<OrtTensorTypeAndShapeInfo, void (*)(OrtTensorTypeAndShapeInfo*)> owned(
        info, [](OrtTensorTypeAndShapeInfo* p) { ort().api->ReleaseTensorTypeAndShapeInfo(p); });
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    check(api->GetTensorElementType(info, &type), "cannot read " + name + "'s output");
    check(api->GetDimensionsCount(info, &rank), "cannot read " + name + "'s output");
    Array raw;
    raw.shape.assign(rank, 0);
    if (rank) check(api->GetDimensions(info, raw.shape.data(), rank), "cannot read " + name + "'s output");
    if (!dtype_of(static_cast<int>(type), &raw.dtype)) {
      throw RunError("the model's " + what + format(" is of ONNX element type %d, not a number type",
                                                    static_cast<int>(type)));
    }
    uint64_t count = 0, bytes = 0;
    if (!element_count(raw.shape, &count) || __builtin_mul_overflow(count, dtype_size(raw.dtype), &bytes)) {
      throw RunError("the model's " + what + " has an invalid shape");
    }
    void* data = nullptr;
    check(api->GetTensorMutableData(value, &data), "cannot read " + name + "'s output");
    if (count > 0 && data == nullptr) throw RunError("the model's " + what + " has no data for its shape");
    if (bytes) raw.data.assign(static_cast<const char*>(data), bytes);
    return raw.dtype == DType::Float32 ? raw : cast_array(raw, DType::Float32);
  }
};

Model::Model(const std::string& path, bool /*load_method: a session is the only way to read an ONNX model*/)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.name = basename_of(path);
  if (!looks_like_model(path)) m.fail("it does not start as an ONNX model does (truncated, or another format)");
  init_runtime(0);
  const OrtApi* api = ort().api;
  clear_runtime_errors();
  StepTimer step("loading " + m.name);
  OrtSessionOptions* options = nullptr;
  check(api->CreateSessionOptions(&options), "ONNX Runtime has no session options");
  std::unique_ptr<OrtSessionOptions, void (*)(OrtSessionOptions*)> owned(
      options, [](OrtSessionOptions* p) { ort().api->ReleaseSessionOptions(p); });
  // the board package's Python runtime (board/runtimes/onnx_runtime.py) uses these settings: the same
  // library then computes the same numbers
  check(api->SetIntraOpNumThreads(options, ort().threads), "ONNX Runtime refused the thread count");
  check(api->SetInterOpNumThreads(options, 1), "ONNX Runtime refused the thread count");
  check(api->SetSessionExecutionMode(options, ORT_SEQUENTIAL), "ONNX Runtime refused the execution mode");
  check(api->SetSessionGraphOptimizationLevel(options, ORT_ENABLE_ALL), "ONNX Runtime refused the optimization level");
  OrtStatus* status = api->CreateSession(ort().env, path.c_str(), options, &m.session);
  if (status != nullptr) {
    std::string message = api->GetErrorMessage(status);
    api->ReleaseStatus(status);
    m.fail(one_line(message, 600));
  }
  size_t n_in = 0, n_out = 0;
  check(api->SessionGetInputCount(m.session, &n_in), "cannot read " + m.name + "'s inputs");
  check(api->SessionGetOutputCount(m.session, &n_out), "cannot read " + m.name + "'s outputs");
  for (size_t i = 0; i < n_in + n_out; ++i) {
    bool input = i < n_in;
    size_t k = input ? i : i - n_in;
    char* raw_name = nullptr;
    check(input ? api->SessionGetInputName(m.session, k, ort().allocator, &raw_name)
                : api->SessionGetOutputName(m.session, k, ort().allocator, &raw_name),
          "cannot read " + m.name + "'s names");
    (input ? m.input_names : m.output_names).push_back(take_name(raw_name));
    OrtTypeInfo* info = nullptr;
    check(input ? api->SessionGetInputTypeInfo(m.session, k, &info) : api->SessionGetOutputTypeInfo(m.session, k, &info),
          "cannot read " + m.name + "'s types");
    TensorMeta t = m.describe(info);
    api->ReleaseTypeInfo(info);
    if (input && !t.is_tensor()) {
      m.fail(format("its input %zu (%s) is not a tensor; edgekit-run feeds tensors only", k,
                    py_repr(m.input_names.back()).c_str()));
    }
    (input ? m.inputs : m.outputs).push_back(t);
  }
  if (m.outputs.empty()) m.fail("it has no outputs");
}

Model::~Model() {
  if (impl_) {
    impl_->bound_values.clear();
    if (impl_->session) ort().api->ReleaseSession(impl_->session);
  }
}

const std::vector<TensorMeta>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorMeta>& Model::outputs() const { return impl_->outputs; }
std::vector<std::string> Model::output_names() const { return impl_->output_names; }
const std::vector<std::string>& Model::method_names() const { return impl_->methods; }
const std::vector<std::string>& Model::backends_used() const { return impl_->backends; }
const std::vector<int64_t>& Model::planned_buffers() const { return impl_->planned; }

int64_t Model::batch_bound() const {
  int64_t bound = kUnbounded;
  for (const auto& t : impl_->inputs) {
    if (!t.sizes.empty() && t.sizes[0] > 0) bound = std::min(bound, t.sizes[0]);
  }
  return bound;
}

// ONNX shapes are exact where fixed (a dynamic axis is -1 and takes any size), not upper bounds.
void Model::check_fits(const std::vector<std::string>& names, const std::vector<const Array*>& arrays,
                       bool batch_too) const {
  const auto& declared = impl_->inputs;
  if (arrays.size() != declared.size()) {
    throw UsageError(format("the model takes %zu inputs; %zu given", declared.size(), arrays.size()));
  }
  for (size_t i = 0; i < arrays.size(); ++i) {
    const Array& a = *arrays[i];
    const TensorMeta& t = declared[i];
    bool fits = a.shape.size() == t.sizes.size();
    for (size_t k = batch_too ? 0 : 1; fits && k < a.shape.size(); ++k) fits = t.sizes[k] < 0 || a.shape[k] == t.sizes[k];
    if (!fits) {
      std::vector<std::string> dims;
      for (int64_t d : t.sizes) dims.push_back(d < 0 ? "?" : std::to_string(d));
      throw UsageError("input " + py_repr(names[i]) + " of shape " + shape_text(a.shape) + " does not fit the model's " +
                       py_repr(impl_->input_names[i]) + " of shape " + join(dims, "x") + " (? is any size)");
    }
    if (!t.known || !a.is_native(t.dtype)) {
      throw UsageError("input " + py_repr(names[i]) + " is " + a.dtype_str() + "; the model takes " + t.dtype_text());
    }
  }
}

void Model::bind(std::vector<Array> arrays) {
  Impl& m = *impl_;
  m.bound_values.clear();
  m.bound = std::move(arrays);
  for (size_t i = 0; i < m.bound.size(); ++i) {
    m.bound_values.push_back(std::make_unique<InputValue>(m.bound[i], m.input_names[i]));
  }
}

void Model::call() {
  Impl& m = *impl_;
  std::vector<const OrtValue*> values;
  for (const auto& v : m.bound_values) values.push_back(v->value);
  std::vector<OrtValue*> results;
  m.run(values, results);
  m.release(results);
}

std::vector<Array> Model::predict_all(const std::vector<const Array*>& arrays, bool first_only) {
  Impl& m = *impl_;
  std::vector<std::string> names;
  for (size_t i = 0; i < arrays.size(); ++i) names.push_back(format("input%zu", i));
  check_fits(names, arrays, false);
  int64_t rows = !arrays.empty() && !arrays[0]->shape.empty() ? arrays[0]->shape[0] : 0;
  int64_t bound = batch_bound();
  auto run_rows = [&](int64_t start, int64_t stop) {
    std::vector<Array> parts;
    parts.reserve(arrays.size());  // the values point into these: no reallocation
    std::vector<std::unique_ptr<InputValue>> owned;
    std::vector<const OrtValue*> values;
    for (size_t i = 0; i < arrays.size(); ++i) {
      const Array& a = *arrays[i];
      Array part;
      part.dtype = a.dtype;
      part.shape = a.shape;
      if (!a.shape.empty() && !(start == 0 && stop >= a.shape[0])) {  // rows [start, stop) of a
        int64_t lo = std::min(start, a.shape[0]), hi = std::min(stop, a.shape[0]);
        uint64_t row_bytes = a.shape[0] > 0 ? a.data.size() / static_cast<uint64_t>(a.shape[0]) : 0;
        part.shape[0] = hi - lo;
        part.data = a.data.substr(static_cast<size_t>(lo) * row_bytes, static_cast<size_t>(hi - lo) * row_bytes);
      } else {
        part.data = a.data;
      }
      parts.push_back(std::move(part));
      owned.push_back(std::make_unique<InputValue>(parts.back(), m.input_names[i]));
      values.push_back(owned.back()->value);
    }
    std::vector<OrtValue*> results;
    m.run(values, results);
    try {
      std::vector<Array> outputs;
      for (size_t k = 0; k < (first_only ? 1 : results.size()); ++k) outputs.push_back(m.output(results[k], k));
      m.release(results);
      return outputs;
    } catch (...) {
      m.release(results);
      throw;
    }
  };
  if (rows <= bound) return run_rows(0, rows);
  std::vector<Array> joined;
  for (int64_t start = 0; start < rows; start += bound) {
    std::vector<Array> part = run_rows(start, std::min(start + bound, rows));
    if (start == 0) {
      joined = std::move(part);
      continue;
    }
    for (size_t k = 0; k < joined.size(); ++k) {
      if (!append_rows(joined[k], part[k])) {
        throw RunError("the model's outputs of two batches differ in shape; cannot join them");
      }
    }
  }
  return joined;
}

Array Model::predict(const std::vector<const Array*>& arrays) {
  return std::move(predict_all(arrays, true)[0]);
}

}  // namespace edgekit
