// The model one step at a time (ModelStepper): the timeline of model.cpp's window, kept in O(R)
// state so `sim` can score 10^6 ranks step by step without holding the N × R × S matrix.
#include "sf/sim/sim.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <stdexcept>

namespace sf::sim {

struct ModelStepper::State {
  ModelConfig cfg;
  inject::FaultPlan plan;
  bool sync_callbacks;
  std::mt19937_64 rng;
  std::lognormal_distribution<double> noise;
  // Absolute times per rank: the host clock and when its device stream is next free.
  std::vector<double> host, device, arrive, begin;
  std::vector<std::array<double, 5>> d;
  std::vector<double> fwd_event, wait_bwd, wait_cb;
  std::int64_t step = 0;

  State(const ModelConfig& c, const inject::FaultPlan& p)
      : cfg(c),
        plan(p),
        sync_callbacks(c.sync_callbacks || p.scenario->sync_callbacks),
        rng(c.seed * 0x2545f4914f6cdd1dULL + 7),
        noise(0.0, c.jitter),
        host(c.ranks, 0.0),
        device(c.ranks, 0.0),
        arrive(c.ranks),
        begin(c.ranks),
        d(c.ranks),
        fwd_event(c.ranks),
        wait_bwd(c.ranks),
        wait_cb(c.ranks) {}

  double cost(double ms) { return ms * 1e-3 * (cfg.jitter > 0 ? noise(rng) : 1.0); }
};

ModelStepper::ModelStepper(const ModelConfig& cfg, const inject::FaultPlan& plan)
    : s_(std::make_unique<State>(cfg, plan)) {}

ModelStepper::~ModelStepper() = default;

frontier::StageSchema ModelStepper::schema() { return frontier::StageSchema(frontier::default_explicit_stages(), true); }

std::int64_t ModelStepper::next_step() const { return s_->step; }

void ModelStepper::step_into(frontier::StageMatrix& m, int row) {
  using inject::Site;
  auto& st = *s_;
  const int R = st.cfg.ranks;
  if (m.ranks() != R || m.stages() != 6 || row < 0 || row >= m.steps())
    throw std::invalid_argument("model step buffer does not fit the model (ranks, stages or row)");
  const auto& c = st.cfg.costs;
  const auto& plan = st.plan;
  const std::int64_t step = st.step;
  const double collective_s = 0.2e-3;
  for (int r = 0; r < R; ++r) {
    st.begin[r] = st.host[r];
    double h = st.host[r];
    const double data = st.cost(c.data_ms) + plan.delay_s(Site::data, r, step);
    h += data;
    st.d[r][0] = data;
    // forward: device work queued at the start of forward, then host launch overhead
    const double fwd_start = h;
    const double dev_fwd = st.cost(c.fwd_device_ms) + plan.delay_s(Site::forward_device, r, step);
    st.device[r] = std::max(st.device[r], fwd_start) + dev_fwd;
    st.fwd_event[r] = dev_fwd;
    h += st.cost(c.fwd_host_ms) + plan.delay_s(Site::forward_host, r, step);
    st.d[r][1] = h - fwd_start;
    // backward: device work queued, launches, wait for the stream, then enter the collective
    const double bwd_start = h;
    st.device[r] = std::max(st.device[r], bwd_start) + st.cost(c.bwd_device_ms) + plan.delay_s(Site::backward_device, r, step);
    h = std::max(h + st.cost(c.bwd_host_ms), st.device[r]);
    h += plan.delay_s(Site::backward_collective, r, step);
    st.arrive[r] = h;
    st.d[r][2] = bwd_start;  // completed below, once every rank arrived
  }
  const double exit = *std::max_element(st.arrive.begin(), st.arrive.end()) + collective_s;
  for (int r = 0; r < R; ++r) {
    st.wait_bwd[r] = exit - st.arrive[r];
    st.d[r][2] = exit - st.d[r][2];
    st.host[r] = exit;
    const double cb_start = st.host[r];
    st.host[r] += st.cost(c.callbacks_ms) + plan.delay_s(Site::callbacks, r, step);
    st.arrive[r] = st.host[r];
    st.d[r][3] = cb_start;
  }
  const double cb_exit = st.sync_callbacks ? *std::max_element(st.arrive.begin(), st.arrive.end()) + collective_s : 0.0;
  const int t = static_cast<int>(step);  // the sampling rule counts steps from 0
  const bool sampled = std::floor((t + 1) * st.cfg.event_q) > std::floor(t * st.cfg.event_q);
  for (int r = 0; r < R; ++r) {
    if (st.sync_callbacks) {
      st.wait_cb[r] = cb_exit - st.arrive[r];
      st.host[r] = cb_exit;
    }
    st.d[r][3] = st.host[r] - st.d[r][3];
    const double o = st.cost(c.optim_ms) + plan.delay_s(Site::optimizer, r, step);
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
