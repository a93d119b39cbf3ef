// vllm_front: libtpcomm_nccl_vllm.so, an empty library for VLLM_NCCL_SO_PATH. vLLM's pynccl
// dlopens that path and looks every NCCL function up in it with dlsym(handle, ...), which
// searches the library and then its dependencies in DT_NEEDED order. This library's are
// libtpcomm_nccl.so, then libnccl.so.2: the intercepted names resolve to the shim, all others
// (ncclGetVersion, ncclSend, ncclBroadcast, ...) to the real NCCL, which under PyTorch is the
// libnccl.so.2 torch already loaded (same soname, so the loader reuses it). It has no code.
