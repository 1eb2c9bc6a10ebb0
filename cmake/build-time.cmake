# Compile time. `make test` builds the tree twice (Release, then ASan + UBSan)
# on CI's 2 cores inside a 90-minute budget, and compiling, not testing, is
# most of it: the test programs alone were ~40% of either build. Two measures,
# both limited to code whose speed does not matter:
#
#  * Precompiled headers for the test programs and the CLI: GoogleTest,
#    nlohmann/json and the standard headers were parsed again by each of their
#    ~100 translation units (~4 s each).
#  * A lower optimisation level for glue code. The test programs hold no
#    compute of their own (they call the library): -O1 in Release. The CLI
#    and the data layers (OR families, synthesis, datasets, the demo, the
#    planner) build text, JSON and solver models: -O2, not -O3, in Release.
#    Under the sanitizers UBSan's instrumentation at -O1 doubles the compile
#    time of template-heavy code (nlohmann/json): the same targets build at
#    -O0 there, while core, io, kernels, model, parallel, train, infer, OR
#    solver/eval and rl keep -O1 so the sanitized suite still runs in minutes.
# The figures: README.md (Development).

set(TREX_TEST_PROGRAMS trex_tests trex_mpi_tests trex_fuzz_replay)
set(TREX_DATA_AND_CLI_TARGETS trex trex_demo trex_or_families trex_or_synth trex_or_dataset
                              trex_plan)
set(TREX_COMMON_PCH <algorithm> <cmath> <cstdint> <cstdio> <cstring> <filesystem> <fstream>
                    <functional> <map> <memory> <set> <sstream> <string> <vector>
                    <nlohmann/json.hpp>)

foreach(program trex_tests trex_mpi_tests)
  if(TARGET ${program})
    target_precompile_headers(${program} PRIVATE <gtest/gtest.h> ${TREX_COMMON_PCH})
  endif()
endforeach()
target_precompile_headers(trex PRIVATE <iostream> ${TREX_COMMON_PCH})

# Options go after CMAKE_CXX_FLAGS_<CONFIG> on the command line: the last -O wins.
function(trex_set_optimisation level)
  foreach(target ${ARGN})
    if(TARGET ${target})
      target_compile_options(${target} PRIVATE ${level})
    endif()
  endforeach()
endfunction()

if(TREX_SANITIZE)
  trex_set_optimisation(-O0 ${TREX_TEST_PROGRAMS} ${TREX_DATA_AND_CLI_TARGETS})
elseif(CMAKE_BUILD_TYPE STREQUAL "Release")
  set(test_level -O1)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 at -O1 reports out-of-bounds and overflowing memcpy inside
    # libstdc++'s string concatenation (std::string + const char*), a false
    # positive of its partial inlining there (GCC bug 105329).
    list(APPEND test_level -Wno-array-bounds -Wno-stringop-overflow)
  endif()
  trex_set_optimisation("${test_level}" ${TREX_TEST_PROGRAMS})
  trex_set_optimisation(-O2 ${TREX_DATA_AND_CLI_TARGETS})
endif()
