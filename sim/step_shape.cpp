// The shape of the synthetic step beside its costs: sync mode, gradient buckets, seed-controlled
// cost variation and the model's transport. Shared by the workload (`run`) and the model (`sim`),
// so both draw the same numbers for the same seed.
#include "detail.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include <immintrin.h>

#include <unsupported/Eigen/SpecialFunctions>

namespace sf::sim {

std::string_view to_string(SyncMode m) { return m == SyncMode::single ? "single" : "bucketed"; }

std::optional<SyncMode> sync_mode_from_string(std::string_view s) {
  if (s == "single") return SyncMode::single;
  if (s == "bucketed") return SyncMode::bucketed;
  return std::nullopt;
}

std::string_view to_string(Heterogeneity h) {
  switch (h) {
    case Heterogeneity::none: return "none";
    case Heterogeneity::lognormal: return "lognormal";
    case Heterogeneity::two_tier: return "two-tier";
  }
  return "?";
}

std::optional<Heterogeneity> heterogeneity_from_string(std::string_view s) {
  if (s == "none") return Heterogeneity::none;
  if (s == "lognormal") return Heterogeneity::lognormal;
  if (s == "two-tier" || s == "two_tier") return Heterogeneity::two_tier;
  return std::nullopt;
}

// ---- gradient layout ------------------------------------------------------------------------------

std::string validate(const GradientLayout& l) {
  if (!(l.grad_mib > 0) || l.grad_mib > 4096) return "--grad-mib must be in (0, 4096]";
  if (!(l.model_mib > 0) || l.model_mib > 1e6) return "--model-mib must be in (0, 1e6]";
  if (!(l.bucket_cap_mib > 0)) return "--bucket-mib must be > 0";
  if (!(l.first_bucket_mib > 0)) return "--first-bucket-mib must be > 0";
  if (l.model_mib / l.bucket_cap_mib > 4096) return "--model-mib / --bucket-mib gives more than 4096 buckets";
  return "";
}

std::vector<std::size_t> bucket_floats(const GradientLayout& l, std::size_t multiple) {
  multiple = std::max<std::size_t>(1, multiple);
  // torch DDP (reducer.cpp, compute_bucket_assignment_by_size): the first bucket is capped at
  // 1 MiB so that communication starts early, the others at bucket_cap_mb; the last one holds the
  // rest. Parameters are filled in reverse registration order, the order backward produces them.
  std::vector<double> mib;
  double rest = l.model_mib;
  mib.push_back(std::min(l.first_bucket_mib, rest));
  rest -= mib.back();
  while (rest > 1e-9) {
    mib.push_back(std::min(l.bucket_cap_mib, rest));
    rest -= mib.back();
  }
  const double scale = l.grad_mib / l.model_mib;
  std::vector<std::size_t> out;
  for (double m : mib) {
    const double floats = m * scale * (1 << 20) / sizeof(float);
    const auto units = std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(floats / static_cast<double>(multiple))));
    out.push_back(units * multiple);
  }
  return out;
}

std::size_t total_grad_floats(const GradientLayout& l, std::size_t multiple) {
  std::size_t n = 0;
  for (auto b : bucket_floats(l, multiple)) n += b;
  return n;
}

// ---- seed-controlled variation --------------------------------------------------------------------

namespace {

std::uint64_t mix(std::uint64_t z) {  // SplitMix64's finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A standard normal from (seed, rank, step, slot) alone (Box–Muller on two hashed uniforms).
/// Used for the per-rank (persistent) draws, one per rank: exact, and cost no matter.
double normal(std::uint64_t seed, int rank, std::int64_t step, int slot) {
  std::uint64_t h = mix(seed ^ 0x51ed2701a3c5f1b9ull);
  h = mix(h ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(rank)));
  h = mix(h ^ static_cast<std::uint64_t>(step));
  h = mix(h ^ static_cast<std::uint64_t>(slot));
  const double u1 = (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
  const double u2 = static_cast<double>(mix(h) >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

constexpr std::int64_t kRankDraw = -1;  // the step index of per-rank (persistent) draws

/// The hash of (seed, rank) that jitter_indices starts every step from.
std::uint64_t jitter_key(std::uint64_t seed, int rank) {
  return mix(mix(seed ^ 0x6a09e667f3bcc909ull) ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(rank)));
}

/// The eight 16-bit quantile indices of one (seed, rank, step): two hashed words, four each.
std::array<std::uint16_t, 8> jitter_indices(std::uint64_t key, std::int64_t step) {
  const std::uint64_t h = mix(key ^ static_cast<std::uint64_t>(step));
  const std::uint64_t w[2] = {mix(h ^ 1), mix(h ^ 2)};
  std::array<std::uint16_t, 8> out{};
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::uint16_t>(w[i / 4] >> (16 * (i % 4)));
  return out;
}

}  // namespace

const std::vector<double>& normal_quantiles() {
  // Midpoint quantiles of the standard normal, Φ⁻¹((i + ½) / 2^16), by Eigen's ndtri (Cephes).
  static const std::vector<double> z = [] {
    std::vector<double> q(kJitterLevels);
    for (std::size_t i = 0; i < q.size(); ++i)
      q[i] = Eigen::numext::ndtri((static_cast<double>(i) + 0.5) / static_cast<double>(kJitterLevels));
    return q;
  }();
  return z;
}

std::string validate(const StageCosts& c) {
  for (const double ms : {c.data_ms, c.loader_ms, c.fwd_host_ms, c.fwd_device_ms, c.bwd_host_ms, c.bwd_device_ms,
                          c.callbacks_ms, c.optim_ms})
    if (!(ms >= 0) || !std::isfinite(ms)) return "stage costs must be finite and >= 0 ms (one is " + std::to_string(ms) + ")";
  return "";
}

std::string validate(const Variation& v) {
  if (!(v.jitter_sigma >= 0) || v.jitter_sigma > 1) return "--jitter must be in [0, 1]";
  if (!(v.rank_sigma >= 0) || v.rank_sigma > 2) return "--rank-sigma must be in [0, 2]";
  return "";
}

double rank_factor(const Variation& v, std::uint64_t seed, int rank) {
  switch (v.heterogeneity) {
    case Heterogeneity::none: return 1.0;
    case Heterogeneity::lognormal: return std::exp(v.rank_sigma * normal(seed, rank, kRankDraw, 0));
    case Heterogeneity::two_tier: return normal(seed, rank, kRankDraw, 1) > 0 ? 1.0 + v.rank_sigma : 1.0;
  }
  return 1.0;
}

namespace {
/// base × f × jitter[slot] for the eight costs; jitter(slot) is exp(σ · z) of that slot's level.
template <class Jitter>
StageCosts costs_of(const StageCosts& base, double f, Jitter jitter) {
  return {base.data_ms * f * jitter(0),     base.loader_ms * f * jitter(1),    base.fwd_host_ms * f * jitter(2),
          base.fwd_device_ms * f * jitter(3), base.bwd_host_ms * f * jitter(4), base.bwd_device_ms * f * jitter(5),
          base.callbacks_ms * f * jitter(6), base.optim_ms * f * jitter(7)};
}
}  // namespace

StageCosts draw_costs(const StageCosts& base, const Variation& v, std::uint64_t seed, int rank, std::int64_t step) {
  const double f = rank_factor(v, seed, rank);
  if (!(v.jitter_sigma > 0)) return costs_of(base, f, [](int) { return 1.0; });
  const auto& z = normal_quantiles();
  const auto idx = jitter_indices(jitter_key(seed, rank), step);
  return costs_of(base, f, [&](int slot) { return std::exp(v.jitter_sigma * z[idx[slot]]); });
}

CostSampler::CostSampler(const StageCosts& base, const Variation& v, std::uint64_t seed, int ranks)
    : base_(base),
      factor_(static_cast<std::size_t>(std::max(ranks, 0))),
      key_(factor_.size()),
      wide_(model_pass_path.load() == PassPath::fastest && wide_passes_available()) {
  for (int r = 0; r < ranks; ++r) {
    factor_[r] = rank_factor(v, seed, r);
    key_[r] = jitter_key(seed, r);
  }
  if (v.jitter_sigma > 0) {
    // The same exp(σ · z) draw_costs takes per draw, once per level.
    const auto& z = normal_quantiles();
    jitter_.resize(z.size());
    for (std::size_t i = 0; i < z.size(); ++i) jitter_[i] = std::exp(v.jitter_sigma * z[i]);
  }
}

StageCosts CostSampler::draw(int rank, std::int64_t step) const {
  const double f = factor_[rank];
  if (jitter_.empty()) return costs_of(base_, f, [](int) { return 1.0; });
  const auto idx = jitter_indices(key_[rank], step);
  return costs_of(base_, f, [&](int slot) { return jitter_[idx[slot]]; });
}

namespace {

/// draw_block for ranks r0 .. r0 + len − 1: one loop of hashes, table reads and products per
/// block, no branch in it. Inlined into draw_block's two builds (draw_block_wide).
[[gnu::always_inline]] inline void draw_costs_of_block(const StageCosts& b, const double* factor,
                                                       const std::uint64_t* key, const double* jitter, int len,
                                                       std::int64_t step, CostSampler::Block& out) {
  if (jitter == nullptr) {
    for (int j = 0; j < len; ++j) {
      const double f = factor[j];
      // costs_of's products in its order: base × f × jitter(slot), jitter 1 here
      out.data[j] = b.data_ms * f * 1.0;
      out.fwd_host[j] = b.fwd_host_ms * f * 1.0;
      out.fwd_device[j] = b.fwd_device_ms * f * 1.0;
      out.bwd_host[j] = b.bwd_host_ms * f * 1.0;
      out.bwd_device[j] = b.bwd_device_ms * f * 1.0;
      out.callbacks[j] = b.callbacks_ms * f * 1.0;
      out.optim[j] = b.optim_ms * f * 1.0;
    }
    return;
  }
  for (int j = 0; j < len; ++j) {
    const double f = factor[j];
    // jitter_indices: two hashed words, four 16-bit levels each; slot 1 (the loader) is not read
    const std::uint64_t h = mix(key[j] ^ static_cast<std::uint64_t>(step));
    const std::uint64_t w0 = mix(h ^ 1), w1 = mix(h ^ 2);
    auto z = [&](int slot) {
      const std::uint64_t w = slot < 4 ? w0 : w1;
      return jitter[(w >> (16 * (slot % 4))) & 0xffff];
    };
    out.data[j] = b.data_ms * f * z(0);
    out.fwd_host[j] = b.fwd_host_ms * f * z(2);
    out.fwd_device[j] = b.fwd_device_ms * f * z(3);
    out.bwd_host[j] = b.bwd_host_ms * f * z(4);
    out.bwd_device[j] = b.bwd_device_ms * f * z(5);
    out.callbacks[j] = b.callbacks_ms * f * z(6);
    out.optim[j] = b.optim_ms * f * z(7);
  }
}

/// Eight words shifted right by n bits. The masked forms (here and the gather's) with every lane
/// on: GCC 12 warns of the undefined pass-through value the unmasked intrinsics carry.
[[gnu::target("avx512f")]] inline __m512i shr8(__m512i z, __m512i n) { return _mm512_maskz_srlv_epi64(0xff, z, n); }

/// SplitMix64's finaliser (mix) on eight words.
[[gnu::target("avx512f,avx512dq")]] inline __m512i mix8(__m512i z) {
  z = _mm512_add_epi64(z, _mm512_set1_epi64(static_cast<long long>(0x9e3779b97f4a7c15ull)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, shr8(z, _mm512_set1_epi64(30))),
                         _mm512_set1_epi64(static_cast<long long>(0xbf58476d1ce4e5b9ull)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, shr8(z, _mm512_set1_epi64(27))),
                         _mm512_set1_epi64(static_cast<long long>(0x94d049bb133111ebull)));
  return _mm512_xor_si512(z, shr8(z, _mm512_set1_epi64(31)));
}

/// draw_costs_of_block with AVX-512 (where the CPU has it): eight ranks' hashes (64-bit
/// multiplies) and table reads (gathers) per instruction, the same operations on the same words,
/// the products in the same order (never fused: sf_sim builds with -ffp-contract=off), so the
/// draws are the same bits.
[[gnu::target("avx512f,avx512dq")]] void draw_costs_of_block_wide(const StageCosts& b, const double* factor,
                                                                 const std::uint64_t* key, const double* jitter,
                                                                 int len, std::int64_t step, CostSampler::Block& out) {
  const int whole = jitter == nullptr ? 0 : len / 8 * 8;
  const __m512i step8 = _mm512_set1_epi64(step);
  const __m512i level = _mm512_set1_epi64(0xffff);
  const std::array<double, 8> base = {b.data_ms, 0, b.fwd_host_ms, b.fwd_device_ms, b.bwd_host_ms, b.bwd_device_ms,
                                      b.callbacks_ms, b.optim_ms};
  const std::array<double*, 8> col = {out.data, nullptr, out.fwd_host, out.fwd_device, out.bwd_host, out.bwd_device,
                                      out.callbacks, out.optim};
  for (int j = 0; j < whole; j += 8) {
    const __m512i h = mix8(_mm512_xor_si512(_mm512_loadu_si512(key + j), step8));
    const __m512i w[2] = {mix8(_mm512_xor_si512(h, _mm512_set1_epi64(1))),
                          mix8(_mm512_xor_si512(h, _mm512_set1_epi64(2)))};
    const __m512d f = _mm512_loadu_pd(factor + j);
    for (int slot : {0, 2, 3, 4, 5, 6, 7}) {
      const __m512i idx = _mm512_and_si512(shr8(w[slot / 4], _mm512_set1_epi64(16 * (slot % 4))), level);
      const __m512d z = _mm512_mask_i64gather_pd(_mm512_setzero_pd(), 0xff, idx, jitter, 8);
      _mm512_storeu_pd(col[slot] + j, _mm512_mul_pd(_mm512_mul_pd(_mm512_set1_pd(base[slot]), f), z));
    }
  }
  if (whole == len) return;
  CostSampler::Block tail;
  draw_costs_of_block(b, factor + whole, key + whole, jitter, len - whole, step, tail);
  for (int slot : {0, 2, 3, 4, 5, 6, 7}) {
    const double* from = slot == 0   ? tail.data
                         : slot == 2 ? tail.fwd_host
                         : slot == 3 ? tail.fwd_device
                         : slot == 4 ? tail.bwd_host
                         : slot == 5 ? tail.bwd_device
                         : slot == 6 ? tail.callbacks
                                     : tail.optim;
    std::copy_n(from, len - whole, col[slot] + whole);
  }
}

}  // namespace

void CostSampler::draw_block(int r0, int len, std::int64_t step, Block& out) const {
  const auto r = static_cast<std::size_t>(r0);
  const double* jitter = jitter_.empty() ? nullptr : jitter_.data();
  if (wide_)
    draw_costs_of_block_wide(base_, factor_.data() + r, key_.data() + r, jitter, len, step, out);
  else
    draw_costs_of_block(base_, factor_.data() + r, key_.data() + r, jitter, len, step, out);
}

double CommModel::seconds(double bytes, int ranks) const {
  if (ranks <= 1) return 0.0;
  const double hops = std::ceil(std::log2(static_cast<double>(ranks)));
  return latency_us * 1e-6 * hops + 2.0 * (ranks - 1) / ranks * bytes / (gib_per_s * 1073741824.0);
}

}  // namespace sf::sim
