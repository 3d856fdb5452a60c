// sf-testbed experiment NAME...|all: declared sweeps of real mpirun runs into results/.
#include "common.h"
#include "sf/experiments/experiments.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>

namespace sf::cli {

void setup_experiment(CLI::App& app) {
  auto o = std::make_shared<experiments::DriverOptions>();
  auto* sub = app.add_subcommand("experiment",
                                 "Run declared experiments (experiments/specs/NAME.json) and write OUT/NAME/ (default sf-results/)");
  sub->add_option("NAME", o->names, "experiment names, or 'all'")->required();
  sub->add_flag("--quick", o->quick, "tiny version of each experiment (CI); writes OUT/NAME-quick/");
  sub->add_option("--out", o->out_dir, "results directory (the project's own results: --out results)")->capture_default_str();
  sub->add_option("--specs", o->specs_dir, "directory of experiment specs")->check(CLI::ExistingDirectory);
  sub->add_option("--report", o->report_script, "report script (tables and plots)")->check(CLI::ExistingFile);
  sub->add_option("--python", o->python, "Python with pandas and matplotlib");
  sub->add_option("--mpirun", o->mpirun, "MPI launcher");
  sub->add_flag("--force", o->force, "redo rows that already finished");
  sub->add_flag("--keep-rows", o->keep_rows,
                "leave OUT/NAME/rows/ as the rows wrote it (default: packed into rows.tar.xz after the report; --quick keeps it)");
  sub->add_option("--set", o->overrides, "override a run option of every row, e.g. --set device=cuda (repeatable)");
  sub->add_option("--tag", o->tag, "write OUT/NAME-TAG/ (e.g. --tag gpu with --set device=cuda)");
  sub->add_option("--row-timeout", o->row_timeout_s, "seconds before a row is killed")->check(whole_in(10, 86400));
  sub->callback([o] {
    auto opt = *o;
    std::error_code ec;
    opt.self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    opt.commit = git_commit();
    opt.argv = {"sf-testbed", "experiment"};
    for (const auto& n : opt.names) opt.argv.push_back(n);
    if (opt.quick) opt.argv.push_back("--quick");
    for (const auto& kv : opt.overrides) opt.argv.insert(opt.argv.end(), {"--set", kv});
    if (!opt.tag.empty()) opt.argv.insert(opt.argv.end(), {"--tag", opt.tag});
    // A name or tag becomes a directory under --out: one path part, nothing that climbs out of it
    // (issue 40, S5: --tag ../../x wrote outside the results).
    auto one_part = [](const std::string& x) {
      return !x.empty() && x[0] != '.' && x.size() <= 64 &&
             std::all_of(x.begin(), x.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; });
    };
    if (!opt.tag.empty() && !one_part(opt.tag)) {
      std::fprintf(stderr, "sf-testbed experiment: --tag '%s' is not a plain name; expected letters, digits, '_', '-' or '.' "
                   "(not first), at most 64, making one directory under --out\n", opt.tag.c_str());
      exit_with(kExitBadInput);
    }
    for (const auto& n : opt.names)
      if (n != "all" && !one_part(n)) {
        std::fprintf(stderr, "sf-testbed experiment: '%s' is not a plain experiment name; expected letters, digits, '_', '-' "
                     "or '.' (not first)\n", n.c_str());
        exit_with(kExitBadInput);
      }
    for (const auto& n : opt.names)
      if (n != "all" && !std::filesystem::exists(opt.specs_dir + "/" + n + ".json")) {
        std::string known;
        for (const auto& k : experiments::list_specs(opt.specs_dir)) known += (known.empty() ? "" : ", ") + k;
        std::fprintf(stderr, "sf-testbed experiment: '%s' is not one of: %s, all\n", n.c_str(), known.c_str());
        exit_with(kExitBadInput);
      }
    if (const int rc = experiments::run(opt)) exit_with(rc);
  });
}

}  // namespace sf::cli
