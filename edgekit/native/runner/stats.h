// Timing statistics, as edgekit/board/stats.py computes them (percentiles by linear interpolation,
// as numpy.percentile; population std; sums exactly rounded, as math.fsum).
#pragma once

#include <cstdint>
#include <vector>

namespace edgekit {

// The exactly rounded sum of values (Shewchuk's algorithm, as Python's math.fsum).
double fsum(const std::vector<double>& values);

// The q-th percentile (0..100) of ascending values, by linear interpolation.
double percentile(const std::vector<double>& sorted, double q);

struct TimingSummary {  // milliseconds, except runs and total_s
  double p50, p90, p95, p99, mean, std, min, max;
  int64_t runs;
  double total_s;  // the sum of the timed calls
};

TimingSummary summarize_ns(const std::vector<int64_t>& samples_ns);  // samples must not be empty

}  // namespace edgekit
