// .npy reading and writing, dtype conversions.
#include "npy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "errors.h"
#include "text.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "edgekit-run assumes a little-endian host");

namespace edgekit {

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  char kind;
  size_t size;
};

constexpr DTypeInfo kTypes[] = {
    {DType::Bool, "bool", 'b', 1},       {DType::Int8, "int8", 'i', 1},       {DType::UInt8, "uint8", 'u', 1},
    {DType::Int16, "int16", 'i', 2},     {DType::UInt16, "uint16", 'u', 2},   {DType::Int32, "int32", 'i', 4},
    {DType::UInt32, "uint32", 'u', 4},   {DType::Int64, "int64", 'i', 8},     {DType::UInt64, "uint64", 'u', 8},
    {DType::Float16, "float16", 'f', 2}, {DType::Float32, "float32", 'f', 4}, {DType::Float64, "float64", 'f', 8},
};

const DTypeInfo& info(DType dtype) { return kTypes[static_cast<int>(dtype)]; }

constexpr size_t kMaxHeader = 10000;  // numpy's default max_header_size

bool find_type(char kind, size_t size, DType* dtype) {
  for (const auto& t : kTypes) {
    if (t.kind == kind && t.size == size) {
      *dtype = t.dtype;
      return true;
    }
  }
  return false;
}

// --- the header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (1, 10), }

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  void parse(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    space();
    expect('{');
    while (true) {
      space();
      if (peek() == '}') { ++i_; break; }
      std::string key = quoted();
      space();
      expect(':');
      space();
      if (key == "descr" && !seen_descr) {
        if (peek() != '\'' && peek() != '"') bad("its dtype is not a plain type (a structured dtype?)");
        *descr = quoted();
        seen_descr = true;
      } else if (key == "fortran_order" && !seen_fortran) {
        *fortran = boolean();
        seen_fortran = true;
      } else if (key == "shape" && !seen_shape) {
        *shape = tuple();
        seen_shape = true;
      } else {
        bad("its header has an unexpected key " + py_repr(key.substr(0, 40)));
      }
      space();
      if (peek() == ',') { ++i_; continue; }
      space();
      expect('}');
      break;
    }
    space();
    if (i_ != s_.size()) bad("its header has text after the dict");
    if (!seen_descr || !seen_fortran || !seen_shape) bad("its header lacks descr, fortran_order or shape");
  }

 private:
  [[noreturn]] void bad(const std::string& why) { throw UsageError(where_ + " is not a readable .npy array (" + why + ")"); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(format("its header is malformed at byte %zu", i_));
    ++i_;
  }
  std::string quoted() {
    char q = peek();
    if (q != '\'' && q != '"') bad(format("its header is malformed at byte %zu", i_));
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\' || static_cast<unsigned char>(s_[i_]) < 0x20) bad("its header holds an escaped string");
      out += s_[i_++];
    }
    expect(q);
    return out;
  }
  bool boolean() {
    if (s_.compare(i_, 4, "True") == 0) { i_ += 4; return true; }
    if (s_.compare(i_, 5, "False") == 0) { i_ += 5; return false; }
    bad("its fortran_order is not True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (true) {
      space();
      if (peek() == ')') { ++i_; break; }
      bool negative = false;
      if (peek() == '-') { negative = true; ++i_; }
      if (!(peek() >= '0' && peek() <= '9')) bad("its shape is not a tuple of integers");
      uint64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (static_cast<uint64_t>(1) << 62)) bad("its shape has a dimension too large");
        v = v * 10 + static_cast<uint64_t>(peek() - '0');
        ++i_;
      }
      if (negative && v != 0) bad("its shape has a negative dimension");
      if (v > (static_cast<uint64_t>(1) << 62)) bad("its shape has a dimension too large");
      dims.push_back(static_cast<int64_t>(v));
      if (dims.size() > 64) bad("its shape has more than 64 dimensions");
      space();
      if (peek() == ',') { ++i_; continue; }
      expect(')');
      break;
    }
    return dims;
  }

  const std::string& s_;
  const std::string& where_;
  size_t i_ = 0;
};

void swap_bytes(std::string& data, size_t size) {
  if (size <= 1) return;
  for (size_t at = 0; at + size <= data.size(); at += size) {
    for (size_t k = 0; k < size / 2; ++k) std::swap(data[at + k], data[at + size - 1 - k]);
  }
}

// Column-major element order to row-major.
std::string fortran_to_c(const std::string& data, const std::vector<int64_t>& shape, size_t item) {
  size_t ndim = shape.size();
  if (ndim <= 1 || data.empty()) return data;
  std::string out(data.size(), '\0');
  std::vector<int64_t> index(ndim, 0);
  std::vector<uint64_t> stride(ndim, 1);  // F-order strides, in elements
  for (size_t k = 1; k < ndim; ++k) stride[k] = stride[k - 1] * static_cast<uint64_t>(shape[k - 1]);
  size_t count = data.size() / item;
  for (size_t n = 0; n < count; ++n) {
    uint64_t from = 0;
    for (size_t k = 0; k < ndim; ++k) from += static_cast<uint64_t>(index[k]) * stride[k];
    std::memcpy(&out[n * item], &data[from * item], item);
    for (size_t k = ndim; k-- > 0;) {  // the next C-order index
      if (++index[k] < shape[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }
const char* dtype_name(DType dtype) { return info(dtype).name; }
char dtype_kind(DType dtype) { return info(dtype).kind; }

bool dtype_from_name(const std::string& raw, DType* dtype) {
  std::string name = raw;
  if (!name.empty() && (name[0] == '<' || name[0] == '|' || name[0] == '=')) name = name.substr(1);
  for (const auto& t : kTypes) {
    if (name == t.name) { *dtype = t.dtype; return true; }
  }
  static const struct { const char* alias; DType dtype; } aliases[] = {
      {"?", DType::Bool}, {"b1", DType::Bool}, {"i1", DType::Int8}, {"b", DType::Int8}, {"u1", DType::UInt8},
      {"B", DType::UInt8}, {"i2", DType::Int16}, {"h", DType::Int16}, {"u2", DType::UInt16}, {"H", DType::UInt16},
      {"i4", DType::Int32}, {"i", DType::Int32}, {"u4", DType::UInt32}, {"I", DType::UInt32}, {"i8", DType::Int64},
      {"l", DType::Int64}, {"q", DType::Int64}, {"int", DType::Int64}, {"u8", DType::UInt64}, {"L", DType::UInt64},
      {"Q", DType::UInt64}, {"f2", DType::Float16}, {"e", DType::Float16}, {"half", DType::Float16},
      {"f4", DType::Float32}, {"f", DType::Float32}, {"single", DType::Float32}, {"f8", DType::Float64},
      {"d", DType::Float64}, {"float", DType::Float64}, {"double", DType::Float64},
  };
  for (const auto& a : aliases) {
    if (name == a.alias) { *dtype = a.dtype; return true; }
  }
  return false;
}

uint64_t Array::count() const {
  uint64_t n = 0;
  return element_count(shape, &n) ? n : 0;
}

std::string Array::dtype_str() const {
  if (!big_endian) return dtype_name(dtype);
  return format(">%c%zu", dtype_kind(dtype) == 'b' ? 'b' : dtype_kind(dtype), dtype_size(dtype));
}

std::string shape_text(const std::vector<int64_t>& shape, const char* sep) {
  std::vector<std::string> parts;
  for (int64_t d : shape) parts.push_back(std::to_string(d));
  return join(parts, sep);
}

std::string shape_list(const std::vector<int64_t>& shape) { return "[" + shape_text(shape, ", ") + "]"; }

bool element_count(const std::vector<int64_t>& shape, uint64_t* count) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *count = n;
  return true;
}

Array parse_npy(const char* data, size_t size, const std::string& where) {
  auto bad = [&](const std::string& why) -> UsageError {
    return UsageError(where + " is not a readable .npy array (" + why + ")");
  };
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) throw bad("no .npy magic string");
  unsigned major = static_cast<unsigned char>(data[6]), minor = static_cast<unsigned char>(data[7]);
  size_t header_len, offset;
  if (major == 1 && minor == 0) {
    header_len = static_cast<unsigned char>(data[8]) | (static_cast<size_t>(static_cast<unsigned char>(data[9])) << 8);
    offset = 10;
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (size < 12) throw bad("truncated header");
    header_len = 0;
    for (int k = 3; k >= 0; --k) header_len = (header_len << 8) | static_cast<unsigned char>(data[8 + k]);
    offset = 12;
  } else {
    throw bad(format("unsupported .npy version %u.%u", major, minor));
  }
  if (header_len > kMaxHeader) throw bad(format("header of %zu bytes, more than %zu", header_len, kMaxHeader));
  if (header_len > size - offset) throw bad("truncated header");
  std::string header(data + offset, header_len);
  offset += header_len;
  if (first_invalid_utf8(header) != std::string::npos) throw bad("header is not text");

  std::string descr;
  bool fortran = false;
  Array array;
  HeaderParser(header, where).parse(&descr, &fortran, &array.shape);

  if (descr.size() >= 2 && (descr[0] == '|' || descr[0] == '<' || descr[0] == '>' || descr[0] == '=') &&
      descr[1] == 'O') {
    throw UsageError(where + " holds Python objects (a pickle, allow_pickle); refusing to load it");
  }
  char order = descr.empty() ? '?' : descr[0];
  std::string code = (order == '<' || order == '>' || order == '|' || order == '=') ? descr.substr(1) : descr;
  if (code.size() < 2 || code.size() > 3 || !(code[1] >= '1' && code[1] <= '8') ||
      (code.size() == 3 && !(code[2] >= '0' && code[2] <= '9'))) {
    throw bad("unsupported dtype " + py_repr(descr.substr(0, 20)));
  }
  size_t item = static_cast<size_t>(std::stoi(code.substr(1)));
  DType dtype;
  if (!find_type(code[0], item, &dtype)) {
    throw bad("unsupported dtype " + py_repr(descr.substr(0, 20)) +
              "; edgekit-run reads bool, int8..int64, uint8..uint64 and float16..float64");
  }
  array.dtype = dtype;
  array.big_endian = order == '>' && item > 1;

  uint64_t count;
  if (!element_count(array.shape, &count)) throw bad("its shape's element count overflows");
  uint64_t bytes;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(item), &bytes) || bytes != size - offset) {
    throw UsageError(format("%s is malformed: its header claims shape %s of %s but %zu bytes follow", where.c_str(),
                            shape_list(array.shape).c_str(), dtype_name(dtype), size - offset));
  }
  array.data.assign(data + offset, static_cast<size_t>(bytes));
  if (array.big_endian) swap_bytes(array.data, item);
  if (fortran) array.data = fortran_to_c(array.data, array.shape, item);
  return array;
}

std::string write_npy(const Array& array) {
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    if (i) shape += ", ";
    shape += std::to_string(array.shape[i]);
  }
  shape += array.shape.size() == 1 ? ",)" : ")";
  const char* order = dtype_size(array.dtype) == 1 ? "|" : "<";
  std::string descr = format("%s%c%zu", order, dtype_kind(array.dtype), dtype_size(array.dtype));
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  if (!array.shape.empty()) header += std::string(21 - std::to_string(array.shape[0]).size(), ' ');
  size_t hlen = header.size() + 1;
  size_t padlen = 64 - ((6 + 2 + 2 + hlen) % 64);
  size_t total = hlen + padlen;
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(total & 0xff);
  out += static_cast<char>((total >> 8) & 0xff);
  out += header + std::string(padlen, ' ') + "\n";
  return out + array.data;  // written arrays are always in native (little-endian) order
}

bool append_rows(Array& joined, const Array& part) {
  if (part.shape.empty() || joined.shape.size() != part.shape.size() || joined.dtype != part.dtype ||
      joined.big_endian != part.big_endian ||
      !std::equal(part.shape.begin() + 1, part.shape.end(), joined.shape.begin() + 1)) {
    return false;
  }
  joined.shape[0] += part.shape[0];
  joined.data += part.data;
  return true;
}

}  // namespace edgekit
