#include "trex/parallel/rank_topology.hpp"

#include <algorithm>
#include <utility>

#include "trex/core/config_reader.hpp"
#include "trex/core/error.hpp"

namespace trex::parallel {

namespace {

using json = nlohmann::json;

// Ranks, experts, layers in files: counts (and indices) far above any real model.
constexpr int kMaxCount = 1 << 24;
constexpr auto kCount = config::Range<int>::between(1, kMaxCount);
constexpr auto kIndex = config::Range<int>::between(0, kMaxCount);
constexpr auto kPositive = config::Range<double>::above(0);

// Node labels renumbered 0, 1, ... by first appearance in rank order, so equal
// partitions have equal vectors.
std::vector<int> canonical_nodes(const std::vector<int>& node_of_rank) {
  std::vector<int> out(node_of_rank.size());
  std::vector<std::pair<int, int>> seen;  // (label, canonical)
  for (size_t r = 0; r < node_of_rank.size(); ++r) {
    auto it = std::find_if(seen.begin(), seen.end(),
                           [&](const auto& p) { return p.first == node_of_rank[r]; });
    if (it == seen.end()) {
      seen.emplace_back(node_of_rank[r], static_cast<int>(seen.size()));
      out[r] = static_cast<int>(seen.size()) - 1;
    } else {
      out[r] = it->second;
    }
  }
  return out;
}

}  // namespace

int RankTopology::nodes() const {
  return node_of_rank.empty() ? 0 : *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
}

std::vector<int> RankTopology::ranks_on_node(int node) const {
  std::vector<int> out;
  for (int r = 0; r < ranks(); ++r)
    if (node_of_rank[r] == node) out.push_back(r);
  return out;
}

RankTopology RankTopology::uniform(int ranks, int ranks_per_node, double intra_node_gbps,
                                   double inter_node_gbps) {
  if (ranks <= 0) throw Error("must be > 0").field("ranks");
  if (ranks_per_node <= 0) throw Error("must be > 0").field("ranks_per_node");
  if (!(intra_node_gbps > 0)) throw Error("must be > 0").field("intra_node_gbps");
  if (!(inter_node_gbps > 0)) throw Error("must be > 0").field("inter_node_gbps");
  RankTopology t;
  t.node_of_rank.resize(ranks);
  for (int r = 0; r < ranks; ++r) t.node_of_rank[r] = r / ranks_per_node;
  t.intra_node_gbps = intra_node_gbps;
  t.inter_node_gbps = inter_node_gbps;
  return t;
}

namespace {

RankTopology read_topology(const config::Reader& r) {
  r.reject_unknown({"name", "description", "ranks", "ranks_per_node", "node_of_rank", "nodes",
                    "intra_node_gbps", "inter_node_gbps"});
  const bool simple = r.contains("ranks") || r.contains("ranks_per_node");
  const int forms = int{simple} + int{r.contains("node_of_rank")} + int{r.contains("nodes")};
  if (forms == 0) r.fail("ranks", "missing: give ranks + ranks_per_node, node_of_rank or nodes");
  if (forms > 1)
    r.fail(r.contains("nodes") ? "nodes" : "node_of_rank",
           "give only one of ranks + ranks_per_node, node_of_rank, nodes");

  RankTopology t;
  if (simple) {
    const int ranks = r.integer<int>("ranks", kCount);
    const int per_node = r.integer<int>("ranks_per_node", kCount);
    t.node_of_rank.resize(ranks);
    for (int rank = 0; rank < ranks; ++rank) t.node_of_rank[rank] = rank / per_node;
  } else if (r.contains("node_of_rank")) {
    const config::Reader map = r.array("node_of_rank");
    if (map.size() == 0) map.fail("must be a non-empty array of node ids");
    t.node_of_rank = map.integers<int>(kIndex);
  } else {
    const config::Reader nodes = r.array("nodes");
    if (nodes.size() == 0) nodes.fail("must be a non-empty array of nodes");
    std::vector<int> node_of;  // by rank, -1 = not yet seen
    for (size_t n = 0; n < nodes.size(); ++n) {
      config::Reader ranks = nodes[n];
      if (ranks.is_object()) {  // {"name": ..., "ranks": [...]}
        ranks.reject_unknown({"name", "ranks"});
        ranks = ranks.at("ranks");
      }
      if (!ranks.is_array() || ranks.size() == 0) ranks.fail("must be a non-empty array of ranks");
      for (size_t k = 0; k < ranks.size(); ++k) {
        const int rank = ranks[k].as_integer<int>(kIndex);
        if (rank >= static_cast<int>(node_of.size())) node_of.resize(rank + 1, -1);
        if (node_of[rank] >= 0) ranks[k].fail("rank " + std::to_string(rank) + " is listed twice");
        node_of[rank] = static_cast<int>(n);
      }
    }
    for (size_t rank = 0; rank < node_of.size(); ++rank)
      if (node_of[rank] < 0)
        nodes.fail("ranks must be 0.." + std::to_string(node_of.size() - 1) + "; rank " +
                   std::to_string(rank) + " is on no node");
    t.node_of_rank = node_of;
  }
  t.node_of_rank = canonical_nodes(t.node_of_rank);
  t.intra_node_gbps = r.number("intra_node_gbps", t.intra_node_gbps, kPositive);
  t.inter_node_gbps = r.number("inter_node_gbps", t.inter_node_gbps, kPositive);
  return t;
}

}  // namespace

RankTopology RankTopology::from_json(const json& j, const std::string& source) {
  return read_topology(config::Reader(j, source));
}

RankTopology RankTopology::load(const std::string& path) {
  return read_topology(config::Document::load(path, config::Format::kJson).root());
}

RankTopology RankTopology::group(int first, int count) const {
  if (first < 0 || count <= 0 || first + count > ranks())
    throw Error("ranks " + std::to_string(first) + ".." + std::to_string(first + count - 1) +
                " are outside the topology's " + std::to_string(ranks()) + " ranks")
        .field("ep");
  RankTopology t = *this;
  t.node_of_rank.assign(node_of_rank.begin() + first, node_of_rank.begin() + first + count);
  t.node_of_rank = canonical_nodes(t.node_of_rank);
  return t;
}

bool RankTopology::same_partition(const RankTopology& other) const {
  return canonical_nodes(node_of_rank) == canonical_nodes(other.node_of_rank);
}

json RankTopology::to_json() const {
  return {{"node_of_rank", node_of_rank},
          {"intra_node_gbps", intra_node_gbps},
          {"inter_node_gbps", inter_node_gbps}};
}

}  // namespace trex::parallel
