#include "trex/plan/job_answers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/plan/formatted.hpp"

namespace trex::plan {

namespace {}  // namespace

double checkpoint_bytes(const ModelShape& model, Optimizer optimizer, double moment_bytes) {
  const double moments = optimizer == Optimizer::kMuon ? 1.0 : 2.0;
  return model.all_params() * (4.0 + moments * moment_bytes);
}

double failure_goodput(double save_s, double mtbf_s, double restart_s, double& interval_s) {
  if (!(mtbf_s > 0)) throw Error("mean time between failures must be > 0").field("mtbf");
  if (save_s < 0 || restart_s < 0) throw Error("negative save or restart time").field("restart");
  if (interval_s <= 0) interval_s = std::sqrt(2 * save_s * mtbf_s);
  if (interval_s <= 0) return std::max(0.0, 1 - restart_s / mtbf_s);  // free checkpoints
  const double lost = save_s / interval_s + (interval_s / 2 + restart_s) / mtbf_s;
  return std::max(0.0, 1 - lost);
}

JobAnswers answer_job(const Estimate& e, const ModelShape& model, const Job& job,
                      const JobQuestions& q) {
  if (q.tokens < 0 || q.price_per_device_hour < 0 || q.storage_gbps < 0 || q.mtbf_hours < 0 ||
      q.restart_minutes < 0 || q.checkpoint_minutes < 0)
    throw Error("job questions must be >= 0").field("job");
  if (q.packing_efficiency < 0 || q.packing_efficiency > 1 || q.unpacked_efficiency < 0 ||
      q.unpacked_efficiency > 1)
    throw Error("packing efficiencies must be in [0, 1]").field("packing");
  JobAnswers a;
  const double tokens_per_step =
      static_cast<double>(job.global_batch) * static_cast<double>(job.seq_len);
  // A budget of SFT tokens counts the samples' tokens, not the padding.
  a.real_tokens_per_step =
      tokens_per_step * (q.packing_efficiency > 0 ? q.packing_efficiency : 1.0);
  a.steps = q.tokens > 0 ? std::ceil(q.tokens / a.real_tokens_per_step) : 0;
  a.steady_hours = a.steps * e.time.step / 3600;
  a.checkpoint_bytes = checkpoint_bytes(model, job.optimizer, job.moment_bytes);
  a.checkpoint_save_s = q.storage_gbps > 0 ? a.checkpoint_bytes / (q.storage_gbps * 1e9) : 0;
  a.checkpoint_interval_s = q.checkpoint_minutes * 60;
  if (q.mtbf_hours > 0) {
    a.goodput = failure_goodput(a.checkpoint_save_s, q.mtbf_hours * 3600, q.restart_minutes * 60,
                                a.checkpoint_interval_s);
    a.goodput_from = "failures every " + formatted("%.3g", q.mtbf_hours) + " h, restart " +
                     formatted("%.3g", q.restart_minutes) + " min, checkpoint every " +
                     formatted("%.3g", a.checkpoint_interval_s / 60) + " min (" +
                     (q.checkpoint_minutes > 0 ? "given" : "Young/Daly optimum") + ")";
  } else {
    a.goodput = job.goodput;
    a.goodput_from = job.goodput < 1 ? "--goodput" : "steady state (no failures modelled)";
  }
  a.wall_hours = a.goodput > 0 ? a.steady_hours / a.goodput : 0;
  a.device_hours = a.wall_hours * static_cast<double>(job.devices);
  a.cost = a.device_hours * q.price_per_device_hour;
  return a;
}

std::string format_job_answers(const JobAnswers& a, const JobQuestions& q, const Job& job) {
  std::ostringstream out;
  if (q.packing_efficiency > 0) {
    out << formatted(
        "  SFT rows of %lld tokens: %.1f%% sample tokens with whole samples packed (%s), "
        "%.1f%% with one sample per row; %.4g sample tokens per step\n",
        static_cast<long long>(job.seq_len), 100 * q.packing_efficiency, q.packing_from.c_str(),
        100 * q.unpacked_efficiency, a.real_tokens_per_step);
  }
  if (q.tokens > 0) {
    out << formatted(
        "  %.4g %stokens = %.0f steps of %lld x %lld tokens: %.1f h of steady-state "
        "steps\n",
        q.tokens, q.packing_efficiency > 0 ? "sample " : "", a.steps,
        static_cast<long long>(job.global_batch), static_cast<long long>(job.seq_len),
        a.steady_hours);
    out << formatted("  goodput %.3f (%s)\n", a.goodput, a.goodput_from.c_str());
    out << formatted("  wall clock %.1f h (%.2f days), %.4g device-hours", a.wall_hours,
                     a.wall_hours / 24, a.device_hours);
    if (q.price_per_device_hour > 0) {
      out << formatted(", cost %.4g at %.3g per device-hour", a.cost, q.price_per_device_hour);
    }
    out << "\n";
  }
  out << formatted("  resumable checkpoint %.1f GB (FP32 master weights + %s state)",
                   a.checkpoint_bytes / 1e9, to_string(job.optimizer).c_str());
  if (q.storage_gbps > 0) {
    out << formatted(": save or load %.0f s at %.3g GB/s", a.checkpoint_save_s, q.storage_gbps);
  }
  out << "\n";
  return out.str();
}

std::vector<std::string> planner_only_features(const Layout& l) {
  std::vector<std::string> out;
  if (l.tp > 1) out.push_back("TP" + std::to_string(l.tp));
  if (l.cp > 1) out.push_back("CP" + std::to_string(l.cp));
  if (l.zero > 2) out.push_back("ZeRO-" + std::to_string(l.zero));
  if (l.offload_optimizer) out.push_back("optimizer offload");
  if (l.fp8) out.push_back("FP8 GEMMs");
  if (l.fp8_attention) out.push_back("FP8 attention");
  if (l.cuda_graphs) out.push_back("CUDA graphs");
  // The engine's `selective` recomputes norms and the attention core (no GEMM);
  // the planner's costs Megatron's up-projection recompute: not the same policy.
  if (l.recompute == Recompute::kSelective) out.push_back("selective recompute");
  if (l.pp > 1 && l.schedule != Schedule::k1F1B && l.schedule != Schedule::kDualPipeV)
    out.push_back(to_string(l.schedule) + " schedule");
  return out;
}

ValidatedRegion validated_region(const std::vector<ValidationRow>& rows) {
  ValidatedRegion r;
  for (const ValidationRow& row : rows) {
    // Only evidence widens the region: a calibration point agrees by design.
    if (!row.within_20_percent || row.point.role != PointRole::kValidation) continue;
    const Layout& l = row.point.layout;
    r.max_tp = std::max(r.max_tp, l.tp);
    r.max_cp = std::max(r.max_cp, l.cp);
    r.max_pp = std::max(r.max_pp, l.pp);
    r.max_ep = std::max(r.max_ep, l.ep);
    r.max_zero = std::max(r.max_zero, l.zero);
    r.offload = r.offload || l.offload_optimizer;
    if (std::find(r.schedules.begin(), r.schedules.end(), l.schedule) == r.schedules.end())
      r.schedules.push_back(l.schedule);
    ++r.points;
  }
  return r;
}

std::vector<std::string> outside_region(const Layout& l, const ValidatedRegion& r) {
  std::vector<std::string> out;
  const auto over = [&](const char* name, int64_t value, int64_t max) {
    if (value > max)
      out.push_back(std::string(name) + std::to_string(value) + " (validated: " + name +
                    " <= " + std::to_string(max) + ")");
  };
  over("TP", l.tp, r.max_tp);
  over("CP", l.cp, r.max_cp);
  over("PP", l.pp, r.max_pp);
  over("EP", l.ep, r.max_ep);
  if (l.zero > r.max_zero)
    out.push_back("ZeRO-" + std::to_string(l.zero) +
                  " (validated: ZeRO <= " + std::to_string(r.max_zero) + ")");
  if (l.offload_optimizer && !r.offload) out.push_back("optimizer offload (no validated point)");
  if (std::find(r.schedules.begin(), r.schedules.end(), l.schedule) == r.schedules.end())
    out.push_back(to_string(l.schedule) + " schedule (no validated point)");
  return out;
}

MfuBand mfu_band(double mfu, const ErrorSummary& e) {
  MfuBand b;
  b.median_low = mfu / (1 + e.median);
  b.median_high = e.median < 1 ? mfu / (1 - e.median) : mfu * 2;
  b.worst_low = mfu / (1 + e.worst);
  b.worst_high = e.worst < 1 ? mfu / (1 - e.worst) : mfu * 2;
  return b;
}

}  // namespace trex::plan
