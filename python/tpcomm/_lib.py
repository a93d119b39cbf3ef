"""Loads libtpcomm and declares the C API's prototypes (include/tpcomm/tpcomm_c.h) for ctypes.

The library is the one installed inside this package (site-packages/tpcomm/lib/libtpcomm.so).
"""
import ctypes
import os

_HERE = os.path.dirname(os.path.abspath(__file__))

UNIQUE_ID_BYTES = 128
CONFIG_MAGIC = 0x7C0C0F19
C_API_VERSION = 3


class UniqueIdStruct(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class ConfigStruct(ctypes.Structure):
    """tpcommConfig_t; the library reads only the fields `size` covers whole."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("timeoutMs", ctypes.c_int),
        ("useNccl", ctypes.c_int),
        ("algo", ctypes.c_char_p),
        ("compression", ctypes.c_char_p),  # API version 2
    ]


def _find_library():
    candidates = [
        os.path.join(_HERE, "lib", "libtpcomm.so"),
        os.path.join(_HERE, "lib64", "libtpcomm.so"),
    ]
    for path in candidates:
        if os.path.exists(path):
            return path
    raise ImportError(
        "tpcomm: libtpcomm.so not found in %s (looked for %s); reinstall the package with "
        "`pip install .` from the tpcomm repository" % (_HERE, ", ".join(candidates))
    )


def _declare(lib):
    c_int, c_size_t, c_void_p, c_char_p, c_float = (
        ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_float)
    P = ctypes.POINTER
    protos = {
        "tpcommGetVersion": (c_int, [P(c_int), P(c_int)]),
        "tpcommGetUniqueId": (c_int, [P(UniqueIdStruct)]),
        "tpcommGetUniqueIdForAddress": (c_int, [P(UniqueIdStruct), c_char_p]),
        "tpcommCommInitRankConfig": (c_int, [P(c_void_p), c_int, UniqueIdStruct, c_int, c_int, P(ConfigStruct)]),
        "tpcommAllReduce": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p]),
        "tpcommAllReduceCompressed": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_char_p, c_void_p, c_void_p]),
        "tpcommAllReduceResidualRmsNorm": (
            c_int, [c_void_p, c_void_p, c_void_p, c_float, c_void_p, c_size_t, c_size_t, c_int, c_void_p, c_void_p]),
        "tpcommReduceScatter": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p]),
        "tpcommAllGather": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p]),
        "tpcommCommLastAlgorithm": (c_char_p, [c_void_p]),
        "tpcommCommUserRank": (c_int, [c_void_p, P(c_int)]),
        "tpcommCommCount": (c_int, [c_void_p, P(c_int)]),
        "tpcommCommDevice": (c_int, [c_void_p, P(c_int)]),
        "tpcommCommGetAsyncError": (c_int, [c_void_p, P(c_int)]),
        "tpcommCommDestroy": (c_int, [c_void_p]),
        "tpcommCommAbort": (c_int, [c_void_p]),
        "tpcommGetErrorString": (c_char_p, [c_int]),
        "tpcommGetLastError": (c_char_p, [c_void_p]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = _declare(ctypes.CDLL(_find_library()))
