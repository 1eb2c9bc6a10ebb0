// Optimizer, schedule and clipping checks against hand-computed values and an
// independent naive (plain-loop, double) Muon written here from spec §6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/dtypes.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/model/config.hpp"
#include "trex/parallel/zero_partition.hpp"
#include "trex/train/optim/grad_clip.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/optim/schedule.hpp"

namespace {

using trex::model::OptimizerGroup;
using trex::model::ParamSpec;
using trex::model::ParamStore;
using Matrix = std::vector<std::vector<double>>;

ParamSpec spec(std::string name, std::vector<int64_t> shape, OptimizerGroup group) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.group = group;
  return s;
}

Matrix matmul(const Matrix& A, const Matrix& B) {
  Matrix C(A.size(), std::vector<double>(B[0].size(), 0.0));
  for (size_t i = 0; i < A.size(); ++i)
    for (size_t k = 0; k < B.size(); ++k)
      for (size_t j = 0; j < B[0].size(); ++j) C[i][j] += A[i][k] * B[k][j];
  return C;
}

Matrix transpose(const Matrix& A) {
  Matrix T(A[0].size(), std::vector<double>(A.size()));
  for (size_t i = 0; i < A.size(); ++i)
    for (size_t j = 0; j < A[0].size(); ++j) T[j][i] = A[i][j];
  return T;
}

// Spec §6 literally: M0 = M/‖M‖_F; M ← aM + b(MMᵀ)M + c(MMᵀ)²M, 8 + 2 iterations.
Matrix naive_hybrid_ns(Matrix M) {
  double norm2 = 0.0;
  for (auto& row : M)
    for (double x : row) norm2 += x * x;
  for (auto& row : M)
    for (double& x : row) x /= std::sqrt(norm2);
  for (int it = 0; it < 10; ++it) {
    const double a = it < 8 ? 3.4445 : 2.0, b = it < 8 ? -4.7750 : -1.5, c = it < 8 ? 2.0315 : 0.5;
    const Matrix G = matmul(M, transpose(M));
    const Matrix GM = matmul(G, M);
    const Matrix GGM = matmul(G, GM);
    for (size_t i = 0; i < M.size(); ++i)
      for (size_t j = 0; j < M[0].size(); ++j) M[i][j] = a * M[i][j] + b * GM[i][j] + c * GGM[i][j];
  }
  return M;
}

// One naive Muon step (μ 0.95, Nesterov, γ 0.18, λ) on W with momentum Mom.
void naive_muon_step(Matrix& W, Matrix& Mom, const Matrix& G, double lr, double wd) {
  Matrix nesterov = G;
  for (size_t i = 0; i < W.size(); ++i)
    for (size_t j = 0; j < W[0].size(); ++j) {
      Mom[i][j] = 0.95 * Mom[i][j] + G[i][j];
      nesterov[i][j] = 0.95 * Mom[i][j] + G[i][j];
    }
  const Matrix O = naive_hybrid_ns(nesterov);
  const double scale = std::sqrt(static_cast<double>(std::max(W.size(), W[0].size()))) * 0.18;
  for (size_t i = 0; i < W.size(); ++i)
    for (size_t j = 0; j < W[0].size(); ++j)
      W[i][j] = W[i][j] * (1.0 - lr * wd) - lr * scale * O[i][j];
}

Matrix reshape(const float* data, int64_t rows, int64_t cols) {
  Matrix M(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(cols)));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) M[i][j] = data[i * cols + j];
  return M;
}

void expect_matrix_near(const float* actual, const Matrix& expected, double tol,
                        const std::string& what) {
  const size_t cols = expected[0].size();
  for (size_t i = 0; i < expected.size(); ++i)
    for (size_t j = 0; j < cols; ++j)
      EXPECT_NEAR(actual[i * cols + j], expected[i][j], tol)
          << what << " [" << i << "," << j << "]";
}

TEST(TrainSchedule, WarmupThenCosineToFloor) {
  trex::train::LrSchedule s{1e-3, 1e-4, 10, 110};
  EXPECT_DOUBLE_EQ(trex::train::learning_rate(s, 1), 1e-4);
  EXPECT_DOUBLE_EQ(trex::train::learning_rate(s, 5), 5e-4);
  EXPECT_DOUBLE_EQ(trex::train::learning_rate(s, 10), 1e-3);
  // p = 25/100: 1e-4 + 9e-4 · ½(1 + cos π/4)
  EXPECT_NEAR(trex::train::learning_rate(s, 35), 0.0008681980515339464, 1e-15);
  EXPECT_NEAR(trex::train::learning_rate(s, 60), 5.5e-4, 1e-15);  // half way
  EXPECT_NEAR(trex::train::learning_rate(s, 110), 1e-4, 1e-15);
  EXPECT_NEAR(trex::train::learning_rate(s, 500), 1e-4, 1e-15);  // stays at the floor
  // Monotone decay after the peak.
  for (int64_t t = 11; t < 110; ++t)
    EXPECT_LT(trex::train::learning_rate(s, t + 1), trex::train::learning_rate(s, t));
  trex::train::LrSchedule no_warmup{2e-4, 2e-5, 0, 4};
  EXPECT_NEAR(trex::train::learning_rate(no_warmup, 2), 1.1e-4, 1e-15);
  EXPECT_THROW(trex::train::learning_rate(s, 0), trex::Error);
  EXPECT_THROW(trex::train::learning_rate({1e-4, 1e-3, 1, 2}, 1), trex::Error);
  EXPECT_THROW(trex::train::learning_rate({1e-3, 1e-4, 10, 5}, 1), trex::Error);
}

ParamStore<float> small_store() {
  return ParamStore<float>({spec("a", {2, 2}, OptimizerGroup::kMuon),
                            spec("b", {3}, OptimizerGroup::kAdamW),
                            spec("bias", {2}, OptimizerGroup::kNotTrained)});
}

TEST(TrainClip, GlobalNormOverTrainedTensorsOnly) {
  ParamStore<float> p = small_store();
  p.grads() = {3, 0, 0, 0, 0, 4, 0, 100, 100};  // trained part: norm 5
  EXPECT_DOUBLE_EQ(trex::train::global_grad_norm(p), 5.0);
  EXPECT_DOUBLE_EQ(trex::train::clip_grad_norm(p, 10.0), 5.0);
  EXPECT_EQ(p.grads()[0], 3.0f);  // below the limit: untouched
  EXPECT_DOUBLE_EQ(trex::train::clip_grad_norm(p, 1.0), 5.0);
  const std::vector<float> clipped = {0.6f, 0, 0, 0, 0, 0.8f, 0, 100, 100};
  for (size_t i = 0; i < clipped.size(); ++i) EXPECT_FLOAT_EQ(p.grads()[i], clipped[i]) << i;
  EXPECT_NEAR(trex::train::global_grad_norm(p), 1.0, 1e-6);
  p.grads()[5] = std::nanf("");
  EXPECT_TRUE(std::isnan(trex::train::clip_grad_norm(p, 1.0)));
  EXPECT_FLOAT_EQ(p.grads()[0], 0.6f);  // a non-finite norm leaves gradients alone
}

TEST(TrainAdamW, TwoStepsByHand) {
  ParamStore<float> p({spec("w", {1}, OptimizerGroup::kAdamW)});
  p.values() = {1.0f};
  trex::train::OptimizerOptions options;
  options.adamw.eps = 1e-8;
  trex::train::Optimizer opt(p, options);
  p.grads() = {0.5f};
  opt.step(p, 0.1);
  // m = 0.05, v = 0.0125, m̂ = 0.5, v̂ = 0.25: w = 1·(1 − 0.01) − 0.1·0.5/(0.5 + 1e-8)
  EXPECT_NEAR(p.values()[0], 0.890000002, 1e-7);
  EXPECT_NEAR(opt.first_moment()[0], 0.05, 1e-8);
  EXPECT_NEAR(opt.second_moment()[0], 0.0125, 1e-9);
  p.grads() = {-0.25f};
  opt.step(p, 0.1);
  // m = 0.02, v = 0.015, m̂ = 0.02/0.19, v̂ = 0.015/0.0975
  EXPECT_NEAR(opt.first_moment()[0], 0.02, 1e-8);
  EXPECT_NEAR(opt.second_moment()[0], 0.015, 1e-9);
  EXPECT_NEAR(p.values()[0], 0.8542630578558273, 1e-6);
  EXPECT_EQ(opt.step_count(), 2);
}

TEST(TrainMuon, DiagonalMatrixFollowsTheScalarPolynomial) {
  // For diag(3, 4) every iterate stays diagonal: s ← a s + b s³ + c s⁵ from s = (0.6, 0.8).
  double s[2] = {0.6, 0.8};
  for (int it = 0; it < 10; ++it) {
    const double a = it < 8 ? 3.4445 : 2.0, b = it < 8 ? -4.7750 : -1.5, c = it < 8 ? 2.0315 : 0.5;
    for (double& x : s) x = a * x + b * x * x * x + c * std::pow(x, 5);
  }
  const double X[4] = {3, 0, 0, 4};
  double O[4];
  trex::train::hybrid_newton_schulz<double>(X, O, 2, 2, {});
  EXPECT_NEAR(O[0], s[0], 1e-12);
  EXPECT_NEAR(O[3], s[1], 1e-12);
  EXPECT_EQ(O[1], 0.0);
  EXPECT_EQ(O[2], 0.0);
  EXPECT_NEAR(s[0], 1.0, 0.1);  // orthogonalised: singular values near 1
  EXPECT_NEAR(s[1], 1.0, 0.1);
  const double zero[4] = {0, 0, 0, 0};
  trex::train::hybrid_newton_schulz<double>(zero, O, 2, 2, {});
  for (double x : O) EXPECT_EQ(x, 0.0);
}

TEST(TrainMuon, NewtonSchulzMatchesNaiveOnWideAndTall) {
  const Matrix tall = {{0.3, -1.2}, {0.7, 0.4}, {-0.5, 0.9}};  // 3x2: runs on the transpose
  const Matrix wide = transpose(tall);
  for (const Matrix& M : {tall, wide}) {
    const int64_t rows = static_cast<int64_t>(M.size()), cols = static_cast<int64_t>(M[0].size());
    std::vector<double> flat;
    for (auto& row : M) flat.insert(flat.end(), row.begin(), row.end());
    std::vector<double> out(flat.size());
    trex::train::hybrid_newton_schulz<double>(flat.data(), out.data(), rows, cols, {});
    const Matrix expected = naive_hybrid_ns(M);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) EXPECT_NEAR(out[i * cols + j], expected[i][j], 1e-12);
    // OᵀO ≈ I for the smaller side.
    Matrix O = reshape(std::vector<float>(out.begin(), out.end()).data(), rows, cols);
    const Matrix gram = rows > cols ? matmul(transpose(O), O) : matmul(O, transpose(O));
    for (size_t i = 0; i < gram.size(); ++i)
      for (size_t j = 0; j < gram.size(); ++j) EXPECT_NEAR(gram[i][j], i == j ? 1.0 : 0.0, 0.2);
  }
}

TEST(TrainMuon, OptimizerStepsMatchNaiveMuonPerMatrixAndAdamWElsewhere) {
  // Two "experts" as separate 2x2 specs, a 3x2 matrix, an AdamW vector, a frozen bias.
  ParamStore<float> p(
      {spec("e0.w1", {2, 2}, OptimizerGroup::kMuon), spec("e1.w1", {2, 2}, OptimizerGroup::kMuon),
       spec("proj", {3, 2}, OptimizerGroup::kMuon), spec("norm", {2}, OptimizerGroup::kAdamW),
       spec("gate.bias", {2}, OptimizerGroup::kNotTrained)});
  p.values() = {0.5f,  -0.2f, 0.1f, 0.8f,  1.0f, 0.0f, 0.0f, 1.0f,  0.3f,
                -0.6f, 0.2f,  0.9f, -0.4f, 0.1f, 1.0f, 1.0f, 0.25f, -0.25f};
  const std::vector<std::vector<float>> grads = {
      {0.1f, 0.2f, -0.3f, 0.4f, 2.0f, 1.0f, -1.0f, 0.5f, 0.7f, -0.1f, 0.2f, 0.3f, -0.5f, 0.6f,
       0.01f, -0.02f, 9.0f, 9.0f},
      {-0.2f, 0.1f, 0.3f, 0.1f, 0.5f, -1.5f, 0.2f, 0.3f, 0.1f, 0.4f, -0.6f, 0.2f, 0.3f, 0.1f,
       -0.03f, 0.04f, 9.0f, 9.0f}};
  struct Mat {
    int64_t offset, rows, cols;
    Matrix W, Mom;
  };
  std::vector<Mat> mats = {{0, 2, 2, {}, {}}, {4, 2, 2, {}, {}}, {8, 3, 2, {}, {}}};
  for (Mat& m : mats) {
    m.W = reshape(p.values().data() + m.offset, m.rows, m.cols);
    m.Mom = Matrix(m.rows, std::vector<double>(m.cols, 0.0));
  }
  trex::train::Optimizer opt(p, {});
  const double lrs[2] = {0.02, 0.01};
  for (int step = 0; step < 2; ++step) {
    p.grads() = grads[step];
    opt.step(p, lrs[step]);
    for (Mat& m : mats) {
      naive_muon_step(m.W, m.Mom, reshape(grads[step].data() + m.offset, m.rows, m.cols), lrs[step],
                      0.1);
      expect_matrix_near(p.values().data() + m.offset, m.W, 2e-6,
                         "muon step " + std::to_string(step + 1));
    }
  }
  // Nesterov momentum buffer after two steps: 0.95·g1 + g2.
  EXPECT_NEAR(opt.first_moment()[0], 0.95 * 0.1 - 0.2, 1e-7);
  EXPECT_EQ(opt.second_moment()[0], 0.0f);  // Muon keeps no second moment
  // ... and stores none: only "norm" (2 values) has one; frozen "gate.bias" neither.
  EXPECT_EQ(opt.state_size(), 18);
  EXPECT_EQ(opt.second_moment_size(), 2);
  EXPECT_EQ(opt.state_bytes(), (18 + 2) * 4);
  // AdamW part (default ε 1e-20 ⇒ first update is lr·sign(g) plus decay).
  EXPECT_NEAR(opt.first_moment()[14], 0.9 * 0.001 + 0.1 * -0.03, 1e-8);
  // Frozen: untouched values and state.
  EXPECT_EQ(p.values()[16], 0.25f);
  EXPECT_EQ(p.values()[17], -0.25f);
  EXPECT_EQ(opt.first_moment()[16], 0.0f);
  // Per-matrix: treating e0/e1 as one [2, 4] matrix would give a different update.
  Matrix joint = {{0.1, 0.2, 2.0, 1.0}, {-0.3, 0.4, -1.0, 0.5}};
  const Matrix joint_o = naive_hybrid_ns(joint);
  const Matrix split_o = naive_hybrid_ns({{0.1, 0.2}, {-0.3, 0.4}});
  EXPECT_GT(std::abs(joint_o[0][0] - split_o[0][0]), 1e-2);
}

TEST(TrainAdamW, UseMuonFalseSendsMatricesToAdamW) {
  ParamStore<float> p({spec("m", {2, 2}, OptimizerGroup::kMuon)});
  p.values() = {1, 1, 1, 1};
  p.grads() = {1, -1, 2, 0};
  trex::train::OptimizerOptions options;
  options.use_muon = false;
  trex::train::Optimizer opt(p, options);
  opt.step(p, 0.1);
  // ε 1e-20: m̂/√v̂ = sign(g); zero gradient gives 0/(0+ε) = 0.
  const float expected[4] = {0.99f - 0.1f, 0.99f + 0.1f, 0.99f - 0.1f, 0.99f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(p.values()[i], expected[i], 1e-6) << i;
  EXPECT_GT(opt.second_moment()[0], 0.0f);
  EXPECT_EQ(opt.second_moment_size(), 4);  // AdamW everywhere: a second moment everywhere
}

// bf16 moments: the same update computed in fp32 from rounded state. Every
// stored moment is a bf16 value, the state is half the bytes, the weights
// stay close to an fp32-moment run, and a save/load continues bitwise.
TEST(TrainOptimizerState, Bf16MomentsAreRoundedStateOfTheSameUpdate) {
  ParamStore<float> start(
      {spec("a", {8, 6}, OptimizerGroup::kMuon), spec("b", {8, 6}, OptimizerGroup::kMuon),
       spec("v", {40}, OptimizerGroup::kAdamW), spec("bias", {3}, OptimizerGroup::kNotTrained)});
  for (int64_t i = 0; i < start.size(); ++i)
    start.values()[i] = 0.05f * std::cos(static_cast<float>(3 * i));
  // Random (full-rank) gradients: Newton-Schulz would amplify rounding in the
  // null space of a low-rank one.
  auto set_grads = [](ParamStore<float>& p, int step) {
    trex::Rng rng(11, {static_cast<uint64_t>(step)});
    for (int64_t i = 0; i < p.size(); ++i) p.grads()[i] = static_cast<float>(0.01 * rng.normal());
  };
  trex::train::OptimizerOptions bf16_options;
  bf16_options.moment_dtype = trex::train::MomentDType::kBF16;
  ParamStore<float> p32 = start, p16 = start;
  trex::train::Optimizer opt32(p32, {}), opt16(p16, bf16_options);
  for (int step = 1; step <= 5; ++step) {
    set_grads(p32, step);
    set_grads(p16, step);
    opt32.step(p32, 0.01);
    opt16.step(p16, 0.01);
  }
  EXPECT_EQ(2 * opt16.state_bytes(), opt32.state_bytes());
  EXPECT_EQ(opt16.second_moment_size(), 40);
  const std::vector<float> m16 = opt16.first_moment(), m32 = opt32.first_moment();
  const std::vector<float> v16 = opt16.second_moment(), v32 = opt32.second_moment();
  double moment_error = 0, moment_scale = 0, weight_error = 0, weight_step = 0;
  for (size_t i = 0; i < m16.size(); ++i) {
    EXPECT_EQ(trex::bf16_to_f32(trex::f32_to_bf16(m16[i])), m16[i]) << i;
    EXPECT_EQ(trex::bf16_to_f32(trex::f32_to_bf16(v16[i])), v16[i]) << i;
    moment_error = std::max(moment_error, static_cast<double>(std::abs(m16[i] - m32[i])));
    moment_scale = std::max(moment_scale, static_cast<double>(std::abs(m32[i])));
    weight_error =
        std::max(weight_error, static_cast<double>(std::abs(p16.values()[i] - p32.values()[i])));
    weight_step =
        std::max(weight_step, static_cast<double>(std::abs(p32.values()[i] - start.values()[i])));
  }
  EXPECT_GT(moment_error, 0.0);                  // rounding happened
  EXPECT_LT(moment_error, 0.01 * moment_scale);  // a few bf16 ulps after 5 steps
  EXPECT_LT(weight_error, 0.05 * weight_step);
  EXPECT_GT(v16[100], 0.0f);  // "v" starts at 96
  EXPECT_EQ(v16[0], 0.0f);    // Muon: no second moment

  trex::test::TempDir dir;
  opt16.save_state(dir.file("bf16.safetensors"));
  ParamStore<float> resumed = p16;
  trex::train::Optimizer opt_resumed(resumed, bf16_options);
  opt_resumed.load_state(dir.file("bf16.safetensors"));
  trex::train::Optimizer widened(resumed, {});  // fp32 moments read the same values exactly
  widened.load_state(dir.file("bf16.safetensors"));
  EXPECT_EQ(widened.first_moment(), m16);
  EXPECT_EQ(widened.second_moment(), v16);
  for (int step = 6; step <= 7; ++step) {
    set_grads(p16, step);
    set_grads(resumed, step);
    opt16.step(p16, 0.01);
    opt_resumed.step(resumed, 0.01);
  }
  EXPECT_EQ(p16.values(), resumed.values());
  EXPECT_EQ(opt16.first_moment(), opt_resumed.first_moment());
  EXPECT_EQ(opt16.second_moment(), opt_resumed.second_moment());
}

TEST(TrainOptimizerState, SaveLoadContinuesBitwise) {
  trex::test::TempDir dir;
  ParamStore<float> a(
      {spec("m", {3, 2}, OptimizerGroup::kMuon), spec("v", {4}, OptimizerGroup::kAdamW)});
  for (int64_t i = 0; i < a.size(); ++i) a.values()[i] = 0.1f * static_cast<float>(i) - 0.3f;
  trex::train::Optimizer opt_a(a, {});
  auto set_grads = [](ParamStore<float>& p, int step) {
    for (int64_t i = 0; i < p.size(); ++i)
      p.grads()[i] = std::sin(static_cast<float>(i + 7 * step));
  };
  for (int step = 1; step <= 2; ++step) {
    set_grads(a, step);
    opt_a.step(a, 0.01);
  }
  opt_a.save_state(dir.file("opt.safetensors"));
  ParamStore<float> b = a;
  trex::train::Optimizer opt_b(b, {});
  opt_b.load_state(dir.file("opt.safetensors"));
  EXPECT_EQ(opt_b.step_count(), 2);
  for (int step = 3; step <= 4; ++step) {
    set_grads(a, step);
    set_grads(b, step);
    opt_a.step(a, 0.01);
    opt_b.step(b, 0.01);
  }
  EXPECT_EQ(a.values(), b.values());
  EXPECT_EQ(opt_a.first_moment(), opt_b.first_moment());
  EXPECT_EQ(opt_a.second_moment(), opt_b.second_moment());

  ParamStore<float> other(
      {spec("m", {2, 3}, OptimizerGroup::kMuon), spec("v", {4}, OptimizerGroup::kAdamW)});
  trex::train::Optimizer opt_other(other, {});
  EXPECT_THROW(opt_other.load_state(dir.file("opt.safetensors")), trex::Error);
  trex::train::OptimizerOptions adamw_only;
  adamw_only.use_muon = false;
  trex::train::Optimizer opt_adamw(b, adamw_only);
  EXPECT_THROW(opt_adamw.load_state(dir.file("opt.safetensors")), trex::Error);
  EXPECT_THROW(opt_b.set_state(1, {1.0f}, {1.0f}), trex::Error);
}

// param_dtype = "bf16": the master follows exactly the fp32 run's weights
// (the same gradients each step) and the store holds its bf16 rounding; the
// router-bias-like tensor the optimizer does not train is left as it is.
TEST(TrainOptimizerMaster, UpdatesTheMasterAndStoresItsBf16Rounding) {
  ParamStore<float> start(
      {spec("a", {8, 6}, OptimizerGroup::kMuon), spec("b", {8, 6}, OptimizerGroup::kMuon),
       spec("v", {40}, OptimizerGroup::kAdamW), spec("bias", {3}, OptimizerGroup::kNotTrained)});
  for (int64_t i = 0; i < start.size(); ++i)
    start.values()[i] = 0.05f * std::cos(static_cast<float>(3 * i)) + 1e-4f;
  auto set_grads = [](ParamStore<float>& p, int step) {
    trex::Rng rng(11, {static_cast<uint64_t>(step)});
    for (int64_t i = 0; i < p.size(); ++i) p.grads()[i] = static_cast<float>(0.01 * rng.normal());
  };
  trex::train::OptimizerOptions master_options;
  master_options.master_weights = true;
  ParamStore<float> p32 = start, p16 = start;
  trex::train::Optimizer opt32(p32, {}), opt16(p16, master_options);
  EXPECT_EQ(opt16.master_bytes(), p16.size() * 4);
  EXPECT_EQ(opt32.master_bytes(), 0);
  opt16.round_working_params(p16);
  const int64_t bias = p16.offset("bias");
  for (int64_t i = 0; i < p16.size(); ++i) {
    const float rounded = trex::bf16_to_f32(trex::f32_to_bf16(start.values()[i]));
    EXPECT_EQ(p16.values()[i], i >= bias ? start.values()[i] : rounded) << i;
  }
  EXPECT_EQ(opt16.master(), start.values());  // the master keeps the unrounded start
  for (int step = 1; step <= 5; ++step) {
    set_grads(p32, step);
    set_grads(p16, step);
    opt32.step(p32, 0.01);
    opt16.step(p16, 0.01);
  }
  int64_t differs = 0;
  for (int64_t i = 0; i < bias; ++i) {
    const float master = opt16.master()[static_cast<size_t>(i)];
    EXPECT_EQ(master, p32.values()[i]) << i;
    EXPECT_EQ(p16.values()[i], trex::bf16_to_f32(trex::f32_to_bf16(master))) << i;
    differs += p16.values()[i] != master;
  }
  EXPECT_GT(differs, bias / 2);  // the working weights are really rounded
  for (int64_t i = bias; i < p16.size(); ++i) EXPECT_EQ(p16.values()[i], start.values()[i]);
  EXPECT_EQ(opt16.first_moment(), opt32.first_moment());

  // The master travels with the state: a resume continues bitwise; a state
  // without a master (an fp32 run's) gives the master the loaded parameters.
  trex::test::TempDir dir;
  opt16.save_state(dir.file("master.safetensors"));
  opt32.save_state(dir.file("fp32.safetensors"));
  ParamStore<float> resumed = p16;
  trex::train::Optimizer opt_resumed(resumed, master_options);
  opt_resumed.load_state(dir.file("master.safetensors"));
  opt_resumed.round_working_params(resumed);
  EXPECT_EQ(opt_resumed.master(), opt16.master());
  EXPECT_EQ(resumed.values(), p16.values());
  ParamStore<float> from_fp32 = p32;
  trex::train::Optimizer opt_from_fp32(from_fp32, master_options);
  opt_from_fp32.load_state(dir.file("fp32.safetensors"));
  opt_from_fp32.round_working_params(from_fp32);
  EXPECT_EQ(opt_from_fp32.master(), p32.values());
  for (int step = 6; step <= 7; ++step) {
    for (ParamStore<float>* p : {&p32, &p16, &resumed, &from_fp32}) set_grads(*p, step);
    opt32.step(p32, 0.01);
    opt16.step(p16, 0.01);
    opt_resumed.step(resumed, 0.01);
    opt_from_fp32.step(from_fp32, 0.01);
  }
  EXPECT_EQ(resumed.values(), p16.values());
  EXPECT_EQ(opt_resumed.master(), opt16.master());
  EXPECT_EQ(from_fp32.values(), p16.values());
  for (int64_t i = 0; i < bias; ++i)
    EXPECT_EQ(opt_from_fp32.master()[static_cast<size_t>(i)], p32.values()[i]) << i;
}

// A bf16 parameter store (2 bytes per trained value) steps exactly like an
// fp32 store holding the rounded values: the same master, the same working
// weights, the router-bias-like tensor untouched; without a master it refuses.
TEST(TrainOptimizerMaster, Bf16StorageStepsLikeFp32StorageOfTheRoundedValues) {
  ParamStore<float> start(
      {spec("a", {8, 6}, OptimizerGroup::kMuon), spec("v", {40}, OptimizerGroup::kAdamW),
       spec("bias", {3}, OptimizerGroup::kNotTrained), spec("b", {8, 6}, OptimizerGroup::kMuon)});
  for (int64_t i = 0; i < start.size(); ++i)
    start.values()[i] = 0.05f * std::cos(static_cast<float>(5 * i)) + 1e-4f;
  trex::train::OptimizerOptions options;
  options.master_weights = true;
  ParamStore<float> wide = start, narrow = start;
  trex::train::Optimizer opt_wide(wide, options), opt_narrow(narrow, options);
  opt_wide.round_working_params(wide);
  opt_narrow.round_working_params(narrow);
  narrow.set_storage(trex::model::ParamStorage::kBF16);
  EXPECT_EQ(narrow.value_bytes(), (start.size() - 3) * 2 + 3 * 4);
  EXPECT_EQ(narrow.copy_values(), wide.values());
  for (int step = 1; step <= 4; ++step) {
    trex::Rng rng(3, {static_cast<uint64_t>(step)});
    for (int64_t i = 0; i < start.size(); ++i) {
      const float g = static_cast<float>(0.01 * rng.normal());
      wide.grads()[i] = g;
      narrow.grads()[i] = g;
    }
    opt_wide.step(wide, 0.01);
    opt_narrow.step(narrow, 0.01);
    EXPECT_EQ(narrow.copy_values(), wide.values()) << "step " << step;
  }
  EXPECT_EQ(opt_narrow.master(), opt_wide.master());
  std::vector<float> bias(3);
  narrow.read(narrow.offset("bias"), narrow.offset("bias") + 3, bias.data());
  EXPECT_TRUE(std::equal(bias.begin(), bias.end(), start.value("bias")));
  // A bf16 store needs the master: an optimizer without one refuses to step it.
  trex::train::Optimizer plain(narrow, {});
  EXPECT_THROW(plain.step(narrow, 0.01), trex::Error);
}

// ZeRO: each shard keeps the master of its ranges only, and a sharded save
// names every trained tensor's master; loading the shards into another
// split gives each new shard the same master values.
TEST(TrainOptimizerMaster, ShardsKeepTheirRangesAndReloadAcrossSplits) {
  ParamStore<float> p({spec("a", {4, 3}, OptimizerGroup::kMuon),
                       spec("v", {5}, OptimizerGroup::kAdamW),
                       spec("b", {3, 4}, OptimizerGroup::kMuon)});
  for (int64_t i = 0; i < p.size(); ++i) p.values()[i] = 0.3f * std::sin(static_cast<float>(i));
  trex::train::OptimizerOptions options;
  options.master_weights = true;
  const std::vector<trex::parallel::OptimizerShard> halves =
      trex::parallel::partition_for_zero(p.specs(), 2);
  ParamStore<float> whole_store = p;
  trex::train::Optimizer whole(whole_store, options);
  whole.round_working_params(whole_store);
  std::vector<ParamStore<float>> stores(2, p);
  std::vector<trex::train::Optimizer> shards;
  for (int r = 0; r < 2; ++r) {
    shards.emplace_back(stores[static_cast<size_t>(r)], options, halves[static_cast<size_t>(r)]);
    shards.back().round_working_params(stores[static_cast<size_t>(r)]);
    EXPECT_EQ(shards.back().master_bytes(), halves[static_cast<size_t>(r)].size() * 4);
  }
  auto set_grads = [](ParamStore<float>& store) {
    for (int64_t i = 0; i < store.size(); ++i)
      store.grads()[i] = 0.01f * std::cos(static_cast<float>(i));
  };
  set_grads(whole_store);
  whole.step(whole_store, 0.05);
  for (int r = 0; r < 2; ++r) {
    set_grads(stores[static_cast<size_t>(r)]);
    shards[static_cast<size_t>(r)].step(stores[static_cast<size_t>(r)], 0.05);
    const trex::parallel::OptimizerShard& h = halves[static_cast<size_t>(r)];
    for (int64_t i = h.begin; i < h.end; ++i) {
      EXPECT_EQ(shards[static_cast<size_t>(r)].master()[static_cast<size_t>(i - h.begin)],
                whole.master()[static_cast<size_t>(i)]);
      EXPECT_EQ(stores[static_cast<size_t>(r)].values()[i], whole_store.values()[i]);
    }
  }
  trex::test::TempDir dir;
  for (int r = 0; r < 2; ++r)
    shards[static_cast<size_t>(r)].save_state_shard(
        dir.file("optimizer-" + std::to_string(r) + ".safetensors"),
        {halves[static_cast<size_t>(r)]}, p.specs());
  // Every trained tensor's master is in the shard that owns it, with the
  // whole optimizer's values.
  int64_t offset = 0;
  for (const ParamSpec& s : p.specs()) {
    const std::vector<std::string> names = trex::train::Optimizer::state_tensor_names(s, options);
    ASSERT_EQ(names.back(), "master." + s.name);
    const int owner = offset < halves[0].end ? 0 : 1;
    const trex::SafetensorsFile file = trex::SafetensorsFile::open(
        dir.file("optimizer-" + std::to_string(owner) + ".safetensors"));
    const trex::TensorView* view = file.find(names.back());
    ASSERT_NE(view, nullptr) << names.back();
    EXPECT_EQ(std::memcmp(view->data, whole.master().data() + offset,
                          static_cast<size_t>(s.numel()) * sizeof(float)),
              0)
        << s.name;
    offset += s.numel();
  }
}

TEST(TrainOptimizer, RejectsMuonVectorsAndForeignStores) {
  ParamStore<float> p({spec("vec", {4}, OptimizerGroup::kMuon)});
  EXPECT_THROW(trex::train::Optimizer(p, {}), trex::Error);
  ParamStore<float> q({spec("m", {2, 2}, OptimizerGroup::kMuon)});
  trex::train::Optimizer opt(q, {});
  ParamStore<float> bigger({spec("m", {2, 3}, OptimizerGroup::kMuon)});
  EXPECT_THROW(opt.step(bigger, 0.1), trex::Error);
}

}  // namespace

namespace {

// The spec §6 split on the real tiny-V4 inventory: every Muon tensor is one matrix
// (experts separately), the router bias is frozen, and Muon's scale makes each
// matrix update's RMS about γ·lr = 0.18·lr whatever its shape.
TEST(TrainOptimizer, TinyV4InventoryUpdateRmsAndFrozenRouterBias) {
  const trex::model::ModelConfig config =
      trex::model::ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json");
  ParamStore<float> p(trex::model::parameter_specs(config));
  trex::Rng rng(11);
  for (float& g : p.grads()) g = static_cast<float>(rng.normal());
  trex::train::Optimizer opt(p, {});
  const double lr = 1e-2;
  opt.step(p, lr);  // values start at zero: no weight-decay term
  int64_t offset = 0, muon = 0, frozen = 0, experts = 0;
  for (const ParamSpec& s : p.specs()) {
    const int64_t n = s.numel();
    double sum2 = 0.0;
    for (int64_t i = 0; i < n; ++i)
      sum2 += static_cast<double>(p.values()[offset + i]) * p.values()[offset + i];
    const double rms = std::sqrt(sum2 / static_cast<double>(n));
    if (s.group == OptimizerGroup::kMuon) {
      ++muon;
      experts += s.expert >= 0;
      EXPECT_EQ(s.shape.size(), 2u) << s.name;
      EXPECT_GT(rms / lr, 0.12) << s.name;
      EXPECT_LT(rms / lr, 0.2) << s.name;
    } else if (s.group == OptimizerGroup::kAdamW) {
      EXPECT_NEAR(rms / lr, 1.0, 1e-3) << s.name;  // first AdamW step: ±lr per element
    } else {
      ++frozen;
      EXPECT_EQ(sum2, 0.0) << s.name;
    }
    offset += n;
  }
  EXPECT_GT(muon, 0);
  EXPECT_GT(experts, 0);
  EXPECT_GT(frozen, 0);  // gate.bias
}

}  // namespace
