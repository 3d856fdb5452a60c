# sf_add_module(NAME name HEADERS h... SOURCES src... [PUBLIC deps...] [PRIVATE deps...] [NO_INSTALL])
#
# One folder = one library = one target (`sf_<name>`, alias `sf::<name>`, exported as
# `sf::<name>`). Its public headers are reached as <sf/<name>/<header>> and nothing else is:
# each module stages symbolic links to its own public headers in a directory of its own in the
# build tree and exposes only that directory, so a target can include the headers of the modules
# it links (directly or through a PUBLIC dependency) and no other. Headers not listed stay
# private to the folder and are included by relative name ("detail.h").
#
# Installed, the headers go to <prefix>/include/sf/<name>/ and the target joins the sfTargets
# export set that sfConfig.cmake loads (NO_INSTALL: a module of the binary only, e.g. the
# experiment driver).
include(GNUInstallDirs)

function(sf_add_module)
  cmake_parse_arguments(arg "NO_INSTALL" "NAME" "HEADERS;SOURCES;PUBLIC;PRIVATE" ${ARGN})
  set(name ${arg_NAME})
  set(target sf_${name})
  add_library(${target} ${arg_SOURCES})
  add_library(sf::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON)

  set(stage ${PROJECT_BINARY_DIR}/include/${name})
  file(REMOVE_RECURSE ${stage})
  file(MAKE_DIRECTORY ${stage}/sf/${name})
  foreach(h IN LISTS arg_HEADERS)
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR}/${h} ${stage}/sf/${name}/${h} SYMBOLIC)
  endforeach()
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${stage}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} PUBLIC ${arg_PUBLIC} PRIVATE ${arg_PRIVATE} $<BUILD_INTERFACE:sf::warnings>)

  if(arg_NO_INSTALL)
    return()
  endif()
  install(TARGETS ${target} EXPORT sfTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES ${arg_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sf/${name})
endfunction()
