// Private to formats/: why a file could not be opened, in words a user acts on.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <sys/stat.h>

namespace sf::formats::detail {

/// "does not exist", "is a directory", or the system's reason, for a path that failed to open
/// (errno as the failed open left it).
inline std::string open_error(const std::string& path) {
  const int err = errno;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "does not exist" : std::string("cannot be read: ") + std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "is a directory, not a file";
  return std::string("cannot be read: ") + std::strerror(err != 0 ? err : EACCES);
}

}  // namespace sf::formats::detail
