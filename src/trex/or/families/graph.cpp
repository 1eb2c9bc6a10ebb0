#include "trex/or/families/graph.hpp"

#include <limits>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"

namespace trex::orlib::graph {

std::vector<size_t> planted_chain(Rng& rng, size_t n) {
  std::vector<size_t> chain = {0};
  for (size_t v = 1; v + 1 < n; ++v)
    if (rng.bernoulli(0.4)) chain.push_back(v);
  if (chain.size() == 1) chain.push_back(1 + rng.index(n - 2));
  chain.push_back(n - 1);
  return chain;
}

std::vector<size_t> shortest_path(size_t nodes, const std::vector<Ends>& arcs,
                                  const std::vector<double>& length, size_t s, size_t t,
                                  const std::vector<bool>& arc_blocked,
                                  const std::vector<bool>& node_blocked) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> dist(nodes, inf);
  std::vector<int> via(nodes, -1);
  std::vector<bool> done(nodes, false);
  dist[s] = 0;
  for (size_t round = 0; round < nodes; ++round) {
    size_t u = nodes;
    for (size_t v = 0; v < nodes; ++v)
      if (!done[v] && dist[v] < inf && (u == nodes || dist[v] < dist[u])) u = v;
    if (u == nodes) break;
    done[u] = true;
    for (size_t k = 0; k < arcs.size(); ++k) {
      const Ends& a = arcs[k];
      if (a.from != u || (!arc_blocked.empty() && arc_blocked[k]) ||
          (!node_blocked.empty() && node_blocked[a.to]))
        continue;
      if (dist[u] + length[k] < dist[a.to]) {
        dist[a.to] = dist[u] + length[k];
        via[a.to] = static_cast<int>(k);
      }
    }
  }
  std::vector<size_t> path;
  if (dist[t] == inf) return path;
  for (size_t v = t; v != s; v = arcs[static_cast<size_t>(via[v])].from)
    path.push_back(static_cast<size_t>(via[v]));
  std::reverse(path.begin(), path.end());
  return path;
}

// Built by appending (GCC 12 flags `"(" + f()` with a bogus -Wrestrict).
std::string latex_pair(const std::string& a, const std::string& b) {
  std::string out = "(";
  out += latex_name(a);
  out += ", ";
  out += latex_name(b);
  out += ")";
  return out;
}

std::string latex_arc_set(const std::vector<Ends>& arcs, const std::vector<std::string>& keys) {
  std::vector<std::string> pairs;
  for (const Ends& a : arcs) pairs.push_back(latex_pair(keys[a.from], keys[a.to]));
  std::string out = "\\{";
  out += join(pairs, ", ");
  out += "\\}";
  return out;
}

std::vector<std::vector<std::string>> gmpl_tuples(const std::vector<Ends>& arcs,
                                                  const std::vector<std::string>& keys) {
  std::vector<std::vector<std::string>> out;
  for (const Ends& a : arcs) out.push_back({keys[a.from], keys[a.to]});
  return out;
}

std::vector<std::pair<std::vector<std::string>, double>> gmpl_values(
    const std::vector<Ends>& arcs, const std::vector<std::string>& keys,
    const std::vector<double>& value) {
  std::vector<std::pair<std::vector<std::string>, double>> out;
  for (size_t k = 0; k < arcs.size(); ++k)
    out.push_back({{keys[arcs[k].from], keys[arcs[k].to]}, value[k]});
  return out;
}

}  // namespace trex::orlib::graph
