// numpy arrays in memory and as .npy bytes (format versions 1.0-3.0), read strictly: numeric and
// bool dtypes only (no pickles), the header's shape must account for exactly the bytes that follow.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edgekit {

enum class DType : uint8_t { Bool, Int8, UInt8, Int16, UInt16, Int32, UInt32, Int64, UInt64, Float16, Float32, Float64 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // numpy's str(dtype): "float32", "int64", "bool"
char dtype_kind(DType dtype);         // 'b', 'i', 'u' or 'f'
// numpy.dtype(name) for the names a manifest or numpy uses ("float32", "f4", "<i8", "bool", ...).
bool dtype_from_name(const std::string& name, DType* dtype);

// A C-ordered array, its elements in this host's (little-endian) byte order.
struct Array {
  DType dtype = DType::Float32;
  bool big_endian = false;  // read from a '>' .npy: the data is swapped, the dtype still says so
  std::vector<int64_t> shape;
  std::string data;

  uint64_t count() const;  // elements
  std::string dtype_str() const;  // numpy's str(dtype) of the array as it was stored (">f4" when swapped)
  bool is_native(DType want) const { return dtype == want && !big_endian; }
};

std::string shape_text(const std::vector<int64_t>& shape, const char* sep = "x");
std::string shape_list(const std::vector<int64_t>& shape);  // "[1, 10]"

// The element count of shape, or false when a dimension is negative or the product overflows.
bool element_count(const std::vector<int64_t>& shape, uint64_t* count);

Array parse_npy(const char* data, size_t size, const std::string& where);
std::string write_npy(const Array& array);  // what numpy.save writes (version 1.0)

// numpy's astype (unsafe casting; NaN and out-of-range floats to integers are defined here: NaN
// -> 0, others saturate).
Array cast_array(const Array& array, DType to);
std::vector<double> to_doubles(const Array& array);

// numpy.concatenate((joined, part)) along axis 0, in place; false (joined unchanged) when the two
// differ in anything but axis 0.
bool append_rows(Array& joined, const Array& part);

}  // namespace edgekit
