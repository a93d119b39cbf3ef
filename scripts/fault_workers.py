"""What a worker of scripts/fault_campaign.py does for each kind of attack (scripts/fault_attacks.py),
through libtpcomm's C API with ctypes: run_attack(lib, attack) -> (status, message). A status that
is not a C status (99) means the attack's own check failed; the message says why."""
import ctypes
import random
import socket
import struct
import threading
import time

from fault_attacks import INVALID, OK, TOP

c_int, c_size_t, c_void_p, c_char_p, c_float = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_float
WRONG = 99


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def _declare(lib):
    P = ctypes.POINTER
    protos = {
        "tpcommGetUniqueIdForAddress": (c_int, [P(UniqueId), c_char_p]),
        "tpcommCommInitRankConfig": (c_int, [P(c_void_p), c_int, UniqueId, c_int, c_int, c_void_p]),
        "tpcommAllReduce": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p]),
        "tpcommAllReduceCompressed": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_char_p, c_void_p, c_void_p]),
        "tpcommAllReduceResidualRmsNorm": (
            c_int, [c_void_p, c_void_p, c_void_p, c_float, c_void_p, c_size_t, c_size_t, c_int, c_void_p, c_void_p]),
        "tpcommReduceScatter": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p]),
        "tpcommAllGather": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p]),
        "tpcommCommDestroy": (c_int, [c_void_p]),
        "tpcommCommAbort": (c_int, [c_void_p]),
        "tpcommGetLastError": (c_char_p, [c_void_p]),
    }
    for name, (res, args) in protos.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def id_bytes(uid):
    """All 128 bytes (ctypes' .internal stops at the first zero byte)."""
    return ctypes.string_at(ctypes.addressof(uid), 128)


def last_error(lib):
    return (lib.tpcommGetLastError(None) or b"").decode(errors="replace")


def new_id(lib, address=b"127.0.0.1"):
    uid = UniqueId()
    if lib.tpcommGetUniqueIdForAddress(ctypes.byref(uid), address) != OK:
        raise RuntimeError("no unique id: " + last_error(lib))
    return uid


def config(timeout_ms=0, algo=None, size=None, fill=None, magic=0x7C0C0F19, compression=None):
    """A tpcommConfig_t image (40 bytes, padded to 64): fields a short `size` cuts keep `fill`."""
    keep = []  # the strings the pointers point at
    buf = bytearray([fill if fill is not None else 0] * 64)
    fields = [(8, "I", magic), (12, "I", 3), (16, "i", timeout_ms), (20, "i", 0)]
    ptrs = [(24, algo), (32, compression)]
    size = 40 if size is None else size
    struct.pack_into("Q", buf, 0, size & 0xFFFFFFFFFFFFFFFF)
    for off, fmt, val in fields:
        if fill is None or off + 4 <= size:
            struct.pack_into(fmt, buf, off, val)
    for off, text in ptrs:
        if fill is None or off + 8 <= size:
            p = 0
            if text is not None:
                s = ctypes.create_string_buffer(text.encode("utf-8", "surrogateescape"))
                keep.append(s)
                p = ctypes.addressof(s)
            struct.pack_into("Q", buf, off, p)
    cbuf = ctypes.create_string_buffer(bytes(buf), 64)
    keep.append(cbuf)
    return cbuf, keep


def init(lib, uid, nranks, rank, cfg=None, device=-1):
    comm = c_void_p()
    code = lib.tpcommCommInitRankConfig(ctypes.byref(comm), nranks, uid, rank, device, cfg)
    return code, comm, last_error(lib)


def floats(n, value=0.0):
    return (ctypes.c_float * n)(*([value] * n))


# --- kinds ------------------------------------------------------------------------------------
def one_rank(lib):
    """A one-rank host communicator for the argument attacks (the refusals come before any peer)."""
    cfg, keep = config(timeout_ms=2000)
    code, comm, msg = init(lib, new_id(lib), 1, 0, cfg)
    if code != OK:
        raise RuntimeError("setup: " + msg)
    return comm


def k_call(lib, a):
    comm = one_rank(lib)
    bufs = [floats(1 << 18) for _ in range(4)]
    addr = {"buf": ctypes.addressof(bufs[0]), "buf2": ctypes.addressof(bufs[1])}
    addr["recv+4"], addr["send+4"] = addr["buf2"] + 4, addr["buf"] + 4

    def val(name, v):
        if name in ("send", "recv"):
            return {"null": None, "top": TOP}.get(v, addr.get(v))
        if name == "comm":
            return None if v == "null" else comm
        if name == "stream":
            return v or None
        if name == "compression":
            return v.encode()
        return v

    vals = a["values"]
    args = [val(p, vals[p]) for p in a["order"]]
    r = getattr(lib, a["entry"])(*args)
    msg = last_error(lib)
    lib.tpcommCommDestroy(comm)
    return r, msg


def k_norm(lib, a):
    comm = one_rank(lib)
    bufs = {k: floats(1 << 16) for k in ("buf", "buf2", "buf3", "buf4")}
    addr = {k: ctypes.addressof(v) for k, v in bufs.items()}

    def p(v, name):
        if v == "null":
            return None
        if v == "top":
            return TOP
        if v == "in":
            return addr[a["in_"]]
        return addr[v] if isinstance(v, str) else v

    r = lib.tpcommAllReduceResidualRmsNorm(p(a["in_"], "in"), p(a["residual"], "residual"), p(a["weight"], "weight"),
                                           a["eps"], p(a["out"], "out"), a["rows"], a["hidden"], a["dtype"],
                                           None if a["comm"] == "null" else comm, None)
    msg = last_error(lib)
    lib.tpcommCommDestroy(comm)
    return r, msg


def k_init(lib, a):
    uid = new_id(lib)
    cfg, keep = config(timeout_ms=a.get("timeoutMs", 2000), algo=a.get("algo"), size=a.get("size"), fill=a.get("fill"),
                       magic=a.get("magic", 0x7C0C0F19), compression=a.get("compression"))
    code, comm, msg = init(lib, uid, a.get("nranks", 1), a.get("rank", 0), cfg, a.get("device", -1))
    if code == OK:
        x = floats(4, 1.0)
        r = lib.tpcommAllReduce(x, x, 4, 0, 0, comm, None)
        lib.tpcommCommDestroy(comm)
        if r != OK or x[0] != 1.0:
            return WRONG, "a one-rank all-reduce after init: status %d, %r" % (r, x[0])
    return code, msg


def k_id(lib, a):
    if "address" in a:
        uid = UniqueId()
        addr = None if a["address"] is None else a["address"].encode()
        return lib.tpcommGetUniqueIdForAddress(ctypes.byref(uid), addr), last_error(lib)
    if "random" in a:
        raw = bytes(random.Random(a["random"]).getrandbits(8) for _ in range(128))
    else:
        raw = bytearray(id_bytes(new_id(lib)))
        raw[a["byte"]] = (raw[a["byte"]] ^ 0x5A) if a["value"] < 0 else a["value"]
        raw = bytes(raw)
    uid = UniqueId()
    ctypes.memmove(ctypes.byref(uid), raw, 128)
    cfg, keep = config(timeout_ms=300)
    code, comm, msg = init(lib, uid, 2, 1, cfg)
    if code == OK:
        lib.tpcommCommDestroy(comm)
    return code, msg


def group(lib, n, body, timeout_ms=1500, present=None, algo=None):
    """n ranks as threads: body(rank, comm) for each rank that comes (present), after init."""
    uid = new_id(lib)
    out = [None] * n

    def one(r):
        cfg, keep = config(timeout_ms=timeout_ms, algo=algo)
        code, comm, msg = init(lib, uid, n, r, cfg)
        if code != OK:
            out[r] = (code, msg)
            return
        out[r] = body(r, comm)
    ranks = list(range(n)) if present is None else present
    ts = [threading.Thread(target=one, args=(r,)) for r in ranks]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return [out[r] for r in ranks]


def worst(results, ok):
    for code, msg in results:
        if code not in ok:
            return code, msg
    return results[0][0], " | ".join(m for _, m in results)


def k_ranks(lib, a):
    n, sc = a["n"], a["scenario"]
    if sc == "missing_at_init":
        return worst(group(lib, n, lambda r, c: (OK, ""), present=range(n - 1)), [5])
    if sc == "skip":
        done = threading.Event()

        def body(r, comm):
            if r == n - 1:
                done.wait(10)
                lib.tpcommCommAbort(comm)
                return (5, "skipper")
            x = floats(64 * n, 1.0)
            y = floats(64 * n)
            f = {"allreduce": lambda: lib.tpcommAllReduce(x, y, 64, 0, 0, comm, None),
                 "reducescatter": lambda: lib.tpcommReduceScatter(x, y, 64, 0, 0, comm, None),
                 "allgather": lambda: lib.tpcommAllGather(x, y, 64, 0, comm, None)}[a["coll"]]
            rr = f()
            m = last_error(lib)
            lib.tpcommCommAbort(comm)
            if r == 0:
                done.set()
            return (rr, m)
        res = group(lib, n, body, timeout_ms=1000)
        return worst(res[:-1], [5, 6])
    if sc == "mismatch":
        w = a["what"]

        def body(r, comm):
            x, y = floats(256, 1.0), floats(512)
            cnt = 64 + (r if w == "count" else 0)
            if w == "collective" and r == 1:
                rr = lib.tpcommAllGather(x, y, cnt, 0, comm, None)
            else:
                rr = lib.tpcommAllReduce(x, y, cnt, r if w == "dtype" else 0, r if w == "op" else 0, comm, None)
            m = last_error(lib)
            lib.tpcommCommDestroy(comm)
            return (rr, m)
        return worst(group(lib, 2, body, timeout_ms=2000, algo="staged_host"), [INVALID])
    if sc == "two_callers":
        refused = threading.Event()

        def body(r, comm):
            if r == 1:
                refused.wait(2)
                x = floats(64, 1.0)
                rr = lib.tpcommAllReduce(x, x, 64, 0, 0, comm, None)
                lib.tpcommCommDestroy(comm)
                return (rr, "")
            got = [None, None]

            def call(k):
                x = floats(64, 1.0)
                got[k] = (lib.tpcommAllReduce(x, x, 64, 0, 0, comm, None), last_error(lib))
                if got[k][0] == INVALID:
                    refused.set()
            ts = [threading.Thread(target=call, args=(k,)) for k in (0, 1)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            lib.tpcommCommDestroy(comm)
            codes = sorted(g[0] for g in got)
            if codes == [OK, INVALID]:
                return (INVALID, [g[1] for g in got if g[0] == INVALID][0])
            return (WRONG, "two callers got %s: %s" % (codes, [g[1] for g in got]))
        return group(lib, 2, body, timeout_ms=3000)[0]
    if sc == "abort_in_call":
        def body(r, comm):
            if r == 1:
                time.sleep(1.5)
                lib.tpcommCommAbort(comm)
                return (OK, "")
            res = {}
            t = threading.Thread(target=lambda: res.update(c=lib.tpcommAllReduce(floats(64), floats(64), 64, 0, 0, comm, None)))
            t.start()
            time.sleep(0.1)
            ab = lib.tpcommCommAbort(comm)
            t.join(5)
            if t.is_alive():
                return (WRONG, "the call never returned after abort")
            return (OK if ab == OK and res.get("c") != OK else WRONG, "abort %d, call %s" % (ab, res.get("c")))
        return group(lib, 2, body, timeout_ms=1000)[0]
    if sc == "negzero":
        def body(r, comm):
            x = floats(4, -0.0)
            rr = lib.tpcommAllReduce(x, x, 4, 0, 0, comm, None)
            lib.tpcommCommDestroy(comm)
            bits = struct.unpack("I", struct.pack("f", x[0]))[0]
            return (rr if bits == 0 else WRONG, "result bits 0x%08x" % bits)
        return group(lib, 1, body)[0]
    return WRONG, "unknown scenario " + sc


def k_socket(lib, a):
    from fault_peers import socket_scenario
    return socket_scenario(lib, a["scenario"])


def k_env(lib, a):
    res = group(lib, 2, lambda r, c: _sum_check(lib, c), timeout_ms=5000, algo="staged_host")
    return worst(res, [OK, INVALID])


def _sum_check(lib, comm):
    x = floats(1000, 1.0)
    r = lib.tpcommAllReduce(x, x, 1000, 0, 0, comm, None)
    m = last_error(lib)
    lib.tpcommCommDestroy(comm)
    if r == OK and any(v != 2.0 for v in x):
        return (WRONG, "wrong sum")
    return (r, m)


KINDS = dict(call=k_call, norm=k_norm, init=k_init, id=k_id, ranks=k_ranks, socket=k_socket, env=k_env)


def run_attack(lib, attack):
    _declare(lib)
    try:
        return KINDS[attack["kind"]](lib, attack["args"])
    except Exception as e:  # the attack's own harness failed: counted, never hidden
        return WRONG, "harness: %s: %s" % (type(e).__name__, e)
