# Writes sf_build_info.h with the git commit (and a -dirty mark), only when it changed.
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT "$ENV{SF_BUILD_COMMIT}" STREQUAL "")
  # A copy of the tree whose .git is absent or not the tree's own (a GPU machine's working copy):
  # the commit it was made from, named by the caller (scripts/gpu_check.sh, GPU_CHECK_COMMIT).
  set(commit "$ENV{SF_BUILD_COMMIT}")
elseif(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
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
