#include "trex/parallel/pipeline.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <memory>
#include <sstream>

#include "trex/core/error.hpp"

namespace trex::parallel {
namespace {

Error pipeline_error(const std::string& message) {
  return std::move(Error("pipeline: " + message).field("pipeline"));
}

// A micro-batch index as one character (0-9, then a-z, then '+').
char micro_batch_char(int m) {
  if (m < 10) return static_cast<char>('0' + m);
  if (m < 36) return static_cast<char>('a' + (m - 10));
  return '+';
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Buffers of one step's transfers: the inputs received (or handed over) per
// (micro-batch, chunk) and the outputs being sent.
template <class T>
struct Transfers {
  struct PendingSend {
    Request request;
    std::vector<T> data;
  };
  std::vector<std::vector<T>> forward_in, backward_in;
  std::deque<PendingSend> sends;
};

}  // namespace

const char* pipeline_schedule_name(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::k1F1B ? "1f1b" : "dualpipev";
}

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  std::string lower = name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "1f1b") return PipelineSchedule::k1F1B;
  if (lower == "dualpipev") return PipelineSchedule::kDualPipeV;
  throw Error("unknown pipeline schedule \"" + name + "\" (expected 1f1b or dualpipev)")
      .field("pipeline_schedule");
}

std::vector<std::pair<int64_t, int64_t>> partition_layers(int64_t layers, int parts) {
  if (parts < 1 || layers < 0)
    throw pipeline_error("cannot cut layers into " + std::to_string(parts) + " parts");
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t first = 0;
  for (int i = 0; i < parts; ++i) {
    const int64_t size = layers / parts + (i < layers % parts ? 1 : 0);
    ranges.emplace_back(first, first + size);
    first += size;
  }
  return ranges;
}

PipelinePlan make_pipeline_plan(PipelineSchedule schedule, int stages, int micro_batches,
                                int64_t num_layers, std::span<const int64_t> layers_per_chunk) {
  const int P = stages, N = micro_batches;
  if (P < 1) throw pipeline_error("pp must be at least 1, got " + std::to_string(P));
  if (N < 1) throw pipeline_error("needs at least one micro-batch");
  const bool dual = schedule == PipelineSchedule::kDualPipeV;
  if (dual && N < 2 * P)
    throw pipeline_error("DualPipeV needs at least 2·pp = " + std::to_string(2 * P) +
                         " micro-batches per step, got " + std::to_string(N));
  const int C = dual ? 2 * P : P;
  // Tags name (micro-batch, chunk, direction); MPI guarantees tags up to 32767.
  if (2 * static_cast<int64_t>(N) * C > 32768)
    throw pipeline_error(std::to_string(N) + " micro-batches over " + std::to_string(C) +
                         " chunks need more than 32768 message tags");
  std::vector<std::pair<int64_t, int64_t>> ranges;
  if (layers_per_chunk.empty()) {
    if (num_layers < C)
      throw pipeline_error(std::string(pipeline_schedule_name(schedule)) + " with pp=" +
                           std::to_string(P) + " cuts the model into " + std::to_string(C) +
                           " chunks but it has only " + std::to_string(num_layers) + " layers");
    ranges = partition_layers(num_layers, C);
  } else {
    const std::string what = std::string(pipeline_schedule_name(schedule)) +
                             " with pp=" + std::to_string(P) + " has " + std::to_string(C) +
                             " chunks";
    if (static_cast<int>(layers_per_chunk.size()) != C)
      throw Error(what + "; pipeline_layers lists " + std::to_string(layers_per_chunk.size()))
          .field("parallel.pipeline_layers");
    int64_t first = 0;
    for (int64_t count : layers_per_chunk) {
      if (count < 0)
        throw Error("pipeline_layers: a chunk cannot have " + std::to_string(count) + " layers")
            .field("parallel.pipeline_layers");
      ranges.emplace_back(first, first + count);
      first += count;
    }
    if (first != num_layers)
      throw Error("pipeline_layers sums to " + std::to_string(first) + " layers; the model has " +
                  std::to_string(num_layers))
          .field("parallel.pipeline_layers");
  }
  PipelinePlan plan;
  plan.schedule = schedule;
  plan.stages = P;
  plan.micro_batches = N;
  for (int c = 0; c < C; ++c) {
    plan.chunks.push_back({ranges[c].first, ranges[c].second, c == 0, c == C - 1});
    plan.chunk_rank.push_back(c < P ? c : 2 * P - 1 - c);
  }
  plan.programs.resize(static_cast<size_t>(P));
  if (!dual) {
    for (int s = 0; s < P; ++s) {
      std::vector<PipeAction>& program = plan.programs[s];
      int f = 0, b = 0;
      const int warm_up = std::min(P - s - 1, N);
      for (int i = 0; i < warm_up; ++i) program.push_back({PipeOp::kForward, f++, s});
      while (f < N) {
        program.push_back({PipeOp::kForward, f++, s});
        program.push_back({PipeOp::kBackward, b++, s});
      }
      while (b < N) program.push_back({PipeOp::kBackward, b++, s});
    }
    return plan;
  }
  // DualPipeV per rank (anchors §5.5). Phase 0 is the rank's chunk on the way
  // down (r), phase 1 the one on the way back (2P−1−r); each phase takes its
  // micro-batches in order. The zero-bubble split (B*, W) is not used: a
  // backward computes input and weight gradients at once, so "B* W" is one B
  // and the W-only steps vanish.
  for (int r = 0; r < P; ++r) {
    std::vector<PipeAction>& program = plan.programs[r];
    const int chunk0 = r, chunk1 = 2 * P - 1 - r;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    auto F0 = [&] { program.push_back({PipeOp::kForward, f0++, chunk0}); };
    auto F1 = [&] { program.push_back({PipeOp::kForward, f1++, chunk1}); };
    auto B0 = [&] { program.push_back({PipeOp::kBackward, b0++, chunk0}); };
    auto B1 = [&] { program.push_back({PipeOp::kBackward, b1++, chunk1}); };
    for (int i = 0; i < (P - r - 1) * 2; ++i) F0();  // 1. warm-up down the V
    for (int i = 0; i < r + 1; ++i) F0(), F1();      // 2.
    for (int i = 0; i < P - r - 1; ++i) B1(), F1();  // 3. (B1* W F1)
    for (int i = 0; i < N - 2 * P + r + 1; ++i) {    // 4. main phase: F0&B1, F1&B0
      F0(), B1();
      F1(), B0();
    }
    for (int i = 0; i < P - r - 1; ++i) B1(), F1(), B0();  // 5. B1, F1&B0
    for (int i = 0; i < r + 1; ++i) B1(), B0();            // 6.
    for (int i = 0; i < P - r - 1; ++i) B0();              // 7. (W B0*)
  }
  return plan;
}

std::vector<model::StageSpec> chunks_of_rank(PipelineSchedule schedule, int stages,
                                             int64_t num_layers, int rank,
                                             std::span<const int64_t> layers_per_chunk) {
  // The chunks do not depend on the number of micro-batches: any valid one.
  const PipelinePlan plan =
      make_pipeline_plan(schedule, stages, 2 * stages, num_layers, layers_per_chunk);
  std::vector<model::StageSpec> mine;
  for (int c = 0; c < plan.num_chunks(); ++c)
    if (plan.chunk_rank[static_cast<size_t>(c)] == rank)
      mine.push_back(plan.chunks[static_cast<size_t>(c)]);
  return mine;
}

ScheduleTimeline simulate_schedule(const PipelinePlan& plan, double forward_cost,
                                   double backward_cost) {
  const int P = plan.stages, N = plan.micro_batches, C = plan.num_chunks();
  if (static_cast<int>(plan.programs.size()) != P || static_cast<int>(plan.chunk_rank.size()) != C)
    throw pipeline_error("plan has " + std::to_string(plan.programs.size()) + " programs for " +
                         std::to_string(P) + " stages");
  // Every (op, micro-batch, chunk) exactly once, on the chunk's rank.
  std::vector<int> seen(static_cast<size_t>(2 * N * C), 0);
  for (int r = 0; r < P; ++r)
    for (const PipeAction& a : plan.programs[r]) {
      if (a.micro_batch < 0 || a.micro_batch >= N || a.chunk < 0 || a.chunk >= C)
        throw pipeline_error("rank " + std::to_string(r) + " has an action outside the plan");
      if (plan.chunk_rank[a.chunk] != r)
        throw pipeline_error("rank " + std::to_string(r) + " runs chunk " +
                             std::to_string(a.chunk) + " which lives on rank " +
                             std::to_string(plan.chunk_rank[a.chunk]));
      ++seen[(a.micro_batch * C + a.chunk) * 2 + (a.op == PipeOp::kBackward)];
    }
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1)
      throw pipeline_error(std::string(i % 2 ? "backward" : "forward") + " of micro-batch " +
                           std::to_string(i / 2 / C) + ", chunk " + std::to_string(i / 2 % C) +
                           " runs " + std::to_string(seen[i]) + " times");

  ScheduleTimeline out;
  out.ranks.resize(static_cast<size_t>(P));
  std::vector<double> forward_end(static_cast<size_t>(N * C), -1.0),
      backward_end(static_cast<size_t>(N * C), -1.0), rank_free(static_cast<size_t>(P), 0.0),
      busy(static_cast<size_t>(P), 0.0);
  std::vector<size_t> next(static_cast<size_t>(P), 0);
  // Each rank runs its program in order; an action starts when its inputs
  // exist. Start times depend only on the dependencies, so the ranks can be
  // advanced in any order.
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int r = 0; r < P; ++r) {
      const std::vector<PipeAction>& program = plan.programs[r];
      while (next[r] < program.size()) {
        const PipeAction& a = program[next[r]];
        const int id = a.micro_batch * C + a.chunk;
        double ready = 0.0;
        if (a.op == PipeOp::kForward) {
          if (a.chunk > 0) ready = forward_end[id - 1];
        } else {
          ready = forward_end[id];
          if (a.chunk + 1 < C) {
            const double upstream = backward_end[id + 1];  // the gradient of this chunk's output
            ready = ready < 0 || upstream < 0 ? -1.0 : std::max(ready, upstream);
          }
        }
        if (ready < 0) break;
        const double cost = a.op == PipeOp::kForward ? forward_cost : backward_cost;
        const double start = std::max(rank_free[r], ready), end = start + cost;
        (a.op == PipeOp::kForward ? forward_end : backward_end)[id] = end;
        rank_free[r] = end;
        busy[r] += cost;
        out.ranks[r].push_back({a, start, end});
        ++next[r];
        progressed = true;
      }
    }
  }
  for (int r = 0; r < P; ++r)
    if (next[r] < plan.programs[r].size()) {
      const PipeAction& a = plan.programs[r][next[r]];
      throw pipeline_error("deadlock: rank " + std::to_string(r) + " waits forever at " +
                           (a.op == PipeOp::kForward ? "forward" : "backward") +
                           " of micro-batch " + std::to_string(a.micro_batch) + ", chunk " +
                           std::to_string(a.chunk));
    }
  for (int r = 0; r < P; ++r) out.makespan = std::max(out.makespan, rank_free[r]);
  for (int r = 0; r < P; ++r)
    out.bubble_fraction.push_back(out.makespan > 0 ? 1.0 - busy[r] / out.makespan : 0.0);
  return out;
}

std::string describe_schedule(const PipelinePlan& plan) {
  const ScheduleTimeline timeline = simulate_schedule(plan, 1.0, 2.0);
  const int P = plan.stages, C = plan.num_chunks();
  std::ostringstream s;
  s << (plan.schedule == PipelineSchedule::k1F1B ? "1F1B" : "DualPipeV") << ": pp=" << P << ", "
    << plan.micro_batches << " micro-batches, " << C << " chunks:";
  for (int c = 0; c < C; ++c) {
    const model::StageSpec& spec = plan.chunks[c];
    s << " " << c << "=[" << spec.first_layer << "," << spec.last_layer << ")";
    if (spec.has_embedding) s << "+embed";
    if (spec.has_head) s << "+head+mtp";
    s << "@r" << plan.chunk_rank[c];
  }
  s << "\none column = one forward (a backward takes two); F/B = forward/backward of the rank's "
       "first chunk, f/b = of its second; digit = micro-batch; . = idle\n";
  const int columns = static_cast<int>(std::lround(timeline.makespan));
  for (int r = 0; r < P; ++r) {
    std::string row(static_cast<size_t>(columns) * 3, ' ');
    for (int t = 0; t < columns; ++t) row[static_cast<size_t>(t) * 3 + 1] = '.';
    const int first_chunk = r;  // the rank's chunk of lowest index
    for (const TimedAction& ta : timeline.ranks[r]) {
      const bool second = ta.action.chunk != first_chunk;
      char op = ta.action.op == PipeOp::kForward ? 'F' : 'B';
      if (second) op = static_cast<char>(op - 'A' + 'a');
      for (int t = static_cast<int>(std::lround(ta.start));
           t < static_cast<int>(std::lround(ta.end)); ++t) {
        row[static_cast<size_t>(t) * 3] = op;
        row[static_cast<size_t>(t) * 3 + 1] = micro_batch_char(ta.action.micro_batch);
      }
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    char label[32];
    std::snprintf(label, sizeof(label), "rank %d | ", r);
    s << label << row << "\n";
  }
  s << "ideal bubble (idle / total):";
  for (int r = 0; r < P; ++r) {
    char v[32];
    std::snprintf(v, sizeof(v), " rank %d %.3f", r, timeline.bubble_fraction[r]);
    s << v;
  }
  s << "\n";
  return s.str();
}

template <class T>
BasicPipelineRunner<T>::BasicPipelineRunner(model::Model<T>& model, Communicator& pp,
                                            PipelineSchedule schedule,
                                            std::vector<int64_t> layers_per_chunk)
    : model_(model), pp_(pp), schedule_(schedule), layers_per_chunk_(std::move(layers_per_chunk)) {}

template <class T>
const PipelinePlan& BasicPipelineRunner<T>::plan(int micro_batches) {
  if (plan_.micro_batches != micro_batches || plan_.programs.empty())
    plan_ = make_pipeline_plan(schedule_, pp_.size(), micro_batches,
                               model_.config().num_hidden_layers, layers_per_chunk_);
  return plan_;
}

template <class T>
model::LossBreakdown BasicPipelineRunner<T>::forward_only(const model::Batch& batch,
                                                          const model::LossOptions& loss,
                                                          const model::StepOptions& step) {
  require(!step.backward, "pipeline: forward_only runs no backward (StepOptions::backward)");
  const PipelinePlan& pl = plan(std::max(plan_.micro_batches, 2 * pp_.size()));
  const int C = pl.num_chunks(), rank = pp_.rank();
  const int64_t activation = model_.stage_activation_size(batch);
  std::vector<T> x, y;
  double head[4] = {0.0, 0.0, 0.0, 0.0};  // lm, mtp, lm_tokens, mtp_tokens
  for (int c = 0; c < C; ++c) {
    if (pl.chunk_rank[c] != rank) continue;
    const model::StageSpec& spec = pl.chunks[c];
    if (c > 0 && pl.chunk_rank[c - 1] != rank) {
      x.resize(static_cast<size_t>(activation));
      pp_.irecv(x.data(), activation, parallel::dtype_of<T>(), pl.chunk_rank[c - 1], 2 * c).wait();
    }
    y.assign(spec.has_head ? 0 : static_cast<size_t>(activation), T(0));
    model::StageCache<T> cache;
    const model::LossBreakdown part =
        model_.forward_stage(spec, batch, loss, step, 1.0, spec.has_embedding ? nullptr : x.data(),
                             spec.has_head ? nullptr : y.data(), cache);
    if (spec.has_head) {
      head[0] = part.lm;
      head[1] = part.mtp;
      head[2] = static_cast<double>(part.lm_tokens);
      head[3] = static_cast<double>(part.mtp_tokens);
      continue;
    }
    if (pl.chunk_rank[c + 1] == rank) {
      x.swap(y);
    } else {
      pp_.isend(y.data(), activation, parallel::dtype_of<T>(), pl.chunk_rank[c + 1], 2 * (c + 1))
          .wait();
    }
  }
  pp_.all_reduce(std::span<double>(head, 4));
  model::LossBreakdown out;
  out.lm = head[0];
  out.mtp = head[1];
  out.lm_tokens = static_cast<int64_t>(std::llround(head[2]));
  out.mtp_tokens = static_cast<int64_t>(std::llround(head[3]));
  out.total = out.lm + loss.mtp_weight * out.mtp;
  return out;
}

template <class T>
PipelineResult BasicPipelineRunner<T>::run(std::span<const model::Batch> micro_batches,
                                           const model::LossOptions& loss,
                                           const model::StepOptions& step) {
  require(step.backward, "pipeline: the runner trains (StepOptions::backward must be true)");
  const int N = static_cast<int>(micro_batches.size());
  const PipelinePlan& pl = plan(N);
  const int C = pl.num_chunks(), rank = pp_.rank();
  const std::vector<PipeAction>& program = pl.programs[rank];
  const auto start = std::chrono::steady_clock::now();

  std::vector<int64_t> activation(static_cast<size_t>(N));
  std::vector<double> weight(static_cast<size_t>(N));
  for (int m = 0; m < N; ++m) {
    activation[m] = model_.stage_activation_size(micro_batches[m]);
    weight[m] = static_cast<double>(model_.count_lm_targets(micro_batches[m]));
  }
  // Per (micro-batch, chunk): the forward's input, the backward's output
  // gradient (received or handed over by this rank's neighbouring chunk), and
  // the chunk's activations between its forward and backward.
  auto slot = [C](int m, int c) { return static_cast<size_t>(m * C + c); };
  auto transfers = std::make_unique<Transfers<T>>();
  std::vector<std::vector<T>>& forward_in = transfers->forward_in;
  std::vector<std::vector<T>>& backward_in = transfers->backward_in;
  forward_in.resize(static_cast<size_t>(N * C));
  backward_in.resize(static_cast<size_t>(N * C));
  std::vector<Request> forward_recv(static_cast<size_t>(N * C)),
      backward_recv(static_cast<size_t>(N * C));
  std::vector<model::StageCache<T>> caches(static_cast<size_t>(N * C));
  // A tag names the receiving (micro-batch, chunk, direction).
  auto tag = [C](int m, int c, PipeOp op) { return (m * C + c) * 2 + (op == PipeOp::kBackward); };
  using PendingSend = typename Transfers<T>::PendingSend;
  std::deque<PendingSend>& sends = transfers->sends;
  auto send = [&](std::vector<T>&& data, int dest, int t) {
    sends.push_back({Request(), std::move(data)});
    PendingSend& p = sends.back();
    p.request = pp_.isend(p.data.data(), static_cast<int64_t>(p.data.size()),
                          parallel::dtype_of<T>(), dest, t);
    // Completed sends release their buffers (FIFO: sends complete roughly in order).
    while (!sends.empty() && sends.front().request.done()) sends.pop_front();
  };
  // Receives are posted a few actions ahead so that they are waiting when the
  // neighbour's send arrives.
  auto post_receive = [&](const PipeAction& a) {
    const int m = a.micro_batch, c = a.chunk;
    if (a.op == PipeOp::kForward) {
      if (c == 0 || pl.chunk_rank[c - 1] == rank) return;
      forward_in[slot(m, c)].resize(static_cast<size_t>(activation[m]));
      forward_recv[slot(m, c)] =
          pp_.irecv(forward_in[slot(m, c)].data(), activation[m], parallel::dtype_of<T>(),
                    pl.chunk_rank[c - 1], tag(m, c, a.op));
    } else {
      if (c == C - 1 || pl.chunk_rank[c + 1] == rank) return;
      backward_in[slot(m, c)].resize(static_cast<size_t>(activation[m]));
      backward_recv[slot(m, c)] =
          pp_.irecv(backward_in[slot(m, c)].data(), activation[m], parallel::dtype_of<T>(),
                    pl.chunk_rank[c + 1], tag(m, c, a.op));
    }
  };
  size_t posted = 0;
  std::vector<model::LossBreakdown> parts(static_cast<size_t>(N));
  double busy = 0.0;
  try {
    for (size_t i = 0; i < program.size(); ++i) {
      for (; posted < std::min(program.size(), i + 1 + kPipelineReceiveLookahead); ++posted)
        post_receive(program[posted]);
      const PipeAction& a = program[i];
      const int m = a.micro_batch, c = a.chunk;
      const model::StageSpec& spec = pl.chunks[c];
      if (a.op == PipeOp::kForward) {
        forward_recv[slot(m, c)].wait();
        std::vector<T> out(spec.has_head ? 0 : static_cast<size_t>(activation[m]));
        const auto t0 = std::chrono::steady_clock::now();
        model::LossBreakdown part =
            model_.forward_stage(spec, micro_batches[m], loss, step, weight[m],
                                 spec.has_embedding ? nullptr : forward_in[slot(m, c)].data(),
                                 spec.has_head ? nullptr : out.data(), caches[slot(m, c)]);
        busy += seconds_since(t0);
        // Merge this chunk's part of the micro-batch's breakdown.
        model::LossBreakdown& acc = parts[m];
        acc.balance += part.balance;
        acc.indexer += part.indexer;
        if (spec.has_head) {
          acc.lm = part.lm;
          acc.mtp = part.mtp;
          acc.lm_tokens = part.lm_tokens;
          acc.mtp_tokens = part.mtp_tokens;
        }
        if (acc.expert_load.size() < part.expert_load.size())
          acc.expert_load.resize(part.expert_load.size());
        for (size_t l = 0; l < part.expert_load.size(); ++l)
          if (!part.expert_load[l].empty()) acc.expert_load[l] = std::move(part.expert_load[l]);
        std::vector<T>().swap(forward_in[slot(m, c)]);
        if (!spec.has_head) {
          if (pl.chunk_rank[c + 1] == rank) {
            forward_in[slot(m, c + 1)] = std::move(out);
          } else {
            send(std::move(out), pl.chunk_rank[c + 1], tag(m, c + 1, PipeOp::kForward));
          }
        }
      } else {
        backward_recv[slot(m, c)].wait();
        std::vector<T> d_in(spec.has_embedding ? 0 : static_cast<size_t>(activation[m]));
        const auto t0 = std::chrono::steady_clock::now();
        model_.backward_stage(caches[slot(m, c)],
                              spec.has_head ? nullptr : backward_in[slot(m, c)].data(),
                              spec.has_embedding ? nullptr : d_in.data());
        busy += seconds_since(t0);
        caches[slot(m, c)].clear();
        std::vector<T>().swap(backward_in[slot(m, c)]);
        if (!spec.has_embedding) {
          if (pl.chunk_rank[c - 1] == rank) {
            backward_in[slot(m, c - 1)] = std::move(d_in);
          } else {
            send(std::move(d_in), pl.chunk_rank[c - 1], tag(m, c - 1, PipeOp::kBackward));
          }
        }
      }
    }
    for (PendingSend& p : sends) p.request.wait();
    sends.clear();
  } catch (...) {
    // Receives posted ahead and sends not yet completed may still write into or
    // read from these buffers: leak them rather than free memory the
    // communication thread still uses. The pipeline is broken (the other ranks
    // wait for this one); the caller is expected to abort the job.
    bool in_flight = false;
    for (const Request& r : forward_recv) in_flight = in_flight || !r.done();
    for (const Request& r : backward_recv) in_flight = in_flight || !r.done();
    for (const PendingSend& p : sends) in_flight = in_flight || !p.request.done();
    if (in_flight) static_cast<void>(transfers.release());
    throw;
  }

  PipelineResult result;
  result.step_seconds = seconds_since(start);
  // Every rank contributes the parts of its chunks (zeros elsewhere); the sum
  // over the pipeline is each micro-batch's whole breakdown on every rank.
  const model::ModelConfig& cfg = model_.config();
  const int64_t blocks = cfg.num_hidden_layers + cfg.num_nextn_predict_layers,
                E = cfg.n_routed_experts;
  constexpr int kFields = 7;  // lm, mtp, balance, indexer, lm_tokens, mtp_tokens, blocks
  std::vector<double> scalars(static_cast<size_t>(N * kFields), 0.0);
  std::vector<int64_t> loads(static_cast<size_t>(N * blocks * E), 0);
  const bool has_head = pl.chunk_rank[C - 1] == rank;
  for (int m = 0; m < N; ++m) {
    const model::LossBreakdown& p = parts[m];
    double* s = scalars.data() + m * kFields;
    s[2] = p.balance;
    s[3] = p.indexer;
    if (has_head) {
      s[0] = p.lm;
      s[1] = p.mtp;
      s[4] = static_cast<double>(p.lm_tokens);
      s[5] = static_cast<double>(p.mtp_tokens);
      s[6] = static_cast<double>(p.expert_load.size());
    }
    for (size_t l = 0; l < p.expert_load.size() && static_cast<int64_t>(l) < blocks; ++l)
      for (size_t e = 0; e < p.expert_load[l].size() && static_cast<int64_t>(e) < E; ++e)
        loads[(m * blocks + static_cast<int64_t>(l)) * E + static_cast<int64_t>(e)] =
            p.expert_load[l][e];
  }
  pp_.all_reduce(std::span<double>(scalars));
  pp_.all_reduce(std::span<int64_t>(loads));
  for (int m = 0; m < N; ++m) {
    const double* s = scalars.data() + m * kFields;
    model::LossBreakdown b;
    b.lm = s[0];
    b.mtp = s[1];
    b.balance = s[2];
    b.indexer = s[3];
    b.lm_tokens = static_cast<int64_t>(std::llround(s[4]));
    b.mtp_tokens = static_cast<int64_t>(std::llround(s[5]));
    b.total = b.lm + loss.mtp_weight * b.mtp + b.balance + loss.indexer_loss_weight * b.indexer;
    const int64_t count = std::llround(s[6]);
    for (int64_t l = 0; l < count; ++l) {
      const int64_t* row = loads.data() + (m * blocks + l) * E;
      b.expert_load.emplace_back(row, row + E);
    }
    result.lm_sum += b.lm * static_cast<double>(b.lm_tokens);
    result.mtp_sum += b.mtp * static_cast<double>(b.mtp_tokens);
    result.lm_tokens += b.lm_tokens;
    result.mtp_tokens += b.mtp_tokens;
    result.balance_sum += b.balance;
    result.indexer_sum += b.indexer;
    if (result.expert_load.size() < b.expert_load.size())
      result.expert_load.resize(b.expert_load.size(),
                                std::vector<int64_t>(static_cast<size_t>(E), 0));
    for (size_t l = 0; l < b.expert_load.size(); ++l)
      for (int64_t e = 0; e < E; ++e) result.expert_load[l][e] += b.expert_load[l][e];
    result.micro_batches.push_back(std::move(b));
  }
  const double mine[2] = {busy, result.step_seconds};
  std::vector<double> gathered(static_cast<size_t>(2 * pp_.size()));
  const std::vector<int64_t> counts(static_cast<size_t>(pp_.size()), 2);
  pp_.all_gather(mine, gathered.data(), counts, parallel::DType::kF64);
  for (int r = 0; r < pp_.size(); ++r) {
    const double b = gathered[2 * r], total = gathered[2 * r + 1];
    result.busy_seconds.push_back(b);
    result.bubble_fraction.push_back(total > 0 ? std::max(0.0, 1.0 - b / total) : 0.0);
  }
  return result;
}

template class BasicPipelineRunner<float>;
template class BasicPipelineRunner<double>;

}  // namespace trex::parallel
