#include "sf/check/check.h"

#include <cstdio>

namespace sf::check {

std::string describe(std::string_view library, long code, std::string_view text, const char* call, const char* file,
                     int line) {
  std::string out;
  out.reserve(160);
  out += file;
  out += ':';
  out += std::to_string(line);
  out += ": ";
  out += call;
  out += " failed: ";
  out += library;
  out += " error ";
  out += text.empty() ? std::string_view("(no description)") : text;
  out += " (code ";
  out += std::to_string(code);
  out += ')';
  return out;
}

void fail(std::string_view library, long code, std::string_view text, const char* call, const char* file, int line) {
  throw CallError(library, code, describe(library, code, text, call, file, line));
}

void report(std::string_view library, long code, std::string_view text, const char* call, const char* file,
            int line) noexcept {
  try {
    std::fprintf(stderr, "sf-testbed: %s (ignored during clean-up)\n", describe(library, code, text, call, file, line).c_str());
  } catch (...) {
    std::fputs("sf-testbed: a library call failed during clean-up\n", stderr);
  }
}

}  // namespace sf::check
