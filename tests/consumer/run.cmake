# The consumer test: install mha from the build tree MHA_BINARY_DIR into a prefix inside
# it, then configure, build and run tests/consumer against that prefix, with the same
# compiler and flags (a sanitizer build's library needs the sanitizer runtime).
#
#   cmake -DMHA_BINARY_DIR=... -DMHA_SOURCE_DIR=... -DMHA_CXX_COMPILER=... \
#         -DMHA_SCAN_DEPS=... -DMHA_BUILD_TYPE=... -DMHA_CXX_FLAGS=... \
#         -DMHA_EXE_LINKER_FLAGS=... -DMHA_CXX_EXTENSIONS=DEFAULT|OFF \
#         -DMHA_CONSUMER_BUILD=ON|OFF -P run.cmake
#
# MHA_CXX_EXTENSIONS is the consumer's language: DEFAULT leaves CMAKE_CXX_EXTENSIONS unset,
# as most projects do (gnu++20), OFF sets it (c++20). MHA_CONSUMER_BUILD OFF stops after
# the checks of the consumer's compile lines (steps 1-3), before the build and the run.
cmake_minimum_required(VERSION 3.28)  # this script's policies, e.g. if(... IN_LIST ...)

if(MHA_CXX_EXTENSIONS STREQUAL "DEFAULT")
  set(work "${MHA_BINARY_DIR}/consumer-test-default")
  set(extensions_option "")
elseif(MHA_CXX_EXTENSIONS STREQUAL "OFF")
  set(work "${MHA_BINARY_DIR}/consumer-test-extensions-off")
  set(extensions_option "-DCMAKE_CXX_EXTENSIONS=OFF")
else()
  message(FATAL_ERROR "consumer test: MHA_CXX_EXTENSIONS must be DEFAULT or OFF, not '${MHA_CXX_EXTENSIONS}'")
endif()
if(NOT MHA_CONSUMER_BUILD)
  string(APPEND work "-lines")  # its own tree: the tests may run at once (ctest -j)
endif()
set(prefix "${work}/prefix")
file(REMOVE_RECURSE "${work}")

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: ${what} failed (${rc})")
  endif()
endfunction()

# 1) install the library, its module interface units and the package config
step("cmake --install" ${CMAKE_COMMAND} --install "${MHA_BINARY_DIR}" --prefix "${prefix}")
# The exported target's include directories must all exist in the installed tree (a path
# from the build machine written under the prefix would leave a broken -I flag).
file(GLOB target_files "${prefix}/lib*/cmake/mha/mhaTargets*.cmake")
foreach(target_file IN LISTS target_files)
  file(STRINGS "${target_file}" include_lines REGEX "INTERFACE_INCLUDE_DIRECTORIES|INCLUDE_DIRECTORIES")
  foreach(line IN LISTS include_lines)
    string(REGEX MATCHALL "\\$\\{_IMPORT_PREFIX\\}[^;\"]*" dirs "${line}")
    foreach(dir IN LISTS dirs)
      string(REPLACE "\${_IMPORT_PREFIX}" "${prefix}" path "${dir}")
      if(NOT IS_DIRECTORY "${path}")
        message(FATAL_ERROR "consumer test: ${target_file} exports the include directory ${dir}, which does not exist")
      endif()
    endforeach()
  endforeach()
endforeach()
# Every quoted #include of an installed unit or header must be installed too, beside the
# file or in include/mha (the include path): else only a build of the consumer would fail.
file(GLOB_RECURSE installed_sources "${prefix}/include/mha/*.cppm" "${prefix}/include/mha/*.hpp")
if(NOT installed_sources)
  message(FATAL_ERROR "consumer test: no module unit installed under ${prefix}/include/mha")
endif()
foreach(source IN LISTS installed_sources)
  file(STRINGS "${source}" include_lines REGEX "^#include \"")
  get_filename_component(source_dir "${source}" DIRECTORY)
  foreach(line IN LISTS include_lines)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*$" "\\1" header "${line}")
    if(NOT EXISTS "${source_dir}/${header}" AND NOT EXISTS "${prefix}/include/mha/${header}")
      message(FATAL_ERROR "consumer test: ${source} includes \"${header}\", which is not installed "
                          "(expected it in ${source_dir} or ${prefix}/include/mha)")
    endif()
  endforeach()
endforeach()
# 2) configure the consumer with find_package(mha) searching only that prefix for mha
step("configuring tests/consumer" ${CMAKE_COMMAND} -S "${MHA_SOURCE_DIR}/tests/consumer" -B "${work}/build" -G Ninja
     "-DCMAKE_BUILD_TYPE=${MHA_BUILD_TYPE}" "-DCMAKE_CXX_COMPILER=${MHA_CXX_COMPILER}"
     "-DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${MHA_SCAN_DEPS}" "-DCMAKE_CXX_FLAGS=${MHA_CXX_FLAGS}"
     "-DCMAKE_EXE_LINKER_FLAGS=${MHA_EXE_LINKER_FLAGS}" "-DCMAKE_PREFIX_PATH=${prefix}" ${extensions_option})
# 3) read the consumer's compile lines (build.ninja: compile_commands.json leaves out the
#    interface units that CMake compiles for mha::mha) and check two things.
#    - mha's own warning options stay in mha's build. The consumer asks for no warnings, so
#      any -W option that is not in its CMAKE_CXX_FLAGS came from the package.
#    - The interface units are compiled as the same language as the source that imports
#      them, the one the consumer asked for; clang loads a module into no other.
separate_arguments(consumer_flags UNIX_COMMAND "${MHA_CXX_FLAGS}")
file(STRINGS "${work}/build/build.ninja" ninja_lines)
set(compiling OFF)
set(module_flags "")
set(source_flags "")
foreach(line IN LISTS ninja_lines)
  if(line MATCHES "^build ")
    # a compile step (interface unit or source), not a scan or a link
    if(line MATCHES ": CXX_COMPILER__")
      set(compiling ON)
    else()
      set(compiling OFF)
    endif()
  elseif(compiling AND line MATCHES "^  FLAGS = (.*)$")
    set(flags "${CMAKE_MATCH_1}")
    separate_arguments(options UNIX_COMMAND "${flags}")
    foreach(option IN LISTS options)
      if(option MATCHES "^-W" AND NOT option IN_LIST consumer_flags)
        message(FATAL_ERROR "consumer test: the package adds ${option} to a consumer's compile line: ${flags}")
      endif()
    endforeach()
    if(flags MATCHES " --precompile")
      string(REPLACE " --precompile" "" flags "${flags}")
      list(APPEND module_flags "${flags}")
    else()
      list(APPEND source_flags "${flags}")
    endif()
  endif()
endforeach()
list(REMOVE_DUPLICATES module_flags)
list(REMOVE_DUPLICATES source_flags)
if(NOT module_flags OR NOT source_flags)
  message(FATAL_ERROR "consumer test: build.ninja compiles no module interface unit, or no source of the consumer")
endif()
if(NOT module_flags STREQUAL source_flags)
  message(FATAL_ERROR "consumer test: the interface units are compiled with '${module_flags}', "
                      "the consumer's source with '${source_flags}'")
endif()
# The compiler goes by the last -std= on the line (the driver passes -Xclang options after
# its own).
string(REGEX MATCHALL "-std=[^ ]+" standards "${source_flags}")
list(POP_BACK standards language)
if(MHA_CXX_EXTENSIONS STREQUAL "DEFAULT")
  set(expected "-std=gnu++20")  # CMake's default
else()
  set(expected "-std=c++20")
endif()
if(NOT language STREQUAL expected)
  message(FATAL_ERROR "consumer test: with CMAKE_CXX_EXTENSIONS ${MHA_CXX_EXTENSIONS} the consumer "
                      "should be compiled as ${expected}, not as ${language}: ${source_flags}")
endif()
message(STATUS "consumer test: the interface units and the consumer compiled with '${source_flags}'")
if(NOT MHA_CONSUMER_BUILD)
  message(STATUS "consumer test: the build and the run are left out (MHA_CONSUMER_BUILD OFF)")
  return()
endif()
# 4) build it: CMake compiles the installed interface units for the consumer
step("building tests/consumer" ${CMAKE_COMMAND} --build "${work}/build" -j2)
# 5) run it
step("running the consumer" "${work}/build/consumer")
