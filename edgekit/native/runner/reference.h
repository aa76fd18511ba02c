// The cases of a reference.npz, as edgekit/board/inputs.py reads them: each batch's inputs and the
// float model's outputs for them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "npy.h"

namespace edgekit {

struct ReferenceCase {
  int64_t batch = 0;
  std::vector<std::pair<std::string, Array>> inputs;  // in the archive's order
  std::optional<Array> output;      // the model's output 0
  std::vector<Array> more_outputs;  // outputs 1, 2, ... (none in a reference.npz older than them)
};

// The cases of a reference.npz (b{batch}/input/{name}, b{batch}/output, b{batch}/outputs/{k} for
// k = 1, 2, ...), batches ascending. Every batch holds the same outputs, numbered without gaps.
// UsageError otherwise.
std::vector<ReferenceCase> read_reference(const std::string& path, bool need_outputs);

}  // namespace edgekit
