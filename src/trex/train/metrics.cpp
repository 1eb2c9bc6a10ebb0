#include "trex/train/metrics.hpp"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"

namespace trex::train {

void MetricsRecord::set(const std::string& name, double value) {
  for (auto& [n, v] : scalars)
    if (n == name) {
      v = value;
      return;
    }
  scalars.emplace_back(name, value);
}

double MetricsRecord::get(const std::string& name, double fallback) const {
  for (const auto& [n, v] : scalars)
    if (n == name) return v;
  return fallback;
}

MetricsWriter::MetricsWriter(const std::string& out_dir, int64_t resume_from_step)
    : out_dir_(out_dir), jsonl_path_((std::filesystem::path(out_dir) / "metrics.jsonl").string()) {
  std::filesystem::create_directories(out_dir);
  if (resume_from_step >= 0 && std::filesystem::exists(jsonl_path_)) {
    std::istringstream in(read_file(jsonl_path_));
    std::string kept, line;
    while (std::getline(in, line)) {
      const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
      if (record.is_discarded() || !record.contains("step")) continue;  // a torn last line
      if (record["step"].get<int64_t>() <= resume_from_step) kept += line + "\n";
    }
    write_file_atomic(jsonl_path_, kept);
  } else if (resume_from_step < 0) {
    write_file_atomic(jsonl_path_, "");
  }
  jsonl_.open(jsonl_path_, std::ios::app);
  if (!jsonl_) throw Error("cannot open the metrics file for writing").file(jsonl_path_);
  tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir());
}

std::string MetricsWriter::tensorboard_dir() const {
  return (std::filesystem::path(out_dir_) / "tensorboard").string();
}

void MetricsWriter::write(const MetricsRecord& record) {
  nlohmann::ordered_json j;
  j["step"] = record.step;
  std::vector<std::pair<std::string, float>> tb;
  for (const auto& [name, value] : record.scalars) {
    // JSON has no NaN/Inf: non-finite values are written as null (and skipped in TensorBoard).
    if (std::isfinite(value)) {
      j[name] = value;
      tb.emplace_back(name, static_cast<float>(value));
    } else {
      j[name] = nullptr;
    }
  }
  jsonl_ << j.dump() << "\n";
  jsonl_.flush();
  if (!jsonl_) throw Error("write failed").file(jsonl_path_);
  tensorboard_->add_scalars(record.step, tb);
}

SpikeDetector::Result SpikeDetector::observe(double value) {
  Result r;
  if (!std::isfinite(value)) return r;
  if (static_cast<int64_t>(values_.size()) == window_) {
    double mean = 0.0;
    for (double v : values_) mean += v;
    mean /= static_cast<double>(values_.size());
    double var = 0.0;
    for (double v : values_) var += (v - mean) * (v - mean);
    const double sd = std::sqrt(var / static_cast<double>(values_.size()));
    // A perfectly flat window: any rise is infinitely unlikely, report a large but finite z.
    r.z = sd > 0 ? (value - mean) / sd : (value > mean ? 1e9 : 0.0);
    r.spike = r.z > threshold_;
  }
  values_.push_back(value);
  if (static_cast<int64_t>(values_.size()) > window_) values_.pop_front();
  return r;
}

nlohmann::json SpikeDetector::state() const {
  return nlohmann::json(std::vector<double>(values_.begin(), values_.end()));
}

void SpikeDetector::restore(const nlohmann::json& state) {
  values_.clear();
  for (const auto& v : state) values_.push_back(v.get<double>());
  while (static_cast<int64_t>(values_.size()) > window_) values_.pop_front();
}

}  // namespace trex::train
