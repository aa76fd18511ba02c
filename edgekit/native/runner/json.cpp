// JSON writing (as Python's json.dumps) and strict, bounded parsing.
#include "json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "text.h"

namespace edgekit {

Json& Json::push(Json value) {
  items_.push_back(std::move(value));
  return *this;
}

Json& Json::set(const std::string& key, Json value) {
  for (auto& member : members_) {
    if (member.first == key) {
      member.second = std::move(value);
      return *this;
    }
  }
  members_.emplace_back(key, std::move(value));
  return *this;
}

const Json* Json::find(const std::string& key) const {
  if (type_ != Type::Object) return nullptr;
  for (const auto& member : members_) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

std::string python_float_repr(double value) {
  char buf[64];
  auto done = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string sci(buf, done.ptr);
  bool negative = !sci.empty() && sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_at = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e_at; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  int exponent = std::atoi(sci.c_str() + e_at + 1);
  int decpt = exponent + 1;  // value = 0.DIGITS x 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char tail[32];
    std::snprintf(tail, sizeof tail, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + tail;
  }
  int n = static_cast<int>(digits.size());
  if (decpt <= 0) return out + "0." + std::string(-decpt, '0') + digits;
  if (decpt >= n) return out + digits + std::string(decpt - n, '0') + ".0";
  return out + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

namespace {

void append_escape(std::string& out, unsigned code) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", code & 0xffff);
  out += buf;
}

}  // namespace

std::string json_quote(const std::string& text) {
  std::string out = "\"";
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7f) append_escape(out, c);
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    uint32_t code = 0;
    size_t length = utf8_sequence(text, i, &code);
    if (length == 0) {  // not UTF-8: as Python's surrogateescape shows the byte
      append_escape(out, 0xdc00 + c);
      ++i;
      continue;
    }
    if (code >= 0x10000) {
      code -= 0x10000;
      append_escape(out, 0xd800 + (code >> 10));
      append_escape(out, 0xdc00 + (code & 0x3ff));
    } else {
      append_escape(out, code);
    }
    i += length;
  }
  return out + "\"";
}

std::string Json::dump(int indent, bool sort_keys) const {
  std::string out;
  dump_to(out, indent, sort_keys, 0);
  return out;
}

void Json::dump_to(std::string& out, int indent, bool sort_keys, int level) const {
  auto newline = [&](int at) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * at, ' ');
  };
  switch (type_) {
    case Type::Null: out += "null"; return;
    case Type::Bool: out += bool_ ? "true" : "false"; return;
    case Type::Int: out += std::to_string(int_); return;
    case Type::Float:
      if (std::isnan(float_)) out += "NaN";
      else if (std::isinf(float_)) out += float_ > 0 ? "Infinity" : "-Infinity";
      else out += python_float_repr(float_);
      return;
    case Type::String: out += json_quote(string_); return;
    case Type::Array: {
      if (items_.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        items_[i].dump_to(out, indent, sort_keys, level + 1);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    }
    case Type::Object: {
      if (members_.empty()) { out += "{}"; return; }
      std::vector<const std::pair<std::string, Json>*> order;
      for (const auto& member : members_) order.push_back(&member);
      if (sort_keys) {
        std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
          return a->first < b->first;  // byte order of UTF-8 is code point order, as Python sorts
        });
      }
      out += '{';
      for (size_t i = 0; i < order.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        out += json_quote(order[i]->first);
        out += ": ";
        order[i]->second.dump_to(out, indent, sort_keys, level + 1);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Parsing

namespace {

class Parser {
 public:
  Parser(const std::string& text, int max_depth) : text_(text), max_depth_(max_depth) {}

  bool document(Json* out) {
    skip_space();
    if (!value(out, 0)) return false;
    skip_space();
    if (pos_ != text_.size()) return fail("extra data after the JSON value");
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  bool fail(const std::string& why) {
    if (error_.empty()) error_ = why + " at character " + std::to_string(pos_);
    return false;
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (text_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  bool value(Json* out, int depth) {
    if (pos_ >= text_.size()) return fail("expecting a value");
    char c = text_[pos_];
    if (c == '{' || c == '[') {
      if (depth >= max_depth_) return fail("nested deeper than " + std::to_string(max_depth_) + " levels");
      return c == '{' ? object(out, depth + 1) : array(out, depth + 1);
    }
    if (c == '"') {
      std::string s;
      if (!string(&s)) return false;
      *out = Json(std::move(s));
      return true;
    }
    if (literal("true")) { *out = Json(true); return true; }
    if (literal("false")) { *out = Json(false); return true; }
    if (literal("null")) { *out = Json(); return true; }
    if (literal("NaN")) { *out = Json(std::nan("")); return true; }
    if (literal("Infinity")) { *out = Json(HUGE_VAL); return true; }
    if (literal("-Infinity")) { *out = Json(-HUGE_VAL); return true; }
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    return fail("expecting a value");
  }

  bool object(Json* out, int depth) {
    *out = Json::object();
    ++pos_;  // {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '}') { ++pos_; return true; }
    while (true) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') return fail("expecting a property name in double quotes");
      std::string key;
      if (!string(&key)) return false;
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ':') return fail("expecting ':'");
      ++pos_;
      skip_space();
      Json item;
      if (!value(&item, depth)) return false;
      out->set(key, std::move(item));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < text_.size() && text_[pos_] == '}') { ++pos_; return true; }
      return fail("expecting ',' or '}'");
    }
  }

  bool array(Json* out, int depth) {
    *out = Json::array();
    ++pos_;  // [
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == ']') { ++pos_; return true; }
    while (true) {
      skip_space();
      Json item;
      if (!value(&item, depth)) return false;
      out->push(std::move(item));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < text_.size() && text_[pos_] == ']') { ++pos_; return true; }
      return fail("expecting ',' or ']'");
    }
  }

  bool hex4(uint32_t* code) {
    if (pos_ + 4 > text_.size()) return fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_ + i];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= h - '0';
      else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
      else return fail("invalid \\u escape");
    }
    pos_ += 4;
    *code = v;
    return true;
  }

  bool string(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= text_.size()) return fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') { ++pos_; return true; }
      if (c < 0x20) return fail("invalid control character in a string");
      if (c != '\\') { *out += static_cast<char>(c); ++pos_; continue; }
      ++pos_;
      if (pos_ >= text_.size()) return fail("unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          uint32_t code;
          if (!hex4(&code)) return false;
          if (code >= 0xd800 && code < 0xdc00 && text_.compare(pos_, 2, "\\u") == 0) {
            size_t save = pos_;
            pos_ += 2;
            uint32_t low;
            if (!hex4(&low)) return false;
            if (low >= 0xdc00 && low < 0xe000) code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            else pos_ = save;
          }
          append_utf8(*out, code);
          break;
        }
        default: return fail("invalid escape");
      }
    }
  }

  bool number(Json* out) {
    size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !(text_[pos_] >= '0' && text_[pos_] <= '9')) return fail("expecting a value");
    if (text_[pos_] == '0') ++pos_;
    else while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    bool integer = true;
    if (pos_ < text_.size() && text_[pos_] == '.' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' &&
        text_[pos_ + 1] <= '9') {
      integer = false;
      ++pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      size_t save = pos_++;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        integer = false;
        while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      } else {
        pos_ = save;  // as Python: "1e" is the number 1 followed by junk
      }
    }
    std::string literal_text = text_.substr(start, pos_ - start);
    if (integer) {
      int64_t v = 0;
      auto done = std::from_chars(literal_text.data(), literal_text.data() + literal_text.size(), v);
      if (done.ec == std::errc() && done.ptr == literal_text.data() + literal_text.size()) {
        *out = Json(static_cast<long long>(v));
      } else {
        *out = Json::big_integer(std::strtod(literal_text.c_str(), nullptr));
      }
      return true;
    }
    *out = Json(std::strtod(literal_text.c_str(), nullptr));
    return true;
  }

  const std::string& text_;
  int max_depth_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

bool parse_json(const std::string& text, int max_depth, Json* out, std::string* error) {
  size_t bad = first_invalid_utf8(text);
  if (bad != std::string::npos) {
    *error = "invalid UTF-8 at byte " + std::to_string(bad);
    return false;
  }
  Parser parser(text, max_depth);
  if (!parser.document(out)) {
    *error = parser.error();
    return false;
  }
  return true;
}

bool parse_flat_object(const std::string& text, Json* out) {
  std::string error;
  if (!parse_json(text, 1, out, &error) || !out->is_object()) return false;
  for (const auto& member : out->members()) {  // depth 1 keeps arrays and objects out already
    if (member.second.is_array() || member.second.is_object()) return false;
  }
  return true;
}

}  // namespace edgekit
