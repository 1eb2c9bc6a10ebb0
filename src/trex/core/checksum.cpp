#include "trex/core/checksum.hpp"

#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace trex {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;

// Slicing-by-8: table[k][b] is the CRC of byte b followed by k zero bytes.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
};

uint32_t crc_software(const unsigned char* p, size_t n, uint32_t crc) {
  static const Tables tables;
  const auto& t = tables.t;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;  // little-endian hosts (x86, ARM)
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_hardware(const unsigned char* p, size_t n,
                                                        uint32_t crc) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "%08x", v);
  return text;
}

nlohmann::json read_manifest(const std::string& path) {
  nlohmann::json m = nlohmann::json::parse(read_file(path), nullptr, false);
  if (m.is_discarded() || !m.is_object() || !m.contains("files") || !m["files"].is_object())
    throw Error("the checksum manifest is not a JSON object with a \"files\" object").file(path);
  return m;
}

// Compares one file with its manifest entry; throws naming the file.
void check_entry(const std::string& path, const nlohmann::json& entry,
                 const std::string& manifest_path) {
  if (!entry.is_object() || !entry.contains("size") || !entry.contains("crc32c") ||
      !entry["size"].is_number_unsigned() || !entry["crc32c"].is_string())
    throw Error("the manifest entry of '" + std::filesystem::path(path).filename().string() +
                "' has no size / crc32c")
        .file(manifest_path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error("checkpoint file listed in " + manifest_path +
                " is missing: the checkpoint is incomplete; refusing to load it")
        .file(path);
  const FileChecksum actual = checksum_file(path);
  const uint64_t size = entry["size"].get<uint64_t>();
  const std::string crc = entry["crc32c"].get<std::string>();
  if (actual.size != size)
    throw Error("size " + std::to_string(actual.size) + " bytes, the checksum manifest says " +
                std::to_string(size) + ": the file is truncated or corrupt; refusing to load it")
        .file(path);
  if (hex32(actual.crc32c) != crc)
    throw Error("CRC-32C " + hex32(actual.crc32c) + " does not match the manifest's " + crc +
                ": the file is corrupt; refusing to load it")
        .file(path);
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (have_sse42()) return ~crc_hardware(p, size, crc);
#endif
  return ~crc_software(p, size, crc);
}

FileChecksum checksum_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw Error(std::string("cannot open: ") + std::strerror(errno)).file(path);
  FileChecksum out;
  std::vector<unsigned char> buffer(size_t{1} << 20);
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) {
    out.crc32c = crc32c(buffer.data(), n, out.crc32c);
    out.size += n;
  }
  const bool failed = std::ferror(f) != 0;
  const int saved = errno;
  std::fclose(f);
  if (failed) throw Error(std::string("read failed: ") + std::strerror(saved)).file(path);
  return out;
}

void write_checksum_manifest(const std::string& dir, const std::vector<std::string>& files) {
  std::map<std::string, FileChecksum> checksums;
  for (const std::string& name : files)
    checksums[name] = checksum_file((std::filesystem::path(dir) / name).string());
  write_checksum_manifest(dir, checksums);
}

void write_checksum_manifest(const std::string& dir,
                             const std::map<std::string, FileChecksum>& checksums) {
  nlohmann::json m = {
      {"format", "trex-checksums-1"}, {"algorithm", "crc32c"}, {"files", nlohmann::json::object()}};
  for (const auto& [name, c] : checksums)
    m["files"][name] = {{"size", c.size}, {"crc32c", hex32(c.crc32c)}};
  write_file_atomic((std::filesystem::path(dir) / kManifestName).string(), m.dump(2) + "\n");
}

ManifestCheck verify_checksum_manifest(const std::string& dir, int part, int parts) {
  if (parts < 1 || part < 0 || part >= parts)
    throw Error("manifest check: part " + std::to_string(part) + " of " + std::to_string(parts));
  ManifestCheck out;
  const std::string manifest_path = (std::filesystem::path(dir) / kManifestName).string();
  std::error_code ec;
  if (!std::filesystem::exists(manifest_path, ec)) return out;
  out.has_manifest = true;
  const nlohmann::json m = read_manifest(manifest_path);
  int index = 0;
  for (const auto& [name, entry] : m["files"].items()) {  // name order: the same everywhere
    if (index++ % parts != part) continue;
    const std::string path = (std::filesystem::path(dir) / name).string();
    check_entry(path, entry, manifest_path);
    out.files.push_back(path);
  }
  return out;
}

namespace {

// The files verify_file_against_manifest need not read again: path, size,
// modification time and inode as they were when checked.
std::mutex verified_mutex;
std::set<std::string> verified_files;

std::optional<std::string> verified_key(const std::filesystem::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return std::nullopt;
  std::error_code ec;
  return std::filesystem::absolute(file, ec).string() + "|" + std::to_string(st.st_size) + "|" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "|" +
         std::to_string(st.st_ino);
}

}  // namespace

void remember_manifest_verified(const std::string& dir) {
  const std::string manifest_path = (std::filesystem::path(dir) / kManifestName).string();
  std::error_code ec;
  if (!std::filesystem::exists(manifest_path, ec)) return;
  const nlohmann::json m = read_manifest(manifest_path);
  std::lock_guard<std::mutex> lock(verified_mutex);
  for (const auto& [name, entry] : m["files"].items())
    if (const auto key = verified_key(std::filesystem::path(dir) / name))
      verified_files.insert(*key);
}

bool verify_file_against_manifest(const std::string& path) {
  const std::filesystem::path file(path);
  const std::string manifest_path = (file.parent_path() / kManifestName).string();
  std::error_code ec;
  if (!std::filesystem::exists(manifest_path, ec)) return false;
  const std::optional<std::string> key = verified_key(file);
  if (!key) return false;  // the caller's open reports it
  {
    std::lock_guard<std::mutex> lock(verified_mutex);
    if (verified_files.count(*key)) return true;
  }
  const nlohmann::json m = read_manifest(manifest_path);
  const std::string name = file.filename().string();
  if (!m["files"].contains(name)) return false;
  check_entry(path, m["files"][name], manifest_path);
  std::lock_guard<std::mutex> lock(verified_mutex);
  verified_files.insert(*key);
  return true;
}

}  // namespace trex
