#pragma once
// Routing profiles: how many tokens each source rank routes to each expert, per
// MoE layer (measured by the trainer, read from a file, or generated with
// locality), the input of the expert placer (docs/expert-placement.md).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/parallel/rank_topology.hpp"

namespace trex::parallel {

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

// A generated profile as a file: the generator settings, then one source
// rank's row per line (readable, diffable, and regenerable by the tests).
std::string skewed_load_file_text(const ExpertLoad& load, const SkewedLoadSpec& spec,
                                  const RankTopology& topology);

}  // namespace trex::parallel
