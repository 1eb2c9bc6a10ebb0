#pragma once
// Completion state of a started communication (private to src/trex/dist).
#include <condition_variable>
#include <mutex>
#include <string>

#include "trex/dist/communicator.hpp"

namespace trex::dist::detail {

struct Pending {
  std::mutex mutex;
  std::condition_variable ready;
  bool finished = false;
  std::string error;           // non-empty: the operation failed
  CommStats* stats = nullptr;  // charged with the time a waiter blocks

  void complete(std::string failure = {});
};

}  // namespace trex::dist::detail
