// `trex bench peak` as a user runs it (tiny sizes: correctness of the report, not speed).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_run.hpp"

namespace {

TEST(BenchCli, PeakReportsEveryShapeAndTheBest) {
  for (const char* dtype : {"f32", "bf16"}) {
    const auto r = trex::test::run_trex(std::string("bench peak --dtype ") + dtype +
                                        " --sizes 64,96 --repeats 2 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    ASSERT_EQ(j["gemms"].size(), 2u);
    double best = 0;
    for (const auto& g : j["gemms"]) {
      const double m = g["m"], s = g["seconds"], gf = g["gflops"];
      EXPECT_GT(s, 0.0);
      EXPECT_NEAR(gf, 2.0 * m * m * m / s / 1e9, 1e-6 * gf);
      best = std::max(best, gf);
    }
    EXPECT_DOUBLE_EQ(j["peak_gflops"].get<double>(), best);
    EXPECT_EQ(j["dtype"], dtype);
  }
}

TEST(BenchCli, BadDtypeIsNamed) {
  const auto r = trex::test::run_trex("bench peak --dtype fp8 --sizes 64");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--dtype"), std::string::npos) << r.output;
}

}  // namespace
