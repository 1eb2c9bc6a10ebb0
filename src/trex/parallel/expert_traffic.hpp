#pragma once
// The all-to-all traffic of an expert map under a routing profile: token-expert
// pairs kept on their rank, inside a node and across nodes, bytes for dispatch +
// combine, rank loads and a bandwidth-only time estimate (docs/expert-placement.md).
#include <cstdint>
#include <string>
#include <vector>

#include "trex/parallel/expert_load.hpp"
#include "trex/parallel/expert_map.hpp"
#include "trex/parallel/rank_topology.hpp"

namespace trex::parallel {

// Bytes = tokens x hidden x bytes_per_element x 2 (dispatch + combine).
struct TrafficOptions {
  int64_t hidden = 7168;
  double bytes_per_element = 2;  // bf16
};
double bytes_per_element(const std::string& dtype);  // bf16, fp16, fp32, fp8

struct LayerTraffic {
  double assignments = 0;       // routed token-expert pairs
  double local = 0;             // pairs whose expert is on the token's own rank
  double intra_node = 0;        // ... on another rank of the same node
  double inter_node = 0;        // ... on another node
  double intra_node_bytes = 0;  // dispatch + combine
  double inter_node_bytes = 0;
  double max_rank_load = 0;  // token-expert pairs the busiest rank computes
  double mean_rank_load = 0;
  // Bandwidth-only all-to-all estimate: per rank, intra- and inter-node links
  // run concurrently and send/receive are full duplex; the slowest rank sets
  // the time; combine mirrors dispatch.
  double seconds = 0;
  double imbalance() const { return mean_rank_load > 0 ? max_rank_load / mean_rank_load : 1.0; }
};

struct TrafficReport {
  std::vector<LayerTraffic> layers;
  LayerTraffic total;  // sums over layers (max_rank_load: sum of per-layer maxima)
  double worst_layer_imbalance = 1;
};

LayerTraffic layer_traffic(const std::vector<std::vector<double>>& tokens,
                           const std::vector<int>& owners, const RankTopology& topology,
                           const TrafficOptions& options);
TrafficReport traffic_report(const ExpertLoad& load, const ExpertPlacement& placement,
                             const RankTopology& topology, const TrafficOptions& options);

}  // namespace trex::parallel
