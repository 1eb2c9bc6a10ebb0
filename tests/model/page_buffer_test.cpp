// Page-backed gradient buffers (model/page_buffer.hpp): released pages read
// zero and stop being resident, the values around them are kept, zeroing does
// not commit released pages, small buffers fall back to the heap.
#include "trex/model/page_buffer.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "trex/model/params.hpp"

namespace {

using trex::model::PageVector;
namespace page_memory = trex::model::page_memory;

TEST(PageBuffer, ReleasedPagesReadZeroAndLeaveResidency) {
  const size_t page = page_memory::page_size();
  const size_t per_page = page / sizeof(float);
  PageVector<float> v(64 * per_page);  // 64 pages, none written yet
  ASSERT_TRUE(page_memory::mapped(v.capacity() * sizeof(float)));
  const int64_t untouched = trex::model::resident_bytes(v);
  if (untouched < 0) GTEST_SKIP() << "mincore unsupported";
  EXPECT_EQ(untouched, 0);  // construction commits nothing
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) + 1.0f;
  EXPECT_EQ(trex::model::resident_bytes(v), static_cast<int64_t>(64 * page));

  // [begin, end) starts and ends inside a page: 10 whole pages in between.
  const int64_t begin = static_cast<int64_t>(5 * per_page + 7);
  const int64_t end = static_cast<int64_t>(16 * per_page + 3);
  EXPECT_EQ(trex::model::release_pages(v, begin, end), 10 * page);
  EXPECT_EQ(trex::model::resident_bytes(v), static_cast<int64_t>(54 * page));
  v[10 * per_page] = 2.0f;  // writing commits one page again
  EXPECT_EQ(trex::model::resident_bytes(v), static_cast<int64_t>(55 * page));
  // (Reading a released page maps the shared zero page, which mincore counts
  // as resident although it costs no memory: the checks above come first.)
  for (size_t i = 0; i < v.size(); ++i) {
    const bool whole_page = i >= 6 * per_page && i < 16 * per_page;
    const float want = i == 10 * per_page ? 2.0f
                       : whole_page       ? 0.0f
                                          : static_cast<float>(i % 1000) + 1.0f;
    ASSERT_EQ(v[i], want) << i;
  }
  // Less than a page: nothing to release.
  EXPECT_EQ(trex::model::release_pages(v, 3, static_cast<int64_t>(per_page)), 0u);
}

TEST(PageBuffer, ZeroingDoesNotCommitReleasedPages) {
  const size_t page = page_memory::page_size();
  const size_t per_page = page / sizeof(float);
  // Not a whole number of pages: the last page is partly outside the values.
  PageVector<float> v(40 * per_page + 100, 0.0f);
  for (float& x : v) x = 3.0f;
  trex::model::release_pages(v, static_cast<int64_t>(10 * per_page),
                             static_cast<int64_t>(30 * per_page));
  const int64_t before = trex::model::resident_bytes(v);
  trex::model::zero_pages(v);
  // Resident pages were written in place, the released ones stay released
  // (checked before reading, which would map the zero page).
  if (before >= 0) {
    EXPECT_EQ(before, static_cast<int64_t>(21 * page));
    EXPECT_EQ(trex::model::resident_bytes(v), before);
  }
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 0.0f) << i;

  // A small buffer lives on the heap: zeroing still works, release does nothing.
  PageVector<float> small(100, 5.0f);
  EXPECT_FALSE(page_memory::mapped(small.capacity() * sizeof(float)));
  EXPECT_EQ(trex::model::release_pages(small, 0, 100), 0u);
  EXPECT_EQ(small[50], 5.0f);
  trex::model::zero_pages(small);
  for (float x : small) ASSERT_EQ(x, 0.0f);
}

TEST(PageBuffer, ParamStoreGradientsZeroAndRelease) {
  std::vector<trex::model::ParamSpec> specs = {
      {"a", {300, 100}, trex::model::ParamRole::kDense, trex::model::OptimizerGroup::kMuon, 0, -1},
      {"b", {7}, trex::model::ParamRole::kDense, trex::model::OptimizerGroup::kAdamW, -1, -1}};
  trex::model::ParamStore<float> store(specs);
  for (float& g : store.grads()) g = 1.5f;
  store.release_grads(0, 30000);
  const size_t per_page = page_memory::page_size() / sizeof(float);
  EXPECT_EQ(store.grads()[per_page], 0.0f);  // inside: a whole page, released
  EXPECT_EQ(store.grads()[30000], 1.5f);     // outside the range: kept
  store.zero_grads();
  for (float g : store.grads()) ASSERT_EQ(g, 0.0f);
  // Copies and comparisons with plain vectors (tests snapshot gradients).
  const std::vector<float> snapshot = store.grads();
  EXPECT_TRUE(store.grads() == snapshot);
  store.grads() = std::vector<float>(snapshot.size(), 2.0f);
  EXPECT_EQ(store.grads()[5], 2.0f);
}

}  // namespace
