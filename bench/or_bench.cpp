// Micro-benchmarks of the OR pipeline: MathProg translation, each solver, and
// one full build-and-verify per family. Prints times; asserts nothing.
#include <benchmark/benchmark.h>

#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"
#include "trex/or/synth/verify.hpp"

namespace {

using namespace trex::orlib;

std::string sample_model(const Family& family) {
  trex::Rng rng(1, {trex::hash_string(family.name())});
  GenOptions options;
  options.difficulty = Difficulty::medium;
  return family.generate(rng, options)->gmpl();
}

void BM_Translate(benchmark::State& state) {
  std::string text = sample_model(find_family("knapsack"));
  for (auto _ : state) benchmark::DoNotOptimize(LinearModel::from_mathprog(text).num_cols());
}
BENCHMARK(BM_Translate)->Unit(benchmark::kMillisecond);

void BM_SolveGlpk(benchmark::State& state) {
  std::string text = sample_model(find_family("knapsack"));
  for (auto _ : state) {
    LinearModel m = LinearModel::from_mathprog(text);
    benchmark::DoNotOptimize(m.solve_glpk().objective);
  }
}
BENCHMARK(BM_SolveGlpk)->Unit(benchmark::kMillisecond);

void BM_SolveCbc(benchmark::State& state) {
  std::string text = sample_model(find_family("knapsack"));
  LinearModel m = LinearModel::from_mathprog(text);
  for (auto _ : state) benchmark::DoNotOptimize(m.solve_cbc().objective);
}
BENCHMARK(BM_SolveCbc)->Unit(benchmark::kMillisecond);

// One verified instance per family (generate, render, translate, 2 solves, checks).
void BM_BuildAndVerify(benchmark::State& state) {
  const Family& family = *all_families()[static_cast<size_t>(state.range(0))];
  state.SetLabel(std::string(family.name()));
  SynthSettings settings;
  int64_t index = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(build_and_verify(family, index++, 0, settings).accepted);
}
BENCHMARK(BM_BuildAndVerify)
    ->DenseRange(0, static_cast<int>(all_families().size()) - 1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
