// edgekit-run check: a bundle's output check, as check_outputs.py (same JSON document, same
// verdict line, same exit codes).
#include <cmath>
#include <optional>

#include "args.h"
#include "compare.h"
#include "commands.h"
#include "errors.h"
#include "files.h"
#include "host_facts.h"
#include "manifest.h"
#include "program.h"
#include "reference.h"
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

// (model path, the manifest's entry for it, the manifest's input names in order); as describe().
struct Described {
  std::string model;
  Json entry;
  std::vector<std::string> order;
  std::vector<std::string> output_names;  // the manifest's "outputs"
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
  const Json* outputs = manifest.find("outputs");
  if (outputs != nullptr && outputs->is_array()) {
    for (const Json& name : outputs->items()) {
      if (name.is_string()) out.output_names.push_back(name.as_string());
    }
  }
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

// As check.py's COSINE_FLOOR and SPREAD_CEILING: no option turns them off (negated, zeroed or
// random outputs fail; an output of one value per sample: its largest error against the float
// values' spread).
constexpr double kCosineFloor = 0.5;
constexpr double kSpreadCeiling = 0.5;

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

// The inputs of a reference case in the order the model takes them (the manifest's, else the archive's).
std::vector<const Array*> ordered_inputs(const ReferenceCase& c, const std::vector<std::string>& order) {
  std::vector<std::string> names;
  for (const auto& n : order) {
    for (const auto& input : c.inputs) {
      if (input.first == n) names.push_back(n);
    }
  }
  if (names.empty()) {
    for (const auto& input : c.inputs) names.push_back(input.first);
  }
  std::vector<const Array*> arrays;
  for (const auto& n : names) {
    for (const auto& input : c.inputs) {
      if (input.first == n) arrays.push_back(&input.second);
    }
  }
  return arrays;
}

// The limits and floors one output's figures break, in words (check.py's limit_failures, then
// its spread ceiling).
Json output_failures(const Json& figures, const CheckArgs& args) {
  double max_abs = figures.find("max_abs")->as_double(), cosine = figures.find("cosine")->as_double();
  const Json* top1 = figures.find("top1_agreement");
  Json failures = Json::array();
  bool cosine_failed = false;
  if (args.max_abs && !(max_abs <= *args.max_abs)) {
    failures.push("max_abs " + py_format(max_abs, ".6g") + " > " + py_format(*args.max_abs, "g"));
  }
  if (args.min_cosine && !(cosine >= *args.min_cosine)) {
    failures.push("cosine " + py_format(cosine, ".6f") + " < " + py_format(*args.min_cosine, "g"));
    cosine_failed = true;
  }
  if (args.min_top1 && !top1->is_null() && top1->as_double() < *args.min_top1) {
    failures.push("top1_agreement " + py_format(top1->as_double(), ".4f") + " < " + py_format(*args.min_top1, "g"));
  }
  if (!(cosine >= kCosineFloor) && !cosine_failed) {
    failures.push("cosine " + py_format(cosine, ".6f") + " < " + py_format(kCosineFloor, "g") +
                  " (the floor no limit turns off: these are not the model's outputs)");
  }
  const Json* of_spread = figures.find("max_abs_of_spread");
  if (of_spread != nullptr && !of_spread->is_null() && !(of_spread->as_double() <= kSpreadCeiling)) {
    failures.push("max abs error " + py_format(of_spread->as_double(), ".4g") + " of the float values' spread > " +
                  py_format(kSpreadCeiling, "g") + " (one value per sample)");
  }
  return failures;
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
  Json batches = Json::object(), notes = Json::array();
  std::string short_of;  // the model gives fewer outputs than the reference holds
  Sha256 all;
  std::vector<OutputTally> tallies;
  for (const auto& c : cases) {
    std::vector<Array> got = model.predict_all(ordered_inputs(c, d.order));
    std::vector<const Array*> wants = {&*c.output};
    for (const auto& more : c.more_outputs) wants.push_back(&more);
    if (got.size() < wants.size()) {
      short_of = format("the model gives %zu output(s); the reference holds %zu", got.size(), wants.size());
    } else if (got.size() > wants.size() && notes.items().empty()) {
      notes.push(format("the model gives %zu outputs; the reference holds %zu (written before every output was "
                        "kept): %zu compared", got.size(), wants.size(), wants.size()));
    }
    std::vector<Json> per_output;
    for (size_t k = 0; k < got.size() && k < wants.size(); ++k) {
      Json result = compare(got[k], *wants[k], wants.size() > 1 ? format("output %zu: ", k) : "");
      if (tallies.size() <= k) tallies.emplace_back(k);
      tallies[k].add(result, got[k], *wants[k], c.batch);
      all.update(Sha256::from_hex(result.find("outputs_sha256")->as_string()));
      per_output.push_back(Json::object().set("index", static_cast<long long>(k)));
      for (const auto& member : result.members()) per_output.back().set(member.first, member.second);
    }
    batches.set(std::to_string(c.batch), batch_summary(per_output));
  }
  // Names: the model's own where the file has them (ONNX), else the manifest's.
  std::vector<std::string> names = model.output_names();
  if (names.empty()) names = d.output_names;
  Json outputs = Json::array(), failures = Json::array();
  if (!short_of.empty()) failures.push(short_of);
  double worst_abs = 0, worst_cos = 0;
  std::optional<double> worst_top1;
  for (size_t k = 0; k < tallies.size(); ++k) {
    Json figures = tallies[k].summary(k < names.size() ? Json(names[k]) : Json());
    keep_max(figures.find("max_abs")->as_double(), k == 0, worst_abs);
    keep_min(figures.find("cosine")->as_double(), k == 0, worst_cos);
    const Json* top1 = figures.find("top1_agreement");
    if (!top1->is_null() && (!worst_top1 || top1->as_double() < *worst_top1)) worst_top1 = top1->as_double();
    Json broken = output_failures(figures, args);
    std::string label;
    if (tallies.size() > 1) {
      label = format("output %zu", k) + (k < names.size() && !names[k].empty() ? " (" + py_repr(names[k]) + ")" : "") + ": ";
    }
    for (const Json& f : broken.items()) failures.push(label + f.as_string());
    figures.set("ok", broken.items().empty());
    figures.set("failures", broken);
    outputs.push(figures);
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
  doc.set("outputs", outputs);
  doc.set("max_abs", worst_abs);
  doc.set("cosine", worst_cos);
  doc.set("top1_agreement", worst_top1 ? Json(*worst_top1) : Json());
  doc.set("outputs_sha256", all.hexdigest());
  doc.set("ok", failures.items().empty());
  doc.set("failures", failures);
  doc.set("notes", notes);
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
