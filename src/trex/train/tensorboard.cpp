#include "trex/train/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "trex/core/checksum.hpp"
#include "trex/core/error.hpp"

namespace trex::train {
namespace {

// Protobuf wire format pieces.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
template <class T>
void put_fixed(std::string& out, T value) {  // little-endian (the host order on x86/ARM)
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event fields: 1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary.
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  if (step != 0) {
    put_key(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  return trex::crc32c(data);
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string tfrecord_frame(std::string_view payload) {
  std::string header;
  put_fixed(header, static_cast<uint64_t>(payload.size()));
  std::string out = header;
  put_fixed(out, masked_crc32c(header));
  out.append(payload);
  put_fixed(out, masked_crc32c(payload));
  return out;
}

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, version);
  return e;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, 5);
    put_fixed(v, value);
    put_bytes(summary, 1, v);
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = now_seconds();
  path_ = (std::filesystem::path(dir) /
           ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host + "." +
            std::to_string(getpid())))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw Error("cannot open the TensorBoard event file for writing").file(path_);
  out_ << tfrecord_frame(encode_file_version_event(now));
  out_.flush();
}

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, float>>& scalars,
                                    double wall_time) {
  out_ << tfrecord_frame(
      encode_scalars_event(wall_time < 0 ? now_seconds() : wall_time, step, scalars));
  out_.flush();
  if (!out_) throw Error("write failed").file(path_);
}

}  // namespace trex::train
