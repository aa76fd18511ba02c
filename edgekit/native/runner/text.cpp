// Text helpers (see text.h).
#include "text.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace edgekit {

size_t utf8_sequence(const std::string& text, size_t at, uint32_t* code) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char c = byte(at);
  size_t length;
  uint32_t value;
  if (c < 0x80) { *code = c; return 1; }
  if (c >= 0xc2 && c <= 0xdf) { length = 2; value = c & 0x1f; }
  else if (c >= 0xe0 && c <= 0xef) { length = 3; value = c & 0x0f; }
  else if (c >= 0xf0 && c <= 0xf4) { length = 4; value = c & 0x07; }
  else return 0;
  if (at + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    unsigned char next = byte(at + i);
    if ((next & 0xc0) != 0x80) return 0;
    value = (value << 6) | (next & 0x3f);
  }
  if ((length == 3 && value < 0x800) || (length == 4 && (value < 0x10000 || value > 0x10ffff))) return 0;
  if (value >= 0xd800 && value < 0xe000) return 0;  // surrogates are not UTF-8
  *code = value;
  return length;
}

size_t first_invalid_utf8(const std::string& text) {
  size_t i = 0;
  uint32_t code;
  while (i < text.size()) {
    size_t n = utf8_sequence(text, i, &code);
    if (n == 0) return i;
    i += n;
  }
  return std::string::npos;
}

void append_utf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xc0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xe0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(&out[0], out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

std::string py_format(double value, const char* spec) {
  std::string s(spec);
  bool percent = !s.empty() && s.back() == '%';
  if (percent) {
    value *= 100.0;
    s.back() = 'f';
  }
  std::string out;
  if (std::isnan(value)) out = "nan";
  else if (std::isinf(value)) out = value > 0 ? "inf" : "-inf";
  else out = format(("%" + s).c_str(), value);
  return percent ? out + "%" : out;
}

std::string py_repr(const std::string& text) {
  bool has_single = text.find('\'') != std::string::npos;
  bool has_double = text.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    uint32_t code;
    size_t n = utf8_sequence(text, i, &code);
    if (n == 0) {
      out += format("\\udc%02x", c);
      ++i;
      continue;
    }
    i += n;
    if (code == static_cast<uint32_t>(quote) || code == '\\') {
      out += '\\';
      out += static_cast<char>(code);
    } else if (code == '\t') {
      out += "\\t";
    } else if (code == '\n') {
      out += "\\n";
    } else if (code == '\r') {
      out += "\\r";
    } else if (code < 0x20 || code == 0x7f || (code >= 0x80 && code < 0xa0)) {
      out += format("\\x%02x", code);
    } else {
      append_utf8(out, code);
    }
  }
  return out + quote;
}

std::string head_chars(const std::string& text, size_t limit) {
  size_t i = 0, count = 0;
  uint32_t code;
  while (i < text.size() && count < limit) {
    size_t n = utf8_sequence(text, i, &code);
    i += n ? n : 1;
    ++count;
  }
  return text.substr(0, i);
}

std::string one_line(const std::string& text, size_t limit) {
  std::string first = text.substr(0, text.find('\n'));
  std::string line;
  size_t i = 0;
  uint32_t code;
  while (i < first.size()) {  // control characters as spaces, bytes that are not UTF-8 as \xNN
    size_t n = utf8_sequence(first, i, &code);
    if (n == 0) {
      line += format("\\x%02x", static_cast<unsigned char>(first[i]));
      ++i;
      continue;
    }
    if (code < 0x20 || code == 0x7f) line += ' ';
    else line.append(first, i, n);
    i += n;
  }
  return head_chars(trim(line), limit);
}

std::string trim(const std::string& text) {
  const char* space = " \t\r\n\v\f";
  size_t begin = text.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(space);
  return text.substr(begin, end - begin + 1);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace edgekit
