#pragma once
// Points on a map for the generators that place nodes, places or customers:
// random positions, Euclidean distances and the rounded distance matrices that
// routing families (travelling salesman, vehicle routing) print.
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "trex/core/rng.hpp"

namespace trex::orlib::geometry {

// (x, y); compares west to east, then south to north.
using Point = std::pair<double, double>;

double distance(const Point& a, const Point& b);

// n points drawn uniformly in [0, width] x [0, height], x before y.
std::vector<Point> random_points(Rng& rng, size_t n, double width, double height);

// Adds points drawn uniformly in [0, scale]² to `points` until it holds `count`,
// rejecting any closer than 1.5 to one already there, so that no two places
// share a rounded distance of zero.
void add_spread_points(Rng& rng, double scale, size_t count, std::vector<Point>& points);

// Distances rounded to whole units and at least 1 between distinct points; 0 on
// the diagonal.
std::vector<std::vector<double>> rounded_distances(const std::vector<Point>& points);

// The other points, nearest to points[from] first (ties by index), keeping those
// that `keep(index)` accepts.
template <typename Keep>
std::vector<size_t> nearest_first(const std::vector<Point>& points, size_t from, Keep keep) {
  std::vector<std::pair<double, size_t>> near;
  for (size_t w = 0; w < points.size(); ++w)
    if (w != from && keep(w)) near.push_back({distance(points[from], points[w]), w});
  std::sort(near.begin(), near.end());
  std::vector<size_t> out;
  out.reserve(near.size());
  for (const auto& entry : near) out.push_back(entry.second);
  return out;
}
inline std::vector<size_t> nearest_first(const std::vector<Point>& points, size_t from) {
  return nearest_first(points, from, [](size_t) { return true; });
}

}  // namespace trex::orlib::geometry
