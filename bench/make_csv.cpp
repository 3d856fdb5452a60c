// sf_make_csv: writes the benchmarks' deterministic synthetic window as wide CSV
// (step,rank,<five stages>,wall), the input run_bench.sh scores with sf-testbed and with pandas.
//
//   sf_make_csv RANKS STEPS OUT.csv
#include "synthetic.h"
#include "sf/formats/formats.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <string_view>

namespace {

bool parse_positive(std::string_view s, int& out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && out > 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 0, steps = 0;
  if (argc != 4 || !parse_positive(argv[1], ranks) || !parse_positive(argv[2], steps)) {
    std::fprintf(stderr, "usage: sf_make_csv RANKS STEPS OUT.csv (RANKS, STEPS positive integers)\n");
    return 2;
  }
  std::ofstream out(argv[3], std::ios::binary);
  if (!out) {
    std::fprintf(stderr, "sf_make_csv: cannot open %s for writing\n", argv[3]);
    return 2;
  }
  sf::formats::write_csv(out, sf::bench::synthetic_matrix(ranks, steps));
  out.close();
  if (!out) {
    std::fprintf(stderr, "sf_make_csv: write to %s failed\n", argv[3]);
    return 2;
  }
  return 0;
}
