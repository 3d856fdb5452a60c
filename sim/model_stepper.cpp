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
  std::vector<double> frac, bucket_s, launch, bucket_end;
  std::size_t B = 0;
  double whole_s = 0, barrier_s = 0;
  // Absolute times per rank: the host clock and when its device stream is next free.
  std::vector<double> host, device, arrive, begin, bwd_start, own_done;
  std::vector<std::array<double, 5>> d;
  std::vector<double> fwd_event, wait_bwd, wait_cb;
  std::vector<StageCosts> costs;  // this step's draws, one per rank (counter-based: order-free)
  std::int64_t step = 0;

  State(const ModelConfig& c, const inject::FaultPlan& p)
      : cfg(c),
        plan(p),
        sync_callbacks(c.sync_callbacks || p.scenario->sync_callbacks),
        host(c.ranks, 0.0),
        device(c.ranks, 0.0),
        arrive(c.ranks),
        begin(c.ranks),
        bwd_start(c.ranks),
        own_done(c.ranks),
        d(c.ranks),
        fwd_event(c.ranks),
        wait_bwd(c.ranks),
        wait_cb(c.ranks),
        costs(c.ranks) {
    const auto buckets = bucket_floats(cfg.layout);
    B = buckets.size();
    double total = 0;
    for (auto b : buckets) total += static_cast<double>(b);
    frac.resize(B);
    bucket_s.resize(B);
    bucket_end.resize(B);
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
  for (int r = 0; r < R; ++r) {
    const StageCosts& c = st.costs[r] = draw_costs(cfg.costs, cfg.variation, cfg.seed, r, step);
    st.begin[r] = st.host[r];
    double h = st.host[r];
    const double data = c.data_ms * 1e-3 + plan.delay_s(Site::data, r, step);
    h += data;
    st.d[r][0] = data;
    // forward: device work queued at the start of forward, then host launch overhead
    const double fwd_start = h;
    const double dev_fwd = c.fwd_device_ms * 1e-3 + plan.delay_s(Site::forward_device, r, step);
    st.device[r] = std::max(st.device[r], fwd_start) + dev_fwd;
    st.fwd_event[r] = dev_fwd;
    h += c.fwd_host_ms * 1e-3 + plan.delay_s(Site::forward_host, r, step);
    st.d[r][1] = h - fwd_start;
    // backward: device work queued, launches, then the gradient synchronisation
    st.bwd_start[r] = h;
    const double bwd_dev = c.bwd_device_ms * 1e-3 + plan.delay_s(Site::backward_device, r, step);
    const double entry = plan.delay_s(Site::backward_collective, r, step);
    if (cfg.sync_mode == SyncMode::single) {
      st.device[r] = std::max(st.device[r], h) + bwd_dev;
      st.arrive[r] = std::max(h + c.bwd_host_ms * 1e-3, st.device[r]) + entry;
    } else {
      // Bucket i is queued when the host has paid the launches of the buckets before it; its
      // collective can start once its compute is done (and, after a late entry, once the
      // buckets before it started: the comm engine takes them in order).
      double hb = h;
      for (std::size_t i = 0; i < B; ++i) {
        st.device[r] = std::max(st.device[r], hb) + bwd_dev * st.frac[i];
        double& l = st.launch[static_cast<std::size_t>(r) * B + i];
        l = i == 0 ? st.device[r] + entry : std::max(st.device[r], st.launch[static_cast<std::size_t>(r) * B + i - 1]);
        hb += c.bwd_host_ms * 1e-3 * st.frac[i];
      }
      st.own_done[r] = std::max(hb, st.device[r]);
    }
  }
  if (cfg.sync_mode == SyncMode::single) {
    const double exit = *std::max_element(st.arrive.begin(), st.arrive.end()) + st.whole_s;
    for (int r = 0; r < R; ++r) {
      st.wait_bwd[r] = exit - st.arrive[r];
      st.d[r][2] = exit - st.bwd_start[r];
      st.host[r] = exit;
    }
  } else {
    // One bucket collective at a time, each starting when every rank has entered it.
    double prev = 0;
    for (std::size_t i = 0; i < B; ++i) {
      double all_in = 0;
      for (int r = 0; r < R; ++r) all_in = std::max(all_in, st.launch[static_cast<std::size_t>(r) * B + i]);
      st.bucket_end[i] = std::max(all_in, prev) + st.bucket_s[i];
      prev = st.bucket_end[i];
    }
    for (int r = 0; r < R; ++r) {
      // Time inside collectives: the union of [entry, completion] over the rank's buckets.
      double inside = 0, lo = -1, hi = -1;
      for (std::size_t i = 0; i < B; ++i) {
        const double a = st.launch[static_cast<std::size_t>(r) * B + i], e = st.bucket_end[i];
        if (a > hi) {
          inside += hi - lo;
          lo = a;
        }
        hi = std::max(hi, e);
      }
      inside += hi - lo;
      st.wait_bwd[r] = inside;
      const double end = std::max(st.own_done[r], st.bucket_end[B - 1]);
      st.d[r][2] = end - st.bwd_start[r];
      st.host[r] = end;
    }
  }
  for (int r = 0; r < R; ++r) {
    const StageCosts& c = st.costs[r];
    const double cb_start = st.host[r];
    st.host[r] += c.callbacks_ms * 1e-3 + plan.delay_s(Site::callbacks, r, step);
    st.arrive[r] = st.host[r];
    st.d[r][3] = cb_start;
  }
  const double cb_exit = st.sync_callbacks ? *std::max_element(st.arrive.begin(), st.arrive.end()) + st.barrier_s : 0.0;
  const int t = static_cast<int>(step);  // the sampling rule counts steps from 0
  const bool sampled = std::floor((t + 1) * cfg.event_q) > std::floor(t * cfg.event_q);
  for (int r = 0; r < R; ++r) {
    const StageCosts& c = st.costs[r];
    if (st.sync_callbacks) {
      st.wait_cb[r] = cb_exit - st.arrive[r];
      st.host[r] = cb_exit;
    }
    st.d[r][3] = st.host[r] - st.d[r][3];
    const double o = c.optim_ms * 1e-3 + plan.delay_s(Site::optimizer, r, step);
    st.host[r] += o;
    st.d[r][4] = o;
    m.set_record(row, r, st.d[r], st.host[r] - st.begin[r]);
    m.set_sync_wait(row, r, 2, st.wait_bwd[r]);
    if (st.sync_callbacks) m.set_sync_wait(row, r, 3, st.wait_cb[r]);
    if (sampled) m.set_fwd_event(row, r, frontier::EventState::ready, st.fwd_event[r]);
  }
  ++st.step;
}

}  // namespace sf::sim
