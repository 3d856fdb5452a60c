// A floor beside `sf-testbed score FILE.csv` on one core (issue 44, part 4): the file's bytes read
// as the streaming reader reads them (pread of 512 KiB blocks), cut into lines with memchr, and every
// field converted field by field (std::from_chars for step and rank, fast_float for the seconds),
// nothing checked, kept or scored. bench/score44.py runs it beside score and pandas: the CPU ratio
// pandas / this is the most a reader built on those per-field parsers could show. (The reader's own
// plain rows, formats/plain_row.cpp, are read whole with AVX-512 where the processor has it, below
// this floor's per-row cost; score44.md measures both.)
//
//   sf_csv_floor FILE.csv      prints rows, fields and a checksum of the values (so none is skipped)
#include <fast_float/fast_float.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sf_csv_floor FILE.csv\n");
    return 2;
  }
  const int fd = ::open(argv[1], O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "sf_csv_floor: cannot open %s\n", argv[1]);
    return 2;
  }
  constexpr std::size_t kBlock = std::size_t{1} << 19;
  std::vector<char> buf(2 * kBlock);
  std::size_t have = 0;
  std::uint64_t rows = 0, fields = 0;
  double sum = 0;
  bool header = true;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data() + have, kBlock);
    if (n < 0) {
      std::fprintf(stderr, "sf_csv_floor: read failed\n");
      return 2;
    }
    const std::size_t end = have + static_cast<std::size_t>(n);
    std::size_t pos = 0;
    for (;;) {
      const void* nl = std::memchr(buf.data() + pos, '\n', end - pos);
      if (!nl && n > 0) break;  // the rest of this line comes with the next block
      const char* e = nl ? static_cast<const char*>(nl) : buf.data() + end;
      const char* p = buf.data() + pos;
      if (header) {
        header = false;
      } else if (p < e) {
        std::int64_t step = 0, rank = 0;
        p = std::from_chars(p, e, step).ptr + 1;
        p = std::from_chars(p, e, rank).ptr + 1;
        sum += static_cast<double>(step + rank);
        fields += 2;
        while (p < e) {
          double v = 0;
          p = fast_float::from_chars(p, e, v).ptr + 1;
          sum += v;
          ++fields;
        }
        ++rows;
      }
      pos = static_cast<std::size_t>(e - buf.data()) + 1;
      if (!nl) break;
    }
    if (n == 0) break;
    have = end - std::min(pos, end);
    std::memmove(buf.data(), buf.data() + end - have, have);
    if (have + kBlock > buf.size()) buf.resize(have + kBlock);
  }
  ::close(fd);
  std::printf("{\"rows\": %llu, \"fields\": %llu, \"checksum\": %.17g}\n", static_cast<unsigned long long>(rows),
              static_cast<unsigned long long>(fields), sum);
  return 0;
}
