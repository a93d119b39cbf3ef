# cmake -P script behind the tpcomm_consumer_install test: install BUILD_DIR to a fresh prefix
# under WORK_DIR, then configure + build + run PROJECT_DIR against that prefix only. Any failing
# step fails the test with its output.
foreach(v BUILD_DIR PROJECT_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_consumer.cmake: -D${v}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: ${name} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "consumer test: ${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
if(NOT EXISTS ${prefix}/include/tpcomm/tpcomm.h)
  message(FATAL_ERROR "consumer test: install did not produce include/tpcomm/tpcomm.h")
endif()
set(cxx_arg)
if(CXX_COMPILER)
  set(cxx_arg -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
# The installed tools run from the prefix alone (install RUNPATH $ORIGIN/../lib), and the doctor
# finds its probe helper where the install put it (bin/).
if(EXISTS ${prefix}/bin/tpcomm-doctor)
  step("installed tpcomm-doctor --params" ${prefix}/bin/tpcomm-doctor --params)
  if(NOT step_output MATCHES "TPCOMM_TIMEOUT_MS")
    message(FATAL_ERROR "consumer test: the installed doctor did not print the params table")
  endif()
  step("installed tpcomm-doctor" ${CMAKE_COMMAND} -E env TPCOMM_TOPO_CACHE=0 XDG_CACHE_HOME=${WORK_DIR}/cache
       ${prefix}/bin/tpcomm-doctor)
  if(step_output MATCHES "no probe helper")
    message(FATAL_ERROR "consumer test: the installed doctor did not find its probe helper:\n${step_output}")
  endif()
endif()
step("configure" ${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${build} -G ${GENERATOR} ${cxx_arg}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_TYPE=Release)
step("build" ${CMAKE_COMMAND} --build ${build})
step("run" ${build}/tpcomm_consumer)
message(STATUS "consumer test output:\n${step_output}")
if(NOT step_output MATCHES "tpcomm_consumer: ok")
  message(FATAL_ERROR "consumer test: the consumer did not report ok")
endif()
