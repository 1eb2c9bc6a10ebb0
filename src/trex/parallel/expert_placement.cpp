#include "trex/parallel/expert_placement.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "trex/core/error.hpp"

namespace trex::parallel {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

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

}  // namespace trex::parallel
