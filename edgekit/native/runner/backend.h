// Which runtime this edgekit-run carries. One backend per binary: the ExecuTorch one (program.cpp,
// runtime_setup.cpp, executorch_log.cpp) or the ONNX Runtime one (ort_backend.cpp); the commands
// reach either through program.h and these facts.
#pragma once

#include <string>

namespace edgekit {

struct BackendFacts {
  const char* runtime_name;  // in result documents and bundle.json: "executorch-native" | "onnxruntime-native"
  const char* format;        // edgekit's name for the files it runs: "executorch" | "onnx"
  const char* label;         // in messages: "ExecuTorch" | "ONNX Runtime"
  const char* runtime_key;   // the host facts' runtimes entry: "executorch" | "onnxruntime"
  const char* suffix;        // the model file's suffix: ".pte" | ".onnx"
};

const BackendFacts& backend();
// The runtime's version: the one built against (ExecuTorch), or the loaded library's (ONNX Runtime,
// "unknown" before it loads).
std::string runtime_version();
// Whether the file at `path` starts like a model this backend runs (its magic bytes).
bool looks_like_model(const std::string& path);

}  // namespace edgekit
