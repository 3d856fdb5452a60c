# One INTERFACE target carries the project's warning flags; every sf target links it.
add_library(sf_warnings INTERFACE)
add_library(sf::warnings ALIAS sf_warnings)
target_compile_options(sf_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
  # GCC 12 false positive on "literal" + std::to_string(...) at -O2 (GCC bug 105329).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>)
