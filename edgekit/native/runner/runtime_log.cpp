// The runtime's log and the output redirection (see runtime_log.h).
#include "runtime_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "text.h"

namespace edgekit {

namespace {

constexpr size_t kMaxLines = 200;
constexpr size_t kMaxSinkBytes = 1 << 20;

struct State {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::string first_error;
  FILE* out = stdout;
  FILE* err = stderr;
  int sink = -1;  // where fd 1 and fd 2 point (a deleted temporary file)
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void log_runtime_line(const std::string& line, bool is_error) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (is_error && s.first_error.empty()) s.first_error = one_line(line, 200);
  if (s.lines.size() < kMaxLines) s.lines.push_back(one_line(line, 500));
}

namespace {

// What the libraries wrote on fd 1/2 since the last call, as lines.
std::vector<std::string> drain_sink() {
  State& s = state();
  std::vector<std::string> out;
  if (s.sink < 0) return out;
  off_t end = ::lseek(s.sink, 0, SEEK_END);
  if (end <= 0) return out;
  size_t n = static_cast<size_t>(end) < kMaxSinkBytes ? static_cast<size_t>(end) : kMaxSinkBytes;
  std::string text(n, '\0');
  ssize_t got = ::pread(s.sink, &text[0], n, 0);
  text.resize(got > 0 ? static_cast<size_t>(got) : 0);
  for (const auto& line : split(text, '\n')) {
    if (!trim(line).empty()) out.push_back(one_line(line, 500));
  }
  return out;
}

}  // namespace

bool debug_enabled() {
  const char* v = std::getenv("EDGEKIT_DEBUG");
  return v != nullptr && *v != '\0';
}

void protect_output() {
  State& s = state();
  std::fflush(stdout);
  std::fflush(stderr);
  int out_fd = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  int err_fd = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (out_fd < 0 || err_fd < 0) return;  // keep the plain streams
  s.out = ::fdopen(out_fd, "w");
  s.err = ::fdopen(err_fd, "w");
  if (!s.out || !s.err) {
    s.out = stdout;
    s.err = stderr;
    return;
  }
  std::setvbuf(s.err, nullptr, _IOLBF, 0);
  if (debug_enabled()) {
    ::dup2(2, 1);  // the runtime's stdout chatter goes to stderr
    return;
  }
  int sink = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (sink < 0) {
    char name[] = "/tmp/.edgekit-run.XXXXXX";
    sink = ::mkostemp(name, O_CLOEXEC);
    if (sink >= 0) ::unlink(name);
  }
  if (sink < 0) {
    int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull >= 0) {
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
      ::close(devnull);
    }
    return;
  }
  ::dup2(sink, 1);
  ::dup2(sink, 2);
  s.sink = sink;
}

FILE* out_stream() { return state().out; }
FILE* err_stream() { return state().err; }

std::vector<std::string> runtime_log() {
  std::vector<std::string> lines;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    lines = s.lines;
  }
  for (auto& line : drain_sink()) lines.push_back(line);
  return lines;
}

std::string runtime_detail() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.first_error.empty() ? "" : " (runtime: " + s.first_error + ")";
}

void clear_runtime_errors() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.first_error.clear();
}

}  // namespace edgekit
