// The plain CSV rows a recorder writes ("0,3,0.0052390269162987625,12,3.5") read whole with
// AVX-512 (issue 44, part 4: `score` on one core). A field-by-field parser finds each field's end
// from its own digits, one dependent step after another, and sums digits a byte or eight at a
// time; here one compare per 64 bytes marks every comma, point and stray byte of the line, so
// every field's bounds are known at once, and every field's digits are summed in vector
// registers, two fields per register. The decimal's value is then rounded by fast_float's own
// Eisel-Lemire step (compute_float, to_float), the one fast_float::from_chars ends in: a correctly
// rounded value is unique, so the value is from_chars' to the bit.
//
// A narrower set of lines than the field-by-field path: digits with one point or none (no sign,
// exponent, blank or quote), a field of at most 32 bytes, an integer part and a fraction each at
// least one digit ("5." and ".5" are left), at most 19 significant digits, a line of at most 192
// bytes; any other line, and a case Eisel-Lemire leaves undecided, returns false and goes field
// by field, which decides it. Loads are masked to the line: no byte outside it is read.
//
// That path needs AVX-512 VBMI and VBMI2 (Ice Lake, Zen 4 and later). On a processor with AVX2 and
// BMI2 but not those (Haswell to Skylake-SP and Cascade Lake, Zen 1 to 3) a second path below takes
// the same lines with the same values; it reads the bytes around the line where the caller says
// they are there (else a copy of the line).
#include "stage_text.h"

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define SF_PLAIN_ROW_WIDE 1
#endif

namespace sf::formats::detail {

#if SF_PLAIN_ROW_WIDE

namespace {

constexpr std::size_t kMaxLine = 192;   // three 64-byte registers
constexpr std::size_t kMaxFields = 16;  // step, rank and up to 14 values (a byte lane each)
constexpr std::uint64_t kE8 = 100000000, kE16 = kE8 * kE8;
constexpr std::size_t npos = static_cast<std::size_t>(-1);

#define SF_WIDE_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vbmi2,bmi,bmi2,popcnt")))

alignas(64) constexpr std::uint8_t kIota[64] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                                16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                                32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
                                                48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

/// v's byte lanes picked by idx. (The masked forms throughout: GCC 12 warns of the undefined
/// pass-through the plain ones carry.)
SF_WIDE_TARGET inline __m512i permute(__m512i idx, __m512i v) { return _mm512_maskz_permutexvar_epi8(~std::uint64_t{0}, idx, v); }

/// v's bytes moved k lanes up (zeros below).
SF_WIDE_TARGET inline __m512i shift_up(__m512i v, unsigned k, __m512i iota) {
  return _mm512_maskz_permutexvar_epi8(~std::uint64_t{0} << k, _mm512_sub_epi8(iota, _mm512_set1_epi8(static_cast<char>(k))), v);
}

/// The positions (bytes, in order) of the bits set in a 192-bit mark.
SF_WIDE_TARGET inline __m512i positions(const __mmask64 m[3], __m512i iota) {
  const __m512i sixty_four = _mm512_set1_epi8(64);
  const __m512i iota64 = _mm512_add_epi8(iota, sixty_four), iota128 = _mm512_add_epi8(iota64, sixty_four);
  const auto k0 = static_cast<unsigned>(_mm_popcnt_u64(m[0])), k1 = static_cast<unsigned>(_mm_popcnt_u64(m[1]));
  __m512i at = _mm512_maskz_compress_epi8(m[0], iota);
  at = _mm512_or_si512(at, shift_up(_mm512_maskz_compress_epi8(m[1], iota64), k0, iota));
  return _mm512_or_si512(at, shift_up(_mm512_maskz_compress_epi8(m[2], iota128), k0 + k1, iota));
}

/// The high words of fast_float's 128-bit powers of five for 10^-31 .. 10^0, in that order: the
/// only exponents a field of at most 32 bytes gives.
struct FivePowers {
  std::uint64_t high[32];
  FivePowers() {
    for (int q = -31; q <= 0; ++q)
      high[q + 31] = fast_float::powers::power_of_five_128[2 * (q - fast_float::powers::smallest_power_of_five)];
  }
};
const FivePowers kFive;

/// w * 10^q as a double: fast_float's compute_float and to_float (Eisel-Lemire on its table of
/// powers of five) for w below 10^19 and q in [-31, 0] only, where no result is subnormal or
/// infinite and one product decides all but 1 value in 512: those, and fast_float's error case,
/// go to compute_float itself. False where it leaves the rounding undecided (from_chars then
/// compares digits).
[[gnu::always_inline]] inline bool decimal(std::uint64_t w, std::int64_t q, double& out) {
  if (w == 0) {
    out = 0.0;
    return true;
  }
  const int lz = std::countl_zero(w);
  const fast_float::value128 product = fast_float::full_multiplication(w << lz, kFive.high[q + 31]);
  const std::uint64_t high = product.high, low = product.low;
  if ((high & 0x1ff) == 0x1ff || (low == ~std::uint64_t{0} && q < -27)) [[unlikely]] {
    const fast_float::adjusted_mantissa am = fast_float::compute_float<fast_float::binary_format<double>>(q, w);
    if (am.power2 < 0) return false;
    fast_float::to_float(false, am, out);
    return true;
  }
  const int upper = static_cast<int>(high >> 63);
  std::uint64_t mantissa = high >> (upper + 9);
  std::int64_t power2 = (((152170 + 65536) * q) >> 16) + 63 + upper - lz + 1023;
  // Halfway between two doubles (nothing but zeros dropped, q in round-to-even's range): to even.
  if (low <= 1 && q >= -4 && (mantissa & 3) == 1 && (mantissa << (upper + 9)) == high) mantissa &= ~std::uint64_t{1};
  mantissa += mantissa & 1;
  mantissa >>= 1;
  if (mantissa >= (std::uint64_t{2} << 52)) {
    mantissa = std::uint64_t{1} << 52;
    ++power2;
  }
  mantissa &= ~(std::uint64_t{1} << 52);
  out = std::bit_cast<double>(mantissa | static_cast<std::uint64_t>(power2) << 52);
  return true;
}

/// Two fields' digits (values 0..9, each field right-aligned in 32 bytes, zeros before it) as two
/// values, in lanes 0 and 4: pairs, fours, eights summed, then e0 * 10^8 + e1 per 16 bytes (a
/// high and a low half), then high * 10^16 + low; too_long notes a high half of 1000 or more (past
/// 19 significant digits, where that sum would overflow).
[[gnu::always_inline]] SF_WIDE_TARGET inline __m512i sum_two(__m512i digits, __mmask8& too_long) {
  const __m512i pairs = _mm512_maddubs_epi16(digits, _mm512_set1_epi16(0x010A));
  const __m512i fours = _mm512_madd_epi16(pairs, _mm512_set1_epi32(0x00010064));
  const __m512i packed = _mm512_packus_epi32(fours, fours);
  const __m512i eights = _mm512_madd_epi16(packed, _mm512_set1_epi32(0x00012710));
  const __m512i halves = _mm512_add_epi64(_mm512_maskz_mul_epu32(0xff, eights, _mm512_set1_epi64(static_cast<long long>(kE8))),
                                          _mm512_maskz_srli_epi64(0xff, eights, 32));
  // the high halves are lanes 0 and 4, the low ones 2 and 6
  too_long |= _mm512_mask_cmpge_epu64_mask(0x11, halves, _mm512_set1_epi64(1000));
  return _mm512_add_epi64(_mm512_maskz_mullo_epi64(0xff, halves, _mm512_set1_epi64(static_cast<long long>(kE16))),
                          _mm512_maskz_alignr_epi64(0xff, halves, halves, 2));
}

/// The row at p: [p, p + n) when kFindEnd is false; with kFindEnd, the line that starts at p in
/// the `n` bytes there, its end (a '\n', or the bytes' end) found among its first kMaxLine bytes
/// and its length written to *line (npos when past them: the caller finds it).
template <bool kFindEnd>
[[gnu::always_inline]] SF_WIDE_TARGET inline bool wide_row(const char* p, std::size_t n, std::size_t* line, std::int64_t& step,
                                                           std::int64_t& rank, std::span<double> vals) {
  const std::size_t fields = vals.size() + 2;
  if (vals.empty() || n == 0 || fields > kMaxFields) return false;
  if (!kFindEnd && n > kMaxLine) return false;
  const __m512i iota = _mm512_load_si512(kIota), zero = _mm512_setzero_si512(), one = _mm512_set1_epi8(1);
  // The line in three registers (zeros past it), its commas, points and stray bytes marked.
  __m512i row[3];
  __mmask64 in[3];
  const std::size_t look = std::min(n, kMaxLine);
  for (std::size_t w = 0; w < 3; ++w) {
    const std::size_t left = look > 64 * w ? look - 64 * w : 0;
    in[w] = _bzhi_u64(~std::uint64_t{0}, static_cast<unsigned>(std::min<std::size_t>(left, 64)));
    row[w] = _mm512_maskz_loadu_epi8(in[w], p + 64 * std::min<std::size_t>(w, (look - 1) / 64));
  }
  if constexpr (kFindEnd) {
    const __m512i nl = _mm512_set1_epi8('\n');
    const __mmask64 at0 = _mm512_mask_cmpeq_epi8_mask(in[0], row[0], nl), at1 = _mm512_mask_cmpeq_epi8_mask(in[1], row[1], nl),
                    at2 = _mm512_mask_cmpeq_epi8_mask(in[2], row[2], nl);
    if (at0) n = _tzcnt_u64(at0);
    else if (at1) n = 64 + _tzcnt_u64(at1);
    else if (at2) n = 128 + _tzcnt_u64(at2);
    else if (n > kMaxLine) n = npos;
    *line = n;
    if (n == npos || n == 0) return false;
    for (std::size_t w = 0; w < 3; ++w) in[w] &= _bzhi_u64(~std::uint64_t{0}, static_cast<unsigned>(std::min<std::size_t>(n > 64 * w ? n - 64 * w : 0, 64)));
  }
  __mmask64 comma[3], point[3], stray = 0;
  for (std::size_t w = 0; w < 3; ++w) {
    comma[w] = _mm512_mask_cmpeq_epi8_mask(in[w], row[w], _mm512_set1_epi8(','));
    point[w] = _mm512_mask_cmpeq_epi8_mask(in[w], row[w], _mm512_set1_epi8('.'));
    const __mmask64 digit = _mm512_mask_cmplt_epu8_mask(in[w], _mm512_sub_epi8(row[w], _mm512_set1_epi8('0')), _mm512_set1_epi8(10));
    stray |= in[w] & ~(comma[w] | point[w] | digit);
  }
  if (stray) return false;
  const std::size_t commas = static_cast<std::size_t>(_mm_popcnt_u64(comma[0]) + _mm_popcnt_u64(comma[1]) + _mm_popcnt_u64(comma[2]));
  if (commas + 1 != fields) return false;
  // At most a point per value field (and positions() sees fewer than 64 marks).
  const auto points = static_cast<std::size_t>(_mm_popcnt_u64(point[0]) + _mm_popcnt_u64(point[1]) + _mm_popcnt_u64(point[2]));
  if (points > fields - 2) return false;

  // Per field (byte lane f): its end (a comma, the line's end for the last), whether it has a
  // point, and the position after its point (0 for none).
  const __mmask64 live = _bzhi_u64(~std::uint64_t{0}, static_cast<unsigned>(fields));
  const __m512i n_bytes = _mm512_set1_epi8(static_cast<char>(n));
  __m512i end, after_point;
  __mmask64 has;
  if (points + 2 == fields) {
    // The common line, a point in every value: its commas and points in order are
    // e0 e1 p2 e2 p3 e3 ... p(F-1) when every comma is where that order puts one.
    const __mmask64 mark[3] = {comma[0] | point[0], comma[1] | point[1], comma[2] | point[2]};
    const __m512i at = positions(mark, iota);
    const __m512i f = iota, twice = _mm512_add_epi8(iota, iota);
    end = _mm512_mask_mov_epi8(permute(_mm512_mask_sub_epi8(f, ~std::uint64_t{3}, twice, one), at), std::uint64_t{1} << commas,
                               n_bytes);
    const __mmask64 at_comma = _mm512_cmpeq_epi8_mask(
        _mm512_mask_blend_epi8(_mm512_cmplt_epu8_mask(end, _mm512_set1_epi8(static_cast<char>(128))), permute(end, row[2]),
                               _mm512_permutex2var_epi8(row[0], end, row[1])),
        _mm512_set1_epi8(','));
    const __mmask64 commas_at = _bzhi_u64(~std::uint64_t{0}, static_cast<unsigned>(commas));
    if ((at_comma & commas_at) != commas_at) return false;
    has = live & ~std::uint64_t{3};
    after_point = _mm512_maskz_add_epi8(has, permute(_mm512_sub_epi8(twice, _mm512_set1_epi8(2)), at), one);
  } else {
    end = _mm512_mask_mov_epi8(positions(comma, iota), std::uint64_t{1} << commas, n_bytes);
    // The points before each field's end, counted point by point; a field's own are its count
    // less the field before's: one or none, none in step and rank (lanes 0 and 1).
    __m512i below = zero;
    for (std::size_t w = 0; w < 3; ++w)
      for (std::uint64_t m = point[w]; m; m = _blsr_u64(m))
        below = _mm512_mask_add_epi8(below, _mm512_cmpgt_epu8_mask(end, _mm512_set1_epi8(static_cast<char>(64 * w + _tzcnt_u64(m)))),
                                     below, one);
    const __m512i own = _mm512_sub_epi8(below, shift_up(below, 1, iota));
    has = _mm512_mask_cmpeq_epi8_mask(live, own, one);
    if (_mm512_mask_cmpgt_epu8_mask(live, own, one) | (has & 3)) return false;
    after_point = _mm512_maskz_add_epi8(has, permute(_mm512_sub_epi8(below, one), positions(point, iota)), one);
  }
  const __m512i start = shift_up(_mm512_add_epi8(end, one), 1, iota);
  const __m512i len = _mm512_sub_epi8(end, start);
  const __mmask64 bad = _mm512_mask_cmpeq_epi8_mask(live, len, zero) | _mm512_mask_cmpgt_epu8_mask(live, len, _mm512_set1_epi8(32)) |
                        _mm512_mask_cmpeq_epi8_mask(has, after_point, _mm512_add_epi8(start, one)) |  // "x,.5"
                        _mm512_mask_cmpeq_epi8_mask(has, after_point, end);                          // "x,5."
  if (bad) return false;
  // Each field right-aligned in a 32-byte window ending at its end: window byte j reads line byte
  // end - 32 + j, less one up to the point (so the point is squeezed out and the digits run
  // unbroken to the window's end); the field's digits are the window's last len - has bytes.
  const __m512i base = _mm512_sub_epi8(end, _mm512_set1_epi8(32));
  const __m512i first_digit = _mm512_add_epi8(_mm512_sub_epi8(_mm512_set1_epi8(32), len), _mm512_maskz_mov_epi8(has, one));
  alignas(64) std::int8_t exp10[64];  // minus the fraction's digits
  _mm512_store_si512(exp10, _mm512_maskz_sub_epi8(has, after_point, end));

  const __m512i j = _mm512_and_si512(iota, _mm512_set1_epi8(31));
  const __m512i pair_lane = _mm512_srli_epi16(_mm512_and_si512(iota, _mm512_set1_epi8(32)), 5);  // 0 x 32, 1 x 32 (bytes)
  std::uint64_t value[kMaxFields];
  __mmask8 too_long = 0;  // a high half of 1000 or more: past 19 significant digits
  for (std::size_t f = 0; f < fields; f += 2) {
    const __m512i sel = _mm512_add_epi8(pair_lane, _mm512_set1_epi8(static_cast<char>(f)));
    __m512i idx = _mm512_add_epi8(permute(sel, base), j);
    idx = _mm512_mask_sub_epi8(idx, _mm512_cmplt_epu8_mask(idx, permute(sel, after_point)), idx, one);
    const __mmask64 mine = _mm512_cmpge_epu8_mask(j, permute(sel, first_digit)) &
                           (f + 1 < fields ? ~std::uint64_t{0} : 0xffffffffu);
    const __m512i bytes = _mm512_mask_blend_epi8(_mm512_cmplt_epu8_mask(idx, _mm512_set1_epi8(static_cast<char>(128))),
                                                 permute(idx, row[2]), _mm512_permutex2var_epi8(row[0], idx, row[1]));
    const __m512i both = sum_two(_mm512_maskz_sub_epi8(mine, bytes, _mm512_set1_epi8('0')), too_long);
    value[f] = static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm512_maskz_extracti64x2_epi64(0x3, both, 0)));
    if (f + 1 < fields) value[f + 1] = static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm512_maskz_extracti64x2_epi64(0x3, both, 2)));
  }
  if (too_long) return false;
  if (value[0] > static_cast<std::uint64_t>(INT64_MAX) || value[1] > static_cast<std::uint64_t>(INT64_MAX)) return false;
  for (std::size_t i = 2; i < fields; ++i) {
    if (!decimal(value[i], exp10[i], vals[i - 2])) return false;
  }
  step = static_cast<std::int64_t>(value[0]);
  rank = static_cast<std::int64_t>(value[1]);
  return true;
}


// --- The same rows with AVX2 and BMI2 (no AVX-512 needed) ---
//
// The commas, points, digits and line end of up to 192 bytes marked by six 32-byte compares, as
// the VBMI path marks them; each field's bounds then come from the comma and point marks by bit
// scans, and each field's digits are summed in a vector register of their own: the 32 bytes that
// end at the field's end, those up to its point taken one byte earlier (the point squeezed out),
// the bytes before its first digit zeroed. No field waits for another's digits, and no branch
// depends on how many digits a field has. The same lines are taken, with the same values, as by
// the VBMI path.

#define SF_MASK_TARGET __attribute__((target("avx2,bmi,bmi2,lzcnt,popcnt")))

/// The 32 byte marks of x (0xff or 0) as bits, moved up by shift.
SF_MASK_TARGET inline std::uint64_t bits32(__m256i x, unsigned shift) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm256_movemask_epi8(x))) << shift;
}

/// The positions of the bits set in a 192-bit mark, in order, into at[].
SF_MASK_TARGET inline void mark_positions(const std::uint64_t m[3], std::uint8_t* at) {
  std::size_t k = 0;
  for (std::size_t w = 0; w < 3; ++w)
    for (std::uint64_t x = m[w]; x != 0; x = _blsr_u64(x)) at[k++] = static_cast<std::uint8_t>(64 * w + _tzcnt_u64(x));
}

/// The field that ends at q + e, its point at q + pt (pt == e for none), its digits `ndigits`
/// (1 to 31): its value when below 10^19, else false. Reads the 33 bytes before q + e.
SF_MASK_TARGET inline bool field_value(const char* q, std::size_t e, std::size_t pt, std::size_t ndigits, std::uint64_t& out) {
  const __m256i iota = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
                                        25, 26, 27, 28, 29, 30, 31);
  const char* const end = q + e;
  __m256i win = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(end - 32));  // window byte j: line byte e - 32 + j
  // Up to the point (window bytes j < pt - e + 33), the byte before: the point squeezed out.
  const __m256i before = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(end - 33));
  const int cut = pt < e ? static_cast<int>(pt) - static_cast<int>(e) + 33 : 0;  // 1 to 31; none without a point
  win = _mm256_blendv_epi8(win, before, _mm256_cmpgt_epi8(_mm256_set1_epi8(static_cast<char>(cut)), iota));
  // The digits are the window's last ndigits bytes.
  const __m256i mine = _mm256_cmpgt_epi8(iota, _mm256_set1_epi8(static_cast<char>(31 - static_cast<int>(ndigits))));
  const __m256i d = _mm256_and_si256(_mm256_sub_epi8(win, _mm256_set1_epi8('0')), mine);
  const __m256i pairs = _mm256_maddubs_epi16(d, _mm256_set1_epi16(0x010A));
  const __m256i fours = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00010064));
  const __m256i packed = _mm256_packus_epi32(fours, fours);
  const __m256i eights = _mm256_madd_epi16(packed, _mm256_set1_epi32(0x00012710));
  // Per 128-bit half: the eight-digit sums of its two 8-byte quarters, in 32-bit lanes 0 and 1.
  const auto lo = static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm256_castsi256_si128(eights)));
  const auto hi = static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm256_extracti128_si256(eights, 1)));
  const std::uint64_t e0 = lo & 0xffffffff, e1 = lo >> 32, e2 = hi & 0xffffffff, e3 = hi >> 32;
  if (e0 != 0 || e1 >= 1000) return false;  // 10^19 or more
  out = (e1 * kE8 + e2) * kE8 + e3;
  return true;
}

/// The row in q[0, n) (n <= kMaxLine, or with kFindEnd the bytes there: the line's end found
/// among the first kMaxLine, its length written to *line, npos when past them). The 32 bytes
/// before q and kMaxLine from q are readable: the file's own where it has them, else a copy.
template <bool kFindEnd>
SF_MASK_TARGET inline bool mask_row_at(const char* q, std::size_t n, std::size_t* line, std::int64_t& step, std::int64_t& rank,
                                       std::span<double> vals) {
  const std::size_t fields = vals.size() + 2;
  std::uint64_t comma[3] = {}, point[3] = {}, digit[3] = {}, nl[3] = {};
  const __m256i zero_char = _mm256_set1_epi8('0'), nine = _mm256_set1_epi8(9);
  for (std::size_t c = 0; c < 6; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * c));
    const __m256i d = _mm256_sub_epi8(v, zero_char);
    const unsigned shift = 32 * (c % 2);
    comma[c / 2] |= bits32(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(',')), shift);
    point[c / 2] |= bits32(_mm256_cmpeq_epi8(v, _mm256_set1_epi8('.')), shift);
    digit[c / 2] |= bits32(_mm256_cmpeq_epi8(_mm256_min_epu8(d, nine), d), shift);
    if constexpr (kFindEnd) nl[c / 2] |= bits32(_mm256_cmpeq_epi8(v, _mm256_set1_epi8('\n')), shift);
  }
  if constexpr (kFindEnd) {
    if (nl[0] | nl[1] | nl[2]) n = nl[0] ? _tzcnt_u64(nl[0]) : nl[1] ? 64 + _tzcnt_u64(nl[1]) : 128 + _tzcnt_u64(nl[2]);
    else if (n > kMaxLine) n = npos;
    *line = n;
    if (n == npos || n == 0) return false;
  }
  std::uint64_t stray = 0;
  std::size_t commas = 0, npoints = 0;
  for (std::size_t w = 0; w < 3; ++w) {
    const std::uint64_t in = _bzhi_u64(~std::uint64_t{0}, static_cast<unsigned>(std::min<std::size_t>(n > 64 * w ? n - 64 * w : 0, 64)));
    comma[w] &= in;
    point[w] &= in;
    stray |= in & ~(comma[w] | point[w] | digit[w]);
    commas += static_cast<std::size_t>(_mm_popcnt_u64(comma[w]));
    npoints += static_cast<std::size_t>(_mm_popcnt_u64(point[w]));
  }
  if (stray || commas + 1 != fields || npoints > fields - 2) return false;
  // Each field's end (its comma, the line's end for the last) and the points, in order; zeros
  // past them (16-lane compares read them).
  alignas(16) std::uint8_t ends[32] = {}, points[32] = {};
  mark_positions(comma, ends);
  mark_positions(point, points);
  ends[commas] = static_cast<std::uint8_t>(n);

  if (npoints + 2 == fields) {
    // The common row, a point in every value: point k must lie inside field k + 2 with a digit
    // on either side (ends[k + 1] + 2 <= points[k] <= ends[k + 2] - 2: then each value field has
    // exactly one, and step and rank none), and every field must be 1 to 32 bytes (ends[0] from
    // 1 to 32, ends[f + 1] - ends[f] from 2 to 33), checked 16 lanes at once.
    const __m128i e0 = _mm_load_si128(reinterpret_cast<const __m128i*>(ends));
    const __m128i e1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ends + 1));
    const __m128i e2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ends + 2));
    const __m128i pts = _mm_load_si128(reinterpret_cast<const __m128i*>(points));
    const __m128i two = _mm_set1_epi8(2), zero = _mm_setzero_si128();
    const __m128i gap = _mm_sub_epi8(e1, e0);
    const auto point_ok = static_cast<unsigned>(_mm_movemask_epi8(_mm_and_si128(
        _mm_cmpeq_epi8(_mm_subs_epu8(_mm_add_epi8(e1, two), pts), zero), _mm_cmpeq_epi8(_mm_subs_epu8(_mm_add_epi8(pts, two), e2), zero))));
    const auto gap_ok = static_cast<unsigned>(_mm_movemask_epi8(
        _mm_and_si128(_mm_cmpeq_epi8(_mm_subs_epu8(gap, _mm_set1_epi8(33)), zero), _mm_cmpeq_epi8(_mm_subs_epu8(two, gap), zero))));
    const unsigned want_points = _bzhi_u32(~0u, static_cast<unsigned>(npoints)), want_gaps = _bzhi_u32(~0u, static_cast<unsigned>(commas));
    if ((point_ok & want_points) != want_points || (gap_ok & want_gaps) != want_gaps || ends[0] == 0 || ends[0] > 32) return false;
    std::uint64_t v0, v1;
    if (!field_value(q, ends[0], ends[0], ends[0], v0) || !field_value(q, ends[1], ends[1], ends[1] - ends[0] - 1u, v1) ||
        v0 > static_cast<std::uint64_t>(INT64_MAX) || v1 > static_cast<std::uint64_t>(INT64_MAX))
      return false;
    for (std::size_t f = 2; f < fields; ++f) {
      const std::size_t e = ends[f], pt = points[f - 2];
      std::uint64_t w;
      if (!field_value(q, e, pt, e - ends[f - 1] - 2, w) || !decimal(w, -static_cast<std::int64_t>(e - pt - 1), vals[f - 2])) return false;
    }
    step = static_cast<std::int64_t>(v0);
    rank = static_cast<std::int64_t>(v1);
    return true;
  }

  // Any other row: the points assigned to fields one by one.
  std::size_t s = 0, j = 0;
  std::uint64_t value[kMaxFields];
  value[0] = value[1] = 0;  // (set below: a row has three fields or more)
  std::int64_t exp10[kMaxFields];
  for (std::size_t f = 0; f < fields; ++f) {
    const std::size_t e = ends[f], len = e - s;
    if (len == 0 || len > 32) return false;
    std::size_t pt = e;  // the field's point, e for none
    if (j < npoints && points[j] < e) {
      pt = points[j++];
      // Step and rank are integers; a value has a point at most, with digits on both sides.
      if (f < 2 || pt == s || pt + 1 == e || (j < npoints && points[j] < e)) return false;
    }
    if (!field_value(q, e, pt, len - (pt < e), value[f])) return false;
    exp10[f] = -static_cast<std::int64_t>(e - std::min(pt + 1, e));
    s = e + 1;
  }
  if (value[0] > static_cast<std::uint64_t>(INT64_MAX) || value[1] > static_cast<std::uint64_t>(INT64_MAX)) return false;
  for (std::size_t i = 2; i < fields; ++i)
    if (!decimal(value[i], exp10[i], vals[i - 2])) return false;
  step = static_cast<std::int64_t>(value[0]);
  rank = static_cast<std::int64_t>(value[1]);
  return true;
}

/// mask_row_at on the bytes at p, `before` of them readable before p: the file's own where the 32
/// before and kMaxLine from p are there to read, else a copy of the line with room around it.
template <bool kFindEnd>
SF_MASK_TARGET inline bool mask_row(const char* p, std::size_t n, std::size_t before, std::size_t* line, std::int64_t& step,
                                    std::int64_t& rank, std::span<double> vals) {
  if (vals.empty() || n == 0 || vals.size() + 2 > kMaxFields) return false;
  if (!kFindEnd && n > kMaxLine) return false;
  if (kFindEnd && n >= kMaxLine && before >= 32) return mask_row_at<true>(p, n, line, step, rank, vals);
  alignas(32) char copy[32 + kMaxLine] = {};
  std::memcpy(copy + 32, p, std::min(n, kMaxLine));
  return mask_row_at<kFindEnd>(copy + 32, n, line, step, rank, vals);
}

SF_WIDE_TARGET bool vbmi_row(const char* p, std::size_t n, std::int64_t& step, std::int64_t& rank, std::span<double> vals) {
  return wide_row<false>(p, n, nullptr, step, rank, vals);
}
/// (`before` unused: the VBMI path masks its loads rather than read around the line.)
SF_WIDE_TARGET bool vbmi_line(const char* p, std::size_t avail, std::size_t, std::size_t& line, std::int64_t& step,
                              std::int64_t& rank, std::span<double> vals) {
  line = npos;
  return wide_row<true>(p, avail, &line, step, rank, vals);
}
SF_MASK_TARGET bool avx2_row(const char* p, std::size_t n, std::int64_t& step, std::int64_t& rank, std::span<double> vals) {
  return mask_row<false>(p, n, 0, nullptr, step, rank, vals);
}
SF_MASK_TARGET bool avx2_line(const char* p, std::size_t avail, std::size_t before, std::size_t& line, std::int64_t& step,
                              std::int64_t& rank, std::span<double> vals) {
  line = npos;
  return mask_row<true>(p, avail, before, &line, step, rank, vals);
}

}  // namespace

bool plain_row_vbmi_available() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
                          __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
  return yes;
}

bool plain_row_avx2_available() {
  // LZCNT from CPUID itself (leaf 0x80000001, ECX bit 5): clang's __builtin_cpu_supports has no name for it.
  unsigned a = 0, b = 0, c = 0, d = 0;
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                          __builtin_cpu_supports("popcnt") && __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & bit_LZCNT) != 0;
  return yes;
}

namespace {
/// The wide path plain_row_path asks for, where the processor has it: VBMI before AVX2.
enum class Wide { none, avx2, vbmi };
Wide wide_now() {
  switch (plain_row_path.load(std::memory_order_relaxed)) {
    case RowPath::fastest: return plain_row_vbmi_available() ? Wide::vbmi : plain_row_avx2_available() ? Wide::avx2 : Wide::none;
    case RowPath::avx2: return plain_row_avx2_available() ? Wide::avx2 : Wide::none;
    case RowPath::portable: break;
  }
  return Wide::none;
}
}  // namespace

bool parse_plain_row_wide(const char* p, std::size_t n, std::int64_t& step, std::int64_t& rank, std::span<double> vals) {
  switch (wide_now()) {
    case Wide::vbmi: return vbmi_row(p, n, step, rank, vals);
    case Wide::avx2: return avx2_row(p, n, step, rank, vals);
    case Wide::none: break;
  }
  return false;
}

PlainLineFn plain_line_wide_fn() {
  switch (wide_now()) {
    case Wide::vbmi: return vbmi_line;
    case Wide::avx2: return avx2_line;
    case Wide::none: break;
  }
  return nullptr;
}

bool parse_plain_line_wide(const char* p, std::size_t avail, std::size_t before, std::size_t& line, std::int64_t& step,
                           std::int64_t& rank, std::span<double> vals) {
  if (const PlainLineFn f = plain_line_wide_fn()) return f(p, avail, before, line, step, rank, vals);
  line = npos;
  return false;
}

bool plain_row_wide_available() { return plain_row_vbmi_available() || plain_row_avx2_available(); }

bool plain_rows_wide() { return wide_now() != Wide::none; }

#else

bool parse_plain_row_wide(const char*, std::size_t, std::int64_t&, std::int64_t&, std::span<double>) { return false; }
bool parse_plain_line_wide(const char*, std::size_t, std::size_t, std::size_t& line, std::int64_t&, std::int64_t&,
                           std::span<double>) {
  line = static_cast<std::size_t>(-1);
  return false;
}
PlainLineFn plain_line_wide_fn() { return nullptr; }
bool plain_row_vbmi_available() { return false; }
bool plain_row_avx2_available() { return false; }
bool plain_row_wide_available() { return false; }
bool plain_rows_wide() { return false; }

#endif

}  // namespace sf::formats::detail
