// Text helpers: UTF-8, Python-style formatting (repr of a string, "{:g}"), printf into a string.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edgekit {

// Length of the valid UTF-8 sequence at text[at] (0 when it is not one); its code point in *code.
size_t utf8_sequence(const std::string& text, size_t at, uint32_t* code);
// Index of the first byte that is not part of valid UTF-8, or npos.
size_t first_invalid_utf8(const std::string& text);
void append_utf8(std::string& out, uint32_t code);

// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Python's format(value, spec) for a float and spec "g", ".6g", ".4f"... (nan/inf spelled as Python does).
std::string py_format(double value, const char* spec);
// Python's repr() of a str (quotes chosen as Python does; non-printable characters escaped).
std::string py_repr(const std::string& text);
// The first `limit` characters (code points) of text.
std::string head_chars(const std::string& text, size_t limit);
// The first line of text, control characters replaced with spaces, at most `limit` characters.
std::string one_line(const std::string& text, size_t limit = 300);

std::string trim(const std::string& text);
std::vector<std::string> split(const std::string& text, char sep);
std::string join(const std::vector<std::string>& parts, const std::string& sep);
bool starts_with(const std::string& text, const std::string& prefix);
bool ends_with(const std::string& text, const std::string& suffix);

}  // namespace edgekit
