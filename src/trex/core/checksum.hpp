#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of
// TFRecord frames (TensorBoard) and of checkpoint files. Software
// slicing-by-8, or the SSE4.2 crc32 instruction where the CPU has it; both
// give the same value ("123456789" -> 0xE3069283).
//
// Checksum manifests: a directory of files published as a whole (a training
// checkpoint) carries manifest.json listing each file with its size and
// CRC-32C; it is written last, so a directory with a manifest is complete.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace trex {

// Continues `crc` (the value of the bytes before; 0 for none) over `data`.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view data, uint32_t crc = 0) {
  return crc32c(data.data(), data.size(), crc);
}
// CRC-32C and size of a whole file (read in chunks); errors name the file.
struct FileChecksum {
  uint64_t size = 0;
  uint32_t crc32c = 0;
};
FileChecksum checksum_file(const std::string& path);

constexpr const char* kManifestName = "manifest.json";

// Writes DIR/manifest.json (atomically) for `files` (names relative to dir).
void write_checksum_manifest(const std::string& dir, const std::vector<std::string>& files);
// The same with checksums computed elsewhere (e.g. by the ranks that wrote
// the files of a sharded checkpoint): name relative to dir -> checksum.
void write_checksum_manifest(const std::string& dir,
                             const std::map<std::string, FileChecksum>& checksums);

// What verify_checksum_manifest found.
struct ManifestCheck {
  bool has_manifest = false;
  std::vector<std::string> files;  // the files checked
};

// Checks every file DIR/manifest.json lists: present, same size, same CRC-32C.
// A mismatch or a missing file throws trex::Error naming the file; without a
// manifest returns has_manifest = false (the caller decides). With parts > 1
// only the files whose position in the manifest (name order) is `part` modulo
// `parts`: processes that share a checkpoint split the reading.
ManifestCheck verify_checksum_manifest(const std::string& dir, int part = 0, int parts = 1);

// After every part of DIR's manifest was verified (by this and other
// processes): later verify_file_against_manifest calls on its files, as they
// are now, return at once instead of reading them again.
void remember_manifest_verified(const std::string& dir);

// Checks one file against the manifest.json of its directory, when there is
// one and it lists the file (returns whether it was checked). A process
// verifies a given (file, size, mtime) once: later calls return at once.
bool verify_file_against_manifest(const std::string& path);

}  // namespace trex
