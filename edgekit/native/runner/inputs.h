// Model inputs, as edgekit/board/inputs.py: specs (the manifest's, else the program's own),
// seeded random arrays, --shape and --input files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "json.h"
#include "npy.h"
#include "npz.h"

namespace edgekit {

class Model;

struct InputSpec {
  std::string name;
  bool shape_known = true;
  std::vector<std::optional<int64_t>> shape;  // nullopt: a dynamic axis (the batch, for axis 0)
  std::string dtype = "float32";
  bool bounded = false;  // the program's planned sizes: upper bounds, not fixed sizes
  std::optional<std::pair<double, double>> value_range;  // [low, high) of valid values
};

struct ResolvedSpecs {
  std::vector<InputSpec> specs;
  std::string source;  // "manifest" | "model"
  std::vector<std::string> notes;
};

std::vector<InputSpec> model_specs(const Model& model);
// The manifest's inputs when they fit the program (as many as it takes), else the program's own.
ResolvedSpecs resolve_specs(const Model& model, const Json& manifest);

// "input=1x1x8x8" -> ("input", {1, 1, 8, 8}); UsageError with parse_shape's wording.
std::pair<std::string, std::vector<int64_t>> parse_shape(const std::string& text);

struct MadeInputs {
  std::vector<std::string> names;
  std::vector<Array> arrays;  // in spec order
  int64_t batch = 1;
  std::vector<std::string> notes;
};

MadeInputs make_inputs(const std::vector<InputSpec>& specs,
                       const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                       const std::vector<NpzMember>* npz, int64_t batch, uint64_t seed);

}  // namespace edgekit
