#include "trex/plan/cluster.hpp"

#include <algorithm>
#include <fstream>

#include "trex/core/error.hpp"

namespace trex::plan {

namespace {

using json = nlohmann::json;

// Reads optional numeric fields of one JSON object, naming "section.key" on error.
class Reader {
 public:
  Reader(const json& j, std::string source, std::string section)
      : j_(j), source_(std::move(source)), section_(std::move(section)) {
    if (!j_.is_object()) throw Error("must be an object").file(source_).field(section_);
  }
  void number(const char* key, double& out, bool required, double lo, double hi) const {
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) throw Error("missing field").file(source_).field(path(key));
      return;
    }
    if (!it->is_number()) throw Error("must be a number").file(source_).field(path(key));
    double v = it->get<double>();
    if (!(v >= lo && v <= hi))
      throw Error("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                  std::to_string(v))
          .file(source_)
          .field(path(key));
    out = v;
  }
  void integer(const char* key, int64_t& out, bool required) const {
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) throw Error("missing field").file(source_).field(path(key));
      return;
    }
    if (!it->is_number_integer() || it->get<int64_t>() <= 0)
      throw Error("must be a positive integer").file(source_).field(path(key));
    out = it->get<int64_t>();
  }
  const json* child(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }

 private:
  std::string path(const char* key) const { return section_.empty() ? key : section_ + "." + key; }
  const json& j_;
  std::string source_, section_;
};

constexpr double kBig = 1e9;

// An optional string field (json::value() would throw json::type_error on a number).
std::string optional_string(const json& j, const char* key, const std::string& fallback,
                            const std::string& source, const std::string& field) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_string()) throw Error("must be a string").file(source).field(field);
  return it->get<std::string>();
}

}  // namespace

ClusterSpec ClusterSpec::from_json(const json& j, const std::string& source) {
  ClusterSpec c;
  Reader root(j, source, "");
  c.name = optional_string(j, "name", "cluster", source, "name");
  const json* dev = root.child("device");
  if (!dev) throw Error("missing section").file(source).field("device");
  Reader d(*dev, source, "device");
  c.device.name = optional_string(*dev, "name", "device", source, "device.name");
  d.number("bf16_tflops", c.device.bf16_tflops, true, 1e-6, kBig);
  d.number("fp8_tflops", c.device.fp8_tflops, false, 0, kBig);
  d.number("vector_tflops", c.device.vector_tflops, false, 0, kBig);
  d.number("hbm_gib", c.device.hbm_gib, true, 1e-6, kBig);
  d.number("hbm_gbps", c.device.hbm_gbps, true, 1e-6, kBig);
  d.number("reserved_gib", c.device.reserved_gib, false, 0, kBig);
  if (c.device.reserved_gib >= c.device.hbm_gib)
    throw Error("must be below hbm_gib").file(source).field("device.reserved_gib");

  const json* top = root.child("topology");
  if (!top) throw Error("missing section").file(source).field("topology");
  Reader t(*top, source, "topology");
  t.integer("dies_per_package", c.topology.dies_per_package, false);
  t.number("die_to_die_gbps", c.topology.die_to_die_gbps, c.topology.dies_per_package > 1, 0, kBig);
  t.number("die_to_die_latency_us", c.topology.die_to_die_latency_us, false, 0, kBig);
  t.integer("devices_per_node", c.topology.devices_per_node, true);
  if (c.topology.devices_per_node % c.topology.dies_per_package != 0)
    throw Error("must be a multiple of dies_per_package")
        .file(source)
        .field("topology.devices_per_node");
  c.topology.scale_up_domain = c.topology.devices_per_node;
  t.integer("scale_up_domain", c.topology.scale_up_domain, false);
  if (c.topology.scale_up_domain % c.topology.devices_per_node != 0)
    throw Error("must be a multiple of devices_per_node")
        .file(source)
        .field("topology.scale_up_domain");
  t.number("scale_up_gbps", c.topology.scale_up_gbps, true, 1e-6, kBig);
  t.number("scale_up_latency_us", c.topology.scale_up_latency_us, false, 0, kBig);
  t.number("scale_out_gbps", c.topology.scale_out_gbps, true, 1e-6, kBig);
  t.number("scale_out_latency_us", c.topology.scale_out_latency_us, false, 0, kBig);
  t.number("host_gbps", c.topology.host_gbps, true, 1e-6, kBig);

  if (const json* eff = root.child("efficiency")) {
    Reader e(*eff, source, "efficiency");
    EfficiencySpec& x = c.efficiency;
    if (const json* g = e.child("gemm")) {
      Reader gr(*g, source, "efficiency.gemm");
      gr.number("max", x.gemm.max, false, 1e-3, 1);
      gr.number("fp8_max", x.gemm.fp8_max, false, 0, 1);
      gr.number("memory", x.gemm.memory, false, 1e-3, 1);
      gr.number("launch_us", x.gemm.launch_us, false, 0, 1e6);
    }
    e.number("attention", x.attention, false, 1e-3, 1);
    e.number("vector_memory", x.vector_memory, false, 1e-3, 1);
    e.number("vector_launch_us", x.vector_launch_us, false, 0, 1e6);
    e.number("fused_vector_traffic", x.fused_vector_traffic, false, 1e-3, 1);
    e.number("fused_vector_calls", x.fused_vector_calls, false, 1e-3, 1);
    e.number("unfused_attention", x.unfused_attention, false, 1e-3, 1);
    e.number("collective_max", x.collective_max, false, 1e-3, 1);
    e.number("collective_half_bytes", x.collective_half_bytes, false, 0, 1e15);
    e.number("collective_launch_us", x.collective_launch_us, false, 0, 1e6);
    e.number("overlap_compute_penalty", x.overlap_compute_penalty, false, 0, 1);
    e.number("optimizer_bytes_per_param", x.optimizer_bytes_per_param, false, 0, 1e4);
  }
  if (c.efficiency.gemm.fp8_max > 0 && c.device.fp8_tflops <= 0)
    throw Error("fp8_max given but the device has no fp8_tflops")
        .file(source)
        .field("efficiency.gemm.fp8_max");
  return c;
}

ClusterSpec ClusterSpec::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open cluster spec").file(path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw Error(std::string("invalid JSON: ") + e.what()).file(path);
  }
  return from_json(j, path);
}

json ClusterSpec::to_json() const {
  const EfficiencySpec& e = efficiency;
  return {{"name", name},
          {"device",
           {{"name", device.name},
            {"bf16_tflops", device.bf16_tflops},
            {"fp8_tflops", device.fp8_tflops},
            {"vector_tflops", device.vector_tflops},
            {"hbm_gib", device.hbm_gib},
            {"hbm_gbps", device.hbm_gbps},
            {"reserved_gib", device.reserved_gib}}},
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
            {"collective_max", e.collective_max},
            {"collective_half_bytes", e.collective_half_bytes},
            {"collective_launch_us", e.collective_launch_us},
            {"overlap_compute_penalty", e.overlap_compute_penalty},
            {"optimizer_bytes_per_param", e.optimizer_bytes_per_param}}}};
}

double gemm_seconds(const ClusterSpec& c, double m, double n, double k, bool fp8) {
  const bool use_fp8 = fp8 && c.device.fp8_tflops > 0 && c.efficiency.gemm.fp8_max > 0;
  const double peak = (use_fp8 ? c.device.fp8_tflops : c.device.bf16_tflops) * 1e12;
  const double max = use_fp8 ? c.efficiency.gemm.fp8_max : c.efficiency.gemm.max;
  const double element = use_fp8 ? 1.0 : 2.0;
  const double flops = 2 * m * n * k;
  const double bytes = element * (m * k + k * n) + 2 * m * n;
  const double compute = flops / (max * peak);
  const double memory = bytes / (c.efficiency.gemm.memory * c.device.hbm_gbps * 1e9);
  return std::max(compute, memory) + c.efficiency.gemm.launch_us * 1e-6;
}

double gemm_efficiency(const ClusterSpec& c, double m, double n, double k, bool fp8) {
  const bool use_fp8 = fp8 && c.device.fp8_tflops > 0 && c.efficiency.gemm.fp8_max > 0;
  const double peak = (use_fp8 ? c.device.fp8_tflops : c.device.bf16_tflops) * 1e12;
  return 2 * m * n * k / (peak * gemm_seconds(c, m, n, k, fp8));
}

double collective_efficiency(const ClusterSpec& c, double bytes_per_peer) {
  const double s = std::max(bytes_per_peer, 0.0);
  const double h = c.efficiency.collective_half_bytes;
  return c.efficiency.collective_max * (h > 0 ? s / (s + h) : 1.0);
}

}  // namespace trex::plan
