// The step timer and the crash handlers (see watchdog.h). The handlers only write() bytes
// prepared before the step began and _exit(): nothing else is safe inside a signal handler.
#include "watchdog.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "backend.h"
#include "errors.h"
#include "text.h"

namespace edgekit {

namespace {

int g_fd = 2;
double g_limit_s = kDefaultStepLimitS;
char g_step[512] = "";  // the step running now ("loading model.pte"), for a crash line
char g_timeout[768] = "";          // the whole timeout line of the armed step
size_t g_timeout_len = 0;
char g_altstack[64 * 1024];        // a stack overflow still gets its line

size_t append(char* buf, size_t at, size_t cap, const char* text) {
  while (*text && at + 1 < cap) buf[at++] = *text++;
  return at;
}

void write_all(const char* buf, size_t len) {
  while (len > 0) {
    ssize_t n = ::write(g_fd, buf, len);
    if (n <= 0) return;
    buf += n;
    len -= static_cast<size_t>(n);
  }
}

void on_timeout(int) {
  write_all(g_timeout, g_timeout_len);
  ::_exit(kExitFailed);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGABRT: return "SIGABRT";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    default: return "a fatal signal";
  }
}

void on_fatal(int sig) {
  char line[1024];
  size_t n = 0;
  if (g_step[0] != '\0') {
    n = append(line, n, sizeof line, "Error: the ");
    n = append(line, n, sizeof line, backend().label);
    n = append(line, n, sizeof line, " runtime crashed (");
    n = append(line, n, sizeof line, signal_name(sig));
    n = append(line, n, sizeof line, ") while ");
    n = append(line, n, sizeof line, g_step);
    n = append(line, n, sizeof line, "; the program is damaged or was not made for this runner\n");
  } else {
    n = append(line, n, sizeof line, "Error: edgekit-run crashed (");
    n = append(line, n, sizeof line, signal_name(sig));
    n = append(line, n, sizeof line, ")\n");
  }
  write_all(line, n);
  ::_exit(kExitFailed);
}

}  // namespace

void install_crash_handlers(int fd) {
  g_fd = fd;
  stack_t stack{};
  stack.ss_sp = g_altstack;
  stack.ss_size = sizeof g_altstack;
  ::sigaltstack(&stack, nullptr);
  struct sigaction fatal {};
  fatal.sa_handler = on_fatal;
  fatal.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&fatal.sa_mask);
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::sigaction(sig, &fatal, nullptr);
  struct sigaction alarm {};
  alarm.sa_handler = on_timeout;
  sigemptyset(&alarm.sa_mask);
  ::sigaction(SIGALRM, &alarm, nullptr);
}

void limit_memory() {
  FILE* fh = std::fopen("/proc/meminfo", "re");
  if (fh == nullptr) return;
  unsigned long long available = 0, swap_free = 0, value = 0;
  bool found = false;
  char line[256];
  while (std::fgets(line, sizeof line, fh) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %llu kB", &value) == 1) {
      available = value;
      found = true;
    } else if (std::sscanf(line, "SwapFree: %llu kB", &value) == 1) {
      swap_free = value;
    }
  }
  std::fclose(fh);
  if (!found) return;
  constexpr unsigned long long kFloorBytes = 256ULL << 20;  // never below what the runner itself needs
  unsigned long long bytes = (available + swap_free) * 1024ULL;
  if (bytes < kFloorBytes) bytes = kFloorBytes;
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_DATA, &limit) != 0) return;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur <= bytes) return;
  limit.rlim_cur = static_cast<rlim_t>(bytes);
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_cur > limit.rlim_max) limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_DATA, &limit);
}

void add_timeout_option(ArgParser& parser, double default_s) {
  parser.add({"--timeout", true, false, {}, "S",
              "seconds one load or run may take (default " + py_format(default_s, "g") + "; 0: none)"});
}

void apply_timeout_option(const ParsedArgs& parsed, double default_s) {
  g_limit_s = default_s;
  if (!parsed.has("--timeout")) return;
  double value = parse_float("--timeout", parsed.last("--timeout"));
  if (!std::isfinite(value) || value < 0 || value > kMaxStepLimitS) {
    throw UsageError("--timeout must be 0 (no limit) or a number of seconds up to " + py_format(kMaxStepLimitS, "g") +
                     ", got " + py_repr(head_chars(parsed.last("--timeout"), 40)));
  }
  g_limit_s = value;
}

StepTimer::StepTimer(const std::string& what) {
  size_t n = append(g_step, 0, sizeof g_step, what.c_str());
  g_step[n] = '\0';
  if (!(g_limit_s > 0)) return;
  std::string line = "Error: " + one_line(what, 300) + " did not finish within " + py_format(g_limit_s, "g") +
                     " s; the program may be damaged (--timeout S sets the limit, 0 none)\n";
  g_timeout_len = append(g_timeout, 0, sizeof g_timeout, line.c_str());
  struct itimerval timer {};
  double whole = std::floor(g_limit_s);
  timer.it_value.tv_sec = static_cast<time_t>(whole);
  timer.it_value.tv_usec = static_cast<suseconds_t>((g_limit_s - whole) * 1e6);
  if (timer.it_value.tv_sec == 0 && timer.it_value.tv_usec == 0) timer.it_value.tv_usec = 1;
  armed_ = ::setitimer(ITIMER_REAL, &timer, nullptr) == 0;
}

StepTimer::~StepTimer() {
  if (armed_) {
    struct itimerval off {};
    ::setitimer(ITIMER_REAL, &off, nullptr);
  }
  g_step[0] = '\0';
}

}  // namespace edgekit
