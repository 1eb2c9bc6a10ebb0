# Multi-rank tests: one gtest program (trex_mpi_tests) whose main joins the MPI
# world; each registered test runs it under mpirun on N ranks with a filter.
# Ranks oversubscribe the cores (CI has 2), so OpenMP waits passively on one
# thread per rank, and MPI tests take a lock so that they never run
# concurrently with each other.
file(GLOB_RECURSE TREX_MPI_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/mpi/*.cpp)
add_executable(trex_mpi_tests ${TREX_MPI_TEST_SOURCES})
target_link_libraries(trex_mpi_tests PRIVATE trex_lib GTest::gtest)
target_include_directories(trex_mpi_tests PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_compile_definitions(trex_mpi_tests PRIVATE
  TREX_SOURCE_DIR="${CMAKE_SOURCE_DIR}" TREX_BINARY="$<TARGET_FILE:trex>")
add_dependencies(trex_mpi_tests trex)

# trex_add_mpi_test(<name> <ranks> <gtest filter>) -> ctest test "mpi.<name>".
function(trex_add_mpi_test name ranks filter)
  add_test(NAME mpi.${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} --oversubscribe
                   --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none
                   $<TARGET_FILE:trex_mpi_tests> --gtest_filter=${filter}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(mpi.${name} PROPERTIES
    TIMEOUT 900
    RESOURCE_LOCK mpi
    ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE;OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;ASAN_OPTIONS=detect_leaks=0")
endfunction()

trex_add_mpi_test(communicator_2 2 "Communicator*")
trex_add_mpi_test(communicator_4 4 "Communicator*:ProcessGridMpi*")
trex_add_mpi_test(pp_2 2 "PipelineMpi*")
trex_add_mpi_test(pp_4 4 "PipelineMpi*")
trex_add_mpi_test(expert_parallel_2 2 "ExpertParallelMpi.Matches*:ExpertParallelMpi.Overlap*:ExpertParallelMpi.Rejects*")
trex_add_mpi_test(expert_parallel_4 4 "ExpertParallelMpi.Matches*:ExpertParallelMpi.Overlap*:ExpertParallelMpi.Rejects*")
trex_add_mpi_test(expert_parallel_overlap_2 2 "ExpertParallelMpi.ExposedCommunication")
trex_add_mpi_test(dp_2 2 "*DataParallel2.*:DataParallelResume.*")
trex_add_mpi_test(dp_4 4 "DataParallel4*")
trex_add_mpi_test(grid_train_2 2 "Layouts/GridTrain2.*")
trex_add_mpi_test(grid_train_4 4 "Layouts/GridTrain4.*:GridResume.*:GridTrainEqualCounts.*")
# 8 ranks on 2 cores under the sanitizers take ~5 minutes; the 2- and 4-rank
# layouts run the same TP/PP/EP/DP code paths there.
if(NOT TREX_SANITIZE)
  trex_add_mpi_test(grid_train_8 8 "Layouts/GridTrain8.*")
endif()
trex_add_mpi_test(expert_shard_2 2 "ExpertShardMpi*")
trex_add_mpi_test(expert_shard_4 4 "ExpertShardMpi*")
trex_add_mpi_test(demo_2 2 "DemoMpi.*")
trex_add_mpi_test(grpo_2 2 "GrpoMpi.*")
