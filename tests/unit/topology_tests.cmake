# Topology probe unit tests (label cpu): sysfs fixtures -> IOMMU/ACS diagnosis and remedy text,
# machine-probe fixtures -> tpcomm-doctor report, the probe child killed at its time limit, the
# probe cache. Included once (from tests/unit/CMakeLists.txt or tools/CMakeLists.txt).
if(TARGET tpcomm_unit_topology)
  return()
endif()
tpcomm_add_test(tpcomm_unit_topology LABELS cpu
  LIBS tpcomm_core GTest::gtest_main
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/topology_sysfs_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/topology_child_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/topology_cache_test.cc)
target_include_directories(tpcomm_unit_topology PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
target_compile_definitions(tpcomm_unit_topology PRIVATE
  TPCOMM_SYSFS_FIXTURES="${CMAKE_CURRENT_LIST_DIR}/fixtures/sysfs")
if(TPCOMM_BUILD_TOOLS)  # tpcomm_doctor_report comes from tools/ (target names resolve late)
  tpcomm_add_test(tpcomm_unit_topology_doctor LABELS cpu
    LIBS tpcomm_doctor_report GTest::gtest_main
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/topology_doctor_test.cc)
  target_include_directories(tpcomm_unit_topology_doctor PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(tpcomm_unit_topology_doctor PRIVATE
    TPCOMM_DOCTOR_FIXTURES="${PROJECT_SOURCE_DIR}/tools/fixtures")
endif()

# The topology exchange's size (issue 21, item 11): probeTopology with many thread ranks.
tpcomm_add_test(tpcomm_unit_topology_exchange LABELS cpu
  LIBS tpcomm GTest::gtest_main
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/topology_exchange_test.cc)
target_include_directories(tpcomm_unit_topology_exchange PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
