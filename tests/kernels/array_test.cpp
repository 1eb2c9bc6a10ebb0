// Array<T>: activation memory from a backend. A resize at the same size and
// backend keeps the memory (per-step reuse allocates nothing), any other size
// allocates afresh zero-filled, assign fills through the backend's fill op,
// and views carry the array's dtype, shape and device.
#include "trex/kernels/array.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/kernels/cpu/cpu_backend.hpp"

namespace trex::kernels {
namespace {

TEST(KernelArray, ResizeAtTheSameSizeKeepsTheMemoryAndItsContents) {
  const Backend& ops = cpu_backend();
  Array<float> a(6, ops);
  float* p = a.data();
  ASSERT_NE(p, nullptr);
  for (int64_t i = 0; i < 6; ++i) a[i] = static_cast<float>(i + 1);
  a.resize(6, ops);
  EXPECT_EQ(a.data(), p);
  EXPECT_EQ(std::vector<float>(a.begin(), a.end()), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(KernelArray, ResizeToAnotherSizeAllocatesZeroFilled) {
  const Backend& ops = cpu_backend();
  Array<double> a(4, ops);
  for (double& x : a) x = 7.0;
  a.resize(9, ops);
  ASSERT_EQ(a.size(), 9);
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(a[i], 0.0) << i;
  a.resize(0, ops);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.begin(), a.end());
}

TEST(KernelArray, AssignFillsEveryElementThroughTheBackend) {
  const Backend& ops = cpu_backend();
  Array<int64_t> selected;
  EXPECT_TRUE(selected.empty());
  selected.assign(5, -1, ops);
  EXPECT_EQ(std::vector<int64_t>(selected.begin(), selected.end()), std::vector<int64_t>(5, -1));
  selected[2] = 3;
  selected.assign(5, -1, ops);  // same size: refilled, not left as it was
  EXPECT_EQ(selected[2], -1);
  Array<int32_t> index;
  index.assign(3, 4, ops);
  EXPECT_EQ(std::vector<int32_t>(index.begin(), index.end()), (std::vector<int32_t>{4, 4, 4}));
  Array<float> f;
  f.assign(2, 2.5f, ops);
  EXPECT_EQ(std::vector<float>(f.begin(), f.end()), (std::vector<float>{2.5f, 2.5f}));
  Array<double> g;
  g.assign(2, -0.125, ops);
  EXPECT_EQ(std::vector<double>(g.begin(), g.end()), (std::vector<double>{-0.125, -0.125}));
}

TEST(KernelArray, ViewsCarryDtypeShapeAndDeviceWithinTheSize) {
  const Backend& ops = cpu_backend();
  Array<float> a(12, ops);
  const Tensor t = a.view({3, 4});
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.shape_string(), "[3, 4]");
  EXPECT_EQ(t.device(), ops.device());
  EXPECT_EQ(a.device(), ops.device());
  EXPECT_EQ(t.data<float>(), a.data());
  EXPECT_EQ(a.view({2, 3}).numel(), 6);  // a prefix
  EXPECT_THROW(a.view({13}), Error);
  EXPECT_EQ(Array<int64_t>(2, ops).view({2}).dtype(), DType::kI64);
  EXPECT_EQ(Array<int64_t>().view({0}).dtype(), DType::kI64);  // never allocated: empty, typed
}

TEST(KernelArray, FillRejectsAMissingOperand) {
  EXPECT_THROW(cpu_backend().fill(Tensor(), 0.0), Error);
}

}  // namespace
}  // namespace trex::kernels
