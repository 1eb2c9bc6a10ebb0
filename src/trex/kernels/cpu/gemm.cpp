#include "trex/kernels/cpu/gemm.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "trex/core/error.hpp"
#include "trex/core/log.hpp"

namespace trex::kernels {
namespace {

// Branch-free so that the packing loops vectorise (a NaN becomes the quiet NaN 0x7fc0).
inline uint16_t to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  const uint32_t rounded = (bits + rounding) >> 16;
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? 0x7fc0u : rounded);
}

inline float bf16_round(float value) {
  const uint32_t bits = static_cast<uint32_t>(to_bf16_bits(value)) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Reference loop: C = alpha*op(A)op(B) + beta*C. Used for double, and for float
// GEMMs too small for oneDNN's dispatch overhead to pay off.
template <class T, class Round>
void gemm_loop(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc, Round round) {
#pragma omp parallel for schedule(static) if (M * N * K > (1 << 16))
  for (int64_t i = 0; i < M; ++i) {
    std::vector<T> row(static_cast<size_t>(N), T(0));
    for (int64_t k = 0; k < K; ++k) {
      const T a = round(ta ? A[k * lda + i] : A[i * lda + k]);
      if (a == T(0)) continue;
      if (!tb) {
        const T* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) row[j] += a * round(b[j]);
      } else {
        for (int64_t j = 0; j < N; ++j) row[j] += a * round(B[j * ldb + k]);
      }
    }
    T* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = alpha * row[j] + (beta == T(0) ? T(0) : beta * c[j]);
  }
}

struct DnnlPrimitive {
  dnnl::matmul matmul;
  dnnl::memory::desc scratchpad;
};

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;  // guards the cache; primitives execute concurrently
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                         float, int>;
  std::map<Key, std::shared_ptr<const DnnlPrimitive>> cache;
};

Dnnl& dnnl_state() {
  static Dnnl state;
  return state;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The output tiles of one GEMM, chosen from its shape alone, never from the
// thread count: oneDNN's own threading splits K across threads when M·N is
// small (weight gradients), so its last bits changed between 1 and 2 threads
// on AVX2 CPUs. Each tile is one single-threaded oneDNN call, so every output
// element is reduced in an order fixed by the shape, on any thread count.
struct TileGrid {
  int64_t tile_m, tile_n, rows, cols;
  int64_t count() const { return rows * cols; }
};

TileGrid tile_grid(int64_t M, int64_t N, int64_t K) {
  constexpr int64_t kTileWork = int64_t{1} << 20;  // multiply-adds: ~10 us on one core
  constexpr int64_t kMaxTiles = 32;                // balances 2 to 16 threads
  constexpr int64_t kRowStep = 16, kColStep = 64;  // keep tiles in whole vector blocks
  const int64_t wanted = std::clamp<int64_t>(M * N * K / kTileWork, 1, kMaxTiles);
  int64_t tm = M, tn = N;
  while (ceil_div(M, tm) * ceil_div(N, tn) < wanted) {
    const int64_t half_m = ceil_div(ceil_div(tm, 2), kRowStep) * kRowStep;
    const int64_t half_n = ceil_div(ceil_div(tn, 2), kColStep) * kColStep;
    const bool split_m = half_m < tm, split_n = half_n < tn;
    if (!split_m && !split_n) break;
    // Halve the side that is longer in vector blocks.
    if (split_m && (!split_n || tm * kColStep >= tn * kRowStep))
      tm = half_m;
    else
      tn = half_n;
  }
  return {tm, tn, ceil_div(M, tm), ceil_div(N, tn)};
}

// The primitive for one tile shape, created on first use. fp32 tiles call it
// with this thread's OpenMP thread count at 1, so oneDNN plans one thread.
std::shared_ptr<const DnnlPrimitive> dnnl_primitive(const Dnnl::Key& key,
                                                    const dnnl::memory::desc& a_md,
                                                    const dnnl::memory::desc& b_md,
                                                    const dnnl::memory::desc& c_md, float alpha,
                                                    float beta) {
  Dnnl& st = dnnl_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  auto it = st.cache.find(key);
  if (it != st.cache.end()) return it->second;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-thread buffers: concurrent calls
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc desc(a_md, b_md, c_md);
  const dnnl::matmul::primitive_desc pd(desc, attr, st.engine);
  if (st.cache.size() > 4096) st.cache.clear();
  auto entry =
      std::make_shared<const DnnlPrimitive>(DnnlPrimitive{dnnl::matmul(pd), pd.scratchpad_desc()});
  st.cache.emplace(key, entry);
  return entry;
}

// One tile: C[i0:i0+m, j0:j0+n] from the matching rows of op(A) and columns of
// op(B); a, b, c already point at the tile's first element.
void dnnl_tile(bool ta, bool tb, int64_t m, int64_t n, int64_t K, float alpha, const void* a,
               int64_t a_ld, const void* b, int64_t b_ld, float beta, float* c, int64_t ldc,
               dnnl::memory::data_type in_type) {
  using dims = dnnl::memory::dims;
  const dnnl::memory::desc a_md({m, K}, in_type, ta ? dims{1, a_ld} : dims{a_ld, 1});
  const dnnl::memory::desc b_md({K, n}, in_type, tb ? dims{1, b_ld} : dims{b_ld, 1});
  const dnnl::memory::desc c_md({m, n}, dnnl::memory::data_type::f32, dims{ldc, 1});
  const Dnnl::Key key{ta,
                      tb,
                      m,
                      n,
                      K,
                      a_ld,
                      b_ld,
                      ldc,
                      alpha,
                      beta,
                      in_type == dnnl::memory::data_type::bf16 ? 1 : 0};
  const auto primitive = dnnl_primitive(key, a_md, b_md, c_md, alpha, beta);
  Dnnl& st = dnnl_state();
  thread_local dnnl::stream stream{st.engine};
  thread_local std::vector<uint8_t> scratch;
  const size_t scratch_bytes = primitive->scratchpad.get_size();
  constexpr size_t kAlign = 64;
  if (scratch.size() < scratch_bytes + kAlign) scratch.resize(scratch_bytes + kAlign);
  void* scratch_ptr = scratch.data();
  size_t space = scratch.size();
  std::align(kAlign, scratch_bytes, scratch_ptr, space);
  dnnl::memory a_mem(a_md, st.engine, const_cast<void*>(a));
  dnnl::memory b_mem(b_md, st.engine, const_cast<void*>(b));
  dnnl::memory c_mem(c_md, st.engine, c);
  dnnl::memory scratch_mem(primitive->scratchpad, st.engine, scratch_ptr);
  primitive->matmul.execute(stream, {{DNNL_ARG_SRC, a_mem},
                                     {DNNL_ARG_WEIGHTS, b_mem},
                                     {DNNL_ARG_DST, c_mem},
                                     {DNNL_ARG_SCRATCHPAD, scratch_mem}});
  stream.wait();
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TREX_PACK_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TREX_PACK_CLONES
#endif

// One row of an operand converted for a bf16 GEMM; cloned per ISA so that the
// integer rounding runs 16 lanes wide on AVX-512 (the packing is O(n²) of an
// O(n³) GEMM, but at d = 256 it was 11 % of a training step in SSE2).
TREX_PACK_CLONES
void row_to_bf16_bits(const float* src, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_bf16_bits(src[i]);
}

TREX_PACK_CLONES
void row_to_bf16_rounded(const float* src, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_round(src[i]);
}

#undef TREX_PACK_CLONES

// A [rows, cols] view with leading dim ld as a dense copy of convert_row over
// each row: bf16 bits for oneDNN's bf16 matmul, or bf16-rounded floats (bf16
// semantics on a CPU whose oneDNN has no bf16 matmul).
template <class Out>
void pack_dense(const float* src, int64_t rows, int64_t cols, int64_t ld, std::vector<Out>& out,
                void (*convert_row)(const float*, int64_t, Out*)) {
  out.resize(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) convert_row(src + r * ld, cols, out.data() + r * cols);
}

// Native bf16 needs AVX512-BF16 (or AMX, whose ISA mask contains it). Without it
// oneDNN 2.6 still creates bf16 matmuls on AVX-512 CPUs but emulates them (32.8
// vs 113 GFLOP/s fp32 on one core, Dec 2026); on AVX2-only CPUs the primitive
// descriptor throws dnnl::error(unimplemented).
bool probe_bf16_matmul() {
  using dt = dnnl::memory::data_type;
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16_isa = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  bool native = (isa & bf16_isa) == bf16_isa;
  if (native) {
    try {
      const dnnl::memory::desc a({16, 16}, dt::bf16, dnnl::memory::dims{16, 1});
      const dnnl::memory::desc c({16, 16}, dt::f32, dnnl::memory::dims{16, 1});
      const dnnl::matmul::desc desc(a, a, c);
      const dnnl::matmul::primitive_desc pd(desc, dnnl_state().engine);
    } catch (const dnnl::error&) {
      native = false;
    }
  }
  if (!native)
    log::warn(
        "no native bf16 matmul on this CPU (oneDNN needs AVX512-BF16 or AMX; it emulates bf16 "
        "~3x slower than fp32 otherwise): bf16 GEMMs run in fp32 on bf16-rounded operands "
        "(same results, no bf16 speed-up)");
  return native;
}

void gemm_dnnl(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
               bool bf16) {
  using dt = dnnl::memory::data_type;
  const bool native_bf16 = bf16 && gemm_bf16_native();
  // Stored shapes: A is [M,K] or [K,M]; B is [K,N] or [N,K].
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
  const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
  thread_local std::vector<uint16_t> a16, b16;
  thread_local std::vector<float> a_rounded, b_rounded;
  const void* a_ptr = A;
  const void* b_ptr = B;
  int64_t a_ld = lda, b_ld = ldb;
  if (native_bf16) {
    pack_dense(A, a_rows, a_cols, lda, a16, row_to_bf16_bits);
    pack_dense(B, b_rows, b_cols, ldb, b16, row_to_bf16_bits);
    a_ptr = a16.data();
    b_ptr = b16.data();
    a_ld = a_cols;
    b_ld = b_cols;
  } else if (bf16) {
    pack_dense(A, a_rows, a_cols, lda, a_rounded, row_to_bf16_rounded);
    pack_dense(B, b_rows, b_cols, ldb, b_rounded, row_to_bf16_rounded);
    a_ptr = a_rounded.data();
    b_ptr = b_rounded.data();
    a_ld = a_cols;
    b_ld = b_cols;
  }
  const dt in_type = native_bf16 ? dt::bf16 : dt::f32;
  const int64_t elem = native_bf16 ? int64_t{sizeof(uint16_t)} : int64_t{sizeof(float)};
  const auto* a_bytes = static_cast<const uint8_t*>(a_ptr);
  const auto* b_bytes = static_cast<const uint8_t*>(b_ptr);
  if (native_bf16) {
    // oneDNN's bf16 kernels (AVX512-BF16/AMX) are thread-count invariant and
    // were slower in tiles (tiny-v4 bench step: 1,451 vs 1,829 tok/s).
    dnnl_tile(ta, tb, M, N, K, alpha, a_ptr, a_ld, b_ptr, b_ld, beta, C, ldc, in_type);
    return;
  }
  const TileGrid grid = tile_grid(M, N, K);
  std::exception_ptr failure;
  std::mutex failure_mutex;
#pragma omp parallel for schedule(dynamic, 1) if (grid.count() > 1)
  for (int64_t t = 0; t < grid.count(); ++t) {
    const int64_t i0 = (t / grid.cols) * grid.tile_m, j0 = (t % grid.cols) * grid.tile_n;
    const int64_t m = std::min(grid.tile_m, M - i0), n = std::min(grid.tile_n, N - j0);
    const int64_t a_offset = ta ? i0 : i0 * a_ld;  // first row of op(A) in the tile
    const int64_t b_offset = tb ? j0 * b_ld : j0;  // first column of op(B)
    try {
      omp_set_num_threads(1);  // oneDNN threads by this task's count: one thread per tile
      dnnl_tile(ta, tb, m, n, K, alpha, a_bytes + a_offset * elem, a_ld, b_bytes + b_offset * elem,
                b_ld, beta, C + i0 * ldc + j0, ldc, in_type);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

void run_gemm_tasks(int64_t count, const std::function<void(int64_t)>& task) {
  const bool per_thread = count > 1 && count >= omp_get_max_threads() && !omp_in_parallel();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max<int64_t>(count, 0)));
#pragma omp parallel for schedule(dynamic, 1) if (per_thread)
  for (int64_t i = 0; i < count; ++i) {
    if (per_thread) omp_set_num_threads(1);  // oneDNN threads by this task's count
    try {
      task(i);
    } catch (...) {  // an exception must not leave a worker thread
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

const char* precision_name(Precision precision) {
  return precision == Precision::kBF16 ? "bf16" : "f32";
}

bool gemm_bf16_native() {
  static const bool native = probe_bf16_matmul();
  return native;
}

template <>
void gemm<double>(Precision, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                  const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
                  double* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  gemm_loop<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                    [](double v) { return v; });
}

template <>
void gemm<float>(Precision precision, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                 float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                 float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const bool bf16 = precision == Precision::kBF16;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  if (M * N * K < 8 * 1024) {
    if (bf16)
      gemm_loop<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                       [](float v) { return bf16_round(v); });
    else
      gemm_loop<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                       [](float v) { return v; });
    return;
  }
  gemm_dnnl(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
}

template <class T>
void linear_forward(const T* X, const T* W, T* Y, int64_t M, int64_t N, int64_t K,
                    Precision precision, bool accumulate) {
  gemm<T>(precision, false, true, M, N, K, T(1), X, K, W, K, accumulate ? T(1) : T(0), Y, N);
}

template <class T>
void linear_backward(const T* X, const T* W, const T* dY, T* dX, T* dW, int64_t M, int64_t N,
                     int64_t K, Precision precision, bool accumulate_dx) {
  if (dX)
    gemm<T>(precision, false, false, M, K, N, T(1), dY, N, W, K, accumulate_dx ? T(1) : T(0), dX,
            K);
  if (dW && M > 0) gemm<T>(precision, true, false, N, K, M, T(1), dY, N, X, K, T(1), dW, K);
}

template void linear_forward<float>(const float*, const float*, float*, int64_t, int64_t, int64_t,
                                    Precision, bool);
template void linear_forward<double>(const double*, const double*, double*, int64_t, int64_t,
                                     int64_t, Precision, bool);
template void linear_backward<float>(const float*, const float*, const float*, float*, float*,
                                     int64_t, int64_t, int64_t, Precision, bool);
template void linear_backward<double>(const double*, const double*, const double*, double*, double*,
                                      int64_t, int64_t, int64_t, Precision, bool);

}  // namespace trex::kernels
