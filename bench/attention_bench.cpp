// Micro-benchmarks of the attention block alone (forward, backward), float, on
// the attention shapes of configs/models/bench-cpu.json at sequence 1024:
// argument 0 / 1 / 2 = SWA / CSA / HCA layer. The times include the block's
// projection GEMMs, compressor and indexer; `trex bench step --profile` splits
// the core (attn.*) from those. The weights are the attention tests' fixture.
#include <benchmark/benchmark.h>

#include <vector>

#include "model/attention_fixture.hpp"
#include "trex/model/attention.hpp"
#include "trex/model/config.hpp"

namespace {

using namespace trex::model;

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  const std::vector<double> v = trex::testing::random_vector(static_cast<size_t>(n), seed);
  return {v.begin(), v.end()};
}

struct Block {
  static constexpr int64_t kSeq = 1024;
  trex::testing::AttentionParams<float> params;
  AttentionWeights<float> w;
  std::vector<float> a, dout, out, da;
  AttentionCache<float> cache;

  explicit Block(int64_t layer)
      : params(AttentionDims::from_config(
                   ModelConfig::load(TREX_SOURCE_DIR "/configs/models/bench-cpu.json"), layer),
               7),
        w(params.weights()),
        a(random_floats(kSeq * params.dims.hidden, 99)),
        dout(random_floats(kSeq * params.dims.hidden, 98)),
        out(a.size()),
        da(a.size()) {}
  void forward() {
    attention_forward(params.dims, w, SeqShape{1, kSeq}, a.data(), cache, out.data());
  }
  void backward() {
    AttentionGrads<float> grads;  // input gradient only
    attention_backward(params.dims, w, cache, dout.data(), grads, da.data());
  }
};

void BM_AttentionForward(benchmark::State& state) {
  Block block(state.range(0));
  for (auto _ : state) {
    block.forward();
    benchmark::DoNotOptimize(block.out.data());
  }
}
BENCHMARK(BM_AttentionForward)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

void BM_AttentionBackward(benchmark::State& state) {
  Block block(state.range(0));
  block.forward();
  for (auto _ : state) {
    block.backward();
    benchmark::DoNotOptimize(block.da.data());
  }
}
BENCHMARK(BM_AttentionBackward)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

}  // namespace
