#include "generators.h"

#include <algorithm>
#include <ostream>
#include <string>

namespace sf::verify {

namespace {

std::vector<std::string> stage_names(int stages) {
  std::vector<std::string> names;
  for (int s = 0; s < stages; ++s) names.push_back("s" + std::to_string(s));
  return names;
}

rc::Gen<GenWindow> window_of(int steps, int ranks, int stages, bool with_wall, rc::Gen<std::uint8_t> presence) {
  const auto cells = static_cast<std::size_t>(steps) * ranks;
  return rc::gen::map(
      rc::gen::tuple(rc::gen::container<std::vector<double>>(cells * stages, gen_duration()),
                     rc::gen::container<std::vector<double>>(
                         cells, rc::gen::weightedOneOf<double>({{3, rc::gen::just(0.0)},
                                                                {2, rc::gen::map(rc::gen::inRange(-500, 500),
                                                                                 [](int x) { return x * 1e-3; })}})),
                     rc::gen::container<std::vector<std::uint8_t>>(cells, presence)),
      [=](const std::tuple<std::vector<double>, std::vector<double>, std::vector<std::uint8_t>>& parts) {
        GenWindow w;
        w.steps = steps;
        w.ranks = ranks;
        w.stages = stages;
        w.with_wall = with_wall;
        w.d = std::get<0>(parts);
        w.wall_delta = std::get<1>(parts);
        w.present = std::get<2>(parts);
        return w;
      });
}

}  // namespace

frontier::StageSchema GenWindow::schema() const { return frontier::StageSchema(stage_names(stages), with_wall); }

frontier::StageMatrix GenWindow::matrix() const {
  frontier::StageMatrix m(schema(), ranks, 0, steps);
  for (int t = 0; t < steps; ++t)
    for (int r = 0; r < ranks; ++r) {
      if (!present[static_cast<std::size_t>(t) * ranks + r]) continue;
      const double* row = &d[(static_cast<std::size_t>(t) * ranks + r) * stages];
      std::optional<double> wall;
      if (with_wall) {
        double sum = 0;
        for (int s = 0; s < stages; ++s) sum += row[s];
        wall = std::max(0.0, sum + wall_delta[static_cast<std::size_t>(t) * ranks + r]);
      }
      m.set_record(t, r, std::span<const double>(row, stages), wall);
    }
  return m;
}

frontier::StageMatrix GenWindow::step_matrix(int t) const {
  frontier::StageMatrix m(schema(), ranks, t, 1);
  const frontier::StageMatrix full = matrix();
  for (int r = 0; r < ranks; ++r) {
    if (!full.present(t, r)) continue;
    std::vector<double> row(stages);
    for (int s = 0; s < stages; ++s) row[s] = full.d(t, r, s);
    m.set_record(0, r, row, with_wall ? std::optional<double>(full.wall(t, r)) : std::nullopt);
  }
  return m;
}

rc::Gen<double> gen_duration() {
  // Integer-valued grains make exact ties common; every branch shrinks towards 0.
  return rc::gen::weightedOneOf<double>({
      {2, rc::gen::just(0.0)},
      {5, rc::gen::map(rc::gen::inRange(0, 10000), [](int x) { return x * 1e-3; })},  // 0..10 s, ms grain
      {2, rc::gen::map(rc::gen::inRange(0, 1000), [](int x) { return x * 1e-9; })},   // nanoseconds
      {1, rc::gen::map(rc::gen::inRange(0, 1000000), [](int x) { return x * 1e3; })}, // up to ~1e9 s
      {1, rc::gen::map(rc::gen::inRange(0, 1 << 30), [](int x) { return x / double(1 << 30); })},
  });
}

rc::Gen<GenWindow> gen_window(int max_steps, int max_ranks, int max_stages) {
  return rc::gen::mapcat(
      rc::gen::tuple(rc::gen::inRange(1, max_steps + 1), rc::gen::inRange(1, max_ranks + 1),
                     rc::gen::inRange(1, max_stages + 1), rc::gen::arbitrary<bool>()),
      [](const std::tuple<int, int, int, bool>& dims) {
        const auto [n, r, s, wall] = dims;
        return window_of(n, r, s, wall, rc::gen::just<std::uint8_t>(1));
      });
}

rc::Gen<GenWindow> gen_sparse_window() {
  return rc::gen::mapcat(
      rc::gen::tuple(rc::gen::inRange(1, 8), rc::gen::inRange(1, 7), rc::gen::inRange(1, 6), rc::gen::arbitrary<bool>()),
      [](const std::tuple<int, int, int, bool>& dims) {
        const auto [n, r, s, wall] = dims;
        return window_of(n, r, s, wall,
                         rc::gen::weightedOneOf<std::uint8_t>({{6, rc::gen::just<std::uint8_t>(1)},
                                                               {1, rc::gen::just<std::uint8_t>(0)}}));
      });
}

rc::Gen<GenWindow> gen_single_rank_window() {
  return rc::gen::mapcat(
      rc::gen::tuple(rc::gen::inRange(1, 7), rc::gen::inRange(1, 8), rc::gen::arbitrary<bool>()),
      [](const std::tuple<int, int, bool>& dims) {
        const auto [n, s, wall] = dims;
        return window_of(n, 1, s, wall, rc::gen::just<std::uint8_t>(1));
      });
}

std::ostream& operator<<(std::ostream& os, const GenWindow& w) {
  os << "GenWindow{steps=" << w.steps << " ranks=" << w.ranks << " stages=" << w.stages
     << " wall=" << (w.with_wall ? "yes" : "no") << "}\n";
  for (int t = 0; t < w.steps; ++t)
    for (int r = 0; r < w.ranks; ++r) {
      os << "  t" << t << " r" << r << (w.present[static_cast<std::size_t>(t) * w.ranks + r] ? ":" : " (missing):");
      for (int s = 0; s < w.stages; ++s) os << ' ' << w.at(t, r, s);
      if (w.with_wall) os << " | wall delta " << w.wall_delta[static_cast<std::size_t>(t) * w.ranks + r];
      os << '\n';
    }
  return os;
}

std::ostream& operator<<(std::ostream& os, const GenClockWindow& w) {
  os << "GenClockWindow{steps=" << w.steps << " ranks=" << w.ranks << " stages=" << w.stages << "} offsets:";
  for (auto o : w.offset_ns) os << ' ' << o;
  return os << '\n';
}

std::ostream& operator<<(std::ostream& os, const GenTightness& g) {
  return os << "GenTightness{R=" << g.ranks << " S=" << g.stages << " D=" << g.magnitude << "}";
}

std::ostream& operator<<(std::ostream& os, const GenPerturbed& p) {
  return os << p.window << "epsilon=" << p.epsilon << '\n';
}

}  // namespace sf::verify

namespace rc {

Gen<sf::verify::GenClockWindow> Arbitrary<sf::verify::GenClockWindow>::arbitrary() {
  return gen::mapcat(gen::tuple(gen::inRange(1, 6), gen::inRange(1, 8), gen::inRange(1, 7)),
                     [](const std::tuple<int, int, int>& dims) {
                       // Named, not structured, bindings: the lambda below captures them (clang 14).
                       const int n = std::get<0>(dims), r = std::get<1>(dims), s = std::get<2>(dims);
                       const auto cells = static_cast<std::size_t>(n) * r;
                       return gen::map(
                           gen::tuple(gen::container<std::vector<std::int64_t>>(
                                          cells * s, gen::map(gen::inRange(0, 200000), [](int x) { return std::int64_t{x} * 1000; })),
                                      gen::container<std::vector<std::int64_t>>(
                                          cells, gen::map(gen::inRange(0, 1 << 30), [](int x) { return std::int64_t{x}; })),
                                      gen::container<std::vector<std::int64_t>>(
                                          r, gen::map(gen::inRange(-1000000, 1000000),
                                                      [](int x) { return std::int64_t{x} * 1000000000LL; }))),
                           [=](const std::tuple<std::vector<std::int64_t>, std::vector<std::int64_t>,
                                                std::vector<std::int64_t>>& parts) {
                             sf::verify::GenClockWindow w;
                             w.steps = n;
                             w.ranks = r;
                             w.stages = s;
                             w.d_ns = std::get<0>(parts);
                             w.start_ns = std::get<1>(parts);
                             w.offset_ns = std::get<2>(parts);
                             return w;
                           });
                     });
}

Gen<sf::verify::GenTightness> Arbitrary<sf::verify::GenTightness>::arbitrary() {
  return gen::map(gen::tuple(gen::inRange(1, 12), gen::inRange(1, 12), gen::inRange(1, 1 << 20)),
                  [](const std::tuple<int, int, int>& t) {
                    return sf::verify::GenTightness{std::get<0>(t), std::get<1>(t), std::get<2>(t) * 1e-3};
                  });
}

Gen<sf::verify::GenPerturbed> Arbitrary<sf::verify::GenPerturbed>::arbitrary() {
  return gen::mapcat(sf::verify::gen_window(), [](const sf::verify::GenWindow& w) {
    return gen::map(gen::tuple(gen::inRange(0, 1000),
                               gen::container<std::vector<double>>(
                                   w.d.size(), gen::map(gen::inRange(-1000, 1001), [](int x) { return x / 1000.0; }))),
                    [w](const std::tuple<int, std::vector<double>>& t) {
                      return sf::verify::GenPerturbed{w, std::get<0>(t) * 1e-3, std::get<1>(t)};
                    });
  });
}

}  // namespace rc
