#include "trex/parallel/expert_traffic.hpp"

#include <algorithm>

#include "trex/core/error.hpp"

namespace trex::parallel {

double bytes_per_element(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "fp16") return 2;
  if (dtype == "fp32") return 4;
  if (dtype == "fp8") return 1;
  throw Error("unknown dtype '" + dtype + "' (bf16, fp16, fp32, fp8)").field("--dtype");
}

LayerTraffic layer_traffic(const std::vector<std::vector<double>>& tokens,
                           const std::vector<int>& owners, const RankTopology& topology,
                           const TrafficOptions& options) {
  const int ranks = topology.ranks();
  const int experts = static_cast<int>(owners.size());
  if (static_cast<int>(tokens.size()) != ranks)
    throw Error("load has " + std::to_string(tokens.size()) + " source ranks, the EP group " +
                std::to_string(ranks))
        .field("load");
  std::vector<double> load(ranks, 0.0), send_intra(ranks, 0.0), recv_intra(ranks, 0.0),
      send_inter(ranks, 0.0), recv_inter(ranks, 0.0);
  LayerTraffic t;
  for (int s = 0; s < ranks; ++s) {
    if (static_cast<int>(tokens[s].size()) != experts)
      throw Error("load has " + std::to_string(tokens[s].size()) + " experts, the map " +
                  std::to_string(experts))
          .field("load");
    for (int e = 0; e < experts; ++e) {
      const int r = owners[e];
      if (r < 0 || r >= ranks) throw Error("owner rank outside the EP group").field("map");
      const double n = tokens[s][e];
      t.assignments += n;
      load[r] += n;
      if (r == s) {
        t.local += n;
      } else if (topology.node_of_rank[r] == topology.node_of_rank[s]) {
        t.intra_node += n;
        send_intra[s] += n;
        recv_intra[r] += n;
      } else {
        t.inter_node += n;
        send_inter[s] += n;
        recv_inter[r] += n;
      }
    }
  }
  const double token_bytes = static_cast<double>(options.hidden) * options.bytes_per_element;
  t.intra_node_bytes = 2 * t.intra_node * token_bytes;
  t.inter_node_bytes = 2 * t.inter_node * token_bytes;
  double dispatch = 0;
  for (int r = 0; r < ranks; ++r) {
    const double inter =
        std::max(send_inter[r], recv_inter[r]) * token_bytes / (topology.inter_node_gbps * 1e9);
    const double intra =
        std::max(send_intra[r], recv_intra[r]) * token_bytes / (topology.intra_node_gbps * 1e9);
    dispatch = std::max({dispatch, inter, intra});
  }
  t.seconds = 2 * dispatch;
  t.max_rank_load = *std::max_element(load.begin(), load.end());
  t.mean_rank_load = t.assignments / ranks;
  return t;
}

TrafficReport traffic_report(const ExpertLoad& load, const ExpertPlacement& placement,
                             const RankTopology& topology, const TrafficOptions& options) {
  if (load.num_layers() != static_cast<int>(placement.layers.size()))
    throw Error("the map has " + std::to_string(placement.layers.size()) +
                " layers, the load profile " + std::to_string(load.num_layers()))
        .field("layers");
  TrafficReport report;
  for (int l = 0; l < load.num_layers(); ++l) {
    const LayerTraffic t = layer_traffic(load.layers[l], placement.layers[l], topology, options);
    report.layers.push_back(t);
    LayerTraffic& sum = report.total;
    sum.assignments += t.assignments;
    sum.local += t.local;
    sum.intra_node += t.intra_node;
    sum.inter_node += t.inter_node;
    sum.intra_node_bytes += t.intra_node_bytes;
    sum.inter_node_bytes += t.inter_node_bytes;
    sum.max_rank_load += t.max_rank_load;
    sum.mean_rank_load += t.mean_rank_load;
    sum.seconds += t.seconds;
    report.worst_layer_imbalance = std::max(report.worst_layer_imbalance, t.imbalance());
  }
  return report;
}

}  // namespace trex::parallel
