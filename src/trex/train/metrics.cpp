#include "trex/train/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/kernels/cpu/peak.hpp"

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

StepMetrics step_metrics(int64_t step, const StepOutcome& outcome, double mtp_weight) {
  const StepTotals& totals = outcome.totals;
  StepMetrics m;
  m.step = step;
  m.loss = totals.loss(mtp_weight);
  m.lm_loss = totals.lm_loss();
  m.mtp_loss = totals.mtp_loss();
  m.balance_loss = totals.balance_loss();
  m.finite_loss = totals.finite;
  m.grad_norm = outcome.grad_norm;
  m.skipped = !outcome.updated();
  m.expert_load = totals.expert_load;
  return m;
}

MetricsRecord step_record(const StepMetrics& m) {
  MetricsRecord rec;
  rec.step = m.step;
  rec.set("loss", m.finite_loss ? m.loss : NAN);
  rec.set("loss_lm", m.lm_loss);
  rec.set("loss_mtp", m.mtp_loss);
  rec.set("loss_balance", m.balance_loss);
  rec.set("lr", m.lr);
  if (m.fault_injected) rec.set("fault_injected", 1.0);
  rec.set("grad_norm", m.grad_norm);
  rec.set("skipped", m.skipped ? 1.0 : 0.0);
  rec.set("loss_z", m.spike.z);
  rec.set("spike", m.spike.spike ? 1.0 : 0.0);
  rec.set("tokens", static_cast<double>(m.tokens));
  rec.set("consumed_tokens", static_cast<double>(m.consumed_tokens));
  rec.set("step_seconds", m.seconds);
  rec.set("tokens_per_s", static_cast<double>(m.tokens) / m.seconds);
  rec.set("model_tflops", m.flops / m.seconds / 1e12);
  rec.set("mfu", m.world_peak_flops > 0 ? m.flops / m.seconds / m.world_peak_flops : 0.0);
  rec.set("activation_peak_mib", static_cast<double>(m.activation_peak_bytes) / (1024.0 * 1024.0));
  if (m.communication) {
    const StepMetrics::Communication& c = *m.communication;
    rec.set("comm_exposed_s", c.exposed_seconds);
    rec.set("grad_reduce_wait_s", c.reduce_wait_seconds);
    rec.set("grad_groups_overlapped", static_cast<double>(c.groups_overlapped));
    rec.set("grad_buckets", static_cast<double>(c.buckets));
    rec.set("grad_buckets_done_in_backward", static_cast<double>(c.buckets_done_in_backward));
    rec.set("grad_memory_mib", static_cast<double>(c.gradient_bytes) / (1024.0 * 1024.0));
  }
  if (m.pipeline_bubble) rec.set("pipeline_bubble", *m.pipeline_bubble);
  if (m.ep_bytes_sent) rec.set("ep_bytes_sent", static_cast<double>(*m.ep_bytes_sent));
  double worst = 0;
  for (size_t l = 0; l < m.expert_load.size(); ++l) {
    const std::vector<int64_t>& load = m.expert_load[l];
    if (load.empty()) continue;
    int64_t total = 0, most = 0;
    for (int64_t v : load) {
      total += v;
      most = std::max(most, v);
    }
    const double mean = static_cast<double>(total) / static_cast<double>(load.size());
    const double imbalance = mean > 0 ? static_cast<double>(most) / mean : 0.0;
    worst = std::max(worst, imbalance);
    rec.set("expert_imbalance/layer_" + std::to_string(l), imbalance);
  }
  rec.set("expert_imbalance/max", worst);
  return rec;
}

std::string progress_text(const MetricsRecord& rec) {
  return "loss " + format_value(rec.get("loss")) + " lr " + format_value(rec.get("lr"), "%.2e") +
         " tok/s " + format_value(rec.get("tokens_per_s"), "%.0f") + " MFU " +
         format_value(100 * rec.get("mfu"), "%.1f") + "%";
}

std::string step_log_line(const MetricsRecord& rec, int64_t total_steps, bool validated) {
  std::string line =
      "step " + std::to_string(rec.step) + "/" + std::to_string(total_steps) + " loss " +
      format_value(rec.get("loss")) + " (lm " + format_value(rec.get("loss_lm")) + ", mtp " +
      format_value(rec.get("loss_mtp")) + ") gnorm " + format_value(rec.get("grad_norm")) + " lr " +
      format_value(rec.get("lr"), "%.2e");
  if (validated) line += " val " + format_value(rec.get("val_loss"));
  return line;
}

std::string format_value(double v, const char* spec) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), spec, v);
  return buf;
}

double measure_peak_gflops(bool bf16, parallel::Communicator& world) {
  double peak = 0.0;
  if (world.rank() == 0) peak = kernels::measure_peak(bf16, {512, 1024}, 3).peak_gflops;
  if (world.size() > 1) world.broadcast(&peak, 1, parallel::DType::kF64, 0);
  return peak;
}

std::string format_summary(const TrainSummary& s) {
  std::ostringstream o;
  o << "steps            " << s.steps << " / " << s.total_steps
    << (s.interrupted ? " (stopped early)" : "") << "\n";
  o << "skipped steps    " << s.skipped_steps << "\n";
  if (s.data_lines_skipped > 0 || s.data_records_repaired > 0)
    o << "training data    " << s.data_lines_skipped << " lines skipped, "
      << s.data_records_repaired << " records repaired (U+FFFD)\n";
  for (const auto& r : s.skip_reasons) o << "                   " << r << "\n";
  o << "loss spikes      " << s.spikes << "\n";
  o << "tokens           " << s.tokens << " this run (" << s.trained_tokens
    << " trained in total)\n";
  o << "throughput       " << format_value(s.tokens_per_second, "%.1f") << " tokens/s, "
    << format_value(s.model_tflops * 1e3, "%.3f") << " model GFLOP/s, MFU "
    << format_value(100 * s.mfu, "%.2f") << "% of " << format_value(s.peak_gflops, "%.1f")
    << " GFLOP/s per rank\n";
  o << "final loss       " << format_value(s.final_loss) << " (lm " << format_value(s.final_lm_loss)
    << ", mtp " << format_value(s.final_mtp_loss) << ")";
  if (s.final_validation_loss >= 0) o << ", validation " << format_value(s.final_validation_loss);
  o << "\n";
  if (s.peak_resident_bytes > 0)
    o << "memory           peak RSS " << format_value(s.peak_resident_bytes / 1048576.0, "%.1f")
      << " MiB, " << format_value(s.resident_before_model / 1048576.0, "%.1f")
      << " MiB before the model (rank 0: libraries, tokenizer, data set, communicator)\n";
  o << "checkpoint       " << s.last_checkpoint << "\n";
  if (!s.metrics_jsonl.empty()) {
    o << "metrics          " << s.metrics_jsonl << "\n";
    o << "tensorboard      " << s.tensorboard_dir << "\n";
  }
  return o.str();
}

}  // namespace trex::train
