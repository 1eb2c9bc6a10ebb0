#pragma once
// `trex plan calibrate`: fit the GEMM efficiency curve of a cluster spec,
//   t(M,N,K) = max(2MNK / R, bytes / W) + launch,
// from timings — either measured here through kernels::gemm<float> (FP32 or
// BF16 operands) or read from a JSON file of measurements taken elsewhere.
// R / peak is the curve's `max`, W / HBM bandwidth its `memory`.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/kernels/cpu/peak.hpp"

namespace trex::plan {

using kernels::GemmMeasurement;
using kernels::measure_gemms;

struct GemmFit {
  double flops_per_s = 0;  // R: asymptotic achieved FLOP/s
  double bytes_per_s = 0;  // W: achieved memory bandwidth of memory-bound shapes
  double launch_s = 0;     // fixed cost per call
  double rms_log_error = 0;
  double predict(const GemmMeasurement& shape) const;
};

std::vector<std::array<int64_t, 3>> default_calibration_shapes();
// {"measurements": [{"m":..,"n":..,"k":..,"seconds":.., "element_bytes": 2}, ...]}
std::vector<GemmMeasurement> read_measurements(const std::string& path);
nlohmann::json measurements_json(const std::vector<GemmMeasurement>& measurements);
GemmFit fit_gemm_curve(const std::vector<GemmMeasurement>& measurements);

}  // namespace trex::plan
