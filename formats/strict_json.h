// Private to formats/: the JSON reader of the project's own formats (sf.stages/1 lines, labeler
// configuration). nlohmann::json::parse keeps the last of two equal keys, rounds a float
// literal before anyone can ask whether it was an integer, and reports a number past the double
// range without saying where it was; the formats need all three answered (docs/formats.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sf::formats::detail {

/// Why a strict parse failed.
struct JsonProblem {
  enum Kind {
    none,
    syntax,              ///< not JSON (nlohmann's parse error at `byte`)
    number_range,        ///< a number past the double range (1e309) at `path`
    negative_underflow,  ///< a negative number too small for a double (-1e-400) at `path`
    duplicate_key,       ///< `key` twice in the object at `path`
    nul_byte,            ///< a NUL byte at `byte` (nlohmann's lexer would take it for the end of the text)
  };
  Kind kind = none;
  std::size_t byte = 0;  ///< 1-based byte of the failure (syntax)
  std::string path;      ///< where: `"d"[1]`, `"side"."sync_wait"[0]`; "" at the top level
  std::string token;     ///< the number as written (number_range, negative_underflow)
  std::string key;       ///< duplicate_key

  /// One clause naming where and what: `"d"[1] is 1e309, a number out of the range of a double`.
  /// Not for `syntax` (the caller knows how to word a syntax error for its format).
  std::string describe() const;
};

/// A key (or any text from a JSON document) as a message may quote it: in double quotes,
/// printable ASCII kept, every other byte as '?', at most 40 bytes then "...": one line, always.
std::string quoted_key(std::string_view k);

/// The first cap + 1 bytes of a small file (a config, a stage map), so the caller can refuse one
/// past its cap; `what` names it in errors ("cannot open config file").
std::string read_capped(const std::string& path, std::size_t cap, const char* what);

/// Parses JSON like nlohmann::json::parse, except that
///  - a number written as a float whose decimal value is an exact integer within 64 bits
///    (`1.0`, `1e3`, `-0.0`) is stored as that integer, so integer fields accept it and nothing
///    is rounded on the way; any other float stays a float;
///  - a key twice in one object, a number past the double range and a negative number that
///    underflows to zero (none of the formats has a negative non-integer field) are problems.
/// Reuse one parser for many lines: its bookkeeping keeps its capacity. A key twice is found
/// when inserting it into the object being built (one lookup, as the DOM parser makes).
class StrictJsonParser {
public:
  /// Returns false and fills problem() when text is not accepted.
  bool parse(std::string_view text, nlohmann::json& out);
  const JsonProblem& problem() const { return problem_; }

  // nlohmann SAX interface (json::sax_parse).
  using json = nlohmann::json;
  bool null();
  bool boolean(bool v);
  bool number_integer(json::number_integer_t v);
  bool number_unsigned(json::number_unsigned_t v);
  bool number_float(json::number_float_t v, const std::string& literal);
  bool string(std::string& v);
  bool binary(json::binary_t& v);
  bool start_object(std::size_t n);
  bool key(std::string& k);
  bool end_object();
  bool start_array(std::size_t n);
  bool end_array();
  bool parse_error(std::size_t position, const std::string& last_token, const nlohmann::detail::exception& ex);

private:
  struct Frame {
    json* value = nullptr;
    bool array = false;
    std::size_t index = 0;          // array: elements completed
    const std::string* key = nullptr;  // object: the key whose value is being read (in the object)
  };
  bool put(json&& v);
  void completed();
  std::string path() const;

  json* root_ = nullptr;
  json* slot_ = nullptr;  // where the next object value goes
  std::vector<Frame> frames_;
  std::size_t depth_ = 0;  // frames_ in use (frames_ keeps its capacity)
  JsonProblem problem_;
};

}  // namespace sf::formats::detail
