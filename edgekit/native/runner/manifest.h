// The manifest beside a model file (manifest.json, read raw), which runtime a file needs, and the
// facts about the file a result records; as edgekit/board/manifest.py.
#pragma once

#include <string>
#include <vector>

#include "json.h"

namespace edgekit {

constexpr const char* kManifestName = "manifest.json";

// A JSON object from path (at most 16 MiB, nesting bounded); UsageError for anything else.
Json read_json_object(const std::string& path);

struct ManifestEntry {
  Json manifest;  // null when there is no usable manifest
  Json entry;     // this file's entry in it (null when none)
  std::vector<std::string> notes;
};

ManifestEntry read_manifest_entry(const std::string& model);
// The entry of `files` in manifest that names model (relative to folder), or null.
Json find_entry(const Json& manifest, const std::string& folder, const std::string& model);

// The backend's format (backend().format), or UsageError: a checkpoint, another runtime's file, or a file nothing tells.
std::string detect_format(const std::string& model, const Json& entry, const std::string& override_format);

// model {path, format, bytes, sha256, precision, variant, accuracy, float_accuracy}.
Json model_info(const std::string& model, const std::string& format, const Json& entry);

// Python's str() of a JSON value, and its truth value.
std::string py_str(const Json& value);
bool py_truthy(const Json& value);

}  // namespace edgekit
