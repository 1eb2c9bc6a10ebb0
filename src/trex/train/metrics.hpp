#pragma once
// Training metrics: the per-step record sinks (JSONL flushed per line +
// TensorBoard event files) and the loss-spike detector of the stability guard.
#include <cstdint>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/train/tensorboard.hpp"

namespace trex::train {

// One record: the step and named scalars (kept in insertion order).
struct MetricsRecord {
  int64_t step = 0;
  std::vector<std::pair<std::string, double>> scalars;
  void set(const std::string& name, double value);  // adds or replaces
  double get(const std::string& name, double fallback = 0.0) const;
};

// Writes OUT/metrics.jsonl ({"step": n, name: value, ...} per line, flushed)
// and OUT/tensorboard/events.out.tfevents.* (every scalar as a TensorBoard tag).
// With `resume_from_step` >= 0 the JSONL keeps only the records of steps <= it
// (rewritten atomically) and appends after them: a resumed run does not
// duplicate the steps the interrupted one logged after its last checkpoint.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& out_dir, int64_t resume_from_step = -1);
  void write(const MetricsRecord& record);
  const std::string& jsonl_path() const { return jsonl_path_; }
  std::string tensorboard_dir() const;
  const std::string& tensorboard_file() const { return tensorboard_->path(); }

 private:
  std::string out_dir_;
  std::string jsonl_path_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// z-score of each new value against the mean and (population) standard
// deviation of the previous `window` values; a spike is z > threshold once the
// window is full. Non-finite values are never added.
class SpikeDetector {
 public:
  SpikeDetector(int64_t window, double z_threshold) : window_(window), threshold_(z_threshold) {}
  struct Result {
    bool spike = false;
    double z = 0.0;  // 0 until the window is full
  };
  Result observe(double value);
  nlohmann::json state() const;  // the trailing values (exact doubles)
  void restore(const nlohmann::json& state);

 private:
  int64_t window_;
  double threshold_;
  std::deque<double> values_;
};

}  // namespace trex::train
