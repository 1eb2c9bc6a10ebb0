#include "trex/kernels/cpu/gemm.hpp"

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "trex/core/error.hpp"
#include "trex/core/log.hpp"

namespace trex::kernels {
namespace {

std::atomic<Precision> g_precision{Precision::kF32};

inline uint16_t to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) return 0x7fc0;  // NaN
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>((bits + rounding) >> 16);
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

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mutex;
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                         float, int>;
  std::map<Key, std::unique_ptr<dnnl::matmul>> cache;
};

Dnnl& dnnl_state() {
  static Dnnl state;
  return state;
}

// A [rows, cols] view with leading dim ld as a dense copy of convert(value):
// bf16 bits for oneDNN's bf16 matmul, or bf16-rounded floats (bf16 semantics
// on a CPU whose oneDNN has no bf16 matmul).
template <class Out, class Convert>
void pack_dense(const float* src, int64_t rows, int64_t cols, int64_t ld, std::vector<Out>& out,
                Convert convert) {
  out.resize(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = convert(src[r * ld + c]);
}

// oneDNN reports a missing bf16 implementation (e.g. an AVX2-only CPU) as
// dnnl::error(unimplemented) from the primitive descriptor.
bool probe_bf16_matmul() {
  using dt = dnnl::memory::data_type;
  try {
    const dnnl::memory::desc a({16, 16}, dt::bf16, dnnl::memory::dims{16, 1});
    const dnnl::memory::desc c({16, 16}, dt::f32, dnnl::memory::dims{16, 1});
    const dnnl::matmul::desc desc(a, a, c);
    const dnnl::matmul::primitive_desc pd(desc, dnnl_state().engine);
    return true;
  } catch (const dnnl::error&) {
    log::warn(
        "oneDNN has no bf16 matmul on this CPU (it needs AVX512-BF16 or AMX): bf16 GEMMs run in "
        "fp32 on bf16-rounded operands (same results, no bf16 speed-up)");
    return false;
  }
}

void gemm_dnnl(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
               bool bf16) {
  using dt = dnnl::memory::data_type;
  const bool native_bf16 = bf16 && gemm_bf16_native();
  Dnnl& st = dnnl_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  // Stored shapes: A is [M,K] or [K,M]; B is [K,N] or [N,K].
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
  const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
  thread_local std::vector<uint16_t> a16, b16;
  thread_local std::vector<float> a_rounded, b_rounded;
  const void* a_ptr = A;
  const void* b_ptr = B;
  int64_t a_ld = lda, b_ld = ldb;
  if (native_bf16) {
    pack_dense(A, a_rows, a_cols, lda, a16, to_bf16_bits);
    pack_dense(B, b_rows, b_cols, ldb, b16, to_bf16_bits);
    a_ptr = a16.data();
    b_ptr = b16.data();
    a_ld = a_cols;
    b_ld = b_cols;
  } else if (bf16) {
    pack_dense(A, a_rows, a_cols, lda, a_rounded, bf16_round);
    pack_dense(B, b_rows, b_cols, ldb, b_rounded, bf16_round);
    a_ptr = a_rounded.data();
    b_ptr = b_rounded.data();
    a_ld = a_cols;
    b_ld = b_cols;
  }
  const dt in_type = native_bf16 ? dt::bf16 : dt::f32;
  const dnnl::memory::dims a_strides =
      ta ? dnnl::memory::dims{1, a_ld} : dnnl::memory::dims{a_ld, 1};
  const dnnl::memory::dims b_strides =
      tb ? dnnl::memory::dims{1, b_ld} : dnnl::memory::dims{b_ld, 1};
  dnnl::memory::desc a_md({M, K}, in_type, a_strides);
  dnnl::memory::desc b_md({K, N}, in_type, b_strides);
  dnnl::memory::desc c_md({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});

  Dnnl::Key key{ta, tb, M, N, K, a_ld, b_ld, ldc, alpha, beta, native_bf16 ? 1 : 0};
  auto it = st.cache.find(key);
  if (it == st.cache.end()) {
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::desc desc(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, st.engine);
    if (st.cache.size() > 4096) st.cache.clear();
    it = st.cache.emplace(key, std::make_unique<dnnl::matmul>(pd)).first;
  }
  dnnl::memory a_mem(a_md, st.engine, const_cast<void*>(a_ptr));
  dnnl::memory b_mem(b_md, st.engine, const_cast<void*>(b_ptr));
  dnnl::memory c_mem(c_md, st.engine, C);
  it->second->execute(st.stream,
                      {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  st.stream.wait();
}

}  // namespace

void set_gemm_precision(Precision precision) {
  g_precision.store(precision);
}
Precision gemm_precision() {
  return g_precision.load();
}

bool gemm_bf16_native() {
  static const bool native = probe_bf16_matmul();
  return native;
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                  int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  gemm_loop<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                    [](double v) { return v; });
}

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const bool bf16 = gemm_precision() == Precision::kBF16;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  if (M * N * K < 8 * 1024) {
    if (bf16)
      gemm_loop<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16_round);
    else
      gemm_loop<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                       [](float v) { return v; });
    return;
  }
  gemm_dnnl(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
}

template <class T>
void linear_forward(const T* X, const T* W, T* Y, int64_t M, int64_t N, int64_t K,
                    bool accumulate) {
  gemm<T>(false, true, M, N, K, T(1), X, K, W, K, accumulate ? T(1) : T(0), Y, N);
}

template <class T>
void linear_backward(const T* X, const T* W, const T* dY, T* dX, T* dW, int64_t M, int64_t N,
                     int64_t K, bool accumulate_dx) {
  if (dX) gemm<T>(false, false, M, K, N, T(1), dY, N, W, K, accumulate_dx ? T(1) : T(0), dX, K);
  if (dW && M > 0) gemm<T>(true, false, N, K, M, T(1), dY, N, X, K, T(1), dW, K);
}

template void linear_forward<float>(const float*, const float*, float*, int64_t, int64_t, int64_t,
                                    bool);
template void linear_forward<double>(const double*, const double*, double*, int64_t, int64_t,
                                     int64_t, bool);
template void linear_backward<float>(const float*, const float*, const float*, float*, float*,
                                     int64_t, int64_t, int64_t, bool);
template void linear_backward<double>(const double*, const double*, const double*, double*, double*,
                                      int64_t, int64_t, int64_t, bool);

}  // namespace trex::kernels
