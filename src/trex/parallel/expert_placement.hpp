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
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trex::parallel {

// The ranks of one expert-parallel group: which node each sits on and the
// per-rank link bandwidths (GB/s, one direction) inside and across nodes.
struct RankTopology {
  std::vector<int> node_of_rank;  // nodes numbered 0..nodes()-1 by first appearance
  double intra_node_gbps = 200;   // NVLink-class scale-up (configs/clusters/h800-ib.json)
  double inter_node_gbps = 50;    // InfiniBand-class scale-out, per rank

  int ranks() const { return static_cast<int>(node_of_rank.size()); }
  int nodes() const;
  std::vector<int> ranks_on_node(int node) const;

  static RankTopology uniform(int ranks, int ranks_per_node, double intra_node_gbps,
                              double inter_node_gbps);
  // Forms (docs/expert-placement.md): {"ranks": 32, "ranks_per_node": 8},
  // {"node_of_rank": [0, 0, 1, 1]} or {"nodes": [[0, 1], [2, 3]]} (an entry may
  // also be {"name": "host-a", "ranks": [0, 1]}), each with optional
  // "intra_node_gbps" / "inter_node_gbps". Errors name the file and field.
  static RankTopology from_json(const nlohmann::json& json, const std::string& source);
  static RankTopology load(const std::string& path);
  // Ranks [first, first + count) as their own group (an EP group of a larger world).
  RankTopology group(int first, int count) const;
  // True when both have the same ranks-to-nodes partition (node labels aside).
  bool same_partition(const RankTopology& other) const;
  nlohmann::json to_json() const;
};

// Routed token-expert assignments: tokens[layer][source rank][expert].
struct ExpertLoad {
  std::vector<std::vector<std::vector<double>>> layers;

  int num_layers() const { return static_cast<int>(layers.size()); }
  int experts() const;
  int source_ranks() const;

  // {"layers": [L0, L1, ...]} where each layer is either a [source rank][expert]
  // matrix with `source_ranks` rows or an [expert] total vector spread uniformly
  // over the `source_ranks` ranks. Errors name the file and field.
  static ExpertLoad from_json(const nlohmann::json& json, const std::string& source,
                              int source_ranks);
  static ExpertLoad load(const std::string& path, int source_ranks);
  nlohmann::json to_json() const;
};

// A measured profile: per_rank[s] is EP rank s's LossBreakdown::expert_load
// (tokens routed to each expert, per block), e.g. as gathered over the EP
// group, accumulated over a number of steps. Throws when the shapes disagree.
ExpertLoad expert_load_from_rank_counts(
    const std::vector<std::vector<std::vector<int64_t>>>& per_rank);

// A Zipf-like routing profile with locality: in every layer each source node
// prefers its own subset of the experts (a per-layer random partition), and a
// shared global popularity adds hot experts for everyone. Deterministic in seed.
struct SkewedLoadSpec {
  int layers = 4;
  int experts = 64;
  int top_k = 6;
  double tokens_per_rank = 4096;  // tokens routed per source rank per layer
  double zipf = 0.8;              // popularity ~ 1 / rank^zipf
  double locality = 0.7;          // weight of the node-preferred part (0: none)
  double rank_noise = 0.2;        // per (rank, expert) log-normal spread
  uint64_t seed = 1;
};
ExpertLoad generate_skewed_load(const SkewedLoadSpec& spec, const RankTopology& topology);

// owner of each expert of each MoE layer; the engine takes one layer's vector.
struct ExpertPlacement {
  std::vector<std::vector<int>> layers;
  int ranks = 0;
};

std::vector<int> contiguous_owners(int experts, int ranks);  // owner(e) = e / (experts / ranks)
ExpertPlacement contiguous_placement(int layers, int experts, int ranks);

// {"layers": [[owner of e0, ...], ...], "ep": N, ...}; "ep" optional (then the
// largest owner + 1). Errors name the file and field.
ExpertPlacement expert_placement_from_json(const nlohmann::json& json, const std::string& source);
ExpertPlacement load_expert_placement(const std::string& path);
// For the trainer: the map matches the model (layers, experts) and the EP size,
// and every rank owns experts / ranks experts. Throws trex::Error naming `source`.
void check_expert_placement(const ExpertPlacement& placement, int layers, int experts, int ranks,
                            const std::string& source);
nlohmann::json expert_placement_json(const ExpertPlacement& placement);

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

// ---- the `trex plan experts` report: contiguous vs placed vs the lower bound.

// The EP group [0, ep) of a world topology (EP is innermost in the process
// grid, so EP groups are consecutive world ranks). `note` gets a warning when
// another EP group spans the nodes differently (the map is shared by all).
RankTopology first_ep_group(const RankTopology& world, int ep, std::string* note);

struct ExpertPlan {
  RankTopology topology;
  std::string load_source;
  std::string dtype = "bf16";
  TrafficOptions traffic;
  PlacementOptions options;
  int layers = 0, experts = 0;
  PlacementResult placed;
  TrafficReport before;  // the contiguous map
  TrafficReport after;   // the placed map
  double inter_node_bytes_lower_bound = 0;
};

ExpertPlan plan_expert_placement(const ExpertLoad& load, const RankTopology& topology,
                                 const PlacementOptions& options, const std::string& dtype,
                                 int64_t hidden, const std::string& load_source);
std::string format_expert_plan(const ExpertPlan& plan, bool per_layer);
// The --out file: the map plus the traffic summary and the topology.
nlohmann::json expert_plan_json(const ExpertPlan& plan);
// A generated profile as a file: the generator settings, then one source
// rank's row per line (readable, diffable, and regenerable by the tests).
std::string skewed_load_file_text(const ExpertLoad& load, const SkewedLoadSpec& spec,
                                  const RankTopology& topology);

}  // namespace trex::parallel
