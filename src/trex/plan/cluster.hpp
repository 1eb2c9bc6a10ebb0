#pragma once
// A cluster for the planner: one accelerator type, its scale-up fabric and
// scale-out network, and the efficiency curves (achieved fraction of peak) for
// GEMMs by shape, attention, non-GEMM (vector) ops and collectives by message
// size. Loaded from configs/clusters/*.json; every field is documented in
// docs/planner.md.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trex::plan {

struct DeviceSpec {
  std::string name;
  double bf16_tflops = 0;    // dense BF16 matmul peak (the MFU denominator)
  double fp8_tflops = 0;     // dense FP8 matmul peak; 0 = no FP8 GEMMs
  double vector_tflops = 0;  // SIMD/vector unit; 0 = non-GEMM ops share the matmul units
  double hbm_gib = 0;
  double hbm_gbps = 0;      // GB/s
  double reserved_gib = 0;  // runtime, allocator fragmentation, workspaces
  // Share of the datasheet tensor-core peaks that a training step sustains
  // beyond the kernel efficiencies below (power and clock limits, gaps between
  // kernels): GEMMs and attention run at this share. 1 = none; calibrated on
  // a published run of the device (docs/planner.md).
  double sustained_share = 1;
};

struct TopologySpec {
  // Devices sharing a package and its die-to-die link (910C: 2 dies, SIO);
  // groups that fit in a package (TP2 on one 910C) use that link.
  int64_t dies_per_package = 1;
  double die_to_die_gbps = 0;
  double die_to_die_latency_us = 0;
  int64_t devices_per_node = 8;
  int64_t scale_up_domain = 8;  // devices sharing the scale-up fabric (NVLink node, UB supernode)
  double scale_up_gbps = 0;     // per device, one direction, GB/s
  double scale_up_latency_us = 0;
  double scale_out_gbps = 0;  // per device, one direction (IB / RoCE)
  double scale_out_latency_us = 0;
  double host_gbps = 0;  // device <-> host memory per device, one direction (offload / swap)
};

// t(M,N,K) = max(2MNK / (max·peak), bytes / (memory·hbm_bw)) + launch.
struct GemmCurve {
  double max = 0.75;   // large-GEMM fraction of peak (BF16)
  double fp8_max = 0;  // large-GEMM fraction of the FP8 peak
  double memory = 0.7;
  double launch_us = 5;
};

struct EfficiencySpec {
  GemmCurve gemm;
  double attention = 0.4;             // core attention kernels, fraction of the BF16 peak
  double vector_memory = 0.6;         // non-GEMM ops, fraction of HBM bandwidth
  double vector_launch_us = 2;        // per non-GEMM kernel launch
  double fused_vector_traffic = 0.5;  // traffic multiplier with fused kernels
  double fused_vector_calls = 0.25;   // launch-count multiplier with fused kernels
  double unfused_attention = 0.7;     // attention efficiency multiplier without fused kernels
  double fp8_attention_speedup = 1;   // FP8 attention kernels vs BF16 (layout `fp8-attention`)
  // Collectives: fraction of link bandwidth for a message of s bytes per peer:
  // collective_max · s / (s + collective_half_bytes).
  double collective_max = 0.7;
  double collective_half_bytes = 262144;
  double collective_launch_us = 10;
  // Fraction by which compute slows while a concurrent collective runs (GPU SMs
  // reserved for DeepEP; ~0 where collectives run on separate engines).
  double overlap_compute_penalty = 0;
  // Share of the EP all-to-all that F&B overlap runs beside compute at all
  // (the rest stays serial: dependencies, stream order, waiting on peers);
  // 1 = all of it.
  double ep_overlap_hidden = 1;
  double optimizer_bytes_per_param = 32;  // HBM traffic of the fused optimizer update
  // Time of a DeepSeek-V4 layer's compute (GEMMs, sparse attention + indexer,
  // compressors, mHC, launches) relative to what the generic curves above
  // give for its FLOPs and traffic: V4's many small, young kernels. 1 = none;
  // calibrated on a published V4 run (docs/planner.md).
  double v4_compute_factor = 1;
};

struct ClusterSpec {
  std::string name;
  DeviceSpec device;
  TopologySpec topology;
  EfficiencySpec efficiency;
  // Where each figure comes from, by field path ("device.bf16_tflops",
  // "efficiency.gemm.fp8_max"): a citation, or a text starting "assumption:".
  // A field without an entry has no stated source.
  std::map<std::string, std::string> sources;

  // The field paths a cluster file may set (what to_json writes).
  static std::vector<std::string> field_paths();
  // sources' entry for `field`, or "no source given".
  std::string source_of(const std::string& field) const;

  static ClusterSpec from_json(const nlohmann::json& json, const std::string& source);
  static ClusterSpec load(const std::string& path);
  nlohmann::json to_json() const;
};

// Achieved fraction of the (BF16 or FP8) peak of one GEMM C[M,N] = A[M,K]·B[K,N].
// launch = false: inside a captured CUDA graph, no launch overhead.
double gemm_efficiency(const ClusterSpec& cluster, double m, double n, double k, bool fp8,
                       bool launch = true);
// Seconds for one GEMM (includes the launch overhead unless launch is false).
double gemm_seconds(const ClusterSpec& cluster, double m, double n, double k, bool fp8,
                    bool launch = true);
// Fraction of link bandwidth for `bytes_per_peer` bytes sent to each peer.
double collective_efficiency(const ClusterSpec& cluster, double bytes_per_peer);

}  // namespace trex::plan
