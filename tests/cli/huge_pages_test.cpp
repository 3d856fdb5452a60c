// The executable's operator new (cli/huge_pages.cpp): large blocks on huge-page-advised memory,
// small ones untouched, failures as bad_alloc.
#include "cli/huge_pages.h"

#include <sf/frontier/frontier.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

/// The VmFlags of the mapping that holds address p (/proc/self/smaps), "" when none holds it.
std::string vm_flags_at(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool advised_huge(const void* p) { return vm_flags_at(p).find(" hg") != std::string::npos; }

/// Why the advice cannot be seen here ("" when it can): a sanitizer build, or a kernel without THP.
std::string cannot_see_advice() {
  if (!sf::cli::kOperatorNewReplaced) return "sanitizer builds keep their runtime's operator new";
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage"))
    return "this kernel has no transparent huge pages (the advice is refused; blocks stay on small pages)";
  return "";
}

}  // namespace

TEST(HugePages, a_large_vector_starts_on_an_advised_huge_page) {
  if (const auto why = cannot_see_advice(); !why.empty()) GTEST_SKIP() << why;
  // Just over three huge pages: rounded up to four, every byte of them advised.
  std::vector<double> v((3 * sf::cli::kHugeBytes + 8) / sizeof(double), 1.0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % sf::cli::kHugeBytes, 0u);
  EXPECT_TRUE(advised_huge(v.data())) << vm_flags_at(v.data());
  EXPECT_TRUE(advised_huge(&v.back())) << vm_flags_at(&v.back());
  EXPECT_TRUE(advised_huge(reinterpret_cast<const char*>(v.data()) + 4 * sf::cli::kHugeBytes - 1));
  // Through new[] and the unsized delete[] too.
  std::unique_ptr<double[]> a(new double[sf::cli::kHugeBytes / sizeof(double)]);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.get()) % sf::cli::kHugeBytes, 0u);
  EXPECT_TRUE(advised_huge(a.get())) << vm_flags_at(a.get());
}

// The row sim's model writes and its scorer reads twice a step: a stage matrix's cells were an
// Eigen matrix, which Eigen allocates with malloc, past this operator new and so on small pages.
TEST(HugePages, a_large_stage_matrix_keeps_its_cells_on_advised_huge_pages) {
  if (const auto why = cannot_see_advice(); !why.empty()) GTEST_SKIP() << why;
  const sf::frontier::StageSchema schema(sf::frontier::default_explicit_stages(), true);
  // 65536 ranks x 6 stages x 1 step: 3 MiB of cells.
  sf::frontier::StageMatrix m(schema, 65536, 0, 1);
  const double* cells = m.data().data();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(cells) % sf::cli::kHugeBytes, 0u);
  EXPECT_TRUE(advised_huge(cells)) << vm_flags_at(cells);
  const double* last = cells + m.data().size() - 1;
  EXPECT_TRUE(advised_huge(last)) << vm_flags_at(last);
  // And they read as the views say: step 0's block is the whole matrix here, every cell 0.
  EXPECT_EQ(m.step_block(0).data(), cells);
  EXPECT_EQ(m.data().cols(), 6);
  EXPECT_EQ(m.data().rows(), 65536);
  EXPECT_EQ(m.data().cwiseAbs().maxCoeff(), 0.0);
}

TEST(HugePages, a_block_just_below_the_size_stays_on_small_pages) {
  if (const auto why = cannot_see_advice(); !why.empty()) GTEST_SKIP() << why;
  void* p = ::operator new(sf::cli::kHugeBytes - 64);
  // malloc's block: whatever glibc does with it, not advised by us (an mmap'd block of its own or
  // the heap, neither of which this process advised).
  EXPECT_FALSE(advised_huge(p)) << vm_flags_at(p);
  ::operator delete(p);
  void* z = ::operator new(0);  // a unique non-null block, as the standard asks
  EXPECT_NE(z, nullptr);
  ::operator delete(z);
}

TEST(HugePages, running_out_is_bad_alloc_and_nothrow_gives_null) {
  // (A sanitizer's allocator stops the process on a size past its limit, by design.)
  if (!sf::cli::kOperatorNewReplaced) GTEST_SKIP() << "sanitizer builds keep their runtime's operator new";
  // Past what rounding up to a whole huge page can hold, and past any machine's memory.
  volatile std::size_t top = SIZE_MAX - sf::cli::kHugeBytes / 2;
  EXPECT_EQ(sf::cli::allocate_block(top), nullptr);
  const std::size_t absurd = std::size_t{1} << 60;
  EXPECT_EQ(sf::cli::allocate_block(absurd), nullptr);
  EXPECT_THROW(static_cast<void>(::operator new(absurd)), std::bad_alloc);
  EXPECT_EQ(::operator new(absurd, std::nothrow), nullptr);
}
