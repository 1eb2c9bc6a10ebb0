// The op layer's index bookkeeping (positions, index scans and counts, the
// MoE counting sort, attention key sets), host transfers and independent
// tasks: values worked out by hand, through the CPU backend.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/kernels/array.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/kernels/cpu/cpu_backend.hpp"

namespace trex::kernels {
namespace {

using I64 = std::vector<int64_t>;

const Backend& cpu() {
  return cpu_backend();
}

template <class T>
Tensor t(std::vector<T>& v, std::initializer_list<int64_t> shape) {
  return Tensor::of(v.data(), shape);
}

TEST(IndexOps, SequencePositionsRepeatEveryPeriodTimesTheStride) {
  I64 positions(7, -1);
  cpu().sequence_positions(t(positions, {7}), 3, 4);
  EXPECT_EQ(positions, (I64{0, 4, 8, 0, 4, 8, 0}));
  EXPECT_THROW(cpu().sequence_positions(t(positions, {7}), 0, 1), Error);
}

TEST(IndexOps, ScanCountsEntriesInRangeAndReportsTheFirstOutside) {
  // LM targets: negatives are "ignore", anything >= vocab is an error.
  I64 targets{-1, 2, 5, 0, 7, -100};
  IndexScan scan = cpu().scan_indices(t(targets, {6}), std::numeric_limits<int64_t>::min(), 5);
  EXPECT_EQ(scan.counted, 2);
  EXPECT_EQ(scan.first_bad, 2);
  EXPECT_EQ(scan.bad_value, 5);
  // Expert indices (I32): a negative entry is out of range.
  std::vector<int32_t> experts{1, 0, -1, 3};
  scan = cpu().scan_indices(t(experts, {4}), 0, 4);
  EXPECT_EQ(scan.counted, 3);
  EXPECT_EQ(scan.first_bad, 2);
  EXPECT_EQ(scan.bad_value, -1);
  std::vector<int32_t> good{1, 0, 3};
  scan = cpu().scan_indices(t(good, {3}), 0, 4);
  EXPECT_EQ(scan.counted, 3);
  EXPECT_EQ(scan.first_bad, -1);
}

TEST(IndexOps, CountIndicesIsAHistogramAndRejectsEntriesOutsideIt) {
  std::vector<int32_t> index{2, 0, 2, 1, 2};
  I64 counts(4, 99);
  cpu().count_indices(t(index, {5}), t(counts, {4}));
  EXPECT_EQ(counts, (I64{1, 1, 3, 0}));
  std::vector<int32_t> bad{0, 4};
  EXPECT_THROW(cpu().count_indices(t(bad, {2}), t(counts, {4})), Error);
}

TEST(IndexOps, CountingSortIsStableAndRankIsItsInverse) {
  std::vector<int32_t> keys{2, 0, 2, 1, 2, 0};
  I64 offsets(4), order(6), rank(6);
  cpu().counting_sort(t(keys, {6}), t(offsets, {4}), t(order, {6}), t(rank, {6}));
  EXPECT_EQ(offsets, (I64{0, 2, 3, 6}));
  EXPECT_EQ(order, (I64{1, 5, 3, 0, 2, 4}));
  EXPECT_EQ(rank, (I64{3, 0, 4, 2, 5, 1}));
}

// S = 8 tokens per sequence, a window of 3, compression ratio 2 with 4 blocks,
// 2 heads: token t sees min((t+1)/2, 4) compressed entries and min(t+1, 3)
// window keys.
AttentionKeySetDims key_dims(bool compressed) {
  AttentionKeySetDims dims;
  dims.core = {8, 3};
  dims.heads = 2;
  dims.ratio = 2;
  dims.blocks = 4;
  dims.compressed = compressed;
  return dims;
}

TEST(IndexOps, KeySetsOfACompressedLayerListEveryVisibleEntryOfTheSequence) {
  const int64_t N = 16;  // two sequences
  I64 comp_offsets(N + 1), prob_offsets(N + 1);
  const AttentionKeySetSizes sizes = cpu().attention_key_offsets(
      key_dims(true), Tensor(), t(comp_offsets, {N + 1}), t(prob_offsets, {N + 1}));
  EXPECT_EQ(I64(comp_offsets.begin(), comp_offsets.begin() + 9),
            (I64{0, 0, 1, 2, 4, 6, 9, 12, 16}));
  // 2 heads × (window + compressed): 2, 6, 8, 10, 10, 12, 12, 14 per token.
  EXPECT_EQ(I64(prob_offsets.begin(), prob_offsets.begin() + 9),
            (I64{0, 2, 8, 16, 26, 36, 48, 60, 74}));
  EXPECT_EQ(sizes.compressed_keys, 32);
  EXPECT_EQ(sizes.probabilities, 148);
  I64 comp_list(32, -1);
  cpu().attention_compressed_keys(key_dims(true), Tensor(), t(comp_offsets, {N + 1}),
                                  t(comp_list, {32}));
  // Row 11 = sequence 1, token 3: entries 0 and 1 of sequence 1 (rows 4, 5).
  EXPECT_EQ(I64(comp_list.begin() + comp_offsets[11], comp_list.begin() + comp_offsets[12]),
            (I64{4, 5}));
  EXPECT_EQ(I64(comp_list.begin(), comp_list.begin() + 4), (I64{0, 0, 0, 1}));

  // Without compression: window keys only.
  const AttentionKeySetSizes window = cpu().attention_key_offsets(
      key_dims(false), Tensor(), t(comp_offsets, {N + 1}), t(prob_offsets, {N + 1}));
  EXPECT_EQ(window.compressed_keys, 0);
  EXPECT_EQ(window.probabilities, 2 * 2 * (1 + 2 + 3 * 6));
}

TEST(IndexOps, KeySetsOfASelectionKeepItsOrderAndDropPads) {
  const int64_t N = 8, k = 2;
  I64 selected{-1, -1, 0, -1, 0, -1, 1, 0, -1, 1, 2, -1, 0, 2, 3, 1};
  EXPECT_EQ(cpu().first_invisible_selection(key_dims(true), t(selected, {N, k})), -1);
  I64 comp_offsets(N + 1), prob_offsets(N + 1);
  const AttentionKeySetSizes sizes = cpu().attention_key_offsets(
      key_dims(true), t(selected, {N, k}), t(comp_offsets, {N + 1}), t(prob_offsets, {N + 1}));
  EXPECT_EQ(comp_offsets, (I64{0, 0, 1, 2, 4, 5, 6, 8, 10}));
  EXPECT_EQ(sizes.compressed_keys, 10);
  EXPECT_EQ(prob_offsets.back(), 2 * (1 + 2 + 3 * 6) + 2 * 10);
  I64 comp_list(10, -1);
  cpu().attention_compressed_keys(key_dims(true), t(selected, {N, k}), t(comp_offsets, {N + 1}),
                                  t(comp_list, {10}));
  EXPECT_EQ(comp_list, (I64{0, 0, 1, 0, 1, 2, 0, 2, 3, 1}));

  // Token 1 sees one entry (0): selecting entry 1 there is the first invisible row.
  selected[2] = 1;
  EXPECT_EQ(cpu().first_invisible_selection(key_dims(true), t(selected, {N, k})), 1);
  // A comp_list of the wrong length is rejected.
  I64 short_list(3);
  EXPECT_THROW(cpu().attention_compressed_keys(key_dims(true), Tensor(), t(comp_offsets, {N + 1}),
                                               t(short_list, {3})),
               Error);
}

TEST(IndexOps, HostTransfersRoundTripThroughBackendMemory) {
  Array<int64_t> device;
  const I64 host{5, -3, 7};
  device.assign_from_host(host.data(), 3, cpu());
  EXPECT_EQ(device.backend(), &cpu());
  I64 back(3);
  cpu().copy_to_host(device.view({3}), back.data());
  EXPECT_EQ(back, host);
  EXPECT_THROW(cpu().copy_from_host(nullptr, device.view({3})), Error);
}

TEST(IndexOps, IndependentTasksAllRunAndTheFirstFailureInTaskOrderIsRethrown) {
  std::vector<std::atomic<int>> ran(6);
  try {
    cpu().run_independent(6, [&](int64_t i) {
      ++ran[static_cast<size_t>(i)];
      if (i == 4) throw Error("task four");
      if (i == 2) throw Error("task two");
    });
    FAIL() << "expected the tasks' error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("task two"), std::string::npos) << e.what();
  }
  for (const auto& r : ran) EXPECT_EQ(r.load(), 1);
}

TEST(IndexOps, OperandsOfTheWrongDtypeOrShapeAreRejectedByName) {
  I64 index64{0, 1};
  I64 counts(2), offsets(3), order(2), rank(1);
  try {
    cpu().count_indices(t(index64, {2}), t(counts, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "index") << e.what();
  }
  std::vector<int32_t> keys{0, 1};
  try {
    cpu().counting_sort(t(keys, {2}), t(offsets, {3}), t(order, {2}), t(rank, {1}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "rank") << e.what();
  }
  I64 selected(16);
  I64 comp_offsets(9), prob_offsets(9);
  try {  // a selection over a layer without compressed keys
    cpu().attention_key_offsets(key_dims(false), t(selected, {8, 2}), t(comp_offsets, {9}),
                                t(prob_offsets, {9}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "selected") << e.what();
  }
}

}  // namespace
}  // namespace trex::kernels
