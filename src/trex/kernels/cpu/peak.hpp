#pragma once
// This machine's large-GEMM throughput through the engine's own GEMM path
// (kernels::gemm; bf16 includes the operand rounding the engine does): the
// denominator of every MFU T-Rex prints. Used by `trex bench peak` and by the
// trainer (short budget at start).
#include <cstdint>
#include <vector>

namespace trex::kernels {

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
