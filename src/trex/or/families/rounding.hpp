#pragma once
// Rounding of generated quantities to friendly steps ("a capacity of 85", not
// 83.7). The 1e-9 margins keep a value already on a step where it is, despite
// the error of the division.
namespace trex::orlib {

// The smallest multiple of `step` not below v.
double round_up(double v, double step);
// The largest multiple of `step` not above v.
double round_down(double v, double step);

}  // namespace trex::orlib
