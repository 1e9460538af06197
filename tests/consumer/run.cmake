# The consumer test: install mha from the build tree MHA_BINARY_DIR into a prefix inside
# it, then configure, build and run tests/consumer against that prefix, with the same
# compiler and flags (a sanitizer build's library needs the sanitizer runtime).
#
#   cmake -DMHA_BINARY_DIR=... -DMHA_SOURCE_DIR=... -DMHA_CXX_COMPILER=... \
#         -DMHA_SCAN_DEPS=... -DMHA_BUILD_TYPE=... -DMHA_CXX_FLAGS=... \
#         -DMHA_EXE_LINKER_FLAGS=... -P run.cmake
set(work "${MHA_BINARY_DIR}/consumer-test")
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
# 2) configure the consumer with find_package(mha) searching only that prefix for mha
step("configuring tests/consumer" ${CMAKE_COMMAND} -S "${MHA_SOURCE_DIR}/tests/consumer" -B "${work}/build" -G Ninja
     "-DCMAKE_BUILD_TYPE=${MHA_BUILD_TYPE}" "-DCMAKE_CXX_COMPILER=${MHA_CXX_COMPILER}"
     "-DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${MHA_SCAN_DEPS}" "-DCMAKE_CXX_FLAGS=${MHA_CXX_FLAGS}"
     "-DCMAKE_EXE_LINKER_FLAGS=${MHA_EXE_LINKER_FLAGS}" "-DCMAKE_PREFIX_PATH=${prefix}")
# 3) build it: CMake compiles the installed interface units for the consumer
step("building tests/consumer" ${CMAKE_COMMAND} --build "${work}/build" -j2)
# 4) run it
step("running the consumer" "${work}/build/consumer")
