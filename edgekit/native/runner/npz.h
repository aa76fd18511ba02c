// .npz archives: a zip of .npy members, as numpy.savez writes them (stored, not compressed).
//
// Read from the central directory (zip64 records and extra fields understood), every offset and
// size checked against the file, CRC-32 verified; compressed or encrypted members are refused.
// The members' expanded size is bounded by the file's own size (overlapping members that would
// expand a small file are refused), so reading allocates at most about twice the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "npy.h"

namespace edgekit {

constexpr uint64_t kMaxNpzBytes = 1ull << 30;
constexpr size_t kMaxNpzMembers = 4096;

struct NpzMember {
  std::string name;  // without the ".npy" suffix
  Array array;
};

uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

// The arrays of the archive at path, in the archive's order. UsageError naming `what` otherwise.
std::vector<NpzMember> read_npz(const std::string& path, const std::string& what);
// The archive's bytes, members stored ("NAME.npy"), as numpy.savez lays them out.
std::string write_npz(const std::vector<NpzMember>& members);

}  // namespace edgekit
