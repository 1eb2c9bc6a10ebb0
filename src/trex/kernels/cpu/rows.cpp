#include "trex/kernels/cpu/rows.hpp"

#include <algorithm>

namespace trex::kernels {

template <class T>
void gather_rows(const T* src, const int64_t* index, int64_t M, int64_t k, int64_t w, T* dst) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < k; ++j)
      std::copy(src + index[m] * w, src + (index[m] + 1) * w, dst + (m * k + j) * w);
}

template <class T>
void scatter_add_rows(const T* src, const int64_t* index, int64_t M, int64_t k, int64_t w, T* dst) {
  for (int64_t m = 0; m < M; ++m) {
    T* row = dst + index[m] * w;
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < w; ++i) row[i] += src[(m * k + j) * w + i];
  }
}

template <class T>
void add(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

template <class T>
void broadcast_add(const T* y, int64_t R, int64_t k, int64_t w, T* x) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < w; ++i) x[(r * k + j) * w + i] += y[r * w + i];
}

template <class T>
void sum_copies_add(const T* x, int64_t R, int64_t k, int64_t w, T* y) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < w; ++i) y[r * w + i] += x[(r * k + j) * w + i];
}

#define TREX_ROWS_INSTANTIATE(T)                                                              \
  template void gather_rows<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, T*);      \
  template void scatter_add_rows<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, T*); \
  template void add<T>(const T*, T*, int64_t);                                                \
  template void broadcast_add<T>(const T*, int64_t, int64_t, int64_t, T*);                    \
  template void sum_copies_add<T>(const T*, int64_t, int64_t, int64_t, T*);
TREX_ROWS_INSTANTIATE(float)
TREX_ROWS_INSTANTIATE(double)
#undef TREX_ROWS_INSTANTIATE

}  // namespace trex::kernels
