#pragma once
// The solver-verified reward of GRPO rollouts: each completion is extracted,
// run confined and graded exactly as `trex or eval` grades it (or/eval:
// extract_code -> make_task -> Sandbox -> interpret -> grade), and its
// category is mapped to a scalar by reward_of().
//
// Where the grading runs: a grading process, forked once when the grader is
// built, holds the Sandbox and forks every task's worker from itself (see
// reward.cpp for why not from the training process). Build the grader early,
// before the model, the optimizer state and the OpenMP/MPI set-up exist: the
// grading process keeps a copy-on-write snapshot of this process as it was
// then, and MathProg/LP tasks run in copies of that snapshot under the
// sandbox's address-space limit.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trex/or/eval/extract.hpp"
#include "trex/or/eval/grade.hpp"
#include "trex/or/eval/runner.hpp"

namespace trex::rl {

// The sandbox limits of `trex or eval` with a rollout-sized time limit:
// 10 s of wall and CPU time per completion (eval and the demo allow 20-60 s;
// a rollout that needs longer earns failure_penalty).
orlib::eval::RunSettings rollout_run_settings();

struct RewardOptions {
  double correct = 1.0;  // the objective matches within `rule` (or the no-solution status does)
  double wrong = 0.0;    // ran to completion, wrong answer: wrong_objective, infeasible, unbounded
  // Did not parse or solve: no_code, extraction_failed, syntax_error,
  // runtime_error, runtime_missing, timeout.
  double failure_penalty = 0.0;
  // Added when an executable block was extracted (every category but
  // no_code and extraction_failed).
  double format_reward = 0.0;
  orlib::eval::Rule rule = orlib::eval::Rule::rel1e6;  // what `trex demo` grades Pass@1 with
  orlib::eval::CodeKind format = orlib::eval::CodeKind::none;  // extraction hint (none = auto)
  // python: empty resolves "python3" through PATH, checked on the first Python
  // completion; an interpreter that is missing or cannot run in the sandbox
  // makes Python completions runtime_missing and leaves MathProg/LP grading as
  // it is. solver: glpk (what the SFT answers are verified with).
  orlib::eval::RunSettings run = rollout_run_settings();
  int jobs = 0;               // sandboxed tasks at a time; 0: online cores
  unsigned uid_base = 61000;  // root: per-slot sandbox uids from here (0 keeps root)
  std::string temp_root;      // parent of the sandbox directories ($TMPDIR or /tmp)
  size_t cache_entries =
      1 << 16;  // graded completions remembered (least recently used go); 0: none
};

struct RewardRequest {
  // Identifies the prompt and with it the ground truth: the cache answers a
  // request by (prompt_key, hash of the completion).
  std::string prompt_key;
  orlib::eval::GroundTruth truth;  // optimal or no_solution (unknown is refused)
  std::string completion;
};

struct GradedRollout {
  double reward = 0.0;
  orlib::eval::Category category = orlib::eval::Category::no_code;
  bool extracted = false;     // an executable block was taken out of the completion
  bool cached = false;        // answered from the cache or from an identical request of the batch
  double wall_seconds = 0.0;  // the sandbox run (0 when nothing ran)
  std::string detail;         // why, as in `trex or eval`'s items.jsonl
};

struct RewardStats {
  int64_t graded = 0;        // requests answered
  int64_t cache_hits = 0;    // of which answered without running (cache or duplicate)
  int64_t sandbox_runs = 0;  // tasks run in the sandbox
  std::array<int64_t, orlib::eval::kNumCategories> categories{};  // of the requests answered
  double seconds = 0.0;                                           // wall time spent grading batches
};

// The reward of one graded completion.
double reward_of(orlib::eval::Category category, bool extracted, const RewardOptions& options);

class RewardGrader {
 public:
  // Forks the grading process and creates its Sandbox; throws trex::Error when
  // it cannot (e.g. no free sandbox uids).
  explicit RewardGrader(RewardOptions options);
  // Finishes a batch still in flight, then ends the grading process.
  ~RewardGrader();
  RewardGrader(const RewardGrader&) = delete;
  RewardGrader& operator=(const RewardGrader&) = delete;

  // One result per request, in order; up to `jobs` completions run at a time.
  // What a completion does (hang, crash, flood, exhaust the solver) costs its
  // reward and never throws. Throws trex::Error for a request whose truth is
  // unknown, while a start()ed batch is in flight, and when the grading process
  // fails twice in a row.
  std::vector<GradedRollout> grade(const std::vector<RewardRequest>& requests);

  // The same, overlapped with the caller's work: start() hands the batch to the
  // grader's thread and returns; wait() blocks until it is graded. One batch at
  // a time: start() throws while one is in flight, wait() without one.
  void start(std::vector<RewardRequest> requests);
  std::vector<GradedRollout> wait();
  bool in_flight() const;

  // Updated by grade() and wait(), on the caller's thread.
  const RewardStats& stats() const { return stats_; }
  const RewardOptions& options() const { return options_; }
  // The grading process's isolation (landlock, uids, ...), for logs.
  const std::string& isolation() const { return isolation_; }

 private:
  class Engine;

  RewardOptions options_;
  RewardStats stats_;
  std::string isolation_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace trex::rl
