#include "trex/plan/report.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <tuple>

#include "trex/plan/formatted.hpp"

namespace trex::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
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

std::string format_estimates(const std::vector<Estimate>& estimates) {
  std::ostringstream out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-3s %-82s %9s %8s %10s %9s %6s\n", "#", "layout", "mem GiB",
                "step s", "tok/s/dev", "TFLOP/s", "MFU");
  out << buf;
  int i = 1;
  for (const Estimate& e : estimates) {
    std::snprintf(buf, sizeof buf, "%-3d %-82s %8.1f%s %8.2f %10.1f %9.1f %5.1f%%\n", i++,
                  e.layout.describe().c_str(), e.memory.total() / kGiB, e.memory.fits() ? " " : "!",
                  e.time.step, e.tokens_per_s_per_device, e.model_tflops_per_device, 100 * e.mfu);
    out << buf;
  }
  return out.str();
}

std::string explain(const Estimate& e, const ModelShape& model, const ClusterSpec& cluster,
                    const Job& job) {
  std::ostringstream out;
  char buf[512];
  out << "layout: " << e.layout.describe() << "\n";
  std::snprintf(buf, sizeof buf,
                "model %s: %.3gB params (%.3gB activated), %.1f GFLOP/token (Megatron-Bridge, "
                "seq %lld)\n",
                model.name.c_str(), model.total_params / 1e9, model.activated_params / 1e9,
                model.model_flops_per_token / 1e9, static_cast<long long>(job.seq_len));
  out << buf;
  std::snprintf(buf, sizeof buf,
                "cluster %s: %lld x %s, %.1f TFLOP/s BF16, %.0f GiB HBM; DP %lld, %lld "
                "micro-batches per step\n",
                cluster.name.c_str(), static_cast<long long>(job.devices),
                cluster.device.name.c_str(), cluster.device.bf16_tflops, cluster.device.hbm_gib,
                static_cast<long long>(e.dp), static_cast<long long>(e.micro_batches));
  out << buf;
  const MemoryEstimate& m = e.memory;
  out << (e.memory_from_engine
              ? "memory per device (largest rank), GiB, from the engine's own accounting "
                "(trex model memory: fp32 parameters and gradients):\n"
              : "memory per device (most loaded pipeline rank), GiB:\n");
  auto mem_line = [&](const char* name, double bytes) {
    std::snprintf(buf, sizeof buf, "  %-26s %8.2f\n", name, bytes / kGiB);
    out << buf;
  };
  mem_line(e.memory_from_engine ? "weights (fp32)" : "weights (bf16)", m.weights);
  mem_line("gradients", m.gradients);
  mem_line("optimizer states", m.optimizer);
  mem_line("activations (in flight)", m.activations);
  mem_line("logits", m.logits);
  mem_line("communication buffers", m.comm_buffers);
  mem_line("runtime reserve", m.reserved);
  std::snprintf(buf, sizeof buf, "  %-26s %8.2f of %.2f  %s\n", "total", m.total() / kGiB,
                m.capacity / kGiB, m.fits() ? "fits" : "DOES NOT FIT");
  out << buf;
  if (e.memory_from_engine) {
    std::snprintf(buf, sizeof buf,
                  "  (the planner's own model, bf16 weights with fp32 master: %.2f GiB)\n",
                  e.modelled_memory.total() / kGiB);
    out << buf;
  }
  const TimeEstimate& t = e.time;
  out << "step time on the slowest pipeline rank, s (share of step):\n";
  auto time_line = [&](const char* name, double s) {
    std::snprintf(buf, sizeof buf, "  %-34s %9.3f  %5.1f%%\n", name, s, 100 * s / t.step);
    out << buf;
  };
  time_line("GEMMs (dense + experts + head)", t.gemm);
  time_line("core attention", t.attention);
  time_line("non-GEMM (vector) ops", t.vector);
  time_line("kernel launches", t.launch);
  time_line("recompute", t.recompute);
  time_line("EP all-to-all exposed", t.a2a_exposed);
  std::snprintf(buf, sizeof buf, "  %-34s %9.3f  (total %.3f, %.0f%% hidden)\n",
                "  EP all-to-all issued", t.a2a_total, t.a2a_total,
                t.a2a_total > 0 ? 100 * (1 - t.a2a_exposed / t.a2a_total) : 0.0);
  out << buf;
  time_line("compute slowed by overlap", t.overlap_penalty);
  time_line("TP/CP collectives exposed", t.tp_cp_exposed);
  time_line("PP send/recv exposed", t.pp_exposed);
  time_line("pipeline bubble", t.bubble);
  time_line("DP grad/param sync exposed", t.dp_exposed);
  time_line("optimizer update", t.optimizer);
  time_line("optimizer swap exposed", t.offload_exposed);
  std::snprintf(buf, sizeof buf,
                "  step %.3f s: %.1f tokens/s/device, %.1f model TFLOP/s/device (%.1f with "
                "recompute), MFU %.1f%%\n",
                t.step, e.tokens_per_s_per_device, e.model_tflops_per_device,
                e.hardware_tflops_per_device, 100 * e.mfu);
  out << buf;
  if (e.goodput < 1) {
    std::snprintf(buf, sizeof buf,
                  "  (wall-clock averages at goodput %.2f: steady state %.1f tokens/s/device, "
                  "MFU %.1f%%)\n",
                  e.goodput, e.tokens_per_s_per_device / e.goodput, 100 * e.mfu / e.goodput);
    out << buf;
  }
  return out.str();
}

nlohmann::json estimate_json(const Estimate& e) {
  const Layout& l = e.layout;
  const MemoryEstimate& m = e.memory;
  const TimeEstimate& t = e.time;
  return {
      {"layout",
       {{"tp", l.tp},
        {"pp", l.pp},
        {"vpp", l.vpp},
        {"ep", l.ep},
        {"cp", l.cp},
        {"dp", e.dp},
        {"mbs", l.mbs},
        {"schedule", to_string(l.schedule)},
        {"recompute", to_string(l.recompute)},
        {"zero", l.zero},
        {"offload_optimizer", l.offload_optimizer},
        {"overlap", l.overlap},
        {"fused_kernels", l.fused_kernels},
        {"topology_aware", l.topology_aware},
        {"fp8", l.fp8},
        {"ep_overlap", l.ep_overlap},
        {"expert_rebalancing", l.expert_rebalancing},
        {"fp8_attention", l.fp8_attention},
        {"fp8_dispatch", l.fp8_dispatch},
        {"edge_self_overlap", l.edge_self_overlap},
        {"cuda_graphs", l.cuda_graphs}}},
      {"micro_batches", e.micro_batches},
      {"memory_gib",
       {{"weights", m.weights / kGiB},
        {"gradients", m.gradients / kGiB},
        {"optimizer", m.optimizer / kGiB},
        {"activations", m.activations / kGiB},
        {"logits", m.logits / kGiB},
        {"comm_buffers", m.comm_buffers / kGiB},
        {"reserved", m.reserved / kGiB},
        {"total", m.total() / kGiB},
        {"capacity", m.capacity / kGiB},
        {"fits", m.fits()},
        // bytes, the engine's exact figures when memory_from_engine
        {"total_bytes", m.total()},
        {"from_engine", e.memory_from_engine},
        {"planner_model_total", (e.memory_from_engine ? e.modelled_memory : m).total() / kGiB}}},
      {"time_s",
       {{"gemm", t.gemm},
        {"attention", t.attention},
        {"vector", t.vector},
        {"launch", t.launch},
        {"recompute", t.recompute},
        {"a2a_total", t.a2a_total},
        {"a2a_exposed", t.a2a_exposed},
        {"overlap_penalty", t.overlap_penalty},
        {"tp_cp_exposed", t.tp_cp_exposed},
        {"pp_exposed", t.pp_exposed},
        {"bubble", t.bubble},
        {"dp_total", t.dp_total},
        {"dp_exposed", t.dp_exposed},
        {"optimizer", t.optimizer},
        {"offload_exposed", t.offload_exposed},
        {"step", t.step}}},
      {"tokens_per_s_per_device", e.tokens_per_s_per_device},
      {"model_tflops_per_device", e.model_tflops_per_device},
      {"mfu", e.mfu},
      {"goodput", e.goodput}};
}

std::string candidates_svg(const SearchResult& r, const ClusterSpec& cluster,
                           const std::string& title) {
  const double width = 900, height = 560, left = 70, right = 30, top = 50, bottom = 60;
  double max_mem = cluster.device.hbm_gib * 1.25, max_mfu = 0.05;
  for (const Estimate& e : r.candidates) max_mfu = std::max(max_mfu, e.mfu);
  max_mfu *= 1.1;
  auto x = [&](double gib) {
    return left + std::min(gib, max_mem) / max_mem * (width - left - right);
  };
  auto y = [&](double mfu) { return height - bottom - mfu / max_mfu * (height - top - bottom); };
  std::ostringstream out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n",
                width, height);
  out << buf;
  out << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\">" << xml_escape(title)
      << "</text>\n";
  // Axes and ticks.
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                left, height - bottom, width - right, height - bottom, left, top, left,
                height - bottom);
  out << buf;
  for (int i = 0; i <= 5; ++i) {
    const double gib = max_mem * i / 5, mfu = max_mfu * i / 5;
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f%%</text>\n",
                  x(gib), height - bottom + 18, gib, left - 6, y(mfu) + 4, 100 * mfu);
    out << buf;
  }
  std::snprintf(
      buf, sizeof buf,
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">memory per device (GiB)</text>\n"
      "<text x=\"18\" y=\"%.1f\" transform=\"rotate(-90 18 %.1f)\" "
      "text-anchor=\"middle\">MFU</text>\n",
      (left + width - right) / 2, height - 18, (top + height - bottom) / 2,
      (top + height - bottom) / 2);
  out << buf;
  const double hbm = x(cluster.device.hbm_gib);
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"red\" "
                "stroke-dasharray=\"4 3\"/>\n<text x=\"%.1f\" y=\"%.1f\" fill=\"red\">HBM "
                "%.0f GiB</text>\n",
                hbm, top, hbm, height - bottom, hbm + 4, top + 12, cluster.device.hbm_gib);
  out << buf;
  // One dot per 2-pixel cell (there can be 10^5 candidates).
  std::set<std::tuple<int, int, bool>> drawn;
  for (const Estimate& e : r.candidates) {
    const double cx = x(e.memory.total() / kGiB), cy = y(e.mfu);
    if (!drawn.insert({static_cast<int>(cx / 2), static_cast<int>(cy / 2), e.memory.fits()}).second)
      continue;
    std::snprintf(buf, sizeof buf,
                  "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"2\" fill=\"%s\" fill-opacity=\"0.35\"/>\n",
                  cx, cy, e.memory.fits() ? "#3366cc" : "#999999");
    out << buf;
  }
  int rank = 1;
  for (const Estimate& e : r.best) {
    std::snprintf(buf, sizeof buf,
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#ff9900\" stroke=\"black\">"
                  "<title>%s</title></circle>\n<text x=\"%.1f\" y=\"%.1f\">%d</text>\n",
                  x(e.memory.total() / kGiB), y(e.mfu), xml_escape(e.layout.describe()).c_str(),
                  x(e.memory.total() / kGiB) + 7, y(e.mfu) - 5, rank++);
    out << buf;
  }
  out << "</svg>\n";
  return out.str();
}

std::string format_side_by_side(const std::vector<Estimate>& estimates) {
  std::ostringstream out;
  const auto header = [&](const char* what) {
    out << formatted("%-24s", what);
    for (size_t i = 0; i < estimates.size(); ++i) {
      out << formatted(" %10s", ("#" + std::to_string(i + 1)).c_str());
    }
    out << "\n";
  };
  const auto rows = [&](auto categories_of) {
    const size_t n = categories_of(estimates.front()).size();
    for (size_t c = 0; c < n; ++c) {
      out << formatted("%-24s", categories_of(estimates.front())[c].name);
      for (const Estimate& e : estimates) {
        out << formatted(" %10.2f", categories_of(e)[c].value);
      }
      out << "\n";
    }
  };
  if (estimates.empty()) return "";
  header("memory, GiB");
  rows([](const Estimate& e) { return memory_categories(e.memory); });
  header("time per step, s");
  rows([](const Estimate& e) { return time_categories(e.time); });
  out << formatted("%-24s", "step");
  for (const Estimate& e : estimates) {
    out << formatted(" %10.2f", e.time.step);
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
  svg << "<text x=\"10\" y=\"20\" font-size=\"14\">" << xml_escape(title) << "</text>\n";
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
            << formatted("%.3g", cats[c].value) << "</title></rect>\n";
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
