// Timing statistics (see stats.h).
#include "stats.h"

#include <algorithm>
#include <cmath>

namespace edgekit {

double fsum(const std::vector<double>& values) {
  std::vector<double> partials;
  for (double x : values) {
    size_t i = 0;
    for (double y : partials) {
      if (std::fabs(x) < std::fabs(y)) std::swap(x, y);
      double hi = x + y;
      double lo = y - (hi - x);
      if (lo != 0.0) partials[i++] = lo;
      x = hi;
    }
    partials.resize(i);
    if (x != 0.0) partials.push_back(x);
  }
  // Sum the partials from the top, rounding once (the half-way correction of math.fsum).
  if (partials.empty()) return 0.0;
  size_t n = partials.size();
  double hi = partials[--n], lo = 0.0;
  while (n > 0) {
    double x = hi, y = partials[--n];
    hi = x + y;
    double yr = hi - x;
    lo = y - yr;
    if (lo != 0.0) break;
  }
  if (n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0))) {
    double y = lo * 2.0;
    double x = hi + y;
    if (y == x - hi) hi = x;
  }
  return hi;
}

double percentile(const std::vector<double>& sorted, double q) {
  size_t n = sorted.size();
  double rank = static_cast<double>(n - 1) * q / 100.0;
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, n - 1);
  double frac = rank - static_cast<double>(lo);
  double a = sorted[lo], b = sorted[hi];
  return a + (b - a) * frac;
}

TimingSummary summarize_ns(const std::vector<int64_t>& samples_ns) {
  std::vector<double> ms;
  ms.reserve(samples_ns.size());
  int64_t total_ns = 0;
  for (int64_t s : samples_ns) {
    ms.push_back(static_cast<double>(s) / 1e6);
    total_ns += s;
  }
  std::sort(ms.begin(), ms.end());
  double n = static_cast<double>(ms.size());
  double mean = fsum(ms) / n;
  std::vector<double> squares;
  squares.reserve(ms.size());
  for (double x : ms) squares.push_back((x - mean) * (x - mean));
  TimingSummary t;
  t.p50 = percentile(ms, 50);
  t.p90 = percentile(ms, 90);
  t.p95 = percentile(ms, 95);
  t.p99 = percentile(ms, 99);
  t.mean = mean;
  t.std = std::sqrt(fsum(squares) / n);
  t.min = ms.front();
  t.max = ms.back();
  t.runs = static_cast<int64_t>(ms.size());
  t.total_s = static_cast<double>(total_ns) / 1e9;
  return t;
}

}  // namespace edgekit
