// Text the engine hands to packets and tables: names checked once, rank lists made compact.
#include "sf/frontier/frontier.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace sf::frontier {

std::string strprintf(const char* fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out;
  if (n > 0) {
    out.resize(static_cast<std::size_t>(n));
    std::vsnprintf(out.data(), out.size() + 1, fmt, again);  // writes n bytes and the terminator
  }
  va_end(again);
  return out;
}

bool printable_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* const e = p + s.size();
  while (p < e) {
    const unsigned c = *p;
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) return false;  // C0 controls and DEL
      ++p;
      continue;
    }
    // Lead byte → sequence length and the smallest code point it may encode (no overlong forms).
    int n;
    unsigned cp;
    unsigned min;
    if (c >= 0xc2 && c <= 0xdf) { n = 1; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { n = 2; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 3; cp = c & 0x07; min = 0x10000; }
    else return false;  // continuation byte as a lead, 0xc0/0xc1, or past 0xf4
    if (e - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    if (cp >= 0x80 && cp <= 0x9f) return false;  // C1 controls
    p += n + 1;
  }
  return true;
}

std::vector<RankRange> to_rank_ranges(std::span<const int> ranks) {
  std::vector<RankRange> out;
  for (const int r : ranks) {
    if (!out.empty() && out.back().last + 1 == r) out.back().last = r;
    else out.push_back({r, r});
  }
  return out;
}

std::string format_rank_ranges(std::span<const RankRange> ranges, std::size_t max_ranges) {
  std::string out;
  const std::size_t shown = std::min(ranges.size(), max_ranges);
  for (std::size_t i = 0; i < shown; ++i) {
    if (i) out += ',';
    out += std::to_string(ranges[i].first);
    if (ranges[i].last > ranges[i].first) out += '-' + std::to_string(ranges[i].last);
  }
  if (const std::size_t more = ranges.size() - shown)
    out += ",... (" + std::to_string(more) + " more range" + (more > 1 ? "s)" : ")");
  return out;
}

std::string format_rank_ranges(std::span<const int> ranks, std::size_t max_ranges) {
  return format_rank_ranges(to_rank_ranges(ranks), max_ranges);
}

}  // namespace sf::frontier
