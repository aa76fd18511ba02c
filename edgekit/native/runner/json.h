// A small JSON value: what edgekit-run writes (Python json.dumps byte for byte: ensure_ascii, float
// repr, indent/sort_keys) and reads (manifest.json, bundle.json, serve commands), strictly.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace edgekit {

class Json {
 public:
  enum class Type { Null, Bool, Int, Float, String, Array, Object };

  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool value) : type_(Type::Bool), bool_(value) {}
  Json(int value) : type_(Type::Int), int_(value) {}
  Json(long value) : type_(Type::Int), int_(value) {}
  Json(long long value) : type_(Type::Int), int_(value) {}
  Json(unsigned value) : type_(Type::Int), int_(value) {}
  Json(unsigned long value) : type_(Type::Int), int_(static_cast<int64_t>(value)) {}
  Json(unsigned long long value) : type_(Type::Int), int_(static_cast<int64_t>(value)) {}
  Json(double value) : type_(Type::Float), float_(value) {}
  Json(const char* value) : type_(Type::String), string_(value) {}
  Json(std::string value) : type_(Type::String), string_(std::move(value)) {}

  static Json array() { Json j; j.type_ = Type::Array; return j; }
  static Json object() { Json j; j.type_ = Type::Object; return j; }
  // An integer literal too large for int64 (kept as a double, flagged: never taken as a count).
  static Json big_integer(double approx) { Json j(approx); j.big_integer_ = true; return j; }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }
  bool is_big_integer() const { return big_integer_; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }
  double as_double() const { return type_ == Type::Int ? static_cast<double>(int_) : float_; }
  const std::string& as_string() const { return string_; }
  const std::vector<Json>& items() const { return items_; }
  const std::vector<std::pair<std::string, Json>>& members() const { return members_; }

  Json& push(Json value);
  // Sets key (replacing an earlier value in place, as a Python dict does); returns *this.
  Json& set(const std::string& key, Json value);
  const Json* find(const std::string& key) const;

  // json.dumps(value, indent=indent, sort_keys=sort_keys); indent < 0 is the compact form.
  std::string dump(int indent = -1, bool sort_keys = false) const;

 private:
  void dump_to(std::string& out, int indent, bool sort_keys, int level) const;

  Type type_ = Type::Null;
  bool bool_ = false;
  bool big_integer_ = false;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string string_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

// Parses one JSON text (as Python's json.loads: NaN/Infinity accepted, duplicate keys: the last
// wins). Nesting deeper than max_depth, invalid UTF-8 or trailing text is an error: returns false
// and sets *error.
bool parse_json(const std::string& text, int max_depth, Json* out, std::string* error);

// A serve command: one JSON object whose values are strings, integers, booleans or null.
bool parse_flat_object(const std::string& text, Json* out);

// repr(float) of Python (shortest round-trip digits) for a finite value.
std::string python_float_repr(double value);
// A JSON string literal as json.dumps writes it (ensure_ascii; invalid UTF-8 bytes as \udcXX).
std::string json_quote(const std::string& text);

}  // namespace edgekit
