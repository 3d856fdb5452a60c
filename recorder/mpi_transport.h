// sf::recorder's MPI transport: the window gather over MPI (builds with SF_WITH_MPI only).
// Kept out of recorder.h so that a training loop's include of the recorder pulls in no MPI.
#pragma once

#include "sf/check/check.h"
#include "sf/recorder/recorder.h"

#include <mpi.h>

#include <memory>

namespace sf::recorder {

struct GatherOptions {
  GatherMode mode = GatherMode::node;
  /// Node gather: how long a relay waits for the rest of its node after a window's first
  /// contribution reached it before it forwards what it has (the rest follow as they come).
  /// Keep it below the root's gather deadline (the testbed uses half of it).
  double relay_wait_s = 0.5;
};

/// MPI transport on its own duplicates of `parent` (collective: every rank must call it).
/// Non-blocking point-to-point, so the root can score whatever arrived by the deadline (a
/// collective would give it nothing while any one rank is late). Flat: every rank sends to rank
/// 0. Node (the default): the smallest rank of each node other than rank 0 is its relay; the
/// node's ranks send to it, it checks each contribution's integrity and identity
/// (ContributionCheck) and forwards one
/// message per window to rank 0, on a communicator of its own; a node holding only rank 0 has
/// no relay. On one node with one rank per node the two are the same traffic. Also resolves the
/// rank identity: global, local (shared-memory node) and node rank, hostname (the SF_HOSTNAME
/// environment variable, when set, overrides the processor name MPI reports).
std::unique_ptr<Transport> make_mpi_transport(MPI_Comm parent, GatherOptions options = {});

/// Frees a communicator this process created (MPI_Comm_dup/split), unless it is MPI_COMM_NULL
/// or MPI has been finalized; never throws (a failure is reported on stderr).
void free_comm(MPI_Comm comm) noexcept;
/// A communicator this process owns: freed exactly once when the owner goes.
using CommOwner = check::Owner<MPI_Comm, free_comm>;

}  // namespace sf::recorder
