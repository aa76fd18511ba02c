// The ExecuTorch glue (see program.h), on the runtime's own C++ API.
#include "program.h"

#include <cstdlib>
#include <cstring>
#include <set>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"  // in ExecuTorch's headers
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/executor/memory_manager.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/method_meta.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/runtime.h>
#pragma GCC diagnostic pop

#include "errors.h"
#include "files.h"
#include "host_facts.h"
#include "runtime_log.h"
#include "text.h"
#include "watchdog.h"

namespace edgekit {

namespace et = executorch::runtime;
using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kMaxPlannedBytes = 64ull << 30;
constexpr uint64_t kAllocatorBaseBytes = 256ull << 20;  // + 4 x the program's size, for the method's own tables

const char* tag_name(et::Tag tag) {
  static const char* names[] = {"None", "Tensor", "String", "Double", "Int", "Bool", "ListBool", "ListDouble",
                                "ListInt", "ListTensor", "ListScalar", "ListOptionalTensor"};
  auto i = static_cast<size_t>(tag);
  return i < sizeof names / sizeof names[0] ? names[i] : "Unknown";
}

bool dtype_of(int code, DType* dtype) {
  switch (code) {
    case 0: *dtype = DType::UInt8; return true;
    case 1: *dtype = DType::Int8; return true;
    case 2: *dtype = DType::Int16; return true;
    case 3: *dtype = DType::Int32; return true;
    case 4: *dtype = DType::Int64; return true;
    case 5: *dtype = DType::Float16; return true;
    case 6: *dtype = DType::Float32; return true;
    case 7: *dtype = DType::Float64; return true;
    case 11: *dtype = DType::Bool; return true;
    default: return false;
  }
}

int code_of(DType dtype) {
  switch (dtype) {
    case DType::UInt8: return 0;
    case DType::Int8: return 1;
    case DType::Int16: return 2;
    case DType::Int32: return 3;
    case DType::Int64: return 4;
    case DType::Float16: return 5;
    case DType::Float32: return 6;
    case DType::Float64: return 7;
    case DType::Bool: return 11;
    default: return -1;
  }
}

std::string error_name(et::Error error) {
  std::string name = et::to_string(error);
  return starts_with(name, "Error::") ? name.substr(7) : name;
}

// The method's and the temporary allocator: malloc, capped (a damaged program cannot make the
// runtime allocate without bound).
class BoundedAllocator : public et::MemoryAllocator {
 public:
  explicit BoundedAllocator(uint64_t cap) : et::MemoryAllocator(0, nullptr), cap_(cap) {}
  ~BoundedAllocator() override { reset(); }

  void* allocate(size_t size, size_t alignment = kDefaultAlignment) override {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) return nullptr;
    if (alignment < sizeof(void*)) alignment = sizeof(void*);
    if (size > cap_ || used_ > cap_ - size) {
      ET_LOG(Error, "the program asks for %zu bytes more, past edgekit-run's bound of %llu MiB", size,
             static_cast<unsigned long long>(cap_ >> 20));
      return nullptr;
    }
    void* p = nullptr;
    if (posix_memalign(&p, alignment, size ? size : 1) != 0) return nullptr;
    blocks_.push_back(p);
    used_ += size;
    return p;
  }

  void reset() override {
    for (void* p : blocks_) std::free(p);
    blocks_.clear();
    used_ = 0;
  }

 private:
  uint64_t cap_;
  uint64_t used_ = 0;
  std::vector<void*> blocks_;
};

// An input tensor over an Array's bytes (contiguous, dim order 0..n-1).
struct InputTensor {
  std::vector<executorch::aten::SizesType> sizes;
  std::vector<executorch::aten::DimOrderType> dim_order;
  std::vector<executorch::aten::StridesType> strides;
  std::unique_ptr<TensorImpl> impl;

  InputTensor(const Array& array, int code) {
    size_t n = array.shape.size();
    for (size_t i = 0; i < n; ++i) {
      sizes.push_back(static_cast<executorch::aten::SizesType>(array.shape[i]));
      dim_order.push_back(static_cast<executorch::aten::DimOrderType>(i));
    }
    strides.assign(n, 1);
    for (size_t i = n; i-- > 1;) strides[i - 1] = strides[i] * sizes[i];
    impl = std::make_unique<TensorImpl>(static_cast<ScalarType>(code), static_cast<ssize_t>(n), sizes.data(),
                                        const_cast<char*>(array.data.data()), dim_order.data(), strides.data(),
                                        executorch::aten::TensorShapeDynamism::STATIC);
  }
  et::EValue value() const { return et::EValue(Tensor(impl.get())); }
};

uint16_t bits16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace

std::string TensorMeta::dtype_text() const {
  return known ? dtype_name(dtype) : format("ExecuTorch scalar type %d", code);
}

struct Model::Impl {
  std::string name;  // the file's name, for messages
  std::unique_ptr<executorch::extension::FileDataLoader> loader;
  std::unique_ptr<et::Program> program;
  std::vector<std::string> methods;
  std::vector<std::string> backends;
  std::vector<TensorMeta> inputs, outputs;
  std::vector<int64_t> planned;
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> planned_memory;
  std::vector<et::Span<uint8_t>> planned_spans;
  std::unique_ptr<et::HierarchicalAllocator> planned_allocator;
  std::unique_ptr<BoundedAllocator> method_allocator, temp_allocator;
  std::unique_ptr<et::MemoryManager> memory;
  std::unique_ptr<et::Method> method;
  std::vector<Array> bound;
  std::vector<std::unique_ptr<InputTensor>> bound_tensors;

  [[noreturn]] void fail(const std::string& why) const {
    throw RunError("cannot load " + name + " as an ExecuTorch program: " + why + runtime_detail());
  }

  void execute(const std::vector<const InputTensor*>& tensors) {
    StepTimer step("running " + name);
    for (size_t i = 0; i < tensors.size(); ++i) {
      et::Error e = method->set_input(tensors[i]->value(), i);
      if (e != et::Error::Ok) {
        throw RunError(format("ExecuTorch refused input %zu: %s", i, error_name(e).c_str()) + runtime_detail());
      }
    }
    et::Error e = method->execute();
    if (e != et::Error::Ok) throw RunError("ExecuTorch could not run the program: " + error_name(e) + runtime_detail());
  }

  size_t output_count() const {
    if (method->outputs_size() == 0) throw RunError("the program's forward returns nothing");
    return method->outputs_size();
  }

  // Output `index` of the last call.
  Array output(size_t index) const {
    std::string what = index == 0 ? "first output" : format("output %zu", index);
    const et::EValue& out = method->get_output(index);
    if (!out.isTensor()) throw RunError("the program's " + what + " is not a tensor");
    Tensor t = out.toTensor();
    int code = static_cast<int>(t.scalar_type());
    Array raw;
    for (auto d : t.sizes()) raw.shape.push_back(static_cast<int64_t>(d));
    uint64_t count;
    if (!element_count(raw.shape, &count)) throw RunError("the program's " + what + " has an invalid shape");
    bool bfloat16 = code == 15;
    if (!bfloat16 && !dtype_of(code, &raw.dtype)) {
      throw RunError("the program's " + what + format(" is of ExecuTorch scalar type %d, not a number type", code));
    }
    uint64_t item = bfloat16 ? 2 : dtype_size(raw.dtype), bytes = 0;
    const char* data = static_cast<const char*>(t.const_data_ptr());
    if (__builtin_mul_overflow(count, item, &bytes) || (count > 0 && (data == nullptr || t.nbytes() < bytes))) {
      throw RunError("the program's " + what + " has no data for its shape");
    }
    if (bfloat16) {  // the high half of a float32
      Array out32;
      out32.shape = raw.shape;
      out32.data.assign(count * 4, '\0');
      for (uint64_t i = 0; i < count; ++i) {
        uint32_t bits = static_cast<uint32_t>(bits16(data + 2 * i)) << 16;
        std::memcpy(&out32.data[4 * i], &bits, 4);
      }
      return out32;
    }
    raw.data.assign(data, data + bytes);
    return raw.dtype == DType::Float32 ? raw : cast_array(raw, DType::Float32);
  }
};

Model::Model(const std::string& path, bool load_method) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.name = basename_of(path);
  {
    FILE* fh = std::fopen(path.c_str(), "rb");
    char magic[8] = {0};
    size_t got = fh ? std::fread(magic, 1, 8, fh) : 0;
    if (fh) std::fclose(fh);
    bool ok = got == 8 && magic[4] == 'E' && magic[5] == 'T' && magic[6] >= '0' && magic[6] <= '9' &&
              magic[7] >= '0' && magic[7] <= '9';
    if (!ok) m.fail("no ExecuTorch file identifier (truncated, or another format)");
  }
  clear_runtime_errors();
  StepTimer step("loading " + m.name);
  auto loader = executorch::extension::FileDataLoader::from(path.c_str());
  if (!loader.ok()) m.fail("cannot open it (" + error_name(loader.error()) + ")");
  m.loader = std::make_unique<executorch::extension::FileDataLoader>(std::move(loader.get()));
  auto program = et::Program::load(m.loader.get(), et::Program::Verification::InternalConsistency);
  if (!program.ok()) m.fail(error_name(program.error()));
  m.program = std::make_unique<et::Program>(std::move(program.get()));

  for (size_t i = 0; i < m.program->num_methods(); ++i) {
    auto name = m.program->get_method_name(i);
    if (name.ok() && name.get() != nullptr) m.methods.push_back(name.get());
  }
  auto meta_result = m.program->method_meta("forward");
  if (!meta_result.ok()) m.fail("it has no forward method (methods: " + join(m.methods, ", ") + ")");
  et::MethodMeta meta = meta_result.get();

  auto describe = [&](size_t count, bool input) {
    std::vector<TensorMeta> out;
    for (size_t i = 0; i < count; ++i) {
      TensorMeta t;
      auto tag = input ? meta.input_tag(i) : meta.output_tag(i);
      if (!tag.ok()) m.fail(format("cannot read forward's %s %zu", input ? "input" : "output", i));
      t.tag = tag_name(tag.get());
      if (t.is_tensor()) {
        auto info = input ? meta.input_tensor_meta(i) : meta.output_tensor_meta(i);
        if (!info.ok()) m.fail(format("cannot read forward's %s %zu", input ? "input" : "output", i));
        t.code = static_cast<int>(info.get().scalar_type());
        t.known = dtype_of(t.code, &t.dtype);
        for (int32_t d : info.get().sizes()) t.sizes.push_back(d);
      } else if (input) {
        m.fail(format("forward's input %zu is a %s, not a tensor; edgekit-run feeds tensors only", i, t.tag.c_str()));
      }
      out.push_back(t);
    }
    return out;
  };
  m.inputs = describe(meta.num_inputs(), true);
  m.outputs = describe(meta.num_outputs(), false);

  std::set<std::string> seen;
  for (size_t i = 0; i < meta.num_backends(); ++i) {
    auto name = meta.get_backend_name(i);
    if (name.ok() && name.get() != nullptr && seen.insert(name.get()).second) m.backends.push_back(name.get());
  }
  uint64_t total = 0;
  for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i) {
    auto size = meta.memory_planned_buffer_size(i);
    if (!size.ok() || size.get() < 0 || static_cast<uint64_t>(size.get()) > kMaxPlannedBytes - total) {
      m.fail("its memory plan is damaged");
    }
    m.planned.push_back(size.get());
    total += static_cast<uint64_t>(size.get());
  }
  if (!load_method) return;

  for (const auto& backend : m.backends) {
    if (et::get_backend_class(backend.c_str()) == nullptr) {
      std::vector<std::string> have = registered_backends();
      throw RunError("cannot load " + m.name + ": forward delegates to " + backend +
                     ", which this edgekit-run does not have (registered backends: " +
                     (have.empty() ? std::string("none") : join(have, ", ")) + ")");
    }
  }
  auto available = available_mb();
  if (available && static_cast<double>(total) / kMiB > *available) {
    throw RunError(format("cannot load %s: its memory plan needs %.0f MiB, more than this host has available (%.0f MiB)",
                          m.name.c_str(), static_cast<double>(total) / kMiB, *available));
  }
  for (int64_t size : m.planned) {
    void* p = std::calloc(static_cast<size_t>(size ? size : 1), 1);  // zero pages: resident only once used
    if (p == nullptr) throw RunError(format("cannot load %s: cannot allocate its %lld-byte memory plan", m.name.c_str(),
                                            static_cast<long long>(size)));
    m.planned_memory.emplace_back(static_cast<uint8_t*>(p), &std::free);
    m.planned_spans.emplace_back(static_cast<uint8_t*>(p), static_cast<size_t>(size));
  }
  m.planned_allocator = std::make_unique<et::HierarchicalAllocator>(
      et::Span<et::Span<uint8_t>>(m.planned_spans.data(), m.planned_spans.size()));
  uint64_t cap = kAllocatorBaseBytes + 4 * static_cast<uint64_t>(file_size(path) > 0 ? file_size(path) : 0);
  m.method_allocator = std::make_unique<BoundedAllocator>(cap);
  m.temp_allocator = std::make_unique<BoundedAllocator>(cap);
  m.memory = std::make_unique<et::MemoryManager>(m.method_allocator.get(), m.planned_allocator.get(),
                                                 m.temp_allocator.get());
  auto method = m.program->load_method("forward", m.memory.get());
  if (!method.ok()) {
    if (method.error() == et::Error::OperatorMissing) {
      const auto& loaded = init_runtime(0).kernels;
      std::string hint = "; the kernel libraries load from " + join_path(executable_dir(), "lib") + " (" +
                         kKernelLibraries[0] + " for aten operators, " + kKernelLibraries[1] +
                         " for quantized_decomposed ones; loaded: " + (loaded.empty() ? "none" : join(loaded, ", ")) + ")";
      throw RunError("cannot load " + m.name + ": forward needs an operator no loaded kernel library registers" +
                     runtime_detail() + hint);
    }
    m.fail(error_name(method.error()));
  }
  m.method = std::make_unique<et::Method>(std::move(method.get()));
}

Model::~Model() {
  if (impl_) {
    impl_->bound_tensors.clear();
    impl_->method.reset();  // before the program and the memory it uses
  }
}

const std::vector<TensorMeta>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorMeta>& Model::outputs() const { return impl_->outputs; }
std::vector<std::string> Model::output_names() const { return {}; }
const std::vector<std::string>& Model::method_names() const { return impl_->methods; }
const std::vector<std::string>& Model::backends_used() const { return impl_->backends; }
const std::vector<int64_t>& Model::planned_buffers() const { return impl_->planned; }

int64_t Model::batch_bound() const {
  int64_t bound = -1;
  for (const auto& t : impl_->inputs) {
    if (!t.sizes.empty() && (bound < 0 || t.sizes[0] < bound)) bound = t.sizes[0];
  }
  return bound < 1 ? 1 : bound;
}

void Model::check_fits(const std::vector<std::string>& names, const std::vector<const Array*>& arrays,
                       bool batch_too) const {
  const auto& planned = impl_->inputs;
  if (arrays.size() != planned.size()) {
    throw UsageError(format("the program takes %zu inputs; %zu given", planned.size(), arrays.size()));
  }
  for (size_t i = 0; i < arrays.size(); ++i) {
    const Array& a = *arrays[i];
    const TensorMeta& t = planned[i];
    bool fits = a.shape.size() == t.sizes.size();
    for (size_t k = batch_too ? 0 : 1; fits && k < a.shape.size(); ++k) fits = a.shape[k] <= t.sizes[k];
    if (!fits) {
      throw UsageError("input " + py_repr(names[i]) + " of shape " + shape_text(a.shape) +
                       " does not fit the program, planned for at most " + shape_text(t.sizes) +
                       " (export it with larger bounds, or lower --batch/--shape)");
    }
    if (!t.known || !a.is_native(t.dtype)) {
      throw UsageError("input " + py_repr(names[i]) + " is " + a.dtype_str() + "; the program takes " + t.dtype_text());
    }
  }
}

void Model::bind(std::vector<Array> arrays) {
  Impl& m = *impl_;
  m.bound = std::move(arrays);
  m.bound_tensors.clear();
  for (size_t i = 0; i < m.bound.size(); ++i) {
    m.bound_tensors.push_back(std::make_unique<InputTensor>(m.bound[i], m.inputs[i].code));
  }
}

void Model::call() {
  std::vector<const InputTensor*> tensors;
  for (const auto& t : impl_->bound_tensors) tensors.push_back(t.get());
  impl_->execute(tensors);
}

std::vector<Array> Model::predict_all(const std::vector<const Array*>& arrays, bool first_only) {
  Impl& m = *impl_;
  std::vector<std::string> names;
  for (size_t i = 0; i < arrays.size(); ++i) names.push_back(format("input%zu", i));
  check_fits(names, arrays, false);
  int64_t rows = !arrays.empty() && !arrays[0]->shape.empty() ? arrays[0]->shape[0] : 0;
  int64_t bound = batch_bound();
  auto run_chunk = [&](int64_t start, int64_t stop, bool whole) {
    std::vector<Array> parts;
    parts.reserve(arrays.size());  // the tensors point into these: no reallocation
    std::vector<std::unique_ptr<InputTensor>> tensors;
    std::vector<const InputTensor*> pointers;
    for (size_t i = 0; i < arrays.size(); ++i) {
      const Array& a = *arrays[i];
      if (whole || a.shape.empty()) {
        tensors.push_back(std::make_unique<InputTensor>(a, code_of(a.dtype)));
      } else {  // rows [start, stop) of a (fewer where a has fewer rows)
        Array part;
        part.dtype = a.dtype;
        part.shape = a.shape;
        int64_t lo = std::min(start, a.shape[0]), hi = std::min(stop, a.shape[0]);
        part.shape[0] = hi - lo;
        uint64_t row_bytes = a.shape[0] > 0 ? a.data.size() / static_cast<uint64_t>(a.shape[0]) : 0;
        part.data = a.data.substr(static_cast<size_t>(lo) * row_bytes, static_cast<size_t>(hi - lo) * row_bytes);
        parts.push_back(std::move(part));
        tensors.push_back(std::make_unique<InputTensor>(parts.back(), code_of(a.dtype)));
      }
      pointers.push_back(tensors.back().get());
    }
    m.execute(pointers);
    std::vector<Array> outputs;
    size_t count = first_only ? std::min<size_t>(1, m.output_count()) : m.output_count();
    for (size_t k = 0; k < count; ++k) outputs.push_back(m.output(k));
    return outputs;
  };
  if (rows <= bound) return run_chunk(0, rows, true);
  std::vector<Array> joined;
  for (int64_t start = 0; start < rows; start += bound) {
    std::vector<Array> part = run_chunk(start, std::min(start + bound, rows), false);
    if (start == 0) {
      joined = std::move(part);
      continue;
    }
    for (size_t k = 0; k < joined.size(); ++k) {
      if (!append_rows(joined[k], part[k])) {
        throw RunError("the program's outputs of two batches differ in shape; cannot join them");
      }
    }
  }
  return joined;
}

Array Model::predict(const std::vector<const Array*>& arrays) {
  return std::move(predict_all(arrays, true)[0]);
}

}  // namespace edgekit
