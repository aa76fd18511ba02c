// Input specs and random inputs (see inputs.h).
#include "inputs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "errors.h"
#include "files.h"
#include "host_facts.h"
#include "manifest.h"
#include "program.h"
#include "text.h"

namespace edgekit {

namespace {

constexpr double kInputMemoryShare = 0.5;  // random inputs may take at most this share of the memory available
constexpr double kMaxInputBytesUnknown = 4.0 * (1ull << 30);  // ... and this much where that is unknown
constexpr double kMiB = 1024.0 * 1024.0;

// xoshiro256** seeded by splitmix64: the same stream on every host and compiler.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& word : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      word = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // Box-Muller (one value per call)
    double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
  }
  uint64_t below(uint64_t span) {  // uniform in [0, span), span > 0, without modulo bias
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x;
    do x = next(); while (x >= limit);
    return x % span;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

DType dtype_or_fail(const std::string& name) {
  DType dtype;
  if (!dtype_from_name(name, &dtype)) throw UsageError("unsupported input dtype " + py_repr(name));
  return dtype;
}

std::string with_commas(double value) {  // Python's format(value, ",.0f")
  std::string digits = format("%.0f", value);
  bool negative = !digits.empty() && digits[0] == '-';
  if (negative) digits.erase(0, 1);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (negative ? "-" : "") + out;
}

Array random_array(const std::vector<int64_t>& shape, DType dtype, Rng& rng,
                   const std::optional<std::pair<double, double>>& range) {
  Array doubles;  // generated as float64 or int64, then cast as numpy's astype
  doubles.shape = shape;
  uint64_t n;
  element_count(shape, &n);
  char kind = dtype_kind(dtype);
  if (kind == 'f') {
    doubles.dtype = DType::Float64;
    doubles.data.resize(n * 8);
    for (uint64_t i = 0; i < n; ++i) {
      double v = range ? range->first + (range->second - range->first) * rng.uniform() : rng.normal();
      std::memcpy(&doubles.data[i * 8], &v, 8);
    }
  } else if (kind == 'b') {
    doubles.dtype = DType::Bool;
    doubles.data.resize(n);
    for (uint64_t i = 0; i < n; ++i) doubles.data[i] = rng.uniform() < 0.5 ? 1 : 0;
    return doubles;
  } else {
    double lo = range ? std::ceil(range->first) : 0.0, hi = range ? std::ceil(range->second) : 2.0;
    if (!(lo >= -9.2e18 && lo <= 9.2e18 && hi >= -9.2e18 && hi <= 9.2e18)) {
      throw UsageError("the value_range of an integer input lies outside the int64 range");
    }
    int64_t low = static_cast<int64_t>(lo), high = std::max(static_cast<int64_t>(hi), low + 1);
    uint64_t span = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
    doubles.dtype = DType::Int64;
    doubles.data.resize(n * 8);
    for (uint64_t i = 0; i < n; ++i) {
      int64_t v = static_cast<int64_t>(static_cast<uint64_t>(low) + rng.below(span));
      std::memcpy(&doubles.data[i * 8], &v, 8);
    }
  }
  return doubles.dtype == dtype ? doubles : cast_array(doubles, dtype);
}

void check_shape(const InputSpec& spec, const std::vector<int64_t>& shape) {
  if (!spec.shape_known) return;
  if (spec.shape.size() != shape.size()) {
    throw UsageError(format("input %s has rank %zu; --shape gives %zu dims", py_repr(spec.name).c_str(),
                            spec.shape.size(), shape.size()));
  }
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    const auto& want = spec.shape[axis];
    if (!want) continue;
    if (spec.bounded && shape[axis] > *want) {
      throw UsageError(format("input %s axis %zu is at most %lld; --shape gives %lld", py_repr(spec.name).c_str(), axis,
                              static_cast<long long>(*want), static_cast<long long>(shape[axis])));
    }
    if (!spec.bounded && *want != shape[axis]) {
      throw UsageError(format("input %s has fixed axis %zu = %lld; --shape gives %lld", py_repr(spec.name).c_str(),
                              axis, static_cast<long long>(*want), static_cast<long long>(shape[axis])));
    }
  }
}

std::vector<int64_t> concrete(const InputSpec& spec, int64_t batch) {
  std::vector<int64_t> shape;
  for (const auto& d : spec.shape) shape.push_back(d ? *d : batch);
  return shape;
}

// Refuse inputs that could not be allocated (a huge --batch or --shape) before trying.
void check_input_memory(const std::vector<InputSpec>& specs,
                        const std::map<std::string, std::vector<int64_t>>& shapes, int64_t batch) {
  double total = 0;
  std::string largest_name;
  std::vector<int64_t> largest_shape;
  double largest = -1;
  for (const auto& spec : specs) {
    std::vector<int64_t> shape;
    auto given = shapes.find(spec.name);
    if (given != shapes.end()) shape = given->second;
    else if (spec.shape_known) shape = concrete(spec, batch);
    else continue;
    double count = 1;
    for (int64_t d : shape) count *= static_cast<double>(d);
    total += count * static_cast<double>(dtype_size(dtype_or_fail(spec.dtype)));
    if (count > largest) {
      largest = count;
      largest_name = spec.name;
      largest_shape = shape;
    }
  }
  auto available = available_mb();
  double limit = available ? *available * kInputMemoryShare * kMiB : kMaxInputBytesUnknown;
  if (total <= limit) return;
  std::string spare = available ? with_commas(*available) + " MiB available" : "its memory is unknown";
  throw UsageError("the inputs need " + with_commas(total / kMiB) + " MiB of memory (input " + py_repr(largest_name) +
                   " of shape " + shape_text(largest_shape) + "), more than this host can spare (" + spare +
                   "); lower --batch or --shape");
}

std::optional<std::pair<double, double>> value_range_of(const Json* raw) {
  if (raw == nullptr || !raw->is_array() || raw->items().size() < 2) return std::nullopt;
  const Json& a = raw->items()[0];
  const Json& b = raw->items()[1];
  auto number = [](const Json& v, double* out) {
    if (v.is_number() || v.is_bool()) {
      *out = v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_double();
      return true;
    }
    return false;
  };
  double low, high;
  if (!number(a, &low) || !number(b, &high)) return std::nullopt;
  if (!std::isfinite(low) || !std::isfinite(high) || !(high > low)) return std::nullopt;
  return std::make_pair(low, high);
}

[[noreturn]] void malformed_spec(const std::string& why) {
  throw UsageError(std::string("malformed input spec in ") + kManifestName + ": " + head_chars(why, 200));
}

InputSpec manifest_spec(const Json& raw) {
  if (!raw.is_object()) malformed_spec("an entry of inputs is not an object");
  InputSpec spec;
  spec.bounded = false;
  const Json* name = raw.find("name");
  if (name == nullptr) malformed_spec("'name'");
  if (!name->is_string() && !name->is_int()) malformed_spec("an input's name is not text");
  spec.name = py_str(*name);
  const Json* shape = raw.find("shape");
  if (shape == nullptr) malformed_spec("'shape'");
  if (!shape->is_array()) malformed_spec("an input's shape is not a list");
  if (shape->items().size() > 64) malformed_spec("an input's shape has more than 64 dimensions");
  for (const Json& d : shape->items()) {
    if (d.is_null()) {
      spec.shape.push_back(std::nullopt);
    } else if (d.is_int() && d.as_int() >= 0 && d.as_int() <= INT32_MAX) {
      spec.shape.push_back(d.as_int());
    } else {
      malformed_spec("a dimension of input " + py_repr(spec.name) + " is not null or an integer within 0..2**31-1");
    }
  }
  const Json* dtype = raw.find("dtype");
  spec.dtype = dtype == nullptr ? "float32" : py_str(*dtype);
  const Json* axes = raw.find("dynamic_axes");
  if (axes != nullptr && !axes->is_null() && !axes->is_object()) malformed_spec("dynamic_axes is not an object");
  spec.value_range = value_range_of(raw.find("value_range"));
  return spec;
}

}  // namespace

std::vector<InputSpec> model_specs(const Model& model) {
  std::vector<InputSpec> specs;
  for (size_t i = 0; i < model.inputs().size(); ++i) {
    const TensorMeta& t = model.inputs()[i];
    InputSpec spec;
    spec.name = format("input%zu", i);
    for (size_t k = 0; k < t.sizes.size(); ++k) {
      spec.shape.push_back(k == 0 ? std::nullopt : std::optional<int64_t>(t.sizes[k]));
    }
    spec.dtype = t.dtype_text();
    spec.bounded = true;
    specs.push_back(spec);
  }
  return specs;
}

ResolvedSpecs resolve_specs(const Model& model, const Json& manifest) {
  ResolvedSpecs out;
  std::vector<InputSpec> ours = model_specs(model);
  std::vector<InputSpec> listed;
  const Json* inputs = manifest.is_object() ? manifest.find("inputs") : nullptr;
  if (inputs != nullptr && inputs->is_array()) {
    for (const Json& raw : inputs->items()) listed.push_back(manifest_spec(raw));
  }
  if (listed.empty()) {
    out.specs = ours;
    out.source = "model";
    out.notes.push_back(std::string("no ") + kManifestName + " lists the program: axis 0 of each input is taken as its "
                        "batch axis, the other axes at the program's planned (largest) sizes");
    return out;
  }
  if (listed.size() != ours.size()) {
    throw UsageError(format("%s lists %zu inputs; the program takes %zu", kManifestName, listed.size(), ours.size()));
  }
  out.specs = listed;
  out.source = "manifest";
  return out;
}

std::pair<std::string, std::vector<int64_t>> parse_shape(const std::string& text) {
  size_t eq = text.find('=');
  std::string name = eq == std::string::npos ? "" : trim(text.substr(0, eq));
  std::string dims = eq == std::string::npos ? "" : trim(text.substr(eq + 1));
  if (eq == std::string::npos || name.empty() || dims.empty()) {
    throw UsageError("malformed shape " + py_repr(text) + "; expected NAME=DIMS such as input=1x1x8x8");
  }
  std::vector<int64_t> shape;
  for (char& c : dims) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& part : split(dims, 'x')) {
    std::string d = trim(part);
    size_t i = (!d.empty() && (d[0] == '+' || d[0] == '-')) ? 1 : 0;
    bool digits = i < d.size() && d.find_first_not_of("0123456789", i) == std::string::npos;
    if (!digits) throw UsageError("malformed shape " + py_repr(text) + "; dimensions must be integers joined by 'x'");
    if (d[0] == '-' || d.find_first_not_of('0', i) == std::string::npos) {
      throw UsageError("malformed shape " + py_repr(text) + "; every dimension must be positive");
    }
    std::string value = d.substr(i);
    value.erase(0, std::min(value.find_first_not_of('0'), value.size()));
    if (value.size() > 10 || std::stoll(value) > INT32_MAX) {
      throw UsageError("malformed shape " + py_repr(text) + "; a dimension is larger than 2**31-1");
    }
    shape.push_back(std::stoll(value));
    if (shape.size() > 64) throw UsageError("malformed shape " + py_repr(text) + "; more than 64 dimensions");
  }
  return {name, shape};
}

MadeInputs make_inputs(const std::vector<InputSpec>& specs,
                       const std::vector<std::pair<std::string, std::vector<int64_t>>>& shape_list,
                       const std::vector<NpzMember>* npz, int64_t batch, uint64_t seed) {
  MadeInputs out;
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  auto known = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  std::map<std::string, std::vector<int64_t>> shapes(shape_list.begin(), shape_list.end());
  std::string all = names.empty() ? "none" : join(names, ", ");
  if (npz != nullptr) {
    for (const auto& m : *npz) {
      if (!known(m.name)) {
        throw UsageError("--input file names input " + py_repr(m.name) + ", which the model does not have (inputs: " + all + ")");
      }
    }
  }
  for (const auto& s : shape_list) {
    if (!known(s.first)) {
      throw UsageError("--shape names input " + py_repr(s.first) + ", which the model does not have (inputs: " + all + ")");
    }
  }
  Rng rng(seed);
  if (npz == nullptr) check_input_memory(specs, shapes, batch);
  for (const auto& spec : specs) {
    DType dtype = dtype_or_fail(spec.dtype);
    out.names.push_back(spec.name);
    if (npz != nullptr) {
      const NpzMember* found = nullptr;
      for (const auto& m : *npz) {
        if (m.name == spec.name) found = &m;
      }
      if (found == nullptr) {
        throw UsageError("--input file has no array " + py_repr(spec.name) + " (the model's inputs: " + join(names, ", ") + ")");
      }
      if (!found->array.is_native(dtype)) {
        out.notes.push_back("input " + py_repr(spec.name) + " cast from " + found->array.dtype_str() + " to " +
                            dtype_name(dtype));
        out.arrays.push_back(cast_array(found->array, dtype));
      } else {
        out.arrays.push_back(found->array);
      }
      continue;
    }
    std::vector<int64_t> shape;
    auto given = shapes.find(spec.name);
    if (given != shapes.end()) {
      shape = given->second;
      check_shape(spec, shape);
    } else if (!spec.shape_known) {
      throw UsageError("no shape known for input " + py_repr(spec.name) + " (no " + kManifestName +
                       " beside the model); pass --shape " + spec.name + "=1x3x224x224");
    } else {
      shape = concrete(spec, batch);
    }
    out.arrays.push_back(random_array(shape, dtype, rng, spec.value_range));
  }
  out.batch = batch;
  if (!specs.empty() && specs[0].shape_known && !specs[0].shape.empty() && !specs[0].shape[0] &&
      !out.arrays[0].shape.empty()) {
    out.batch = out.arrays[0].shape[0];
  }
  return out;
}

}  // namespace edgekit
