"""tpcomm: all-reduce for tensor-parallel LLM inference, from Python.

    import tpcomm
    uid = tpcomm.UniqueId.generate()                      # on one rank; send it to the others
    comm = tpcomm.Communicator(nranks, uid, rank, device)  # device -1: host rank (numpy arrays)
    comm.all_reduce(x)                                     # in place; x: numpy / CUDA array / DLPack

A ctypes layer over libtpcomm's C API (include/tpcomm/tpcomm_c.h); no torch dependency.
docs/python.md in the repository has the details.
"""
from tpcomm.communicator import Communicator, UniqueId, get_unique_id, version
from tpcomm.errors import (CommTimeoutError, CudaError, InternalError, InvalidArgumentError, NotSupportedError,
                           RemoteError, SystemCallError, TpcommError)

__version__ = "0.1.0"
__all__ = ["Communicator", "UniqueId", "get_unique_id", "version", "TpcommError", "InvalidArgumentError",
           "NotSupportedError", "CudaError", "SystemCallError", "CommTimeoutError", "RemoteError", "InternalError"]
