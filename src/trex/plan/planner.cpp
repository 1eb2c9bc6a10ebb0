#include "trex/plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "trex/core/error.hpp"
#include "trex/plan/job_answers.hpp"

namespace trex::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool is_dualpipe(Schedule s) {
  return s == Schedule::kDualPipe || s == Schedule::kDualPipeV;
}

// Which model chunks (indices into the partition) a pipeline rank holds.
std::vector<int64_t> chunks_of_rank(const Layout& l, int64_t rank) {
  std::vector<int64_t> c;
  switch (l.schedule) {
    case Schedule::k1F1B:
      c = {rank};
      break;
    case Schedule::kInterleaved:
      for (int64_t v = 0; v < l.vpp; ++v) c.push_back(rank + v * l.pp);
      break;
    case Schedule::kDualPipe:  // stage r and a copy of stage P-1-r
      c = {rank, l.pp - 1 - rank};
      break;
    case Schedule::kDualPipeV:  // stages r and 2P-1-r of 2P
      c = {rank, 2 * l.pp - 1 - rank};
      break;
  }
  return c;
}

int64_t chunk_count(const Layout& l) {
  switch (l.schedule) {
    case Schedule::kInterleaved:
      return l.pp * l.vpp;
    case Schedule::kDualPipeV:
      return 2 * l.pp;
    default:
      return l.pp;
  }
}

// Stage-equivalents of activations held by pipeline rank 0 (the worst) at peak.
double in_flight_stages(const Layout& l, int64_t micro_batches) {
  const double p = static_cast<double>(l.pp), m = static_cast<double>(micro_batches);
  if (l.pp == 1) return 1;
  switch (l.schedule) {
    case Schedule::k1F1B:
      return std::min(p, m);
    case Schedule::kInterleaved: {
      // Megatron's warm-up on rank 0: 2(P-1) + (V-1)P chunk forwards, +1 in steady state.
      const double v = static_cast<double>(l.vpp);
      return std::min((2 * (p - 1) + (v - 1) * p + 1) / v, m);
    }
    case Schedule::kDualPipe:
      return std::min(p + 1, m) / 2;  // P+1 chunk copies, a chunk is half of the rank's layers
    case Schedule::kDualPipeV:
      // DualPipe's README: P+1 stage activations; a rank's two half-stages make one stage.
      return std::min(p + 1, m);
  }
  return p;
}

struct LinkTime {
  double bandwidth;  // bytes/s
  double latency;    // s
};

// Link a group of `span` consecutive-ish devices communicates over.
LinkTime group_link(const ClusterSpec& c, int64_t span, bool topology_aware) {
  if (c.topology.dies_per_package > 1 && span <= c.topology.dies_per_package &&
      c.topology.die_to_die_gbps > 0)
    return {c.topology.die_to_die_gbps * 1e9, c.topology.die_to_die_latency_us * 1e-6};
  const int64_t domain = topology_aware ? c.topology.scale_up_domain : c.topology.devices_per_node;
  if (span <= domain)
    return {c.topology.scale_up_gbps * 1e9, c.topology.scale_up_latency_us * 1e-6};
  return {c.topology.scale_out_gbps * 1e9, c.topology.scale_out_latency_us * 1e-6};
}

// Ring collective (reduce-scatter or all-gather) of `bytes` per device over n ranks.
double ring_seconds(const ClusterSpec& c, double bytes, int64_t n, const LinkTime& link) {
  if (n <= 1 || bytes <= 0) return 0;
  const double nn = static_cast<double>(n);
  const double per_step = bytes / nn;
  return bytes * (nn - 1) / nn / (link.bandwidth * collective_efficiency(c, per_step)) +
         (nn - 1) * link.latency + c.efficiency.collective_launch_us * 1e-6;
}

}  // namespace

// ---- names ----

double expert_weight_bytes(const std::string& format) {
  std::string names;
  for (const ExpertWeightFormat& f : kExpertWeightFormats) {
    if (format == f.name) return f.bytes;
    names += std::string(names.empty() ? "" : ", ") + f.name;
  }
  throw Error("unknown expert weight format '" + format + "' (one of: " + names + ")")
      .field("expert-weights");
}

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}
std::string to_string(Schedule s) {
  switch (s) {
    case Schedule::k1F1B:
      return "1f1b";
    case Schedule::kInterleaved:
      return "interleaved";
    case Schedule::kDualPipe:
      return "dualpipe";
    case Schedule::kDualPipeV:
      return "dualpipev";
  }
  return "?";
}
std::string to_string(Optimizer o) {
  return o == Optimizer::kAdamW ? "adamw" : "muon";
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  throw Error("unknown recompute policy '" + s + "' (none, selective, full)").field("recompute");
}
Schedule parse_schedule(const std::string& s) {
  if (s == "1f1b") return Schedule::k1F1B;
  if (s == "interleaved") return Schedule::kInterleaved;
  if (s == "dualpipe") return Schedule::kDualPipe;
  if (s == "dualpipev") return Schedule::kDualPipeV;
  throw Error("unknown schedule '" + s + "' (1f1b, interleaved, dualpipe, dualpipev)")
      .field("schedule");
}
Optimizer parse_optimizer(const std::string& s) {
  if (s == "adamw") return Optimizer::kAdamW;
  if (s == "muon") return Optimizer::kMuon;
  throw Error("unknown optimizer '" + s + "' (adamw, muon)").field("optimizer");
}

std::string Layout::describe() const {
  char buf[320];
  std::snprintf(
      buf, sizeof buf, "TP%lld PP%lld%s EP%lld CP%lld mbs%lld %s rc=%s zero%d%s%s%s%s%s%s%s%s%s%s",
      static_cast<long long>(tp), static_cast<long long>(pp),
      schedule == Schedule::kInterleaved ? (" VPP" + std::to_string(vpp)).c_str() : "",
      static_cast<long long>(ep), static_cast<long long>(cp), static_cast<long long>(mbs),
      to_string(schedule).c_str(), to_string(recompute).c_str(), zero,
      offload_optimizer ? " offload" : "",
      overlap ? (ep_overlap ? " overlap" : " overlap(no-EP)") : " no-overlap",
      fused_kernels ? "" : " unfused", topology_aware ? "" : " naive-placement", fp8 ? " fp8" : "",
      fp8_attention ? " fp8-attention" : "", cuda_graphs ? " cuda-graphs" : "",
      fp8 && !fp8_dispatch ? " bf16-dispatch" : "", edge_self_overlap ? "" : " no-edge-overlap",
      expert_rebalancing ? " rebalance" : "");
  return buf;
}

// ---- partition ----

std::vector<size_t> balanced_partition(const std::vector<double>& w, int64_t parts) {
  require(parts >= 1, "partition needs at least one part");
  const size_t n = w.size();
  double remaining = 0;
  for (double x : w) remaining += x;
  std::vector<size_t> starts(static_cast<size_t>(parts), n);
  size_t i = 0;
  for (int64_t p = 0; p < parts; ++p) {
    starts[static_cast<size_t>(p)] = i;
    const size_t parts_left = static_cast<size_t>(parts - p);
    const double target = remaining / static_cast<double>(parts_left);
    double sum = 0;
    // Take items while that brings the chunk closer to its share, leaving at
    // least one item for every later chunk.
    while (i < n && (sum == 0 || n - i > parts_left - 1)) {
      if (sum > 0 && sum + w[i] - target > target - sum) break;
      sum += w[i++];
    }
    if (p == parts - 1)
      while (i < n) sum += w[i++];
    remaining -= sum;
  }
  return starts;
}

// ---- evaluation ----

Estimate evaluate(const ModelShape& model, const ClusterSpec& cluster, const Job& job,
                  const Layout& l) {
  Estimate e;
  e.layout = l;
  auto invalid = [&](const std::string& why) {
    e.valid = false;
    e.invalid_reason = why;
    return e;
  };
  require(job.devices > 0 && job.global_batch > 0 && job.seq_len > 0,
          "devices, global batch and sequence length must be > 0");
  if (l.tp < 1 || l.pp < 1 || l.vpp < 1 || l.ep < 1 || l.cp < 1 || l.mbs < 1)
    return invalid("parallel sizes must be >= 1");
  if (job.devices % (l.tp * l.cp * l.pp) != 0) return invalid("TP·CP·PP does not divide devices");
  const int64_t dp = l.dp(job.devices);
  e.dp = dp;
  if (job.global_batch % (dp * l.mbs) != 0) return invalid("DP·mbs does not divide global batch");
  const int64_t m = job.global_batch / (dp * l.mbs);
  e.micro_batches = m;
  if ((dp * l.cp * l.tp) % l.ep != 0) return invalid("EP does not divide DP·CP·TP");
  if (model.n_experts % l.ep != 0) return invalid("EP does not divide the expert count");
  if (job.seq_len % l.cp != 0) return invalid("CP does not divide the sequence length");
  if (model.hidden % l.tp != 0) return invalid("TP does not divide the hidden size");
  if (l.tp > cluster.topology.devices_per_node) return invalid("TP larger than a node");
  if (l.schedule == Schedule::kInterleaved && (l.vpp < 2 || l.pp < 2))
    return invalid("interleaved needs PP >= 2 and VPP >= 2");
  if (l.schedule != Schedule::kInterleaved && l.vpp != 1)
    return invalid("VPP only with interleaved");
  if (l.pp == 1 && l.schedule != Schedule::k1F1B) return invalid("PP1 runs without a schedule");
  if (l.schedule == Schedule::kInterleaved && m % l.pp != 0)
    return invalid("interleaved needs micro-batches divisible by PP");
  if (is_dualpipe(l.schedule) && m < 2 * l.pp)
    return invalid("DualPipe(V) needs >= 2·PP micro-batches");
  if (l.schedule == Schedule::kDualPipe && (l.pp % 2 != 0 || m % 2 != 0))
    return invalid("DualPipe needs even PP and an even micro-batch count");
  const int64_t chunks = chunk_count(l);
  if (static_cast<int64_t>(model.layers.size()) < chunks) return invalid("more stages than layers");
  if (l.fp8 && !(cluster.device.fp8_tflops > 0 && cluster.efficiency.gemm.fp8_max > 0))
    return invalid("device has no FP8 GEMMs");
  if (l.fp8_attention && !(cluster.device.fp8_tflops > 0))
    return invalid("device has no FP8 attention");
  if (l.zero < 0 || l.zero > 3) return invalid("ZeRO level must be 0..3");

  const EfficiencySpec& eff = cluster.efficiency;
  const double peak = cluster.device.bf16_tflops * 1e12;
  const double hbm = cluster.device.hbm_gbps * 1e9;
  const double seq = static_cast<double>(job.seq_len);
  const double h = static_cast<double>(model.hidden);
  const double tp = static_cast<double>(l.tp), cp = static_cast<double>(l.cp),
               ep = static_cast<double>(l.ep), mbs = static_cast<double>(l.mbs);
  const double tokens_mb = mbs * seq / cp;   // tokens per micro-batch per CP rank
  const double tokens_dev = tokens_mb / tp;  // compute share of a device (SP shards tokens)
  const double top_k = static_cast<double>(model.top_k);
  const double local_experts = static_cast<double>(model.n_experts) / ep;

  // Efficiencies from representative shapes.
  // Under CUDA graphs no GEMM pays a launch (nor do the other kernels, below).
  const double dense_eff = gemm_efficiency(cluster, tokens_mb, h / tp, h, l.fp8, !l.cuda_graphs);
  require(job.expert_imbalance >= 1, "expert imbalance must be >= 1");
  require(job.goodput > 0 && job.goodput <= 1, "goodput must be in (0, 1]");
  require(job.master_bytes >= 0 && job.moment_bytes > 0 && job.grad_bytes > 0,
          "optimizer state element sizes must be > 0 (master weights >= 0)");
  const double imbalance =
      l.expert_rebalancing ? 1 + (job.expert_imbalance - 1) / 4 : job.expert_imbalance;
  const double expert_m = std::max(1.0, tokens_dev * top_k * imbalance / local_experts);
  const double expert_eff = gemm_efficiency(
      cluster, expert_m, static_cast<double>(model.expert_ffn), h, l.fp8, !l.cuda_graphs);
  const double gemm_peak =
      l.fp8 ? cluster.device.fp8_tflops * 1e12 : peak;  // dense/expert GEMM peak
  const double attn_eff = eff.attention * (l.fused_kernels ? 1.0 : eff.unfused_attention);
  const double attention_peak =
      peak * cluster.device.sustained_share * (l.fp8_attention ? eff.fp8_attention_speedup : 1.0);
  const double vec_traffic = l.fused_kernels ? eff.fused_vector_traffic : 1.0;
  const double vec_calls = l.fused_kernels ? eff.fused_vector_calls : 1.0;

  // Per-layer, per-micro-batch times on one device (forward+backward).
  struct LayerCost {
    double gemm, attention, vector, launch, recompute, a2a;
  };
  const int64_t domain =
      l.topology_aware ? cluster.topology.scale_up_domain : cluster.topology.devices_per_node;
  // A2A: share of peers inside the domain, and (hierarchical kernels) one
  // inter-domain copy per distinct remote domain hit.
  // Expert TP is 1: the EP group folds over TP×CP×DP, so it takes consecutive
  // devices and a scale-up domain holds `domain` of its ranks, whatever the TP.
  const int64_t ep_in_domain = std::min<int64_t>(l.ep, domain);
  const double intra_frac = l.ep > 1 ? static_cast<double>(ep_in_domain - 1) / (ep - 1) : 0;
  const double domains = std::ceil(ep / static_cast<double>(ep_in_domain));
  const double remote_copies_naive = top_k * (1 - intra_frac);
  double remote_copies_dedup = (domains - 1) * (1 - std::pow(1 - 1 / domains, top_k));
  // Group-limited routing with one expert group per domain (DeepSeek-V3's
  // "at most 4 nodes per token"): at most `limit` domains, one of them likely local.
  if (model.routed_group_limit > 0 && static_cast<int64_t>(domains) == model.routed_groups)
    remote_copies_dedup =
        std::min(remote_copies_dedup,
                 static_cast<double>(model.routed_group_limit) * (domains - 1) / domains);
  const double remote_copies =
      l.ep > 1 ? (l.topology_aware ? std::min(remote_copies_naive, remote_copies_dedup)
                                   : remote_copies_naive)
               : 0;
  const double intra_copies = l.ep > 1 ? top_k * intra_frac : 0;
  auto a2a_seconds = [&](double element_bytes) {
    if (l.ep == 1) return 0.0;
    const double token_bytes = tokens_dev * imbalance * h * element_bytes;
    const double intra = token_bytes * intra_copies;
    const double inter = token_bytes * remote_copies;
    const double per_peer = token_bytes * top_k / ep;
    const double ce = collective_efficiency(cluster, per_peer);
    double t = intra / (cluster.topology.scale_up_gbps * 1e9 * ce);
    double latency = cluster.topology.scale_up_latency_us;
    if (inter > 0) {
      t = std::max(t, inter / (cluster.topology.scale_out_gbps * 1e9 * ce));
      latency = cluster.topology.scale_out_latency_us;
    }
    return t + (latency + eff.collective_launch_us) * 1e-6;
  };
  const double dispatch = a2a_seconds(l.fp8 && l.fp8_dispatch ? 1.0 : 2.0);
  const double combine = a2a_seconds(2.0);

  const bool v4_layers = model.family == "deepseek_v4";
  auto layer_cost = [&](const LayerShape& s) {
    LayerCost c{};
    c.gemm = s.gemm_flops * tokens_dev / (dense_eff * gemm_peak) +
             s.expert_flops * tokens_dev * imbalance / (expert_eff * gemm_peak);
    c.attention = s.attention_flops * tokens_dev / (attn_eff * attention_peak);
    // FP8: every GEMM input is quantised (read 2 + write 1 byte) for the
    // forward, and its gradient / transposed copy for dgrad and wgrad.
    const double fp8_casts = l.fp8 ? 3.0 * s.gemm_input_elements * vec_traffic : 0;
    c.vector = (3 * (s.vector_bytes * vec_traffic + (l.fused_kernels ? 0 : s.unfused_extra_bytes)) +
                3 * fp8_casts) *
               tokens_dev / (eff.vector_memory * hbm);
    c.launch = l.cuda_graphs
                   ? 0.0
                   : 3 *
                         (static_cast<double>(s.gemm_calls) * eff.gemm.launch_us +
                          static_cast<double>(s.vector_calls) * vec_calls * eff.vector_launch_us) *
                         1e-6;
    if (v4_layers) {
      c.gemm *= eff.v4_compute_factor;
      c.attention *= eff.v4_compute_factor;
      c.vector *= eff.v4_compute_factor;
      c.launch *= eff.v4_compute_factor;
    }
    const double a2a_once = s.has_experts ? dispatch + combine : 0;  // one forward pass
    c.a2a = 2 * a2a_once;
    switch (l.recompute) {
      case Recompute::kNone:
        break;
      case Recompute::kSelective:
        c.recompute = s.selective_recompute_flops * tokens_dev / (dense_eff * gemm_peak) *
                          (v4_layers ? eff.v4_compute_factor : 1.0) +
                      0.25 * c.vector / 3;  // norms / mHC re-run: part of the forward traffic
        break;
      case Recompute::kFull:
        c.recompute = (c.gemm + c.attention + c.vector + c.launch) / 3;
        c.a2a += a2a_once;
        break;
    }
    return c;
  };

  // Model chunks: layers, head on the last chunk (its GEMM), balanced by compute.
  std::vector<double> weights;
  for (const LayerShape& s : model.layers)
    weights.push_back(s.gemm_flops + s.expert_flops + s.attention_flops);
  weights.back() += model.head_flops;
  const std::vector<size_t> starts = balanced_partition(weights, chunks);
  auto chunk_range = [&](int64_t c) {
    size_t b = starts[static_cast<size_t>(c)];
    size_t en = c + 1 < chunks ? starts[static_cast<size_t>(c + 1)] : model.layers.size();
    return std::pair<size_t, size_t>(b, en);
  };

  const double in_flight = in_flight_stages(l, m);
  // Master weights + AdamW m, v or Muon momentum, in Job::moment_bytes each.
  const double opt_state_bytes =
      job.master_bytes + (job.optimizer == Optimizer::kAdamW ? 2.0 : 1.0) * job.moment_bytes;
  const double dense_group = static_cast<double>(dp) * cp;             // dense-param DP group
  const double expert_group = static_cast<double>(dp) * cp * tp / ep;  // expert-DP group
  const LinkTime tp_link = group_link(cluster, l.tp, l.topology_aware);
  const LinkTime cp_link = group_link(cluster, l.tp * l.cp, l.topology_aware);
  const LinkTime dp_link = group_link(cluster, job.devices / l.pp, l.topology_aware);
  const LinkTime pp_link = group_link(cluster, job.devices, l.topology_aware);

  double best_step = -1;
  for (int64_t rank = 0; rank < l.pp; ++rank) {
    const std::vector<int64_t> mine = chunks_of_rank(l, rank);
    // DualPipe: each micro-batch runs through one of the two copies.
    const double work_share = l.schedule == Schedule::kDualPipe && mine[0] != mine[1] ? 0.5 : 1.0;
    LayerCost sum{};
    double dense_params = 0, expert_params = 0, act_layer_bytes = 0, moe_layers = 0;
    double tp_bytes_layers = 0;
    bool has_head = false, has_embed = false;
    for (size_t idx = 0; idx < mine.size(); ++idx) {
      const int64_t c = mine[idx];
      if (l.schedule == Schedule::kDualPipe && idx == 1 && c == mine[0]) continue;
      auto [b, en] = chunk_range(c);
      if (c == 0) has_embed = true;
      if (c == chunks - 1) has_head = true;
      for (size_t i = b; i < en; ++i) {
        const LayerShape& s = model.layers[i];
        LayerCost lc = layer_cost(s);
        sum.gemm += lc.gemm * work_share;
        sum.attention += lc.attention * work_share;
        sum.vector += lc.vector * work_share;
        sum.launch += lc.launch * work_share;
        sum.recompute += lc.recompute * work_share;
        sum.a2a += lc.a2a * work_share;
        dense_params += s.dense_params;
        expert_params += s.expert_params;
        moe_layers += s.has_experts ? work_share : 0;
        tp_bytes_layers += (s.has_experts ? 2 : 4) * work_share;
        act_layer_bytes += l.recompute == Recompute::kNone        ? s.act_bytes_none
                           : l.recompute == Recompute::kSelective ? s.act_bytes_selective
                                                                  : s.act_bytes_full;
        if (l.fp8 && l.recompute != Recompute::kFull)
          act_layer_bytes -= 0.5 * s.fp8_cacheable_bytes;
      }
    }
    double head_time = 0;
    if (has_head) {
      head_time = model.head_flops * tokens_dev * work_share / (dense_eff * gemm_peak);
      if (l.recompute == Recompute::kFull) sum.recompute += head_time / 3;
      dense_params += model.head_params;
    }
    if (has_embed) dense_params += model.embed_params;
    sum.gemm += head_time;

    // ---- memory ----
    MemoryEstimate mem;
    const double dense_dev = dense_params / tp;
    const double expert_dev = expert_params / ep;
    const double params_dev = dense_dev + expert_dev;
    const double shard =
        (l.zero >= 1) ? dense_dev / dense_group + expert_dev / expert_group : params_dev;
    // bf16 dense weights; routed experts in Job::expert_weight_bytes.
    mem.weights = (l.zero >= 3) ? 2 * dense_dev / dense_group +
                                      job.expert_weight_bytes * expert_dev / expert_group
                                : 2 * dense_dev + job.expert_weight_bytes * expert_dev;
    mem.gradients = job.grad_bytes * ((l.zero >= 2) ? shard : params_dev);
    // Master weights and moments on the ZeRO shard.
    mem.optimizer = l.offload_optimizer ? 0 : opt_state_bytes * shard;
    // Activations: stored per micro-batch per layer, × in-flight stage copies.
    mem.activations = act_layer_bytes * tokens_dev * in_flight;
    if (has_head)
      mem.logits = tokens_dev * static_cast<double>(model.vocab) * 4 *
                   (1 + static_cast<double>(model.layers.back().kind == LayerKind::kMtp));
    const double a2a_buffer = moe_layers > 0 ? tokens_dev * top_k * h * 2 * 2 : 0;
    mem.comm_buffers = a2a_buffer * (l.overlap ? 2 : 1) + (l.tp > 1 ? tokens_mb * h * 2 : 0) +
                       2 * tokens_dev * static_cast<double>(model.residual_width) * 2;
    if (l.zero >= 3 && !mine.empty()) {  // gathered parameters: current + prefetched layer
      const double layers_here =
          std::max(1.0, static_cast<double>(model.layers.size()) *
                            static_cast<double>(mine.size()) / static_cast<double>(chunks));
      mem.comm_buffers += 2 * 2 * params_dev / layers_here;
    }
    if (l.offload_optimizer)  // staging for the largest layer's states
      mem.comm_buffers += opt_state_bytes * shard / std::max<double>(1, mine.size() * 4.0);
    mem.reserved = cluster.device.reserved_gib * kGiB;
    mem.capacity = cluster.device.hbm_gib * kGiB;

    // ---- time ----
    TimeEstimate t;
    const double md = static_cast<double>(m);
    const double fwd = (sum.gemm + sum.attention + sum.vector + sum.launch) / 3;
    const double bwd = 2 * fwd + sum.recompute;
    const double compute_mb = fwd + bwd;
    // TP (SP all-gather / reduce-scatter) and CP (KV exchange) per micro-batch.
    double tp_cp = 0;
    if (l.tp > 1)
      tp_cp += tp_bytes_layers * 2 *
               ring_seconds(cluster, tokens_mb * h * 2, l.tp, tp_link);  // fwd + bwd
    if (l.cp > 1) {
      double layers_here = 0;
      for (int64_t c : mine) {
        auto [b, en] = chunk_range(c);
        layers_here += static_cast<double>(en - b);
      }
      tp_cp += layers_here * work_share * 2 *
               ring_seconds(cluster, mbs * seq * h * 2 / tp, l.cp, cp_link);
    }
    const double tp_cp_exposed = tp_cp * (l.overlap ? 0.3 : 1.0);
    // PP p2p: activations out / gradients in for each chunk boundary.
    double pp = 0;
    if (l.pp > 1) {
      const double bytes = tokens_dev * static_cast<double>(model.residual_width) * 2;
      pp = 2 * static_cast<double>(mine.size()) * work_share *
           (bytes / pp_link.bandwidth + pp_link.latency + eff.collective_launch_us * 1e-6);
    }
    const double pp_exposed = l.overlap ? 0.1 * pp : pp;
    // A2A: with overlap, under the paired micro-batch in steady state and
    // half-hidden in warm-up / cool-down (self-overlap with the shared expert).
    // Overlap is partial: while the A2A runs its kernels hold a share s of the
    // SMs (overlap_compute_penalty), so compute c with an A2A a alongside takes
    // max(a, c + s·a) instead of max(a, c).
    double a2a_exposed_mb = sum.a2a, penalty_mb = 0;
    if (l.overlap && l.ep_overlap && l.ep > 1) {
      const double edge = std::min(1.0, static_cast<double>(std::max<int64_t>(l.pp, 1)) / md);
      const double a = sum.a2a, c = compute_mb, s = eff.overlap_compute_penalty;
      // Only a share h of the A2A runs beside compute at all (ep_overlap_hidden);
      // the rest stays on the critical path.
      const double concurrent = eff.ep_overlap_hidden * a;
      // Warm-up/cool-down: half hidden under the shared expert (MindSpeed), at
      // most the share the stack hides at all.
      const double edge_hidden = l.edge_self_overlap ? std::min(0.5, eff.ep_overlap_hidden) : 0.0;
      a2a_exposed_mb = (1 - edge) * (std::max(0.0, concurrent - c) + (a - concurrent)) +
                       edge * (1 - edge_hidden) * a;
      penalty_mb = (1 - edge) * std::max(0.0, c + s * concurrent - std::max(concurrent, c)) +
                   edge * s * edge_hidden * a;
    }
    const double per_mb = compute_mb + a2a_exposed_mb + tp_cp_exposed + pp_exposed + penalty_mb;
    // Pipeline bubble.
    double bubble = 0;
    const double p = static_cast<double>(l.pp);
    const double f_mb = fwd + (per_mb - compute_mb) / 3, b_mb = per_mb - f_mb;
    switch (l.schedule) {
      case Schedule::k1F1B:
        bubble = (p - 1) * per_mb;
        break;
      case Schedule::kInterleaved:
        bubble = (p - 1) * per_mb / static_cast<double>(l.vpp);
        break;
      case Schedule::kDualPipe:  // (P/2-1)(F&B + B - 3W), W = B/2, F&B ≈ F + B
        bubble = (p / 2 - 1) * (f_mb + b_mb + b_mb - 1.5 * b_mb);
        break;
      case Schedule::kDualPipeV:  // (P-1)(F&B + B - W) - F on half-rank chunks
        bubble = std::max(0.0, (p - 1) * (f_mb / 2 + b_mb / 2 + b_mb / 2 - b_mb / 4) - f_mb / 2);
        break;
    }
    if (l.pp == 1) bubble = 0;
    // DP: grad reduce-scatter + param all-gather (ZeRO>=1) or all-reduce (ZeRO 0);
    // ZeRO-3 also gathers parameters for every micro-batch's forward and backward.
    const double grad_comm_bytes = 2;  // bf16 on the wire
    double dp_time = 0;
    {
      const double dense_b = dense_dev * grad_comm_bytes, expert_b = expert_dev * grad_comm_bytes;
      const double rs =
          ring_seconds(cluster, dense_b, static_cast<int64_t>(dense_group), dp_link) +
          ring_seconds(cluster, expert_b, static_cast<int64_t>(expert_group), dp_link);
      dp_time = 2 * rs;  // reduce-scatter + all-gather (or the two halves of all-reduce)
      if (l.zero >= 3) dp_time += 2 * md * rs;
    }
    const double window = l.zero >= 3 ? md * compute_mb : compute_mb;  // one fwd + one bwd
    const double dp_exposed = l.overlap ? std::max(0.0, dp_time - window) : dp_time;
    // Optimizer update on the local shard (HBM-bound), Muon's Newton–Schulz as GEMMs.
    double opt = shard * eff.optimizer_bytes_per_param / (eff.vector_memory * hbm);
    if (job.optimizer == Optimizer::kMuon)
      opt += shard * 30 * static_cast<double>(model.min_matrix_dim) /
             (eff.gemm.max * peak * cluster.device.sustained_share);
    double offload = 0;
    if (l.offload_optimizer) {
      const double swap = opt_state_bytes * shard / (cluster.topology.host_gbps * 1e9);
      offload = l.overlap ? swap : 2 * swap;  // swap-out hidden under the next forward
    }

    t.gemm = sum.gemm * md;
    t.attention = sum.attention * md;
    t.vector = sum.vector * md;
    t.launch = sum.launch * md;
    t.recompute = sum.recompute * md;
    t.a2a_total = sum.a2a * md;
    t.a2a_exposed = a2a_exposed_mb * md;
    t.tp_cp_exposed = tp_cp_exposed * md;
    t.pp_exposed = pp_exposed * md;
    t.overlap_penalty = penalty_mb * md;
    t.bubble = bubble;
    t.dp_total = dp_time;
    t.dp_exposed = dp_exposed;
    t.optimizer = opt;
    t.offload_exposed = offload;
    t.step = per_mb * md + bubble + dp_exposed + opt + offload;

    if (t.step > best_step) {  // the slowest rank sets the step time
      best_step = t.step;
      e.time = t;
    }
    if (mem.total() > e.memory.total()) e.memory = mem;
  }

  if (job.engine_memory && planner_only_features(l).empty()) {
    if (std::optional<MemoryEstimate> engine = job.engine_memory(l)) {
      e.modelled_memory = e.memory;
      engine->reserved = e.memory.reserved;
      engine->capacity = e.memory.capacity;
      e.memory = *engine;
      e.memory_from_engine = true;
    }
  }

  const double tokens = static_cast<double>(job.global_batch) * seq;
  const double devices = static_cast<double>(job.devices);
  // Wall-clock averages: steady-state steps for a `goodput` share of the time.
  e.goodput = job.goodput;
  e.tokens_per_s_per_device = tokens / e.time.step / devices * job.goodput;
  e.model_tflops_per_device = model.model_flops_per_token * e.tokens_per_s_per_device / 1e12;
  const double recompute_share = l.recompute == Recompute::kFull ? 4.0 / 3.0 : 1.0;
  e.hardware_tflops_per_device = e.model_tflops_per_device * recompute_share;
  e.mfu = e.model_tflops_per_device * 1e12 / peak;
  e.valid = true;
  return e;
}

// ---- search ----

SearchResult search(const ModelShape& model, const ClusterSpec& cluster, const Job& job,
                    const SearchOptions& o) {
  SearchResult r;
  std::vector<int64_t> pows;
  for (int64_t v = 1; v <= job.devices; v *= 2) pows.push_back(v);
  for (int64_t tp : {1, 2, 4, 8}) {
    for (int64_t pp : pows) {
      if (pp > 64) break;
      for (int64_t cp : {1, 2, 4}) {
        if (job.devices % (tp * cp * pp) != 0) continue;
        for (int64_t ep : pows) {
          if (ep > model.n_experts) break;
          for (Schedule sched : o.schedules) {
            for (int64_t vpp : {1, 2, 4}) {
              if ((sched == Schedule::kInterleaved) != (vpp > 1)) continue;
              for (int64_t mbs : {1, 2}) {
                for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
                  for (int zero : {1, 2, 3}) {
                    for (bool offload : {false, true}) {
                      if (offload && !o.allow_offload) continue;
                      for (bool overlap : o.overlap) {
                        for (bool fp8 : {false, true}) {
                          if (fp8 && !o.allow_fp8) continue;
                          Layout l;
                          l.tp = tp, l.pp = pp, l.vpp = vpp, l.ep = ep, l.cp = cp, l.mbs = mbs;
                          l.recompute = rc, l.zero = zero, l.offload_optimizer = offload;
                          l.schedule = sched, l.overlap = overlap, l.ep_overlap = overlap,
                          l.fp8 = fp8;
                          l.fused_kernels = o.fused_kernels;
                          l.topology_aware = o.topology_aware;
                          l.expert_rebalancing = o.expert_rebalancing;
                          Estimate e = evaluate(model, cluster, job, l);
                          ++r.evaluated;
                          if (!e.valid) continue;
                          r.candidates.push_back(e);
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  std::vector<Estimate> fitting;
  for (const Estimate& e : r.candidates)
    if (e.memory.fits()) fitting.push_back(e);
  // Highest MFU first; ties (same time) prefer less memory, then the simpler layout.
  std::stable_sort(fitting.begin(), fitting.end(), [](const Estimate& a, const Estimate& b) {
    if (std::abs(a.time.step - b.time.step) > 1e-9 * a.time.step) return a.time.step < b.time.step;
    return a.memory.total() < b.memory.total();
  });
  const size_t k = static_cast<size_t>(std::max<int64_t>(o.top_k, 0));
  fitting.resize(std::min(fitting.size(), k));
  r.best = std::move(fitting);
  return r;
}

Layout parse_layout(const std::string& text) {
  Layout l;
  std::stringstream ss(text);
  std::string tok;
  bool vpp_given = false;
  while (std::getline(ss, tok, ',')) {
    auto number = [&](size_t prefix) {
      try {
        size_t used = 0;
        long long v = std::stoll(tok.substr(prefix), &used);
        if (used != tok.size() - prefix || v < 0) throw std::invalid_argument(tok);
        return static_cast<int64_t>(v);
      } catch (const std::exception&) {
        throw Error("bad layout token '" + tok + "'").field("--layout");
      }
    };
    if (tok.rfind("tp", 0) == 0) {
      l.tp = number(2);
    } else if (tok.rfind("pp", 0) == 0) {
      l.pp = number(2);
    } else if (tok.rfind("vpp", 0) == 0) {
      l.vpp = number(3), vpp_given = true;
    } else if (tok.rfind("ep", 0) == 0) {
      l.ep = number(2);
    } else if (tok.rfind("cp", 0) == 0) {
      l.cp = number(2);
    } else if (tok.rfind("mbs", 0) == 0) {
      l.mbs = number(3);
    } else if (tok.rfind("zero", 0) == 0) {
      l.zero = static_cast<int>(number(4));
    } else if (tok == "1f1b" || tok == "interleaved" || tok == "dualpipe" || tok == "dualpipev") {
      l.schedule = parse_schedule(tok);
    } else if (tok == "none" || tok == "selective" || tok == "full") {
      l.recompute = parse_recompute(tok);
    } else if (tok == "offload") {
      l.offload_optimizer = true;
    } else if (tok == "no-overlap") {
      l.overlap = false;
      l.ep_overlap = false;
    } else if (tok == "no-ep-overlap") {
      l.ep_overlap = false;
    } else if (tok == "unfused") {
      l.fused_kernels = false;
    } else if (tok == "naive") {
      l.topology_aware = false;
    } else if (tok == "rebalance") {
      l.expert_rebalancing = true;
    } else if (tok == "fp8") {
      l.fp8 = true;
    } else if (tok == "fp8-attention") {
      l.fp8_attention = true;
    } else if (tok == "cuda-graphs") {
      l.cuda_graphs = true;
    } else if (tok == "bf16-dispatch") {
      l.fp8_dispatch = false;
    } else if (tok == "no-edge-overlap") {
      l.edge_self_overlap = false;
    } else if (!tok.empty()) {
      throw Error("unknown layout token '" + tok + "'").field("--layout");
    }
  }
  if (l.schedule == Schedule::kInterleaved && !vpp_given) l.vpp = 2;
  return l;
}

}  // namespace trex::plan
