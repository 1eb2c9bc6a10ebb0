#pragma once
// Directed graphs of the network families (max flow, shortest path, min-cost
// flow, fixed-charge network design): arcs between node indices, the random
// structures their generators plant, shortest paths, and the arc lists of the
// R-ALG and R-EXE representations. Each family keeps its own arc type with the
// data it needs next to `from` and `to`.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "trex/core/rng.hpp"

namespace trex::orlib::graph {

template <typename A>
concept HasEnds = requires(const A& arc) {
  { arc.from } -> std::convertible_to<size_t>;
  { arc.to } -> std::convertible_to<size_t>;
};

// Only the ends of an arc.
struct Ends {
  size_t from = 0, to = 0;
};

template <HasEnds A>
std::vector<Ends> ends(const std::vector<A>& arcs) {
  std::vector<Ends> out;
  out.reserve(arcs.size());
  for (const A& arc : arcs) out.push_back({arc.from, arc.to});
  return out;
}

// One field of every arc, in arc order: values(arcs, &MyArc::cap).
template <HasEnds A>
std::vector<double> values(const std::vector<A>& arcs, double A::*field) {
  std::vector<double> out;
  out.reserve(arcs.size());
  for (const A& arc : arcs) out.push_back(arc.*field);
  return out;
}

// Orders arcs by origin, then destination, so that lists read node by node.
template <HasEnds A>
void sort_by_ends(std::vector<A>& arcs) {
  std::sort(arcs.begin(), arcs.end(), [](const A& a, const A& b) {
    return a.from != b.from ? a.from < b.from : a.to < b.to;
  });
}

// An increasing chain of nodes from 0 to n - 1 (n >= 3) through a random subset
// of the nodes between, at least one: the route a generator plants so that the
// last node is reachable from the first.
std::vector<size_t> planted_chain(Rng& rng, size_t n);

// Dijkstra from s to t, with length[k] the length of arcs[k], over the arcs not
// in `arc_blocked` and into no node in `node_blocked` (an empty mask blocks
// nothing). Returns the indices of the path's arcs in order from s; empty when
// t cannot be reached.
std::vector<size_t> shortest_path(size_t nodes, const std::vector<Ends>& arcs,
                                  const std::vector<double>& length, size_t s, size_t t,
                                  const std::vector<bool>& arc_blocked = {},
                                  const std::vector<bool>& node_blocked = {});

// "(a, b)" in LaTeX, the symbols through latex_name.
std::string latex_pair(const std::string& a, const std::string& b);

// The arc set in LaTeX, "\{(a, b), (a, c)\}", by node symbol.
std::string latex_arc_set(const std::vector<Ends>& arcs, const std::vector<std::string>& keys);
template <HasEnds A>
std::string latex_arc_set(const std::vector<A>& arcs, const std::vector<std::string>& keys) {
  return latex_arc_set(ends(arcs), keys);
}

// The arcs as MathProg tuples of node symbols, for GmplData::set_of_tuples.
std::vector<std::vector<std::string>> gmpl_tuples(const std::vector<Ends>& arcs,
                                                  const std::vector<std::string>& keys);
template <HasEnds A>
std::vector<std::vector<std::string>> gmpl_tuples(const std::vector<A>& arcs,
                                                  const std::vector<std::string>& keys) {
  return gmpl_tuples(ends(arcs), keys);
}

// A parameter over the arcs, value[k] on arcs[k], for GmplData::param_sparse.
std::vector<std::pair<std::vector<std::string>, double>> gmpl_values(
    const std::vector<Ends>& arcs, const std::vector<std::string>& keys,
    const std::vector<double>& value);
// The same with one field of every arc: gmpl_values(arcs, keys, &MyArc::cap).
template <HasEnds A>
std::vector<std::pair<std::vector<std::string>, double>> gmpl_values(
    const std::vector<A>& arcs, const std::vector<std::string>& keys, double A::*field) {
  return gmpl_values(ends(arcs), keys, values(arcs, field));
}

}  // namespace trex::orlib::graph
