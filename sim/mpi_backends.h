// sf::sim's MPI-bound backends (builds with SF_WITH_MPI): gradient synchronisation over MPI, or
// over NCCL with MPI for its bootstrap. Kept out of sim.h so that the model, the host-stream
// device and the workload build without MPI.
#pragma once

#include "sf/sim/sim.h"

#include <mpi.h>

#include <memory>
#include <string>

namespace sf::sim {

/// Collectives on the host gradient buffer over a duplicate of `parent` (collective call).
/// Bucketed sync runs on a comm thread (MPI_Iallreduce): MPI must provide MPI_THREAD_SERIALIZED.
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm parent);
/// NCCL on device buffers (CUDA+NCCL builds with a CUDA device). Detects the library version;
/// several ranks on one GPU need NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 (set here where
/// allowed). Returns nullptr with *why set when it cannot be used, so the caller falls back to MPI.
std::unique_ptr<Comm> make_nccl_comm(MPI_Comm parent, Device& device, std::string* why);

}  // namespace sf::sim
