#pragma once
// A small pool of forked worker processes for jobs that call GLPK or CBC
// (both keep global state and may abort on internal errors). Each job is an
// (index, attempt) pair; the worker runs `work(index, attempt)` and sends the
// returned string back. A crashed worker is replaced and its job reported with
// `crashed` set, so the caller can retry it. Results are delivered in arrival
// order; callers that need determinism store them by index.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace trex::orlib {

struct PoolJob {
  int64_t index = 0;
  int32_t attempt = 0;
};

// Runs until `next()` returns nullopt and every submitted job has finished.
// `done(job, result, crashed)` runs in the parent and may make further jobs
// available through `next()`. With jobs == 0, everything runs in this process.
void run_worker_pool(int jobs, const std::function<std::optional<PoolJob>()>& next,
                     const std::function<std::string(const PoolJob&)>& work,
                     const std::function<void(const PoolJob&, std::string, bool)>& done);

}  // namespace trex::orlib
