"""Turns an array argument into (pointer, element count, tpcomm dtype, device kind).

Accepted: numpy arrays and anything with __array_interface__ (host memory); anything with
__cuda_array_interface__ (CuPy, Numba, torch CUDA tensors but bf16); anything with __dlpack__
(torch tensors of every dtype, JAX, CuPy, numpy). Buffers must be C-contiguous.
"""
import ctypes

F32, F16, BF16 = 0, 1, 2
DTYPE_NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}
_BY_NAME = {"f32": F32, "float32": F32, "float": F32, "f16": F16, "float16": F16, "half": F16,
            "bf16": BF16, "bfloat16": BF16}
# typestr (numpy's array-interface codes) -> dtype; 2-byte integer or void arrays carry 16-bit
# floats only with an explicit dtype= (numpy has no bfloat16 of its own).
_TYPESTR = {"f4": F32, "f2": F16}
_RAW16 = {"u2", "i2", "V2"}


class Buffer:
    __slots__ = ("ptr", "count", "dtype", "on_gpu", "readonly", "keepalive", "stream")

    def __init__(self, ptr, count, dtype, on_gpu, readonly, keepalive, stream=None):
        self.ptr, self.count, self.dtype, self.on_gpu = ptr, count, dtype, on_gpu
        self.readonly, self.keepalive, self.stream = readonly, keepalive, stream


def parse_dtype(dtype, fn):
    """A dtype= argument ("bf16", "float16", numpy/torch dtype objects) -> tpcomm code."""
    if dtype is None:
        return None
    name = str(getattr(dtype, "name", dtype)).replace("torch.", "").lower()
    if name in _BY_NAME:
        return _BY_NAME[name]
    raise _invalid("%s: dtype=%r: expected one of float32, float16, bfloat16 (or f32, f16, bf16)" % (fn, dtype))


def _invalid(msg):
    from tpcomm.errors import InvalidArgumentError  # late: errors imports _lib, which loads the library
    return InvalidArgumentError(1, msg)


def _prod(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _check_contiguous(shape, strides, itemsize, fn, arg):
    if strides is None:
        return
    expect = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expect:
            raise _invalid("%s: %s is not C-contiguous (strides %s for shape %s)" % (fn, arg, tuple(strides), tuple(shape)))
        expect *= dim


def _from_typestr(typestr, obj, override, fn, arg):
    code = typestr[1:]
    natural = _TYPESTR.get(code)
    dtype_name = ""
    if natural is None:  # the dtype's name only here: reading it costs ~1 us per call
        dtype_name = str(getattr(getattr(obj, "dtype", None), "name", ""))
        if dtype_name == "bfloat16":  # ml_dtypes' numpy bfloat16 ('<V2')
            natural = BF16
    if override is not None:
        if natural is not None and natural != override:
            raise _invalid("%s: %s has dtype %s but dtype=%s was given" % (fn, arg, DTYPE_NAMES[natural], DTYPE_NAMES[override]))
        if natural is None and (code not in _RAW16 or override == F32):
            raise _invalid("%s: %s has element type '%s', which cannot hold %s" % (fn, arg, typestr, DTYPE_NAMES[override]))
        return override
    if natural is None:
        hint = " (pass dtype='bf16' or 'f16' for 16-bit floats stored as 2-byte integers)" if code in _RAW16 else ""
        raise _invalid("%s: %s has element type %s ('%s'); tpcomm supports float32, float16 and bfloat16%s"
                       % (fn, arg, dtype_name or typestr, typestr, hint))
    return natural


def _itemsize(typestr):
    return int(typestr[2:])


# --- DLPack ------------------------------------------------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_FLOAT, _DL_BFLOAT = 2, 4


def _from_dlpack(obj, override, fn, arg):
    capsule = obj.__dlpack__()
    t = _DLTensor.from_address(_capsule_get(capsule, b"dltensor"))  # DLManagedTensor starts with DLTensor
    shape = [t.shape[i] for i in range(t.ndim)]
    dt = t.dtype
    if dt.lanes != 1:
        raise _invalid("%s: %s has vector lanes %d" % (fn, arg, dt.lanes))
    natural = {(_DL_FLOAT, 32): F32, (_DL_FLOAT, 16): F16, (_DL_BFLOAT, 16): BF16}.get((dt.code, dt.bits))
    if natural is None:
        raise _invalid("%s: %s has element type %s; tpcomm supports float32, float16 and bfloat16"
                       % (fn, arg, getattr(obj, "dtype", "(DLPack code %d, %d bits)" % (dt.code, dt.bits))))
    if override is not None and override != natural:
        raise _invalid("%s: %s has dtype %s but dtype=%s was given" % (fn, arg, DTYPE_NAMES[natural], DTYPE_NAMES[override]))
    itemsize = dt.bits // 8
    if t.strides:
        _check_contiguous(shape, [t.strides[i] * itemsize for i in range(t.ndim)], itemsize, fn, arg)
    on_gpu = t.device.device_type in (_DL_CUDA, _DL_CUDA_MANAGED)
    if t.device.device_type not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
        raise _invalid("%s: %s lives on DLPack device type %d; tpcomm takes CPU or CUDA memory" % (fn, arg, t.device.device_type))
    ptr = (t.data or 0) + t.byte_offset
    return Buffer(ptr, _prod(shape), natural, on_gpu, False, (obj, capsule))


def resolve(obj, fn, arg, dtype=None):
    """The Buffer behind `obj` (argument `arg` of `fn`); raises InvalidArgumentError naming it."""
    if obj is None:
        raise _invalid("%s: %s is None" % (fn, arg))
    iface, on_gpu = getattr(obj, "__array_interface__", None), False
    if iface is None:
        try:
            iface, on_gpu = getattr(obj, "__cuda_array_interface__", None), True
        except Exception:  # e.g. torch bf16 tensors refuse it: DLPack below takes them
            iface = None
    if iface is not None:
        typestr, shape = iface["typestr"], iface["shape"]
        code = _from_typestr(typestr, obj, dtype, fn, arg)
        _check_contiguous(shape, iface.get("strides"), _itemsize(typestr), fn, arg)
        ptr, readonly = iface["data"]
        return Buffer(ptr or 0, _prod(shape), code, on_gpu, bool(readonly), obj, iface.get("stream"))
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, dtype, fn, arg)
    raise _invalid("%s: %s is a %s, not an array (expected a numpy array, or an object with "
                   "__cuda_array_interface__ or __dlpack__)" % (fn, arg, type(obj).__name__))
