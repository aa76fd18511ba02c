// Reading and writing stored zip archives of .npy members; CRC-32 (the zip polynomial).
#include "npz.h"

#include <ctime>
#include <cstring>
#include <set>

#include "errors.h"
#include "files.h"
#include "text.h"

namespace edgekit {

namespace {

struct CrcTable {
  uint32_t entry[256];
  CrcTable() {
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      entry[n] = c;
    }
  }
};

uint16_t u16(const std::string& d, uint64_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(d[at]) | (static_cast<unsigned char>(d[at + 1]) << 8));
}
uint32_t u32(const std::string& d, uint64_t at) {
  return static_cast<uint32_t>(u16(d, at)) | (static_cast<uint32_t>(u16(d, at + 2)) << 16);
}
uint64_t u64(const std::string& d, uint64_t at) {
  return static_cast<uint64_t>(u32(d, at)) | (static_cast<uint64_t>(u32(d, at + 4)) << 32);
}

void put16(std::string& out, uint32_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
}
void put32(std::string& out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

constexpr uint32_t kLocal = 0x04034b50, kCentral = 0x02014b50, kEnd = 0x06054b50;
constexpr uint32_t kEnd64 = 0x06064b50, kLocator64 = 0x07064b50;

struct Entry {
  std::string name;
  uint16_t flags, method;
  uint32_t crc;
  uint64_t compressed, size, offset;
};

class ZipReader {
 public:
  ZipReader(const std::string& data, const std::string& where) : d_(data), where_(where) {}

  [[noreturn]] void bad(const std::string& why) const {
    throw UsageError("cannot read " + where_ + ": not a readable .npz archive (" + why + ")");
  }

  void need(uint64_t at, uint64_t length) const {
    if (at > d_.size() || length > d_.size() - at) bad("a record runs past the end of the file");
  }

  std::vector<Entry> entries() {
    if (d_.size() < 22) bad("too short to be a zip file");
    uint64_t low = d_.size() > 22 + 65535 ? d_.size() - 22 - 65535 : 0;
    uint64_t end = d_.size() - 22;
    while (true) {  // the last end-of-central-directory record (after it: at most a comment)
      if (u32(d_, end) == kEnd) break;
      if (end == low) bad("no end of central directory record");
      --end;
    }
    uint64_t count = u16(d_, end + 10), cd_size = u32(d_, end + 12), cd_offset = u32(d_, end + 16);
    uint64_t located = end;
    if (end >= 20 && u32(d_, end - 20) == kLocator64) {
      if (end < 20 + 56) bad("truncated zip64 end record");
      uint64_t rec = end - 20 - 56;
      if (u32(d_, rec) != kEnd64) bad("damaged zip64 end record");
      count = u64(d_, rec + 32);
      cd_size = u64(d_, rec + 40);
      cd_offset = u64(d_, rec + 48);
      located = rec;
    }
    if (cd_size > located || cd_offset > located - cd_size) bad("its central directory lies outside the file");
    base_ = located - cd_size - cd_offset;  // bytes prepended to the archive (as zipfile allows)
    cd_end_ = located;
    if (count > kMaxNpzMembers) bad(format("%llu members, more than %zu", static_cast<unsigned long long>(count), kMaxNpzMembers));

    std::vector<Entry> out;
    uint64_t at = base_ + cd_offset;
    while (at < located) {
      need(at, 46);
      if (u32(d_, at) != kCentral) bad("damaged central directory");
      Entry e;
      e.flags = u16(d_, at + 8);
      e.method = u16(d_, at + 10);
      e.crc = u32(d_, at + 16);
      e.compressed = u32(d_, at + 20);
      e.size = u32(d_, at + 24);
      uint64_t name_len = u16(d_, at + 28), extra_len = u16(d_, at + 30), comment_len = u16(d_, at + 32);
      e.offset = u32(d_, at + 42);
      need(at + 46, name_len + extra_len + comment_len);
      e.name = d_.substr(at + 46, name_len);
      zip64_fields(at + 46 + name_len, extra_len, &e);
      at += 46 + name_len + extra_len + comment_len;
      if (at > located) bad("damaged central directory");
      if (out.size() >= kMaxNpzMembers) bad(format("more than %zu members", kMaxNpzMembers));
      out.push_back(e);
    }
    return out;
  }

  // The member's bytes, checked: its local header agrees, it lies before the central directory,
  // its CRC is right.
  std::string member(const Entry& e) const {
    uint64_t local = base_ + e.offset;
    if (e.offset > cd_end_) bad("a member's offset lies outside the file");
    need(local, 30);
    if (u32(d_, local) != kLocal) bad("bad local header of member " + py_repr(head_chars(e.name, 60)));
    uint64_t name_len = u16(d_, local + 26), extra_len = u16(d_, local + 28);
    need(local + 30, name_len + extra_len);
    if (d_.compare(local + 30, name_len, e.name) != 0) {
      bad("file name in directory and header differ for member " + py_repr(head_chars(e.name, 60)));
    }
    uint64_t start = local + 30 + name_len + extra_len;
    if (start > cd_end_ || e.compressed > cd_end_ - start) {
      bad("member " + py_repr(head_chars(e.name, 60)) + " runs past its archive's data");
    }
    std::string data = d_.substr(start, e.compressed);
    if (crc32(data.data(), data.size()) != e.crc) bad("bad CRC-32 for member " + py_repr(head_chars(e.name, 60)));
    return data;
  }

 private:
  void zip64_fields(uint64_t at, uint64_t length, Entry* e) {
    uint64_t end = at + length;
    while (at + 4 <= end) {
      uint16_t id = u16(d_, at), size = u16(d_, at + 2);
      if (at + 4 + size > end) bad("damaged extra field");
      if (id == 0x0001) {
        uint64_t p = at + 4, stop = p + size;
        auto take = [&](uint64_t* field) {
          if (*field != 0xffffffffu) return;
          if (p + 8 > stop) bad("damaged zip64 extra field");
          *field = u64(d_, p);
          p += 8;
        };
        take(&e->size);
        take(&e->compressed);
        take(&e->offset);
      }
      at += 4 + size;
    }
  }

  const std::string& d_;
  const std::string& where_;
  uint64_t base_ = 0, cd_end_ = 0;
};

std::string dos_time_date(uint16_t* date) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  int year = local.tm_year + 1900 < 1980 ? 1980 : local.tm_year + 1900;
  *date = static_cast<uint16_t>(((year - 1980) << 9) | ((local.tm_mon + 1) << 5) | local.tm_mday);
  std::string out;
  put16(out, static_cast<uint32_t>((local.tm_hour << 11) | (local.tm_min << 5) | (local.tm_sec / 2)));
  return out;
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  static const CrcTable table;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table.entry[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::vector<NpzMember> read_npz(const std::string& path, const std::string& what) {
  std::string where = what + " " + path;
  std::string data = read_file(path, kMaxNpzBytes, what);
  ZipReader zip(data, where);
  std::vector<Entry> entries = zip.entries();
  std::set<std::string> seen;
  uint64_t total = 0;
  for (const Entry& e : entries) {  // every member checked (and the total bounded) before any is read
    std::string shown = py_repr(head_chars(e.name, 60));
    if (e.flags & 0x1) {
      throw UsageError(where + ": member " + shown + " is encrypted; only plain stored members are read "
                       "(compressed .npz members are not supported; write it with numpy.savez)");
    }
    if (e.method != 0) {
      throw UsageError(where + ": member " + shown + " is compressed; compressed .npz members are not "
                       "supported; write it with numpy.savez");
    }
    if (e.compressed != e.size) zip.bad("stored member " + shown + " has two different sizes");
    if (first_invalid_utf8(e.name) != std::string::npos) zip.bad("a member's name is not UTF-8");
    if (!ends_with(e.name, ".npy")) {
      throw UsageError(where + " is malformed: member " + shown + " is not a .npy array");
    }
    if (!seen.insert(e.name).second) {
      throw UsageError(where + " is malformed: member " + py_repr(head_chars(e.name.substr(0, e.name.size() - 4), 60)) +
                       " appears twice");
    }
    total += e.size;
    if (total > data.size()) {
      throw UsageError(where + " is malformed: its members hold more bytes than the file (overlapping members)");
    }
  }
  std::vector<NpzMember> out;
  for (const Entry& e : entries) {
    std::string name = e.name.substr(0, e.name.size() - 4);
    std::string bytes = zip.member(e);
    out.push_back({name, parse_npy(bytes.data(), bytes.size(), where + " member " + py_repr(head_chars(name, 60)))});
  }
  return out;
}

std::string write_npz(const std::vector<NpzMember>& members) {
  uint16_t date = 0;
  std::string time = dos_time_date(&date);
  std::string body, directory;
  for (const auto& m : members) {
    std::string name = m.name + ".npy";
    std::string data = write_npy(m.array);
    if (data.size() >= 0xffffffffu || body.size() >= 0xffffffffu - data.size()) {
      throw RunError("the outputs are too large for an .npz archive without zip64");
    }
    uint32_t crc = crc32(data.data(), data.size());
    uint32_t offset = static_cast<uint32_t>(body.size());
    uint16_t flags = 0;
    for (unsigned char c : name) {
      if (c >= 0x80) flags = 0x800;  // a UTF-8 name is flagged as such (as zipfile does)
    }
    std::string local;
    put32(local, kLocal);
    put16(local, 20);
    put16(local, flags);
    put16(local, 0);  // stored
    local += time;
    put16(local, date);
    put32(local, crc);
    put32(local, static_cast<uint32_t>(data.size()));
    put32(local, static_cast<uint32_t>(data.size()));
    put16(local, static_cast<uint32_t>(name.size()));
    put16(local, 0);
    body += local + name + data;

    put32(directory, kCentral);
    put16(directory, (3 << 8) | 20);  // made on Unix, zip 2.0
    put16(directory, 20);
    put16(directory, flags);
    put16(directory, 0);
    directory += time;
    put16(directory, date);
    put32(directory, crc);
    put32(directory, static_cast<uint32_t>(data.size()));
    put32(directory, static_cast<uint32_t>(data.size()));
    put16(directory, static_cast<uint32_t>(name.size()));
    put16(directory, 0);  // extra
    put16(directory, 0);  // comment
    put16(directory, 0);  // disk
    put16(directory, 0);  // internal attributes
    put32(directory, 0600u << 16);  // rw------- as zipfile writes its members
    put32(directory, offset);
    directory += name;
  }
  if (members.size() > 0xffff || body.size() + directory.size() >= 0xffffffffu) {
    throw RunError("the outputs are too large for an .npz archive without zip64");
  }
  std::string end;
  put32(end, kEnd);
  put16(end, 0);
  put16(end, 0);
  put16(end, static_cast<uint32_t>(members.size()));
  put16(end, static_cast<uint32_t>(members.size()));
  put32(end, static_cast<uint32_t>(directory.size()));
  put32(end, static_cast<uint32_t>(body.size()));
  put16(end, 0);
  return body + directory + end;
}

}  // namespace edgekit
