# Writes sf_build_info.h with the git commit (and a -dirty mark), only when it changed.
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  # A copy of the tree without .git (a GPU machine's working copy): the commit it was made from,
  # if the caller names it (scripts/gpu_check.sh passes GPU_CHECK_COMMIT on).
  if(NOT "$ENV{SF_BUILD_COMMIT}" STREQUAL "")
    set(commit "$ENV{SF_BUILD_COMMIT}")
  else()
    set(commit "unknown")
  endif()
else()
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT dirty STREQUAL "")
    set(commit "${commit}-dirty")
  endif()
endif()
set(content "#pragma once\n#define SF_GIT_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
