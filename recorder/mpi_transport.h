// sf::recorder's MPI transport: the window gather over MPI (builds with SF_WITH_MPI only).
// Kept out of recorder.h so that a training loop's include of the recorder pulls in no MPI.
#pragma once

#include "sf/check/check.h"
#include "sf/recorder/recorder.h"

#include <mpi.h>

#include <memory>

namespace sf::recorder {

/// MPI transport on its own duplicate of `parent` (collective: every rank must call it).
/// Non-blocking point-to-point to rank 0, so the root can score whatever arrived by the
/// deadline (a collective would give it nothing while any one rank is late). Also resolves the
/// rank identity: global, local (shared-memory node) and node rank, hostname (the
/// SF_HOSTNAME environment variable, when set, overrides the processor name MPI reports).
std::unique_ptr<Transport> make_mpi_transport(MPI_Comm parent);

/// Frees a communicator this process created (MPI_Comm_dup/split), unless it is MPI_COMM_NULL
/// or MPI has been finalized; never throws (a failure is reported on stderr).
void free_comm(MPI_Comm comm) noexcept;
/// A communicator this process owns: freed exactly once when the owner goes.
using CommOwner = check::Owner<MPI_Comm, free_comm>;

}  // namespace sf::recorder
