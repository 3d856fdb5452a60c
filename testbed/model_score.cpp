// `sim`'s scoring of the model: streamed step by step (bounded memory, two threads) or on the
// whole matrix. Both paths read the same ModelStepper, so they score the same cells.
#include "sf/testbed/testbed.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace sf::testbed {

namespace {

/// Slowest rank's wall time of row t (the makespan check's Σ_t max_r wall[t,r], one term).
double slowest_wall(const frontier::StageMatrix& m, int t) {
  double mx = 0;
  if (m.step_complete(t)) {
    // Every rank present (a model step): eight running maxima, vector instructions (a max is
    // exact in any order; a committed wall is a number).
    const double* w = m.wall_row(t);
    const int R = m.ranks();
    double lane[8] = {};
    int r = 0;
    for (; r + 8 <= R; r += 8)
      for (int j = 0; j < 8; ++j) lane[j] = std::max(lane[j], w[r + j]);
    for (; r < R; ++r) mx = std::max(mx, w[r]);
    for (const double x : lane) mx = std::max(mx, x);
    return mx;
  }
  for (int r = 0; r < m.ranks(); ++r)
    if (m.present(t, r)) mx = std::max(mx, m.wall(t, r));
  return mx;
}

MakespanCheck makespan_of(const frontier::Evidence& e, double wall_sum) {
  MakespanCheck c;
  c.wall_sum_s = wall_sum;
  if (e.exposed_makespan_s > 0) c.gap = std::abs(e.exposed_makespan_s - wall_sum) / e.exposed_makespan_s;
  return c;
}

/// Two one-step buffers handed between the model (producer) and the scorer (consumer).
class StepRing {
public:
  explicit StepRing(int ranks) {
    for (auto& b : buf_) b = frontier::StageMatrix(sim::ModelStepper::schema(), ranks, 0, 1);
  }
  /// The walls of buffer t % 2, which the consumer commits (ModelStepper::fill_step).
  std::vector<double>& wall(std::int64_t t) { return wall_[t % 2]; }
  /// Producer: the buffer for step t once the scorer released it (null when stopped).
  frontier::StageMatrix* acquire_free(std::int64_t t) {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return stop_ || !full_[t % 2]; });
    return stop_ ? nullptr : &buf_[t % 2];
  }
  void publish(std::int64_t t) {
    {
      std::lock_guard lock(m_);
      full_[t % 2] = true;
    }
    cv_.notify_all();
  }
  /// Consumer: the filled buffer of step t (null when the producer stopped).
  frontier::StageMatrix* acquire_full(std::int64_t t) {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return stop_ || full_[t % 2]; });
    return full_[t % 2] ? &buf_[t % 2] : nullptr;
  }
  void release(std::int64_t t) {
    {
      std::lock_guard lock(m_);
      full_[t % 2] = false;
    }
    cv_.notify_all();
  }
  void stop() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  frontier::StageMatrix buf_[2];
  std::vector<double> wall_[2];
  bool full_[2] = {false, false};
  bool stop_ = false;
};

/// score_model_accounting's fold: each step reduced to its frontier as the model makes it (no
/// row, no per-rank pass after it). Every rank is present in a model step; the advances and sums
/// are account()'s and, in the order WindowStats::add_step takes them, every bit agrees with the
/// labeler's.
class Accounting {
public:
  Accounting(int steps, int ranks) : schema_(sim::ModelStepper::schema()), G_(static_cast<std::size_t>(schema_.group_count())) {
    auto& e = out_.evidence;
    out_.streamed = true;
    e.schema = schema_;
    e.world_size = ranks;
    e.advances_s.assign(G_, 0.0);
    exposed_.reserve(static_cast<std::size_t>(std::max(steps, 0)));
    adv_spread_.resize(G_);
    step_adv_.resize(G_);
  }

  /// Step t's maxima.
  void add(const sim::ModelStepper::StepMaxima& m, int t) {
    auto& e = out_.evidence;
    for (const double f : m.frontier)
      if (!std::isfinite(f))
        throw std::invalid_argument("model step " + std::to_string(t) + ": a stage prefix is " + std::to_string(f) +
                                    ", expected a finite number of seconds");
    ++e.steps;
    const double exposed_t = m.frontier[static_cast<std::size_t>(schema_.size() - 1)];
    e.exposed_makespan_s += exposed_t;
    exposed_.push_back(exposed_t);
    exposed_spread_.add(exposed_t);
    std::fill(step_adv_.begin(), step_adv_.end(), 0.0);
    double f_prev = 0;
    for (int s = 0; s < schema_.size(); ++s) {
      const double a = m.frontier[static_cast<std::size_t>(s)] - f_prev;  // account(): F[t,s] − F[t,s−1]
      f_prev = m.frontier[static_cast<std::size_t>(s)];
      e.advances_s[static_cast<std::size_t>(schema_.group_of(s))] += a;
      step_adv_[static_cast<std::size_t>(schema_.group_of(s))] += a;
    }
    for (std::size_t g = 0; g < G_; ++g) adv_spread_[g].add(step_adv_[g]);
    wall_sum_ += m.slowest_wall;
  }

  ModelScore finish() {
    auto& e = out_.evidence;
    if (!exposed_.empty()) e.median_step_s = frontier::median_inplace(exposed_);
    e.advance_sd_s.resize(G_);
    for (std::size_t g = 0; g < G_; ++g) e.advance_sd_s[g] = adv_spread_[g].sd();
    e.exposed_sd_s = exposed_spread_.sd();
    out_.makespan = makespan_of(e, wall_sum_);
    return std::move(out_);
  }

private:
  frontier::StageSchema schema_;
  std::size_t G_;
  ModelScore out_;
  std::vector<double> exposed_, step_adv_;
  std::vector<frontier::RunningSpread> adv_spread_;
  frontier::RunningSpread exposed_spread_;
  double wall_sum_ = 0;
};

/// A healthy twin to account beside the run (score_model_streaming_with_twin).
struct TwinRequest {
  const sim::ModelConfig* cfg;
  const inject::FaultPlan* plan;
};

/// score_model_streaming, and when asked its twin accounted on the model's thread as each step is made.
ModelScorePair stream(const sim::ModelConfig& cfg, const inject::FaultPlan& plan, const frontier::LabelConfig& label,
                      int threads, const StepSink& sink, const TwinRequest* twin) {
  frontier::StreamingAccumulator acc(sim::ModelStepper::schema(), cfg.ranks, label);
  frontier::StepFacts facts;  // reused: what the sink reads of each step
  auto add = [&](const frontier::StageMatrix& one) {
    if (!sink) return acc.add_step(one);
    acc.add_step(one, &facts);
    sink(one, facts);
  };
  sim::ModelStepper stepper(cfg, plan);
  std::optional<Accounting> twin_acc;
  if (twin) {
    stepper.add_twin(*twin->cfg, *twin->plan);
    twin_acc.emplace(cfg.steps, cfg.ranks);
  }
  double wall_sum = 0;
  ModelScorePair pair;
  ModelScore& out = pair.run;
  out.streamed = true;
  out.threads = threads >= 2 ? 2 : 1;
  if (out.threads == 1) {
    frontier::StageMatrix one(sim::ModelStepper::schema(), cfg.ranks, 0, 1);
    for (int t = 0; t < cfg.steps; ++t) {
      one.renumber(t);  // step_into replaces the whole row
      stepper.step_into(one, 0);
      if (twin_acc) twin_acc->add(stepper.twin_maxima(), t);
      add(one);
      wall_sum += slowest_wall(one, 0);
    }
  } else {
    // The model of step t+1 runs on a second thread while step t is scored.
    StepRing ring(cfg.ranks);
    std::exception_ptr failed;
    std::thread producer([&] {
      try {
        for (int t = 0; t < cfg.steps; ++t) {
          auto* b = ring.acquire_free(t);
          if (b == nullptr) return;
          b->renumber(t);  // fill_step replaces the whole row
          stepper.fill_step(*b, 0, ring.wall(t));
          if (twin_acc) twin_acc->add(stepper.twin_maxima(), t);
          ring.publish(t);
        }
      } catch (...) {
        failed = std::current_exception();
        ring.stop();
      }
    });
    try {
      for (int t = 0; t < cfg.steps; ++t) {
        auto* b = ring.acquire_full(t);
        if (b == nullptr) break;  // the producer failed: rethrown below
        b->commit_step(0, ring.wall(t).data());  // the row's checks and sums, beside the next model step
        add(*b);
        wall_sum += slowest_wall(*b, 0);
        ring.release(t);
      }
    } catch (...) {
      ring.stop();
      producer.join();
      throw;
    }
    producer.join();
    if (failed) std::rethrow_exception(failed);
  }
  out.evidence = acc.finish();
  out.makespan = makespan_of(out.evidence, wall_sum);
  if (twin_acc) pair.twin = twin_acc->finish();
  return pair;
}

}  // namespace

ModelScore score_model_streaming(const sim::ModelConfig& cfg, const inject::FaultPlan& plan,
                                 const frontier::LabelConfig& label, int threads, const StepSink& sink) {
  return stream(cfg, plan, label, threads, sink, nullptr).run;
}

ModelScorePair score_model_streaming_with_twin(const sim::ModelConfig& cfg, const inject::FaultPlan& plan,
                                               const frontier::LabelConfig& label, int threads,
                                               const sim::ModelConfig& healthy, const inject::FaultPlan& healthy_plan,
                                               const StepSink& sink) {
  const TwinRequest twin{&healthy, &healthy_plan};
  return stream(cfg, plan, label, threads, sink, &twin);
}

ModelScore score_model_accounting(const sim::ModelConfig& cfg, const inject::FaultPlan& plan) {
  sim::ModelStepper stepper(cfg, plan);
  Accounting acc(cfg.steps, cfg.ranks);
  for (int t = 0; t < cfg.steps; ++t) acc.add(stepper.step_maxima(), t);
  return acc.finish();
}

ModelScore score_model_whole(const sim::ModelConfig& cfg, const inject::FaultPlan& plan,
                             const frontier::LabelConfig& label) {
  const auto w = sim::model_window(cfg, plan);
  ModelScore out;
  out.evidence = frontier::evaluate(w.matrix, label, w.telemetry);
  out.makespan = makespan_check(out.evidence, w.matrix);
  return out;
}

}  // namespace sf::testbed
