// Builds without MPI (SF_WITH_MPI=OFF): the engine, formats, sim and verify work; a live run
// cannot, and says so.
#include "sf/testbed/testbed.h"

#include <cstdio>

namespace sf::testbed {

bool built_with_mpi() { return false; }

int run(const RunConfig&) {
  std::fprintf(stderr,
               "sf-testbed run: this build has no MPI (configured with -DSF_WITH_MPI=OFF); rebuild with "
               "-DSF_WITH_MPI=ON to run ranks, or use `sf-testbed sim` for model-driven ranks\n");
  return 2;
}

int run_validate(const ValidateConfig&) {
  std::fprintf(stderr, "sf-testbed validate: this build has no MPI (configured with -DSF_WITH_MPI=OFF); rebuild with "
                       "-DSF_WITH_MPI=ON\n");
  return 2;
}

}  // namespace sf::testbed
