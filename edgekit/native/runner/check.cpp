// edgekit-run check: a bundle's output check, as check_outputs.py (same JSON document, same
// verdict line, same exit codes).
#include <cmath>
#include <map>

#include "args.h"
#include "commands.h"
#include "errors.h"
#include "files.h"
#include "host_facts.h"
#include "inputs.h"
#include "manifest.h"
#include "program.h"
#include "sha256.h"
#include "text.h"
#include "watchdog.h"

namespace edgekit {

namespace {

struct CheckArgs {
  std::string model, reference, json;
  int64_t threads = 1;
  std::optional<double> max_abs, min_cosine, min_top1;
};

ArgParser check_parser() {
  ArgParser p("edgekit-run check", {});
  p.add({"--model", true, false, {}, "FILE", "model file (default: bundle.json's, beside this binary)"});
  p.add({"--format", true, false, {backend().format}, backend().format, std::string("the model's format (only ") + backend().format + " here)"});
  p.add({"--reference", true, false, {}, "FILE", "reference .npz (default: reference.npz beside the model)"});
  p.add({"--threads", true, false, {}, "N", "XNNPACK threads (default 1)"});
  p.add({"--max-abs", true, false, {}, "X", "fail when the largest absolute difference is above this"});
  p.add({"--min-cosine", true, false, {}, "X", "fail when the cosine similarity is below this"});
  p.add({"--min-top1", true, false, {}, "X", "fail when top-1 agreement (0..1) is below this"});
  p.add({"--json", true, false, {}, "OUT", "write the JSON here instead of stdout"});
  add_timeout_option(p, kDefaultStepLimitS);
  return p;
}

// Compensated (Neumaier) sum: the float64 reductions numpy does, to within an ulp or so.
class Sum {
 public:
  void add(double x) {
    double t = sum_ + x;
    comp_ += std::fabs(sum_) >= std::fabs(x) ? (sum_ - t) + x : (x - t) + sum_;
    sum_ = t;
  }
  double value() const { return sum_ + comp_; }

 private:
  double sum_ = 0, comp_ = 0;
};

// numpy's argmax of each row of the last axis (the first NaN wins, as numpy's does).
std::vector<uint64_t> argmax_rows(const std::vector<double>& values, uint64_t width) {
  std::vector<uint64_t> out;
  for (uint64_t row = 0; row + width <= values.size(); row += width) {
    uint64_t best = 0;
    for (uint64_t k = 0; k < width; ++k) {
      double v = values[row + k];
      if (std::isnan(v)) { best = k; break; }
      if (v > values[row + best]) best = k;
    }
    out.push_back(best);
  }
  return out;
}

Json compare(const Array& got, const Array& want) {
  if (got.shape != want.shape) {
    throw RunError("RuntimeError: output shape " + shape_list(got.shape) + " differs from the reference's " +
                   shape_list(want.shape));
  }
  std::vector<double> a = to_doubles(got), b = to_doubles(want);
  Sum aa, bb, ab;
  double max_abs = 0;
  bool nan = false;
  for (size_t i = 0; i < a.size(); ++i) {
    aa.add(a[i] * a[i]);
    bb.add(b[i] * b[i]);
    ab.add(a[i] * b[i]);
    double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) nan = true;
    else if (d > max_abs) max_abs = d;
  }
  double norms = std::sqrt(aa.value()) * std::sqrt(bb.value());
  bool a_any = false, b_any = false;
  for (double x : a) a_any = a_any || x != 0;
  for (double x : b) b_any = b_any || x != 0;
  double cosine = norms > 0 ? ab.value() / norms : (!a_any && !b_any ? 1.0 : 0.0);
  Json top1;
  if (got.shape.size() >= 2 && got.shape.back() > 1) {
    uint64_t width = static_cast<uint64_t>(got.shape.back());
    std::vector<uint64_t> ga = argmax_rows(a, width), wa = argmax_rows(b, width);
    uint64_t same = 0;
    for (size_t i = 0; i < ga.size(); ++i) same += ga[i] == wa[i];
    top1 = ga.empty() ? Json(std::nan("")) : Json(static_cast<double>(same) / static_cast<double>(ga.size()));
  }
  Sha256 digest;
  digest.update(got.data);
  Json shape = Json::array();
  for (int64_t d : got.shape) shape.push(static_cast<long long>(d));
  return Json::object()
      .set("max_abs", a.empty() ? 0.0 : (nan ? std::nan("") : max_abs))
      .set("cosine", cosine)
      .set("top1_agreement", top1)
      .set("outputs_sha256", digest.hexdigest())
      .set("shape", shape);
}

// (model path, the manifest's entry for it, the manifest's input names in order); as describe().
struct Described {
  std::string model;
  Json entry;
  std::vector<std::string> order;
};

Described describe(const std::string& folder, const std::string& model_arg, const std::string& format_arg) {
  Json manifest = is_file(join_path(folder, kManifestName)) ? read_json_object(join_path(folder, kManifestName))
                                                            : Json::object();
  std::vector<Json> entries;
  const Json* files = manifest.find("files");
  if (files != nullptr && files->is_array()) {
    for (const Json& e : files->items()) {
      if (e.is_object()) entries.push_back(e);
    }
  }
  Described out;
  std::string fmt = format_arg;
  std::string bundle_json = join_path(folder, "bundle.json");
  if (!model_arg.empty()) {
    out.model = resolve_path(model_arg);
  } else if (is_file(bundle_json)) {
    Json bundle = read_json_object(bundle_json);
    const Json* model = bundle.find("model");
    std::string rel = model == nullptr ? "None" : py_str(*model);
    bool plain = !rel.empty() && rel[0] != '/';
    for (const auto& part : split(rel, '/')) plain = plain && part != "..";
    if (!plain) throw UsageError(bundle_json + " names the model " + py_repr(head_chars(rel, 80)) +
                                 ", which is not a file inside the bundle");
    out.model = join_path(folder, rel);
    const Json* bundle_format = bundle.find("format");
    if (fmt.empty() && bundle_format != nullptr && py_truthy(*bundle_format)) fmt = py_str(*bundle_format);
  } else if (entries.size() == 1) {
    const Json* path = entries[0].find("path");
    out.model = join_path(folder, path == nullptr ? "None" : py_str(*path));
  } else {
    throw UsageError("no bundle.json in " + folder + " and its manifest does not list exactly one model; pass --model");
  }
  if (!is_file(out.model)) throw UsageError("model file not found: " + out.model);
  out.entry = find_entry(manifest, folder, out.model);
  if (fmt == backend().format) fmt.clear();  // the only runtime here: detect_format checks the rest
  else if (!fmt.empty()) throw UsageError(std::string("this edgekit-run runs ") + backend().format + " models; the bundle's model is " + fmt);
  detect_format(out.model, out.entry, fmt);
  const Json* inputs = manifest.find("inputs");
  if (inputs != nullptr && inputs->is_array()) {
    for (const Json& spec : inputs->items()) {
      if (!spec.is_object()) continue;
      const Json* name = spec.find("name");
      out.order.push_back(name == nullptr ? "None" : py_str(*name));
    }
  }
  return out;
}

std::string verdict(const Json& doc) {
  if (!doc.find("ok")->as_bool()) {
    std::vector<std::string> failures;
    for (const Json& f : doc.find("failures")->items()) failures.push_back(f.as_string());
    return "FAIL: outputs differ from the reference: " + join(failures, "; ");
  }
  const Json* top1 = doc.find("top1_agreement");
  std::string text = "PASS: " + doc.find("model")->find("path")->as_string() + " on " +
                     doc.find("machine")->as_string() + ": cosine " + py_format(doc.find("cosine")->as_double(), ".6f") +
                     ", max |diff| " + py_format(doc.find("max_abs")->as_double(), ".4g");
  if (!top1->is_null()) text += ", top-1 agreement " + py_format(top1->as_double(), ".2%");
  return text + " vs the float model";
}

Json check(const CheckArgs& args, const std::string& format_arg) {
  std::string folder = !args.model.empty() ? dirname_of(resolve_path(args.model)) : executable_dir();
  Described d = describe(folder, args.model, format_arg);
  std::string reference = !args.reference.empty() ? args.reference : join_path(folder, "reference.npz");
  if (!args.json.empty()) refuse_overwrite(args.json, {d.model, reference}, "--json");
  std::vector<ReferenceCase> cases = read_reference(reference, true);
  const RuntimeSetup& setup = init_runtime(args.threads);
  Model model(d.model);
  std::string model_sha = sha256_file(d.model);
  Json batches = Json::object();
  Sha256 all;
  double worst_abs = 0, worst_cos = 0;
  bool first = true;
  std::optional<double> worst_top1;
  for (const auto& c : cases) {
    std::vector<const Array*> arrays;
    std::vector<std::string> names;
    for (const auto& n : d.order) {
      for (const auto& input : c.inputs) {
        if (input.first == n) names.push_back(n);
      }
    }
    if (names.empty()) {
      for (const auto& input : c.inputs) names.push_back(input.first);
    }
    for (const auto& n : names) {
      for (const auto& input : c.inputs) {
        if (input.first == n) arrays.push_back(&input.second);
      }
    }
    Json result = compare(model.predict(arrays), *c.output);
    std::string hex = result.find("outputs_sha256")->as_string();
    std::string raw;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) raw += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    all.update(raw);
    double abs_v = result.find("max_abs")->as_double(), cos_v = result.find("cosine")->as_double();
    // Python's max()/min() over the batches: a NaN first stays; a later NaN never replaces.
    if (first || abs_v > worst_abs) worst_abs = abs_v;
    if (first || cos_v < worst_cos) worst_cos = cos_v;
    first = false;
    const Json* top1 = result.find("top1_agreement");
    if (!top1->is_null() && (!worst_top1 || top1->as_double() < *worst_top1)) worst_top1 = top1->as_double();
    batches.set(std::to_string(c.batch), result);
  }
  Json runtime = Json::object()
                     .set("name", backend().runtime_name)
                     .set("version", runtime_version())
                     .set("threads", setup.threads > 0 ? Json(static_cast<long long>(setup.threads)) : Json())
                     .set("engine", Json());
  Json doc = Json::object();
  doc.set("schema", "edgekit.check_outputs");
  doc.set("schema_version", 1);
  doc.set("model", Json::object().set("path", basename_of(d.model)).set("format", backend().format).set("sha256", model_sha));
  doc.set("runtime", runtime);
  doc.set("machine", machine());
  doc.set("python", Json());
  doc.set("batches", batches);
  doc.set("max_abs", worst_abs);
  doc.set("cosine", worst_cos);
  doc.set("top1_agreement", worst_top1 ? Json(*worst_top1) : Json());
  doc.set("outputs_sha256", all.hexdigest());
  Json failures = Json::array();
  if (args.max_abs && !(worst_abs <= *args.max_abs)) {
    failures.push("max_abs " + py_format(worst_abs, ".6g") + " > " + py_format(*args.max_abs, "g"));
  }
  if (args.min_cosine && !(worst_cos >= *args.min_cosine)) {
    failures.push("cosine " + py_format(worst_cos, ".6f") + " < " + py_format(*args.min_cosine, "g"));
  }
  if (args.min_top1 && worst_top1 && *worst_top1 < *args.min_top1) {
    failures.push("top1_agreement " + py_format(*worst_top1, ".4f") + " < " + py_format(*args.min_top1, "g"));
  }
  // As check.py's COSINE_FLOOR: no option turns it off (negated, zeroed or random outputs fail).
  constexpr double kCosineFloor = 0.5;
  if (!(worst_cos >= kCosineFloor) && !(args.min_cosine && !(worst_cos >= *args.min_cosine))) {
    failures.push("cosine " + py_format(worst_cos, ".6f") + " < " + py_format(kCosineFloor, "g") +
                  " (the floor no limit turns off: these are not the model's outputs)");
  }
  doc.set("ok", failures.items().empty());
  doc.set("failures", failures);
  return doc;
}

}  // namespace

int check_command(const std::vector<std::string>& argv) {
  ArgParser parser = check_parser();
  ParsedArgs parsed = parser.parse(argv);
  if (parsed.help) {
    emit(parser.usage());
    return kExitOk;
  }
  apply_timeout_option(parsed, kDefaultStepLimitS);
  CheckArgs args;
  if (parsed.has("--model")) args.model = parsed.last("--model");
  if (parsed.has("--reference")) args.reference = parsed.last("--reference");
  if (parsed.has("--json")) args.json = parsed.last("--json");
  if (parsed.has("--threads")) args.threads = parse_int("--threads", parsed.last("--threads"));
  if (parsed.has("--max-abs")) args.max_abs = parse_float("--max-abs", parsed.last("--max-abs"));
  if (parsed.has("--min-cosine")) args.min_cosine = parse_float("--min-cosine", parsed.last("--min-cosine"));
  if (parsed.has("--min-top1")) args.min_top1 = parse_float("--min-top1", parsed.last("--min-top1"));
  if (args.threads < 1) throw UsageError(format("--threads must be at least 1, got %lld", static_cast<long long>(args.threads)));
  if (args.threads > 1024) throw UsageError(format("--threads must be at most 1024, got %lld", static_cast<long long>(args.threads)));
  Json doc = check(args, parsed.has("--format") ? parsed.last("--format") : "");
  std::string text = doc.dump(2, true) + "\n";
  if (!args.json.empty()) {
    write_file_atomic(args.json, text, false, "--json");
  } else {
    emit(text);
  }
  emit(verdict(doc) + "\n");
  return doc.find("ok")->as_bool() ? kExitOk : kExitFailed;
}

}  // namespace edgekit
