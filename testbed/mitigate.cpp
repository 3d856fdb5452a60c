// run --mitigate: the what-if's mitigations applied live (issue 39, item 3), FALCON-style. Once the
// run's steps are scored, rank 0 takes the culprit the diagnosis named and the what-if's
// prediction for it, every rank learns them, and the testbed goes on for cfg.mitigate_steps more
// steps, the fault still on:
//  - exclude (FALCON's S4): on a communicator of the other ranks; the culprit waits aside;
//  - rebalance (FALCON's S2): on the same ranks, the culprit's batch share set to the what-if's
//    and the others' raised to keep the global batch (sim::WorkloadConfig::batch_share).
// The steps after the switch are recorded and scored like any window; their mean exposed step is
// the measured recovery beside the prediction.
#include "detail.h"

#include "sf/check/check.h"
#include "sf/recorder/mpi_transport.h"

#include <array>
#include <cmath>
#include <stdexcept>
#include <chrono>
#include <cstdio>
#include <thread>

namespace sf::testbed::detail {

using nlohmann::ordered_json;

namespace {

/// Waits for a non-blocking MPI operation with short sleeps: a rank with nothing to do (the
/// excluded one, rank 0 waiting for the measurement) leaves the cores to the ranks that work.
void wait_politely(MPI_Request& req) {
  int done = 0;
  for (;;) {
    SF_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

/// Rank 0's decision from the run's evidence: the first culprit and what the what-if predicts.
void decide(const frontier::Evidence& e, Mitigation kind, MitigationOutcome& out) {
  const auto& w = e.whatif;
  if (e.diagnosis.rank < 0 || w.fixes.empty()) {
    out.why_not = "no culprit named: nothing to mitigate";
    return;
  }
  if (!w.available) {
    out.why_not = "the what-if has no prediction (" + w.why_not + ")";
    return;
  }
  const auto& f = w.fixes.front();
  out.rank = f.rank;
  out.before_s = w.actual_s;
  out.share = kind == Mitigation::rebalance ? f.rebalance_share : 1.0;
  out.predicted_s = kind == Mitigation::exclude ? f.excluded_s : f.rebalanced_s;
}

/// The recorded steps after the switch on `comm` (every rank of it), scored at its rank 0:
/// their mean exposed step there, 0 elsewhere.
double record_steps(const RunConfig& cfg, MPI_Comm comm, sim::Workload& work, std::int64_t first, Straggler& straggler) {
  double measured = 0;
  const int steps = cfg.mitigate_steps;
  auto transport = recorder::make_mpi_transport(comm, {cfg.gather, 0.5 * cfg.gather_deadline_s});
  recorder::Recorder rec(recorder_config(cfg, first + 2, steps), *transport, nullptr, [&](formats::Window&& w, int) {
    const auto e = frontier::evaluate(w.matrix, cfg.label, w.telemetry);
    measured = e.steps > 0 ? e.exposed_makespan_s / e.steps : 0.0;
  });
  SF_MPI_CHECK(MPI_Barrier(comm));
  for (std::int64_t t = first; t < first + 2 + steps; ++t) {
    straggler.at_step(t);
    work.step(t, t < first + 2 ? nullptr : &rec);  // two steps to settle after the switch, unrecorded
    rec.safe_point();
  }
  rec.finish();
  return measured;
}

}  // namespace

ordered_json MitigationOutcome::json() const {
  ordered_json j = {{"kind", std::string(mitigation_name(kind))}, {"rank", rank >= 0 ? ordered_json(rank) : ordered_json(nullptr)}};
  if (rank < 0) {
    j["why_not"] = why_not;
    return j;
  }
  j["share"] = share;
  j["from_step"] = first_step;
  j["steps"] = steps;
  j["before_s"] = before_s;
  j["predicted_s"] = predicted_s;
  j["measured_s"] = measured_s;
  j["error"] = error();
  j["within_10pct"] = std::abs(error()) <= 0.10;
  return j;
}

std::string MitigationOutcome::line() const {
  const std::string head = "# mitigation (--mitigate " + std::string(mitigation_name(kind)) + "): ";
  if (rank < 0) return head + why_not + "\n";
  const std::string what = kind == Mitigation::exclude
                               ? "rank " + std::to_string(rank) + " left the communicator"
                               : frontier::strprintf("rank %d's batch share set to %.2f (the others' raised to match)", rank, share);
  return head + what + frontier::strprintf(" at step %lld; the what-if predicted %.1f ms/step (from %.1f), measured %.1f ms/step over %d steps: error %+.1f %%%s\n",
                                           static_cast<long long>(first_step), predicted_s * 1e3, before_s * 1e3,
                                           measured_s * 1e3, steps, error() * 100,
                                           std::abs(error()) <= 0.10 ? "" : " (more than 10 %)");
}

MitigationOutcome run_mitigation(const RunConfig& cfg, MPI_Comm world, const inject::FaultPlan& plan, Straggler& straggler,
                                 const frontier::Evidence* e, std::int64_t first_step, int local_rank) {
  int rank = 0, size = 1;
  SF_MPI_CHECK(MPI_Comm_rank(world, &rank));
  SF_MPI_CHECK(MPI_Comm_size(world, &size));
  MitigationOutcome out;
  out.kind = cfg.mitigate;
  out.first_step = first_step;
  out.steps = cfg.mitigate_steps;
  if (rank == 0 && e) decide(*e, cfg.mitigate, out);
  std::array<double, 2> said{static_cast<double>(out.rank), out.share};
  SF_MPI_CHECK(MPI_Bcast(said.data(), 2, MPI_DOUBLE, 0, world));
  const int culprit = static_cast<int>(said[0]);
  if (culprit < 0) return out;

  RunConfig mcfg = cfg;
  double measured = 0;
  int measured_at = 0;  // the world rank that scored the steps after the switch
  if (cfg.mitigate == Mitigation::exclude) {
    MPI_Comm rest = MPI_COMM_NULL;
    SF_MPI_CHECK(MPI_Comm_split(world, rank == culprit ? MPI_UNDEFINED : 0, rank, &rest));
    measured_at = culprit == 0 ? 1 : 0;
    if (rest != MPI_COMM_NULL) {
      const recorder::CommOwner owner(rest);
      Backends b;
      const std::string err = make_backends(mcfg, rest, local_rank, b);  // buckets and buffers for R − 1 ranks
      if (!err.empty()) throw std::runtime_error("--mitigate exclude: " + err);
      sim::Workload work(mcfg.workload, plan, *b.device, *b.comm, rank);
      measured = record_steps(mcfg, rest, work, first_step, straggler);
    }
  } else {
    const double share = said[1];
    mcfg.workload.batch_share = rank == culprit ? share : (size - share) / (size - 1);
    Backends b;
    const std::string err = make_backends(mcfg, world, local_rank, b);
    if (!err.empty()) throw std::runtime_error("--mitigate rebalance: " + err);
    sim::Workload work(mcfg.workload, plan, *b.device, *b.comm, rank);
    measured = record_steps(mcfg, world, work, first_step, straggler);
  }
  // The measurement to rank 0; the excluded rank (and everyone done) waits without spinning.
  if (measured_at != 0) {
    MPI_Request req = MPI_REQUEST_NULL;
    if (rank == measured_at) SF_MPI_CHECK(MPI_Isend(&measured, 1, MPI_DOUBLE, 0, 39, world, &req));
    if (rank == 0) SF_MPI_CHECK(MPI_Irecv(&measured, 1, MPI_DOUBLE, measured_at, 39, world, &req));
    if (req != MPI_REQUEST_NULL) wait_politely(req);
  }
  MPI_Request all = MPI_REQUEST_NULL;
  SF_MPI_CHECK(MPI_Ibarrier(world, &all));
  wait_politely(all);
  out.rank = culprit;
  out.share = said[1];
  out.measured_s = measured;
  return out;
}

}  // namespace sf::testbed::detail
