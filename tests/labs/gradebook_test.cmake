# The gradebook of a class: mha-grade over tests/labs/submissions/, where ada's lab 01 is
# right, bob's has Q and K swapped, cy's does not compile, dee's loops and eve's crashes,
# plus fay, who handed in .npy answers (PyTorch's own for cross_seqfirst_f32, so right).
# Each student must have a row with the right verdict, and every one must be there: one
# broken submission never stops the others.
#   cmake -DGRADER=... -DBUILD_DIR=... -DSOURCE_DIR=... -DOUT=... -P gradebook_test.cmake
file(REMOVE_RECURSE "${OUT}")
file(COPY "${SOURCE_DIR}/tests/labs/submissions/" DESTINATION "${OUT}/submissions")
set(fay "${OUT}/submissions/fay/npy/cross_seqfirst_f32")
file(MAKE_DIRECTORY "${fay}")
foreach(name attn_output attn_output_weights)
  file(COPY "${SOURCE_DIR}/golden/cases/cross_seqfirst_f32/${name}.npy" DESTINATION "${fay}")
endforeach()

execute_process(COMMAND "${GRADER}" gradebook "${OUT}/submissions" --out "${OUT}/book" --build-dir "${BUILD_DIR}"
                        --run-timeout 10
                RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
message("${output}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "mha-grade gradebook exited with ${status}")
endif()
file(READ "${OUT}/book/gradebook.csv" csv)
set(expected
  "ada,01,split_packed,86,86,pass,,5.00,5.00\n"
  "ada,01,pack,86,86,pass,,5.00,5.00\n"
  "bob,01,split_packed,0,86,fail,qk_swapped,0.00,5.00\n"
  "bob,01,pack,0,0,not_implemented,,0.00,5.00\n"
  "cy,01,-,0,0,build failed,does not compile: [^\n]*error"
  "dee,01,-,0,0,timed out,no answer within 10 s,0.00,10.00\n"
  "eve,01,-,0,0,crashed,ended by signal 11,0.00,10.00\n"
  "fay,npy cross_seqfirst_f32,forward,1,1,pass,,0.00,0.00\n")
foreach(line IN LISTS expected)
  if(NOT csv MATCHES "${line}")
    message(FATAL_ERROR "gradebook.csv has no line matching '${line}':\n${csv}")
  endif()
endforeach()
# lms.csv: a row per student, each lab's points and the total (ada's lab 01: 10 of 10).
file(READ "${OUT}/book/lms.csv" lms)
foreach(line IN ITEMS "student,lab01,lab02,lab03,lab04,lab05,lab06,lab07,npy_cases_right,total\n"
                      "ada,10.00,0.00,0.00,0.00,0.00,0.00,0.00,0,10.00\n"
                      "bob,0.00,0.00,0.00,0.00,0.00,0.00,0.00,0,0.00\n"
                      "fay,0.00,0.00,0.00,0.00,0.00,0.00,0.00,1,0.00\n")
  if(NOT lms MATCHES "${line}")
    message(FATAL_ERROR "lms.csv has no line matching '${line}':\n${lms}")
  endif()
endforeach()
message("gradebook: every student listed with the right verdict: OK")
