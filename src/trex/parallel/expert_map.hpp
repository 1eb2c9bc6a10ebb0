#pragma once
// Expert maps: the owner rank of every routed expert of every MoE layer, and
// their file format (written by `trex plan experts`, read by the trainer's
// `parallel.expert_placement`; docs/expert-placement.md).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trex::parallel {

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

}  // namespace trex::parallel
