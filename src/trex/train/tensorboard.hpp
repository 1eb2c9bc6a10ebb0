#pragma once
// TensorBoard event files written without TensorFlow or protobuf: TFRecord
// framing (length, masked CRC32C of the length, payload, masked CRC32C of the
// payload) around hand-encoded `Event` protobufs (wall_time, step, and either
// file_version or a Summary of simple_value scalars). The PyPI `tensorboard`
// package reads them (reference/check_tensorboard.py).
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trex::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78; trex::crc32c in
// core/checksum.hpp), and TFRecord's mask:
// ((crc >> 15) | (crc << 17)) + 0xA282EAD8.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One TFRecord: u64 length (little endian), masked CRC of those 8 bytes, the
// payload, masked CRC of the payload.
std::string tfrecord_frame(std::string_view payload);

// Serialized tensorflow.Event messages.
std::string encode_file_version_event(double wall_time,
                                      const std::string& version = "brain.Event:2");
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars);

// Appends events to DIR/events.out.tfevents.<seconds>.<host>.<pid>, flushed
// after every event. The file starts with the file_version event.
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& scalars,
                   double wall_time = -1.0);  // < 0: now
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace trex::train
