# The C API (include/tpcomm/tpcomm_c.h) and the socket bootstrap it uses
# (include/tpcomm/socket_bootstrap.h), compiled into libtpcomm. Included from the top-level
# CMakeLists.txt after the tpcomm target exists.
target_sources(tpcomm PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tpcomm_c.cc
  ${PROJECT_SOURCE_DIR}/src/bootstrap/socket_bootstrap.cc
  ${PROJECT_SOURCE_DIR}/src/bootstrap/socket_rendezvous.cc
  ${PROJECT_SOURCE_DIR}/src/bootstrap/socket_io.cc
  ${PROJECT_SOURCE_DIR}/src/bootstrap/hmac_sha256.cc)

# `pip install .` (scikit-build-core sets SKBUILD): the Python package loads libtpcomm.so by
# that name from its own folder, and a wheel cannot hold the .so.0 / .so.0.1.0 symlinks (they
# would become copies), so the library there is unversioned.
# The CUDA runtime is linked statically there (as NCCL and most CUDA wheels do): a shared
# libcudart.so.13 loaded by `import tpcomm` would be the one torch then gets too (same soname),
# older than the one torch was built against (seen: tpcomm before torch broke torch's import).
if(SKBUILD)
  set_property(TARGET tpcomm PROPERTY VERSION)  # unset
  set_property(TARGET tpcomm PROPERTY SOVERSION)
  set_property(TARGET tpcomm PROPERTY INSTALL_RPATH "$ORIGIN")
  if(TPCOMM_HAVE_CUDA)
    get_target_property(_tpcomm_libs tpcomm LINK_LIBRARIES)
    list(TRANSFORM _tpcomm_libs REPLACE "^CUDA::cudart$" "CUDA::cudart_static")
    set_property(TARGET tpcomm PROPERTY LINK_LIBRARIES "${_tpcomm_libs}")
  endif()
endif()
