#include "trex/train/grad_reducer.hpp"

#include <algorithm>
#include <map>

#include "trex/core/error.hpp"

namespace trex::train {

GradReducer::GradReducer(const std::vector<model::ParamSpec>& specs, dist::Communicator* data,
                         dist::Communicator* pp, std::vector<OptimizerShard> shards,
                         GradReducerOptions options)
    : data_(data), pp_(pp), shards_(std::move(shards)), options_(options) {
  if (options_.bucket_bytes < static_cast<int64_t>(sizeof(float)))
    throw Error("gradient bucket must hold at least one value").field("parallel.bucket_mb");
  // Each layer's tensors as maximal contiguous ranges (dense part, expert part).
  std::map<int64_t, std::vector<Range>, std::greater<>> by_layer;  // MTP, L−1..0, -1
  int64_t offset = 0;
  for (const model::ParamSpec& spec : specs) {
    const int64_t n = spec.numel();
    std::vector<Range>& ranges = by_layer[spec.layer];
    const bool expert = spec.role == model::ParamRole::kExpert;
    if (!ranges.empty() && ranges.back().end == offset && ranges.back().expert == expert)
      ranges.back().end += n;
    else
      ranges.push_back({offset, offset + n, expert});
    offset += n;
  }
  const int64_t bucket_elems = options_.bucket_bytes / static_cast<int64_t>(sizeof(float));
  for (const auto& [layer, ranges] : by_layer) {
    Group group;
    group.layer = layer;
    for (const Range& r : ranges)
      for (int64_t b = r.begin; b < r.end; b += bucket_elems)
        group.buckets.push_back({b, std::min(r.end, b + bucket_elems), r.expert});
    groups_.push_back(std::move(group));
  }
  reduced_ = {0, offset};
  if (options_.scatter && options_.experts)
    throw Error("ZeRO-2 gradient sharding with expert weights sharded over EP is not supported")
        .field("parallel.zero");
  options_.scatter = options_.scatter && active(data_) != nullptr;
  if (options_.scatter) {
    data_rank_ = data_->rank();
    if (static_cast<int>(shards_.size()) != data_->size())
      throw Error("ZeRO-2: " + std::to_string(shards_.size()) + " gradient shards for " +
                  std::to_string(data_->size()) + " data-parallel ranks")
          .field("parallel.zero");
    const OptimizerShard& mine = shards_[static_cast<size_t>(data_rank_)];
    reduced_ = {mine.begin, mine.end};
    shard_grads_.assign(static_cast<size_t>(mine.size()), 0.0f);
  }
}

dist::Communicator* GradReducer::active(dist::Communicator* comm) const {
  return comm != nullptr && comm->size() > 1 ? comm : nullptr;
}

int64_t GradReducer::bucket_count() const {
  int64_t count = 0;
  for (const Group& g : groups_) count += static_cast<int64_t>(g.buckets.size());
  return count;
}

void GradReducer::begin_step(float* grads, std::function<void(int64_t, int64_t)> prepare) {
  if (!pending_.empty()) throw Error("gradient reducer: a step is still in flight");
  grads_ = grads;
  prepare_ = std::move(prepare);
  started_early_ = 0;
  for (Group& g : groups_) g.started = false;
}

void GradReducer::on_gradients_ready(int64_t layer) {
  for (Group& g : groups_)
    if (g.layer == layer && !g.started) {
      start(g);
      started_early_ += 1;
    }
}

void GradReducer::start(Group& group) {
  group.started = true;
  for (const Range& bucket : group.buckets) {
    if (prepare_) prepare_(bucket.begin, bucket.end);
    dist::Communicator* data = active(bucket.expert && options_.experts ? options_.experts : data_);
    if (!data) continue;
    if (!options_.scatter) {
      pending_.push_back(data->iall_reduce(grads_ + bucket.begin, bucket.end - bucket.begin,
                                           dist::DType::kF32, dist::ReduceOp::kSum));
      continue;
    }
    // Rank r receives the part of the bucket inside its shard (shards are
    // contiguous and rank-ordered, so the blocks are rank-major in the bucket).
    std::vector<int64_t>& counts = pending_counts_.emplace_back(shards_.size(), 0);
    for (size_t r = 0; r < shards_.size(); ++r)
      counts[r] = std::max<int64_t>(
          0, std::min(bucket.end, shards_[r].end) - std::max(bucket.begin, shards_[r].begin));
    const OptimizerShard& mine = shards_[static_cast<size_t>(data_rank_)];
    const int64_t at = std::clamp(bucket.begin, mine.begin, mine.end) - mine.begin;
    pending_.push_back(data->ireduce_scatter(grads_ + bucket.begin, shard_grads_.data() + at,
                                             counts, dist::DType::kF32, dist::ReduceOp::kSum));
  }
}

void GradReducer::finish(float scale) {
  if (grads_ == nullptr) throw Error("gradient reducer: finish() without begin_step()");
  done_before_finish_ = 0;
  for (const dist::Request& r : pending_) done_before_finish_ += r.done() ? 1 : 0;
  for (Group& g : groups_)
    if (!g.started) start(g);
  dist::wait_all(pending_);
  pending_.clear();
  pending_counts_.clear();
  if (options_.scatter)
    std::copy(shard_grads_.begin(), shard_grads_.end(), grads_ + reduced_.begin);
  if (dist::Communicator* pp = active(pp_))
    pp->all_reduce(grads_ + reduced_.begin, reduced_.end - reduced_.begin, dist::DType::kF32,
                   dist::ReduceOp::kSum);
  if (scale != 1.0f)
    for (int64_t i = reduced_.begin; i < reduced_.end; ++i) grads_[i] *= scale;
  grads_ = nullptr;
  prepare_ = nullptr;
}

double shard_grad_norm_squared(const std::vector<model::ParamSpec>& specs,
                               const OptimizerShard& shard, const float* grads) {
  double sum = 0.0;
  int64_t offset = shard.begin;
  for (size_t i = shard.first_spec; i < shard.end_spec; ++i) {
    const int64_t n = specs[i].numel();
    if (specs[i].group != model::OptimizerGroup::kNotTrained)
      for (int64_t j = offset; j < offset + n; ++j) {
        const double x = grads[j];
        sum += x * x;
      }
    offset += n;
  }
  return sum;
}

void scale_shard_grads(const std::vector<model::ParamSpec>& specs, const OptimizerShard& shard,
                       float* grads, float scale) {
  int64_t offset = shard.begin;
  for (size_t i = shard.first_spec; i < shard.end_spec; ++i) {
    const int64_t n = specs[i].numel();
    if (specs[i].group != model::OptimizerGroup::kNotTrained)
      for (int64_t j = offset; j < offset + n; ++j) grads[j] *= scale;
    offset += n;
  }
}

}  // namespace trex::train
