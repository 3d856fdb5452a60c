// The model one step at a time (ModelStepper): the timeline of the DDP-like step (single or
// bucketed sync, seeded counter-based cost draws), kept in O(R) state so `sim` can score 10^6 ranks step by step without holding the N × R × S matrix.
#include "sf/sim/sim.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace sf::sim {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}  // namespace

struct ModelStepper::State {
  ModelConfig cfg;
  inject::FaultPlan plan;
  bool sync_callbacks;
  // The same buckets as the workload; each bucket's backward compute in proportion to its bytes.
  std::vector<double> frac, bucket_s, bucket_end, all_in;
  std::size_t B = 0;
  double whole_s = 0, barrier_s = 0;
  // Absolute time per rank, kept across steps: the host clock (when the rank's step starts).
  // The device stream needs none (rank_until_sync: it is free by the next step's forward).
  std::vector<double> host;
  /// What one rank carries from the per-rank pass to the passes after each global collective
  /// (one record per rank, so a pass reads one stream rather than ten). 32 bytes: the passes are
  /// bound by the bytes they move, so what can be recomputed is (the step's start is host[r]
  /// until the rank's step ends; callbacks start at backward's end, from own_done).
  struct Carry {
    double bwd_start, own_done, callbacks_s, optim_s;
  };

  /// Where the passes put a rank's cells. The stages come in order (data, forward, backward,
  /// callbacks, optimizer), then the wall.
  /// RowOut: into the row of a one-step matrix, with the side evidence (sync waits, forward events).
  /// The row is committed block by block as the last pass writes it (StageMatrix::commit_ranks):
  /// its checks and sums read the block from cache rather than the whole row from memory again.
  struct RowOut {
    static constexpr bool kSide = true;
    std::array<double*, 5> col;
    double* wall;
    frontier::StageMatrix* m;
    int row;
    template <int S>
    void stage(int r, double v) { col[S][r] = v; }
    void end(int r, double w) { wall[r] = w; }
    void done(int r_end) { m->commit_ranks(row, r_end, wall); }
  };
  /// MaxOut: reduced at once to the step's maxima, without a row — the prefixes in the order
  /// StageMatrix::commit_step and frontier::account take them (0 + d0 + d1 + ..., the residual
  /// max(0, wall − Σ explicit) last), so every frontier value is theirs bit for bit.
  struct MaxOut {
    static constexpr bool kSide = false;
    std::array<double, 6> top{kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
    double wall_max = 0;
    double* prefix;  // per rank: its running prefix P[t,r,s] of the stages written so far
    template <int S>
    void stage(int r, double v) {
      double& p = prefix[r];
      p = (S == 0 ? 0.0 : p) + v;
      top[S] = std::max(top[S], p);
    }
    void end(int r, double w) {
      const double p = prefix[r], e = w - p;
      top[5] = std::max(top[5], p + (e > 0 ? e : 0.0));
      wall_max = std::max(wall_max, w);
    }
    void done(int) {}
  };
  std::vector<Carry> carry;
  // When each rank's last bucket collective could start (bucketed sync, a row's side evidence:
  // the wait is measured from it); the earlier buckets' starts matter only through all_in.
  std::vector<double> last_launch;
  // This step's side evidence (the durations and walls go straight into the matrix's row), sized
  // by the first step that writes a row: a stepper reduced by step_maxima never needs them.
  std::vector<double> fwd_event, wait_bwd, wait_cb;
  std::vector<double> prefix;  // MaxOut's, sized by the first step_maxima
  double exit_single = 0;      // this step's end of the single collective
  bool sample_fwd = false;     // this step's row samples forward events (fwd_event is written)
  std::vector<double> row_wall;  // step_into's walls, reused
  CostSampler sampler;  // draw_costs with the rank factors and jitter levels computed once (empty in a twin)
  std::int64_t step = 0;
  /// The healthy twin (add_twin): its own timeline, stepped on this state's draws and reduced
  /// through twin_out; twin_arrive is its last arrival at the single collective this step.
  std::unique_ptr<State> twin;
  MaxOut twin_out;
  double twin_arrive = 0;
  StepMaxima twin_last;

  /// `draws`: whether this state draws its own costs (a twin reads its model's).
  State(const ModelConfig& c, const inject::FaultPlan& p, bool draws = true)
      : cfg(c),
        plan(p),
        sync_callbacks(c.sync_callbacks || p.scenario->sync_callbacks),
        host(c.ranks, 0.0),
        carry(c.ranks),
        sampler(c.costs, c.variation, c.seed, draws ? c.ranks : 0) {
    // The timeline takes every cost as time spent (rank_until_sync relies on it).
    const auto& k = c.costs;
    for (const double ms : {k.data_ms, k.loader_ms, k.fwd_host_ms, k.fwd_device_ms, k.bwd_host_ms, k.bwd_device_ms,
                            k.callbacks_ms, k.optim_ms})
      if (!(ms >= 0) || !std::isfinite(ms))
        throw std::invalid_argument("model stage cost " + std::to_string(ms) + " ms: expected a finite cost >= 0");
    const auto buckets = bucket_floats(cfg.layout);
    B = buckets.size();
    double total = 0;
    for (auto b : buckets) total += static_cast<double>(b);
    frac.resize(B);
    bucket_s.resize(B);
    bucket_end.resize(B);
    all_in.resize(B);
    for (std::size_t i = 0; i < B; ++i) {
      frac[i] = static_cast<double>(buckets[i]) / total;
      bucket_s[i] = cfg.comm.seconds(static_cast<double>(buckets[i]) * sizeof(float), cfg.ranks);
    }
    whole_s = cfg.comm.seconds(total * sizeof(float), cfg.ranks);
    barrier_s = cfg.comm.seconds(0, cfg.ranks);
  }

  /// The fault's delay at each site in this step (0 where it does not act), taken once per step;
  /// a rank gets it where the plan targets it (plan.delay_s, without a call per rank and site).
  static constexpr int kSites = static_cast<int>(inject::Site::link) + 1;
  struct SiteDelays {
    std::array<double, kSites> at{};
    bool any = false;
  };
  SiteDelays site_delays() const {
    SiteDelays sd;
    for (int i = 0; i < kSites; ++i) {
      sd.at[i] = plan.step_delay_s(static_cast<inject::Site>(i), step);
      if (!(sd.at[i] >= 0) || !std::isfinite(sd.at[i]))  // a validated plan delays, never advances
        throw std::invalid_argument("model step " + std::to_string(step) + ": a fault delay of " +
                                    std::to_string(sd.at[i]) + " s, expected a finite delay >= 0");
      sd.any = sd.any || sd.at[i] != 0;
    }
    return sd;
  }

  static constexpr int kBlock = CostSampler::Block::kMax;
  /// A block of ranks between pass 1's per-rank part and its bucket loop (the block's draws are
  /// apart: a twin reads them too).
  struct Block {
    double hb[kBlock], dev[kBlock], bwd_dev[kBlock], entry[kBlock], bwd_host[kBlock], launched[kBlock];
  };

  /// Pass 1's per-rank part for rank r (block slot j, its draws in c): data, forward, backward up
  /// to the collectives. Returns its arrival at the single collective (single sync), else 0.
  template <class Out>
  double rank_until_sync(int r, int j, const SiteDelays& sd, Out& out, const CostSampler::Block& c, Block& b) {
    using inject::Site;
    const bool hit = sd.any && plan.targets(r);
    auto delay_s = [&](Site site) { return hit ? sd.at[static_cast<int>(site)] : 0.0; };
    auto& k = carry[r];
    double h = host[r];
    const double data = c.data[j] * 1e-3 + delay_s(Site::data);
    h += data;
    out.template stage<0>(r, data);
    // forward: device work queued at the start of forward, then host launch overhead
    const double fwd_start = h;
    const double dev_fwd = c.fwd_device[j] * 1e-3 + delay_s(Site::forward_device);
    // The device is idle by then: a rank's step ends no earlier than its device work (below), and
    // every cost and delay is >= 0 (checked in the constructor), so the stream of the step before
    // is free by fwd_start and max(free, fwd_start) is fwd_start, bit for bit. No per-rank state
    // carries the device from step to step.
    double dev = fwd_start + dev_fwd;
    if constexpr (Out::kSide)
      if (sample_fwd) fwd_event[r] = dev_fwd;
    h += c.fwd_host[j] * 1e-3 + delay_s(Site::forward_host);
    out.template stage<1>(r, h - fwd_start);
    // backward: device work queued, launches, then the gradient synchronisation
    k.bwd_start = h;
    b.bwd_dev[j] = c.bwd_device[j] * 1e-3 + delay_s(Site::backward_device);
    b.entry[j] = delay_s(Site::backward_collective);
    b.bwd_host[j] = c.bwd_host[j] * 1e-3;
    double arrival = 0;
    if (cfg.sync_mode == SyncMode::single) {
      dev = std::max(dev, h) + b.bwd_dev[j];
      k.own_done = std::max(h + b.bwd_host[j], dev) + b.entry[j];  // arrival at the collective
      arrival = k.own_done;
    }
    b.hb[j] = h;
    b.dev[j] = dev;
    k.callbacks_s = c.callbacks[j] * 1e-3 + delay_s(Site::callbacks);
    k.optim_s = c.optim[j] * 1e-3 + delay_s(Site::optimizer);
    return arrival;
  }

  /// Pass 1's bucket loop for a block of `len` ranks from r0. Bucket i is queued when the host
  /// has paid the launches of the buckets before it; its collective can start once its compute
  /// is done (and, after a late entry, once the buckets before it started: the comm engine takes
  /// them in order).
  template <bool kSide>
  void buckets_of_block(int r0, int len, Block& b) {
    for (std::size_t i = 0; i < B; ++i) {
      const double f = frac[i];
      for (int j = 0; j < len; ++j) b.dev[j] = std::max(b.dev[j], b.hb[j]) + b.bwd_dev[j] * f;
      if (i == 0) {
        for (int j = 0; j < len; ++j) b.launched[j] = b.dev[j] + b.entry[j];
      } else {
        for (int j = 0; j < len; ++j) b.launched[j] = std::max(b.dev[j], b.launched[j]);
      }
      if (kSide && i == B - 1) std::copy_n(b.launched, len, last_launch.data() + r0);
      all_in[i] = std::max(all_in[i], Eigen::Map<const Eigen::ArrayXd>(b.launched, len).maxCoeff());
      for (int j = 0; j < len; ++j) b.hb[j] += b.bwd_host[j] * f;
    }
    for (int j = 0; j < len; ++j) {
      carry[r0 + j].own_done = std::max(b.hb[j], b.dev[j]);
    }
  }

  /// Pass 1, per rank: data, forward, backward up to the collectives; the time every rank has
  /// entered each collective (the max the collective waits for) gathered on the way. Ranks go in
  /// blocks: the per-rank part first, then the bucket loop for the whole block, bucket by bucket,
  /// so that the chain of each rank's buckets (max, add, max per bucket) runs beside the chains
  /// of the other ranks instead of one after another. Returns the last arrival (single sync).
  /// The twin, when there is one, takes each block of draws after the model.
  template <class Out>
  double arrive(Out& out) {
    std::fill(all_in.begin(), all_in.end(), 0.0);
    const SiteDelays sd = site_delays();
    SiteDelays twin_sd;
    if (twin) {
      twin->begin_step(twin_out);
      std::fill(twin->all_in.begin(), twin->all_in.end(), 0.0);
      twin_sd = twin->site_delays();
      twin_arrive = 0;
    }
    double arrive_max = 0;
    const int R = cfg.ranks;
    CostSampler::Block c;
    Block b;
    for (int r0 = 0; r0 < R; r0 += kBlock) {
      const int len = std::min(kBlock, R - r0);
      sampler.draw_block(r0, len, step, c);
      arrive_max = std::max(arrive_max, arrive_block(out, sd, r0, len, c, b));
      if (twin) twin_arrive = std::max(twin_arrive, twin->arrive_block(twin_out, twin_sd, r0, len, c, b));
    }
    return arrive_max;
  }

  /// Pass 1 for the block of len ranks from r0, its draws in c.
  template <class Out>
  double arrive_block(Out& out, const SiteDelays& sd, int r0, int len, const CostSampler::Block& c, Block& b) {
    double arrive_max = 0;
    for (int j = 0; j < len; ++j) arrive_max = std::max(arrive_max, rank_until_sync(r0 + j, j, sd, out, c, b));
    if (cfg.sync_mode != SyncMode::single) buckets_of_block<Out::kSide>(r0, len, b);
    return arrive_max;
  }

  /// Readies out for a step reduced to its maxima (step_maxima, a twin's step).
  void begin_step(MaxOut& out) {
    if (prefix.empty()) prefix.resize(static_cast<std::size_t>(cfg.ranks));
    out = MaxOut{};
    out.prefix = prefix.data();
  }

  /// The collectives: one bucket at a time (bucketed sync), each starting when every rank has
  /// entered it; the single collective's end is the last arrival plus whole_s.
  void collectives() {
    double prev = 0;
    for (std::size_t i = 0; i < B && cfg.sync_mode != SyncMode::single; ++i) {
      bucket_end[i] = std::max(all_in[i], prev) + bucket_s[i];
      prev = bucket_end[i];
    }
  }

  /// Pass 2, per rank: backward's end, time inside the collectives, callbacks (and, without a
  /// barrier there, the optimizer and the step's end). Returns the last arrival at callbacks' end.
  template <class Out>
  double leave(Out& out) {
    const bool single = cfg.sync_mode == SyncMode::single;
    double cb_arrive_max = 0;
    for (int r0 = 0; r0 < cfg.ranks; r0 += kBlock) {
      const int r1 = std::min(cfg.ranks, r0 + kBlock);
      for (int r = r0; r < r1; ++r) leave_rank(r, single, out, cb_arrive_max);
      if (!sync_callbacks) out.done(r1);
    }
    return cb_arrive_max;
  }

  /// leave()'s work for rank r.
  template <class Out>
  [[gnu::always_inline]] void leave_rank(int r, bool single, Out& out, double& cb_arrive_max) {
    auto& k = carry[r];
    double end;
    if (single) {
      if constexpr (Out::kSide) wait_bwd[r] = exit_single - k.own_done;
      end = exit_single;
    } else {
      // The wait from the rank's arrival, as the real comm engines measure it (sim/sim.h,
      // Comm::wait_buckets): from the entry of its last bucket to the completion of every bucket.
      if constexpr (Out::kSide)
        wait_bwd[r] = std::max(0.0, bucket_end[B - 1] - last_launch[static_cast<std::size_t>(r)]);
      end = std::max(k.own_done, bucket_end[B - 1]);
    }
    out.template stage<2>(r, end - k.bwd_start);
    const double arrive = end + k.callbacks_s;
    cb_arrive_max = std::max(cb_arrive_max, arrive);
    if (!sync_callbacks) {  // else host[r] stays the step's start for release_callbacks
      const double begin = host[r];
      out.template stage<3>(r, arrive - end);
      host[r] = arrive + k.optim_s;
      out.template stage<4>(r, k.optim_s);
      out.end(r, host[r] - begin);
    }
  }

  /// Pass 3: the callbacks' barrier releases every rank when the last arrives.
  template <class Out>
  void release_callbacks(Out& out, double cb_exit) {
    for (int r0 = 0; r0 < cfg.ranks; r0 += kBlock) {
      const int r1 = std::min(cfg.ranks, r0 + kBlock);
      for (int r = r0; r < r1; ++r) release_rank(r, out, cb_exit);
      out.done(r1);
    }
  }

  /// release_callbacks()'s work for rank r.
  template <class Out>
  [[gnu::always_inline]] void release_rank(int r, Out& out, double cb_exit) {
    const auto& k = carry[r];
    // leave()'s backward end and arrival at the barrier, again
    const double end = cfg.sync_mode == SyncMode::single ? exit_single : std::max(k.own_done, bucket_end[B - 1]);
    if constexpr (Out::kSide) wait_cb[r] = cb_exit - (end + k.callbacks_s);
    const double begin = host[r];
    host[r] = cb_exit + k.optim_s;
    out.template stage<3>(r, cb_exit - end);
    out.template stage<4>(r, k.optim_s);
    out.end(r, host[r] - begin);
  }

  /// One step of the model through `out`: the three passes and the collectives between them.
  /// A twin's step goes on after the model's pass 1, from the arrivals it gathered there.
  template <class Out>
  void step_through(Out& out) {
    exit_single = arrive(out) + whole_s;
    after_arrive(out);
    if (twin) {
      twin->exit_single = twin_arrive + twin->whole_s;
      twin->after_arrive(twin_out);
      ++twin->step;
      twin_last.frontier = twin_out.top;
      twin_last.slowest_wall = twin_out.wall_max;
    }
  }

  /// The collectives and the passes after them.
  template <class Out>
  void after_arrive(Out& out) {
    collectives();
    const double cb_arrive_max = leave(out);
    if (sync_callbacks) release_callbacks(out, cb_arrive_max + barrier_s);
  }
};

ModelStepper::ModelStepper(const ModelConfig& cfg, const inject::FaultPlan& plan)
    : s_(std::make_unique<State>(cfg, plan)) {}

ModelStepper::~ModelStepper() = default;

frontier::StageSchema ModelStepper::schema() { return frontier::StageSchema(frontier::default_explicit_stages(), true); }

std::int64_t ModelStepper::next_step() const { return s_->step; }

void ModelStepper::step_into(frontier::StageMatrix& m, int row) {
  fill_step(m, row, s_->row_wall);
  m.commit_step(row, s_->row_wall.data());
}

void ModelStepper::fill_step(frontier::StageMatrix& m, int row, std::vector<double>& wall) {
  auto& st = *s_;
  const auto& cfg = st.cfg;
  if (m.ranks() != cfg.ranks || m.stages() != 6 || row < 0 || row >= m.steps())
    throw std::invalid_argument("model step buffer does not fit the model (ranks, stages or row)");
  const int t = static_cast<int>(st.step);  // the sampling rule counts steps from 0
  st.sample_fwd = std::floor((t + 1) * cfg.event_q) > std::floor(t * cfg.event_q);
  if (st.sample_fwd && st.fwd_event.empty()) st.fwd_event.resize(static_cast<std::size_t>(cfg.ranks));
  if (st.wait_bwd.empty()) {
    st.wait_bwd.resize(static_cast<std::size_t>(cfg.ranks));
    if (st.sync_callbacks) st.wait_cb.resize(static_cast<std::size_t>(cfg.ranks));
    if (cfg.sync_mode != SyncMode::single) st.last_launch.resize(static_cast<std::size_t>(cfg.ranks));
  }
  // The durations and walls go straight into the row's columns and `wall`.
  const std::vector<double*> cols = m.begin_step(row);
  wall.resize(static_cast<std::size_t>(cfg.ranks));
  State::RowOut out{{cols[0], cols[1], cols[2], cols[3], cols[4]}, wall.data(), &m, row};
  st.step_through(out);
  m.set_sync_wait_column(row, 2, st.wait_bwd);
  if (st.sync_callbacks) m.set_sync_wait_column(row, 3, st.wait_cb);
  if (st.sample_fwd) m.set_fwd_event_column(row, st.fwd_event);
  ++st.step;
}

ModelStepper::StepMaxima ModelStepper::step_maxima() {
  auto& st = *s_;
  State::MaxOut out;
  st.begin_step(out);
  st.step_through(out);
  ++st.step;
  StepMaxima m;
  m.frontier = out.top;
  m.slowest_wall = out.wall_max;
  return m;
}

void ModelStepper::add_twin(const ModelConfig& healthy, const inject::FaultPlan& healthy_plan) {
  auto& st = *s_;
  if (st.twin || st.step != 0) throw std::logic_error("ModelStepper::add_twin: before the first step, once");
  const auto& c = st.cfg;
  if (healthy.ranks != c.ranks || healthy.seed != c.seed || !(healthy.costs == c.costs) ||
      !(healthy.variation == c.variation))
    throw std::invalid_argument("a model's twin must draw the same costs (ranks, seed, stage costs, variation)");
  st.twin = std::make_unique<State>(healthy, healthy_plan, false);
}

const ModelStepper::StepMaxima& ModelStepper::twin_maxima() const {
  if (!s_->twin || s_->step == 0) throw std::logic_error("ModelStepper::twin_maxima: no twin, or no step yet");
  return s_->twin_last;
}

}  // namespace sf::sim
