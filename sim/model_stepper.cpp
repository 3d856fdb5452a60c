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
  // This step's walls and side evidence (the durations go straight into the matrix's row).
  std::vector<double> wall, fwd_event, wait_bwd, wait_cb;
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
    if (cfg.sync_mode != SyncMode::single) launch.resize(static_cast<std::size_t>(cfg.ranks) * B);
  }
};

ModelStepper::ModelStepper(const ModelConfig& cfg, const inject::FaultPlan& plan)
    : s_(std::make_unique<State>(cfg, plan)) {}

ModelStepper::~ModelStepper() = default;

frontier::StageSchema ModelStepper::schema() { return frontier::StageSchema(frontier::default_explicit_stages(), true); }

std::int64_t ModelStepper::next_step() const { return s_->step; }

void ModelStepper::step_into(frontier::StageMatrix& m, int row) {
  std::vector<double> wall;
  fill_step(m, row, wall);
  m.commit_step(row, wall.data());
}

void ModelStepper::fill_step(frontier::StageMatrix& m, int row, std::vector<double>& wall) {
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
  // The durations go straight into the row's columns.
  const std::vector<double*> cols = m.begin_step(row);
  double* d_data = cols[0];
  double* d_fwd = cols[1];
  double* d_bwd = cols[2];
  double* d_cb = cols[3];
  double* d_opt = cols[4];
  // Pass 1, per rank: data, forward, backward up to the collectives; the time every rank has
  // entered each collective (the max the collective waits for) gathered on the way. Ranks go in
  // blocks: the per-rank part first, then the bucket loop for the whole block, bucket by bucket,
  // so that the chain of each rank's buckets (max, add, max per bucket) runs beside the chains
  // of the other ranks instead of one after another.
  double arrive_max = 0;
  std::fill(st.all_in.begin(), st.all_in.end(), 0.0);
  // The fault's delay at each site in this step (0 where it does not act), taken once per step;
  // a rank gets it where the plan targets it (plan.delay_s, without a call per rank and site).
  constexpr int kSites = static_cast<int>(Site::link) + 1;
  std::array<double, kSites> site_delay{};
  bool any_delay = false;
  for (int i = 0; i < kSites; ++i) {
    site_delay[i] = plan.step_delay_s(static_cast<Site>(i), step);
    any_delay = any_delay || site_delay[i] != 0;
  }
  constexpr int kBlock = 256;
  double hb[kBlock], dev[kBlock], bwd_dev[kBlock], entry[kBlock], bwd_host[kBlock], launched[kBlock];
  for (int r0 = 0; r0 < R; r0 += kBlock) {
    const int len = std::min(kBlock, R - r0);
    for (int j = 0; j < len; ++j) {
      const int r = r0 + j;
      const StageCosts c = st.sampler.draw(r, step);
      const bool hit = any_delay && plan.targets(r);
      auto delay_s = [&](Site site) { return hit ? site_delay[static_cast<int>(site)] : 0.0; };
      auto& k = st.carry[r];
      k.begin = st.host[r];
      double h = st.host[r];
      const double data = c.data_ms * 1e-3 + delay_s(Site::data);
      h += data;
      d_data[r] = data;
      // forward: device work queued at the start of forward, then host launch overhead
      const double fwd_start = h;
      const double dev_fwd = c.fwd_device_ms * 1e-3 + delay_s(Site::forward_device);
      st.device[r] = std::max(st.device[r], fwd_start) + dev_fwd;
      st.fwd_event[r] = dev_fwd;
      h += c.fwd_host_ms * 1e-3 + delay_s(Site::forward_host);
      d_fwd[r] = h - fwd_start;
      // backward: device work queued, launches, then the gradient synchronisation
      k.bwd_start = h;
      bwd_dev[j] = c.bwd_device_ms * 1e-3 + delay_s(Site::backward_device);
      entry[j] = delay_s(Site::backward_collective);
      bwd_host[j] = c.bwd_host_ms * 1e-3;
      if (single) {
        st.device[r] = std::max(st.device[r], h) + bwd_dev[j];
        k.own_done = std::max(h + bwd_host[j], st.device[r]) + entry[j];  // arrival at the collective
        arrive_max = std::max(arrive_max, k.own_done);
      }
      hb[j] = h;
      dev[j] = st.device[r];
      k.callbacks_s = c.callbacks_ms * 1e-3 + delay_s(Site::callbacks);
      k.optim_s = c.optim_ms * 1e-3 + delay_s(Site::optimizer);
    }
    if (single) continue;
    // Bucket i is queued when the host has paid the launches of the buckets before it; its
    // collective can start once its compute is done (and, after a late entry, once the buckets
    // before it started: the comm engine takes them in order).
    for (std::size_t i = 0; i < B; ++i) {
      const double frac = st.frac[i];
      for (int j = 0; j < len; ++j) dev[j] = std::max(dev[j], hb[j]) + bwd_dev[j] * frac;
      if (i == 0) {
        for (int j = 0; j < len; ++j) launched[j] = dev[j] + entry[j];
      } else {
        for (int j = 0; j < len; ++j) launched[j] = std::max(dev[j], launched[j]);
      }
      // Rank-major (a rank's buckets side by side, for pass 2's one stream); the block's
      // stores stay within a few KiB.
      double* l = st.launch.data() + static_cast<std::size_t>(r0) * B + i;
      for (int j = 0; j < len; ++j) l[static_cast<std::size_t>(j) * B] = launched[j];
      st.all_in[i] = std::max(st.all_in[i], Eigen::Map<const Eigen::ArrayXd>(launched, len).maxCoeff());
      for (int j = 0; j < len; ++j) hb[j] += bwd_host[j] * frac;
    }
    for (int j = 0; j < len; ++j) {
      st.device[r0 + j] = dev[j];
      st.carry[r0 + j].own_done = std::max(hb[j], dev[j]);
    }
  }
  // The collectives: one after backward (single) or one bucket at a time, each starting when
  // every rank has entered it.
  double prev = 0;
  for (std::size_t i = 0; i < B && !single; ++i) {
    st.bucket_end[i] = std::max(st.all_in[i], prev) + st.bucket_s[i];
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
      // The wait from the rank's arrival, as the real comm engines measure it (sim/sim.h,
      // Comm::wait_buckets): from the entry of its last bucket to the completion of every bucket.
      st.wait_bwd[r] = std::max(0.0, st.bucket_end[B - 1] - st.launch[static_cast<std::size_t>(r) * B + (B - 1)]);
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
  wall.assign(st.wall.begin(), st.wall.end());
  m.set_sync_wait_column(row, 2, st.wait_bwd);
  if (st.sync_callbacks) m.set_sync_wait_column(row, 3, st.wait_cb);
  const int t = static_cast<int>(step);  // the sampling rule counts steps from 0
  const bool sampled = std::floor((t + 1) * cfg.event_q) > std::floor(t * cfg.event_q);
  if (sampled) m.set_fwd_event_column(row, st.fwd_event);
  ++st.step;
}

}  // namespace sf::sim
