// Files and paths: bounded reads, atomic writes (temporary name in the same folder, then rename),
// and the path arithmetic Python's pathlib does for the messages and documents.
#pragma once

#include <cstdint>
#include <string>

namespace edgekit {

bool is_file(const std::string& path);
bool is_dir(const std::string& path);
// Whether a and b name the same existing file (device and inode).
bool same_file(const std::string& a, const std::string& b);
int64_t file_size(const std::string& path);  // -1 when it cannot be stat'ed

// The whole file, refusing one larger than max_bytes; UsageError naming `what` otherwise.
std::string read_file(const std::string& path, uint64_t max_bytes, const std::string& what);

// UsageError unless `path` (given as `flag`) is a regular file or nothing yet: a rename over a
// device (/dev/null), a FIFO, a socket, a folder or a symbolic link would replace what is there
// (or write where the link points), so those are refused, as edgekit.core.outputs.check_report_paths does.
void check_output_path(const std::string& path, const std::string& flag);

// Writes data to a temporary file beside path (".NAME.XXXXXX.tmp"), fsyncs it, gives it the mode a
// plain open() would (0666 & ~umask) and renames it over path. With make_parents, creates missing
// folders first (as runner.py's write_json_atomic). check_output_path(path, flag) holds before the
// temporary is made and again right before the rename. UsageError when it cannot.
void write_file_atomic(const std::string& path, const std::string& data, bool make_parents, const std::string& flag);

// str(pathlib.PurePath(text)): repeated and trailing slashes and "." parts dropped.
std::string normalize_path(const std::string& text);
std::string dirname_of(const std::string& path);   // "" -> "."
std::string basename_of(const std::string& path);
std::string join_path(const std::string& folder, const std::string& name);
// pathlib's resolve(): the absolute path with links resolved as far as it exists.
std::string resolve_path(const std::string& path);
// The folder of the running binary (resolved), from /proc/self/exe.
std::string executable_dir();

}  // namespace edgekit
