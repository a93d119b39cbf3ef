# libtpcomm_nccl.so, the NCCL-API drop-in (docs/shim.md), included from the root CMakeLists.txt
# when TPCOMM_BUILD_SHIM is on.
#   - tpcomm is compiled in a second time, without TPCOMM_HAVE_NCCL: the shim never links NCCL
#     (it dlopens the engine's, src/shim/real_nccl.h), so loading it cannot pull a second
#     libnccl.so.2 into the engine, and tpcomm's own calls can never loop back into the shim.
#   - the CUDA runtime is linked statically: the engine keeps its own libcudart.
#   - src/shim/exports.map exports exactly the intercepted NCCL names (tests/shim checks it).
get_target_property(_tpcomm_shim_lib_sources tpcomm SOURCES)
list(FILTER _tpcomm_shim_lib_sources EXCLUDE REGEX "(mpi|nccl)_bootstrap\\.cc$")

# Everything but the exported entry points, as a static library the CPU tests link too.
add_library(tpcomm_shim_internal STATIC ${_tpcomm_shim_lib_sources}
  src/bootstrap/nccl_bootstrap.cc
  src/shim/real_nccl.cc
  src/shim/routing.cc
  src/shim/comm_table.cc
  src/shim/group.cc
  src/shim/setup.cc)
target_include_directories(tpcomm_shim_internal PUBLIC ${PROJECT_SOURCE_DIR}/src ${NCCL_INCLUDE_DIR})
target_compile_definitions(tpcomm_shim_internal PUBLIC TPCOMM_HAVE_CUDA=1)
target_link_libraries(tpcomm_shim_internal PUBLIC tpcomm_core CUDA::cudart_static Threads::Threads rt ${CMAKE_DL_LIBS})
# Whatever else libtpcomm links (e.g. the driver API), minus what the shim must not link.
get_target_property(_tpcomm_shim_lib_links tpcomm LINK_LIBRARIES)
foreach(_lib IN LISTS _tpcomm_shim_lib_links)
  if(NOT _lib MATCHES "^(CUDA::cudart|MPI::|tpcomm_core$)" AND NOT _lib STREQUAL "${NCCL_LIBRARY}")
    target_link_libraries(tpcomm_shim_internal PUBLIC ${_lib})
  endif()
endforeach()
target_compile_options(tpcomm_shim_internal PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
set_target_properties(tpcomm_shim_internal PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)

add_library(tpcomm_nccl SHARED src/shim/nccl_entry.cc)
target_link_libraries(tpcomm_nccl PRIVATE tpcomm_shim_internal)
target_link_options(tpcomm_nccl PRIVATE "LINKER:--version-script=${PROJECT_SOURCE_DIR}/src/shim/exports.map"
  "LINKER:--exclude-libs,ALL")
# Beside libtpcomm.so in the build tree, so the topology probe finds tools/tpcomm-doctor.
set_target_properties(tpcomm_nccl PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/src/shim/exports.map)

# libtpcomm_nccl_vllm.so (src/shim/vllm_front.cc): no code, DT_NEEDED libtpcomm_nccl.so then
# libnccl.so.2, for VLLM_NCCL_SO_PATH.
add_library(tpcomm_nccl_vllm SHARED src/shim/vllm_front.cc)
target_link_options(tpcomm_nccl_vllm PRIVATE "LINKER:--no-as-needed")
target_link_libraries(tpcomm_nccl_vllm PRIVATE tpcomm_nccl ${NCCL_LIBRARY})
set_target_properties(tpcomm_nccl_vllm PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}
  INSTALL_RPATH "$ORIGIN")
set_target_properties(tpcomm_nccl PROPERTIES INSTALL_RPATH "$ORIGIN")
tpcomm_install_rpath(tpcomm_nccl)
tpcomm_install_rpath(tpcomm_nccl_vllm)

install(TARGETS tpcomm_nccl tpcomm_nccl_vllm LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
