#pragma once
// Completion state of a started communication (private to src/trex/parallel).
#include <condition_variable>
#include <mutex>
#include <string>

#include "trex/parallel/communicator.hpp"

namespace trex::parallel::detail {

struct Pending {
  std::mutex mutex;
  std::condition_variable ready;
  bool finished = false;
  std::string error;           // non-empty: the operation failed
  CommStats* stats = nullptr;  // charged with the time a waiter blocks

  void complete(std::string failure = {});
};

}  // namespace trex::parallel::detail
