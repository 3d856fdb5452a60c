#include "sf/frontier/frontier.h"

#include "detail.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SF_WIDE_CHECKS 1
#include <immintrin.h>
#else
#define SF_WIDE_CHECKS 0
#endif

namespace sf::frontier {

namespace {

/// Seconds in a short form for messages (std::to_string(1e308) is 309 digits).
std::string secs(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

#if SF_WIDE_CHECKS
__attribute__((target("avx512f"))) bool all_within_avx512(const double* x, int n, double lo, double hi) {
  const __m512d l = _mm512_set1_pd(lo), h = _mm512_set1_pd(hi);
  __mmask8 inside = 0xff;
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_loadu_pd(x + i);
    inside &= static_cast<__mmask8>(_mm512_cmp_pd_mask(v, l, _CMP_GE_OQ) & _mm512_cmp_pd_mask(v, h, _CMP_LE_OQ));
  }
  bool ok = inside == 0xff;
  for (; i < n; ++i) ok &= x[i] >= lo && x[i] <= hi;
  return ok;
}
#endif

/// Whether lo <= x[i] <= hi for every i < n (false where x[i] is NaN): a step's checks, eight
/// values a compare where the machine has AVX-512 (the portable loop is a compare and a branch a
/// value, about half of committing a step of the model's).
bool all_within(const double* x, int n, double lo, double hi) {
#if SF_WIDE_CHECKS
  if (detail::vector_select_available()) return all_within_avx512(x, n, lo, hi);
#endif
  bool ok = true;
  for (int i = 0; i < n; ++i) ok &= x[i] >= lo && x[i] <= hi;
  return ok;
}

/// Adds the terms of ranks r0 .. r0 + len − 1 to a step total's eight lanes (rank r's to lane
/// r % 8, in rank order), whole eights a vector addition each.
void add_in_lanes(double* lanes, int r0, const double* add, int len) {
  double l[8];  // in registers: `lanes` might alias `add` as far as the compiler knows
  std::copy_n(lanes, 8, l);
  int i = 0;
  for (; i < len && ((r0 + i) & 7) != 0; ++i) l[(r0 + i) & 7] += add[i];
  for (; i + 8 <= len; i += 8)
    for (int j = 0; j < 8; ++j) l[j] += add[i + j];
  for (; i < len; ++i) l[(r0 + i) & 7] += add[i];
  std::copy_n(l, 8, lanes);
}

/// The explicit stages up to which commit_through takes a block in one AVX-512 pass.
constexpr int kMaxWideStages = 16;

#if SF_WIDE_CHECKS
/// commit_through's work on one block of len ranks with AVX-512, in one pass over its values
/// where the portable loop below takes a pass per check and per sum: x[s] the block's stage s
/// (k of them), w its walls or null; each rank's Σ explicit in stage order (0 + d first), its
/// residual and overlap error to res and overlap and its wall to wall_out (when w), and what the
/// step total adds for it (max(Σ, wall), or Σ) to add, or with lanes (the block from a rank ≡ 0
/// mod 8) onto the step total's eight lanes (add_in_lanes). Returns whether every check passed: each
/// stage value in [0, DBL_MAX], each sum ≤ kMaxWindowSeconds, each wall in [0, kMaxWindowSeconds]
/// (NaN failing each); the caller words a failure and resets the row.
__attribute__((target("avx512f"))) bool commit_block_avx512(const double* const* x, int k, const double* w, int len,
                                                            double* res, double* overlap, double* wall_out,
                                                            double* add, double* lanes) {
  const __m512d zero = _mm512_setzero_pd(), most = _mm512_set1_pd(DBL_MAX),
                window = _mm512_set1_pd(kMaxWindowSeconds), none = _mm512_set1_pd(-std::numeric_limits<double>::infinity());
  __mmask8 bad = 0;
  __m512d acc = lanes ? _mm512_loadu_pd(lanes) : zero;
  for (int i = 0; i < len; i += 8) {
    const auto live = static_cast<__mmask8>(len - i >= 8 ? 0xff : (1u << (len - i)) - 1);
    __m512d sum = zero;
    for (int s = 0; s < k; ++s) {
      const __m512d v = _mm512_maskz_loadu_pd(live, x[s] + i);
      bad |= static_cast<__mmask8>(live & ~(_mm512_cmp_pd_mask(v, zero, _CMP_GE_OQ) & _mm512_cmp_pd_mask(v, most, _CMP_LE_OQ)));
      sum = _mm512_add_pd(sum, v);  // 0 + d0, then + d1 …: the prefix order
    }
    bad |= static_cast<__mmask8>(live & ~(_mm512_cmp_pd_mask(sum, none, _CMP_GE_OQ) & _mm512_cmp_pd_mask(sum, window, _CMP_LE_OQ)));
    __m512d wv = zero, term = sum;
    if (w != nullptr) {
      wv = _mm512_maskz_loadu_pd(live, w + i);
      bad |= static_cast<__mmask8>(live & ~(_mm512_cmp_pd_mask(wv, zero, _CMP_GE_OQ) & _mm512_cmp_pd_mask(wv, window, _CMP_LE_OQ)));
      // std::max(sum, wall) as the portable loop takes it: (sum < wall) ? wall : sum.
      term = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(sum, wv, _CMP_LT_OQ), sum, wv);
    }
    // Rank i's term to add[i], or (lanes: the block starts at a rank ≡ 0 mod 8) onto its lane,
    // lane i % 8, in rank order as add_in_lanes adds it.
    if (lanes) acc = _mm512_mask_add_pd(acc, live, acc, term);
    else _mm512_mask_storeu_pd(add + i, live, term);
    if (w == nullptr) continue;
    // Appendix A: e = w − Σ explicit; residual = max(0, e), overlap error = max(0, −e).
    const __m512d e = _mm512_sub_pd(wv, sum);
    _mm512_mask_storeu_pd(res + i, live, _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(e, zero, _CMP_GT_OQ), e));
    _mm512_mask_storeu_pd(overlap + i, live,
                          _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(e, zero, _CMP_LT_OQ), _mm512_sub_pd(zero, e)));
    _mm512_mask_storeu_pd(wall_out + i, live, wv);
  }
  if (lanes) _mm512_storeu_pd(lanes, acc);
  return bad == 0;
}
#endif

}  // namespace

StageMatrix::StageMatrix(StageSchema schema, int world_size, std::int64_t first_step, int steps)
    : schema_(std::move(schema)), ranks_(world_size), world_(world_size), steps_(steps), first_step_(first_step) {
  if (world_size < 1) throw std::invalid_argument("world size must be >= 1");
  if (steps < 0) throw std::invalid_argument("step count must be >= 0");
  if (steps > 0 && first_step > std::numeric_limits<std::int64_t>::max() - (steps - 1))
    throw std::invalid_argument("window of " + std::to_string(steps) + " steps from step " + std::to_string(first_step) +
                                " runs past the largest step id " +
                                std::to_string(std::numeric_limits<std::int64_t>::max()));
  const auto cells = static_cast<std::size_t>(steps) * world_size;
  cells_.assign(cells * static_cast<std::size_t>(schema_.size()), 0.0);
  wall_.assign(cells, std::numeric_limits<double>::quiet_NaN());
  overlap_.assign(cells, 0.0);
  present_.assign(cells, 0);
  step_present_count_.assign(steps, 0);
  row_total_s_.assign(steps, 0.0);
}

StageMatrix::StageMatrix(StageSchema schema, int world_size, std::vector<int> rank_ids, std::int64_t first_step,
                         int steps)
    : StageMatrix(std::move(schema), rank_ids.empty() ? 1 : static_cast<int>(rank_ids.size()), first_step, steps) {
  if (rank_ids.empty()) throw std::invalid_argument("a sparse rank layout needs at least one rank id");
  if (world_size < static_cast<int>(rank_ids.size()))
    throw std::invalid_argument("world size " + std::to_string(world_size) + " is smaller than the " +
                                std::to_string(rank_ids.size()) + " listed ranks");
  for (std::size_t i = 0; i < rank_ids.size(); ++i)
    if (rank_ids[i] < 0 || rank_ids[i] >= world_size || (i > 0 && rank_ids[i] <= rank_ids[i - 1]))
      throw std::invalid_argument("rank ids must increase strictly within 0.." + std::to_string(world_size - 1) +
                                  "; id " + std::to_string(rank_ids[i]) + " at column " + std::to_string(i));
  world_ = world_size;
  // A list that names every rank is the dense layout.
  if (static_cast<int>(rank_ids.size()) < world_size) rank_ids_ = std::move(rank_ids);
}

StageMatrix StageMatrix::same_layout(const StageMatrix& m, std::int64_t first_step, int steps) {
  StageMatrix out = m.sparse() ? StageMatrix(m.schema_, m.world_, m.rank_ids_, first_step, steps)
                               : StageMatrix(m.schema_, m.world_, first_step, steps);
  out.roles_ = m.roles_;
  return out;
}

int StageMatrix::column_of(int rank) const {
  if (rank_ids_.empty()) return rank >= 0 && rank < ranks_ ? rank : -1;
  const auto it = std::lower_bound(rank_ids_.begin(), rank_ids_.end(), rank);
  return it != rank_ids_.end() && *it == rank ? static_cast<int>(it - rank_ids_.begin()) : -1;
}

void StageMatrix::check_cell(int t, int r) const {
  if (t < 0 || t >= steps_ || r < 0 || r >= ranks_)
    throw std::invalid_argument("cell (step index " + std::to_string(t) + ", rank " + std::to_string(r) +
                                ") outside the " + std::to_string(steps_) + " x " + std::to_string(ranks_) +
                                " window");
}

void StageMatrix::set_record(int t, int r, std::span<const double> explicit_d, std::optional<double> wall) {
  check_cell(t, r);
  const int k = schema_.explicit_count();
  if (static_cast<int>(explicit_d.size()) != k)
    throw std::invalid_argument("record has " + std::to_string(explicit_d.size()) + " durations, schema has " +
                                std::to_string(k) + " explicit stages");
  // Summed in stage order, as the prefixes are: a sum past kMaxWindowSeconds would make some
  // window statistic overflow, so it is rejected here, where the record is still named.
  double sum = 0;
  for (int s = 0; s < k; ++s) {
    const double v = explicit_d[s];
    if (!std::isfinite(v) || v < 0)
      throw std::invalid_argument("duration of stage '" + schema_.name(s) + "' is " + secs(v) +
                                  ", expected a finite number >= 0");
    sum += v;
  }
  if (!(sum <= kMaxWindowSeconds))
    throw std::invalid_argument("stage durations sum to " + (std::isfinite(sum) ? secs(sum) + " s" : "more than the largest double") +
                                ", beyond the " + secs(kMaxWindowSeconds) +
                                " s one window can hold; expected seconds whose sums stay finite");
  if (schema_.has_residual() != wall.has_value())
    throw std::invalid_argument(schema_.has_residual() ? "record has no wall time but the schema has a residual stage"
                                                       : "record has a wall time but the schema has no residual stage");
  if (wall && (!std::isfinite(*wall) || *wall < 0 || *wall > kMaxWindowSeconds))
    throw std::invalid_argument("wall time is " + secs(*wall) + ", expected a finite number of seconds >= 0 and <= " +
                                secs(kMaxWindowSeconds));
  // The window's recorded step time, old value of this cell replaced.
  const double cell = wall ? std::max(sum, *wall) : sum;
  const double before = present_[idx(t, r)] ? total_s_ - cell_total(t, r) : total_s_;
  if (!(before + cell <= kMaxWindowSeconds))
    throw std::invalid_argument("the window of steps " + std::to_string(first_step_) + ".." +
                                std::to_string(first_step_ + (steps_ - 1)) + " sums to more than " +
                                secs(kMaxWindowSeconds) +
                                " s of recorded step time at this record; expected a window whose sums stay finite");

  for (int s = 0; s < k; ++s) cells_[at_cell(t, r, s)] = explicit_d[s];
  const auto i = idx(t, r);
  if (wall) {
    // Appendix A: e = w − Σ explicit; residual = max(0, e), overlap error = max(0, −e).
    const double e = *wall - sum;
    cells_[at_cell(t, r, schema_.residual_index())] = e > 0 ? e : 0.0;
    overlap_[i] = e < 0 ? -e : 0.0;
    wall_[i] = *wall;
  }
  row_total_s_[t] += cell - (present_[i] ? total_s_ - before : 0.0);
  if (!present_[i]) {
    present_[i] = 1;
    ++step_present_count_[t];
  }
  total_s_ = before + cell;
}

double StageMatrix::cell_total(int t, int r) const {
  double sum = 0;
  for (int s = 0; s < schema_.explicit_count(); ++s) sum += d(t, r, s);
  return schema_.has_residual() ? std::max(sum, wall(t, r)) : sum;
}

void StageMatrix::clear_record(int t, int r) {
  check_cell(t, r);
  const auto i = idx(t, r);
  if (present_[i]) {
    const double cell = cell_total(t, r);
    total_s_ = std::max(0.0, total_s_ - cell);
    row_total_s_[t] = std::max(0.0, row_total_s_[t] - cell);
  }
  for (int s = 0; s < stages(); ++s) cells_[at_cell(t, r, s)] = 0.0;
  wall_[i] = std::numeric_limits<double>::quiet_NaN();
  overlap_[i] = 0.0;
  if (present_[i]) {
    present_[i] = 0;
    --step_present_count_[t];
  }
}

std::vector<double*> StageMatrix::begin_step(int t) {
  check_cell(t, 0);
  // Every record of the row is gone (its columns keep their old values until written: they
  // are not read while the row has no record).
  const std::size_t row = idx(t, 0);
  std::fill_n(present_.begin() + static_cast<std::ptrdiff_t>(row), ranks_, std::uint8_t{0});
  std::fill_n(wall_.begin() + static_cast<std::ptrdiff_t>(row), ranks_, std::numeric_limits<double>::quiet_NaN());
  std::fill_n(overlap_.begin() + static_cast<std::ptrdiff_t>(row), ranks_, 0.0);
  step_present_count_[t] = 0;
  total_s_ = std::max(0.0, total_s_ - row_total_s_[t]);
  row_total_s_[t] = 0;
  drop_side(t);
  pending_row_ = t;
  committed_ = 0;
  std::fill_n(pending_lanes_, 8, 0.0);
  std::vector<double*> out(static_cast<std::size_t>(schema_.explicit_count()));
  for (int s = 0; s < schema_.explicit_count(); ++s) out[s] = cells_.data() + at_cell(t, 0, s);
  return out;
}

void StageMatrix::commit_ranks(int t, int r_end, const double* wall) {
  if (pending_row_ != t)
    throw std::logic_error("commit_ranks(" + std::to_string(t) + ") without begin_step(" + std::to_string(t) + ")");
  if (r_end < committed_ || r_end > ranks_)
    throw std::logic_error("commit_ranks(" + std::to_string(t) + ", " + std::to_string(r_end) + ") after " +
                           std::to_string(committed_) + " ranks committed, of " + std::to_string(ranks_));
  commit_through(t, r_end, wall);
}

void StageMatrix::commit_step(int t, const double* wall) {
  if (pending_row_ != t)
    throw std::logic_error("commit_step(" + std::to_string(t) + ") without begin_step(" + std::to_string(t) + ")");
  commit_through(t, ranks_, wall);
  pending_row_ = -1;
  const int R = ranks_;
  const std::size_t row = idx(t, 0);
  const double* l = pending_lanes_;
  const double step_total = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  if (!(total_s_ + step_total <= kMaxWindowSeconds)) {
    clear_row(t);
    throw std::invalid_argument("the window of steps " + std::to_string(first_step_) + ".." +
                                std::to_string(first_step_ + (steps_ - 1)) + " sums to more than " +
                                secs(kMaxWindowSeconds) + " s of recorded step time at step " + std::to_string(step_id(t)) +
                                "; expected a window whose sums stay finite");
  }
  std::fill_n(present_.begin() + static_cast<std::ptrdiff_t>(row), R, std::uint8_t{1});
  step_present_count_[t] = R;
  row_total_s_[t] = step_total;
  total_s_ += step_total;
}

void StageMatrix::clear_row(int t) {
  const std::size_t row = idx(t, 0);
  std::fill_n(cells_.data() + at_cell(t, 0, 0), static_cast<std::size_t>(ranks_) * stages(), 0.0);
  std::fill_n(wall_.begin() + static_cast<std::ptrdiff_t>(row), ranks_, std::numeric_limits<double>::quiet_NaN());
  std::fill_n(overlap_.begin() + static_cast<std::ptrdiff_t>(row), ranks_, 0.0);
}

void StageMatrix::commit_through(int t, int r_end, const double* wall) {
  const int k = schema_.explicit_count(), R = ranks_;
  const std::size_t row = idx(t, 0);
  double* row0 = cells_.data() + at_cell(t, 0, 0);
  // On a bad value the row stays without records, as begin_step left it: cells zero as
  // clear_record leaves them, no wall, no overlap (where earlier pieces were taken in too).
  auto fail = [&](const std::string& what) {
    pending_row_ = -1;
    clear_row(t);
    throw std::invalid_argument(what);
  };
  if (schema_.has_residual() != (wall != nullptr))
    fail(schema_.has_residual() ? "step has no wall times but the schema has a residual stage"
                                : "step has wall times but the schema has no residual stage");
  // One pass over the ranks in blocks that stay in L1 (a row of 10^6 ranks is far larger than
  // the caches): each block's checks, Σ explicit per rank in stage order (the prefix order, 0 + d
  // first as set_record forms it), the residual and overlap in place, the step total added in
  // rank order. On any bad value, commit_error words the first one as set_record would have.
  double* res = wall ? row0 + static_cast<std::size_t>(schema_.residual_index()) * R : nullptr;
  constexpr int kBlock = 512;
  double sum[kBlock], add[kBlock];
#if SF_WIDE_CHECKS
  if (detail::vector_select_available() && k >= 1 && k <= kMaxWideStages) {
    const double* x[kMaxWideStages];
    for (int r0 = committed_; r0 < r_end; r0 += kBlock) {
      const int len = std::min(kBlock, r_end - r0);
      for (int s = 0; s < k; ++s) x[s] = row0 + static_cast<std::size_t>(s) * R + r0;
      // A block from a rank ≡ 0 mod 8 (every one of the model's) adds its terms to the lanes in
      // registers; another stores them for add_in_lanes. The same sums either way.
      const bool aligned = (r0 & 7) == 0;
      if (!commit_block_avx512(x, k, wall ? wall + r0 : nullptr, len, res ? res + r0 : nullptr,
                               overlap_.data() + row + r0, wall_.data() + row + r0, add, aligned ? pending_lanes_ : nullptr))
        fail(commit_error(row0, wall, r_end));
      if (!aligned) add_in_lanes(pending_lanes_, r0, add, len);  // as the loop below
    }
    committed_ = r_end;
    return;
  }
#endif
  for (int r0 = committed_; r0 < r_end; r0 += kBlock) {
    const int len = std::min(kBlock, r_end - r0);
    bool ok = true;
    for (int s = 0; s < k; ++s) {
      const double* x = row0 + static_cast<std::size_t>(s) * R + r0;
      ok &= all_within(x, len, 0.0, DBL_MAX);  // false for NaN too
      if (s == 0) {
        for (int i = 0; i < len; ++i) sum[i] = 0.0 + x[i];
      } else {
        for (int i = 0; i < len; ++i) sum[i] += x[i];
      }
    }
    if (k == 0) std::fill_n(sum, len, 0.0);
    ok &= all_within(sum, len, -std::numeric_limits<double>::infinity(), kMaxWindowSeconds) &&
          (!wall || all_within(wall + r0, len, 0.0, kMaxWindowSeconds));
    if (!ok) fail(commit_error(row0, wall, r_end));
    if (wall) {
      const double* w = wall + r0;
      for (int i = 0; i < len; ++i) add[i] = std::max(sum[i], w[i]);
      add_in_lanes(pending_lanes_, r0, add, len);
      // Appendix A: e = w − Σ explicit; residual = max(0, e), overlap error = max(0, −e).
      for (int i = 0; i < len; ++i) {
        const double e = w[i] - sum[i];
        res[r0 + i] = e > 0 ? e : 0.0;
        overlap_[row + r0 + i] = e < 0 ? -e : 0.0;
        wall_[row + r0 + i] = w[i];
      }
    } else {
      add_in_lanes(pending_lanes_, r0, sum, len);
    }
  }
  committed_ = r_end;
}

std::string StageMatrix::commit_error(const double* row0, const double* wall, int n) {
  // The checks of set_record over ranks [0, n) of the row, in its order: every stage's values,
  // stage by stage, then the sums, then the walls; the first bad one, by lowest rank, is the
  // message. (Called only when one of these is bad: a row without walls fails before them.)
  const int k = schema_.explicit_count(), R = ranks_;
  auto bad_rank = [&](auto bad) {
    for (int r = 0; r < n; ++r)
      if (bad(r)) return r;
    return 0;
  };
  for (int s = 0; s < k; ++s) {
    const double* x = row0 + static_cast<std::size_t>(s) * R;
    if (const int r = bad_rank([&](int q) { return !(x[q] >= 0 && x[q] <= DBL_MAX); }); !(x[r] >= 0 && x[r] <= DBL_MAX))
      return "rank " + std::to_string(rank_id(r)) + ": duration of stage '" + schema_.name(s) + "' is " + secs(x[r]) +
             ", expected a finite number >= 0";
  }
  std::vector<double> sum(static_cast<std::size_t>(n), 0.0);  // the error path only: no member kept for it
  for (int s = 0; s < k; ++s) {
    const double* x = row0 + static_cast<std::size_t>(s) * R;
    for (int r = 0; r < n; ++r) sum[r] = s == 0 ? 0.0 + x[r] : sum[r] + x[r];
  }
  if (const int r = bad_rank([&](int q) { return !(sum[q] <= kMaxWindowSeconds); }); !(sum[r] <= kMaxWindowSeconds))
    return "rank " + std::to_string(rank_id(r)) + ": stage durations sum to " + secs(sum[r]) + " s, beyond the " +
         secs(kMaxWindowSeconds) + " s one window can hold";
  const int q = bad_rank([&](int x) { return !(wall[x] >= 0 && wall[x] <= kMaxWindowSeconds); });
  return "rank " + std::to_string(rank_id(q)) + ": wall time is " + secs(wall[q]) +
         ", expected a finite number of seconds >= 0 and <= " + secs(kMaxWindowSeconds);
}

void StageMatrix::drop_side(int t) {
  const std::size_t row = idx(t, 0);
  if (!fwd_state_.empty()) {
    std::fill_n(fwd_state_.begin() + static_cast<std::ptrdiff_t>(row), ranks_, EventState::unsampled);
    std::fill_n(fwd_s_.begin() + static_cast<std::ptrdiff_t>(row), ranks_, std::numeric_limits<float>::quiet_NaN());
  }
  if (!cpu_wait_.empty())
    std::fill_n(cpu_wait_.begin() + static_cast<std::ptrdiff_t>(row), ranks_, std::numeric_limits<float>::quiet_NaN());
  if (!sync_next_.empty())  // a column not set reads as NaN; its floats wait for the next one
    std::fill_n(sync_next_.begin() + static_cast<std::ptrdiff_t>(t) * stages(), stages(), 0);
}

void StageMatrix::reset(std::int64_t first_step) {
  first_step_ = first_step;
  std::fill(cells_.begin(), cells_.end(), 0.0);
  std::fill(wall_.begin(), wall_.end(), std::numeric_limits<double>::quiet_NaN());
  std::fill(overlap_.begin(), overlap_.end(), 0.0);
  std::fill(present_.begin(), present_.end(), std::uint8_t{0});
  std::fill(step_present_count_.begin(), step_present_count_.end(), 0);
  std::fill(row_total_s_.begin(), row_total_s_.end(), 0.0);
  total_s_ = 0;
  fwd_state_.clear();  // clear() keeps the capacity: the next assign() does not reallocate
  fwd_s_.clear();
  sync_next_.clear();  // the sync-wait columns keep their floats for the next window's
  cpu_wait_.clear();
}

void StageMatrix::set_fwd_event(int t, int r, EventState state, double seconds) {
  check_cell(t, r);
  if (fwd_state_.empty()) {
    fwd_state_.assign(present_.size(), EventState::unsampled);
    fwd_s_.assign(present_.size(), std::numeric_limits<float>::quiet_NaN());
  }
  if (state == EventState::ready && (!std::isfinite(seconds) || seconds < 0 || seconds > FLT_MAX))
    throw std::invalid_argument("ready forward event time is " + secs(seconds) + ", expected a finite number >= 0 and <= " +
                                secs(FLT_MAX));
  fwd_state_[idx(t, r)] = state;
  fwd_s_[idx(t, r)] = state == EventState::ready ? static_cast<float>(seconds) : std::numeric_limits<float>::quiet_NaN();
}

EventState StageMatrix::fwd_event_state(int t, int r) const {
  return fwd_state_.empty() ? EventState::unsampled : fwd_state_[idx(t, r)];
}

double StageMatrix::fwd_event_s(int t, int r) const {
  return fwd_s_.empty() ? std::numeric_limits<double>::quiet_NaN() : fwd_s_[idx(t, r)];
}

void StageMatrix::set_sync_wait(int t, int r, int s, double seconds) {
  check_cell(t, r);
  if (s < 0 || s >= stages()) throw std::invalid_argument("sync-wait stage index out of range");
  if (!std::isfinite(seconds) || seconds < 0 || seconds > FLT_MAX)
    throw std::invalid_argument("sync wait is " + secs(seconds) + ", expected a finite number >= 0 and <= " + secs(FLT_MAX));
  float* out = sync_column_for(t, s);
  const std::size_t col = static_cast<std::size_t>(t) * stages() + s;
  if (sync_next_[col] != ranks_) std::fill_n(out, ranks_, std::numeric_limits<float>::quiet_NaN());
  out[r] = static_cast<float>(seconds);
  sync_next_[col] = ranks_;
}

void StageMatrix::set_sync_wait_column(int t, int s, std::span<const double> seconds) {
  if (seconds.size() != static_cast<std::size_t>(ranks_))
    throw std::invalid_argument("sync-wait column has " + std::to_string(seconds.size()) + " values, expected " +
                                std::to_string(ranks_));
  set_sync_wait_block(t, s, 0, seconds);
}

void StageMatrix::set_sync_wait_block(int t, int s, int r0, std::span<const double> seconds) {
  check_cell(t, 0);
  if (s < 0 || s >= stages()) throw std::invalid_argument("sync-wait stage index out of range");
  if (r0 < 0 || r0 > ranks_ || seconds.size() > static_cast<std::size_t>(ranks_ - r0))
    throw std::invalid_argument("sync-wait block of " + std::to_string(seconds.size()) + " values from column " +
                                std::to_string(r0) + " does not fit the row's " + std::to_string(ranks_) + " columns");
  const int n = static_cast<int>(seconds.size());
  if (!all_within(seconds.data(), n, 0.0, FLT_MAX))  // false for NaN too
    for (int j = 0; j < n; ++j)
      if (!(seconds[j] >= 0 && seconds[j] <= FLT_MAX))
        throw std::invalid_argument("rank " + std::to_string(rank_id(r0 + j)) + ": sync wait is " + secs(seconds[j]) +
                                    ", expected a finite number >= 0 and <= " + secs(FLT_MAX));
  float* out = sync_column_for(t, s);
  const std::size_t col = static_cast<std::size_t>(t) * stages() + s;
  if (r0 != 0 && r0 != sync_next_[col])
    throw std::invalid_argument("sync-wait block of step " + std::to_string(first_step_ + t) + ", stage '" +
                                schema_.name(s) + "' from column " + std::to_string(r0) +
                                ", expected the column's next block (from column " + std::to_string(sync_next_[col]) +
                                ") or its first (from column 0)");
  for (int j = 0; j < n; ++j) out[r0 + j] = static_cast<float>(seconds[j]);
  sync_next_[col] = r0 + n;
}

void StageMatrix::set_cpu_wait(int t, int r, double seconds) {
  check_cell(t, r);
  if (!std::isfinite(seconds) || seconds < 0 || seconds > FLT_MAX)
    throw std::invalid_argument("CPU wait is " + secs(seconds) + ", expected a finite number >= 0 and <= " + secs(FLT_MAX));
  if (cpu_wait_.empty()) cpu_wait_.assign(present_.size(), std::numeric_limits<float>::quiet_NaN());
  cpu_wait_[idx(t, r)] = static_cast<float>(seconds);
}

double StageMatrix::cpu_wait(int t, int r) const {
  return cpu_wait_.empty() ? std::numeric_limits<double>::quiet_NaN() : cpu_wait_[idx(t, r)];
}

double StageMatrix::sync_wait(int t, int r, int s) const {
  const float* col = sync_wait_column(t, s);
  return col == nullptr ? std::numeric_limits<double>::quiet_NaN() : col[r];
}

const float* StageMatrix::sync_wait_column(int t, int s) const {
  const std::size_t col = static_cast<std::size_t>(t) * stages() + s;
  return sync_next_.empty() || sync_next_[col] != ranks_ ? nullptr : sync_wait_[col].data();
}

float* StageMatrix::sync_column_for(int t, int s) {
  if (sync_next_.empty()) {
    sync_wait_.resize(static_cast<std::size_t>(steps_) * stages());
    sync_next_.assign(static_cast<std::size_t>(steps_) * stages(), 0);
  }
  auto& col = sync_wait_[static_cast<std::size_t>(t) * stages() + s];
  col.resize(static_cast<std::size_t>(ranks_));
  return col.data();
}

void StageMatrix::set_fwd_event_column(int t, std::span<const double> seconds) {
  check_cell(t, 0);
  if (static_cast<int>(seconds.size()) != ranks_)
    throw std::invalid_argument("forward event column has " + std::to_string(seconds.size()) + " values, expected " +
                                std::to_string(ranks_));
  for (double v : seconds)
    if (!(v >= 0 && v <= FLT_MAX))
      throw std::invalid_argument("ready forward event time is " + secs(v) + ", expected a finite number >= 0 and <= " +
                                  secs(FLT_MAX));
  if (fwd_state_.empty()) {
    fwd_state_.assign(present_.size(), EventState::unsampled);
    fwd_s_.assign(present_.size(), std::numeric_limits<float>::quiet_NaN());
  }
  const std::size_t row = idx(t, 0);
  for (int r = 0; r < ranks_; ++r) {
    fwd_state_[row + r] = EventState::ready;
    fwd_s_[row + r] = static_cast<float>(seconds[r]);
  }
}

void StageMatrix::set_roles(std::vector<std::string> roles) {
  if (!roles.empty() && static_cast<int>(roles.size()) != world_)
    throw std::invalid_argument("roles list has " + std::to_string(roles.size()) + " entries, world size is " +
                                std::to_string(world_));
  roles_ = std::move(roles);
}

}  // namespace sf::frontier
