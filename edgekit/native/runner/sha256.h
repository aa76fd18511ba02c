// SHA-256 (FIPS 180-4): file digests and the output hashes check_outputs.py records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace edgekit {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(const std::string& data) { update(data.data(), data.size()); }
  std::string digest();  // the 32 raw bytes; the object is spent afterwards
  std::string hexdigest() { return to_hex(digest()); }
  static std::string to_hex(const std::string& raw);
  static std::string from_hex(const std::string& hex);  // bytes.fromhex, for hex that to_hex wrote

 private:
  void block(const uint8_t* p);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

// The hex SHA-256 of a file's content (read in blocks); throws UsageError when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace edgekit
