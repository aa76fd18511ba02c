// Timed calls (the loop a user's own would be), the stopping rule, and waiting for spinning threads,
// as edgekit/board/timing.py.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace edgekit {

using Call = std::function<void()>;

int64_t now_ns();  // CLOCK_MONOTONIC, as Python's perf_counter_ns

// n calls; the wall time of each in ns (nothing but the call between the two clock reads).
std::vector<int64_t> timed_calls(const Call& call, int64_t n);

// Timed calls until both min_runs and min_time_s (summed call time) are reached, or max_runs.
std::vector<int64_t> timed_until(const Call& call, int64_t min_runs, double min_time_s, int64_t max_runs,
                                 int64_t chunk = 1000);

// Marks the start and end of the timed runs for edgekit's instruction-counting QEMU plugin
// (edgekit/emulate/plugin/insn_count.c): write(-1, NULL, mark), which fails at once with EBADF.
// generate marks its prompt with the prefill pair and its decode steps with the timed pair.
enum class CountMark : uint32_t {
  kBegin = 0x65646b62u,
  kEnd = 0x65646b65u,
  kPrefillBegin = 0x65646b70u,
  kPrefillEnd = 0x65646b71u,
};
void count_mark(CountMark mark);

// Waits (at most max_s) until no other thread of this process has been runnable for two polls in
// a row; the seconds waited, or a negative value where /proc cannot tell (then it does not wait).
double settle(double max_s = 0.5, double poll_s = 0.001, int quiet_polls = 2);

}  // namespace edgekit
