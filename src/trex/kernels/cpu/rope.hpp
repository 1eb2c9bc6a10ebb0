#pragma once
// Rotary position embedding, DeepSeek-V4 layout (spec §2.8): interleaved
// ("GPT-J"/complex) pairs on the LAST rope_dims dims of every vector — pair p is
// (dim−rope_dims+2p, dim−rope_dims+2p+1) rotated by pos·θ_p — with optional YaRN
// frequency interpolation (no attention-temperature / mscale correction).
#include <cstdint>
#include <optional>
#include <vector>

namespace trex::kernels {

struct YarnScaling {
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// cos/sin of pos·θ'_p for positions 0..positions−1 (row-major [positions, rope_dims/2]),
// computed in double; apply casts to T.
struct RopeTable {
  int64_t rope_dims = 0;
  int64_t positions = 0;
  double base = 0.0;
  // YaRN ramp bounds (pair indices); both 0 without YaRN.
  int64_t yarn_lo = 0;
  int64_t yarn_hi = 0;
  std::vector<double> inv_freq;  // θ'_p, p = 0..rope_dims/2−1
  std::vector<double> cos, sin;

  RopeTable() = default;
  // Throws trex::Error (field "rope_dims"/"base"/"positions"/"rope_scaling") on bad input.
  RopeTable(int64_t rope_dims, double base, int64_t positions,
            const std::optional<YarnScaling>& yarn = std::nullopt);
};

// YaRN correction range (spec §2.8): lo = floor(r·ln(L0/(β_fast·2π)) / (2 ln base)),
// hi = ceil(r·ln(L0/(β_slow·2π)) / (2 ln base)), both clamped to [0, r−1].
void yarn_correction_range(int64_t rope_dims, double base, const YarnScaling& yarn, int64_t* lo,
                           int64_t* hi);

// Rotates, in place, the last table.rope_dims dims of every vector of x. x holds
// `rows` rows of `vectors_per_row` contiguous vectors of `vector_dim` values; row r
// is at position positions[r] (must lie in [0, table.positions)). inverse = rotate
// by −pos·θ (the conjugate, which is also the backward of the forward rotation).
template <class T>
void rope_apply(const RopeTable& table, T* x, int64_t rows, int64_t vectors_per_row,
                int64_t vector_dim, const int64_t* positions, bool inverse);

}  // namespace trex::kernels
