#pragma once
// This process's resident memory (Linux): what the memory accounting is
// compared with.
#include <cstdint>

namespace trex {

int64_t resident_bytes();       // now (VmRSS); 0 where it cannot be read
int64_t peak_resident_bytes();  // the most so far (getrusage's ru_maxrss)

}  // namespace trex
