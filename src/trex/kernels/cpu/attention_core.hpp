#pragma once
// Dense inner products of the attention core (model/attention.cpp). Every
// query token's heads share one K=V latent (MQA), so a token's scores are a
// small [heads, keys] product and its output a [heads, keys]·[keys, dim] one.
// The keys of a token are not contiguous (window rows + gathered compressed
// entries), hence the row-pointer interface.
//
// Loops are written for the compiler to vectorise; on x86-64 the functions are
// cloned for AVX-512 / AVX2 and picked at load time. The summation order is
// fixed by the arguments (never by threads), so callers stay deterministic.
#include <cstdint>

namespace trex::kernels {

// out[i·ldo + j] = alpha · Σ_e a[i·lda + e] · rows[j][e]   for i < m, j < n, e < k.
void attention_dots(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                    const float* const* rows, float alpha, float* out, int64_t ldo);
void attention_dots(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                    const double* const* rows, double alpha, double* out, int64_t ldo);

// y[i·ldy + e] += Σ_j coef[i·ldc + j] · rows[j][e]   for i < m, j < n, e < k.
void attention_combine(int64_t m, int64_t n, int64_t k, const float* coef, int64_t ldc,
                       const float* const* rows, float* y, int64_t ldy);
void attention_combine(int64_t m, int64_t n, int64_t k, const double* coef, int64_t ldc,
                       const double* const* rows, double* y, int64_t ldy);

}  // namespace trex::kernels
