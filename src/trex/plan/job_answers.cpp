#include "trex/plan/job_answers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "trex/core/error.hpp"

namespace trex::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string printf_string(const char* format, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, a, b, c);
  return buf;
}

// The categories of the side-by-side breakdown.
struct Category {
  const char* name;
  double value;
};

std::vector<Category> memory_categories(const MemoryEstimate& m) {
  return {{"weights", m.weights / kGiB},
          {"gradients", m.gradients / kGiB},
          {"optimizer states", m.optimizer / kGiB},
          {"activations", m.activations / kGiB},
          {"logits", m.logits / kGiB},
          {"comm buffers", m.comm_buffers / kGiB},
          {"runtime reserve", m.reserved / kGiB}};
}

std::vector<Category> time_categories(const TimeEstimate& t) {
  return {{"GEMMs", t.gemm},
          {"core attention", t.attention},
          {"non-GEMM ops", t.vector},
          {"kernel launches", t.launch},
          {"recompute", t.recompute},
          {"EP all-to-all exposed", t.a2a_exposed},
          {"TP/CP exposed", t.tp_cp_exposed},
          {"PP exposed", t.pp_exposed},
          {"overlap slowdown", t.overlap_penalty},
          {"pipeline bubble", t.bubble},
          {"DP sync exposed", t.dp_exposed},
          {"optimizer", t.optimizer},
          {"offload exposed", t.offload_exposed}};
}

}  // namespace

double checkpoint_bytes(const ModelShape& model, Optimizer optimizer) {
  const double state_per_param = optimizer == Optimizer::kMuon ? 4.0 : 8.0;
  return model.all_params() * (4.0 + state_per_param);
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
  JobAnswers a;
  const double tokens_per_step =
      static_cast<double>(job.global_batch) * static_cast<double>(job.seq_len);
  a.steps = q.tokens > 0 ? std::ceil(q.tokens / tokens_per_step) : 0;
  a.steady_hours = a.steps * e.time.step / 3600;
  a.checkpoint_bytes = checkpoint_bytes(model, job.optimizer);
  a.checkpoint_save_s = q.storage_gbps > 0 ? a.checkpoint_bytes / (q.storage_gbps * 1e9) : 0;
  a.checkpoint_interval_s = q.checkpoint_minutes * 60;
  if (q.mtbf_hours > 0) {
    a.goodput = failure_goodput(a.checkpoint_save_s, q.mtbf_hours * 3600, q.restart_minutes * 60,
                                a.checkpoint_interval_s);
    a.goodput_from = "failures every " + printf_string("%.3g", q.mtbf_hours) + " h, restart " +
                     printf_string("%.3g", q.restart_minutes) + " min, checkpoint every " +
                     printf_string("%.3g", a.checkpoint_interval_s / 60) + " min (" +
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
  char buf[512];
  if (q.tokens > 0) {
    std::snprintf(buf, sizeof buf,
                  "  %.4g tokens = %.0f steps of %lld x %lld tokens: %.1f h of steady-state "
                  "steps\n",
                  q.tokens, a.steps, static_cast<long long>(job.global_batch),
                  static_cast<long long>(job.seq_len), a.steady_hours);
    out << buf;
    std::snprintf(buf, sizeof buf, "  goodput %.3f (%s)\n", a.goodput, a.goodput_from.c_str());
    out << buf;
    std::snprintf(buf, sizeof buf, "  wall clock %.1f h (%.2f days), %.4g device-hours",
                  a.wall_hours, a.wall_hours / 24, a.device_hours);
    out << buf;
    if (q.price_per_device_hour > 0) {
      std::snprintf(buf, sizeof buf, ", cost %.4g at %.3g per device-hour", a.cost,
                    q.price_per_device_hour);
      out << buf;
    }
    out << "\n";
  }
  std::snprintf(buf, sizeof buf, "  resumable checkpoint %.1f GB (FP32 master weights + %s state)",
                a.checkpoint_bytes / 1e9, to_string(job.optimizer).c_str());
  out << buf;
  if (q.storage_gbps > 0) {
    std::snprintf(buf, sizeof buf, ": save or load %.0f s at %.3g GB/s", a.checkpoint_save_s,
                  q.storage_gbps);
    out << buf;
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
  if (l.recompute != Recompute::kNone) out.push_back(to_string(l.recompute) + " recompute");
  if (l.pp > 1 && l.schedule != Schedule::k1F1B && l.schedule != Schedule::kDualPipeV)
    out.push_back(to_string(l.schedule) + " schedule");
  return out;
}

ValidatedRegion validated_region(const std::vector<ValidationRow>& rows) {
  ValidatedRegion r;
  for (const ValidationRow& row : rows) {
    if (!row.within_20_percent) continue;
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

std::string format_side_by_side(const std::vector<Estimate>& estimates) {
  std::ostringstream out;
  char buf[128];
  const auto header = [&](const char* what) {
    std::snprintf(buf, sizeof buf, "%-24s", what);
    out << buf;
    for (size_t i = 0; i < estimates.size(); ++i) {
      std::snprintf(buf, sizeof buf, " %10s", ("#" + std::to_string(i + 1)).c_str());
      out << buf;
    }
    out << "\n";
  };
  const auto rows = [&](auto categories_of) {
    const size_t n = categories_of(estimates.front()).size();
    for (size_t c = 0; c < n; ++c) {
      std::snprintf(buf, sizeof buf, "%-24s", categories_of(estimates.front())[c].name);
      out << buf;
      for (const Estimate& e : estimates) {
        std::snprintf(buf, sizeof buf, " %10.2f", categories_of(e)[c].value);
        out << buf;
      }
      out << "\n";
    }
  };
  if (estimates.empty()) return "";
  header("memory, GiB");
  rows([](const Estimate& e) { return memory_categories(e.memory); });
  header("time per step, s");
  rows([](const Estimate& e) { return time_categories(e.time); });
  std::snprintf(buf, sizeof buf, "%-24s", "step");
  out << buf;
  for (const Estimate& e : estimates) {
    std::snprintf(buf, sizeof buf, " %10.2f", e.time.step);
    out << buf;
  }
  out << "\n";
  return out.str();
}

std::string side_by_side_svg(const std::vector<Estimate>& estimates, double hbm_gib,
                             const std::string& title) {
  static const char* const kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
                                         "#1b9e77", "#d95f02", "#7570b3"};
  const double width = 900, panel_h = 320, top = 40, bar_w = 36;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\""
      << top + 2 * panel_h + 40 << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  std::string escaped;
  for (char c : title)
    escaped += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  svg << "<text x=\"10\" y=\"20\" font-size=\"14\">" << escaped << "</text>\n";
  const auto panel = [&](double y0, const char* label, double scale_max, double limit,
                         auto categories_of) {
    const double plot_h = panel_h - 60, x0 = 60;
    svg << "<text x=\"10\" y=\"" << y0 + 14 << "\">" << label << "</text>\n";
    svg << "<line x1=\"" << x0 << "\" y1=\"" << y0 + 20 + plot_h << "\" x2=\"" << x0 + 420
        << "\" y2=\"" << y0 + 20 + plot_h << "\" stroke=\"black\"/>\n";
    for (size_t i = 0; i < estimates.size(); ++i) {
      const double x = x0 + 20 + static_cast<double>(i) * (bar_w + 30);
      double y = y0 + 20 + plot_h;
      const std::vector<Category> cats = categories_of(estimates[i]);
      for (size_t c = 0; c < cats.size(); ++c) {
        const double h = scale_max > 0 ? cats[c].value / scale_max * plot_h : 0;
        if (h <= 0) continue;
        y -= h;
        svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << bar_w << "\" height=\"" << h
            << "\" fill=\"" << kColours[c % 13] << "\"><title>" << cats[c].name << ": "
            << printf_string("%.3g", cats[c].value) << "</title></rect>\n";
      }
      svg << "<text x=\"" << x + 8 << "\" y=\"" << y0 + 34 + plot_h << "\">#" << i + 1
          << "</text>\n";
    }
    if (limit > 0) {
      const double y = y0 + 20 + plot_h - limit / scale_max * plot_h;
      svg << "<line x1=\"" << x0 << "\" y1=\"" << y << "\" x2=\"" << x0 + 420 << "\" y2=\"" << y
          << "\" stroke=\"red\" stroke-dasharray=\"4 3\"/><text x=\"" << x0 + 424 << "\" y=\""
          << y + 4 << "\" fill=\"red\">HBM</text>\n";
    }
    const std::vector<Category> cats = categories_of(estimates.front());
    for (size_t c = 0; c < cats.size(); ++c) {
      const double ly = y0 + 24 + static_cast<double>(c) * 16;
      svg << "<rect x=\"540\" y=\"" << ly - 9 << "\" width=\"10\" height=\"10\" fill=\""
          << kColours[c % 13] << "\"/><text x=\"556\" y=\"" << ly << "\">" << cats[c].name
          << "</text>\n";
    }
  };
  if (!estimates.empty()) {
    double max_step = 0, max_mem = hbm_gib;
    for (const Estimate& e : estimates) {
      max_step = std::max(max_step, e.time.step);
      max_mem = std::max(max_mem, e.memory.total() / kGiB);
    }
    panel(top, "time per step, s (stacked; exposed communication included)", max_step * 1.05, 0,
          [](const Estimate& e) { return time_categories(e.time); });
    panel(top + panel_h, "memory per device, GiB (dashed: HBM)", max_mem * 1.05, hbm_gib,
          [](const Estimate& e) { return memory_categories(e.memory); });
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace trex::plan
