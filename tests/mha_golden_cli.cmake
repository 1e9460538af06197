# The mha-golden command line, end to end: run with
#   cmake -DMHA_GOLDEN=<tool> -DSOURCE_DIR=<repo> -DWORK_DIR=<scratch> -P mha_golden_cli.cmake
# 1) a good case passes with exit 0; 2) a case whose expected output file is cut short
# is a FAIL line, not a crash, with exit 1; 3) a path with no cases exits 1.
set(case ${SOURCE_DIR}/golden/cases/self_seqfirst_f32)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_tool expected_rc expected_text)
  execute_process(COMMAND ${MHA_GOLDEN} check ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expected_rc OR NOT out MATCHES "${expected_text}")
    message(FATAL_ERROR "mha-golden check ${ARGN}: exit ${rc} (expected ${expected_rc}), "
                        "output does not match '${expected_text}':\n${out}${err}")
  endif()
endfunction()

# 1) good
run_tool(0 "PASS self_seqfirst_f32 max_abs_err=.*\n1 passed, 0 failed\n" ${case})

# 2) attn_output.npy truncated by 4 bytes
file(COPY ${case} DESTINATION ${WORK_DIR})
file(REMOVE ${WORK_DIR}/self_seqfirst_f32/attn_output.npy)
file(WRITE ${WORK_DIR}/truncate.py "import sys\nb=open(sys.argv[1],'rb').read()\nopen(sys.argv[2],'wb').write(b[:-4])\n")
execute_process(COMMAND ${PYTHON} ${WORK_DIR}/truncate.py ${case}/attn_output.npy ${WORK_DIR}/self_seqfirst_f32/attn_output.npy
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "could not write the truncated copy")
endif()
run_tool(1 "FAIL self_seqfirst_f32 .*attn_output.npy: expected .* data bytes.*\n0 passed, 1 failed\n" ${WORK_DIR}/self_seqfirst_f32)

# 3) no cases
file(MAKE_DIRECTORY ${WORK_DIR}/empty)
run_tool(1 "FAIL path: no case folders.*\n0 passed, 1 failed\n" ${WORK_DIR}/empty)
