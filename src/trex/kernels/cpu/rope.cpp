#include "trex/kernels/cpu/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"

namespace trex::kernels {

void yarn_correction_range(int64_t rope_dims, double base, const YarnScaling& yarn, int64_t* lo,
                           int64_t* hi) {
  const double r = static_cast<double>(rope_dims);
  const double l0 = static_cast<double>(yarn.original_max_position_embeddings);
  const double two_pi = 2.0 * std::numbers::pi;
  // Pair index whose wavelength fits `rotations` times into the original context.
  auto pair_for = [&](double rotations) {
    return r * std::log(l0 / (rotations * two_pi)) / (2.0 * std::log(base));
  };
  const auto low = static_cast<int64_t>(std::floor(pair_for(yarn.beta_fast)));
  const auto high = static_cast<int64_t>(std::ceil(pair_for(yarn.beta_slow)));
  *lo = std::clamp<int64_t>(low, 0, rope_dims - 1);
  *hi = std::clamp<int64_t>(high, 0, rope_dims - 1);
}

RopeTable::RopeTable(int64_t rope_dims_, double base_, int64_t positions_,
                     const std::optional<YarnScaling>& yarn)
    : rope_dims(rope_dims_), positions(positions_), base(base_) {
  if (rope_dims <= 0 || rope_dims % 2 != 0)
    throw Error("rope dims must be positive and even, got " + std::to_string(rope_dims))
        .field("qk_rope_head_dim");
  if (!(base > 1.0)) throw Error("rope base must be > 1").field("rope_theta");
  if (positions < 0) throw Error("negative number of rope positions").field("positions");
  const int64_t pairs = rope_dims / 2;
  inv_freq.resize(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p)
    inv_freq[p] = std::pow(base, -2.0 * static_cast<double>(p) / static_cast<double>(rope_dims));
  if (yarn) {
    if (!(yarn->factor > 0.0) || yarn->original_max_position_embeddings <= 0 ||
        !(yarn->beta_fast > 0.0) || !(yarn->beta_slow > 0.0))
      throw Error("YaRN needs factor > 0, original_max_position_embeddings > 0, betas > 0")
          .field("rope_scaling");
    yarn_correction_range(rope_dims, base, *yarn, &yarn_lo, &yarn_hi);
    // Degenerate range: widen by a hair so the ramp is a step (as the reference does).
    const double lo = static_cast<double>(yarn_lo);
    const double hi = yarn_hi == yarn_lo ? lo + 0.001 : static_cast<double>(yarn_hi);
    for (int64_t p = 0; p < pairs; ++p) {
      const double ramp = std::clamp((static_cast<double>(p) - lo) / (hi - lo), 0.0, 1.0);
      inv_freq[p] = inv_freq[p] / yarn->factor * ramp + inv_freq[p] * (1.0 - ramp);
    }
  }
  cos.resize(static_cast<size_t>(positions * pairs));
  sin.resize(cos.size());
  for (int64_t t = 0; t < positions; ++t)
    for (int64_t p = 0; p < pairs; ++p) {
      const double angle = static_cast<double>(t) * inv_freq[p];
      cos[t * pairs + p] = std::cos(angle);
      sin[t * pairs + p] = std::sin(angle);
    }
}

template <class T>
void rope_apply(const RopeTable& table, T* x, int64_t rows, int64_t vectors_per_row,
                int64_t vector_dim, const int64_t* positions, bool inverse) {
  TREX_PROFILE(profile::Op::kRope);
  if (table.rope_dims > vector_dim)
    throw Error("rope dims exceed the vector dim").field("qk_rope_head_dim");
  for (int64_t r = 0; r < rows; ++r)
    if (positions[r] < 0 || positions[r] >= table.positions)
      throw Error("rope position " + std::to_string(positions[r]) + " outside the table (" +
                  std::to_string(table.positions) + " positions)")
          .field("positions");
  const int64_t pairs = table.rope_dims / 2;
  const int64_t offset = vector_dim - table.rope_dims;
  const double sign = inverse ? -1.0 : 1.0;
#pragma omp parallel for schedule(static) if (rows * vectors_per_row * pairs > (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    const double* c = table.cos.data() + positions[r] * pairs;
    const double* s = table.sin.data() + positions[r] * pairs;
    for (int64_t v = 0; v < vectors_per_row; ++v) {
      T* base = x + (r * vectors_per_row + v) * vector_dim + offset;
      for (int64_t p = 0; p < pairs; ++p) {
        const T cs = static_cast<T>(c[p]);
        const T sn = static_cast<T>(sign * s[p]);
        const T re = base[2 * p];
        const T im = base[2 * p + 1];
        base[2 * p] = re * cs - im * sn;
        base[2 * p + 1] = re * sn + im * cs;
      }
    }
  }
}

template void rope_apply<float>(const RopeTable&, float*, int64_t, int64_t, int64_t, const int64_t*,
                                bool);
template void rope_apply<double>(const RopeTable&, double*, int64_t, int64_t, int64_t,
                                 const int64_t*, bool);

}  // namespace trex::kernels
