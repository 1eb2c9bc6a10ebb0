// `trex bench peak`: this machine's large-GEMM throughput through the engine's
// own GEMM path (kernels::gemm, oneDNN; bf16 includes the operand rounding the
// engine does), the denominator of every MFU T-Rex prints.
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "trex/cli/commands.hpp"
#include "trex/core/error.hpp"
#include "trex/kernels/cpu/peak.hpp"

namespace trex::cli {
namespace {

struct PeakOptions {
  std::string dtype = "bf16";
  std::vector<int64_t> sizes = {1024, 2048, 3072, 4096};
  int repeats = 5;
  bool json = false;
};

int run_peak(const PeakOptions& o) {
  if (o.dtype != "bf16" && o.dtype != "f32")
    throw Error("--dtype must be bf16 or f32").field("dtype");
  const kernels::PeakMeasurement measured =
      kernels::measure_peak(o.dtype == "bf16", o.sizes, o.repeats);
  const double best = measured.peak_gflops;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& m : measured.gemms) {
    rows.push_back(
        {{"m", m.m}, {"n", m.n}, {"k", m.k}, {"seconds", m.seconds}, {"gflops", m.gflops}});
    if (!o.json)
      std::printf("%5lld x %5lld x %5lld  %9.3f ms  %8.1f GFLOP/s\n", static_cast<long long>(m.m),
                  static_cast<long long>(m.n), static_cast<long long>(m.k), m.seconds * 1e3,
                  m.gflops);
  }
  if (o.json) {
    std::cout << nlohmann::json{{"dtype", o.dtype}, {"peak_gflops", best}, {"gemms", rows}}.dump()
              << "\n";
  } else {
    std::printf("peak (%s, best size, median of %d repeats): %.1f GFLOP/s\n", o.dtype.c_str(),
                o.repeats, best);
  }
  return 0;
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks of this machine and of the engine");
  bench->require_subcommand(1);
  auto options = std::make_shared<PeakOptions>();
  auto* peak = bench->add_subcommand(
      "peak", "Large-GEMM throughput through the engine's GEMM path (the MFU denominator)");
  peak->add_option("--dtype", options->dtype,
                   "bf16 (operands rounded to bf16, fp32 accumulation) or f32")
      ->capture_default_str();
  peak->add_option("--sizes", options->sizes, "Square GEMM sizes to time")
      ->delimiter(',')
      ->capture_default_str();
  peak->add_option("--repeats", options->repeats,
                   "Timed repeats per size (the median is kept; the best size is the peak)")
      ->capture_default_str();
  peak->add_flag("--json", options->json, "Print one JSON object instead of a table");
  peak->callback([options] {
    const int rc = run_peak(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace trex::cli
