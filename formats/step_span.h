// Private to formats/: step-id arithmetic the stage-file reader and the Kineto importer share.
#pragma once

#include <cstdint>
#include <string>

namespace sf::formats::detail {

/// Steps from first to last inclusive (first ≤ last), in unsigned arithmetic (last − first may
/// not fit an int64). INT64_MIN..INT64_MAX is 2^64 steps, one more than a uint64 holds: it
/// saturates to UINT64_MAX instead of wrapping to 0, so every limit check still refuses it.
inline std::uint64_t span_of(std::int64_t first, std::int64_t last) {
  const std::uint64_t gaps = static_cast<std::uint64_t>(last) - static_cast<std::uint64_t>(first);
  return gaps == UINT64_MAX ? gaps : gaps + 1;
}

/// The same count as decimal text, exact for 2^64 too (for messages).
inline std::string span_text(std::int64_t first, std::int64_t last) {
  const std::uint64_t gaps = static_cast<std::uint64_t>(last) - static_cast<std::uint64_t>(first);
  return gaps == UINT64_MAX ? "18446744073709551616" : std::to_string(gaps + 1);
}

}  // namespace sf::formats::detail
