#include "trex/plan/cluster.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "trex/core/config_reader.hpp"

namespace trex::plan {

namespace {

using json = nlohmann::json;
using config::Range;
using config::Reader;

constexpr double kBig = 1e9;
constexpr auto kPositive = Range<double>::between(1e-6, kBig);
constexpr auto kAmount = Range<double>::between(0, kBig);
constexpr auto kFraction = Range<double>::between(1e-3, 1);
constexpr auto kShare = Range<double>::between(0, 1);  // a fraction that may be 0 (off)
constexpr auto kMicroseconds = Range<double>::between(0, 1e6);
constexpr auto kCount = Range<int64_t>::at_least(1);

ClusterSpec read_cluster(const Reader& root) {
  ClusterSpec c;
  c.name = root.string("name", "cluster");
  const Reader d = root.object("device");
  c.device.name = d.string("name", "device");
  c.device.bf16_tflops = d.number("bf16_tflops", kPositive);
  c.device.fp8_tflops = d.number("fp8_tflops", c.device.fp8_tflops, kAmount);
  c.device.vector_tflops = d.number("vector_tflops", c.device.vector_tflops, kAmount);
  c.device.hbm_gib = d.number("hbm_gib", kPositive);
  c.device.hbm_gbps = d.number("hbm_gbps", kPositive);
  c.device.reserved_gib = d.number("reserved_gib", c.device.reserved_gib, kAmount);
  if (c.device.reserved_gib >= c.device.hbm_gib) d.fail("reserved_gib", "must be below hbm_gib");
  c.device.sustained_share = d.number("sustained_share", c.device.sustained_share, kFraction);

  const Reader t = root.object("topology");
  TopologySpec& top = c.topology;
  top.dies_per_package = t.integer("dies_per_package", top.dies_per_package, kCount);
  top.die_to_die_gbps = top.dies_per_package > 1
                            ? t.number("die_to_die_gbps", kAmount)
                            : t.number("die_to_die_gbps", top.die_to_die_gbps, kAmount);
  top.die_to_die_latency_us = t.number("die_to_die_latency_us", top.die_to_die_latency_us, kAmount);
  top.devices_per_node = t.integer("devices_per_node", kCount);
  if (top.devices_per_node % top.dies_per_package != 0)
    t.fail("devices_per_node", "must be a multiple of dies_per_package");
  top.scale_up_domain = t.integer("scale_up_domain", top.devices_per_node, kCount);
  if (top.scale_up_domain % top.devices_per_node != 0)
    t.fail("scale_up_domain", "must be a multiple of devices_per_node");
  top.scale_up_gbps = t.number("scale_up_gbps", kPositive);
  top.scale_up_latency_us = t.number("scale_up_latency_us", top.scale_up_latency_us, kAmount);
  top.scale_out_gbps = t.number("scale_out_gbps", kPositive);
  top.scale_out_latency_us = t.number("scale_out_latency_us", top.scale_out_latency_us, kAmount);
  top.host_gbps = t.number("host_gbps", kPositive);
  t.reject_unknown();
  d.reject_unknown();

  if (root.has("efficiency")) {
    const Reader e = root.object("efficiency");
    EfficiencySpec& x = c.efficiency;
    if (e.has("gemm")) {
      const Reader g = e.object("gemm");
      x.gemm.max = g.number("max", x.gemm.max, kFraction);
      x.gemm.fp8_max = g.number("fp8_max", x.gemm.fp8_max, kShare);
      x.gemm.memory = g.number("memory", x.gemm.memory, kFraction);
      x.gemm.launch_us = g.number("launch_us", x.gemm.launch_us, kMicroseconds);
      if (x.gemm.fp8_max > 0 && c.device.fp8_tflops <= 0)
        g.fail("fp8_max", "fp8_max given but the device has no fp8_tflops");
      g.reject_unknown();
    }
    x.attention = e.number("attention", x.attention, kFraction);
    x.vector_memory = e.number("vector_memory", x.vector_memory, kFraction);
    x.vector_launch_us = e.number("vector_launch_us", x.vector_launch_us, kMicroseconds);
    x.fused_vector_traffic = e.number("fused_vector_traffic", x.fused_vector_traffic, kFraction);
    x.fused_vector_calls = e.number("fused_vector_calls", x.fused_vector_calls, kFraction);
    x.unfused_attention = e.number("unfused_attention", x.unfused_attention, kFraction);
    x.fp8_attention_speedup =
        e.number("fp8_attention_speedup", x.fp8_attention_speedup, Range<double>::between(1, 4));
    x.collective_max = e.number("collective_max", x.collective_max, kFraction);
    x.collective_half_bytes =
        e.number("collective_half_bytes", x.collective_half_bytes, Range<double>::between(0, 1e15));
    x.collective_launch_us =
        e.number("collective_launch_us", x.collective_launch_us, kMicroseconds);
    x.overlap_compute_penalty =
        e.number("overlap_compute_penalty", x.overlap_compute_penalty, kShare);
    x.ep_overlap_hidden = e.number("ep_overlap_hidden", x.ep_overlap_hidden, kShare);
    x.optimizer_bytes_per_param = e.number("optimizer_bytes_per_param", x.optimizer_bytes_per_param,
                                           Range<double>::between(0, 1e4));
    x.v4_compute_factor =
        e.number("v4_compute_factor", x.v4_compute_factor, Range<double>::between(1, 10));
    e.reject_unknown({"gemm"});
  }
  if (root.has("sources")) {
    const Reader s = root.object("sources");
    const std::vector<std::string> fields = ClusterSpec::field_paths();
    for (const auto& [field, text] : s.value().items()) {
      if (std::find(fields.begin(), fields.end(), field) == fields.end())
        s.fail(field, "names no field of a cluster file (e.g. \"device.bf16_tflops\")");
      c.sources[field] = s.string(field);
    }
  }
  root.reject_unknown({"efficiency", "sources"});
  return c;
}

// The dotted paths of every leaf of a JSON object.
void leaf_paths(const json& j, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& [key, value] : j.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object())
      leaf_paths(value, path, out);
    else
      out.push_back(path);
  }
}

}  // namespace

ClusterSpec ClusterSpec::from_json(const json& j, const std::string& source) {
  return read_cluster(Reader(j, source));
}

ClusterSpec ClusterSpec::load(const std::string& path) {
  const config::Document document = config::Document::load(path, config::Format::kJson);
  return read_cluster(document.root());
}

std::vector<std::string> ClusterSpec::field_paths() {
  json fields = ClusterSpec().to_json();
  fields.erase("sources");
  std::vector<std::string> out;
  leaf_paths(fields, "", out);
  return out;
}

std::string ClusterSpec::source_of(const std::string& field) const {
  const auto it = sources.find(field);
  return it == sources.end() ? "no source given" : it->second;
}

json ClusterSpec::to_json() const {
  const EfficiencySpec& e = efficiency;
  json sources_json = json::object();
  for (const auto& [field, text] : sources) sources_json[field] = text;
  return {{"name", name},
          {"sources", sources_json},
          {"device",
           {{"name", device.name},
            {"bf16_tflops", device.bf16_tflops},
            {"fp8_tflops", device.fp8_tflops},
            {"vector_tflops", device.vector_tflops},
            {"hbm_gib", device.hbm_gib},
            {"hbm_gbps", device.hbm_gbps},
            {"reserved_gib", device.reserved_gib},
            {"sustained_share", device.sustained_share}}},
          {"topology",
           {{"dies_per_package", topology.dies_per_package},
            {"die_to_die_gbps", topology.die_to_die_gbps},
            {"die_to_die_latency_us", topology.die_to_die_latency_us},
            {"devices_per_node", topology.devices_per_node},
            {"scale_up_domain", topology.scale_up_domain},
            {"scale_up_gbps", topology.scale_up_gbps},
            {"scale_up_latency_us", topology.scale_up_latency_us},
            {"scale_out_gbps", topology.scale_out_gbps},
            {"scale_out_latency_us", topology.scale_out_latency_us},
            {"host_gbps", topology.host_gbps}}},
          {"efficiency",
           {{"gemm",
             {{"max", e.gemm.max},
              {"fp8_max", e.gemm.fp8_max},
              {"memory", e.gemm.memory},
              {"launch_us", e.gemm.launch_us}}},
            {"attention", e.attention},
            {"vector_memory", e.vector_memory},
            {"vector_launch_us", e.vector_launch_us},
            {"fused_vector_traffic", e.fused_vector_traffic},
            {"fused_vector_calls", e.fused_vector_calls},
            {"unfused_attention", e.unfused_attention},
            {"fp8_attention_speedup", e.fp8_attention_speedup},
            {"collective_max", e.collective_max},
            {"collective_half_bytes", e.collective_half_bytes},
            {"collective_launch_us", e.collective_launch_us},
            {"overlap_compute_penalty", e.overlap_compute_penalty},
            {"ep_overlap_hidden", e.ep_overlap_hidden},
            {"optimizer_bytes_per_param", e.optimizer_bytes_per_param},
            {"v4_compute_factor", e.v4_compute_factor}}}};
}

double gemm_seconds(const ClusterSpec& c, double m, double n, double k, bool fp8, bool launch) {
  const bool use_fp8 = fp8 && c.device.fp8_tflops > 0 && c.efficiency.gemm.fp8_max > 0;
  const double peak =
      (use_fp8 ? c.device.fp8_tflops : c.device.bf16_tflops) * 1e12 * c.device.sustained_share;
  const double max = use_fp8 ? c.efficiency.gemm.fp8_max : c.efficiency.gemm.max;
  const double element = use_fp8 ? 1.0 : 2.0;
  const double flops = 2 * m * n * k;
  const double bytes = element * (m * k + k * n) + 2 * m * n;
  const double compute = flops / (max * peak);
  const double memory = bytes / (c.efficiency.gemm.memory * c.device.hbm_gbps * 1e9);
  return std::max(compute, memory) + (launch ? c.efficiency.gemm.launch_us * 1e-6 : 0.0);
}

double gemm_efficiency(const ClusterSpec& c, double m, double n, double k, bool fp8, bool launch) {
  const bool use_fp8 = fp8 && c.device.fp8_tflops > 0 && c.efficiency.gemm.fp8_max > 0;
  const double peak = (use_fp8 ? c.device.fp8_tflops : c.device.bf16_tflops) * 1e12;
  return 2 * m * n * k / (peak * gemm_seconds(c, m, n, k, fp8, launch));
}

double collective_efficiency(const ClusterSpec& c, double bytes_per_peer) {
  const double s = std::max(bytes_per_peer, 0.0);
  const double h = c.efficiency.collective_half_bytes;
  return c.efficiency.collective_max * (h > 0 ? s / (s + h) : 1.0);
}

}  // namespace trex::plan
