// Element conversions between the dtypes edgekit-run handles: numpy's astype, float16 by bits.
#include <cmath>
#include <cstring>
#include <limits>

#include "npy.h"

namespace edgekit {

namespace {

// IEEE half <-> float, by bits.
float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while ((mant & 0x400) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds past the largest half: inf
  if (abs < 0x38800000) {  // a subnormal half (or zero): q x 2^-24
    if (abs < 0x33000000) return sign;  // below 2^-25: rounds to zero
    uint32_t exp = abs >> 23, mant = (abs & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exp;  // 14..24
    uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (q & 1))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t q = ((abs - 0x38000000) >> 13);
  uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (q & 1))) ++q;
  return sign | static_cast<uint16_t>(q);
}

double read_element(const char* p, DType dtype) {
  switch (dtype) {
    case DType::Bool: return *p != 0 ? 1.0 : 0.0;
    case DType::Int8: { int8_t v; std::memcpy(&v, p, 1); return v; }
    case DType::UInt8: { uint8_t v; std::memcpy(&v, p, 1); return v; }
    case DType::Int16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::UInt16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::Int32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::UInt32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::Int64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::UInt64: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::Float16: { uint16_t v; std::memcpy(&v, p, 2); return half_to_float(v); }
    case DType::Float32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::Float64: { double v; std::memcpy(&v, p, 8); return v; }
  }
  return 0.0;
}

template <typename T>
T float_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <typename T>
void store(char* p, T v) { std::memcpy(p, &v, sizeof v); }

// One element from src (dtype from) to dst (dtype to); integers travel as 64-bit so that large
// int64 values survive an integer-to-integer cast exactly (wrapping as numpy's does).
void convert(const char* src, DType from, char* dst, DType to) {
  char kf = dtype_kind(from);
  if (dtype_kind(to) == 'f' || to == DType::Bool || kf == 'f') {
    double v = read_element(src, from);
    switch (to) {
      case DType::Bool: *dst = v != 0.0 || std::isnan(v) ? 1 : 0; return;
      case DType::Float16: store(dst, float_to_half(static_cast<float>(v))); return;
      case DType::Float32: store(dst, static_cast<float>(v)); return;
      case DType::Float64: store(dst, v); return;
      case DType::Int8: store(dst, float_to_int<int8_t>(v)); return;
      case DType::UInt8: store(dst, float_to_int<uint8_t>(v)); return;
      case DType::Int16: store(dst, float_to_int<int16_t>(v)); return;
      case DType::UInt16: store(dst, float_to_int<uint16_t>(v)); return;
      case DType::Int32: store(dst, float_to_int<int32_t>(v)); return;
      case DType::UInt32: store(dst, float_to_int<uint32_t>(v)); return;
      case DType::Int64: store(dst, float_to_int<int64_t>(v)); return;
      case DType::UInt64: store(dst, float_to_int<uint64_t>(v)); return;
    }
  }
  uint64_t bits = 0;  // integer or bool source, integer destination: two's complement truncation
  switch (from) {
    case DType::Bool: bits = *src != 0; break;
    case DType::Int8: { int8_t v; std::memcpy(&v, src, 1); bits = static_cast<uint64_t>(static_cast<int64_t>(v)); break; }
    case DType::Int16: { int16_t v; std::memcpy(&v, src, 2); bits = static_cast<uint64_t>(static_cast<int64_t>(v)); break; }
    case DType::Int32: { int32_t v; std::memcpy(&v, src, 4); bits = static_cast<uint64_t>(static_cast<int64_t>(v)); break; }
    case DType::Int64: { int64_t v; std::memcpy(&v, src, 8); bits = static_cast<uint64_t>(v); break; }
    default: std::memcpy(&bits, src, dtype_size(from)); break;  // unsigned: zero-extended
  }
  std::memcpy(dst, &bits, dtype_size(to));
}

}  // namespace

Array cast_array(const Array& array, DType to) {
  Array out;
  out.dtype = to;
  out.shape = array.shape;
  size_t n = array.data.size() / dtype_size(array.dtype);
  out.data.assign(n * dtype_size(to), '\0');
  for (size_t i = 0; i < n; ++i) {
    convert(&array.data[i * dtype_size(array.dtype)], array.dtype, &out.data[i * dtype_size(to)], to);
  }
  return out;
}

std::vector<double> to_doubles(const Array& array) {
  size_t item = dtype_size(array.dtype), n = array.data.size() / item;
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = read_element(&array.data[i * item], array.dtype);
  return out;
}

}  // namespace edgekit
