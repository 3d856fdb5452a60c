// Builds without NCCL (SF_WITH_NCCL=OFF): the comm backend is MPI only.
#include "sf/sim/mpi_backends.h"

namespace sf::sim {

std::unique_ptr<Comm> make_nccl_comm(MPI_Comm, Device&, std::string* why) {
  if (why) *why = "this binary was built without NCCL (SF_WITH_NCCL=OFF)";
  return nullptr;
}

}  // namespace sf::sim
