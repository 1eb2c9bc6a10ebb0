#pragma once
// The `trex plan experts` report: the contiguous map against the placed one and
// the lower bound, as text and as the --out file (docs/expert-placement.md).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "trex/parallel/expert_placement.hpp"
#include "trex/parallel/expert_traffic.hpp"

namespace trex::parallel {

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

}  // namespace trex::parallel
