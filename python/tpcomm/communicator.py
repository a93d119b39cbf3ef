"""The Python face of tpcomm's C API: UniqueId and Communicator."""
import binascii
import ctypes

from tpcomm import _arrays
from tpcomm._lib import C_API_VERSION, CONFIG_MAGIC, UNIQUE_ID_BYTES, ConfigStruct, UniqueIdStruct, lib
from tpcomm.errors import InvalidArgumentError, error_for

_OPS = {"sum": 0, "max": 1, "min": 2}


def _check(result):
    if result != 0:
        raise error_for(result, lib.tpcommGetLastError(None).decode("utf-8", "replace"))


def version():
    """The library's version as a string ("0.1.0") and its C API version."""
    v, api = ctypes.c_int(), ctypes.c_int()
    _check(lib.tpcommGetVersion(ctypes.byref(v), ctypes.byref(api)))
    return "%d.%d.%d" % (v.value // 10000, v.value // 100 % 100, v.value % 100), api.value


class UniqueId:
    """A rendezvous id: address, port and a random secret (128 bytes). Make it on one rank, hand
    it to the others (pickle it, or send .hex() through a file or an environment variable)."""

    __slots__ = ("_raw",)

    def __init__(self, raw):
        raw = bytes(raw)
        if len(raw) != UNIQUE_ID_BYTES:
            raise InvalidArgumentError(1, "UniqueId: expected %d bytes, got %d" % (UNIQUE_ID_BYTES, len(raw)))
        self._raw = raw

    @classmethod
    def generate(cls, address=None):
        """A new id on this host: on `address` ("127.0.0.1", "::1") when given, else on the
        interface TPCOMM_SOCKET_IFNAME / TPCOMM_SOCKET_FAMILY choose."""
        s = UniqueIdStruct()
        if address is None:
            _check(lib.tpcommGetUniqueId(ctypes.byref(s)))
        else:
            _check(lib.tpcommGetUniqueIdForAddress(ctypes.byref(s), str(address).encode()))
        return cls(ctypes.string_at(ctypes.addressof(s), UNIQUE_ID_BYTES))

    @classmethod
    def from_hex(cls, text):
        try:
            return cls(binascii.unhexlify(text.strip()))
        except (binascii.Error, TypeError) as e:
            raise InvalidArgumentError(1, "UniqueId.from_hex: not a hex string of %d bytes: %s" % (UNIQUE_ID_BYTES, e))

    def hex(self):
        return binascii.hexlify(self._raw).decode()

    def __bytes__(self):
        return self._raw

    def __eq__(self, other):
        return isinstance(other, UniqueId) and other._raw == self._raw

    def __hash__(self):
        return hash(self._raw)

    def __getstate__(self):
        return self._raw

    def __setstate__(self, raw):
        self._raw = raw

    def __repr__(self):
        return "UniqueId(<%d bytes>)" % UNIQUE_ID_BYTES

    def _struct(self):
        s = UniqueIdStruct()
        ctypes.memmove(ctypes.addressof(s), self._raw, UNIQUE_ID_BYTES)
        return s


def get_unique_id(address=None):
    """UniqueId.generate(address)."""
    return UniqueId.generate(address)


def _stream_handle(stream, fn):
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream or None
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, CuPy, others
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h or None
    raise InvalidArgumentError(1, "%s: stream=%r: expected an int handle or an object with .cuda_stream/.ptr" % (fn, stream))


class Communicator:
    """One rank of a group. Collective: every rank of `nranks` constructs it with the same id.

    device: the CUDA device this rank drives, or -1 for a host rank (numpy arrays, synchronous).
    timeout_ms: bound on every wait for a peer (0: TPCOMM_TIMEOUT_MS, default 10000).
    algo: selection override, TPCOMM_ALGO's syntax. use_nccl: allow the ring_nccl path.
    compression: compressed all-reduce, "none", "fp8" or "int8" (None: TPCOMM_COMPRESSION;
    docs/compression.md); must be the same on every rank.
    Collectives take arrays (numpy, __cuda_array_interface__, DLPack) and return the output.
    Errors raise tpcomm.TpcommError subclasses carrying tpcomm's message.
    """

    def __init__(self, nranks, unique_id, rank, device=-1, timeout_ms=0, algo=None, use_nccl=True, compression=None):
        self._comm = None
        if not isinstance(unique_id, UniqueId):
            if isinstance(unique_id, (bytes, bytearray)):
                unique_id = UniqueId(unique_id)
            else:
                raise InvalidArgumentError(1, "Communicator: unique_id is a %s, expected tpcomm.UniqueId or bytes"
                                           % type(unique_id).__name__)
        for name, value in (("nranks", nranks), ("rank", rank), ("device", device), ("timeout_ms", timeout_ms)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgumentError(1, "Communicator: %s=%r: expected an int" % (name, value))
        cfg = ConfigStruct(ctypes.sizeof(ConfigStruct), CONFIG_MAGIC, C_API_VERSION, int(timeout_ms),
                           1 if use_nccl else 0, algo.encode() if algo else None,
                           compression.encode() if compression else None)
        handle = ctypes.c_void_p()
        _check(lib.tpcommCommInitRankConfig(ctypes.byref(handle), nranks, unique_id._struct(), rank, device,
                                            ctypes.byref(cfg)))
        self._comm = handle
        self.rank, self.size, self.device = rank, nranks, device

    # --- collectives ---------------------------------------------------------------------------
    def all_reduce(self, send, out=None, op="sum", stream=None, dtype=None, compression=None):
        """out[i] = op over ranks of send[i]. out None: in place (send is overwritten). Returns out.
        compression "none" / "fp8" / "int8" overrides the communicator's for this call (every rank
        the same; docs/compression.md); None keeps the communicator's."""
        fn = "all_reduce"
        s, o, code = self._pair(fn, send, out, dtype)
        if o.count != s.count:
            raise InvalidArgumentError(1, "%s: out has %d elements, send has %d" % (fn, o.count, s.count))
        if compression is None:
            _check(lib.tpcommAllReduce(s.ptr, o.ptr, s.count, code, self._op(op, fn), self._handle(fn),
                                       self._stream(stream, s, fn)))
        else:
            if not isinstance(compression, str):
                raise InvalidArgumentError(1, "%s: compression=%r: expected 'none', 'fp8', 'int8' or None"
                                           % (fn, compression))
            _check(lib.tpcommAllReduceCompressed(s.ptr, o.ptr, s.count, code, self._op(op, fn),
                                                 compression.encode(), self._handle(fn), self._stream(stream, s, fn)))
        return send if out is None else out

    def reduce_scatter(self, send, out, op="sum", stream=None, dtype=None):
        """out[i] = op over ranks of send[rank * len(out) + i]; send holds size * len(out)."""
        fn = "reduce_scatter"
        s, o, code = self._pair(fn, send, out, dtype, need_out=True)
        if s.count != o.count * self.size:
            raise InvalidArgumentError(1, "%s: send has %d elements, expected size (%d) x out's %d = %d"
                                       % (fn, s.count, self.size, o.count, o.count * self.size))
        _check(lib.tpcommReduceScatter(s.ptr, o.ptr, o.count, code, self._op(op, fn), self._handle(fn),
                                       self._stream(stream, s, fn)))
        return out

    def all_gather(self, send, out, stream=None, dtype=None):
        """out[r * len(send) + i] = send of rank r [i]; out holds size * len(send)."""
        fn = "all_gather"
        s, o, code = self._pair(fn, send, out, dtype, need_out=True)
        if o.count != s.count * self.size:
            raise InvalidArgumentError(1, "%s: out has %d elements, expected size (%d) x send's %d = %d"
                                       % (fn, o.count, self.size, s.count, s.count * self.size))
        _check(lib.tpcommAllGather(s.ptr, o.ptr, s.count, code, self._handle(fn), self._stream(stream, s, fn)))
        return out

    def all_reduce_residual_rmsnorm(self, x, residual, weight, eps=1e-6, out=None, stream=None, dtype=None):
        """x summed over ranks; residual += that; out = rmsnorm(residual) * weight, per row of
        `hidden` = len(weight) elements. out None: written into x. Returns out."""
        fn = "all_reduce_residual_rmsnorm"
        code = _arrays.parse_dtype(dtype, fn)
        bx = self._buf(x, fn, "x", code)
        br = self._buf(residual, fn, "residual", code, writable=True, like=("x", bx))
        bw = self._buf(weight, fn, "weight", code, like=("x", bx))
        bo = self._buf(out, fn, "out", code, writable=True, like=("x", bx)) if out is not None else bx
        if out is None and bx.readonly:
            raise InvalidArgumentError(1, "%s: x is read-only and out is None (in place)" % fn)
        hidden = bw.count
        if hidden == 0 or bx.count % hidden:
            raise InvalidArgumentError(1, "%s: x has %d elements, not a multiple of weight's %d (hidden)"
                                       % (fn, bx.count, hidden))
        for name, b in (("residual", br), ("out", bo)):
            if b.count != bx.count:
                raise InvalidArgumentError(1, "%s: %s has %d elements, x has %d" % (fn, name, b.count, bx.count))
        _check(lib.tpcommAllReduceResidualRmsNorm(bx.ptr, br.ptr, bw.ptr, float(eps), bo.ptr, bx.count // hidden,
                                                  hidden, bx.dtype, self._handle(fn), self._stream(stream, bx, fn)))
        return x if out is None else out

    # --- state ---------------------------------------------------------------------------------
    @property
    def last_algorithm(self):
        """Name of the algorithm that ran the last collective ("staged_host", "oneshot_p2p", ...)."""
        return lib.tpcommCommLastAlgorithm(self._handle("last_algorithm")).decode()

    def check_error(self):
        """Raises the asynchronous failure of an earlier collective (GPU ranks), if any."""
        err = ctypes.c_int()
        _check(lib.tpcommCommGetAsyncError(self._handle("check_error"), ctypes.byref(err)))
        _check(err.value)

    def destroy(self):
        """Tears the communicator down (collective; waits, bounded, for the peers)."""
        if self._comm is not None:
            h, self._comm = self._comm, None
            _check(lib.tpcommCommDestroy(h))

    def abort(self):
        """Frees the communicator without waiting for any peer (local): after a failure."""
        if self._comm is not None:
            h, self._comm = self._comm, None
            _check(lib.tpcommCommAbort(h))

    close = destroy

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.destroy()
        else:
            self.abort()

    def __del__(self):
        # Never collective from a finalizer: a forgotten communicator is aborted (local, bounded).
        if getattr(self, "_comm", None) is not None and lib is not None:
            try:
                self.abort()
            except Exception:
                pass

    def __repr__(self):
        state = "destroyed" if self._comm is None else "rank %d of %d, device %d" % (self.rank, self.size, self.device)
        return "tpcomm.Communicator(%s)" % state

    # --- helpers -------------------------------------------------------------------------------
    def _handle(self, fn):
        if self._comm is None:
            raise InvalidArgumentError(1, "%s: the communicator was destroyed or aborted" % fn)
        return self._comm

    def _op(self, op, fn):
        code = _OPS.get(str(op).lower().replace("redop.", "").replace("reduceop.", ""))
        if code is None:
            raise InvalidArgumentError(1, "%s: op=%r: expected 'sum', 'max' or 'min'" % (fn, op))
        return code

    def _buf(self, obj, fn, arg, dtype, writable=False, like=None):
        """Resolves `obj`; `like` = (name, Buffer) whose dtype it must share."""
        b = _arrays.resolve(obj, fn, arg, dtype)
        if like is not None and b.dtype != like[1].dtype:
            raise InvalidArgumentError(1, "%s: %s has dtype %s, %s has %s" % (
                fn, arg, _arrays.DTYPE_NAMES[b.dtype], like[0], _arrays.DTYPE_NAMES[like[1].dtype]))
        if writable and b.readonly:
            raise InvalidArgumentError(1, "%s: %s is read-only" % (fn, arg))
        if b.on_gpu and self.device < 0:
            raise InvalidArgumentError(1, "%s: %s is GPU memory but this communicator is a host rank (device -1)"
                                       % (fn, arg))
        if not b.on_gpu and self.device >= 0:
            raise InvalidArgumentError(1, "%s: %s is host memory but this communicator drives CUDA device %d"
                                       % (fn, arg, self.device))
        return b

    def _pair(self, fn, send, out, dtype, need_out=False):
        code = _arrays.parse_dtype(dtype, fn)
        if need_out and out is None:
            raise InvalidArgumentError(1, "%s: out is None (this collective needs an output array)" % fn)
        s = self._buf(send, fn, "send", code, writable=out is None)
        o = self._buf(out, fn, "out", code, writable=True, like=("send", s)) if out is not None else s
        return s, o, s.dtype

    def _stream(self, stream, buf, fn):
        if self.device < 0:
            if stream is not None:
                raise InvalidArgumentError(1, "%s: stream=%r given to a host rank (device -1): pass None" % (fn, stream))
            return None
        return _stream_handle(stream, fn)
