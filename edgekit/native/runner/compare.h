// A model output against the float reference's, as edgekit/board/check.py's compare(): numpy's
// float64 reductions, for each batch and then the worst over the batches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "json.h"
#include "npy.h"

namespace edgekit {

// A compensated (Neumaier) sum: the float64 reductions numpy does, to within an ulp or so.
class CompensatedSum {
 public:
  void add(double x);
  double value() const { return sum_ + comp_; }

 private:
  double sum_ = 0, comp_ = 0;
};

// One batch of one output: {"max_abs", "cosine", "top1_agreement", "outputs_sha256", "shape"}.
// RunError when the shapes differ (`label` then names the output: "" for output 0, "output 2: ").
Json compare(const Array& got, const Array& want, const std::string& label = "");

// One batch over its outputs, as check.py's _batch_summary: the worst max_abs and cosine, the first
// output's top-1 and shape, the outputs' hash (the first's own when there is one), and "outputs".
Json batch_summary(const std::vector<Json>& per_output);

// Python's max()/min() over a sequence: the first value stays unless a later one is larger
// (smaller); a NaN first stays, a later NaN never replaces.
void keep_max(double value, bool first, double& worst);
void keep_min(double value, bool first, double& worst);

// One output over every batch, as check.py's _output_summary: the worst of each figure; for an
// output of one value per sample (a score, a probability: one number has no direction), the
// cosine over every batch at once and the largest error against the float values' spread.
class OutputTally {
 public:
  explicit OutputTally(size_t index) : index_(index) {}

  // A batch's compare() result for this output, the arrays compared, and the batch's number.
  void add(const Json& result, const Array& got, const Array& want, int64_t batch);
  // {"index", "name", "per_sample", "max_abs", "cosine", "top1_agreement" (output 0's only), and
  // "max_abs_of_spread" (null for constant float values) where per_sample is 1}.
  Json summary(const Json& name) const;

 private:
  size_t index_;
  bool first_ = true;
  uint64_t per_sample_ = 0;
  double max_abs_ = 0, cosine_ = 0;
  std::optional<double> top1_;
  CompensatedSum aa_, bb_, ab_;  // over every batch at once
  bool got_any_ = false, want_any_ = false, want_nan_ = false, want_seen_ = false;
  double low_ = 0, high_ = 0;
};

}  // namespace edgekit
