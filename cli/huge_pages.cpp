// The sf-testbed process's large blocks on transparent huge pages.
//
// `sim` at 10^6 ranks streams some forty arrays of R doubles (the model's per-rank state, its
// twin's, the step's row, the scorer's per-rank accumulators) once or more every step. On 4 KiB
// pages every 4 KiB of that is a TLB miss, and under a hypervisor's nested paging a miss is a
// two-level page walk (results/bench/README.md, its sim section: what this saves, and what the
// first touch of a huge page costs where the host takes free memory back). Where the kernel
// leaves transparent huge pages to the program (`madvise`, Debian's default), glibc takes them
// only when told at exec (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), so the executable replaces the
// global operator new, the one allocation path of every std::vector: a block of at least
// kHugeBytes is aligned to a huge page, rounded up to whole ones and advised MADV_HUGEPAGE before
// anything touches it. Smaller blocks go to malloc as before. Every block goes back through free
// (aligned_alloc's blocks are free's), so the nothrow and aligned forms stay libstdc++'s. Where
// the advice is refused (a kernel without THP) the block is still a good block on small pages:
// memory, never an error.
//
// Sanitizer builds keep their runtime's operator new and delete (they check that the two match).
#include "huge_pages.h"

#include <cstdint>
#include <cstdlib>
#include <new>

#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SF_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define SF_SANITIZER_ALLOCATOR 1
#endif
#endif

namespace sf::cli {

void* allocate_block(std::size_t n) noexcept {
  if (n < kHugeBytes) return std::malloc(n == 0 ? 1 : n);
  if (n > SIZE_MAX - kHugeBytes) return nullptr;
  const std::size_t whole = (n + kHugeBytes - 1) / kHugeBytes * kHugeBytes;
  void* p = std::aligned_alloc(kHugeBytes, whole);
  if (p != nullptr) static_cast<void>(madvise(p, whole, MADV_HUGEPAGE));
  return p;
}

#ifdef SF_SANITIZER_ALLOCATOR
const bool kOperatorNewReplaced = false;
#else
const bool kOperatorNewReplaced = true;
#endif

}  // namespace sf::cli

#ifndef SF_SANITIZER_ALLOCATOR
void* operator new(std::size_t n) {
  if (void* p = sf::cli::allocate_block(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#endif
