// sf::testbed — runs the testbed and judges it: run configuration and its validation, the choice
// of device and comm backends, the run loop with its recorder windows, the verdict against the
// injected truth and the scenario's claim, the overhead experiment, and the provenance every
// result file carries (commit, host, date, hypervisor steal). The top of the libraries: it uses
// sim (workload), recorder, inject, formats, frontier and verify (truth scoring).
//
// No MPI in this header: run() initialises MPI itself when the build has it (SF_WITH_MPI).
//
// Its public surface is four headers (design change 19): judge.h (pure: verdicts, watching, sim
// and score as calls), run.h (run and validate on MPI ranks), report.h (the files written beside
// the answer, one Reporter each) and provenance.h. This header includes the four.
#pragma once

#include "sf/testbed/judge.h"
#include "sf/testbed/provenance.h"
#include "sf/testbed/report.h"
#include "sf/testbed/run.h"
