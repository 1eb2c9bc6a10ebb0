#include "trex/parallel/expert_placement.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>

#include "trex/core/config_reader.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"

namespace trex::parallel {

namespace {

using json = nlohmann::json;

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Ranks, experts, layers in files: counts (and indices) far above any real model.
constexpr int kMaxCount = 1 << 24;
constexpr auto kCount = config::Range<int>::between(1, kMaxCount);
constexpr auto kIndex = config::Range<int>::between(0, kMaxCount);
constexpr auto kTokenCount = config::Range<double>::at_least(0);
constexpr auto kPositive = config::Range<double>::above(0);

std::string indexed(const std::string& field, size_t i) {
  return field + "[" + std::to_string(i) + "]";
}

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

// Exact min-cost assignment of items 0..n-1 to bins with capacities (summing
// to n): the transportation problem solved by successive shortest augmenting
// paths. Items enter one at a time; an augmenting path may shift already placed
// items from bin to bin (a -> b costs cost(e, b) - cost(e, a) for a member e of
// a) until it reaches a bin with a free slot. Dijkstra over the bins with
// potentials (reduced costs stay non-negative) keeps every intermediate
// assignment optimal for the items placed so far, hence the final one too.
std::vector<int> assign_min_cost(int items, const std::vector<int>& capacity,
                                 const std::function<double(int, int)>& cost) {
  const int bins = static_cast<int>(capacity.size());
  std::vector<int> bin_of(items, -1), used(bins, 0);
  std::vector<double> potential(bins, 0.0), move(static_cast<size_t>(bins) * bins), dist(bins);
  std::vector<int> mover(static_cast<size_t>(bins) * bins), pred(bins);
  std::vector<char> settled(bins);
  for (int item = 0; item < items; ++item) {
    std::fill(move.begin(), move.end(), kInfinity);
    std::fill(mover.begin(), mover.end(), -1);
    for (int e = 0; e < item; ++e) {
      const int a = bin_of[e];
      const double here = cost(e, a);
      for (int b = 0; b < bins; ++b) {
        if (b == a) continue;
        const double d = cost(e, b) - here;
        if (d < move[a * bins + b]) move[a * bins + b] = d, mover[a * bins + b] = e;
      }
    }
    for (int b = 0; b < bins; ++b) {
      dist[b] = cost(item, b) - potential[b];
      pred[b] = -1;
      settled[b] = 0;
    }
    for (int round = 0; round < bins; ++round) {
      int u = -1;
      for (int b = 0; b < bins; ++b)
        if (!settled[b] && (u < 0 || dist[b] < dist[u])) u = b;
      settled[u] = 1;
      for (int v = 0; v < bins; ++v) {
        if (settled[v] || mover[u * bins + v] < 0) continue;
        const double via = dist[u] + move[u * bins + v] + potential[u] - potential[v];
        if (via < dist[v]) dist[v] = via, pred[v] = u;
      }
    }
    int target = -1;
    double target_cost = kInfinity;
    for (int b = 0; b < bins; ++b) {
      dist[b] += potential[b];  // the true shortest path cost
      if (used[b] < capacity[b] && (target < 0 || dist[b] < target_cost))
        target = b, target_cost = dist[b];
    }
    if (target < 0) throw Error("assign_min_cost: capacities below the item count");
    potential = dist;
    int b = target;
    while (pred[b] >= 0) {
      const int a = pred[b];
      bin_of[mover[a * bins + b]] = b;
      b = a;
    }
    bin_of[item] = b;
    used[target] += 1;
  }
  return bin_of;
}

// Traffic of a map, compared lexicographically: cross-node first, then
// off-rank pairs inside a node.
struct TrafficCost {
  double inter = 0;
  double intra = 0;
};

class LayerPlacer {
 public:
  LayerPlacer(const std::vector<std::vector<double>>& tokens, const RankTopology& topology,
              double tolerance)
      : tokens_(tokens), topology_(topology), tolerance_(tolerance) {
    ranks_ = topology.ranks();
    if (ranks_ <= 0) throw Error("the topology has no ranks").field("topology");
    if (static_cast<int>(tokens.size()) != ranks_)
      throw Error("load has " + std::to_string(tokens.size()) + " source ranks, the EP group " +
                  std::to_string(ranks_))
          .field("load");
    experts_ = static_cast<int>(tokens.front().size());
    for (const auto& row : tokens)
      if (static_cast<int>(row.size()) != experts_) throw Error("ragged load matrix").field("load");
    if (experts_ <= 0 || experts_ % ranks_ != 0)
      throw Error(std::to_string(experts_) + " experts do not split evenly over " +
                  std::to_string(ranks_) + " EP ranks")
          .field("ep");
    per_rank_ = experts_ / ranks_;
    nodes_ = topology.nodes();
    node_ranks_.resize(nodes_);
    for (int n = 0; n < nodes_; ++n) node_ranks_[n] = topology.ranks_on_node(n);

    total_.assign(experts_, 0.0);
    node_tokens_.assign(static_cast<size_t>(nodes_) * experts_, 0.0);
    for (int s = 0; s < ranks_; ++s)
      for (int e = 0; e < experts_; ++e) {
        total_[e] += tokens[s][e];
        node_tokens_[static_cast<size_t>(node_of(s)) * experts_ + e] += tokens[s][e];
      }
    inter_.resize(static_cast<size_t>(experts_) * ranks_);
    intra_.resize(inter_.size());
    for (int e = 0; e < experts_; ++e)
      for (int r = 0; r < ranks_; ++r) {
        const double on_node = node_tokens_[static_cast<size_t>(node_of(r)) * experts_ + e];
        inter_[index(e, r)] = total_[e] - on_node;
        intra_[index(e, r)] = on_node - tokens[r][e];
      }
    grand_total_ = std::accumulate(total_.begin(), total_.end(), 0.0);
    eps_ = 1e-9 * std::max(1.0, grand_total_);
  }

  LayerPlacement run() {
    LayerPlacement out;
    const double mean = grand_total_ / ranks_;
    const double tolerance_cap = (1 + tolerance_) * mean;
    out.max_load_lower_bound = max_load_lower_bound(mean);

    // Balance first: the smallest max load we can reach decides whether the
    // tolerance is attainable.
    Map balanced = balance_first();
    Map contiguous = make_map(contiguous_owners(experts_, ranks_));
    const double best_balance = std::min(balanced.max_load(), contiguous.max_load());
    if (best_balance <= tolerance_cap + eps_) {
      cap_ = tolerance_cap;
    } else {
      cap_ = best_balance;
      out.balance_met = false;
      out.balance_infeasible = out.max_load_lower_bound > tolerance_cap + eps_;
    }
    out.load_cap = cap_;

    double bound = 0;
    Map local = make_map(locality_first(bound));
    out.inter_node_lower_bound = bound;

    struct Start {
      const char* name;
      Map map;
    };
    std::vector<Start> starts = {{"locality", std::move(local)},
                                 {"greedy", greedy()},
                                 {"balance", std::move(balanced)},
                                 {"contiguous", std::move(contiguous)}};
    const Map* best = nullptr;
    for (Start& start : starts) {
      if (!repair(start.map)) continue;
      local_search(start.map);
      start.map = make_map(start.map.owner);  // exact sums, no incremental drift
      if (!best || better(start.map.cost, best->cost) ||
          (!better(best->cost, start.map.cost) && start.map.max_load() < best->max_load() - eps_)) {
        best = &start.map;
        out.start = start.name;
      }
    }
    // The balance-first and contiguous starts meet the cap by construction.
    if (!best) throw Error("expert placement found no map within the load cap");
    out.owners = best->owner;
    return out;
  }

 private:
  struct Map {
    std::vector<int> owner;
    std::vector<double> load;
    std::vector<int> count;
    TrafficCost cost;
    double max_load() const { return *std::max_element(load.begin(), load.end()); }
  };

  size_t index(int e, int r) const { return static_cast<size_t>(e) * ranks_ + r; }
  int node_of(int r) const { return topology_.node_of_rank[r]; }
  TrafficCost cost(int e, int r) const { return {inter_[index(e, r)], intra_[index(e, r)]}; }

  bool better(const TrafficCost& a, const TrafficCost& b) const {
    if (a.inter < b.inter - eps_) return true;
    return a.inter <= b.inter + eps_ && a.intra < b.intra - eps_;
  }

  Map make_map(std::vector<int> owner) const {
    Map m;
    m.owner = std::move(owner);
    m.load.assign(ranks_, 0.0);
    m.count.assign(ranks_, 0);
    for (int e = 0; e < experts_; ++e) {
      const int r = m.owner[e];
      m.load[r] += total_[e];
      m.count[r] += 1;
      m.cost.inter += inter_[index(e, r)];
      m.cost.intra += intra_[index(e, r)];
    }
    return m;
  }

  // Traffic change of exchanging the owners of e and f.
  TrafficCost swap_delta(const Map& m, int e, int f) const {
    const int a = m.owner[e], b = m.owner[f];
    return {inter_[index(e, b)] + inter_[index(f, a)] - inter_[index(e, a)] - inter_[index(f, b)],
            intra_[index(e, b)] + intra_[index(f, a)] - intra_[index(e, a)] - intra_[index(f, b)]};
  }

  void apply_swap(Map& m, int e, int f) const {
    const int a = m.owner[e], b = m.owner[f];
    const TrafficCost d = swap_delta(m, e, f);
    m.load[a] += total_[f] - total_[e];
    m.load[b] += total_[e] - total_[f];
    m.cost.inter += d.inter;
    m.cost.intra += d.intra;
    std::swap(m.owner[e], m.owner[f]);
  }

  std::vector<int> experts_by_load() const {
    std::vector<int> order(experts_);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return total_[a] > total_[b]; });
    return order;
  }

  // Every rank holds per_rank_ experts, so the rank with the heaviest expert
  // also carries at least the per_rank_ - 1 lightest others.
  double max_load_lower_bound(double mean) const {
    std::vector<double> sorted = total_;
    std::sort(sorted.begin(), sorted.end());
    double with_heaviest = sorted.back();
    for (int i = 0; i < per_rank_ - 1; ++i) with_heaviest += sorted[i];
    return std::max(mean, with_heaviest);
  }

  // LPT under the per-rank expert count, then swaps off the busiest rank while
  // they lower its load below the old maximum.
  Map balance_first() const {
    std::vector<int> owner(experts_, -1);
    std::vector<double> load(ranks_, 0.0);
    std::vector<int> count(ranks_, 0);
    for (int e : experts_by_load()) {
      int pick = -1;
      for (int r = 0; r < ranks_; ++r)
        if (count[r] < per_rank_ && (pick < 0 || load[r] < load[pick])) pick = r;
      owner[e] = pick;
      load[pick] += total_[e];
      count[pick] += 1;
    }
    Map m = make_map(std::move(owner));
    for (int step = 0; step < experts_ * experts_; ++step) {
      const int busiest =
          static_cast<int>(std::max_element(m.load.begin(), m.load.end()) - m.load.begin());
      int best_e = -1, best_f = -1;
      double best_peak = m.load[busiest] - eps_;
      for (int e = 0; e < experts_; ++e) {
        if (m.owner[e] != busiest) continue;
        for (int f = 0; f < experts_; ++f) {
          const int b = m.owner[f];
          const double shift = total_[e] - total_[f];
          if (b == busiest || shift <= eps_) continue;
          const double peak = std::max(m.load[busiest] - shift, m.load[b] + shift);
          if (peak < best_peak) best_peak = peak, best_e = e, best_f = f;
        }
      }
      if (best_e < 0) break;
      apply_swap(m, best_e, best_f);
    }
    return m;
  }

  // Exact traffic optimum without the load constraint: experts to nodes by
  // cross-node pairs, then each node's experts to its ranks by off-rank pairs.
  std::vector<int> locality_first(double& inter_bound) const {
    std::vector<int> node_capacity(nodes_);
    for (int n = 0; n < nodes_; ++n)
      node_capacity[n] = static_cast<int>(node_ranks_[n].size()) * per_rank_;
    const std::vector<int> node_of_expert =
        assign_min_cost(experts_, node_capacity, [&](int e, int n) {
          return total_[e] - node_tokens_[static_cast<size_t>(n) * experts_ + e];
        });
    inter_bound = 0;
    for (int e = 0; e < experts_; ++e)
      inter_bound +=
          total_[e] - node_tokens_[static_cast<size_t>(node_of_expert[e]) * experts_ + e];

    std::vector<int> owner(experts_, -1);
    for (int n = 0; n < nodes_; ++n) {
      std::vector<int> members;
      for (int e = 0; e < experts_; ++e)
        if (node_of_expert[e] == n) members.push_back(e);
      const std::vector<int>& ranks = node_ranks_[n];
      const std::vector<int> slot = assign_min_cost(
          static_cast<int>(members.size()), std::vector<int>(ranks.size(), per_rank_),
          [&](int i, int j) { return intra_[index(members[i], ranks[j])]; });
      for (size_t i = 0; i < members.size(); ++i) owner[members[i]] = ranks[slot[i]];
    }
    return owner;
  }

  // Heaviest experts first, each to its cheapest rank that still has a slot
  // and room under the cap (or to the least loaded rank with a slot).
  Map greedy() const {
    std::vector<int> owner(experts_, -1);
    std::vector<double> load(ranks_, 0.0);
    std::vector<int> count(ranks_, 0);
    for (int e : experts_by_load()) {
      int pick = -1;
      for (int r = 0; r < ranks_; ++r) {
        if (count[r] >= per_rank_ || load[r] + total_[e] > cap_ + eps_) continue;
        if (pick < 0 || better(cost(e, r), cost(e, pick)) ||
            (!better(cost(e, pick), cost(e, r)) && load[r] < load[pick]))
          pick = r;
      }
      if (pick < 0)
        for (int r = 0; r < ranks_; ++r)
          if (count[r] < per_rank_ && (pick < 0 || load[r] < load[pick])) pick = r;
      owner[e] = pick;
      load[pick] += total_[e];
      count[pick] += 1;
    }
    return make_map(std::move(owner));
  }

  // Brings every rank under the cap: from the busiest rank, the swap with the
  // smallest traffic increase per token of load moved whose partner stays
  // under the cap. The total overload strictly falls, so this ends.
  bool repair(Map& m) const {
    for (int step = 0; step < experts_ * experts_; ++step) {
      const int busiest =
          static_cast<int>(std::max_element(m.load.begin(), m.load.end()) - m.load.begin());
      if (m.load[busiest] <= cap_ + eps_) return true;
      int best_e = -1, best_f = -1;
      TrafficCost best_rate;
      double best_shift = 0;
      for (int e = 0; e < experts_; ++e) {
        if (m.owner[e] != busiest) continue;
        for (int f = 0; f < experts_; ++f) {
          const int b = m.owner[f];
          const double shift = total_[e] - total_[f];
          if (b == busiest || shift <= eps_ || m.load[b] + shift > cap_ + eps_) continue;
          const TrafficCost d = swap_delta(m, e, f);
          const TrafficCost rate{d.inter / shift, d.intra / shift};
          if (best_e < 0 || better(rate, best_rate) ||
              (!better(best_rate, rate) && shift > best_shift + eps_))
            best_e = e, best_f = f, best_rate = rate, best_shift = shift;
        }
      }
      if (best_e < 0) return false;
      apply_swap(m, best_e, best_f);
    }
    return m.max_load() <= cap_ + eps_;
  }

  // First-improvement pairwise swaps: strictly less traffic, loads under the cap.
  void local_search(Map& m) const {
    for (int pass = 0; pass < 4 * experts_; ++pass) {
      bool improved = false;
      for (int e = 0; e < experts_; ++e)
        for (int f = e + 1; f < experts_; ++f) {
          const int a = m.owner[e], b = m.owner[f];
          if (a == b) continue;
          const TrafficCost d = swap_delta(m, e, f);
          if (!better(d, TrafficCost{})) continue;
          const double shift = total_[e] - total_[f];
          if (m.load[a] - shift > cap_ + eps_ || m.load[b] + shift > cap_ + eps_) continue;
          apply_swap(m, e, f);
          improved = true;
        }
      if (!improved) return;
    }
  }

  const std::vector<std::vector<double>>& tokens_;
  const RankTopology& topology_;
  double tolerance_;
  int ranks_ = 0, experts_ = 0, per_rank_ = 0, nodes_ = 0;
  std::vector<std::vector<int>> node_ranks_;
  std::vector<double> total_;        // tokens per expert
  std::vector<double> node_tokens_;  // [node][expert]
  std::vector<double> inter_;        // [expert][rank]: pairs crossing nodes if e sits on r
  std::vector<double> intra_;        // [expert][rank]: pairs leaving their rank inside the node
  double grand_total_ = 0;
  double eps_ = 0;
  double cap_ = 0;
};

}  // namespace

// ---------------------------------------------------------------- topology

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

// ---------------------------------------------------------------- load profile

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

// ---------------------------------------------------------------- placement maps

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

// ---------------------------------------------------------------- traffic

double bytes_per_element(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "fp16") return 2;
  if (dtype == "fp32") return 4;
  if (dtype == "fp8") return 1;
  throw Error("unknown dtype '" + dtype + "' (bf16, fp16, fp32, fp8)").field("--dtype");
}

LayerTraffic layer_traffic(const std::vector<std::vector<double>>& tokens,
                           const std::vector<int>& owners, const RankTopology& topology,
                           const TrafficOptions& options) {
  const int ranks = topology.ranks();
  const int experts = static_cast<int>(owners.size());
  if (static_cast<int>(tokens.size()) != ranks)
    throw Error("load has " + std::to_string(tokens.size()) + " source ranks, the EP group " +
                std::to_string(ranks))
        .field("load");
  std::vector<double> load(ranks, 0.0), send_intra(ranks, 0.0), recv_intra(ranks, 0.0),
      send_inter(ranks, 0.0), recv_inter(ranks, 0.0);
  LayerTraffic t;
  for (int s = 0; s < ranks; ++s) {
    if (static_cast<int>(tokens[s].size()) != experts)
      throw Error("load has " + std::to_string(tokens[s].size()) + " experts, the map " +
                  std::to_string(experts))
          .field("load");
    for (int e = 0; e < experts; ++e) {
      const int r = owners[e];
      if (r < 0 || r >= ranks) throw Error("owner rank outside the EP group").field("map");
      const double n = tokens[s][e];
      t.assignments += n;
      load[r] += n;
      if (r == s) {
        t.local += n;
      } else if (topology.node_of_rank[r] == topology.node_of_rank[s]) {
        t.intra_node += n;
        send_intra[s] += n;
        recv_intra[r] += n;
      } else {
        t.inter_node += n;
        send_inter[s] += n;
        recv_inter[r] += n;
      }
    }
  }
  const double token_bytes = static_cast<double>(options.hidden) * options.bytes_per_element;
  t.intra_node_bytes = 2 * t.intra_node * token_bytes;
  t.inter_node_bytes = 2 * t.inter_node * token_bytes;
  double dispatch = 0;
  for (int r = 0; r < ranks; ++r) {
    const double inter =
        std::max(send_inter[r], recv_inter[r]) * token_bytes / (topology.inter_node_gbps * 1e9);
    const double intra =
        std::max(send_intra[r], recv_intra[r]) * token_bytes / (topology.intra_node_gbps * 1e9);
    dispatch = std::max({dispatch, inter, intra});
  }
  t.seconds = 2 * dispatch;
  t.max_rank_load = *std::max_element(load.begin(), load.end());
  t.mean_rank_load = t.assignments / ranks;
  return t;
}

TrafficReport traffic_report(const ExpertLoad& load, const ExpertPlacement& placement,
                             const RankTopology& topology, const TrafficOptions& options) {
  if (load.num_layers() != static_cast<int>(placement.layers.size()))
    throw Error("the map has " + std::to_string(placement.layers.size()) +
                " layers, the load profile " + std::to_string(load.num_layers()))
        .field("layers");
  TrafficReport report;
  for (int l = 0; l < load.num_layers(); ++l) {
    const LayerTraffic t = layer_traffic(load.layers[l], placement.layers[l], topology, options);
    report.layers.push_back(t);
    LayerTraffic& sum = report.total;
    sum.assignments += t.assignments;
    sum.local += t.local;
    sum.intra_node += t.intra_node;
    sum.inter_node += t.inter_node;
    sum.intra_node_bytes += t.intra_node_bytes;
    sum.inter_node_bytes += t.inter_node_bytes;
    sum.max_rank_load += t.max_rank_load;
    sum.mean_rank_load += t.mean_rank_load;
    sum.seconds += t.seconds;
    report.worst_layer_imbalance = std::max(report.worst_layer_imbalance, t.imbalance());
  }
  return report;
}

// ---------------------------------------------------------------- placement

LayerPlacement place_layer(const std::vector<std::vector<double>>& tokens,
                           const RankTopology& topology, const PlacementOptions& options) {
  if (!(options.tolerance >= 0)) throw Error("must be >= 0").field("--tolerance");
  if (tokens.empty()) throw Error("empty load matrix").field("load");
  return LayerPlacer(tokens, topology, options.tolerance).run();
}

PlacementResult place_experts(const ExpertLoad& load, const RankTopology& topology,
                              const PlacementOptions& options) {
  PlacementResult result;
  result.placement.ranks = topology.ranks();
  for (const auto& layer : load.layers) {
    LayerPlacement p = place_layer(layer, topology, options);
    result.placement.layers.push_back(p.owners);
    result.layers.push_back(std::move(p));
  }
  return result;
}

// ---------------------------------------------------------------- report

namespace {

__attribute__((format(printf, 2, 3))) void appendf(std::string& out, const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  out += buffer;
}

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

RankTopology first_ep_group(const RankTopology& world, int ep, std::string* note) {
  if (ep <= 0 || world.ranks() % ep != 0)
    throw Error("must divide the topology's " + std::to_string(world.ranks()) + " ranks")
        .field("--ep");
  const RankTopology group = world.group(0, ep);
  for (int g = 1; g < world.ranks() / ep; ++g)
    if (!world.group(g * ep, ep).same_partition(group)) {
      if (note)
        *note = "EP group " + std::to_string(g) +
                " spans nodes differently from group 0; the map is optimised for group 0 (ranks "
                "0.." +
                std::to_string(ep - 1) + ")";
      break;
    }
  return group;
}

ExpertPlan plan_expert_placement(const ExpertLoad& load, const RankTopology& topology,
                                 const PlacementOptions& options, const std::string& dtype,
                                 int64_t hidden, const std::string& load_source) {
  if (hidden <= 0) throw Error("must be > 0").field("--hidden");
  const int ranks = topology.ranks();
  if (load.source_ranks() != ranks)
    throw Error("has " + std::to_string(load.source_ranks()) + " source ranks, the EP group " +
                std::to_string(ranks))
        .file(load_source)
        .field("layers");
  if (load.experts() % ranks != 0)
    throw Error(std::to_string(load.experts()) + " experts do not split evenly over " +
                std::to_string(ranks) + " EP ranks")
        .file(load_source)
        .field("--ep");
  ExpertPlan plan;
  plan.topology = topology;
  plan.load_source = load_source;
  plan.dtype = dtype;
  plan.traffic.hidden = hidden;
  plan.traffic.bytes_per_element = bytes_per_element(dtype);
  plan.options = options;
  plan.layers = load.num_layers();
  plan.experts = load.experts();
  plan.placed = place_experts(load, topology, options);
  plan.before = traffic_report(load, contiguous_placement(plan.layers, plan.experts, ranks),
                               topology, plan.traffic);
  plan.after = traffic_report(load, plan.placed.placement, topology, plan.traffic);
  const double pair_bytes = 2.0 * static_cast<double>(hidden) * plan.traffic.bytes_per_element;
  for (const LayerPlacement& l : plan.placed.layers)
    plan.inter_node_bytes_lower_bound += l.inter_node_lower_bound * pair_bytes;
  return plan;
}

std::string format_expert_plan(const ExpertPlan& plan, bool per_layer) {
  const RankTopology& topology = plan.topology;
  std::string out, per_node;
  for (int n = 0; n < topology.nodes(); ++n)
    per_node += (n ? "+" : "") + std::to_string(topology.ranks_on_node(n).size());
  appendf(out,
          "topology: %d EP ranks on %d node%s (%s), per rank %.4g GB/s intra-node, %.4g GB/s "
          "inter-node\n",
          topology.ranks(), topology.nodes(), topology.nodes() == 1 ? "" : "s", per_node.c_str(),
          topology.intra_node_gbps, topology.inter_node_gbps);
  appendf(out,
          "load %s: %d MoE layers x %d experts, %.4g token-expert pairs; hidden %lld x %s, "
          "dispatch + combine\n",
          plan.load_source.c_str(), plan.layers, plan.experts, plan.before.total.assignments,
          static_cast<long long>(plan.traffic.hidden), plan.dtype.c_str());
  int met = 0, infeasible = 0;
  for (const LayerPlacement& l : plan.placed.layers) {
    met += l.balance_met ? 1 : 0;
    infeasible += l.balance_infeasible ? 1 : 0;
  }
  appendf(out, "balance: max rank load <= %.3g x mean met in %d/%d layers",
          1 + plan.options.tolerance, met, plan.layers);
  if (met < plan.layers)
    appendf(out,
            " (%d provably infeasible, %d not reached by the search; those layers use the "
            "smallest max load found)",
            infeasible, plan.layers - met - infeasible);
  out += "\n\n";

  auto row = [&](const char* name, const TrafficReport& r) {
    const LayerTraffic& t = r.total;
    appendf(out, "%-12s %14.4g %14.4g %9.1f %13.3f %12.3f %14.4g\n", name, t.inter_node_bytes / 1e9,
            t.intra_node_bytes / 1e9, t.assignments > 0 ? 100.0 * t.local / t.assignments : 0.0,
            t.imbalance(), r.worst_layer_imbalance, t.seconds * 1e3);
  };
  appendf(out, "%-12s %14s %14s %9s %13s %12s %14s\n", "map", "inter-node GB", "intra-node GB",
          "local %", "max/mean load", "worst layer", "est. a2a ms");
  row("contiguous", plan.before);
  row("placed", plan.after);
  appendf(out, "%-12s %14.4g %14s %9s %13s %12s %14s\n", "lower bound",
          plan.inter_node_bytes_lower_bound / 1e9, "-", "-", "-", "-", "-");
  auto change = [](double now, double was) { return was > 0 ? 100.0 * (now / was - 1) : 0.0; };
  appendf(out, "\ninter-node bytes %+.1f%% (lower bound %+.1f%%), est. all-to-all time %+.1f%%\n",
          change(plan.after.total.inter_node_bytes, plan.before.total.inter_node_bytes),
          change(plan.inter_node_bytes_lower_bound, plan.before.total.inter_node_bytes),
          change(plan.after.total.seconds, plan.before.total.seconds));
  out +=
      "(max/mean load: sum over layers of the busiest rank's token-expert pairs over the mean; "
      "lower bound: exact optimum without the load constraint)\n";

  if (per_layer) {
    const double pair_bytes =
        2.0 * static_cast<double>(plan.traffic.hidden) * plan.traffic.bytes_per_element;
    appendf(out, "\n%5s %16s %16s %16s %12s %12s %12s %12s  %s\n", "layer", "inter GB before",
            "inter GB after", "inter GB bound", "load before", "load after", "ms before",
            "ms after", "start");
    for (int l = 0; l < plan.layers; ++l) {
      const LayerTraffic& b = plan.before.layers[l];
      const LayerTraffic& a = plan.after.layers[l];
      const LayerPlacement& p = plan.placed.layers[l];
      appendf(out, "%5d %16.4g %16.4g %16.4g %12.3f %12.3f %12.3f %12.3f  %s%s\n", l,
              b.inter_node_bytes / 1e9, a.inter_node_bytes / 1e9,
              p.inter_node_lower_bound * pair_bytes / 1e9, b.imbalance(), a.imbalance(),
              b.seconds * 1e3, a.seconds * 1e3, p.start.c_str(),
              p.balance_met ? "" : (p.balance_infeasible ? " (infeasible)" : " (not met)"));
    }
  }
  return out;
}

json expert_plan_json(const ExpertPlan& plan) {
  json j = expert_placement_json(plan.placed.placement);
  auto summary = [](const LayerTraffic& t) {
    return json{{"inter_node_bytes", t.inter_node_bytes},
                {"intra_node_bytes", t.intra_node_bytes},
                {"max_over_mean_load", t.imbalance()},
                {"all_to_all_seconds", t.seconds}};
  };
  j["traffic"] = {{"contiguous", summary(plan.before.total)},
                  {"placed", summary(plan.after.total)},
                  {"inter_node_bytes_lower_bound", plan.inter_node_bytes_lower_bound},
                  {"hidden", plan.traffic.hidden},
                  {"dtype", plan.dtype},
                  {"tolerance", plan.options.tolerance},
                  {"load", plan.load_source}};
  j["topology"] = plan.topology.to_json();
  return j;
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
