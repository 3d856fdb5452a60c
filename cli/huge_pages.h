// The executable's global operator new (huge_pages.cpp): large blocks on transparent huge pages.
#pragma once

#include <cstddef>

namespace sf::cli {

/// Blocks of at least this many bytes start on a huge page and are advised onto huge pages.
inline constexpr std::size_t kHugeBytes = std::size_t{2} << 20;

/// The block behind operator new: malloc below kHugeBytes; at and above it aligned to kHugeBytes,
/// rounded up to whole huge pages and advised MADV_HUGEPAGE. nullptr when memory runs out. free()
/// releases it.
void* allocate_block(std::size_t n) noexcept;

/// Whether this build replaces the global operator new with allocate_block (not in sanitizer
/// builds: their runtime's operator new checks new against delete).
extern const bool kOperatorNewReplaced;

}  // namespace sf::cli
