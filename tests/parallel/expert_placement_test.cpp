// Expert placement: topology / load / map files, the traffic model on a
// hand-computed case, known optima, brute force on tiny instances, never worse
// than the contiguous map, the shipped skewed example and the CLI.
#include "trex/parallel/expert_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/plan/cluster.hpp"

namespace trex::parallel {
namespace {

using plan::ClusterSpec;

using json = nlohmann::json;
using Matrix = std::vector<std::vector<double>>;

std::string repo_file(const std::string& relative) {
  return test::source_dir() + "/" + relative;
}

// The field named by the trex::Error `fn` throws ("" when it does not throw).
std::string error_field(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.field_name();
  }
  return "";
}

std::vector<int> experts_per_rank(const std::vector<int>& owners, int ranks) {
  std::vector<int> count(ranks, 0);
  for (int r : owners) count.at(r) += 1;
  return count;
}

// 2 nodes x 2 ranks, 4 experts; counts chosen so every class of traffic occurs.
const Matrix kHandTokens = {{5, 1, 2, 0}, {0, 3, 0, 4}, {1, 0, 6, 2}, {2, 2, 0, 1}};

TEST(ExpertPlacementTraffic, HandCheckedTwoNodesFourRanks) {
  RankTopology topology = RankTopology::uniform(4, 2, 1e-7, 1e-8);  // 100 and 10 bytes/s
  TrafficOptions options;
  options.hidden = 10;
  options.bytes_per_element = 2;  // 20 bytes per token and direction
  const LayerTraffic t = layer_traffic(kHandTokens, {0, 1, 2, 3}, topology, options);
  // local: 5 (s0->e0) + 3 + 6 + 1; intra: s0->e1 1, s2->e3 2; the rest crosses nodes.
  EXPECT_DOUBLE_EQ(t.assignments, 29);
  EXPECT_DOUBLE_EQ(t.local, 15);
  EXPECT_DOUBLE_EQ(t.intra_node, 3);
  EXPECT_DOUBLE_EQ(t.inter_node, 11);
  EXPECT_DOUBLE_EQ(t.inter_node_bytes, 2 * 11 * 20);
  EXPECT_DOUBLE_EQ(t.intra_node_bytes, 2 * 3 * 20);
  // Expert totals 8, 6, 8, 7 on ranks 0..3.
  EXPECT_DOUBLE_EQ(t.max_rank_load, 8);
  EXPECT_DOUBLE_EQ(t.mean_rank_load, 29.0 / 4);
  // Busiest inter-node port: rank 1 sends 4 and rank 3 receives 4 tokens
  // (80 bytes at 10 B/s = 8 s); intra-node at most 2 tokens (0.4 s).
  // Dispatch + combine = 16 s.
  EXPECT_NEAR(t.seconds, 16.0, 1e-9);

  // Swapping experts inside each node moves intra-node traffic only.
  const LayerTraffic swapped = layer_traffic(kHandTokens, {1, 0, 3, 2}, topology, options);
  EXPECT_DOUBLE_EQ(swapped.inter_node, 11);
  EXPECT_DOUBLE_EQ(swapped.local, 1 + 0 + 2 + 0);
  EXPECT_DOUBLE_EQ(swapped.intra_node, 5 + 3 + 6 + 1);

  ExpertLoad load;
  load.layers = {kHandTokens, kHandTokens};
  ExpertPlacement map = contiguous_placement(2, 4, 4);
  map.layers[1] = {1, 0, 3, 2};
  const TrafficReport report = traffic_report(load, map, topology, options);
  EXPECT_DOUBLE_EQ(report.total.inter_node_bytes, 2 * 440);
  EXPECT_DOUBLE_EQ(report.total.max_rank_load, 16);
  EXPECT_NEAR(report.total.seconds, 32.0, 1e-9);
  EXPECT_DOUBLE_EQ(bytes_per_element("fp8"), 1);
  EXPECT_EQ(error_field([] { bytes_per_element("int4"); }), "--dtype");
}

TEST(ExpertPlacementTopology, AcceptsTheThreeForms) {
  const RankTopology simple = RankTopology::from_json({{"ranks", 6}, {"ranks_per_node", 4}}, "t");
  EXPECT_EQ(simple.node_of_rank, (std::vector<int>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(simple.nodes(), 2);
  EXPECT_DOUBLE_EQ(simple.inter_node_gbps, 50);

  const RankTopology mapped = RankTopology::from_json(
      {{"node_of_rank", {7, 3, 7, 3}}, {"intra_node_gbps", 400}, {"inter_node_gbps", 25}}, "t");
  EXPECT_EQ(mapped.node_of_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(mapped.intra_node_gbps, 400);
  EXPECT_DOUBLE_EQ(mapped.inter_node_gbps, 25);
  EXPECT_EQ(mapped.ranks_on_node(1), (std::vector<int>{1, 3}));

  const RankTopology listed = RankTopology::from_json(
      json::parse(R"({"nodes": [{"name": "b", "ranks": [2, 3]}, [1, 0]]})"), "t");
  EXPECT_EQ(listed.node_of_rank, (std::vector<int>{0, 0, 1, 1}));

  const RankTopology shipped = RankTopology::load(repo_file("configs/topology/two-nodes-4x2.json"));
  EXPECT_EQ(shipped.ranks(), 8);
  EXPECT_EQ(shipped.nodes(), 2);
  EXPECT_EQ(RankTopology::load(repo_file("configs/topology/four-nodes-8x4.json")).nodes(), 4);

  // EP groups of a larger world and the cluster-spec form.
  const RankTopology world = RankTopology::uniform(16, 8, 200, 50);
  EXPECT_EQ(world.group(8, 8).node_of_rank, std::vector<int>(8, 0));
  EXPECT_TRUE(world.group(0, 4).same_partition(world.group(4, 4)));
  EXPECT_FALSE(RankTopology::uniform(8, 4, 1, 1).same_partition(world.group(0, 8)));
  std::string note;
  EXPECT_EQ(first_ep_group(RankTopology::uniform(8, 3, 200, 50), 4, &note).node_of_rank,
            (std::vector<int>{0, 0, 0, 1}));
  EXPECT_NE(note.find("EP group 1 spans nodes differently"), std::string::npos) << note;
  note.clear();
  EXPECT_EQ(first_ep_group(world, 8, &note).nodes(), 1);
  EXPECT_EQ(note, "");
  EXPECT_EQ(error_field([&] { first_ep_group(world, 3, nullptr); }), "--ep");
  const ClusterSpec h800 = ClusterSpec::load(repo_file("configs/clusters/h800-ib.json"));
  // A cluster's scale-up domains are the nodes (what `trex plan experts --cluster` builds).
  const RankTopology from_cluster =
      RankTopology::uniform(32, static_cast<int>(h800.topology.scale_up_domain),
                            h800.topology.scale_up_gbps, h800.topology.scale_out_gbps);
  EXPECT_EQ(from_cluster.nodes(), 4);
  EXPECT_DOUBLE_EQ(from_cluster.inter_node_gbps, h800.topology.scale_out_gbps);
}

TEST(ExpertPlacementTopology, BadFilesNameTheField) {
  auto topo = [](const char* text) {
    return [text] { RankTopology::from_json(json::parse(text), "topo.json"); };
  };
  EXPECT_EQ(error_field(topo(R"({"name": "x"})")), "ranks");
  EXPECT_EQ(error_field(topo(R"({"ranks": 8})")), "ranks_per_node");
  EXPECT_EQ(error_field(topo(R"({"ranks": 8, "ranks_per_node": 0})")), "ranks_per_node");
  EXPECT_EQ(error_field(topo(R"({"ranks": 8, "ranks_per_node": 4, "nodes": [[0]]})")), "nodes");
  EXPECT_EQ(error_field(topo(R"({"node_of_rank": [0, -1]})")), "node_of_rank[1]");
  EXPECT_EQ(error_field(topo(R"({"nodes": [[0, 1], [1, 2]]})")), "nodes[1][0]");
  EXPECT_EQ(error_field(topo(R"({"nodes": [[0, 1], [3]]})")), "nodes");
  EXPECT_EQ(error_field(topo(R"({"nodes": [{"ranks": [0], "host": "a"}]})")), "nodes[0].host");
  EXPECT_EQ(error_field(topo(R"({"nodes": [{"name": "a"}]})")), "nodes[0].ranks");
  EXPECT_EQ(error_field(topo(R"({"ranks": 4, "ranks_per_node": 2, "inter_node_gbps": -5})")),
            "inter_node_gbps");
  EXPECT_EQ(error_field(topo(R"({"ranks": 4, "ranks_per_node": 2, "inter_node_gbs": 5})")),
            "inter_node_gbs");

  test::TempDir dir;
  write_file_atomic(dir.file("bad.json"), "{\"ranks\": 4,");
  try {
    RankTopology::load(dir.file("bad.json"));
    FAIL() << "invalid JSON accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.file_name(), dir.file("bad.json"));
  }
  write_file_atomic(dir.file("typo.json"),
                    "{\n  \"ranks\": 4,\n  \"ranks_per_node\": 2,\n  \"inter_node_gbs\": 5\n}\n");
  try {
    RankTopology::load(dir.file("typo.json"));
    FAIL() << "unknown key accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.line_number(), 4);
    EXPECT_EQ(e.field_name(), "inter_node_gbs");
    EXPECT_NE(std::string(e.what()).find("did you mean 'inter_node_gbps'?"), std::string::npos)
        << e.what();
  }
  try {
    RankTopology::from_json(json::parse(R"({"nodes": [[0, 0]]})"), "topo.json");
    FAIL() << "duplicate rank accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.file_name(), "topo.json");
    EXPECT_NE(std::string(e.what()).find("nodes[0][1]"), std::string::npos) << e.what();
  }
}

TEST(ExpertPlacementLoad, MatrixAndTotalsFormsAndErrors) {
  const ExpertLoad matrix =
      ExpertLoad::from_json(json::parse(R"({"layers": [[[1, 2], [3, 4]]]})"), "l", 2);
  EXPECT_EQ(matrix.experts(), 2);
  EXPECT_EQ(matrix.layers[0][1][0], 3);
  const ExpertLoad totals =
      ExpertLoad::from_json(json::parse(R"({"layers": [[8, 4], [[1, 1], [1, 1]]]})"), "l", 2);
  EXPECT_EQ(totals.layers[0], (Matrix{{4, 2}, {4, 2}}));
  EXPECT_EQ(totals.num_layers(), 2);

  // Per-rank counters as the model reports them ([rank][layer][expert]).
  const ExpertLoad gathered = expert_load_from_rank_counts({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}});
  EXPECT_EQ(gathered.layers[1], (Matrix{{3, 4}, {7, 8}}));
  EXPECT_EQ(gathered.source_ranks(), 2);
  EXPECT_EQ(error_field([] {
              expert_load_from_rank_counts({{{1, 2}}, {{1, 2, 3}}});
            }),
            "expert_load");
  EXPECT_EQ(error_field([] {
              expert_load_from_rank_counts({{{1, 2}}, {{1, 2}, {1, 2}}});
            }),
            "expert_load");

  auto load = [](const char* text, int ranks) {
    return [text, ranks] { ExpertLoad::from_json(json::parse(text), "load.json", ranks); };
  };
  EXPECT_EQ(error_field(load(R"({"profile": []})", 2)), "profile");
  EXPECT_EQ(error_field(load(R"({"name": "x"})", 2)), "layers");
  EXPECT_EQ(error_field(load(R"({"layers": [[[1, 2]]]})", 2)), "layers[0]");
  EXPECT_EQ(error_field(load(R"({"layers": [[[1, 2], [3]]]})", 2)), "layers[0][1]");
  EXPECT_EQ(error_field(load(R"({"layers": [[1, 2], [[1, 2, 3], [1, 2, 3]]]})", 2)),
            "layers[1][0]");
  EXPECT_EQ(error_field(load(R"({"layers": [[1, 2], [[1, 2], [1, -2]]]})", 2)), "layers[1][1][1]");
  EXPECT_EQ(error_field(load(R"({"layers": [[1, "a"]]})", 2)), "layers[0][1]");
  EXPECT_EQ(error_field(load(R"({"layers": [[[1, 2], 3]]})", 2)), "layers[0][1]");
}

TEST(ExpertPlacementMap, LoaderAndCheckForTheTrainer) {
  test::TempDir dir;
  write_file_atomic(dir.file("map.json"), R"({"ep": 2, "layers": [[1, 0, 0, 1], [0, 1, 1, 0]]})");
  const ExpertPlacement map = load_expert_placement(dir.file("map.json"));
  EXPECT_EQ(map.ranks, 2);
  EXPECT_EQ(map.layers[1], (std::vector<int>{0, 1, 1, 0}));
  EXPECT_NO_THROW(check_expert_placement(map, 2, 4, 2, "map.json"));
  EXPECT_EQ(error_field([&] { check_expert_placement(map, 3, 4, 2, "m"); }), "layers");
  EXPECT_EQ(error_field([&] { check_expert_placement(map, 2, 6, 2, "m"); }), "layers[0]");
  EXPECT_EQ(error_field([&] { check_expert_placement(map, 2, 4, 4, "m"); }), "ep");

  ExpertPlacement unbalanced = map;
  unbalanced.layers[1] = {0, 0, 0, 1};
  EXPECT_EQ(error_field([&] { check_expert_placement(unbalanced, 2, 4, 2, "m"); }), "layers[1]");

  auto parse = [](const char* text) {
    return [text] { expert_placement_from_json(json::parse(text), "map.json"); };
  };
  EXPECT_EQ(error_field(parse(R"({"ep": 2, "layers": [[0, 2]]})")), "layers[0][1]");
  EXPECT_EQ(error_field(parse(R"({"layers": [[0, 1], [0]]})")), "layers[1]");
  EXPECT_EQ(error_field(parse(R"({"layers": [[0, 1.5]]})")), "layers[0][1]");
  EXPECT_EQ(error_field(parse(R"({"layers": [[0, 1]], "experts": 3})")), "experts");
  EXPECT_EQ(error_field(parse(R"({"ep": 0, "layers": [[0]]})")), "ep");

  // Round trip through the writer.
  const ExpertPlacement again = expert_placement_from_json(expert_placement_json(map), "x");
  EXPECT_EQ(again.layers, map.layers);
  EXPECT_EQ(again.ranks, map.ranks);
  EXPECT_EQ(contiguous_owners(8, 4), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
}

// Each rank's tokens go only to two experts of its own, scattered over the
// expert ids: the optimum keeps every token on its rank.
TEST(ExpertPlacementPlace, SeparableLocalityReachesZeroTraffic) {
  const RankTopology topology = RankTopology::uniform(4, 2, 200, 50);
  // Rank r routes to order[2r] and order[2r+1]; the contiguous map puts most
  // of them on the other node.
  const std::vector<int> order = {5, 0, 7, 2, 1, 6, 3, 4};
  Matrix tokens(4, std::vector<double>(8, 0.0));
  for (int r = 0; r < 4; ++r) {
    tokens[r][order[2 * r]] = 100 + 3 * r;
    tokens[r][order[2 * r + 1]] = 98 - 2 * r;
  }
  const LayerPlacement p = place_layer(tokens, topology, {});
  EXPECT_TRUE(p.balance_met);
  EXPECT_DOUBLE_EQ(p.inter_node_lower_bound, 0);
  EXPECT_EQ(experts_per_rank(p.owners, 4), std::vector<int>(4, 2));
  const LayerTraffic t = layer_traffic(tokens, p.owners, topology, {});
  EXPECT_DOUBLE_EQ(t.inter_node, 0);
  EXPECT_DOUBLE_EQ(t.intra_node, 0);
  EXPECT_DOUBLE_EQ(t.local, t.assignments);
  const LayerTraffic before = layer_traffic(tokens, contiguous_owners(8, 4), topology, {});
  EXPECT_GT(before.inter_node, 0);
}

// A hot node's experts cannot all stay home under the load cap: the cap
// binds and the placement trades the least cross-node traffic for balance.
TEST(ExpertPlacementPlace, LoadCapBindsAndIsRespected) {
  const RankTopology topology = RankTopology::uniform(4, 2, 200, 50);
  // Node 0 sends 90 tokens to each of experts 0..3, node 1 sends 10 to each of
  // experts 4..7; per rank 45 / 5.
  Matrix tokens(4, std::vector<double>(8, 0.0));
  for (int e = 0; e < 8; ++e)
    for (int r = 0; r < 4; ++r)
      if ((e < 4) == (r < 2)) tokens[r][e] = e < 4 ? 45 : 5;
  PlacementOptions options;
  options.tolerance = 1e9;  // no cap: all traffic stays on its node
  const LayerPlacement free = place_layer(tokens, topology, options);
  EXPECT_DOUBLE_EQ(layer_traffic(tokens, free.owners, topology, {}).inter_node, 0);
  EXPECT_DOUBLE_EQ(layer_traffic(tokens, free.owners, topology, {}).max_rank_load, 180);

  options.tolerance = 0.1;  // mean 100 -> cap 110: each rank one hot + one cold expert
  const LayerPlacement capped = place_layer(tokens, topology, options);
  const LayerTraffic t = layer_traffic(tokens, capped.owners, topology, {});
  EXPECT_TRUE(capped.balance_met);
  EXPECT_DOUBLE_EQ(capped.load_cap, 110);
  EXPECT_DOUBLE_EQ(t.max_rank_load, 100);
  EXPECT_EQ(experts_per_rank(capped.owners, 4), std::vector<int>(4, 2));
  // Two hot experts (90 tokens each) must leave node 0 and two cold ones
  // (10 each) leave node 1: 200 cross-node pairs is the optimum under the cap.
  EXPECT_DOUBLE_EQ(t.inter_node, 200);
  EXPECT_DOUBLE_EQ(capped.inter_node_lower_bound, 0);
}

TEST(ExpertPlacementPlace, InfeasibleToleranceMinimisesTheMaxLoad) {
  const RankTopology topology = RankTopology::uniform(4, 2, 200, 50);
  Matrix tokens(4, std::vector<double>(8, 0.25));
  for (int r = 0; r < 4; ++r) tokens[r][5] = 25;  // expert 5: 100 tokens, the others 1
  const LayerPlacement p = place_layer(tokens, topology, {});
  EXPECT_FALSE(p.balance_met);
  EXPECT_TRUE(p.balance_infeasible);
  EXPECT_DOUBLE_EQ(p.max_load_lower_bound, 101);  // the hot expert plus one light one
  EXPECT_DOUBLE_EQ(layer_traffic(tokens, p.owners, topology, {}).max_rank_load, 101);
  EXPECT_EQ(experts_per_rank(p.owners, 4), std::vector<int>(4, 2));
}

Matrix random_tokens(Rng& rng, const RankTopology& topology, int experts) {
  // Sources prefer a random node-specific subset, with Zipf-like magnitudes.
  Matrix tokens(topology.ranks(), std::vector<double>(experts));
  std::vector<int> favourite(experts);
  for (int e = 0; e < experts; ++e) favourite[e] = rng.uniform_int(0, topology.nodes() - 1);
  for (int s = 0; s < topology.ranks(); ++s)
    for (int e = 0; e < experts; ++e) {
      const double base = 100.0 / (1 + rng.uniform_int(0, 9));
      const double boost = favourite[e] == topology.node_of_rank[s] ? rng.uniform(1, 6) : 1;
      tokens[s][e] = std::round(base * boost * rng.uniform());
    }
  return tokens;
}

// Every balanced map of a tiny instance, to compare with the exact optimum.
void for_each_balanced_map(int experts, int ranks,
                           const std::function<void(std::vector<int>&)>& fn) {
  std::vector<int> owners(experts, -1), count(ranks, 0);
  const int per_rank = experts / ranks;
  std::function<void(int)> rec = [&](int e) {
    if (e == experts) return fn(owners);
    for (int r = 0; r < ranks; ++r) {
      if (count[r] == per_rank) continue;
      owners[e] = r, count[r] += 1;
      rec(e + 1);
      count[r] -= 1;
    }
  };
  rec(0);
}

TEST(ExpertPlacementPlace, MatchesBruteForceOnTinyInstances) {
  // 4 ranks on 2 nodes (3 + 1) or 3 nodes (2 + 1 + 1; augmenting paths of
  // several hops), 8 experts: 2520 balanced maps each.
  const RankTopology two_nodes = RankTopology::from_json({{"node_of_rank", {0, 0, 1, 0}}}, "t");
  const RankTopology three_nodes = RankTopology::from_json({{"node_of_rank", {0, 1, 2, 0}}}, "t");
  int optimal_under_cap = 0;
  const int instances = 60;
  for (int i = 0; i < instances; ++i) {
    const RankTopology& topology = i % 2 ? three_nodes : two_nodes;
    Rng rng(100 + i);
    const Matrix tokens = random_tokens(rng, topology, 8);
    double best_free = 1e300, best_capped = 1e300;
    PlacementOptions capped;
    capped.tolerance = 0.15;
    const LayerPlacement p = place_layer(tokens, topology, capped);
    for_each_balanced_map(8, 4, [&](std::vector<int>& owners) {
      const LayerTraffic t = layer_traffic(tokens, owners, topology, {});
      best_free = std::min(best_free, t.inter_node);
      if (t.max_rank_load <= p.load_cap + 1e-9) best_capped = std::min(best_capped, t.inter_node);
    });
    // The lower bound is the exact unconstrained optimum, and it is reached
    // without a cap.
    EXPECT_NEAR(p.inter_node_lower_bound, best_free, 1e-9) << "instance " << i;
    PlacementOptions free;
    free.tolerance = 1e9;
    const LayerPlacement unconstrained = place_layer(tokens, topology, free);
    EXPECT_NEAR(layer_traffic(tokens, unconstrained.owners, topology, {}).inter_node, best_free,
                1e-9)
        << "instance " << i;
    const LayerTraffic t = layer_traffic(tokens, p.owners, topology, {});
    EXPECT_LE(t.max_rank_load, p.load_cap + 1e-9);
    EXPECT_GE(t.inter_node, best_capped - 1e-9);
    optimal_under_cap += t.inter_node <= best_capped + 1e-9 ? 1 : 0;
  }
  std::printf("capped optimum found on %d/%d tiny instances\n", optimal_under_cap, instances);
  EXPECT_GE(optimal_under_cap, instances * 8 / 10);
}

TEST(ExpertPlacementPlace, NeverWorseThanContiguousOnRandomInstances) {
  for (int i = 0; i < 40; ++i) {
    Rng rng(1000 + i);
    const int nodes = rng.uniform_int(2, 4), per_node = rng.uniform_int(1, 4);
    const int per_rank = rng.uniform_int(1, 4);
    const RankTopology topology = RankTopology::uniform(nodes * per_node, per_node, 200, 50);
    const int ranks = topology.ranks(), experts = ranks * per_rank;
    const Matrix tokens = random_tokens(rng, topology, experts);
    const LayerTraffic before =
        layer_traffic(tokens, contiguous_owners(experts, ranks), topology, {});
    for (double tolerance : {1e9, 0.1}) {
      PlacementOptions options;
      options.tolerance = tolerance;
      const LayerPlacement p = place_layer(tokens, topology, options);
      const LayerTraffic after = layer_traffic(tokens, p.owners, topology, {});
      ASSERT_EQ(experts_per_rank(p.owners, ranks), std::vector<int>(ranks, per_rank));
      EXPECT_LE(after.max_rank_load, p.load_cap + 1e-9);
      EXPECT_GE(after.inter_node, p.inter_node_lower_bound - 1e-9);
      if (before.max_rank_load <= p.load_cap + 1e-9) {
        EXPECT_LE(after.inter_node, before.inter_node + 1e-9) << "instance " << i;
        if (after.inter_node >= before.inter_node - 1e-9) {
          EXPECT_LE(after.intra_node, before.intra_node + 1e-9) << "instance " << i;
        }
      }
    }
  }
}

TEST(ExpertPlacementExample, ShippedSkewedProfileIsReproducibleAndPlacedWell) {
  const std::string path = repo_file("configs/placement/skewed-load.json");
  const RankTopology topology =
      RankTopology::load(repo_file("configs/topology/two-nodes-4x2.json"));
  const ExpertLoad shipped = ExpertLoad::load(path, topology.ranks());
  const json generator = json::parse(read_file(path))["generator"];
  SkewedLoadSpec spec;
  spec.experts = generator["experts"];
  spec.layers = generator["layers"];
  spec.top_k = generator["top_k"];
  spec.tokens_per_rank = generator["tokens_per_rank"];
  spec.zipf = generator["zipf"];
  spec.locality = generator["locality"];
  spec.rank_noise = generator["rank_noise"];
  spec.seed = generator["seed"];
  EXPECT_EQ(generate_skewed_load(spec, topology).layers, shipped.layers);
  spec.seed += 1;
  EXPECT_NE(generate_skewed_load(spec, topology).layers, shipped.layers);

  const PlacementResult result = place_experts(shipped, topology, {});
  EXPECT_NO_THROW(check_expert_placement(result.placement, shipped.num_layers(), shipped.experts(),
                                         topology.ranks(), "placed"));
  const TrafficReport before = traffic_report(
      shipped, contiguous_placement(shipped.num_layers(), shipped.experts(), topology.ranks()),
      topology, {});
  const TrafficReport after = traffic_report(shipped, result.placement, topology, {});
  double bound = 0;
  for (const LayerPlacement& l : result.layers) {
    EXPECT_TRUE(l.balance_met);
    bound += l.inter_node_lower_bound;
  }
  EXPECT_LE(after.worst_layer_imbalance, 1.1 + 1e-9);
  // Measured: -70.3% cross-node bytes, 1.4% above the unconstrained optimum.
  EXPECT_LT(after.total.inter_node, 0.5 * before.total.inter_node);
  EXPECT_LT(after.total.inter_node, 1.05 * bound);
  EXPECT_LT(after.total.seconds, before.total.seconds);

  // The CLI's report: the same figures, bytes = pairs x 7168 x 2 B x 2.
  const ExpertPlan plan = plan_expert_placement(shipped, topology, {}, "bf16", 7168, path);
  EXPECT_DOUBLE_EQ(plan.after.total.inter_node_bytes, after.total.inter_node * 7168 * 2 * 2);
  EXPECT_NEAR(plan.inter_node_bytes_lower_bound, bound * 7168 * 2 * 2, 1e-6 * bound);
  const std::string text = format_expert_plan(plan, true);
  EXPECT_NE(text.find("met in 4/4 layers"), std::string::npos) << text;
  EXPECT_NE(text.find("lower bound"), std::string::npos) << text;
  EXPECT_EQ(expert_plan_json(plan)["layers"], json(result.placement.layers));
  EXPECT_EQ(error_field([&] { plan_expert_placement(shipped, topology, {}, "bf16", 0, path); }),
            "--hidden");
}

TEST(ExpertPlacementCli, PlansWritesALoadableMapAndReportsBadFiles) {
  test::TempDir dir;
  const std::string topology = repo_file("configs/topology/two-nodes-4x2.json");
  const test::CliRun run = test::run_trex("plan experts --topology " + topology + " --load " +
                                          repo_file("configs/placement/skewed-load.json") +
                                          " --out " + dir.file("map.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("contiguous"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("lower bound"), std::string::npos) << run.output;
  const ExpertPlacement map = load_expert_placement(dir.file("map.json"));
  EXPECT_NO_THROW(check_expert_placement(map, 4, 64, 8, dir.file("map.json")));

  // Generate + place in one go, on an EP group of half the topology.
  const test::CliRun generated =
      test::run_trex("plan experts --topology " + topology + " --ep 4 --generate-load " +
                     dir.file("gen.json") + " --experts 16 --layers 2 --per-layer");
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  EXPECT_EQ(ExpertLoad::load(dir.file("gen.json"), 4).experts(), 16);

  write_file_atomic(dir.file("bad-load.json"), R"({"layers": [[[1, 2], [3, 4]]]})");
  const test::CliRun bad = test::run_trex("plan experts --topology " + topology + " --load " +
                                          dir.file("bad-load.json"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("bad-load.json"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("layers[0]"), std::string::npos) << bad.output;
  const test::CliRun bad_ep = test::run_trex("plan experts --topology " + topology +
                                             " --ep 3 --load " + dir.file("bad-load.json"));
  EXPECT_EQ(bad_ep.exit_code, 1);
  EXPECT_NE(bad_ep.output.find("--ep"), std::string::npos) << bad_ep.output;
}

}  // namespace
}  // namespace trex::parallel
