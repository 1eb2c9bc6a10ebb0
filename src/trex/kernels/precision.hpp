#pragma once
// How a GEMM treats float operands: an argument of every GEMM and linear op,
// carried from the caller (the model's compute precision, the optimizer's
// options), never process-wide state.
namespace trex::kernels {

// kBF16: float operands rounded to bf16, products accumulated in fp32, fp32
// output. Double operands ignore it (finite-difference checks are exact).
enum class Precision { kF32, kBF16 };

const char* precision_name(Precision precision);  // "f32", "bf16"

}  // namespace trex::kernels
