// sf-testbed: wires the subcommands; each lives in its own file (cli/<name>.cpp).
#include "common.h"

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  CLI::App app{"sf-testbed: distributed-training stage accounting testbed (StageFrontier)"};
  app.require_subcommand(1);
  // Bad input gets exactly one line (and exit code 2): what was wrong and where to look.
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) -> std::string {
    if (!sf::cli::is_first_process()) return "";  // under mpirun: one line, not one per rank
    return sf::cli::failure_line(failed, e) + "\n";
  });
  app.set_version_flag("--version", std::string("sf-testbed ") + sf::cli::git_commit());
  sf::cli::setup_score(app);
  sf::cli::setup_verify(app);
  sf::cli::setup_run(app);
  sf::cli::setup_scenarios(app);
  sf::cli::setup_experiment(app);
  sf::cli::setup_sim(app);
  sf::cli::setup_import(app);
  sf::cli::setup_validate(app);
  sf::cli::refuse_non_finite(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return sf::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sf-testbed: internal error: %s\n", e.what());
    return sf::cli::kExitFail;
  }
  return 0;
}
