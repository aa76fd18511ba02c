// Timed calls and settle() (see timing.h).
#include "timing.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace edgekit {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void count_mark(CountMark mark) {
  int saved = errno;
  long failed = syscall(SYS_write, -1L, nullptr, static_cast<size_t>(mark));
  (void)failed;
  errno = saved;
}

std::vector<int64_t> timed_calls(const Call& call, int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t start = now_ns();
    call();
    out[static_cast<size_t>(i)] = now_ns() - start;
  }
  return out;
}

std::vector<int64_t> timed_until(const Call& call, int64_t min_runs, double min_time_s, int64_t max_runs,
                                 int64_t chunk) {
  double min_ns = min_time_s * 1e9;
  std::vector<int64_t> samples = timed_calls(call, std::min(min_runs, max_runs));
  double total = 0;
  for (int64_t s : samples) total += static_cast<double>(s);
  while (static_cast<int64_t>(samples.size()) < max_runs && total < min_ns) {
    double mean = total / static_cast<double>(samples.size());
    int64_t left = max_runs - static_cast<int64_t>(samples.size());
    int64_t wanted = chunk;
    if (mean > 0) {
      double need = std::ceil((min_ns - total) / mean);
      wanted = need < static_cast<double>(chunk) ? static_cast<int64_t>(need) : chunk;
    }
    int64_t n = std::max<int64_t>(1, std::min({chunk, left, wanted}));
    std::vector<int64_t> block = timed_calls(call, n);
    for (int64_t s : block) total += static_cast<double>(s);
    samples.insert(samples.end(), block.begin(), block.end());
  }
  return samples;
}

namespace {

// How many threads of this process other than the caller are running or runnable ("R" in
// /proc/self/task/TID/stat); -1 where that cannot be read.
int other_threads_running() {
  long me = syscall(SYS_gettid);
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return -1;
  int running = 0;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    long tid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || tid == me) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    FILE* fh = std::fopen(path, "r");
    if (!fh) continue;  // the thread has ended
    char buf[1024];
    size_t n = std::fread(buf, 1, sizeof buf - 1, fh);
    std::fclose(fh);
    buf[n] = '\0';
    const char* close = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
    if (!close) continue;
    const char* state = close + 1;
    while (*state == ' ') ++state;
    running += *state == 'R';
  }
  closedir(dir);
  return running;
}

}  // namespace

double settle(double max_s, double poll_s, int quiet_polls) {
  int64_t start = now_ns();
  if (other_threads_running() < 0) return -1.0;
  int quiet = 0;
  while ((now_ns() - start) / 1e9 < max_s) {
    quiet = other_threads_running() == 0 ? quiet + 1 : 0;
    if (quiet >= quiet_polls) break;
    timespec pause{0, static_cast<long>(poll_s * 1e9)};
    nanosleep(&pause, nullptr);
  }
  return (now_ns() - start) / 1e9;
}

}  // namespace edgekit
