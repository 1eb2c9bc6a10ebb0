#include "trex/model/token_dispatcher.hpp"

#include "trex/core/profile.hpp"

namespace trex::model {

template <class T>
void combine_pair_rows(int64_t top_k, int64_t hidden, const int64_t* pair_row, const T* rows,
                       int64_t begin, int64_t end, T* y) {
  const int64_t K = top_k, d = hidden;
  TREX_PROFILE(profile::Op::kCombine);
#pragma omp parallel for schedule(static) if ((end - begin) * d > (1 << 14))
  for (int64_t t = begin; t < end; ++t) {
    T* yt = y + t * d;
    for (int64_t k = 0; k < K; ++k) {
      const T* o = rows + pair_row[t * K + k] * d;
      for (int64_t i = 0; i < d; ++i) yt[i] += o[i];
    }
  }
}

template void combine_pair_rows<float>(int64_t, int64_t, const int64_t*, const float*, int64_t,
                                       int64_t, float*);
template void combine_pair_rows<double>(int64_t, int64_t, const int64_t*, const double*, int64_t,
                                        int64_t, double*);

}  // namespace trex::model
