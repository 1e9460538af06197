# The host program test: the kernel OpenBLAS picks in a program without the library
# (PROBE), then the host program (HOST), which must still find it, and everything else
# it set, after using the library. cmake -DPROBE=... -DHOST=... -P run.cmake
execute_process(COMMAND ${PROBE} OUTPUT_VARIABLE kernel RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR kernel STREQUAL "")
  message(FATAL_ERROR "openblas_corename failed (exit ${rc})")
endif()
execute_process(COMMAND ${HOST} ${kernel} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the host program failed (exit ${rc})")
endif()
