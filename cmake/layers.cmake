# The layers of src/trex (docs/design.md), one static library each, linked one way:
#
#   core <- io <- kernels <- model <- parallel <- {train, infer}
#   plan -> model, kernels          or/* -> core (and the or/* layers below them)
#   rl -> train, infer, or/eval     demo -> train, infer, or, rl
#   cli (the trex program) -> everything
#
# A layer's sources see only the headers of the layers it may use: each library
# compiles against its own include view, a folder of links
# (<build>/layer-views/<layer>/trex/<folder> -> src/trex/<folder>) holding its own
# folder and those of the layers below it. An include of a layer above fails to
# compile ("No such file or directory"); the Layering.* ctests prove it.
# Tests, benchmarks, fuzz targets and the CLI see every header (trex_lib).

set(TREX_LAYER_VIEWS ${CMAKE_BINARY_DIR}/layer-views)

# trex_add_layer(<name> FOLDERS <src/trex folder>... [USES <layer>...])
# Defines the static library trex_<name> from the .cpp files under its folders,
# linked PUBLIC to the libraries of the layers it USES, and its
# include view: its folders plus every folder of the layers it uses (transitively).
function(trex_add_layer name)
  cmake_parse_arguments(ARG "" "" "FOLDERS;USES" ${ARGN})
  set(sources "")
  foreach(folder ${ARG_FOLDERS})
    file(GLOB_RECURSE folder_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/trex/${folder}/*.cpp)
    list(APPEND sources ${folder_sources})
  endforeach()
  set(visible ${ARG_FOLDERS})
  foreach(used ${ARG_USES})
    if(NOT TARGET trex_${used})
      message(FATAL_ERROR "layer ${name} uses ${used}, which is not defined before it")
    endif()
    get_property(used_folders GLOBAL PROPERTY TREX_LAYER_FOLDERS_${used})
    list(APPEND visible ${used_folders})
  endforeach()
  list(REMOVE_DUPLICATES visible)
  set_property(GLOBAL PROPERTY TREX_LAYER_FOLDERS_${name} ${visible})

  set(view ${TREX_LAYER_VIEWS}/${name})
  file(REMOVE_RECURSE ${view})
  foreach(folder ${visible})
    get_filename_component(parent ${view}/trex/${folder} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/trex/${folder} ${view}/trex/${folder} SYMBOLIC)
  endforeach()

  add_library(trex_${name} STATIC ${sources})
  target_include_directories(trex_${name} PRIVATE ${view})
  foreach(used ${ARG_USES})
    target_link_libraries(trex_${name} PUBLIC trex_${used})
  endforeach()
  set_property(GLOBAL APPEND PROPERTY TREX_LAYERS ${name})
endfunction()

trex_add_layer(core FOLDERS core)
target_compile_definitions(trex_core PUBLIC TREX_VERSION="${PROJECT_VERSION}")
target_link_libraries(trex_core PUBLIC nlohmann_json::nlohmann_json Threads::Threads
                      OpenMP::OpenMP_CXX PRIVATE tomlplusplus::tomlplusplus)

trex_add_layer(io FOLDERS io USES core)
trex_add_layer(kernels FOLDERS kernels USES io)
target_link_libraries(trex_kernels PRIVATE DNNL::dnnl)
trex_add_layer(model FOLDERS model USES kernels)
trex_add_layer(parallel FOLDERS parallel USES model)
target_link_libraries(trex_parallel PRIVATE MPI::MPI_CXX)
trex_add_layer(train FOLDERS train USES parallel)
trex_add_layer(infer FOLDERS infer USES parallel)
trex_add_layer(plan FOLDERS plan USES model kernels)

# The OR library: solver and families at the bottom, then synth, eval, dataset.
trex_add_layer(or_solver FOLDERS or/solver USES core)
target_include_directories(trex_or_solver SYSTEM PRIVATE ${GLPK_INCLUDE_DIR})
target_link_libraries(trex_or_solver PRIVATE ${GLPK_LIBRARY} PkgConfig::CBC)
trex_add_layer(or_families FOLDERS or/families USES core)
trex_add_layer(or_synth FOLDERS or/synth USES or_families or_solver)
trex_add_layer(or_eval FOLDERS or/eval USES or_solver)
trex_add_layer(or_dataset FOLDERS or/dataset USES or_synth or_eval io)

trex_add_layer(rl FOLDERS rl USES train infer or_eval)
trex_add_layer(demo FOLDERS demo USES train infer or_dataset rl)


# Everything, for the CLI, tests, benchmarks and fuzz replays.
add_library(trex_lib INTERFACE)
target_include_directories(trex_lib INTERFACE ${CMAKE_SOURCE_DIR}/src)
get_property(trex_all_layers GLOBAL PROPERTY TREX_LAYERS)
foreach(layer ${trex_all_layers})
  target_link_libraries(trex_lib INTERFACE trex_${layer})
endforeach()

# Every .cpp under src/trex belongs to a layer or to the CLI.
set(trex_layer_sources "")
foreach(layer ${trex_all_layers})
  get_target_property(layer_sources trex_${layer} SOURCES)
  list(APPEND trex_layer_sources ${layer_sources})
endforeach()
file(GLOB_RECURSE trex_all_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/trex/*.cpp)
foreach(source ${trex_all_sources})
  if(NOT source IN_LIST trex_layer_sources AND NOT source MATCHES "/src/trex/cli/")
    message(FATAL_ERROR "${source} is in no layer: add its folder to cmake/layers.cmake")
  endif()
endforeach()
