#include "trex/kernels/cpu/peak.hpp"

#include <algorithm>
#include <array>
#include <chrono>

#include "trex/core/error.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::kernels {

std::vector<GemmMeasurement> measure_gemms(const std::vector<std::array<int64_t, 3>>& shapes,
                                           bool bf16, int repeats) {
  if (repeats < 1) throw Error("repeats must be >= 1").field("repeats");
  const Precision precision = bf16 ? Precision::kBF16 : Precision::kF32;
  std::vector<GemmMeasurement> out;
  for (const auto& [m, n, k] : shapes) {
    if (m <= 0 || n <= 0 || k <= 0) throw Error("GEMM shapes must be positive").field("shapes");
    // Deterministic, non-trivial operands (values do not affect timing).
    std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)),
        c(static_cast<size_t>(m * n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i % 13) * 0.01);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i % 7) * 0.02);
    auto run = [&] {
      gemm<float>(precision, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(),
                  n);
    };
    run();  // warm-up (primitive creation, caches)
    // Batch enough calls for ~2 ms so the clock resolution does not matter.
    auto t0 = std::chrono::steady_clock::now();
    run();
    const double once =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int batch = std::clamp(static_cast<int>(2e-3 / std::max(once, 1e-7)), 1, 10000);
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < batch; ++i) run();
      times.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / batch);
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    out.push_back({static_cast<double>(m), static_cast<double>(n), static_cast<double>(k),
                   times[times.size() / 2], bf16 ? 2.0 : 4.0});
  }
  return out;
}

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
  for (const auto& m : measure_gemms(shapes, bf16, repeats)) {
    PeakGemm g{static_cast<int64_t>(m.m), static_cast<int64_t>(m.n), static_cast<int64_t>(m.k),
               m.seconds, 2.0 * m.m * m.n * m.k / m.seconds / 1e9};
    out.peak_gflops = std::max(out.peak_gflops, g.gflops);
    out.gemms.push_back(g);
  }
  return out;
}

}  // namespace trex::kernels
