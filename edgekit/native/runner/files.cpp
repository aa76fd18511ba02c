// Files and paths (see files.h).
#include "files.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "errors.h"
#include "text.h"

namespace edgekit {

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

int64_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

std::string read_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw UsageError(what + " not found: " + path);
    throw UsageError("cannot read " + what + " " + path + ": " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UsageError(what + " " + path + " is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw UsageError(format("%s %s is larger than %llu MiB; refusing to read it", what.c_str(), path.c_str(),
                            static_cast<unsigned long long>(max_bytes >> 20)));
  }
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd, &data[got], data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the file shrank meanwhile: what is there is what we read
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(got);
  return data;
}

namespace {

void make_folders(const std::string& folder) {
  if (folder.empty() || is_dir(folder)) return;
  make_folders(dirname_of(folder));
  if (::mkdir(folder.c_str(), 0777) != 0 && errno != EEXIST) {
    throw UsageError("cannot create the folder " + folder + ": " + std::strerror(errno));
  }
}

}  // namespace

void check_output_path(const std::string& path, const std::string& flag) {
  std::string shown = head_chars(path, 300);
  if (path.empty()) throw UsageError(flag + " must name a file");
  std::string name = basename_of(path);
  if (name == "." || name == ".." || name == "/" || path.back() == '/') {
    throw UsageError(flag + " " + shown + " must name a file");
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;  // absent (or its folder is: writing says so)
  const char* what = nullptr;
  if (S_ISLNK(st.st_mode)) {
    throw UsageError(flag + " " + shown + " is a symbolic link; give a plain file path");
  } else if (S_ISDIR(st.st_mode)) {
    throw UsageError(flag + " " + shown + " is a folder; give a file path");
  } else if (S_ISFIFO(st.st_mode)) {
    what = "a FIFO";
  } else if (S_ISCHR(st.st_mode)) {
    what = "a character device";
  } else if (S_ISBLK(st.st_mode)) {
    what = "a block device";
  } else if (S_ISSOCK(st.st_mode)) {
    what = "a socket";
  } else if (!S_ISREG(st.st_mode)) {
    what = "a special file";
  }
  if (what != nullptr) throw UsageError(flag + " " + shown + " is " + what + ", not a regular file; give a file path");
}

void write_file_atomic(const std::string& path, const std::string& data, bool make_parents, const std::string& flag) {
  check_output_path(path, flag);
  std::string folder = dirname_of(path);
  if (make_parents) make_folders(folder);
  std::string templ = join_path(folder, "." + basename_of(path) + ".XXXXXX.tmp");
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back('\0');
  int fd = ::mkostemps(name.data(), 4, O_CLOEXEC);
  if (fd < 0) throw UsageError("cannot write " + path + ": " + std::strerror(errno));
  std::string tmp(name.data());
  size_t done = 0;
  bool ok = true;
  while (ok && done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false;
    else done += static_cast<size_t>(n);
  }
  int saved = errno;
  mode_t mask = ::umask(0);
  ::umask(mask);
  ok = ok && ::fsync(fd) == 0 && ::fchmod(fd, 0666 & ~mask) == 0;
  if (!ok) saved = errno;
  ok = ::close(fd) == 0 && ok;
  if (ok) {
    try {
      check_output_path(path, flag);  // what is there may have changed while the program ran
    } catch (const UsageError&) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    saved = errno;
    ok = false;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    throw UsageError("cannot write " + path + ": " + std::strerror(saved ? saved : EIO));
  }
}

std::string normalize_path(const std::string& text) {
  if (text.empty()) return ".";
  bool absolute = text[0] == '/';
  std::vector<std::string> parts;
  for (const auto& part : split(text, '/')) {
    if (part.empty() || part == ".") continue;
    parts.push_back(part);
  }
  std::string out = (absolute ? "/" : "") + join(parts, "/");
  return out.empty() ? "." : out;
}

std::string dirname_of(const std::string& path) {
  std::string p = normalize_path(path);
  size_t at = p.rfind('/');
  if (at == std::string::npos) return ".";
  if (at == 0) return "/";
  return p.substr(0, at);
}

std::string basename_of(const std::string& path) {
  std::string p = normalize_path(path);
  size_t at = p.rfind('/');
  return at == std::string::npos ? p : p.substr(at + 1);
}

std::string join_path(const std::string& folder, const std::string& name) {
  if (!name.empty() && name[0] == '/') return normalize_path(name);
  if (folder.empty() || folder == ".") return normalize_path(name);
  return normalize_path(folder + "/" + name);
}

std::string resolve_path(const std::string& path) {
  std::string absolute = path;
  if (absolute.empty() || absolute[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd)) absolute = std::string(cwd) + "/" + absolute;
  }
  // Resolve the longest existing prefix, then add the rest (".." taken lexically there).
  std::vector<std::string> parts;
  for (const auto& part : split(absolute, '/')) {
    if (!part.empty() && part != ".") parts.push_back(part);
  }
  std::string resolved = "/";
  size_t i = 0;
  for (; i < parts.size(); ++i) {
    std::string next = resolved == "/" ? "/" + parts[i] : resolved + "/" + parts[i];
    char buf[PATH_MAX];
    if (!::realpath(next.c_str(), buf)) break;
    resolved = buf;
  }
  for (; i < parts.size(); ++i) {
    if (parts[i] == "..") {
      resolved = dirname_of(resolved);
    } else {
      resolved = resolved == "/" ? "/" + parts[i] : resolved + "/" + parts[i];
    }
  }
  return resolved;
}

std::string executable_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return dirname_of(buf);
}

}  // namespace edgekit
