// Host facts (see host_facts.h): /proc and /sys, uname, and the Raspberry Pi's vcgencmd.
#include "host_facts.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "backend.h"
#include "files.h"
#include "text.h"
#include "timing.h"

namespace edgekit {

namespace {

constexpr const char* kIsaFlags[] = {
    "neon", "asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "sve2",
    "avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
};

// A small text file (at most 1 MiB), NULs dropped and stripped; nullopt when absent or empty.
std::optional<std::string> read_text(const std::string& path) {
  try {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    std::string out;
    char buf[4096];
    ssize_t n;
    while (out.size() < (1u << 20) && (n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    std::string clean;
    for (char c : out) {
      if (c != '\0') clean += c;
    }
    clean = trim(clean);
    if (clean.empty()) return std::nullopt;
    return clean;
  } catch (...) {
    return std::nullopt;
  }
}

std::optional<long long> status_kb(const char* key) {
  auto text = read_text("/proc/self/status");
  if (!text) return std::nullopt;
  std::string prefix = std::string(key) + ":";
  for (const auto& line : split(*text, '\n')) {
    if (starts_with(line, prefix)) {
      char* end = nullptr;
      long long v = std::strtoll(line.c_str() + prefix.size(), &end, 10);
      if (end == line.c_str() + prefix.size()) return std::nullopt;
      return v;
    }
  }
  return std::nullopt;
}

std::map<std::string, std::string> cpuinfo() {
  std::map<std::string, std::string> info;
  auto text = read_text("/proc/cpuinfo");
  if (!text) return info;
  for (const auto& line : split(*text, '\n')) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = trim(line.substr(0, colon));
    if (!key.empty() && !info.count(key)) info[key] = trim(line.substr(colon + 1));
  }
  return info;
}

Json number_or_null(const std::optional<std::string>& text, double scale) {
  if (!text) return Json();
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text->c_str(), &end, 10);
  if (end == text->c_str() || *end != '\0' || errno) return Json();
  return Json(static_cast<double>(v) / scale);
}

std::string which(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (const auto& folder : split(path ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    std::string candidate = join_path(folder.empty() ? "." : folder, name);
    if (is_file(candidate) && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// stdout of argv (at most max_bytes), or nullopt; the child is killed and reaped past timeout_s.
std::optional<std::string> run_capture(const std::vector<std::string>& argv, double timeout_s, size_t max_bytes) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return std::nullopt;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {  // the child: stdout to the pipe, nothing else inherited
    int devnull = ::open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      ::dup2(devnull, 2);
    }
    ::dup2(pipe_fds[1], 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  std::string out;
  int64_t deadline = now_ns() + static_cast<int64_t>(timeout_s * 1e9);
  bool timed_out = false;
  while (true) {
    int64_t left_ms = (deadline - now_ns()) / 1000000;
    if (left_ms <= 0) { timed_out = true; break; }
    pollfd p{pipe_fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left_ms));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) { timed_out = r == 0; break; }
    char buf[512];
    ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n <= 0) break;
    if (out.size() < max_bytes) out.append(buf, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return std::nullopt;
  return out;
}

Json pi_throttled() {
  std::string binary = which("vcgencmd");
  if (binary.empty()) return Json();
  auto out = run_capture({binary, "get_throttled"}, 3.0, 4096);
  if (!out) return Json();
  std::string text = trim(*out);
  size_t eq = text.find('=');
  std::string raw = eq == std::string::npos ? "" : trim(text.substr(eq + 1));
  std::string digits = starts_with(raw, "0x") || starts_with(raw, "0X") ? raw.substr(2) : raw;
  if (digits.empty() || digits.size() > 15 || digits.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return Json();
  }
  unsigned long long value = std::strtoull(digits.c_str(), nullptr, 16);
  static const std::pair<int, const char*> bits[] = {
      {0, "under-voltage"}, {1, "arm-frequency-capped"}, {2, "throttled"}, {3, "soft-temperature-limit"},
      {16, "under-voltage-occurred"}, {17, "arm-frequency-capping-occurred"},
      {18, "throttling-occurred"}, {19, "soft-temperature-limit-occurred"},
  };
  Json flags = Json::array();
  for (const auto& bit : bits) {
    if ((value >> bit.first) & 1) flags.push(bit.second);
  }
  return Json::object().set("raw", raw).set("flags", flags);
}

// platform.platform() of Python on Linux: system-release-machine-with-glibcX.Y.
std::string platform_string() {
  utsname u{};
  if (::uname(&u) != 0) return "Linux";
  std::string libc;
  char buf[128];
  size_t n = ::confstr(_CS_GNU_LIBC_VERSION, buf, sizeof buf);
  if (n > 0 && n <= sizeof buf) {
    std::string text(buf);  // "glibc 2.36"
    size_t space = text.find(' ');
    libc = space == std::string::npos ? text : text.substr(0, space) + text.substr(space + 1);
  }
  std::vector<std::string> parts;
  for (std::string part : {std::string(u.sysname), std::string(u.release), std::string(u.machine),
                           libc.empty() ? std::string() : std::string("with"), libc}) {
    part = trim(part);
    if (!part.empty()) parts.push_back(part);
  }
  std::string out = join(parts, "-");
  for (char& c : out) {
    if (c == ' ') c = '_';
    else if (std::strchr("/\\:;\"()", c)) c = '-';
  }
  size_t at;
  while ((at = out.find("unknown")) != std::string::npos) out.erase(at, 7);
  while ((at = out.find("--")) != std::string::npos) out.erase(at, 1);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

}  // namespace

std::optional<double> rss_mb() {
  auto kb = status_kb("VmRSS");
  if (!kb) return std::nullopt;
  return static_cast<double>(*kb) / 1024.0;
}

std::optional<double> peak_rss_mb() {
  auto kb = status_kb("VmHWM");
  if (!kb) return std::nullopt;
  return static_cast<double>(*kb) / 1024.0;
}

std::optional<double> available_mb() {
  auto text = read_text("/proc/meminfo");
  if (!text) return std::nullopt;
  for (const auto& line : split(*text, '\n')) {
    if (starts_with(line, "MemAvailable:")) {
      char* end = nullptr;
      long long kb = std::strtoll(line.c_str() + 13, &end, 10);
      if (end == line.c_str() + 13) return std::nullopt;
      return static_cast<double>(kb) / 1024.0;
    }
  }
  return std::nullopt;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return logical_cores();
}

int logical_cores() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string machine() {
  utsname u{};
  return ::uname(&u) == 0 ? u.machine : "";
}

Json host_facts(bool emulated, const std::string& runtime_version) {
  std::map<std::string, std::string> info = emulated ? std::map<std::string, std::string>{} : cpuinfo();
  auto get = [&](const char* key) -> std::optional<std::string> {
    auto it = info.find(key);
    if (it == info.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  std::set<std::string> flags;
  std::string flag_text = get("flags") ? *get("flags") : (get("Features") ? *get("Features") : "");
  for (const auto& f : split(flag_text, ' ')) {
    if (!f.empty()) flags.insert(f);
  }
  Json isa = Json::array();
  for (const char* f : kIsaFlags) {
    if (flags.count(f)) isa.push(f);
  }
  auto or_null = [](const std::optional<std::string>& v) { return v ? Json(*v) : Json(); };
  std::optional<std::string> cpu = get("model name");
  if (!cpu) cpu = get("Model");
  if (!cpu) cpu = get("Hardware");
  std::optional<std::string> board;
  if (!emulated) {
    board = read_text("/proc/device-tree/model");
    if (!board) board = get("Model");
  }
  std::string arch = machine();
  Json facts = Json::object();
  facts.set("machine", arch.empty() ? Json() : Json(arch));
  facts.set("cpu_model", or_null(cpu));
  facts.set("board", or_null(board));
  facts.set("logical_cores", logical_cores());
  facts.set("usable_cores", usable_cores());
  facts.set("isa", isa);
  facts.set("os", platform_string());
  facts.set("python", Json());
  facts.set("runtimes", Json::object().set(backend().runtime_key, runtime_version));
  facts.set("cpufreq_governor",
            emulated ? Json() : or_null(read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")));
  facts.set("cpu_max_mhz",
            emulated ? Json() : number_or_null(read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"), 1000));
  facts.set("soc_temp_c", emulated ? Json() : number_or_null(read_text("/sys/class/thermal/thermal_zone0/temp"), 1000));
  facts.set("throttled", emulated ? Json() : pi_throttled());
  facts.set("emulated", emulated);
  return facts;
}

}  // namespace edgekit
