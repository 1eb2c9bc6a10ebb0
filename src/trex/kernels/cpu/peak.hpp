#pragma once
// This machine's large-GEMM throughput through the engine's own GEMM path
// (kernels::gemm; bf16 includes the operand rounding the engine does): the
// denominator of every MFU T-Rex prints. Used by `trex bench peak` and by the
// trainer (short budget at start).
#include <array>
#include <cstdint>
#include <vector>

namespace trex::kernels {

// One timed GEMM shape (element_bytes: 2 for bf16 operands, 4 for fp32); the
// planner's calibration fits its efficiency curve to these.
struct GemmMeasurement {
  double m = 0, n = 0, k = 0;
  double seconds = 0;  // one GEMM
  double element_bytes = 4;
};

// Times kernels::gemm<float> on each [m, n, k] shape: median of `repeats`
// batches of ~2 ms. Throws trex::Error on non-positive shapes or repeats.
std::vector<GemmMeasurement> measure_gemms(const std::vector<std::array<int64_t, 3>>& shapes,
                                           bool bf16, int repeats);

struct PeakGemm {
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0.0;  // median of the repeats
  double gflops = 0.0;
};

struct PeakMeasurement {
  bool bf16 = true;
  int repeats = 0;
  double peak_gflops = 0.0;  // the best size
  std::vector<PeakGemm> gemms;
};

// Times square GEMMs of the given sizes (median of `repeats`) and keeps the best.
// Throws trex::Error on non-positive sizes or repeats.
PeakMeasurement measure_peak(bool bf16, const std::vector<int64_t>& sizes, int repeats);

}  // namespace trex::kernels
