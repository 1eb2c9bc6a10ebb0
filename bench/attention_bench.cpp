// Micro-benchmarks of the attention block alone (forward, backward), float, on
// the attention shapes of configs/models/bench-cpu.json at sequence 1024:
// argument 0 / 1 / 2 = SWA / CSA / HCA layer. The times include the block's
// projection GEMMs, compressor and indexer; `trex bench step --profile` splits
// the core (attn.*) from those.
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "trex/core/rng.hpp"
#include "trex/model/attention.hpp"
#include "trex/model/config.hpp"

namespace {

using namespace trex::model;

ModelConfig bench_cpu_attention() {
  ModelConfig c;
  c.hidden_size = 1024;
  c.num_attention_heads = 8;
  c.head_dim = 256;
  c.qk_rope_head_dim = 64;
  c.q_lora_rank = 384;
  c.o_groups = 2;
  c.o_lora_rank = 256;
  c.sliding_window = 128;
  c.compress_ratios = {0, 4, 128};
  c.num_hidden_layers = 3;
  c.rope_theta = 10000.0;
  c.compress_rope_theta = 160000.0;
  c.rope_scaling = {true, 16.0, 65536, 32.0, 1.0};
  c.index_n_heads = 8;
  c.index_head_dim = 64;
  c.index_topk = 64;
  c.rms_norm_eps = 1e-6;
  return c;
}

std::vector<float> uniform(int64_t n, uint64_t seed, double scale) {
  trex::Rng rng(seed, {0});
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>((rng.uniform() * 2.0 - 1.0) * scale);
  return v;
}

struct Block {
  AttentionDims dims;
  std::map<std::string, std::vector<float>> t;
  AttentionWeights<float> w;
  static constexpr int64_t kSeq = 1024;
  std::vector<float> a, dout, out, da;
  AttentionCache<float> cache;

  explicit Block(int64_t layer) : dims(AttentionDims::from_config(bench_cpu_attention(), layer)) {
    uint64_t seed = 7;
    const int64_t hd = dims.hidden, c = dims.head_dim, H = dims.heads, dc = dims.q_lora;
    auto lin = [&](const std::string& name, int64_t rows, int64_t cols) {
      t[name] = uniform(rows * cols, seed++, std::sqrt(3.0 / static_cast<double>(cols)));
    };
    auto norm = [&](const std::string& name, int64_t n) {
      t[name] = uniform(n, seed++, 0.2);
      for (auto& v : t[name]) v += 1.0f;
    };
    lin("wq_a", dc, hd);
    norm("q_norm", dc);
    lin("wq_b", H * c, dc);
    lin("wkv", c, hd);
    norm("kv_norm", c);
    lin("wo_a", dims.o_groups * dims.o_lora, H * c / dims.o_groups);
    lin("wo_b", hd, dims.o_groups * dims.o_lora);
    t["attn_sink"] = uniform(H, seed++, 1.0);
    if (dims.ratio > 0) {
      const int64_t coff = dims.ratio == 4 ? 2 : 1;
      lin("comp.wkv", coff * c, hd);
      lin("comp.wgate", coff * c, hd);
      t["comp.ape"] = uniform(dims.ratio * coff * c, seed++, 0.5);
      norm("comp.norm", c);
    }
    if (dims.ratio == 4) {
      lin("idx.wq_b", dims.index_heads * dims.index_head_dim, dc);
      lin("idx.weights_proj", dims.index_heads, hd);
      lin("idx.comp.wkv", 2 * dims.index_head_dim, hd);
      lin("idx.comp.wgate", 2 * dims.index_head_dim, hd);
      t["idx.comp.ape"] = uniform(4 * 2 * dims.index_head_dim, seed++, 0.5);
      norm("idx.comp.norm", dims.index_head_dim);
    }
    auto p = [&](const std::string& name) -> const float* {
      auto it = t.find(name);
      return it == t.end() ? nullptr : it->second.data();
    };
    w.wq_a = p("wq_a");
    w.q_norm = p("q_norm");
    w.wq_b = p("wq_b");
    w.wkv = p("wkv");
    w.kv_norm = p("kv_norm");
    w.wo_a = p("wo_a");
    w.wo_b = p("wo_b");
    w.attn_sink = p("attn_sink");
    w.compressor = {p("comp.wkv"), p("comp.wgate"), p("comp.ape"), p("comp.norm")};
    w.indexer.wq_b = p("idx.wq_b");
    w.indexer.weights_proj = p("idx.weights_proj");
    w.indexer.compressor = {p("idx.comp.wkv"), p("idx.comp.wgate"), p("idx.comp.ape"),
                            p("idx.comp.norm")};
    a = uniform(kSeq * hd, 99, 1.0);
    dout = uniform(kSeq * hd, 98, 1.0);
    out.resize(a.size());
    da.resize(a.size());
  }
  void forward() { attention_forward(dims, w, SeqShape{1, kSeq}, a.data(), cache, out.data()); }
  void backward() {
    AttentionGrads<float> grads;  // input gradient only
    attention_backward(dims, w, cache, dout.data(), grads, da.data());
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
