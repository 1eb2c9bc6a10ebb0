#include "trex/kernels/cpu/peak.hpp"

#include <algorithm>
#include <array>

#include "trex/core/error.hpp"
#include "trex/plan/calibrate.hpp"

namespace trex::kernels {

PeakMeasurement measure_peak(bool bf16, const std::vector<int64_t>& sizes, int repeats) {
  if (repeats < 1) throw Error("repeats must be >= 1").field("repeats");
  std::vector<std::array<int64_t, 3>> shapes;
  for (int64_t s : sizes) {
    if (s <= 0) throw Error("GEMM sizes must be positive").field("sizes");
    shapes.push_back({s, s, s});
  }
  PeakMeasurement out;
  out.bf16 = bf16;
  out.repeats = repeats;
  for (const auto& m : plan::measure_gemms(shapes, bf16, repeats)) {
    PeakGemm g{static_cast<int64_t>(m.m), static_cast<int64_t>(m.n), static_cast<int64_t>(m.k),
               m.seconds, 2.0 * m.m * m.n * m.k / m.seconds / 1e9};
    out.peak_gflops = std::max(out.peak_gflops, g.gflops);
    out.gemms.push_back(g);
  }
  return out;
}

}  // namespace trex::kernels
