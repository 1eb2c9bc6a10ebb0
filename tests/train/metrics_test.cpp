// Metrics: a step's record, TensorBoard framing and protobuf bytes, JSONL, spike detector.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/train/metrics.hpp"
#include "trex/train/tensorboard.hpp"

namespace {

using trex::train::SpikeDetector;

// Bit-at-a-time CRC-32C, independent of the table-driven one under test.
uint32_t slow_crc32c(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t slow_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string bytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s.push_back(static_cast<char>(v));
  return s;
}
std::string le32(uint32_t v) {
  return bytes({static_cast<int>(v & 0xFF), static_cast<int>((v >> 8) & 0xFF),
                static_cast<int>((v >> 16) & 0xFF), static_cast<int>(v >> 24)});
}

TEST(TrainMetrics, StepRecordHasTheDocumentedScalarsInOrder) {
  trex::train::StepMetrics m;
  m.step = 9;
  m.loss = 4.0;
  m.lm_loss = 3.0;
  m.mtp_loss = 2.0;
  m.balance_loss = 0.5;
  m.lr = 1e-3;
  m.fault_injected = true;
  m.grad_norm = 0.75;
  m.spike = {.spike = true, .z = 5.5};
  m.tokens = 256;
  m.consumed_tokens = 2560;
  m.seconds = 2.0;
  m.flops = 8e12;
  m.world_peak_flops = 16e12;
  m.communication = trex::train::StepMetrics::Communication{.exposed_seconds = 0.25,
                                                            .reduce_wait_seconds = 0.125,
                                                            .groups_overlapped = 3,
                                                            .buckets = 4,
                                                            .buckets_done_in_backward = 2,
                                                            .gradient_bytes = 3 << 20};
  m.pipeline_bubble = 0.2;
  m.ep_bytes_sent = 4096;
  m.activation_peak_bytes = 5 << 20;
  m.expert_load = {{1, 3}, {}, {2, 2}};
  const trex::train::MetricsRecord r = trex::train::step_record(m);
  EXPECT_EQ(r.step, 9);
  const std::vector<std::pair<std::string, double>> expected = {
      {"loss", 4.0},
      {"loss_lm", 3.0},
      {"loss_mtp", 2.0},
      {"loss_balance", 0.5},
      {"lr", 1e-3},
      {"fault_injected", 1.0},
      {"grad_norm", 0.75},
      {"skipped", 0.0},
      {"loss_z", 5.5},
      {"spike", 1.0},
      {"tokens", 256.0},
      {"consumed_tokens", 2560.0},
      {"step_seconds", 2.0},
      {"tokens_per_s", 128.0},
      {"model_tflops", 4.0},
      {"mfu", 0.25},
      {"activation_peak_mib", 5.0},
      {"comm_exposed_s", 0.25},
      {"grad_reduce_wait_s", 0.125},
      {"grad_groups_overlapped", 3.0},
      {"grad_buckets", 4.0},
      {"grad_buckets_done_in_backward", 2.0},
      {"grad_memory_mib", 3.0},
      {"pipeline_bubble", 0.2},
      {"ep_bytes_sent", 4096.0},
      {"expert_imbalance/layer_0", 1.5},
      {"expert_imbalance/layer_2", 1.0},
      {"expert_imbalance/max", 1.5}};
  EXPECT_EQ(r.scalars, expected);

  // A one-rank step: no communication, pipeline or EP figures; a non-finite
  // loss is recorded as NaN (null in the JSONL), MFU 0 without a peak.
  trex::train::StepMetrics one;
  one.finite_loss = false;
  one.skipped = true;
  one.seconds = 1.0;
  const trex::train::MetricsRecord s = trex::train::step_record(one);
  EXPECT_TRUE(std::isnan(s.get("loss")));
  EXPECT_TRUE(std::isnan(s.get("grad_norm")));
  EXPECT_EQ(s.get("skipped"), 1.0);
  EXPECT_EQ(s.get("mfu", -1.0), 0.0);
  EXPECT_EQ(s.get("comm_exposed_s", -1.0), -1.0);
  EXPECT_EQ(s.get("pipeline_bubble", -1.0), -1.0);
  EXPECT_EQ(s.get("fault_injected", -1.0), -1.0);
  EXPECT_EQ(s.scalars.back().first, "expert_imbalance/max");
  EXPECT_EQ(trex::train::step_log_line(r, 12, false),
            "step 9/12 loss 4 (lm 3, mtp 2) gnorm 0.75 lr 1.00e-03");
  EXPECT_EQ(trex::train::progress_text(r), "loss 4 lr 1.00e-03 tok/s 128 MFU 25.0%");
}

TEST(TrainTensorBoard, Crc32cKnownValues) {
  EXPECT_EQ(trex::train::crc32c("123456789"), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(trex::train::crc32c(""), 0u);
  const std::string text = "TensorBoard event";
  EXPECT_EQ(trex::train::crc32c(text), slow_crc32c(text));
  EXPECT_EQ(trex::train::masked_crc32c(text), slow_mask(slow_crc32c(text)));
}

TEST(TrainTensorBoard, ScalarEventAndFramingByteByByte) {
  // Event{wall_time: 1.5, step: 3, summary{value{tag:"a", simple_value: 2.0}}}, by hand:
  const std::string event = bytes({0x09, 0,    0,   0, 0,   0, 0, 0xF8, 0x3F,  // 1: double 1.5
                                   0x10, 0x03,                                 // 2: varint 3
                                   0x2A, 10,                    // 5: summary, 10 bytes
                                   0x0A, 8,                     //   value, 8 bytes
                                   0x0A, 1,    'a',             //     tag "a"
                                   0x15, 0,    0,   0, 0x40});  //     float 2.0
  EXPECT_EQ(trex::train::encode_scalars_event(1.5, 3, {{"a", 2.0f}}), event);

  const std::string length = bytes({23, 0, 0, 0, 0, 0, 0, 0});
  const std::string framed =
      length + le32(slow_mask(slow_crc32c(length))) + event + le32(slow_mask(slow_crc32c(event)));
  EXPECT_EQ(trex::train::tfrecord_frame(event), framed);

  // A step above 127 takes a two-byte varint; the file-version event.
  const std::string big = trex::train::encode_scalars_event(0.0, 300, {});
  EXPECT_EQ(big.substr(9, 3), bytes({0x10, 0xAC, 0x02}));
  EXPECT_EQ(trex::train::encode_file_version_event(0.0).substr(9),
            bytes({0x1A, 13}) + "brain.Event:2");
}

TEST(TrainTensorBoard, WriterFileIsFramedEvents) {
  trex::test::TempDir dir;
  std::string path;
  {
    trex::train::TensorBoardWriter w(dir.path());
    w.add_scalars(3, {{"a", 2.0f}}, 1.5);
    path = w.path();
  }
  EXPECT_NE(std::filesystem::path(path).filename().string().find("tfevents"), std::string::npos);
  const std::string data = trex::read_file(path);
  // Record 1: file version; record 2: the scalar event written above.
  uint64_t first = 0;
  std::memcpy(&first, data.data(), 8);
  const size_t second_at = 8 + 4 + first + 4;
  ASSERT_LT(second_at, data.size());
  EXPECT_EQ(data.substr(12 + 9, first - 9), bytes({0x1A, 13}) + "brain.Event:2");
  EXPECT_EQ(data.substr(second_at),
            trex::train::tfrecord_frame(trex::train::encode_scalars_event(1.5, 3, {{"a", 2.0f}})));
}

TEST(TrainMetrics, JsonlPerStepAndResumeTruncation) {
  trex::test::TempDir dir;
  {
    trex::train::MetricsWriter w(dir.path());
    for (int s = 1; s <= 3; ++s) {
      trex::train::MetricsRecord r;
      r.step = s;
      r.set("loss", 1.0 / s);
      r.set("grad_norm", s == 2 ? NAN : 0.5);
      w.write(r);
    }
    // Flushed per record: readable while the writer is open.
    EXPECT_EQ(trex::read_jsonl(w.jsonl_path()).size(), 3u);
  }
  auto lines = trex::read_jsonl(dir.file("metrics.jsonl"));
  EXPECT_EQ(lines[1]["grad_norm"], nullptr);
  EXPECT_DOUBLE_EQ(lines[2]["loss"].get<double>(), 1.0 / 3);
  {
    trex::train::MetricsWriter w(dir.path(), 2);  // resumed from a step-2 checkpoint
    trex::train::MetricsRecord r;
    r.step = 3;
    r.set("loss", 0.25);
    w.write(r);
  }
  lines = trex::read_jsonl(dir.file("metrics.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2]["loss"], 0.25);
}

TEST(TrainSpike, ZScoreOverTrailingWindow) {
  SpikeDetector d(4, 3.0);
  for (double v : {1.0, 2.0, 3.0, 4.0}) EXPECT_FALSE(d.observe(v).spike);  // filling
  // Window [1,2,3,4]: mean 2.5, sd √1.25.
  const auto r = d.observe(10.0);
  EXPECT_NEAR(r.z, 7.5 / std::sqrt(1.25), 1e-12);
  EXPECT_TRUE(r.spike);
  // Window [2,3,4,10]: mean 4.75, sd √9.6875; 5 is ordinary.
  const auto q = d.observe(5.0);
  EXPECT_NEAR(q.z, 0.25 / std::sqrt(9.6875), 1e-12);
  EXPECT_FALSE(q.spike);
  EXPECT_FALSE(d.observe(NAN).spike);  // ignored, not added
  // State round trip continues identically.
  SpikeDetector e(4, 3.0);
  e.restore(d.state());
  EXPECT_EQ(e.observe(30.0).z, d.observe(30.0).z);
}

TEST(TrainSpike, SyntheticSeriesFlagsOnlyTheSpike) {
  SpikeDetector d(20, 4.0);
  int spikes = 0, at = -1;
  for (int i = 0; i < 200; ++i) {
    double loss = 3.0 * std::exp(-i / 80.0) + 0.02 * std::sin(i * 1.7);
    if (i == 150) loss += 1.0;
    if (d.observe(loss).spike) {
      ++spikes;
      at = i;
    }
  }
  EXPECT_EQ(spikes, 1);
  EXPECT_EQ(at, 150);
}

}  // namespace
