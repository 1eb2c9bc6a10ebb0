#include "trex/parallel/grad_reducer.hpp"

#include <algorithm>
#include <map>

#include "trex/core/error.hpp"

namespace trex::parallel {

GradReducer::GradReducer(const std::vector<model::ParamSpec>& specs, Communicator* data,
                         Communicator* pp, ZeroPartition zero, GradReducerOptions options)
    : data_(data), pp_(pp), zero_(std::move(zero)), options_(options) {
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
  reduced_ = {{0, offset, false}};
  options_.scatter = options_.scatter && active(data_) != nullptr;
  if (options_.scatter) {
    const int expert_ranks = options_.experts ? options_.experts->size() : data_->size();
    if (static_cast<int>(zero_.dense.size()) != data_->size() ||
        static_cast<int>(zero_.expert.size()) != expert_ranks)
      throw Error("ZeRO-2: " + std::to_string(zero_.dense.size()) + " dense / " +
                  std::to_string(zero_.expert.size()) + " expert gradient shards for " +
                  std::to_string(data_->size()) + " data-parallel / " +
                  std::to_string(expert_ranks) + " expert-replica ranks")
          .field("parallel.zero");
    my_dense_ = zero_.dense[static_cast<size_t>(data_->rank())];
    my_expert_ = zero_.expert[static_cast<size_t>(options_.experts ? options_.experts->rank()
                                                                   : data_->rank())];
    reduced_ = {{my_dense_.begin, my_dense_.end, false}, {my_expert_.begin, my_expert_.end, true}};
    shard_grads_.resize(static_cast<size_t>(my_dense_.size() + my_expert_.size()));
  }
}

Communicator* GradReducer::active(Communicator* comm) const {
  return comm != nullptr && comm->size() > 1 ? comm : nullptr;
}

Communicator* GradReducer::comm_of(const Range& bucket) const {
  return active(bucket.expert && options_.experts ? options_.experts : data_);
}

const std::vector<OptimizerShard>& GradReducer::parts_of(const Range& bucket) const {
  return bucket.expert ? zero_.expert : zero_.dense;
}

int64_t GradReducer::shard_offset_of(const Range& bucket) const {
  const OptimizerShard& mine = bucket.expert ? my_expert_ : my_dense_;
  return (bucket.expert ? my_dense_.size() : 0) + std::clamp(bucket.begin, mine.begin, mine.end) -
         mine.begin;
}

int64_t GradReducer::bucket_count() const {
  int64_t count = 0;
  for (const Group& g : groups_) count += static_cast<int64_t>(g.buckets.size());
  return count;
}

void GradReducer::begin_step(float* grads, RangeFn released) {
  if (!pending_.empty() || armed_) throw Error("gradient reducer: a step is still in flight");
  grads_ = grads;
  released_ = std::move(released);
  started_early_ = 0;
  done_before_finish_ = 0;
  micro_batches_ = 0;
  model::zero_pages(shard_grads_);
}

void GradReducer::begin_micro_batch(RangeFn prepare) {
  if (grads_ == nullptr) throw Error("gradient reducer: begin_micro_batch() without begin_step()");
  if (armed_) throw Error("gradient reducer: the previous micro-batch is still in flight");
  if (micro_batches_ > 0 && !options_.scatter)
    throw Error("internal: without ZeRO-2 the gradients are reduced once per step");
  armed_ = true;
  prepare_ = std::move(prepare);
  for (Group& g : groups_) g.started = false;
}

void GradReducer::on_gradients_ready(int64_t layer) {
  if (!armed_) return;
  release_completed(false);
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
    Communicator* comm = comm_of(bucket);
    if (comm) limit_in_flight();
    if (!options_.scatter) {
      if (comm) {
        Pending& p = pending_.emplace_back();
        p.bucket = bucket;
        p.request = comm->iall_reduce(grads_ + bucket.begin, bucket.end - bucket.begin,
                                      parallel::DType::kF32, parallel::ReduceOp::kSum);
        ++running_;
      }
      continue;
    }
    // This rank's part of the bucket: its ZeRO range of the bucket's role.
    const OptimizerShard& mine = bucket.expert ? my_expert_ : my_dense_;
    const int64_t own_begin = std::clamp(bucket.begin, mine.begin, mine.end);
    const int64_t own_end = std::clamp(bucket.end, mine.begin, mine.end);
    float* shard = shard_grads_.data() + shard_offset_of(bucket);
    if (micro_batches_ > 0)  // Σ of the earlier micro-batches joins this rank's contribution
      for (int64_t j = own_begin; j < own_end; ++j) grads_[j] += shard[j - own_begin];
    if (!comm) {  // nothing to sum over (e.g. experts with dp = 1)
      std::copy(grads_ + own_begin, grads_ + own_end, shard);
      if (released_) released_(bucket.begin, bucket.end);
      continue;
    }
    // Rank r receives the part of the bucket inside its range (ranges are
    // contiguous and rank-ordered, so the blocks are rank-major in the bucket).
    const std::vector<OptimizerShard>& parts = parts_of(bucket);
    std::vector<int64_t> counts(parts.size(), 0);
    for (size_t r = 0; r < parts.size(); ++r)
      counts[r] = std::max<int64_t>(
          0, std::min(bucket.end, parts[r].end) - std::max(bucket.begin, parts[r].begin));
    Pending& p = pending_.emplace_back();
    ++running_;
    p.bucket = bucket;
    p.counts = std::move(counts);
    if (comm->equal_counts_only()) {
      p.padded =
          std::make_shared<PaddedReduceScatter>(*comm, grads_ + bucket.begin, shard, p.counts);
      p.request = p.padded->request();
    } else {
      p.request = comm->ireduce_scatter(grads_ + bucket.begin, shard, p.counts,
                                        parallel::DType::kF32, parallel::ReduceOp::kSum);
    }
  }
}

void GradReducer::limit_in_flight() {
  if (options_.max_in_flight <= 0) return;
  // Every rank starts the same buckets in the same order, so the oldest is
  // the one all of them reach first.
  while (running_ >= options_.max_in_flight) {
    while (pending_[oldest_].completed) ++oldest_;
    complete(pending_[oldest_]);
  }
}

void GradReducer::complete(Pending& p) {
  p.request.wait();
  p.completed = true;
  --running_;
  if (p.padded) p.padded->copy_out();
  if (options_.scatter && released_) released_(p.bucket.begin, p.bucket.end);
}

void GradReducer::release_completed(bool wait) {
  for (size_t i = oldest_; i < pending_.size(); ++i)
    if (!pending_[i].completed && (wait || pending_[i].request.done())) complete(pending_[i]);
}

void GradReducer::finish_micro_batch() {
  if (!armed_) throw Error("gradient reducer: finish_micro_batch() without begin_micro_batch()");
  for (const Pending& p : pending_) done_before_finish_ += p.request.done() ? 1 : 0;
  for (Group& g : groups_)
    if (!g.started) start(g);
  release_completed(true);
  pending_.clear();
  oldest_ = 0;
  armed_ = false;
  prepare_ = nullptr;
  micro_batches_ += 1;
}

void GradReducer::finish(float scale) {
  if (grads_ == nullptr) throw Error("gradient reducer: finish() without begin_step()");
  if (armed_) finish_micro_batch();
  if (options_.scatter) {
    move_out_of_shard(0, my_dense_.size(), grads_ + my_dense_.begin);
    move_out_of_shard(my_dense_.size(), my_expert_.size(), grads_ + my_expert_.begin);
  }
  for (const Range& r : reduced_) {
    if (r.end == r.begin) continue;  // the same on every stage of this rank's pipeline
    if (Communicator* pp = active(pp_))
      pp->all_reduce(grads_ + r.begin, r.end - r.begin, parallel::DType::kF32,
                     parallel::ReduceOp::kSum);
    if (scale != 1.0f)
      for (int64_t i = r.begin; i < r.end; ++i) grads_[i] *= scale;
  }
  grads_ = nullptr;
  released_ = nullptr;
}

// The buffer's ranges take over the step's gradient piece by piece, and the
// accumulator's pages go back behind the copy (until the next step writes
// them), so the update never holds this rank's gradient twice.
void GradReducer::move_out_of_shard(int64_t from, int64_t count, float* out) {
  constexpr int64_t kPiece = int64_t{4} << 20;  // values: 16 MiB
  for (int64_t done = 0; done < count; done += kPiece) {
    const int64_t n = std::min(kPiece, count - done);
    std::copy_n(shard_grads_.data() + from + done, n, out + done);
    model::release_pages(shard_grads_, from + done, from + done + n);
  }
}

int64_t GradReducer::shard_bytes() const {
  const int64_t resident = model::resident_bytes(shard_grads_);
  return resident >= 0 ? resident : static_cast<int64_t>(shard_grads_.size() * sizeof(float));
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

}  // namespace trex::parallel
