// manifest.json, the format of a model file, and model facts (see manifest.h).
#include "manifest.h"

#include <cmath>
#include <cstdio>

#include "backend.h"
#include "errors.h"
#include "files.h"
#include "sha256.h"
#include "text.h"

namespace edgekit {

namespace {

constexpr uint64_t kMaxManifestBytes = 16ull << 20;
constexpr int kMaxJsonDepth = 64;
constexpr const char* kManifestSchema = "edgekit.manifest";

}  // namespace

Json read_json_object(const std::string& path) {
  int64_t size = file_size(path);
  if (size > static_cast<int64_t>(kMaxManifestBytes)) {
    throw UsageError(path + " is larger than 16 MiB; not an edgekit file");
  }
  std::string text;
  try {
    text = read_file(path, kMaxManifestBytes, "file");
  } catch (const UsageError&) {
    throw UsageError(path + " is not valid JSON (it cannot be read)");
  }
  Json doc;
  std::string error;
  if (!parse_json(text, kMaxJsonDepth, &doc, &error)) throw UsageError(path + " is not valid JSON (" + error + ")");
  if (!doc.is_object()) throw UsageError(path + " must hold a JSON object");
  return doc;
}

std::string py_str(const Json& value) {
  switch (value.type()) {
    case Json::Type::Null: return "None";
    case Json::Type::Bool: return value.as_bool() ? "True" : "False";
    case Json::Type::String: return value.as_string();
    case Json::Type::Int: return std::to_string(value.as_int());
    case Json::Type::Float: {
      double v = value.as_double();
      if (std::isnan(v)) return "nan";
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
      return python_float_repr(v);
    }
    default: return value.dump();
  }
}

bool py_truthy(const Json& value) {
  switch (value.type()) {
    case Json::Type::Null: return false;
    case Json::Type::Bool: return value.as_bool();
    case Json::Type::Int: return value.as_int() != 0;
    case Json::Type::Float: return value.as_double() != 0.0;
    case Json::Type::String: return !value.as_string().empty();
    case Json::Type::Array: return !value.items().empty();
    case Json::Type::Object: return !value.members().empty();
  }
  return false;
}

Json find_entry(const Json& manifest, const std::string& folder, const std::string& model) {
  const Json* files = manifest.find("files");
  if (files == nullptr || !files->is_array()) return Json();
  std::string want = resolve_path(model);
  for (const Json& entry : files->items()) {
    if (!entry.is_object()) continue;
    const Json* path = entry.find("path");
    std::string rel = path == nullptr ? "" : py_str(*path);
    if (resolve_path(join_path(folder, rel)) == want) return entry;
  }
  return Json();
}

ManifestEntry read_manifest_entry(const std::string& model) {
  ManifestEntry out;
  std::string folder = dirname_of(model);
  std::string path = join_path(folder, kManifestName);
  if (!is_file(path)) return out;
  Json manifest = read_json_object(path);
  const Json* schema = manifest.find("schema");
  if (schema == nullptr || !schema->is_string() || schema->as_string() != kManifestSchema) {
    out.notes.push_back(path + " is not an edgekit manifest; ignored");
    return out;
  }
  Json entry = find_entry(manifest, folder, model);
  if (entry.is_null()) {
    out.notes.push_back(path + " does not list " + basename_of(model) + "; ignored");
    return out;
  }
  out.manifest = std::move(manifest);
  out.entry = std::move(entry);
  return out;
}

std::string detect_format(const std::string& model, const Json& entry, const std::string& override_format) {
  const std::string ours = backend().format;
  if (!override_format.empty()) return override_format;
  const Json* listed = entry.is_object() ? entry.find("format") : nullptr;
  if (listed != nullptr && listed->is_string()) {
    const std::string& fmt = listed->as_string();
    if (fmt == "checkpoint") throw UsageError(model + " is a training checkpoint, not a runnable model; export it first");
    if (fmt == ours) return fmt;
    throw UsageError("this edgekit-run runs " + ours + " models; " + model + " is listed as " + fmt +
                     " in its manifest (run it with runner.py)");
  }
  std::string name = basename_of(model);
  std::string suffix = name.rfind('.') == std::string::npos ? "" : name.substr(name.rfind('.'));
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (suffix == backend().suffix || looks_like_model(model)) return ours;
  throw UsageError("cannot tell the runtime for " + name + "; this edgekit-run runs " + backend().label + " " +
                   backend().suffix + " models (or pass --format " + ours + ")");
}

namespace {

// A number as Python's float() of an int or float (not a bool), else null.
Json number_or_null(const Json* v) {
  if (v == nullptr || !v->is_number() || !std::isfinite(v->as_double())) return Json();
  return Json(v->as_double());
}

// board/manifest.py's fidelity_summary: what a gate's fidelity budgets read of metrics.fidelity.
Json fidelity_summary(const Json* fidelity) {
  const Json* outputs = fidelity && fidelity->is_object() ? fidelity->find("outputs") : nullptr;
  if (outputs == nullptr || !outputs->is_array()) return Json();
  Json summary = Json::object();
  for (const Json& out : outputs->items()) {
    const Json* found = out.is_object() ? out.find("metrics") : nullptr;
    if (found == nullptr || !found->is_object()) continue;
    const Json* agreement = found->find("top1_agreement");
    if (agreement == nullptr) agreement = found->find("timestep_agreement");
    const Json* name = out.find("output");
    const Json* kind = out.find("kind");
    const Json* ok = out.find("ok");
    summary.set(head_chars(name ? py_str(*name) : "None", 200),
                Json::object()
                    .set("kind", head_chars(kind ? py_str(*kind) : "None", 20))
                    .set("cosine", number_or_null(found->find("cosine")))
                    .set("sqnr_db", number_or_null(found->find("sqnr_db")))
                    .set("agreement", number_or_null(agreement))
                    .set("correlation", number_or_null(found->find("correlation")))
                    .set("ok", ok != nullptr && ok->is_bool() && ok->as_bool()));
  }
  const Json* evidence = fidelity->find("evidence");
  return Json::object()
      .set("evidence", evidence && !evidence->is_null() ? Json(head_chars(py_str(*evidence), 40)) : Json())
      .set("outputs", summary);
}

}  // namespace

Json model_info(const std::string& model, const std::string& format, const Json& entry) {
  static const Json empty = Json::object();
  const Json& e = entry.is_object() ? entry : empty;
  const Json* metrics = e.find("metrics");
  const Json* details = e.find("details");
  if (metrics != nullptr && !metrics->is_object()) metrics = nullptr;
  if (details != nullptr && !details->is_object()) details = nullptr;
  auto metric = [&](const char* key) -> Json {
    const Json* v = metrics ? metrics->find(key) : nullptr;
    if (v == nullptr || !v->is_number() || v->is_big_integer() || !std::isfinite(v->as_double())) return Json();
    return Json(v->as_double());
  };
  int64_t bytes = file_size(model);
  const Json* data_files = e.find("data_files");
  if (data_files != nullptr && data_files->is_array()) {  // ONNX external data: part of the model's size
    for (const Json& data : data_files->items()) {
      const Json* name = data.is_object() ? data.find("path") : nullptr;
      if (name == nullptr || !name->is_string() || name->as_string().empty()) continue;
      const std::string& n = name->as_string();
      if (n.find('/') != std::string::npos || n == "." || n == "..") continue;
      std::string path = join_path(dirname_of(model), n);
      if (is_file(path)) bytes += file_size(path);
    }
  }
  const Json* precision = e.find("precision");
  const Json* variant = details ? details->find("variant") : nullptr;
  Json info = Json::object();
  info.set("path", normalize_path(model));
  info.set("format", format);
  info.set("bytes", static_cast<long long>(bytes));
  info.set("sha256", sha256_file(model));
  info.set("precision", precision && py_truthy(*precision) ? py_str(*precision) : std::string("fp32"));
  info.set("variant", variant && py_truthy(*variant) ? py_str(*variant) : std::string());
  info.set("accuracy", metric("accuracy"));
  info.set("float_accuracy", metric("float_accuracy"));
  info.set("fidelity", fidelity_summary(metrics ? metrics->find("fidelity") : nullptr));
  return info;
}

}  // namespace edgekit
