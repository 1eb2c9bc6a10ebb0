#include "trex/or/families/geometry.hpp"

#include <algorithm>
#include <cmath>

namespace trex::orlib::geometry {

double distance(const Point& a, const Point& b) {
  return std::hypot(a.first - b.first, a.second - b.second);
}

std::vector<Point> random_points(Rng& rng, size_t n, double width, double height) {
  std::vector<Point> points(n);
  for (auto& p : points) p = {rng.uniform(0.0, width), rng.uniform(0.0, height)};
  return points;
}

void add_spread_points(Rng& rng, double scale, size_t count, std::vector<Point>& points) {
  while (points.size() < count) {
    Point p{rng.uniform(0, scale), rng.uniform(0, scale)};
    bool far = std::all_of(points.begin(), points.end(),
                           [&](const Point& q) { return distance(p, q) >= 1.5; });
    if (far) points.push_back(p);
  }
}

std::vector<std::vector<double>> rounded_distances(const std::vector<Point>& points) {
  const size_t n = points.size();
  std::vector<std::vector<double>> dist(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j) dist[i][j] = std::max(1.0, std::round(distance(points[i], points[j])));
  return dist;
}

}  // namespace trex::orlib::geometry
