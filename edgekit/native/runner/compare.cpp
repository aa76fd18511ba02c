// An output against the reference's (see compare.h).
#include "compare.h"

#include <algorithm>
#include <cmath>

#include "errors.h"
#include "sha256.h"

namespace edgekit {

void CompensatedSum::add(double x) {
  double t = sum_ + x;
  comp_ += std::fabs(sum_) >= std::fabs(x) ? (sum_ - t) + x : (x - t) + sum_;
  sum_ = t;
}

namespace {

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

}  // namespace

Json compare(const Array& got, const Array& want, const std::string& label) {
  if (got.shape != want.shape) {
    throw RunError("RuntimeError: " + label + "output shape " + shape_list(got.shape) +
                   " differs from the reference's " + shape_list(want.shape));
  }
  std::vector<double> a = to_doubles(got), b = to_doubles(want);
  CompensatedSum aa, bb, ab;
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

void keep_max(double value, bool first, double& worst) {
  if (first || value > worst) worst = value;
}

void keep_min(double value, bool first, double& worst) {
  if (first || value < worst) worst = value;
}

Json batch_summary(const std::vector<Json>& per_output) {
  const Json& first = per_output.front();
  double max_abs = 0, cosine = 0;
  Sha256 digest;
  for (size_t k = 0; k < per_output.size(); ++k) {
    keep_max(per_output[k].find("max_abs")->as_double(), k == 0, max_abs);
    keep_min(per_output[k].find("cosine")->as_double(), k == 0, cosine);
    digest.update(Sha256::from_hex(per_output[k].find("outputs_sha256")->as_string()));
  }
  Json outputs = Json::array();
  for (const Json& o : per_output) outputs.push(o);
  return Json::object()
      .set("max_abs", max_abs)
      .set("cosine", cosine)
      .set("top1_agreement", *first.find("top1_agreement"))
      .set("outputs_sha256", per_output.size() == 1 ? first.find("outputs_sha256")->as_string() : digest.hexdigest())
      .set("shape", *first.find("shape"))
      .set("outputs", outputs);
}

void OutputTally::add(const Json& result, const Array& got, const Array& want, int64_t batch) {
  keep_max(result.find("max_abs")->as_double(), first_, max_abs_);
  keep_min(result.find("cosine")->as_double(), first_, cosine_);
  const Json* top1 = result.find("top1_agreement");
  if (index_ == 0 && !top1->is_null() && (!top1_ || top1->as_double() < *top1_)) top1_ = top1->as_double();
  uint64_t per_sample = want.count() / static_cast<uint64_t>(std::max<int64_t>(batch, 1));
  per_sample_ = std::max(per_sample_, per_sample);
  std::vector<double> a = to_doubles(got), b = to_doubles(want);
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    aa_.add(a[i] * a[i]);
    bb_.add(b[i] * b[i]);
    ab_.add(a[i] * b[i]);
  }
  for (double x : a) got_any_ = got_any_ || x != 0;
  for (double x : b) {
    want_any_ = want_any_ || x != 0;
    if (std::isnan(x)) {
      want_nan_ = true;
      continue;
    }
    low_ = want_seen_ ? std::min(low_, x) : x;
    high_ = want_seen_ ? std::max(high_, x) : x;
    want_seen_ = true;
  }
  first_ = false;
}

Json OutputTally::summary(const Json& name) const {
  Json out = Json::object()
                 .set("index", static_cast<long long>(index_))
                 .set("name", name)
                 .set("per_sample", static_cast<unsigned long long>(per_sample_))
                 .set("max_abs", max_abs_)
                 .set("cosine", cosine_)
                 .set("top1_agreement", top1_ ? Json(*top1_) : Json());
  if (per_sample_ <= 1) {
    double norms = std::sqrt(aa_.value()) * std::sqrt(bb_.value());
    out.set("cosine", norms > 0 ? ab_.value() / norms : (!got_any_ && !want_any_ ? 1.0 : 0.0));
    double spread = want_nan_ ? std::nan("") : high_ - low_;  // numpy's max - min: NaN when a value is
    out.set("max_abs_of_spread", spread > 0 ? Json(max_abs_ / spread) : Json());
  }
  return out;
}

}  // namespace edgekit
