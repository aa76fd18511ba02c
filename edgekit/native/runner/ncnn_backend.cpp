// The ncnn backend (program.h, backend.h): ncnn's .param/.bin models run through ncnn's C API
// (c_api.h), on lib/libncnn.so built from the installed ncnn's source (edgekit/native/ncnn_source.py).
// ncnn has no batch axis: a batch runs row by row, the outputs stacked, as the Python runtime
// (edgekit/board/runtimes/ncnn_runtime.py) does, with its settings (fp16 and bf16 off, no Vulkan).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "backend.h"
#include "c_api.h"
#include "errors.h"
#include "files.h"
#include "manifest.h"
#include "program.h"
#include "runtime_log.h"
#include "text.h"
#include "watchdog.h"

#ifndef EDGEKIT_NCNN_VERSION
#define EDGEKIT_NCNN_VERSION "unknown"
#endif

namespace edgekit {

namespace {

constexpr int64_t kUnbounded = std::numeric_limits<int32_t>::max();  // ncnn runs any number of rows
constexpr const char* kMagic = "7767517";                             // the first line of every .param file
constexpr uint64_t kMaxParamBytes = 64ull << 20;
constexpr size_t kMaxLayers = 100000;
int g_threads = 1;

// The weights beside a graph: model.ncnn.param -> model.ncnn.bin.
std::string weights_of(const std::string& param) {
  size_t dot = param.rfind('.');
  size_t slash = param.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return param + ".bin";
  return param.substr(0, dot) + ".bin";
}

struct ParamFacts {
  std::vector<std::pair<std::string, std::vector<int64_t>>> inputs;  // Input layers: blob, sample shape (c, d, h, w order)
};

// The .param text checked line by line before ncnn's parser sees it (it prints to stderr and may read
// past a bad line), as check_param in ncnn_runtime.py; the Input layers' declared shapes.
ParamFacts read_param(const std::string& path, const std::string& name) {
  auto bad = [&](const std::string& why) -> void { throw RunError("cannot load " + name + " as an ncnn model: " + why); };
  if (file_size(path) > static_cast<int64_t>(kMaxParamBytes)) bad("it is larger than 64 MiB");
  std::string text = read_file(path, kMaxParamBytes, name);
  std::vector<std::string> lines;
  for (const auto& line : split(text, '\n')) {
    std::string t = trim(line);
    if (!t.empty() || lines.size() < 2) lines.push_back(t);
  }
  if (lines.empty() || lines[0] != kMagic) bad(std::string("it is not an ncnn .param file (no ") + kMagic + " magic line)");
  std::vector<std::string> counts;
  for (const auto& w : split(lines.size() > 1 ? lines[1] : "", ' ')) {
    if (!w.empty()) counts.push_back(w);
  }
  auto is_count = [](const std::string& w) {
    return !w.empty() && w.size() <= 9 && w.find_first_not_of("0123456789") == std::string::npos;
  };
  if (counts.size() != 2 || !is_count(counts[0]) || !is_count(counts[1]) || std::stoul(counts[0]) == 0 ||
      std::stoul(counts[0]) > kMaxLayers) {
    bad("line 2 is not a layer and blob count");
  }
  size_t declared = std::stoul(counts[0]);
  size_t held = lines.size() - 2;
  if (held != declared) bad(format("it declares %zu layers but holds %zu", declared, held));
  ParamFacts facts;
  for (size_t i = 2; i < lines.size(); ++i) {
    std::vector<std::string> words;
    for (const auto& w : split(lines[i], ' ')) {
      if (!w.empty()) words.push_back(w);
    }
    if (words.size() < 4 || !is_count(words[2]) || !is_count(words[3]) ||
        words.size() < 4 + std::stoul(words[2]) + std::stoul(words[3])) {
      bad(format("line %zu is not an ncnn layer (type name inputs outputs ...)", i + 1));
    }
    if (words[0] != "Input" || std::stoul(words[3]) != 1) continue;
    int64_t w = 0, h = 0, d = 0, c = 0;
    for (size_t k = 4 + std::stoul(words[2]) + 1; k < words.size(); ++k) {
      size_t eq = words[k].find('=');
      if (eq == std::string::npos) continue;
      std::string key = words[k].substr(0, eq), value = words[k].substr(eq + 1);
      if (!is_count(value)) continue;
      int64_t v = std::stoll(value);
      if (key == "0") w = v;
      if (key == "1") h = v;
      if (key == "11") d = v;
      if (key == "2") c = v;
    }
    std::vector<int64_t> shape;
    for (int64_t v : {c, d, h, w}) {
      if (v > 0) shape.push_back(v);
    }
    facts.inputs.emplace_back(words[4 + std::stoul(words[2])], shape);
  }
  return facts;
}

// An ncnn Mat, destroyed with its owner.
struct MatHandle {
  ncnn_mat_t mat = nullptr;
  MatHandle() = default;
  explicit MatHandle(ncnn_mat_t m) : mat(m) {}
  ~MatHandle() {
    if (mat) ncnn_mat_destroy(mat);
  }
  MatHandle(const MatHandle&) = delete;
  MatHandle& operator=(const MatHandle&) = delete;
};

struct ExtractorHandle {
  ncnn_extractor_t ex;
  explicit ExtractorHandle(ncnn_net_t net) : ex(ncnn_extractor_create(net)) {
    if (ex == nullptr) throw RunError("ncnn could not make an extractor");
  }
  ~ExtractorHandle() { ncnn_extractor_destroy(ex); }
  ExtractorHandle(const ExtractorHandle&) = delete;
  ExtractorHandle& operator=(const ExtractorHandle&) = delete;
};

// One sample (row `row` of a float32 array) as an ncnn Mat of its shape (w, h, d, c from the last axis).
ncnn_mat_t sample_mat(const Array& a, int64_t row) {
  std::vector<int64_t> s(a.shape.begin() + 1, a.shape.end());
  for (int64_t v : s) {
    if (v <= 0 || v > INT32_MAX) throw UsageError("an ncnn input has an empty or too large axis");
  }
  auto at = [&](size_t from_end) { return static_cast<int>(s[s.size() - 1 - from_end]); };
  ncnn_mat_t m = nullptr;
  int channels = 1;
  size_t per_channel = 0;
  switch (s.size()) {
    case 1: m = ncnn_mat_create_1d(at(0), nullptr); per_channel = static_cast<size_t>(at(0)); break;
    case 2: m = ncnn_mat_create_2d(at(0), at(1), nullptr); per_channel = static_cast<size_t>(at(0)) * at(1); break;
    case 3:
      m = ncnn_mat_create_3d(at(0), at(1), at(2), nullptr);
      channels = at(2);
      per_channel = static_cast<size_t>(at(0)) * at(1);
      break;
    case 4:
      m = ncnn_mat_create_4d(at(0), at(1), at(2), at(3), nullptr);
      channels = at(3);
      per_channel = static_cast<size_t>(at(0)) * at(1) * at(2);
      break;
    default: throw UsageError("ncnn inputs are batches of 1 to 4 dimensional float arrays, one row per sample");
  }
  if (m == nullptr || ncnn_mat_get_data(m) == nullptr) {
    if (m) ncnn_mat_destroy(m);
    throw RunError("ncnn could not allocate an input");
  }
  size_t row_floats = per_channel * static_cast<size_t>(channels);
  const float* src = reinterpret_cast<const float*>(a.data.data()) + static_cast<size_t>(row) * row_floats;
  for (int c = 0; c < channels; ++c) {
    void* dst = s.size() >= 3 ? ncnn_mat_get_channel_data(m, c) : ncnn_mat_get_data(m);
    std::memcpy(dst, src + static_cast<size_t>(c) * per_channel, per_channel * sizeof(float));
  }
  return m;
}

// An extracted blob as a float32 array of its sample shape (c, d, h, w as ncnn's Python wheel gives it).
Array mat_array(ncnn_mat_t m, const std::string& what) {
  int dims = ncnn_mat_get_dims(m);
  if (ncnn_mat_get_elemsize(m) != 4 || ncnn_mat_get_elempack(m) != 1 || dims < 1 || dims > 4) {
    throw RunError(format("ncnn gave the model's %s as %d-d elements of %zu bytes packed by %d; edgekit-run reads "
                          "unpacked float32", what.c_str(), dims, ncnn_mat_get_elemsize(m), ncnn_mat_get_elempack(m)));
  }
  int64_t w = ncnn_mat_get_w(m), h = ncnn_mat_get_h(m), d = ncnn_mat_get_d(m), c = ncnn_mat_get_c(m);
  Array out;
  out.dtype = DType::Float32;
  if (dims == 1) out.shape = {w};
  if (dims == 2) out.shape = {h, w};
  if (dims == 3) out.shape = {c, h, w};
  if (dims == 4) out.shape = {c, d, h, w};
  size_t per_channel = static_cast<size_t>(w) * (dims >= 2 ? h : 1) * (dims == 4 ? d : 1);
  size_t channels = dims >= 3 ? static_cast<size_t>(c) : 1;
  out.data.resize(per_channel * channels * sizeof(float));
  for (size_t k = 0; k < channels; ++k) {
    const void* src = dims >= 3 ? ncnn_mat_get_channel_data(m, static_cast<int>(k)) : ncnn_mat_get_data(m);
    std::memcpy(&out.data[k * per_channel * sizeof(float)], src, per_channel * sizeof(float));
  }
  return out;
}

}  // namespace

const BackendFacts& backend() {
  static const BackendFacts facts{"ncnn-native", "ncnn", "ncnn", "ncnn", ".param"};
  return facts;
}

// The library is built from the sdist of this ncnn release (its own version string is its build date).
std::string runtime_version() { return EDGEKIT_NCNN_VERSION; }

bool looks_like_model(const std::string& path) {
  FILE* fh = std::fopen(path.c_str(), "rb");
  if (!fh) return false;
  char head[9] = {0};
  size_t got = std::fread(head, 1, 8, fh);
  std::fclose(fh);
  return got >= 7 && std::strncmp(head, kMagic, 7) == 0 && (got == 7 || head[7] == '\n' || head[7] == '\r');
}

const RuntimeSetup& init_runtime(int64_t threads) {
  static RuntimeSetup setup;
  static bool done = false;
  if (done) return setup;
  done = true;
  g_threads = threads > 0 ? static_cast<int>(threads) : 1;
  setup.threads = g_threads;
  return setup;
}

std::vector<std::string> registered_backends() { return {"cpu"}; }

size_t registered_operator_count() { return 0; }  // ncnn's C API lists no layer registry

std::string TensorMeta::dtype_text() const { return known ? dtype_name(dtype) : format("ncnn element code %d", code); }

struct Model::Impl {
  std::string name;
  ncnn_net_t net = nullptr;
  std::vector<std::string> input_names, output_names;
  std::vector<TensorMeta> inputs, outputs;
  std::vector<std::string> methods{"main"};
  std::vector<std::string> backends{"cpu"};
  std::vector<int64_t> planned;  // ncnn allocates per extractor: none to report
  std::vector<Array> bound;

  [[noreturn]] void fail(const std::string& why) const {
    throw RunError("cannot load " + name + " as an ncnn model: " + why + runtime_detail());
  }

  // Rows [start, stop) of arrays through ncnn, one extractor per row; the outputs stacked (none kept
  // without keep: a timed call).
  std::vector<Array> run_rows(const std::vector<const Array*>& arrays, int64_t start, int64_t stop, bool first_only,
                              bool keep) {
    std::vector<Array> joined;
    size_t wanted = first_only ? 1 : output_names.size();
    StepTimer step("running " + name);
    clear_runtime_errors();
    for (int64_t row = start; row < stop; ++row) {
      ExtractorHandle ex(net);
      std::vector<std::unique_ptr<MatHandle>> fed;
      for (size_t i = 0; i < arrays.size(); ++i) {
        fed.push_back(std::make_unique<MatHandle>(sample_mat(*arrays[i], row)));
        if (ncnn_extractor_input(ex.ex, input_names[i].c_str(), fed.back()->mat) != 0) {
          throw RunError("ncnn refused input " + py_repr(input_names[i]) + runtime_detail());
        }
      }
      for (size_t k = 0; k < wanted; ++k) {
        MatHandle out;
        if (ncnn_extractor_extract(ex.ex, output_names[k].c_str(), &out.mat) != 0 || out.mat == nullptr) {
          throw RunError("ncnn failed computing " + py_repr(output_names[k]) + runtime_detail());
        }
        if (!keep) continue;
        std::string what = k == 0 ? "first output" : format("output %zu", k);
        Array sample = mat_array(out.mat, what);
        sample.shape.insert(sample.shape.begin(), 1);
        if (row == start) {
          joined.push_back(std::move(sample));
        } else if (!append_rows(joined[k], sample)) {
          throw RunError("the model's " + what + " differs in shape between two rows; cannot stack them");
        }
      }
    }
    return joined;
  }
};

Model::Model(const std::string& path, bool /*load_method: loading the net is the only way to read it*/)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.name = basename_of(path);
  if (!looks_like_model(path)) m.fail(std::string("it does not start as an ncnn .param file does (no ") + kMagic + " line)");
  ParamFacts facts = read_param(path, m.name);
  std::string weights = weights_of(path);
  if (!is_file(weights)) m.fail(basename_of(weights) + " (its weights) is missing");
  init_runtime(0);
  clear_runtime_errors();
  StepTimer step("loading " + m.name);
  m.net = ncnn_net_create();
  if (m.net == nullptr) m.fail("ncnn could not make a net");
  ncnn_option_t opt = ncnn_option_create();
  ncnn_option_set_num_threads(opt, g_threads);
  ncnn_option_set_use_vulkan_compute(opt, 0);
  ncnn_option_set_use_fp16_packed(opt, 0);
  ncnn_option_set_use_fp16_storage(opt, 0);
  ncnn_option_set_use_fp16_arithmetic(opt, 0);
  ncnn_option_set_use_bf16_storage(opt, 0);
  ncnn_net_set_option(m.net, opt);
  ncnn_option_destroy(opt);
  if (ncnn_net_load_param(m.net, path.c_str()) != 0) m.fail("a layer type or parameter ncnn does not know");
  if (ncnn_net_load_model(m.net, weights.c_str()) != 0) {
    m.fail(basename_of(weights) + " does not hold its weights (truncated, or another model's)");
  }
  for (int i = 0; i < ncnn_net_get_input_count(m.net); ++i) m.input_names.push_back(ncnn_net_get_input_name(m.net, i));
  for (int i = 0; i < ncnn_net_get_output_count(m.net); ++i) m.output_names.push_back(ncnn_net_get_output_name(m.net, i));
  if (m.input_names.empty() || m.output_names.empty()) m.fail("it has no Input layer or no output blob");

  // Sample shapes: the manifest's inputs (in the net's input order), else the Input layers' own.
  ManifestEntry manifest = read_manifest_entry(path);
  const Json* listed = manifest.manifest.is_object() ? manifest.manifest.find("inputs") : nullptr;
  for (size_t i = 0; i < m.input_names.size(); ++i) {
    TensorMeta t;
    t.code = 0;
    t.dtype = DType::Float32;
    const Json* shape = listed && listed->is_array() && listed->items().size() == m.input_names.size()
                            ? listed->items()[i].find("shape") : nullptr;
    if (shape && shape->is_array()) {
      for (const Json& d : shape->items()) t.sizes.push_back(d.is_int() ? d.as_int() : -1);
      if (!t.sizes.empty()) t.sizes[0] = -1;
    } else {
      for (const auto& [blob, dims] : facts.inputs) {
        if (blob == m.input_names[i] && !dims.empty()) {
          t.sizes = {-1};
          t.sizes.insert(t.sizes.end(), dims.begin(), dims.end());
        }
      }
    }
    m.inputs.push_back(t);
  }
  for (size_t k = 0; k < m.output_names.size(); ++k) {
    TensorMeta t;
    t.code = 0;
    m.outputs.push_back(t);
  }
}

Model::~Model() {
  if (impl_ && impl_->net) ncnn_net_destroy(impl_->net);
}

const std::vector<TensorMeta>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorMeta>& Model::outputs() const { return impl_->outputs; }
std::vector<std::string> Model::output_names() const { return {}; }  // blob names (out0): the manifest's are used
const std::vector<std::string>& Model::method_names() const { return impl_->methods; }
const std::vector<std::string>& Model::backends_used() const { return impl_->backends; }
const std::vector<int64_t>& Model::planned_buffers() const { return impl_->planned; }
int64_t Model::batch_bound() const { return kUnbounded; }

// Each input: float32, 1 to 4 axes besides the batch, every axis but the batch the declared size
// where one is known.
void Model::check_fits(const std::vector<std::string>& names, const std::vector<const Array*>& arrays,
                       bool /*batch_too: ncnn runs any number of rows*/) const {
  const auto& declared = impl_->inputs;
  if (arrays.size() != declared.size()) {
    throw UsageError(format("the model takes %zu inputs; %zu given", declared.size(), arrays.size()));
  }
  for (size_t i = 0; i < arrays.size(); ++i) {
    const Array& a = *arrays[i];
    const TensorMeta& t = declared[i];
    bool fits = a.shape.size() >= 2 && a.shape.size() <= 5 && (t.sizes.empty() || a.shape.size() == t.sizes.size());
    for (size_t k = 1; fits && k < t.sizes.size(); ++k) fits = t.sizes[k] < 0 || a.shape[k] == t.sizes[k];
    if (fits && i > 0) fits = a.shape[0] == arrays[0]->shape[0];
    if (!fits) {
      std::vector<std::string> dims;
      for (int64_t d : t.sizes) dims.push_back(d < 0 ? "?" : std::to_string(d));
      throw UsageError("input " + py_repr(names[i]) + " of shape " + shape_text(a.shape) + " does not fit the model's " +
                       py_repr(impl_->input_names[i]) + " of shape " +
                       (dims.empty() ? std::string("? x (1 to 4 axes)") : join(dims, "x")) + " (? is any size)");
    }
    if (!a.is_native(DType::Float32)) {
      throw UsageError("input " + py_repr(names[i]) + " is " + a.dtype_str() + "; the model takes float32");
    }
  }
}

void Model::bind(std::vector<Array> arrays) { impl_->bound = std::move(arrays); }

void Model::call() {
  Impl& m = *impl_;
  std::vector<const Array*> arrays;
  for (const auto& a : m.bound) arrays.push_back(&a);
  int64_t rows = !arrays.empty() && !arrays[0]->shape.empty() ? arrays[0]->shape[0] : 0;
  m.run_rows(arrays, 0, rows, false, false);
}

std::vector<Array> Model::predict_all(const std::vector<const Array*>& arrays, bool first_only) {
  Impl& m = *impl_;
  std::vector<std::string> names;
  for (size_t i = 0; i < arrays.size(); ++i) names.push_back(format("input%zu", i));
  check_fits(names, arrays, false);
  int64_t rows = !arrays.empty() && !arrays[0]->shape.empty() ? arrays[0]->shape[0] : 0;
  if (rows == 0) throw UsageError("ncnn runs one row at a time; the inputs have none");
  return m.run_rows(arrays, 0, rows, first_only, true);
}

Array Model::predict(const std::vector<const Array*>& arrays) { return std::move(predict_all(arrays, true)[0]); }

}  // namespace edgekit
