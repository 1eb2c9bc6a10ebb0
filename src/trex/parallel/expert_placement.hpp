#pragma once
// Topology-aware expert placement (docs/expert-placement.md).
//
// Under expert parallelism a token on EP rank s routed to expert e travels to
// owner(e) and back (dispatch + combine all-to-all). Given which node each EP
// rank sits on and a measured routing profile tokens[layer][s][e], the placer
// picks an expert -> rank map per MoE layer that minimises the cross-node bytes
// (then the intra-node bytes) while every rank holds exactly E/ep experts and
// no rank processes more than (1 + tolerance) x the mean token load.
//
// Method, per layer (deterministic):
//   1. exact node-level assignment without the load constraint: a min-cost
//      transportation problem (experts -> nodes, node capacity = its experts
//      slots) solved by successive shortest augmenting paths; its cost is the
//      reported lower bound on cross-node traffic;
//   2. within each node, the same exact assignment of the node's experts to its
//      ranks, minimising the tokens that leave their own rank;
//   3. a load repair (cheapest swaps per unit of overload) and a pairwise-swap
//      local search that accepts only strictly better (inter, intra) traffic
//      under the load cap; the same search also runs from a locality greedy, a
//      balance-first (LPT) map and the contiguous map, and the best wins.
// When no map within the tolerance is found, the cap becomes the smallest
// maximum load found (balance first), and the result says so.
#include <string>
#include <vector>

#include "trex/parallel/expert_load.hpp"
#include "trex/parallel/expert_map.hpp"
#include "trex/parallel/rank_topology.hpp"

namespace trex::parallel {

struct PlacementOptions {
  double tolerance = 0.1;  // max rank load <= (1 + tolerance) x mean
};

struct LayerPlacement {
  std::vector<int> owners;
  double load_cap = 0;              // the max rank load allowed (tokens)
  bool balance_met = true;          // the tolerance was met
  bool balance_infeasible = false;  // proved: no map meets the tolerance
  double max_load_lower_bound = 0;  // no map has a smaller max rank load
  // Cross-node (resp. off-rank within a node) token-expert pairs of the exact
  // optimum without the load constraint: no balanced map does better.
  double inter_node_lower_bound = 0;
  std::string start;  // which start the winning map came from
};

struct PlacementResult {
  ExpertPlacement placement;
  std::vector<LayerPlacement> layers;
};

LayerPlacement place_layer(const std::vector<std::vector<double>>& tokens,
                           const RankTopology& topology, const PlacementOptions& options);
PlacementResult place_experts(const ExpertLoad& load, const RankTopology& topology,
                              const PlacementOptions& options);

}  // namespace trex::parallel
