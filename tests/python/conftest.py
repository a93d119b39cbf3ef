# torch first, where it is installed: libtpcomm from a CMake build links the shared CUDA runtime
# and NCCL, and whichever process-wide libcudart.so / libnccl.so.2 loads first is the one torch
# gets too (docs/python.md). Importing tpcomm first could make torch's import fail, and
# pytest.importorskip("torch") would then quietly skip the torch tests.
try:
    import torch  # noqa: F401
except ImportError:
    pass
