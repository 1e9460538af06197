# tests/labs/starter_warnings.cmake: each lab's starter and runner compiled as a student's file
# is compiled (the compiler, flags and folders of <build>/labs/lab-kit.txt, which the
# gradebook's sandbox uses too), with -Werror: a student's first build of a lab prints no
# warning of the project's own code, which they would take for their own.
#
#   cmake -DKIT=<build>/labs/lab-kit.txt -DSOURCE_DIR=<root> -P tests/labs/starter_warnings.cmake
file(STRINGS "${KIT}" lines)
set(includes "")
foreach(line IN LISTS lines)
  if(line MATCHES "^compiler (.*)$")
    set(compiler "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^compile (.*)$")
    separate_arguments(flags UNIX_COMMAND "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^include (.*)$")
    list(APPEND includes "-I${CMAKE_MATCH_1}")
  endif()
endforeach()

file(GLOB starters "${SOURCE_DIR}/labs/[0-9][0-9]-*/*.cpp")
file(GLOB runners "${SOURCE_DIR}/labs/runner/*.cpp")
set(clean 0)
foreach(file IN LISTS starters runners)
  execute_process(COMMAND ${compiler} ${flags} ${includes} -Werror -fsyntax-only ${file}
                  RESULT_VARIABLE status ERROR_VARIABLE errors OUTPUT_VARIABLE errors)
  if(NOT status EQUAL 0)
    message(SEND_ERROR "${file} warns or fails under the labs' flags:\n${errors}")
  else()
    math(EXPR clean "${clean} + 1")
  endif()
endforeach()
list(LENGTH starters s)
list(LENGTH runners r)
math(EXPR total "${s} + ${r}")
if(s EQUAL 0 OR r EQUAL 0)
  message(SEND_ERROR "no starter or no runner found under ${SOURCE_DIR}/labs")
endif()
message("${clean} of ${total} files (${s} starters, ${r} runner files) compile without a warning")
