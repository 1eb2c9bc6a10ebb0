// The pieces the family generators share: graphs, map geometry, rounding to
// steps, pair draws and the text helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "trex/or/families/draws.hpp"
#include "trex/or/families/geometry.hpp"
#include "trex/or/families/graph.hpp"
#include "trex/or/families/rounding.hpp"
#include "trex/or/families/text.hpp"

namespace trex::orlib {
namespace {

struct CostArc {
  size_t from = 0, to = 0;
  double cost = 0;
};

TEST(FamilyGraph, SortsArcsByOriginThenDestination) {
  std::vector<CostArc> arcs = {{2, 0, 1}, {0, 3, 2}, {0, 1, 3}, {1, 2, 4}};
  graph::sort_by_ends(arcs);
  EXPECT_EQ(graph::values(arcs, &CostArc::cost), (std::vector<double>{3, 2, 4, 1}));
}

TEST(FamilyGraph, PlantedChainRunsFromFirstToLastNodeInIncreasingOrder) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Rng rng(seed, {1});
    const std::vector<size_t> chain = graph::planted_chain(rng, 6);
    ASSERT_GE(chain.size(), 3u);
    EXPECT_EQ(chain.front(), 0u);
    EXPECT_EQ(chain.back(), 5u);
    for (size_t i = 0; i + 1 < chain.size(); ++i) EXPECT_LT(chain[i], chain[i + 1]);
  }
}

TEST(FamilyGraph, ShortestPathAvoidsBlockedArcsAndNodes) {
  // 0 -> 1 -> 3 is short; 0 -> 2 -> 3 is long; 0 -> 3 direct is longest.
  const std::vector<graph::Ends> arcs = {{0, 1}, {1, 3}, {0, 2}, {2, 3}, {0, 3}};
  const std::vector<double> length = {1, 1, 2, 2, 10};
  EXPECT_EQ(graph::shortest_path(4, arcs, length, 0, 3), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(graph::shortest_path(4, arcs, length, 0, 3, {false, true, false, false, false}),
            (std::vector<size_t>{2, 3}));
  EXPECT_EQ(graph::shortest_path(4, arcs, length, 0, 3, {}, {false, true, true, false}),
            (std::vector<size_t>{4}));
  EXPECT_TRUE(graph::shortest_path(4, arcs, length, 3, 0).empty());
}

TEST(FamilyGraph, WritesArcListsForAlgebraAndMathProg) {
  const std::vector<CostArc> arcs = {{0, 1, 2.5}, {1, 2, 4}};
  const std::vector<std::string> keys = {"A", "B", "C"};
  EXPECT_EQ(graph::latex_arc_set(arcs, keys),
            "\\{(\\text{A}, \\text{B}), (\\text{B}, \\text{C})\\}");
  EXPECT_EQ(graph::gmpl_tuples(arcs, keys),
            (std::vector<std::vector<std::string>>{{"A", "B"}, {"B", "C"}}));
  const auto values = graph::gmpl_values(arcs, keys, &CostArc::cost);
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[1].first, (std::vector<std::string>{"B", "C"}));
  EXPECT_EQ(values[1].second, 4.0);
}

TEST(FamilyGeometry, SpreadPointsKeepTheirDistanceAndRoundedDistancesAreSymmetric) {
  Rng rng(3, {2});
  std::vector<geometry::Point> points = {{5, 5}};
  geometry::add_spread_points(rng, 10.0, 12, points);
  ASSERT_EQ(points.size(), 12u);
  EXPECT_EQ(points[0], (geometry::Point{5, 5}));
  const auto dist = geometry::rounded_distances(points);
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_EQ(dist[i][i], 0.0);
    for (size_t j = 0; j < points.size(); ++j) {
      if (i == j) continue;
      EXPECT_GE(geometry::distance(points[i], points[j]), 1.5);
      EXPECT_GE(dist[i][j], 1.0);
      EXPECT_EQ(dist[i][j], std::round(geometry::distance(points[i], points[j])));
      EXPECT_EQ(dist[i][j], dist[j][i]);
    }
  }
}

TEST(FamilyGeometry, NearestFirstOrdersByDistanceAndFilters) {
  const std::vector<geometry::Point> points = {{0, 0}, {3, 0}, {1, 0}, {0, 2}};
  EXPECT_EQ(geometry::nearest_first(points, 0), (std::vector<size_t>{2, 3, 1}));
  EXPECT_EQ(geometry::nearest_first(points, 0, [](size_t w) { return w != 2; }),
            (std::vector<size_t>{3, 1}));
}

TEST(FamilyRounding, RoundsToStepsAndKeepsValuesOnAStep) {
  EXPECT_EQ(round_up(83.2, 5), 85.0);
  EXPECT_EQ(round_up(85.0, 5), 85.0);
  EXPECT_EQ(round_down(83.2, 5), 80.0);
  EXPECT_EQ(round_down(0.3, 0.1), 0.30000000000000004);  // 3 steps, not 2
}

TEST(FamilyDraws, DistinctPairHonoursTheConditionOrGivesUp) {
  Rng rng(5, {3});
  for (int i = 0; i < 20; ++i) {
    const auto pair = draw_distinct_pair(rng, 6, 50, [](int a, int b) { return a + b == 5; });
    ASSERT_TRUE(pair.has_value());
    EXPECT_NE(pair->first, pair->second);
    EXPECT_EQ(pair->first + pair->second, 5);
  }
  EXPECT_FALSE(draw_distinct_pair(rng, size_t{4}, 30, [](size_t, size_t) { return false; }));
  EXPECT_EQ(in_order(std::pair{4, 1}), std::pair(1, 4));
}

TEST(FamilyText, PluralFillAndMatrix) {
  EXPECT_EQ(text::plural("plant"), "plants");
  EXPECT_EQ(text::plural("refinery"), "refineries");
  EXPECT_EQ(text::plural("relay"), "relays");
  EXPECT_EQ(text::plural("bus"), "buses");
  EXPECT_EQ(text::plural("box"), "boxes");
  EXPECT_EQ(text::plural("branch"), "branches");
  EXPECT_EQ(text::fill("{org} ships {what} to {to}.",
                       {{"{org}", "Acme"}, {"{what}", "steel"}, {"{to}", "Leeds"}}),
            "Acme ships steel to Leeds.");
  EXPECT_EQ(text::markdown_matrix({"A", "B"}, {{0, 7}, {7.5, 0}}),
            "|  | A | B |\n|---|---|---|\n| A | - | 7 |\n| B | 7.5 | - |\n");
}

}  // namespace
}  // namespace trex::orlib
