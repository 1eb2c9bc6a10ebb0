#include "trex/parallel/expert_load.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "trex/core/config_reader.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"

namespace trex::parallel {

namespace {

using json = nlohmann::json;

constexpr auto kTokenCount = config::Range<double>::at_least(0);

// Whole token counts as JSON integers ("12", not "12.0").
json counts_json(const std::vector<double>& counts) {
  json row = json::array();
  for (double c : counts) {
    if (c == std::floor(c) && std::abs(c) < 9e15)
      row.push_back(static_cast<int64_t>(c));
    else
      row.push_back(c);
  }
  return row;
}

}  // namespace

int ExpertLoad::experts() const {
  return layers.empty() || layers.front().empty() ? 0
                                                  : static_cast<int>(layers.front().front().size());
}

int ExpertLoad::source_ranks() const {
  return layers.empty() ? 0 : static_cast<int>(layers.front().size());
}

namespace {

ExpertLoad read_expert_load(const config::Reader& r, int source_ranks) {
  if (source_ranks <= 0) throw Error("the EP group has no ranks").field("ep");
  r.reject_unknown({"name", "description", "generator", "layers"});
  const config::Reader layers = r.array("layers");
  if (layers.size() == 0) layers.fail("must be a non-empty array of MoE layers");

  ExpertLoad load;
  int experts = -1;
  auto check_experts = [&](const config::Reader& counts) {
    const int count = static_cast<int>(counts.size());
    if (count == 0) counts.fail("has no experts");
    if (experts < 0) experts = count;
    if (count != experts)
      counts.fail("has " + std::to_string(count) + " experts, earlier entries " +
                  std::to_string(experts));
  };
  for (size_t l = 0; l < layers.size(); ++l) {
    const config::Reader layer = layers[l];
    if (!layer.is_array() || layer.size() == 0)
      layer.fail("must be a [source rank][expert] matrix or an [expert] vector");
    std::vector<std::vector<double>> matrix;
    if (layer[0].is_array()) {
      if (static_cast<int>(layer.size()) != source_ranks)
        layer.fail("has " + std::to_string(layer.size()) + " source-rank rows, the EP group " +
                   std::to_string(source_ranks) + " ranks");
      for (size_t s = 0; s < layer.size(); ++s) {
        const config::Reader row = layer[s];
        if (!row.is_array()) row.fail("must be an array of token counts");
        check_experts(row);
        matrix.push_back(row.numbers(kTokenCount));
      }
    } else {
      check_experts(layer);
      const std::vector<double> totals = layer.numbers(kTokenCount);
      matrix.assign(source_ranks, std::vector<double>(totals.size()));
      for (size_t e = 0; e < totals.size(); ++e) {
        const double spread = totals[e] / source_ranks;
        for (int s = 0; s < source_ranks; ++s) matrix[s][e] = spread;
      }
    }
    load.layers.push_back(std::move(matrix));
  }
  return load;
}

}  // namespace

ExpertLoad ExpertLoad::from_json(const json& j, const std::string& source, int source_ranks) {
  return read_expert_load(config::Reader(j, source), source_ranks);
}

ExpertLoad ExpertLoad::load(const std::string& path, int source_ranks) {
  return read_expert_load(config::Document::load(path, config::Format::kJson).root(), source_ranks);
}

json ExpertLoad::to_json() const {
  return {{"layers", layers}};
}

ExpertLoad expert_load_from_rank_counts(
    const std::vector<std::vector<std::vector<int64_t>>>& per_rank) {
  if (per_rank.empty() || per_rank.front().empty())
    throw Error("no ranks or no layers").field("expert_load");
  const size_t layers = per_rank.front().size();
  const size_t experts = per_rank.front().front().size();
  ExpertLoad load;
  load.layers.assign(layers, std::vector<std::vector<double>>(per_rank.size()));
  for (size_t s = 0; s < per_rank.size(); ++s) {
    if (per_rank[s].size() != layers)
      throw Error("rank " + std::to_string(s) + " reports " + std::to_string(per_rank[s].size()) +
                  " layers, rank 0 " + std::to_string(layers))
          .field("expert_load");
    for (size_t l = 0; l < layers; ++l) {
      if (per_rank[s][l].size() != experts || experts == 0)
        throw Error("rank " + std::to_string(s) + " layer " + std::to_string(l) + " reports " +
                    std::to_string(per_rank[s][l].size()) + " experts, expected " +
                    std::to_string(experts))
            .field("expert_load");
      for (int64_t count : per_rank[s][l])
        if (count < 0) throw Error("negative token count").field("expert_load");
      load.layers[l][s].assign(per_rank[s][l].begin(), per_rank[s][l].end());
    }
  }
  return load;
}

ExpertLoad generate_skewed_load(const SkewedLoadSpec& spec, const RankTopology& topology) {
  if (spec.layers <= 0) throw Error("must be > 0").field("--layers");
  if (spec.experts <= 0) throw Error("must be > 0").field("--experts");
  if (spec.top_k <= 0 || spec.top_k > spec.experts)
    throw Error("must be in [1, experts]").field("--top-k");
  if (!(spec.tokens_per_rank > 0)) throw Error("must be > 0").field("--tokens");
  if (!(spec.zipf >= 0)) throw Error("must be >= 0").field("--zipf");
  if (!(spec.locality >= 0 && spec.locality <= 1))
    throw Error("must be in [0, 1]").field("--locality");
  if (!(spec.rank_noise >= 0)) throw Error("must be >= 0").field("--rank-noise");
  const int nodes = topology.nodes();
  const int experts = spec.experts;
  auto zipf_weight = [&](int position) { return std::pow(position + 1.0, -spec.zipf); };

  ExpertLoad load;
  for (int l = 0; l < spec.layers; ++l) {
    const Rng layer_rng(spec.seed, {static_cast<uint64_t>(l)});
    // preferred[k]: the node subsets are consecutive chunks of this order.
    std::vector<int> preferred(experts), popular(experts);
    std::iota(preferred.begin(), preferred.end(), 0);
    std::iota(popular.begin(), popular.end(), 0);
    Rng partition = layer_rng.child(0), popularity = layer_rng.child(1);
    partition.shuffle(preferred);
    popularity.shuffle(popular);

    std::vector<double> global(experts, 0.0);
    double global_sum = 0;
    for (int k = 0; k < experts; ++k) global_sum += zipf_weight(k);
    for (int k = 0; k < experts; ++k) global[popular[k]] = zipf_weight(k) / global_sum;

    std::vector<std::vector<double>> node_share(nodes, std::vector<double>(experts, 0.0));
    for (int n = 0; n < nodes; ++n) {
      const int begin = static_cast<int>(static_cast<int64_t>(n) * experts / nodes);
      const int end = static_cast<int>(static_cast<int64_t>(n + 1) * experts / nodes);
      double own_sum = 0;
      for (int k = begin; k < end; ++k) own_sum += zipf_weight(k - begin);
      const double locality = own_sum > 0 ? spec.locality : 0.0;
      for (int e = 0; e < experts; ++e) node_share[n][e] = (1 - locality) * global[e];
      for (int k = begin; k < end; ++k)
        node_share[n][preferred[k]] += locality * zipf_weight(k - begin) / own_sum;
    }

    std::vector<std::vector<double>> matrix(topology.ranks(), std::vector<double>(experts));
    for (int s = 0; s < topology.ranks(); ++s) {
      Rng noise = layer_rng.child(2 + static_cast<uint64_t>(s));
      for (int e = 0; e < experts; ++e) {
        const double spread =
            std::exp(spec.rank_noise * noise.normal() - 0.5 * spec.rank_noise * spec.rank_noise);
        const double expected =
            spec.tokens_per_rank * spec.top_k * node_share[topology.node_of_rank[s]][e] * spread;
        // A token picks an expert at most once.
        matrix[s][e] = std::round(std::min(expected, spec.tokens_per_rank));
      }
    }
    load.layers.push_back(std::move(matrix));
  }
  return load;
}

std::string skewed_load_file_text(const ExpertLoad& load, const SkewedLoadSpec& spec,
                                  const RankTopology& topology) {
  const json generator = {{"command", "trex plan experts --generate-load"},
                          {"topology", topology.to_json()},
                          {"experts", spec.experts},
                          {"layers", spec.layers},
                          {"top_k", spec.top_k},
                          {"tokens_per_rank", spec.tokens_per_rank},
                          {"zipf", spec.zipf},
                          {"locality", spec.locality},
                          {"rank_noise", spec.rank_noise},
                          {"seed", spec.seed}};
  std::string text = "{\"generator\": " + generator.dump() + ",\n \"layers\": [\n";
  for (size_t l = 0; l < load.layers.size(); ++l) {
    for (size_t s = 0; s < load.layers[l].size(); ++s)
      text += std::string(s ? "   " : "  [") + counts_json(load.layers[l][s]).dump() +
              (s + 1 < load.layers[l].size() ? ",\n" : "]");
    text += l + 1 < load.layers.size() ? ",\n" : "\n";
  }
  return text + " ]}\n";
}

}  // namespace trex::parallel
