// reference.npz's cases (see reference.h).
#include "reference.h"

#include <map>

#include "errors.h"
#include "files.h"
#include "npz.h"
#include "text.h"

namespace edgekit {

namespace {

// An output's number in "outputs/{k}": 1..9999, plain decimal (no sign, no leading zero); -1 otherwise.
int64_t output_number(const std::string& digits) {
  if (digits.empty() || digits.size() > 4 || digits[0] == '0' ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoll(digits);
}

}  // namespace

std::vector<ReferenceCase> read_reference(const std::string& path, bool need_outputs) {
  if (!is_file(path)) throw UsageError("reference data not found: " + path);
  std::vector<NpzMember> members = read_npz(path, "reference data");
  std::map<int64_t, ReferenceCase> cases;
  std::map<int64_t, std::map<int64_t, Array>> more;  // batch -> output index -> array
  for (auto& m : members) {
    const std::string& key = m.name;
    auto unexpected = [&]() { return UsageError(path + ": unexpected array " + py_repr(head_chars(key, 80))); };
    size_t slash = key.find('/');
    std::string head = key.substr(0, slash);
    std::string rest = slash == std::string::npos ? "" : key.substr(slash + 1);
    size_t slash2 = rest.find('/');
    std::string kind = rest.substr(0, slash2);
    std::string name = slash2 == std::string::npos ? "" : rest.substr(slash2 + 1);
    std::string digits = head.size() > 1 ? head.substr(1) : "";
    bool ok = head.size() > 1 && head[0] == 'b' && digits.size() <= 7 &&
              digits.find_first_not_of("0123456789") == std::string::npos;
    int64_t batch = ok ? std::stoll(digits) : 0;
    if (!ok || batch <= 0 || batch >= 1000000) throw unexpected();
    ReferenceCase& c = cases[batch];
    c.batch = batch;
    if (kind == "input" && !name.empty()) {
      bool replaced = false;
      for (auto& input : c.inputs) {
        if (input.first == name) {
          input.second = std::move(m.array);
          replaced = true;
        }
      }
      if (!replaced) c.inputs.emplace_back(name, std::move(m.array));
    } else if (kind == "output" && name.empty()) {
      c.output = std::move(m.array);
    } else if (kind == "outputs" && output_number(name) > 0) {
      more[batch][output_number(name)] = std::move(m.array);
    } else {
      throw unexpected();
    }
  }
  bool complete = !cases.empty();
  for (const auto& entry : cases) {
    if (entry.second.inputs.empty() || (need_outputs && !entry.second.output)) complete = false;
  }
  if (!complete) throw UsageError(path + " lacks inputs or outputs for some batch");
  std::optional<size_t> counted;  // outputs per batch, among the batches that hold any
  for (auto& entry : cases) {
    ReferenceCase& c = entry.second;
    std::map<int64_t, Array>& extra = more[entry.first];
    size_t held = extra.size() + (c.output ? 1 : 0);
    if (held == 0) continue;
    int64_t missing = c.output ? 1 : 0;
    for (const auto& output : extra) {
      if (output.first != missing) break;
      ++missing;
    }
    if (missing < static_cast<int64_t>(held)) {
      throw UsageError(path + format(": batch %lld lacks output %lld", static_cast<long long>(entry.first),
                                     static_cast<long long>(missing)));
    }
    if (counted && *counted != held) throw UsageError(path + ": its batches hold different numbers of outputs");
    counted = held;
    for (auto& output : extra) c.more_outputs.push_back(std::move(output.second));
  }
  std::vector<ReferenceCase> out;
  for (auto& entry : cases) out.push_back(std::move(entry.second));
  return out;
}

}  // namespace edgekit
