// The model one step at a time (ModelStepper): the timeline of the DDP-like step (single or
// bucketed sync, seeded counter-based cost draws), kept in O(R) state so `sim` can score 10^6 ranks step by step without holding the N × R × S matrix.
#include "detail.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <emmintrin.h>

// Lanes8 below is a 64-byte GCC vector: GCC notes that passing one by value changes the ABI
// without AVX-512. Its helpers are always inline, so no such vector crosses a call. Clang
// honours this pragma; GCC's note reads only the command line (-Wno-psabi in CMakeLists.txt).
#pragma GCC diagnostic ignored "-Wpsabi"

// Before a loop over a block's ranks whose arrays (the row's columns, the per-rank state, the
// block's scratch) never overlap: GCC vectorises it without the overlap checks at run time.
// (Clang builds only the sanitizer trees here; its assume_safety pragma warns where a loop then
// stays scalar, so it gets none.)
#if defined(__clang__)
#define SF_NO_ALIAS_ACROSS_RANKS
#else
#define SF_NO_ALIAS_ACROSS_RANKS _Pragma("GCC ivdep")
#endif

namespace sf::sim {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int kBlock = CostSampler::Block::kMax;  // ranks a pass takes at a time
constexpr double kZeros[kBlock] = {};             // a block's delays where the fault does not act

/// The largest of v[0 .. len) (len >= 1; the model's times are finite): eight running maxima,
/// as x86's max instructions take them (a > b ? a : b), so that every build runs them as vector
/// instructions inlined into the pass.
[[gnu::always_inline]] inline double block_max(const double* v, int len) {
  double m = v[0];
  int j = 0;
  if (len >= 8) {
    double acc[8];
    std::copy_n(v, 8, acc);
    for (j = 8; j + 8 <= len; j += 8)
      for (int k = 0; k < 8; ++k) acc[k] = acc[k] > v[j + k] ? acc[k] : v[j + k];
    for (int k = 0; k < 8; ++k) m = m > acc[k] ? m : acc[k];
  }
  for (; j < len; ++j) m = m > v[j] ? m : v[j];
  return m;
}

/// Eight ranks as one GCC vector (AVX-512 registers in the wide build, SSE2 pairs elsewhere), and
/// std::max's own expression lane by lane (a < b ? b : a: the same value for every input).
using Lanes8 = double __attribute__((vector_size(64)));
[[gnu::always_inline]] inline Lanes8 load8(const double* p) {
  Lanes8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store8(double* p, Lanes8 v) { __builtin_memcpy(p, &v, sizeof v); }
/// x in every lane: lane 0's value shuffled to all eight (one broadcast; GCC built the
/// eight-value initialiser as eight masked broadcasts).
[[gnu::always_inline]] inline Lanes8 splat8(double x) {
  const Lanes8 v{x};
  return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0);
}
[[gnu::always_inline]] inline Lanes8 max8(Lanes8 a, Lanes8 b) { return a < b ? b : a; }
/// Buckets up to which pass 1 keeps every bucket's recurrence of eight ranks in registers.
constexpr std::size_t kLaneBuckets = 8;

/// Copies src[0, len) to dst by non-temporal stores where dst is 16-byte aligned: arrays a pass
/// writes and a later pass reads back, after the whole row went by (the caches cannot hold them),
/// go to memory without being read from it first.
[[gnu::always_inline]] inline void stream_to(double* dst, const double* src, int len) {
  int j = 0;
  if ((reinterpret_cast<std::uintptr_t>(dst) & 15) != 0 && len > 0) {
    dst[0] = src[0];
    j = 1;
  }
  for (; j + 2 <= len; j += 2) _mm_stream_pd(dst + j, _mm_loadu_pd(src + j));
  for (; j < len; ++j) dst[j] = src[j];
}
}  // namespace

bool wide_passes_available() {
  static const bool yes =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return yes;
}

// The passes take ranks a block at a time, each step of a rank's timeline one loop over the
// block's arrays (no branch, no call): the compiler runs them over several ranks per instruction,
// and the state a block reads and writes stays in L1 between those loops.
struct ModelStepper::State {
  ModelConfig cfg;
  inject::FaultPlan plan;
  bool sync_callbacks;
  // The same buckets as the workload; each bucket's backward compute in proportion to its bytes.
  std::vector<double> frac, bucket_s, bucket_end, all_in;
  std::size_t B = 0;
  double whole_s = 0, barrier_s = 0;
  // Absolute time per rank, kept across steps: the host clock (when the rank's step starts).
  // The device stream needs none (arrive_block: it is free by the next step's forward).
  std::vector<double> host;
  /// What each rank carries from pass 1 to the passes after the global collectives: when its
  /// backward started, when its own work was done (its arrival at the collective), its callbacks'
  /// and optimizer's durations. (The step's start is host[r] until the rank's step ends.)
  std::vector<double> bwd_start, own_done, callbacks_s, optim_s;
  /// The ranks the plan targets, ascending: each block finds its own by bisection.
  std::vector<int> targeted;

  /// Where the passes put a block's cells. The stages come in order (data, forward, backward,
  /// callbacks, optimizer), then the wall: a pass writes stage S of ranks r0 .. r0 + len − 1 at
  /// stage<S>(r0), then calls staged<S>(r0, len); the walls at ends(r0), then ended(r0, len).
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
    double* stage(int r0) { return col[S] + r0; }
    template <int S>
    void staged(int, int) {}
    double* ends(int r0) { return wall + r0; }
    void ended(int, int) {}
    /// Pass 1's stages of the block (the row's cells are read again only when leave() commits it).
    [[gnu::always_inline]] void put01(int r0, int len, const double* s0, const double* s1) {
      stream_to(col[0] + r0, s0, len);
      stream_to(col[1] + r0, s1, len);
    }
    /// The block's sync waits in stage s, into the row's column as they are made (no row-long
    /// buffer to write, read back, check and convert after the pass).
    void sync_waits(int s, int r0, int len, const double* w) {
      m->set_sync_wait_block(row, s, r0, {w, static_cast<std::size_t>(len)});
    }
    void done(int r_end) { m->commit_ranks(row, r_end, wall); }
  };
  /// MaxOut: reduced at once to the step's maxima, without a row — the prefixes in the order
  /// StageMatrix::commit_step and frontier::account take them (0 + d0 + d1 + ..., the residual
  /// max(0, wall − Σ explicit) last), so every frontier value is theirs bit for bit (a max is
  /// exact in any order).
  struct MaxOut {
    static constexpr bool kSide = false;
    std::array<double, 6> top{kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
    double wall_max = 0;
    double* prefix = nullptr;  // per rank: its running prefix P[t,r,s] of the stages written so far
    double block[6][kBlock];   // a block's stages and walls
    template <int S>
    double* stage(int) { return block[S]; }
    /// Stages 2 on (pass 1's come through put01).
    template <int S>
    [[gnu::always_inline]] void staged(int r0, int len) {
      static_assert(S >= 2);
      double* p = prefix + r0;
      for (int j = 0; j < len; ++j) p[j] += block[S][j];
      top[S] = std::max(top[S], block_max(p, len));
    }
    double* ends(int) { return block[5]; }
    [[gnu::always_inline]] void put01(int r0, int len, const double* s0, const double* s1) {
      double p0[kBlock], p1[kBlock];
      for (int j = 0; j < len; ++j) {
        p0[j] = 0.0 + s0[j];
        p1[j] = p0[j] + s1[j];
      }
      top[0] = std::max(top[0], block_max(p0, len));
      top[1] = std::max(top[1], block_max(p1, len));
      stream_to(prefix + r0, p1, len);
    }
    [[gnu::always_inline]] void ended(int r0, int len) {
      const double* p = prefix + r0;
      double residual[kBlock];
      for (int j = 0; j < len; ++j) {
        const double e = block[5][j] - p[j];
        residual[j] = p[j] + (e > 0 ? e : 0.0);
      }
      top[5] = std::max(top[5], block_max(residual, len));
      wall_max = std::max(wall_max, block_max(block[5], len));
    }
    void done(int) {}
  };
  // When each rank's last bucket collective could start (bucketed sync, a row's side evidence:
  // the wait is measured from it); the earlier buckets' starts matter only through all_in.
  std::vector<double> last_launch;
  // This step's forward events (the durations, walls and sync waits go straight into the
  // matrix's row), sized by the first step that samples them.
  std::vector<double> fwd_event;
  std::vector<double> prefix;  // MaxOut's, sized by the first step_maxima
  double exit_single = 0;      // this step's end of the single collective
  bool sample_fwd = false;     // this step's row samples forward events (fwd_event is written)
  std::vector<double> row_wall;  // step_into's walls, reused
  CostSampler sampler;  // draw_costs with the rank factors and jitter levels computed once (empty in a twin)
  std::int64_t step = 0;
  bool wide = model_pass_path.load() == PassPath::fastest && wide_passes_available();  // step_wide
  /// The healthy twin (add_twin): its own timeline, stepped on this state's draws and reduced
  /// through twin_out; twin_arrive is its last arrival at the single collective this step.
  std::unique_ptr<State> twin;
  std::unique_ptr<MaxOut> twin_out;
  double twin_arrive = 0;
  StepMaxima twin_last;

  /// `draws`: whether this state draws its own costs (a twin reads its model's).
  State(const ModelConfig& c, const inject::FaultPlan& p, bool draws = true)
      : cfg(c),
        plan(p),
        sync_callbacks(c.sync_callbacks || p.scenario->sync_callbacks),
        host(c.ranks, 0.0),
        bwd_start(c.ranks),
        own_done(c.ranks),
        callbacks_s(c.ranks),
        optim_s(c.ranks),
        targeted(p.ranks),
        sampler(c.costs, c.variation, c.seed, draws ? c.ranks : 0) {
    // The timeline takes every cost as time spent (arrive_block relies on it).
    if (const auto v = validate(c.costs); !v.empty()) throw std::invalid_argument("model: " + v);
    std::sort(targeted.begin(), targeted.end());
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

  /// A block of ranks in pass 1 (the block's draws are apart: a twin reads them too).
  struct Block {
    double hb[kBlock], dev[kBlock], dev_fwd[kBlock], bwd_dev[kBlock], entry[kBlock], bwd_host[kBlock],
        launched[kBlock];
    double s0[kBlock], s1[kBlock], bs[kBlock], cb[kBlock], opt[kBlock], od[kBlock];  // pass 1's results
    double delay[kSites][kBlock];  // per site, where the fault acts on a rank of the block
  };

  /// Each site's delay for the block's ranks: kZeros unless the fault acts on one of them this step.
  [[gnu::always_inline]] std::array<const double*, kSites> block_delays(const SiteDelays& sd, int r0, int len, Block& b) const {
    std::array<const double*, kSites> d;
    d.fill(kZeros);
    if (!sd.any) return d;
    const auto lo = std::lower_bound(targeted.begin(), targeted.end(), r0);
    const auto hi = std::lower_bound(lo, targeted.end(), r0 + len);
    if (lo == hi) return d;
    for (int i = 0; i < kSites; ++i) {
      if (sd.at[i] == 0) continue;
      std::fill_n(b.delay[i], len, 0.0);
      for (auto t = lo; t != hi; ++t) b.delay[i][*t - r0] = sd.at[i];
      d[i] = b.delay[i];
    }
    return d;
  }

  /// Pass 1 for the block of len ranks from r0, its draws in c: data, forward, backward up to the
  /// collectives. Returns the block's last arrival at the single collective (single sync), else 0.
  template <class Out>
  [[gnu::always_inline]] double arrive_block(Out& out, const SiteDelays& sd, int r0, int len, const CostSampler::Block& c, Block& b) {
    using inject::Site;
    const auto d = block_delays(sd, r0, len, b);
    auto at = [&](Site s) { return d[static_cast<int>(s)]; };
    const double *d_data = at(Site::data), *d_fdev = at(Site::forward_device), *d_fhost = at(Site::forward_host),
                 *d_bdev = at(Site::backward_device), *d_entry = at(Site::backward_collective),
                 *d_cb = at(Site::callbacks), *d_opt = at(Site::optimizer);
    double *s0 = b.s0, *s1 = b.s1;
    const double* h0 = host.data() + r0;
    double *bs = b.bs, *cb = b.cb, *opt = b.opt;
    SF_NO_ALIAS_ACROSS_RANKS
    for (int j = 0; j < len; ++j) {
      const double data = c.data[j] * 1e-3 + d_data[j];
      const double fwd_start = h0[j] + data;
      // forward: device work queued at its start, then host launch overhead. The device is idle
      // by then: a rank's step ends no earlier than its device work (below), and every cost and
      // delay is >= 0 (checked), so the stream of the step before is free by fwd_start and
      // max(free, fwd_start) is fwd_start, bit for bit: no per-rank state carries the device.
      b.dev_fwd[j] = c.fwd_device[j] * 1e-3 + d_fdev[j];
      b.dev[j] = fwd_start + b.dev_fwd[j];
      const double h = fwd_start + (c.fwd_host[j] * 1e-3 + d_fhost[j]);
      s0[j] = data;
      s1[j] = h - fwd_start;
      // backward: device work queued, launches, then the gradient synchronisation
      bs[j] = h;
      b.hb[j] = h;
      b.bwd_dev[j] = c.bwd_device[j] * 1e-3 + d_bdev[j];
      b.entry[j] = d_entry[j];
      b.bwd_host[j] = c.bwd_host[j] * 1e-3;
      cb[j] = c.callbacks[j] * 1e-3 + d_cb[j];
      opt[j] = c.optim[j] * 1e-3 + d_opt[j];
    }
    if constexpr (Out::kSide)
      if (sample_fwd) std::copy_n(b.dev_fwd, len, fwd_event.data() + r0);
    stream_to(bwd_start.data() + r0, bs, len);
    stream_to(callbacks_s.data() + r0, cb, len);
    stream_to(optim_s.data() + r0, opt, len);
    out.put01(r0, len, s0, s1);
    if (cfg.sync_mode != SyncMode::single) {
      buckets_of_block<Out::kSide>(r0, len, b);
      return 0;
    }
    double* od = b.od;
    for (int j = 0; j < len; ++j) {
      const double dev = std::max(b.dev[j], b.hb[j]) + b.bwd_dev[j];
      od[j] = std::max(b.hb[j] + b.bwd_host[j], dev) + b.entry[j];  // arrival at the collective
    }
    stream_to(own_done.data() + r0, od, len);
    return block_max(od, len);
  }

  /// Pass 1's bucket loop for a block of `len` ranks from r0. Bucket i is queued when the host
  /// has paid the launches of the buckets before it; its collective can start once its compute
  /// is done (and, after a late entry, once the buckets before it started: the comm engine takes
  /// them in order).
  template <bool kSide>
  [[gnu::always_inline]] void buckets_of_block(int r0, int len, Block& b) {
    // Up to kLaneBuckets buckets, eight ranks at a time in registers; the rest a pass per bucket.
    const int j0 = B <= kLaneBuckets ? buckets_in_lanes<kSide>(len, b) : 0;
    if (j0 < len) buckets_by_pass(j0, len, b);
    if constexpr (kSide) stream_to(last_launch.data() + r0, b.launched, len);
    stream_to(own_done.data() + r0, b.od, len);
  }

  /// The bucket loop for ranks [j0, len) of the block, one pass over them per bucket and quantity.
  [[gnu::always_inline]] void buckets_by_pass(int j0, int len, Block& b) {
    for (std::size_t i = 0; i < B; ++i) {
      const double f = frac[i];
      for (int j = j0; j < len; ++j) b.dev[j] = std::max(b.dev[j], b.hb[j]) + b.bwd_dev[j] * f;
      if (i == 0) {
        for (int j = j0; j < len; ++j) b.launched[j] = b.dev[j] + b.entry[j];
      } else {
        for (int j = j0; j < len; ++j) b.launched[j] = std::max(b.dev[j], b.launched[j]);
      }
      all_in[i] = std::max(all_in[i], block_max(b.launched + j0, len - j0));
      for (int j = j0; j < len; ++j) b.hb[j] += b.bwd_host[j] * f;
    }
    for (int j = j0; j < len; ++j) b.od[j] = std::max(b.hb[j], b.dev[j]);
  }

  /// The bucket loop for the block's whole eights of ranks with each rank's recurrences in
  /// registers, every bucket in turn (not one pass over the block per bucket and quantity): the
  /// same operations on each rank in the same order, each bucket's maximum taken in lanes (a max
  /// is exact in any order). Returns the ranks it took (the rest go by buckets_by_pass).
  template <bool kSide>
  [[gnu::always_inline]] int buckets_in_lanes(int len, Block& b) {
    Lanes8 top[kLaneBuckets], fs[kLaneBuckets];  // fs: each bucket's fraction, splat once a block
    for (std::size_t i = 0; i < B; ++i) {
      top[i] = splat8(kNegInf);
      fs[i] = splat8(frac[i]);
    }
    int j = 0;
    for (; j + 8 <= len; j += 8) {
      Lanes8 dev = load8(b.dev + j), hb = load8(b.hb + j), launched = dev;
      const Lanes8 bwd_dev = load8(b.bwd_dev + j), bwd_host = load8(b.bwd_host + j);
      for (std::size_t i = 0; i < B; ++i) {
        const Lanes8 f = fs[i];
        dev = max8(dev, hb) + bwd_dev * f;
        launched = i == 0 ? dev + load8(b.entry + j) : max8(dev, launched);
        top[i] = max8(top[i], launched);
        hb += bwd_host * f;
      }
      if constexpr (kSide) store8(b.launched + j, launched);
      store8(b.od + j, max8(hb, dev));
    }
    for (std::size_t i = 0; i < B; ++i)
      for (int k = 0; k < 8; ++k) all_in[i] = std::max(all_in[i], top[i][k]);
    return j;
  }

  /// Pass 1 over every block of ranks; the time every rank has entered each collective (the max
  /// the collective waits for) gathered on the way. Returns the last arrival (single sync). The
  /// twin, when there is one, takes each block of draws after the model.
  template <class Out>
  [[gnu::always_inline]] double arrive(Out& out) {
    std::fill(all_in.begin(), all_in.end(), 0.0);
    const SiteDelays sd = site_delays();
    SiteDelays twin_sd;
    if (twin) {
      twin->begin_step(*twin_out);
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
      if (twin) twin_arrive = std::max(twin_arrive, twin->arrive_block(*twin_out, twin_sd, r0, len, c, b));
    }
    _mm_sfence();  // the streamed stores before anything after them (another thread reads the row)
    return arrive_max;
  }

  /// Readies out for a step reduced to its maxima (step_maxima, a twin's step).
  void begin_step(MaxOut& out) {
    if (prefix.empty()) prefix.resize(static_cast<std::size_t>(cfg.ranks));
    out.top.fill(kNegInf);
    out.wall_max = 0;
    out.prefix = prefix.data();
  }

  /// The collectives: one bucket at a time (bucketed sync), each starting when every rank has
  /// entered it; the single collective's end is the last arrival plus whole_s.
  [[gnu::always_inline]] void collectives() {
    double prev = 0;
    for (std::size_t i = 0; i < B && cfg.sync_mode != SyncMode::single; ++i) {
      bucket_end[i] = std::max(all_in[i], prev) + bucket_s[i];
      prev = bucket_end[i];
    }
  }

  /// When the rank's backward ends: at the single collective's end, or once its own work and
  /// every bucket are done.
  [[gnu::always_inline]] double backward_end(double own) const {
    return cfg.sync_mode == SyncMode::single ? exit_single : std::max(own, bucket_end[B - 1]);
  }

  /// Pass 2, per block: backward's end, time inside the collectives, callbacks (and, without a
  /// barrier there, the optimizer and the step's end). Returns the last arrival at callbacks' end.
  template <class Out>
  [[gnu::always_inline]] double leave(Out& out) {
    double cb_arrive_max = 0;
    for (int r0 = 0; r0 < cfg.ranks; r0 += kBlock) {
      const int len = std::min(kBlock, cfg.ranks - r0);
      cb_arrive_max = std::max(cb_arrive_max, leave_block(out, r0, len));
      if (!sync_callbacks) out.done(r0 + len);
    }
    return cb_arrive_max;
  }

  /// leave()'s work for the block of len ranks from r0; returns its last arrival at callbacks' end.
  template <class Out>
  [[gnu::always_inline]] double leave_block(Out& out, int r0, int len) {
    const double *od = own_done.data() + r0, *bs = bwd_start.data() + r0, *cb = callbacks_s.data() + r0;
    double end[kBlock], arrive[kBlock];
    double* s2 = out.template stage<2>(r0);
    SF_NO_ALIAS_ACROSS_RANKS
    for (int j = 0; j < len; ++j) {
      end[j] = backward_end(od[j]);
      s2[j] = end[j] - bs[j];
      arrive[j] = end[j] + cb[j];
    }
    out.template staged<2>(r0, len);
    if constexpr (Out::kSide) {
      // The wait from the rank's arrival, as the real comm engines measure it (sim/sim.h,
      // Comm::wait_buckets): from the entry of its last bucket to the completion of every bucket.
      double w[kBlock];
      if (cfg.sync_mode == SyncMode::single) {
        for (int j = 0; j < len; ++j) w[j] = exit_single - od[j];
      } else {
        const double* ll = last_launch.data() + r0;
        for (int j = 0; j < len; ++j) w[j] = std::max(0.0, bucket_end[B - 1] - ll[j]);
      }
      out.sync_waits(2, r0, len, w);
    }
    if (!sync_callbacks)  // else host[r] stays the step's start for release_callbacks
      finish_block(out, r0, len, end, arrive);
    return block_max(arrive, len);
  }

  /// Callbacks from `end` to `leave`, then the optimizer: the block's stages 3 and 4, its walls
  /// and the next step's start.
  template <class Out>
  [[gnu::always_inline]] void finish_block(Out& out, int r0, int len, const double* end, const double* leave) {
    double* h = host.data() + r0;
    const double* opt = optim_s.data() + r0;
    double *s3 = out.template stage<3>(r0), *s4 = out.template stage<4>(r0), *w = out.ends(r0);
    SF_NO_ALIAS_ACROSS_RANKS
    for (int j = 0; j < len; ++j) {
      const double begin = h[j];
      s3[j] = leave[j] - end[j];
      h[j] = leave[j] + opt[j];
      s4[j] = opt[j];
      w[j] = h[j] - begin;
    }
    out.template staged<3>(r0, len);
    out.template staged<4>(r0, len);
    out.ended(r0, len);
  }

  /// Pass 3: the callbacks' barrier releases every rank when the last arrives.
  template <class Out>
  [[gnu::always_inline]] void release_callbacks(Out& out, double cb_exit) {
    for (int r0 = 0; r0 < cfg.ranks; r0 += kBlock) {
      const int len = std::min(kBlock, cfg.ranks - r0);
      const double *od = own_done.data() + r0, *cb = callbacks_s.data() + r0;
      double end[kBlock], exit[kBlock];
      for (int j = 0; j < len; ++j) {
        end[j] = backward_end(od[j]);  // leave()'s, again
        exit[j] = cb_exit;
      }
      if constexpr (Out::kSide) {
        double w[kBlock];
        for (int j = 0; j < len; ++j) w[j] = cb_exit - (end[j] + cb[j]);
        out.sync_waits(3, r0, len, w);
      }
      finish_block(out, r0, len, end, exit);
      out.done(r0 + len);
    }
  }

  /// One step of the model through `out`, its loops built for this CPU (step_through, step_wide).
  template <class Out>
  void make_step(Out& out) {
    if (wide)
      step_wide(out);
    else
      step_through(out);
  }

  /// step_through with the passes' loops eight ranks per instruction: every pass is inlined here,
  /// so all of it is built for AVX-512 (never fused multiply-adds: sf_sim builds with
  /// -ffp-contract=off, so the cells are step_through's bit for bit).
  template <class Out>
  [[gnu::target("avx512f,avx512vl,avx512dq")]] void step_wide(Out& out) {
    step_through(out);
  }

  /// One step of the model through `out`: the three passes and the collectives between them.
  /// A twin's step goes on after the model's pass 1, from the arrivals it gathered there.
  template <class Out>
  [[gnu::always_inline]] void step_through(Out& out) {
    exit_single = arrive(out) + whole_s;
    after_arrive(out);
    if (twin) {
      twin->exit_single = twin_arrive + twin->whole_s;
      twin->after_arrive(*twin_out);
      ++twin->step;
      twin_last.frontier = twin_out->top;
      twin_last.slowest_wall = twin_out->wall_max;
    }
  }

  /// The collectives and the passes after them.
  template <class Out>
  [[gnu::always_inline]] void after_arrive(Out& out) {
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
  if (cfg.sync_mode != SyncMode::single && st.last_launch.empty())
    st.last_launch.resize(static_cast<std::size_t>(cfg.ranks));
  // The durations and walls go straight into the row's columns and `wall`.
  const std::vector<double*> cols = m.begin_step(row);
  wall.resize(static_cast<std::size_t>(cfg.ranks));
  State::RowOut out{{cols[0], cols[1], cols[2], cols[3], cols[4]}, wall.data(), &m, row};
  st.make_step(out);
  if (st.sample_fwd) m.set_fwd_event_column(row, st.fwd_event);
  ++st.step;
}

ModelStepper::StepMaxima ModelStepper::step_maxima() {
  auto& st = *s_;
  State::MaxOut out;
  st.begin_step(out);
  st.make_step(out);
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
  st.twin_out = std::make_unique<State::MaxOut>();
}

const ModelStepper::StepMaxima& ModelStepper::twin_maxima() const {
  if (!s_->twin || s_->step == 0) throw std::logic_error("ModelStepper::twin_maxima: no twin, or no step yet");
  return s_->twin_last;
}

}  // namespace sf::sim
