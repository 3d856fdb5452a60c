// The model one step at a time (ModelStepper): the timeline of the DDP-like step (single or
// bucketed sync, seeded counter-based cost draws), kept in O(R) state so `sim` can score 10^6 ranks step by step without holding the N × R × S matrix.
#include "sf/sim/sim.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace sf::sim {

struct ModelStepper::State {
  ModelConfig cfg;
  inject::FaultPlan plan;
  bool sync_callbacks;
  // The same buckets as the workload; each bucket's backward compute in proportion to its bytes.
  std::vector<double> frac, bucket_s, bucket_end, all_in;
  std::size_t B = 0;
  double whole_s = 0, barrier_s = 0;
  // Absolute times per rank, kept across steps: the host clock and when its device stream is
  // next free.
  std::vector<double> host, device;
  /// What one rank carries from the per-rank pass to the passes after each global collective
  /// (one record per rank, so a pass reads one stream rather than ten).
  struct Carry {
    double begin, bwd_start, own_done, callbacks_s, optim_s, cb_start;
  };
  std::vector<Carry> carry;
  std::vector<double> launch;  // R × B: when each rank's bucket collective can start
  // This step's columns, written straight into the matrix by set_step.
  std::vector<double> col[5], wall, fwd_event, wait_bwd, wait_cb;
  CostSampler sampler;  // draw_costs with the rank factors and jitter levels computed once
  std::int64_t step = 0;

  State(const ModelConfig& c, const inject::FaultPlan& p)
      : cfg(c),
        plan(p),
        sync_callbacks(c.sync_callbacks || p.scenario->sync_callbacks),
        host(c.ranks, 0.0),
        device(c.ranks, 0.0),
        carry(c.ranks),
        wall(c.ranks),
        fwd_event(c.ranks),
        wait_bwd(c.ranks),
        wait_cb(c.ranks),
        sampler(c.costs, c.variation, c.seed, c.ranks) {
    for (auto& v : col) v.resize(c.ranks);
    const auto buckets = bucket_floats(cfg.layout);
    B = buckets.size();
    double total = 0;
    for (auto b : buckets) total += static_cast<double>(b);
    frac.resize(B);
    bucket_s.resize(B);
    bucket_end.resize(B);
    all_in.resize(4 * B);  // four interleaved maxima per bucket
    for (std::size_t i = 0; i < B; ++i) {
      frac[i] = static_cast<double>(buckets[i]) / total;
      bucket_s[i] = cfg.comm.seconds(static_cast<double>(buckets[i]) * sizeof(float), cfg.ranks);
    }
    whole_s = cfg.comm.seconds(total * sizeof(float), cfg.ranks);
    barrier_s = cfg.comm.seconds(0, cfg.ranks);
    if (cfg.sync_mode != SyncMode::single) launch.resize(static_cast<std::size_t>(cfg.ranks) * B);
  }
};

ModelStepper::ModelStepper(const ModelConfig& cfg, const inject::FaultPlan& plan)
    : s_(std::make_unique<State>(cfg, plan)) {}

ModelStepper::~ModelStepper() = default;

frontier::StageSchema ModelStepper::schema() { return frontier::StageSchema(frontier::default_explicit_stages(), true); }

std::int64_t ModelStepper::next_step() const { return s_->step; }

void ModelStepper::step_into(frontier::StageMatrix& m, int row) {
  using inject::Site;
  auto& st = *s_;
  const auto& cfg = st.cfg;
  const int R = cfg.ranks;
  if (m.ranks() != R || m.stages() != 6 || row < 0 || row >= m.steps())
    throw std::invalid_argument("model step buffer does not fit the model (ranks, stages or row)");
  const auto& plan = st.plan;
  const std::int64_t step = st.step;
  const std::size_t B = st.B;
  const bool single = cfg.sync_mode == SyncMode::single;
  double* d_data = st.col[0].data();
  double* d_fwd = st.col[1].data();
  double* d_bwd = st.col[2].data();
  double* d_cb = st.col[3].data();
  double* d_opt = st.col[4].data();
  // Pass 1, per rank: data, forward, backward up to the collectives; the time every rank has
  // entered each collective (the max the collective waits for) gathered on the way.
  double arrive_max = 0;
  std::fill(st.all_in.begin(), st.all_in.end(), 0.0);
  for (int r = 0; r < R; ++r) {
    const StageCosts c = st.sampler.draw(r, step);
    auto& k = st.carry[r];
    k.begin = st.host[r];
    double h = st.host[r];
    const double data = c.data_ms * 1e-3 + plan.delay_s(Site::data, r, step);
    h += data;
    d_data[r] = data;
    // forward: device work queued at the start of forward, then host launch overhead
    const double fwd_start = h;
    const double dev_fwd = c.fwd_device_ms * 1e-3 + plan.delay_s(Site::forward_device, r, step);
    st.device[r] = std::max(st.device[r], fwd_start) + dev_fwd;
    st.fwd_event[r] = dev_fwd;
    h += c.fwd_host_ms * 1e-3 + plan.delay_s(Site::forward_host, r, step);
    d_fwd[r] = h - fwd_start;
    // backward: device work queued, launches, then the gradient synchronisation
    k.bwd_start = h;
    const double bwd_dev = c.bwd_device_ms * 1e-3 + plan.delay_s(Site::backward_device, r, step);
    const double entry = plan.delay_s(Site::backward_collective, r, step);
    if (single) {
      st.device[r] = std::max(st.device[r], h) + bwd_dev;
      k.own_done = std::max(h + c.bwd_host_ms * 1e-3, st.device[r]) + entry;  // arrival at the collective
      arrive_max = std::max(arrive_max, k.own_done);
    } else {
      // Bucket i is queued when the host has paid the launches of the buckets before it; its
      // collective can start once its compute is done (and, after a late entry, once the
      // buckets before it started: the comm engine takes them in order).
      double hb = h;
      double* l = st.launch.data() + static_cast<std::size_t>(r) * B;
      // Four interleaved running maxima: one chain through memory per rank would be
      // latency-bound (each update waits for the last rank's store).
      double* all_in = st.all_in.data() + static_cast<std::size_t>(r & 3) * B;
      double dev = st.device[r], prev = 0;
      for (std::size_t i = 0; i < B; ++i) {
        dev = std::max(dev, hb) + bwd_dev * st.frac[i];
        prev = i == 0 ? dev + entry : std::max(dev, prev);
        l[i] = prev;
        all_in[i] = std::max(all_in[i], prev);
        hb += c.bwd_host_ms * 1e-3 * st.frac[i];
      }
      st.device[r] = dev;
      k.own_done = std::max(hb, dev);
    }
    k.callbacks_s = c.callbacks_ms * 1e-3 + plan.delay_s(Site::callbacks, r, step);
    k.optim_s = c.optim_ms * 1e-3 + plan.delay_s(Site::optimizer, r, step);
  }
  // The collectives: one after backward (single) or one bucket at a time, each starting when
  // every rank has entered it.
  double prev = 0;
  for (std::size_t i = 0; i < B && !single; ++i) {
    const double all_in = std::max(std::max(st.all_in[i], st.all_in[B + i]), std::max(st.all_in[2 * B + i], st.all_in[3 * B + i]));
    st.bucket_end[i] = std::max(all_in, prev) + st.bucket_s[i];
    prev = st.bucket_end[i];
  }
  const double exit_single = arrive_max + st.whole_s;
  // Pass 2, per rank: backward's end, time inside the collectives, callbacks (and, without a
  // barrier there, the optimizer and the step's end).
  double cb_arrive_max = 0;
  for (int r = 0; r < R; ++r) {
    auto& k = st.carry[r];
    double end;
    if (single) {
      st.wait_bwd[r] = exit_single - k.own_done;
      end = exit_single;
    } else {
      // Time inside collectives: the union of [entry, completion] over the rank's buckets.
      const double* l = st.launch.data() + static_cast<std::size_t>(r) * B;
      double inside = 0, lo = -1, hi = -1;
      for (std::size_t i = 0; i < B; ++i) {
        const double a = l[i], e = st.bucket_end[i];
        if (a > hi) {
          inside += hi - lo;
          lo = a;
        }
        hi = std::max(hi, e);
      }
      inside += hi - lo;
      st.wait_bwd[r] = inside;
      end = std::max(k.own_done, st.bucket_end[B - 1]);
    }
    d_bwd[r] = end - k.bwd_start;
    k.cb_start = end;
    const double arrive = end + k.callbacks_s;
    st.host[r] = arrive;
    cb_arrive_max = std::max(cb_arrive_max, arrive);
    if (!st.sync_callbacks) {
      d_cb[r] = arrive - k.cb_start;
      st.host[r] += k.optim_s;
      d_opt[r] = k.optim_s;
      st.wall[r] = st.host[r] - k.begin;
    }
  }
  if (st.sync_callbacks) {
    // Pass 3: the callbacks' barrier releases every rank when the last arrives.
    const double cb_exit = cb_arrive_max + st.barrier_s;
    for (int r = 0; r < R; ++r) {
      auto& k = st.carry[r];
      st.wait_cb[r] = cb_exit - st.host[r];
      st.host[r] = cb_exit + k.optim_s;
      d_cb[r] = cb_exit - k.cb_start;
      d_opt[r] = k.optim_s;
      st.wall[r] = st.host[r] - k.begin;
    }
  }
  const double* cols[5] = {d_data, d_fwd, d_bwd, d_cb, d_opt};
  m.set_step(row, cols, st.wall.data());
  m.set_sync_wait_column(row, 2, st.wait_bwd);
  if (st.sync_callbacks) m.set_sync_wait_column(row, 3, st.wait_cb);
  const int t = static_cast<int>(step);  // the sampling rule counts steps from 0
  const bool sampled = std::floor((t + 1) * cfg.event_q) > std::floor(t * cfg.event_q);
  if (sampled) m.set_fwd_event_column(row, st.fwd_event);
  ++st.step;
}

}  // namespace sf::sim
