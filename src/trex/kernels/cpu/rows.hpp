#pragma once
// CPU kernels of the row-movement and elementwise ops of backend.hpp
// (embedding lookups and their gradients, residual adds, copies). Each runs
// serially in a fixed order: a row that several sources add into receives
// them in source order.
#include <cstdint>

namespace trex::kernels {

// dst [M, k, w]: each of the k copies of row m is src[index[m]] (src [·, w]).
template <class T>
void gather_rows(const T* src, const int64_t* index, int64_t M, int64_t k, int64_t w, T* dst);

// For m in order, j < k: dst[index[m]] += src[m, j] (src [M, k, w], dst [·, w]).
template <class T>
void scatter_add_rows(const T* src, const int64_t* index, int64_t M, int64_t k, int64_t w, T* dst);

// y[i] += x[i].
template <class T>
void add(const T* x, T* y, int64_t n);

// x [R, k, w]: x[r, j] += y[r] for every j.
template <class T>
void broadcast_add(const T* y, int64_t R, int64_t k, int64_t w, T* x);

// y [R, w]: y[r] += x[r, j] for j in order (x [R, k, w]).
template <class T>
void sum_copies_add(const T* x, int64_t R, int64_t k, int64_t w, T* y);

}  // namespace trex::kernels
