#pragma once
// The engine's one GEMM entry point. Row-major throughout.
//   float  -> oneDNN matmul; in Precision::kBF16 the operands are rounded to
//             bf16 and multiplied with fp32 accumulation and fp32 output
//             (oneDNN's bf16 matmul where the CPU has one, e.g. AVX512-BF16
//             or AMX; else an fp32 matmul of the bf16-rounded operands: the
//             same numerics without the speed-up, see gemm_bf16_native()).
//   double -> a plain blocked loop (finite-difference gradient checks only).
// The CPU backend's linear ops (cpu_backend.hpp) call these; the precision is
// an argument of every call.
#include <cstdint>
#include <functional>

#include "trex/kernels/precision.hpp"

namespace trex::kernels {

// Whether oneDNN has a native bf16 matmul on this CPU (probed once). Without
// one, Precision::kBF16 GEMMs still round their operands to bf16 but multiply
// them in fp32, so a bf16 run gives the same results at fp32 speed or below.
bool gemm_bf16_native();

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
// op(A) = A ([M,K], leading dim lda) or Aᵀ (A stored [K,M]); same for B.
template <class T>
void gemm(Precision precision, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// Linear layer with weight stored [out, in] (HF / PyTorch layout).
// Y[M,N] = X[M,K] · W[N,K]ᵀ  (+ Y when accumulate).
template <class T>
void linear_forward(const T* X, const T* W, T* Y, int64_t M, int64_t N, int64_t K,
                    Precision precision, bool accumulate = false);

// Backward of linear_forward. Either output may be null.
// dX[M,K] = dY[M,N] · W[N,K]  (+ dX when accumulate_dx);  dW[N,K] += dY[M,N]ᵀ · X[M,K].
template <class T>
void linear_backward(const T* X, const T* W, const T* dY, T* dX, T* dW, int64_t M, int64_t N,
                     int64_t K, Precision precision, bool accumulate_dx = false);

// Runs task(0 .. count−1), independent tasks made of GEMMs (the routed
// experts of a grouped GEMM, the matrices of a Muon batch). With at least as
// many tasks as threads they run in parallel, one thread each: small GEMMs
// scale poorly over threads (a 256³ bf16 GEMM: ~270 GFLOP/s on one core,
// ~290 on two), and a GEMM's result never depends on its thread count, so
// the bits are those of running them one after the other, which is what
// happens with fewer tasks (each GEMM then on every thread). The first
// exception in task order is rethrown.
void run_gemm_tasks(int64_t count, const std::function<void(int64_t)>& task);

}  // namespace trex::kernels
