#include "trex/parallel/expert_map.hpp"

#include "trex/core/config_reader.hpp"
#include "trex/core/error.hpp"

namespace trex::parallel {

namespace {

using json = nlohmann::json;

// Ranks, experts, layers in files: counts (and indices) far above any real model.
constexpr int kMaxCount = 1 << 24;
constexpr auto kCount = config::Range<int>::between(1, kMaxCount);
constexpr auto kIndex = config::Range<int>::between(0, kMaxCount);

std::string indexed(const std::string& field, size_t i) {
  return field + "[" + std::to_string(i) + "]";
}

}  // namespace

std::vector<int> contiguous_owners(int experts, int ranks) {
  if (ranks <= 0 || experts <= 0 || experts % ranks != 0)
    throw Error(std::to_string(experts) + " experts do not split evenly over " +
                std::to_string(ranks) + " EP ranks")
        .field("ep");
  std::vector<int> owners(experts);
  for (int e = 0; e < experts; ++e) owners[e] = e / (experts / ranks);
  return owners;
}

ExpertPlacement contiguous_placement(int layers, int experts, int ranks) {
  ExpertPlacement p;
  p.ranks = ranks;
  p.layers.assign(layers, contiguous_owners(experts, ranks));
  return p;
}

namespace {

ExpertPlacement read_expert_placement(const config::Reader& r) {
  const config::Reader layers = r.array("layers");
  if (layers.size() == 0) layers.fail("must be a non-empty array of per-layer owner lists");
  ExpertPlacement p;
  const int ep = r.integer<int>("ep", 0, kCount);
  int max_owner = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const config::Reader owners = layers[l];
    if (!owners.is_array() || owners.size() == 0)
      owners.fail("must be a non-empty array of owner ranks");
    if (l > 0 && owners.size() != layers[0].size())
      owners.fail("has " + std::to_string(owners.size()) + " experts, layers[0] " +
                  std::to_string(layers[0].size()));
    std::vector<int> ranks = owners.integers<int>(kIndex);
    for (size_t e = 0; e < ranks.size(); ++e) {
      if (ep > 0 && ranks[e] >= ep)
        owners[e].fail("owner rank " + std::to_string(ranks[e]) +
                       " is outside ep = " + std::to_string(ep));
      max_owner = std::max(max_owner, ranks[e]);
    }
    p.layers.push_back(std::move(ranks));
  }
  if (r.has("experts") && r.integer<int>("experts", kCount) != static_cast<int>(layers[0].size()))
    r.fail("experts", "does not match the length of the owner lists");
  p.ranks = ep > 0 ? ep : max_owner + 1;
  return p;
}

}  // namespace

ExpertPlacement expert_placement_from_json(const json& j, const std::string& source) {
  return read_expert_placement(config::Reader(j, source));
}

ExpertPlacement load_expert_placement(const std::string& path) {
  return read_expert_placement(config::Document::load(path, config::Format::kJson).root());
}

void check_expert_placement(const ExpertPlacement& p, int layers, int experts, int ranks,
                            const std::string& source) {
  if (static_cast<int>(p.layers.size()) != layers)
    throw Error("has " + std::to_string(p.layers.size()) + " layers, the model " +
                std::to_string(layers) + " MoE layers")
        .file(source)
        .field("layers");
  if (ranks <= 0 || experts % ranks != 0)
    throw Error(std::to_string(experts) + " experts do not split evenly over " +
                std::to_string(ranks) + " EP ranks")
        .file(source)
        .field("ep");
  if (p.ranks != ranks)
    throw Error("the map is for ep = " + std::to_string(p.ranks) +
                ", the run has ep = " + std::to_string(ranks))
        .file(source)
        .field("ep");
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const std::string field = indexed("layers", l);
    if (static_cast<int>(p.layers[l].size()) != experts)
      throw Error("has " + std::to_string(p.layers[l].size()) + " experts, the model " +
                  std::to_string(experts))
          .file(source)
          .field(field);
    std::vector<int> count(ranks, 0);
    for (size_t e = 0; e < p.layers[l].size(); ++e) {
      const int r = p.layers[l][e];
      if (r < 0 || r >= ranks)
        throw Error("owner rank " + std::to_string(r) + " is outside ep = " + std::to_string(ranks))
            .file(source)
            .field(indexed(field, e));
      count[r] += 1;
    }
    for (int r = 0; r < ranks; ++r)
      if (count[r] != experts / ranks)
        throw Error("rank " + std::to_string(r) + " owns " + std::to_string(count[r]) +
                    " experts, every rank must own " + std::to_string(experts / ranks))
            .file(source)
            .field(field);
  }
}

json expert_placement_json(const ExpertPlacement& p) {
  return {{"ep", p.ranks},
          {"experts", p.layers.empty() ? 0 : static_cast<int>(p.layers.front().size())},
          {"layers", p.layers}};
}

}  // namespace trex::parallel
