#include "detail.h"

#include <stdexcept>

namespace sf::sim {

std::vector<std::string> workload_stages(const WorkloadConfig& cfg) {
  const auto base = frontier::default_explicit_stages();
  if (cfg.accumulation <= 1) return base;
  std::vector<std::string> out;
  for (int i = 0; i < cfg.accumulation; ++i)
    for (int s = 0; s < 3; ++s) out.push_back(base[s] + frontier::kMicrostepSeparator + std::to_string(i));
  out.push_back(base[3]);
  out.push_back(base[4]);
  return out;
}

StageIndex stage_index(const WorkloadConfig& cfg) {
  StageIndex idx;
  const int m = std::max(1, cfg.accumulation);
  for (int i = 0; i < m; ++i) {
    idx.data.push_back(3 * i);
    idx.fwd.push_back(3 * i + 1);
    idx.bwd.push_back(3 * i + 2);
  }
  idx.callbacks = 3 * m;
  idx.optim = 3 * m + 1;
  return idx;
}

Workload::Loader::Loader(const StageCosts& costs, bool prefetch, std::int64_t spin_ns)
    : costs_(costs), prefetch_(prefetch), spin_ns_(spin_ns) {
  if (prefetch_) thread_ = std::thread([this] { produce(); });
}

Workload::Loader::~Loader() {
  if (!prefetch_) return;
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Workload::Loader::produce() {
  for (;;) {
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stop_ || ready_ < 2; });  // prefetch depth 2
      if (stop_) return;
    }
    inject::host_delay(costs_.loader_ms * 1e-3, 0);  // a worker preparing the next batch
    {
      std::lock_guard lock(m_);
      ++ready_;
    }
    cv_.notify_all();
  }
}

void Workload::Loader::next(double loader_s, double main_s) {
  if (prefetch_) {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return ready_ > 0; });
    --ready_;
    lock.unlock();
    cv_.notify_all();
  } else {
    inject::host_delay(loader_s, spin_ns_);
  }
  // Collate/transfer in the main process, plus an injected worker-to-main stall.
  inject::host_delay(main_s, spin_ns_);
}

Workload::Workload(const WorkloadConfig& cfg, const inject::FaultPlan& plan, Device& device, Comm& comm, int rank)
    : cfg_(cfg),
      plan_(plan),
      device_(device),
      comm_(comm),
      rank_(rank),
      idx_(stage_index(cfg)),
      loader_(std::make_unique<Loader>(cfg.costs.batch_scaled(cfg.batch_share), cfg.prefetch, cfg.spin_ns)),
      buckets_(bucket_floats(cfg.layout, cfg.sharded ? static_cast<std::size_t>(comm.size()) : 1)) {
  std::size_t total = 0;
  for (auto b : buckets_) total += b;
  if (total > device.grad_floats())
    throw std::invalid_argument("gradient buckets (" + std::to_string(total) + " floats) exceed the device buffer (" +
                                std::to_string(device.grad_floats()) + ")");
}

Workload::~Workload() = default;

void Workload::fetch_ahead(std::int64_t next_step, recorder::Recorder* rec) {
  // Called between steps: the recorder charges this wait to the step that consumes the batch.
  const StageCosts c = draw_costs(cfg_.costs, cfg_.variation, cfg_.seed, rank_, next_step).batch_scaled(cfg_.batch_share);
  const double inv = 1.0 / static_cast<double>(idx_.data.size());
  if (rec) rec->begin_stage(idx_.data[0]);
  loader_->next(c.loader_ms * 1e-3 * inv,
                c.data_ms * 1e-3 * inv + cfg_.batch_share * plan_.delay_s(inject::Site::data, rank_, next_step));
  if (rec) rec->end_stage(idx_.data[0]);
  have_batch_ = true;
}

void Workload::backward_sync(std::int64_t step, const StageCosts& c, double inv, recorder::Recorder* rec) {
  using inject::Site;
  const double extra = cfg_.batch_share * plan_.delay_s(Site::backward_device, rank_, step);
  const double entry_delay = plan_.delay_s(Site::backward_collective, rank_, step);
  if (cfg_.sync_mode == SyncMode::single) {
    // The paper-comparison step: all backward work, then one blocking collective on the whole
    // gradient once the host has seen the device finish.
    device_.compute(c.bwd_device_ms * 1e-3 * inv);
    if (extra > 0) device_.spin(extra);
    host(c.bwd_host_ms * 1e-3 * inv);
    device_.synchronize();  // gradients must be complete before the host-side collective
    host(entry_delay);
    if (rec) rec->begin_side();
    if (cfg_.sharded) comm_.reduce_scatter(device_);
    else comm_.allreduce(device_);
    if (rec) rec->end_side();
    return;
  }
  // DDP: backward produces the buckets in order; each bucket's collective is started as soon as
  // its gradients are ready and runs on the comm engine while the rest of backward computes. The
  // backward compute of a bucket is taken proportional to its gradient bytes (compute in
  // proportion to parameters); an injected compute fail-slow slows every bucket alike.
  std::size_t total = 0;
  for (auto b : buckets_) total += b;
  const BucketOp op = cfg_.sharded ? BucketOp::reduce_scatter : BucketOp::allreduce;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    const double frac = static_cast<double>(buckets_[i]) / static_cast<double>(total);
    device_.compute(c.bwd_device_ms * 1e-3 * inv * frac);
    if (extra > 0) device_.spin(extra * frac);
    comm_.start_bucket(device_, offset, buckets_[i], op, i == 0 ? entry_delay : 0.0);
    host(c.bwd_host_ms * 1e-3 * inv * frac);  // launch overhead of this bucket's kernels
    offset += buckets_[i];
  }
  device_.synchronize();  // this rank's own backward compute is done
  // Then the step waits for the last bucket before the optimizer. The side evidence is the time
  // this rank spent inside bucket collectives (waiting for peers included), measured by the comm
  // engine: a rank the others waited for spends the least.
  const double inside = comm_.wait_buckets(device_);
  if (rec) rec->add_side(static_cast<std::int64_t>(inside * 1e9));
}

void Workload::step(std::int64_t step, recorder::Recorder* rec, bool skip_record) {
  using inject::Site;
  if (skip_record) rec = nullptr;
  const StageCosts c = draw_costs(cfg_.costs, cfg_.variation, cfg_.seed, rank_, step).batch_scaled(cfg_.batch_share);
  const double share = cfg_.batch_share;  // of the faults at data and forward too (a slow rate)
  const int m = static_cast<int>(idx_.data.size());
  const double inv = 1.0 / m;
  auto begin = [&](int s) {
    if (rec) rec->begin_stage(s);
  };
  auto end = [&](int s) {
    if (rec) rec->end_stage(s);
  };
  if (rec) rec->begin_step(step);
  for (int i = 0; i < m; ++i) {
    const bool last = i + 1 == m;
    // data: wait for the batch this microstep consumes
    if (!(i == 0 && have_batch_)) {
      begin(idx_.data[i]);
      loader_->next(c.loader_ms * 1e-3 * inv, c.data_ms * 1e-3 * inv + (i == 0 ? share * plan_.delay_s(Site::data, rank_, step) : 0.0));
      end(idx_.data[i]);
    }
    if (i == 0) have_batch_ = false;

    // forward + loss: device work is queued (asynchronous); the host pays launch overhead
    begin(idx_.fwd[i]);
    if (cfg_.sharded) {
      if (rec) rec->begin_side();
      comm_.allgather(device_);
      if (rec) rec->end_side();
    }
    if (rec && i == 0) rec->begin_device_event();
    device_.compute(c.fwd_device_ms * 1e-3 * inv);
    if (i == 0) {
      if (const double d = share * plan_.delay_s(Site::forward_device, rank_, step); d > 0) device_.spin(d);
    }
    if (rec && i == 0) rec->end_device_event();
    host(c.fwd_host_ms * 1e-3 * inv + (i == 0 ? share * plan_.delay_s(Site::forward_host, rank_, step) : 0.0));
    end(idx_.fwd[i]);

    // backward: kernels queued, launch overhead; the last microstep also synchronises gradients
    begin(idx_.bwd[i]);
    if (last) {
      backward_sync(step, c, inv, rec);
    } else {
      device_.compute(c.bwd_device_ms * 1e-3 * inv);
      host(c.bwd_host_ms * 1e-3 * inv);
    }
    end(idx_.bwd[i]);
  }

  begin(idx_.callbacks);
  host(c.callbacks_ms * 1e-3 + plan_.delay_s(Site::callbacks, rank_, step));
  if (cfg_.sync_callbacks) {
    if (rec) rec->begin_side();
    comm_.barrier();
    if (rec) rec->end_side();
  }
  end(idx_.callbacks);

  begin(idx_.optim);
  host(c.optim_ms * 1e-3 + plan_.delay_s(Site::optimizer, rank_, step));
  end(idx_.optim);
  if (rec) rec->end_step();
}

}  // namespace sf::sim
