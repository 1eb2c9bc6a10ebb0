# Proves that the layer include views (cmake/layers.cmake) let a layer include
# what it may and reject what it may not. Run by ctest as
#   cmake -DCXX=<compiler> -DVIEWS=<build>/layer-views -DWORK=<dir> -DMODE=<allowed|rejected>
#         -P check_layering.cmake
# Each case is "<layer>:<header>": a one-line translation unit including <header>
# is compiled (syntax only) against <layer>'s view. MODE=allowed: every case must
# compile. MODE=rejected: every case must fail, and fail because the header is
# not found (not for some unrelated error).

set(allowed_cases
    "core:trex/core/error.hpp"
    "io:trex/io/tokenizer.hpp"
    "kernels:trex/kernels/cpu/gemm.hpp"
    "model:trex/model/model.hpp"
    "parallel:trex/parallel/grad_reducer.hpp"
    "train:trex/train/trainer.hpp"
    "infer:trex/infer/generate.hpp"
    "plan:trex/plan/planner.hpp"
    "or_dataset:trex/or/dataset/sft.hpp"
    "rl:trex/rl/objective.hpp"
    "rl:trex/rl/reward.hpp"
    "demo:trex/demo/demo.hpp")

# Each is a wrong-way dependency the code once had, or an edge the layering forbids.
set(rejected_cases
    "kernels:trex/plan/calibrate.hpp"
    "model:trex/train/data/sft.hpp"
    "model:trex/parallel/communicator.hpp"
    "train:trex/plan/planner.hpp"
    "core:trex/io/tokenizer.hpp"
    "parallel:trex/train/trainer.hpp"
    "infer:trex/train/trainer.hpp"
    "plan:trex/parallel/expert_map.hpp"
    "or_eval:trex/model/config.hpp"
    "or_families:trex/or/solver/linear_model.hpp"
    "or_solver:trex/or/eval/eval.hpp"
    "train:trex/rl/objective.hpp")

foreach(var CXX VIEWS WORK MODE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_layering.cmake: -D${var}=... is required")
  endif()
endforeach()
file(MAKE_DIRECTORY ${WORK})

set(failures 0)
set(index 0)
foreach(case ${${MODE}_cases})
  string(REPLACE ":" ";" parts "${case}")
  list(GET parts 0 layer)
  list(GET parts 1 header)
  math(EXPR index "${index} + 1")
  set(source ${WORK}/${MODE}_${index}.cpp)
  file(WRITE ${source} "#include \"${header}\"\n")
  execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${VIEWS}/${layer} ${source}
                  RESULT_VARIABLE status ERROR_VARIABLE errors OUTPUT_QUIET)
  if(MODE STREQUAL "allowed")
    if(status EQUAL 0)
      message(STATUS "ok: ${layer} may include ${header}")
    else()
      message(SEND_ERROR "${layer} cannot include ${header}, which it may use:\n${errors}")
      math(EXPR failures "${failures} + 1")
    endif()
  else()
    string(FIND "${errors}" "${header}: No such file or directory" not_found)
    if(NOT status EQUAL 0 AND NOT not_found EQUAL -1)
      message(STATUS "rejected: ${layer} including ${header} does not compile (header not visible)")
    elseif(status EQUAL 0)
      message(SEND_ERROR "${layer} can include ${header}: a wrong-way dependency is not rejected")
      math(EXPR failures "${failures} + 1")
    else()
      message(SEND_ERROR "${layer} including ${header} failed for another reason:\n${errors}")
      math(EXPR failures "${failures} + 1")
    endif()
  endif()
endforeach()
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} layering case(s) failed")
endif()
