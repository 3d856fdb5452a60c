// `sim` as a call: the model's ranks scored (streamed or whole), diagnosed against a healthy
// reference drawn beside them, judged against the plan's truth, watched when asked (--detect,
// --trace). The CLI (cli/sim.cpp) checks the options and reports what comes back.
#include "testbed.h"

#include <future>
#include <malloc.h>

namespace sf::testbed {

namespace {

/// --independent-reference's seed offset lives in the CLI; here the reference is the run without
/// its fault, from its own seed when one is given (a null that can fail, issue 38).
sim::ModelConfig healthy_config(const sim::ModelConfig& cfg, const inject::FaultPlan& plan,
                                const std::optional<std::uint64_t>& reference_seed) {
  sim::ModelConfig healthy = cfg;
  healthy.fault.scenario = "none";
  healthy.fault.delay_ms.reset();
  healthy.sync_callbacks = cfg.sync_callbacks || plan.scenario->sync_callbacks;
  if (reference_seed) healthy.seed = *reference_seed;
  return healthy;
}

std::optional<Watch> make_watch(const SimulateOptions& o, const inject::FaultPlan& plan, bool whole) {
  if (!o.detect && !o.trace) return std::nullopt;
  WatchOptions wo;
  wo.label = o.label;
  wo.detect = o.detect;
  wo.trace = o.trace;
  wo.stability_window = o.stability_window;
  wo.stability_stage = o.stability_stage;
  wo.plan = &plan;
  // Streamed: the watch folds each segment between changes as the steps go by, its medians
  // bounded as run's are (exact up to RunConfig::exact_median_steps steps a segment).
  wo.online = !whole;
  if (!whole) wo.exact_median_steps = RunConfig{}.exact_median_steps;
  return Watch(std::move(wo));
}

}  // namespace

SimOutcome simulate(SimulateOptions o) {
  SimOutcome out;
  const auto& cfg = o.cfg;
  out.plan = sim::model_plan(cfg);
  const auto& plan = out.plan;
  // Streamed step by step unless the answer needs the whole matrix (a dump of it, the per-rank
  // window-median gain baseline, or --trace: it keeps the steps around changes it knows only at
  // the end). --detect streams: its watch takes each step as it is scored (docs/detect.md, "Memory").
  const bool whole = o.whole || o.keep_window || o.label.gain_baseline == frontier::GainBaseline::rank_median ||
                     o.trace.has_value();
  // The scorer allocates and frees R-sized scratch arrays every step; keep freed memory in the
  // heap (glibc would otherwise hand each one back to the kernel and page-fault it in again on
  // the next step, a third of the time at 10^5 ranks).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  auto score = [&](const sim::ModelConfig& c, const inject::FaultPlan& p) {
    return whole ? score_model_whole(c, p, o.label) : score_model_streaming(c, p, o.label, o.threads);
  };
  // The healthy reference: the same ranks without the fault, drawn from the same seed (the run
  // itself when there is no fault) or from a seed of its own. Labelled up to
  // Evidence::kStandingMaxRanks ranks (the diagnosis reads its standings), on a thread of its own
  // beside the faulty run's two; past that accounted only (advances, spreads, median step): from
  // the same seed as a twin stepped in the run's own passes on the run's draws, from a seed of its
  // own on a thread of its own.
  const sim::ModelConfig healthy = healthy_config(cfg, plan, o.reference_seed);
  const bool independent = healthy.seed != cfg.seed;
  const bool faulty = plan.scenario->site != inject::Site::none || independent;
  const auto healthy_plan = sim::model_plan(healthy);
  const bool ref_standings = cfg.ranks <= frontier::Evidence::kStandingMaxRanks;
  const bool twin = faulty && !whole && !ref_standings && !independent;
  std::future<ModelScore> ref_future;
  if (faulty && !whole && !twin)
    ref_future = std::async(o.threads >= 2 ? std::launch::async : std::launch::deferred, [&] {
      return ref_standings ? score_model_streaming(healthy, healthy_plan, o.label, 1)
                           : score_model_accounting(healthy, healthy_plan);
    });
  auto watch = make_watch(o, plan, whole);
  StepSink sink;
  if (watch && !whole) sink = [&](const frontier::StageMatrix& one, const frontier::StepFacts& f) { watch->observe_step(one, f); };
  ModelScore scored, ref_scored;
  if (whole) {
    scored = score(cfg, plan);
    ref_scored = faulty ? score(healthy, healthy_plan) : scored;
  } else if (twin) {
    auto both = score_model_streaming_with_twin(cfg, plan, o.label, o.threads, healthy, healthy_plan, sink);
    scored = std::move(both.run);
    ref_scored = std::move(both.twin);
  } else {
    scored = score_model_streaming(cfg, plan, o.label, o.threads, sink);
    ref_scored = faulty ? ref_future.get() : scored;
  }
  out.reference = std::move(ref_scored.evidence);
  out.makespan = scored.makespan;
  out.scoring = whole ? std::string("whole matrix") : "streamed, " + std::to_string(scored.threads) + " thread(s)";
  out.reference_seed = healthy.seed;
  // The diagnosis: the change against the healthy reference (for a run without a fault, itself).
  out.reference_name = independent ? "the healthy reference (seed " + std::to_string(healthy.seed) + ", no fault)"
                                   : std::string("the healthy reference (same seed, no fault)");
  const auto reference = frontier::make_reference(out.reference, out.reference_name);
  static_cast<Outcome&>(out) = judge(std::move(scored.evidence), {.reference = &reference,
                                                                  .plan = &plan,
                                                                  .reference_evidence = &out.reference,
                                                                  .makespan_gap = out.makespan.gap,
                                                                  .shuffle_seed = cfg.seed});
  // The matrix itself only where an answer reads it (--dump, --trace, --detect on the whole matrix).
  if (o.keep_window || (watch && whole)) out.window = sim::model_window(cfg, plan);
  const auto& w = out.window;
  if (watch && whole)  // the window lives as long as the outcome: the watch may hold it without a copy
    watch->observe(std::shared_ptr<const frontier::StageMatrix>(std::shared_ptr<void>(), &w.matrix), w.ranks);
  try {
    if (o.detect) out.detect = watch->report(whole ? &w.matrix : nullptr);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  if (o.trace) {
    try {
      out.trace = watch->trace(&w.matrix, w.ranks);
    } catch (const std::exception& e) {
      throw InputError(std::string("--trace ") + e.what());
    }
  }
  watch.reset();  // it may point into out.window
  if (!o.keep_window) out.window = formats::Window{};
  return out;
}

}  // namespace sf::testbed
