#include "trex/plan/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "trex/core/error.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::plan {

namespace {

double shape_bytes(const GemmMeasurement& s) {
  return s.element_bytes * (s.m * s.k + s.k * s.n) + 4 * s.m * s.n;
}

double objective(const std::vector<GemmMeasurement>& ms, const GemmFit& f) {
  double sum = 0;
  for (const GemmMeasurement& s : ms) {
    const double r = std::log(f.predict(s) / s.seconds);
    sum += r * r;
  }
  return sum;
}

}  // namespace

double GemmFit::predict(const GemmMeasurement& s) const {
  return std::max(2 * s.m * s.n * s.k / flops_per_s, shape_bytes(s) / bytes_per_s) + launch_s;
}

std::vector<std::array<int64_t, 3>> default_calibration_shapes() {
  std::vector<std::array<int64_t, 3>> shapes;
  for (int64_t m : {8, 32, 128, 512})
    for (int64_t nk : {128, 512}) shapes.push_back({m, nk, nk});
  shapes.push_back({256, 1024, 512});
  shapes.push_back({1024, 256, 1024});
  return shapes;
}

std::vector<GemmMeasurement> measure_gemms(const std::vector<std::array<int64_t, 3>>& shapes,
                                           bool bf16, int repeats) {
  require(repeats >= 1, "repeats must be >= 1");
  const kernels::Precision precision = bf16 ? kernels::Precision::kBF16 : kernels::Precision::kF32;
  std::vector<GemmMeasurement> out;
  for (const auto& [m, n, k] : shapes) {
    require(m > 0 && n > 0 && k > 0, "GEMM shapes must be positive");
    // Deterministic, non-trivial operands (values do not affect timing).
    std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)),
        c(static_cast<size_t>(m * n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i % 13) * 0.01);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i % 7) * 0.02);
    auto run = [&] {
      kernels::gemm<float>(precision, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                           c.data(), n);
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

std::vector<GemmMeasurement> read_measurements(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open measurements").file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e999
    throw Error(std::string("invalid JSON: ") + e.what()).file(path);
  }
  if (!j.is_object() || !j.contains("measurements") || !j["measurements"].is_array())
    throw Error("expected an array").file(path).field("measurements");
  std::vector<GemmMeasurement> out;
  size_t i = 0;
  for (const auto& row : j["measurements"]) {
    const std::string where = "measurements[" + std::to_string(i++) + "]";
    GemmMeasurement s;
    for (auto [key, dst] : {std::pair<const char*, double*>{"m", &s.m},
                            {"n", &s.n},
                            {"k", &s.k},
                            {"seconds", &s.seconds}}) {
      if (!row.is_object() || !row.contains(key) || !row[key].is_number() ||
          !(row[key].get<double>() > 0))
        throw Error("missing or non-positive number").file(path).field(where + "." + key);
      *dst = row[key].get<double>();
    }
    if (row.contains("element_bytes")) {
      if (!row["element_bytes"].is_number() || !(row["element_bytes"].get<double>() > 0))
        throw Error("must be a positive number").file(path).field(where + ".element_bytes");
      s.element_bytes = row["element_bytes"].get<double>();
    }
    out.push_back(s);
  }
  if (out.size() < 3) throw Error("need at least 3 measurements to fit").file(path);
  return out;
}

nlohmann::json measurements_json(const std::vector<GemmMeasurement>& ms) {
  nlohmann::json rows = nlohmann::json::array();
  for (const GemmMeasurement& s : ms)
    rows.push_back({{"m", s.m},
                    {"n", s.n},
                    {"k", s.k},
                    {"seconds", s.seconds},
                    {"element_bytes", s.element_bytes}});
  return {{"measurements", rows}};
}

GemmFit fit_gemm_curve(const std::vector<GemmMeasurement>& ms) {
  require(ms.size() >= 3, "need at least 3 measurements to fit");
  // Start from the best achieved rates and a launch cost below the fastest call.
  GemmFit f;
  double fastest = ms[0].seconds;
  for (const GemmMeasurement& s : ms) {
    require(s.seconds > 0 && s.m > 0 && s.n > 0 && s.k > 0, "measurements must be positive");
    f.flops_per_s = std::max(f.flops_per_s, 2 * s.m * s.n * s.k / s.seconds);
    f.bytes_per_s = std::max(f.bytes_per_s, shape_bytes(s) / s.seconds);
    fastest = std::min(fastest, s.seconds);
  }
  f.launch_s = 0.1 * fastest;
  // Pattern search in log space (launch: relative to the fastest call).
  double step = 1.0;
  double best = objective(ms, f);
  while (step > 1e-4) {
    bool improved = false;
    for (int p = 0; p < 3; ++p) {
      for (double dir : {1.0, -1.0}) {
        GemmFit g = f;
        double& v = p == 0 ? g.flops_per_s : p == 1 ? g.bytes_per_s : g.launch_s;
        v = p == 2 ? std::clamp(v * std::exp(dir * step), 1e-12, fastest)
                   : v * std::exp(dir * step);
        const double o = objective(ms, g);
        if (o < best) {
          best = o, f = g, improved = true;
        }
      }
    }
    if (!improved) step *= 0.5;
  }
  f.rms_log_error = std::sqrt(best / static_cast<double>(ms.size()));
  return f;
}

}  // namespace trex::plan
