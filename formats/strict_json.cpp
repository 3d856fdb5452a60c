#include "strict_json.h"

#include "open_error.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>

#include "sf/formats/formats.h"

namespace sf::formats::detail {

namespace {

using nlohmann::json;

/// The integer a JSON number literal denotes, when it is an exact integer within 64 bits
/// (unsigned when ≥ 0, as nlohmann stores integers); nullopt otherwise. Decided on the decimal
/// text, not on the rounded double: `1.0000000000000000001` is not an integer.
std::optional<json> exact_integer(std::string_view s) {
  const bool negative = !s.empty() && s.front() == '-';
  if (negative) s.remove_prefix(1);
  const std::size_t e = s.find_first_of("eE");
  const std::string_view mantissa = s.substr(0, e);
  std::int64_t exp = 0;
  if (e != std::string_view::npos) {
    std::size_t i = e + 1;
    const bool exp_negative = i < s.size() && s[i] == '-';
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    for (; i < s.size(); ++i) exp = std::min<std::int64_t>(exp * 10 + (s[i] - '0'), 1000000);  // saturates
    if (exp_negative) exp = -exp;
  }
  // Digits D (the '.' skipped), frac of them after the point: value = D × 10^(exp − frac).
  std::int64_t n = 0, frac = 0, first_nz = -1, last_nz = -1;
  bool after_point = false;
  for (const char c : mantissa) {
    if (c == '.') {
      after_point = true;
      continue;
    }
    if (c != '0') {
      if (first_nz < 0) first_nz = n;
      last_nz = n;
    }
    ++n;
    frac += after_point ? 1 : 0;
  }
  if (first_nz < 0) return json(std::uint64_t{0});  // 0, 0.0, -0.0, 0e5
  const std::int64_t scale = exp - frac + (n - 1 - last_nz);  // value = D[first_nz..last_nz] × 10^scale
  const std::int64_t digits = last_nz - first_nz + 1;
  if (scale < 0 || digits + scale > 20) return std::nullopt;  // a fraction, or ≥ 10^20 > 2^64
  std::uint64_t v = 0;
  std::int64_t k = 0;
  for (const char c : mantissa) {
    if (c == '.') continue;
    if (k >= first_nz && k <= last_nz &&
        (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, static_cast<unsigned>(c - '0'), &v)))
      return std::nullopt;
    ++k;
  }
  for (std::int64_t i = 0; i < scale; ++i)
    if (__builtin_mul_overflow(v, 10u, &v)) return std::nullopt;
  if (!negative) return json(v);
  constexpr std::uint64_t kMinMagnitude = std::uint64_t{1} << 63;  // |INT64_MIN|
  if (v > kMinMagnitude) return std::nullopt;
  return json(v == kMinMagnitude ? INT64_MIN : -static_cast<std::int64_t>(v));
}

}  // namespace

std::string read_capped(const std::string& path, std::size_t cap, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path, 0, std::string("the ") + what + " " + open_error(path));
  std::string text(cap + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw FormatError(path, 0, std::string("cannot read ") + what);
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

std::string quoted_key(std::string_view k) {
  std::string out = "\"";
  for (std::size_t i = 0; i < k.size() && i < 40; ++i) {
    const auto u = static_cast<unsigned char>(k[i]);
    out += u >= 0x20 && u < 0x7f ? k[i] : '?';
  }
  if (k.size() > 40) out += "...";
  return out + "\"";
}

std::string JsonProblem::describe() const {
  const std::string where = path.empty() ? "a number" : "field " + path;
  switch (kind) {
    case number_range: return where + " is " + token + ", a number out of range for a double";
    case negative_underflow: return where + " is " + token + ", a negative number (too small for a double, yet below 0)";
    case duplicate_key:
      return "key " + quoted_key(key) + " appears twice in " + (path.empty() ? "one object" : "the object " + path);
    case nul_byte: return "a NUL byte at byte " + std::to_string(byte) + " (binary data?)";
    case syntax:
    case none: break;
  }
  return "not valid JSON at byte " + std::to_string(byte);
}

bool StrictJsonParser::parse(std::string_view text, json& out) {
  out = json();
  root_ = &out;
  slot_ = nullptr;
  depth_ = 0;
  problem_ = {};
  // nlohmann's lexer ends the text at a NUL byte and takes what came before it as the whole: a
  // record after it would vanish without a word. JSON has no raw NUL anywhere (a string spells it
  // \u0000), so one is refused where it stands.
  if (const auto z = text.find('\0'); z != std::string_view::npos) {
    problem_.kind = JsonProblem::nul_byte;
    problem_.byte = z + 1;
    return false;
  }
  const bool ok = json::sax_parse(text.data(), text.data() + text.size(), this);
  if (!ok && problem_.kind == JsonProblem::none) problem_.kind = JsonProblem::syntax;
  return ok;
}

std::string StrictJsonParser::path() const {
  // Deep nesting keeps the message short: the first 4 and the last 4 steps of the path.
  std::string p;
  for (std::size_t i = 0; i < depth_; ++i) {
    if (depth_ > 8 && i == 4) {
      p += "...";
      i = depth_ - 5;
      continue;
    }
    const Frame& f = frames_[i];
    if (f.array) {
      p += "[" + std::to_string(f.index) + "]";
    } else {
      if (!p.empty()) p += ".";
      p += quoted_key(f.key ? *f.key : std::string());
    }
  }
  return p;
}

bool StrictJsonParser::put(json&& v) {
  if (depth_ == 0) {
    *root_ = std::move(v);
    return true;
  }
  Frame& f = frames_[depth_ - 1];
  if (f.array) {
    f.value->get_ref<json::array_t&>().push_back(std::move(v));
  } else {
    *slot_ = std::move(v);
  }
  return true;
}

void StrictJsonParser::completed() {
  if (depth_ > 0 && frames_[depth_ - 1].array) ++frames_[depth_ - 1].index;
}

bool StrictJsonParser::null() {
  put(json());
  completed();
  return true;
}
bool StrictJsonParser::boolean(bool v) {
  put(json(v));
  completed();
  return true;
}
bool StrictJsonParser::number_integer(json::number_integer_t v) {
  put(json(v));
  completed();
  return true;
}
bool StrictJsonParser::number_unsigned(json::number_unsigned_t v) {
  put(json(v));
  completed();
  return true;
}
bool StrictJsonParser::number_float(json::number_float_t v, const std::string& literal) {
  // An integer-valued literal rounds to an integral double (or one past 2^64): only those can be
  // exact integers, so the decimal text is read only for them. (The cast is exact below 2^63,
  // and every double from 2^63 up is integral; cheaper than floor, which is a libm call.)
  const double mag = std::fabs(v);
  const bool integral = mag < 0x1p63 ? static_cast<double>(static_cast<std::int64_t>(v)) == v : mag <= 1.9e19;
  if (integral) {
    if (auto i = exact_integer(literal)) {
      put(std::move(*i));
      completed();
      return true;
    }
  }
  if (v == 0 && !literal.empty() && literal.front() == '-') {
    // -1e-400: a negative number the double cannot hold (an exact -0 was handled above).
    problem_.kind = JsonProblem::negative_underflow;
    problem_.path = path();
    problem_.token = literal.substr(0, 40);
    return false;
  }
  put(json(v));
  completed();
  return true;
}
bool StrictJsonParser::string(std::string& v) {
  put(json(std::move(v)));
  completed();
  return true;
}
bool StrictJsonParser::binary(json::binary_t& v) {
  put(json::binary(std::move(v)));
  completed();
  return true;
}

bool StrictJsonParser::start_object(std::size_t) {
  put(json::object());
  json* placed = depth_ == 0 ? root_ : frames_[depth_ - 1].array ? &frames_[depth_ - 1].value->back() : slot_;
  if (depth_ == frames_.size()) frames_.emplace_back();
  Frame& f = frames_[depth_++];
  f.value = placed;
  f.array = false;
  f.index = 0;
  f.key = nullptr;
  return true;
}

bool StrictJsonParser::key(std::string& k) {
  Frame& f = frames_[depth_ - 1];
  const auto [it, fresh] = f.value->get_ref<json::object_t&>().try_emplace(std::move(k));
  if (!fresh) {
    --depth_;  // the path of the object, not of the key inside it
    problem_.kind = JsonProblem::duplicate_key;
    problem_.path = path();
    problem_.key = it->first;
    ++depth_;
    return false;
  }
  f.key = &it->first;  // a map node's key stays where it is
  slot_ = &it->second;
  return true;
}

bool StrictJsonParser::end_object() {
  --depth_;
  completed();
  return true;
}

bool StrictJsonParser::start_array(std::size_t) {
  put(json::array());
  json* placed = depth_ == 0 ? root_ : frames_[depth_ - 1].array ? &frames_[depth_ - 1].value->back() : slot_;
  if (depth_ == frames_.size()) frames_.emplace_back();
  Frame& f = frames_[depth_++];
  f.value = placed;
  f.array = true;
  f.index = 0;
  f.key = nullptr;
  return true;
}

bool StrictJsonParser::end_array() {
  --depth_;
  completed();
  return true;
}

bool StrictJsonParser::parse_error(std::size_t position, const std::string& last_token,
                                   const nlohmann::detail::exception& ex) {
  if (ex.id == 406) {  // out_of_range.406: a number past the double range
    problem_.kind = JsonProblem::number_range;
    problem_.path = path();
    problem_.token = last_token.substr(0, 40);
  } else {
    problem_.kind = JsonProblem::syntax;
  }
  problem_.byte = position;
  return false;
}

}  // namespace sf::formats::detail
