// RowMiddles: a step's cohort middles bracketed as its producer commits the row block by block
// (the blocks still in cache), so that StreamingAccumulator::add_step need not read the row back
// from memory for them (cohort_middles).
#include "detail.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace sf::frontier {

RowMiddles::RowMiddles() : impl_(std::make_unique<Impl>()) {}
RowMiddles::~RowMiddles() = default;
RowMiddles::RowMiddles(RowMiddles&&) noexcept = default;
RowMiddles& RowMiddles::operator=(RowMiddles&&) noexcept = default;

namespace {
const double* column(const StageMatrix& m, int t, int s) {
  return m.data().data() + (static_cast<std::size_t>(t) * m.stages() + s) * static_cast<std::size_t>(m.ranks());
}
}  // namespace

void RowMiddles::begin(const StageMatrix& m, int t) {
  auto& st = *impl_;
  if (m.sparse()) throw std::logic_error("RowMiddles::begin: a sparse rank layout (the middles are of dense rows)");
  if (t < 0 || t >= m.steps()) throw std::logic_error("RowMiddles::begin: row " + std::to_string(t) + " out of range");
  if (st.stages != m.stages() || st.ranks != m.ranks()) {
    // Another shape: the guesses were of other columns.
    st.stages = m.stages();
    st.ranks = m.ranks();
    st.hints.assign(static_cast<std::size_t>(st.stages), {});
    st.streams = std::vector<detail::StreamedMiddle>(static_cast<std::size_t>(st.stages));
    st.streamed.assign(static_cast<std::size_t>(st.stages), 0);
    st.out.assign(static_cast<std::size_t>(st.stages), {});
  }
  st.step = m.step_id(t);
  st.added = 0;
  st.begun = true;
  st.finished = false;
  const auto n = static_cast<std::size_t>(st.ranks);
  for (int s = 0; s < st.stages; ++s)
    // A guess in its sample mode needs a sample of the whole column first: that stage is left
    // to finish(), which selects the way cohort_middles does (sampling, then bracketing).
    st.streamed[s] = !st.hints[s].sample && st.streams[s].begin(st.hints[s], n, {});
}

void RowMiddles::add(const StageMatrix& m, int t, int r0, int r1) {
  auto& st = *impl_;
  if (!st.begun || st.finished || m.step_id(t) != st.step || m.ranks() != st.ranks || m.stages() != st.stages)
    throw std::logic_error("RowMiddles::add: step " + std::to_string(m.step_id(t)) + " was not begun");
  if (r0 != st.added || r1 < r0 || r1 > st.ranks)
    throw std::logic_error("RowMiddles::add: ranks [" + std::to_string(r0) + ", " + std::to_string(r1) + ") after " +
                           std::to_string(st.added) + " of " + std::to_string(st.ranks));
  for (int s = 0; s < st.stages; ++s)
    if (st.streamed[s]) st.streams[s].add(column(m, t, s) + r0, static_cast<std::size_t>(r1 - r0));
  st.added = r1;
}

void RowMiddles::finish(const StageMatrix& m, int t) {
  auto& st = *impl_;
  if (!st.begun || st.finished || m.step_id(t) != st.step || st.added != st.ranks)
    throw std::logic_error("RowMiddles::finish: step " + std::to_string(m.step_id(t)) + " with " +
                           std::to_string(st.added) + " of " + std::to_string(st.ranks) + " ranks added");
  const auto n = static_cast<std::size_t>(st.ranks);
  for (int s = 0; s < st.stages; ++s) {
    detail::Middle mid;
    // A missed bracket leaves the guess where it was: middle_of then brackets with it again,
    // misses, selects over the column and moves it, as cohort_middles would have.
    if (!(st.streamed[s] && st.streams[s].finish(st.scratch, mid)))
      mid = detail::middle_of({column(m, t, s), n}, st.scratch, &st.hints[s]);
    st.out[s] = mid;
  }
  st.finished = true;
}

}  // namespace sf::frontier
