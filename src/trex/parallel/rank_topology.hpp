#pragma once
// The ranks of an expert-parallel group and the nodes they sit on: the input of
// the expert placer and of the all-to-all traffic model (docs/expert-placement.md),
// read from topology files or a cluster's layout.
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

}  // namespace trex::parallel
