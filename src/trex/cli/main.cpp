#include <CLI/CLI.hpp>
#include <iostream>

#include "trex/cli/commands.hpp"
#include "trex/core/error.hpp"
#include "trex/parallel/communicator.hpp"

int main(int argc, char** argv) {
  CLI::App app{"T-Rex: DeepSeek-V4 post-training and OR modelling toolkit", "trex"};
  app.set_version_flag("--version", std::string("trex ") + TREX_VERSION);
  app.require_subcommand(1);
  trex::cli::add_or_commands(app);
  trex::cli::add_demo_command(app);
  trex::cli::add_forward_command(app);
  trex::cli::add_generate_command(app);
  trex::cli::add_model_commands(app);
  trex::cli::add_tokenizer_commands(app);
  trex::cli::add_plan_commands(app);
  trex::cli::add_bench_commands(app);
  trex::cli::add_train_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const trex::Error& e) {
    std::cerr << "trex: error: " << e.what() << "\n";
    if (trex::parallel::launched_by_mpi())
      trex::parallel::abort_world(1);  // release the other ranks
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "trex: internal error: " << e.what() << "\n";
    if (trex::parallel::launched_by_mpi()) trex::parallel::abort_world(2);
    return 2;
  }
  return 0;
}
