# check_figures.cmake: are the PNG files committed in docs/images/ what a tutorial draws now?
#
#   cmake -DPROGRAM=<tutorial> -DARGS=<its arguments, without --out> -DOUT=<scratch folder>
#         -DCOMMITTED=<docs/images/folder> -DREDRAW=<the command that redraws them> -P check_figures.cmake
#
# The tutorial draws into OUT (emptied first, so that nothing stale is compared). Every PNG
# in COMMITTED must be drawn, and be the same bytes; every PNG drawn must be committed. The
# tutorials draw with integer arithmetic and libpng's fixed settings, so a difference means
# the drawing code or the numbers changed and the committed pictures are out of date. The
# message names each file that differs and the command that redraws them.

cmake_minimum_required(VERSION 3.28)  # the project's; script mode starts with every policy unset

foreach(variable IN ITEMS PROGRAM OUT COMMITTED REDRAW)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "check_figures.cmake: -D${variable}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
execute_process(COMMAND "${PROGRAM}" ${ARGS} --out "${OUT}"
                RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT status EQUAL 0)
  list(JOIN ARGS " " shown)
  message(FATAL_ERROR "${PROGRAM} ${shown} --out ${OUT} exited with ${status}:\n${output}")
endif()

file(GLOB committed RELATIVE "${COMMITTED}" "${COMMITTED}/*.png")
file(GLOB drawn RELATIVE "${OUT}" "${OUT}/*.png")
if(NOT committed)
  message(FATAL_ERROR "no PNG files in ${COMMITTED}")
endif()

set(problems "")
foreach(png IN LISTS committed)
  if(NOT png IN_LIST drawn)
    string(APPEND problems "  ${COMMITTED}/${png}: the program no longer draws it\n")
    continue()
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${COMMITTED}/${png}" "${OUT}/${png}"
                  RESULT_VARIABLE differs)
  if(differs)
    file(SIZE "${COMMITTED}/${png}" committed_size)
    file(SIZE "${OUT}/${png}" drawn_size)
    string(APPEND problems "  ${COMMITTED}/${png} (${committed_size} bytes) differs from what the program "
                           "draws now, ${OUT}/${png} (${drawn_size} bytes)\n")
  endif()
endforeach()
foreach(png IN LISTS drawn)
  if(NOT png IN_LIST committed)
    string(APPEND problems "  ${OUT}/${png}: drawn, but not committed in ${COMMITTED}\n")
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "The committed pictures are not what ${PROGRAM} draws now:\n${problems}"
                      "Look at the new ones in ${OUT}; if they are right, redraw the committed ones with\n"
                      "  ${REDRAW}")
endif()
list(LENGTH committed count)
message(STATUS "${COMMITTED}: ${committed} (${count}) are what the program draws now, byte for byte")
