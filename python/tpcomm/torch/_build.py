"""Builds (first import, cached) and loads the C++ torch ops of csrc/tpcomm_torch.cpp against the
installed torch, then hands them the C API's function addresses."""
import ctypes
import os
import threading

_lock = threading.Lock()
_loaded = False
HERE = os.path.dirname(os.path.abspath(__file__))


def load_ops():
    """Compiles the ops once per (torch version, source) with torch.utils.cpp_extension (cached in
    TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions; concurrent ranks wait on torch's
    file lock) and registers them as torch.ops.tpcomm.*. TPCOMM_TORCH_VERBOSE=1 shows the build."""
    global _loaded
    with _lock:
        if _loaded:
            return
        import torch
        from torch.utils import cpp_extension

        from tpcomm._lib import lib

        with_cuda = bool(torch.version.cuda) and cpp_extension.CUDA_HOME is not None
        cflags = ["-O2"] + (["-DTPCOMM_TORCH_CUDA"] if with_cuda else [])
        # No .cu source, so the architecture list does not matter, but torch computes one from the
        # visible GPUs and fails on a machine without any: give it one for the build only.
        saved_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
        if with_cuda and not saved_arch:
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
        try:
            _build(cpp_extension, with_cuda, cflags)
        except Exception as e:  # no compiler, torch without its headers, ...
            raise ImportError("tpcomm.torch: building the torch ops against torch %s failed (a C++ compiler "
                              "and torch's headers are needed; TPCOMM_TORCH_VERBOSE=1 shows the build): %s"
                              % (torch.__version__, e)) from e
        finally:
            if with_cuda and not saved_arch:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        addr = lambda fn: ctypes.cast(fn, ctypes.c_void_p).value  # noqa: E731
        torch.ops.tpcomm._set_api([addr(lib.tpcommAllReduce), addr(lib.tpcommReduceScatter),
                                   addr(lib.tpcommAllGather), addr(lib.tpcommAllReduceResidualRmsNorm),
                                   addr(lib.tpcommGetLastError), addr(lib.tpcommAllReduceCompressed)])
        _loaded = True


def _build(cpp_extension, with_cuda, cflags):
    # The name carries the CUDA choice so that a CPU-only and a CUDA build never share a cache.
    cpp_extension.load(
        name="tpcomm_torch_ops" + ("_cuda" if with_cuda else "_cpu"),
        sources=[os.path.join(HERE, "csrc", "tpcomm_torch.cpp")],
        extra_cflags=cflags,
        with_cuda=with_cuda,
        is_python_module=False,
        verbose=os.environ.get("TPCOMM_TORCH_VERBOSE") == "1",
    )
