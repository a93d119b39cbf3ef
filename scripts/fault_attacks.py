"""The attacks of scripts/fault_campaign.py: what a hostile or careless user tries against
libtpcomm's C API, host ranks, the socket bootstrap, the environment and tpcomm-doctor. Each
attack is a dict: cat (category), name, kind (what the worker does: call, init, id, env, ranks,
socket, doctor), args (for that kind), ok (the statuses that are right: C codes, or exit codes
for the doctor), says (words one of which a refusal's message must contain; empty: any), and
bound_s (an outcome later than this is 'slow'). Generated from tables, so a new value or entry
point is one more row."""
import itertools

# C statuses (include/tpcomm/tpcomm_c.h).
OK, INVALID, SYSTEM, TIMEOUT, REMOTE = 0, 1, 4, 5, 6
TOP = 0xFFFFFFFFFFFFFFF0  # 16 bytes below the top of the address space

# --- the C API's collectives: one bad argument at a time, the others good --------------------
_GOOD = dict(send="buf", recv="buf2", count=64, dtype=0, op=0, stream=0, comm="comm")
_BAD = dict(
    send=[("null", "send"), ("top", "send"), ("recv+4", "overlap")],
    recv=[("null", "recv"), ("top", "recv"), ("send+4", "overlap")],
    count=[(0, "count"), (1 << 62, "count"), ((1 << 64) - 1, "count"), (1 << 63, "count")],
    dtype=[(-1, "datatype"), (3, "datatype"), (7, "datatype"), (2**31 - 1, "datatype"), (-2**31, "datatype")],
    op=[(-1, "op"), (3, "op"), (99, "op"), (-2**31, "op")],
    stream=[(0x10, "stream")],
    comm=[("null", "comm")],
)
_ENTRIES = {  # entry: its arguments in order (names from _GOOD / the norm's own)
    "tpcommAllReduce": ["send", "recv", "count", "dtype", "op", "comm", "stream"],
    "tpcommReduceScatter": ["send", "recv", "count", "dtype", "op", "comm", "stream"],
    "tpcommAllGather": ["send", "recv", "count", "dtype", "comm", "stream"],
    "tpcommAllReduceCompressed": ["send", "recv", "count", "dtype", "op", "compression", "comm", "stream"],
}
_COMPRESSION = [("fp4", "compression"), ("FP8x", "compression"), ("x" * 10000, "compression"), ("fp8\n", "compression"),
                ("none ", "compression")]
_NORM_BAD = [("in", "null", "in"), ("in", "top", "in"), ("residual", "null", "residual"), ("residual", "in", "residual"),
             ("weight", "null", "weight"), ("weight", "top", "weight"), ("out", "null", "out"), ("out", "top", "out"),
             ("eps", -1.0, "eps"), ("eps", float("nan"), "eps"), ("eps", float("inf"), "eps"), ("rows", 0, "rows"),
             ("rows", 1 << 62, "rows"), ("hidden", 0, "hidden"), ("hidden", 1 << 40, "hidden"), ("dtype", 9, "datatype"),
             ("comm", "null", "comm")]


def _call_attacks():
    out = []
    for entry, params in _ENTRIES.items():
        for p in params:
            for value, word in (_COMPRESSION if p == "compression" else _BAD.get(p, [])):
                args = dict(_GOOD, compression="fp8")
                args[p] = value
                out.append(dict(cat="C API arguments", name="%s %s=%s" % (entry, p, str(value)[:20]), kind="call",
                                args=dict(entry=entry, order=params, values=args), ok=[INVALID], says=[word]))
    for field, value, word in _NORM_BAD:
        args = dict(in_="buf", residual="buf2", weight="buf3", out="buf4", eps=1e-5, rows=2, hidden=16, dtype=0,
                    comm="comm")
        args["in_" if field == "in" else field] = value
        out.append(dict(cat="C API arguments", name="tpcommAllReduceResidualRmsNorm %s=%s" % (field, str(value)[:20]),
                        kind="norm", args=args, ok=[INVALID], says=[word]))
    return out


# --- tpcommConfig_t and init arguments -------------------------------------------------------
def _config_attacks():
    out = []
    for size in list(range(0, 57)) + [1 << 16, (1 << 16) + 1, 1 << 40, (1 << 64) - 1]:
        ok = [OK] if 16 <= size <= (1 << 16) else [INVALID]
        out.append(dict(cat="C API config", name="config size %d, cut bytes 0xA5" % size, kind="init",
                        args=dict(size=size, fill=0xA5), ok=ok, says=["config->size"]))
    for magic in [0, 1, 0x7C0C0F18, 0xFFFFFFFF]:
        out.append(dict(cat="C API config", name="config magic 0x%x" % magic, kind="init", args=dict(magic=magic),
                        ok=[INVALID], says=["magic"]))
    for t in [-1, -2**31]:
        out.append(dict(cat="C API config", name="timeoutMs %d" % t, kind="init", args=dict(timeoutMs=t), ok=[INVALID],
                        says=["timeoutMs"]))
    for t in [1, 2**31 - 1]:
        out.append(dict(cat="C API config", name="timeoutMs %d" % t, kind="init", args=dict(timeoutMs=t), ok=[OK], says=[]))
    for algo in ["garbage", "^", ",", "0-:x", "x" * 5000, "staged_host:0-", "0-64K:nope", "^^ring_nccl", "\xff\xfe"]:
        out.append(dict(cat="C API config", name="algo %r" % algo[:20], kind="init", args=dict(algo=algo),
                        ok=[INVALID], says=["TPCOMM_ALGO", "algo"]))
    for c in ["fp4", "x" * 5000, "FP8 ", "int8\n"]:
        out.append(dict(cat="C API config", name="compression %r" % c[:20], kind="init", args=dict(compression=c),
                        ok=[INVALID], says=["compression"]))
    for nranks, rank, dev, word in [(0, 0, -1, "nranks"), (-1, 0, -1, "nranks"), (2, 2, -1, "rank"), (2, -1, -1, "rank"),
                                    (1, 0, -2, "device"), (2**31 - 1, 2**31 - 2, -1, "")]:
        ok = [INVALID, TIMEOUT] if not word else [INVALID]
        out.append(dict(cat="C API config", name="init nranks %d rank %d device %d" % (nranks, rank, dev), kind="init",
                        args=dict(nranks=nranks, rank=rank, device=dev, timeoutMs=300), ok=ok, says=[word] if word else [],
                        bound_s=3))
    return out


# --- unique ids and addresses ----------------------------------------------------------------
def _id_attacks():
    out = []
    for addr in ["", "1.2.3", "::::", "localhost", "999.1.1.1", "x" * 1000, "127.0.0.1\n", None]:
        out.append(dict(cat="unique ids", name="address %r" % (addr if addr is None else addr[:20]), kind="id",
                        args=dict(address=addr), ok=[INVALID], says=["address"]))
    for seed in range(24):
        out.append(dict(cat="unique ids", name="random id %d" % seed, kind="id", args=dict(random=seed),
                        ok=[INVALID], says=["unique id"], bound_s=3))
    for off, val in itertools.product([0, 4, 5, 6, 7], [0, 0xFF]):
        out.append(dict(cat="unique ids", name="id byte %d = 0x%x" % (off, val), kind="id", args=dict(byte=off, value=val),
                        ok=[INVALID, TIMEOUT], says=["unique id", "rank 0", "port"], bound_s=3))
    for off in [8, 40, 60]:  # address, secret: a well-formed id nobody listens on / another job's
        out.append(dict(cat="unique ids", name="id byte %d flipped" % off, kind="id", args=dict(byte=off, value=-1),
                        ok=[TIMEOUT, REMOTE, INVALID, SYSTEM], says=["rank 0"], bound_s=3))
    return out


# --- the environment: every parameter x hostile values, 2 host ranks forced onto staged_host --
_ENV_VALUES = ["", " ", "-1", "0", "abc", "1e99", "99999999999999999999", "0x10", "1K", "4097", "1G", "\xff", "1 2"]


def env_attacks(params):
    out = []
    for name in params:
        if name in ("TPCOMM_MULTICAST",) or name.startswith("TPCOMM_TOPO"):
            continue  # the multicast safety switch is never set here; probe knobs run children
        for v in _ENV_VALUES:
            out.append(dict(cat="environment", name="%s=%r" % (name, v), kind="env", args=dict(var=name, value=v),
                            ok=[OK, INVALID], says=[name], bound_s=20))
    return out


# --- host ranks under faults --------------------------------------------------------------------
def _rank_attacks():
    out = []
    for n in (2, 3, 4):
        out.append(dict(cat="host ranks", name="%d ranks, the last never calls init" % n, kind="ranks",
                        args=dict(n=n, scenario="missing_at_init"), ok=[TIMEOUT],
                        says=["rank(s) %d" % (n - 1), "rank %d " % (n - 1)], bound_s=4))
        for coll in ("allreduce", "reducescatter", "allgather"):
            out.append(dict(cat="host ranks", name="%d ranks, the last skips %s" % (n, coll), kind="ranks",
                            args=dict(n=n, scenario="skip", coll=coll), ok=[TIMEOUT, REMOTE],
                            says=["rank(s) %d" % (n - 1), "rank %d " % (n - 1)], bound_s=4))
    for what in ("count", "dtype", "op", "collective"):
        out.append(dict(cat="host ranks", name="2 ranks, different %s" % what, kind="ranks",
                        args=dict(n=2, scenario="mismatch", what=what), ok=[INVALID], says=[what if what != "dtype" else "dtype"],
                        bound_s=4))
    out.append(dict(cat="host ranks", name="two threads call one communicator", kind="ranks",
                    args=dict(n=2, scenario="two_callers"), ok=[INVALID], says=["another thread"], bound_s=6))
    out.append(dict(cat="host ranks", name="abort while a call waits", kind="ranks", args=dict(n=2, scenario="abort_in_call"),
                    ok=[OK], says=[], bound_s=6))
    out.append(dict(cat="host ranks", name="1 rank, -0.0 all-reduce", kind="ranks", args=dict(n=1, scenario="negzero"),
                    ok=[OK], says=[], bound_s=4))
    return out


# --- the socket bootstrap against hostile peers ------------------------------------------------
def _socket_attacks():
    names = ["wrong secret", "garbage hello", "half a hello then close", "connect and close", "200 idle connections",
             "squatter on the port", "hello of another size", "rank out of range", "rank twice"]
    return [dict(cat="socket bootstrap", name=n, kind="socket", args=dict(scenario=n), ok=[OK], says=[], bound_s=8)
            for n in names]


# --- tpcomm-doctor -----------------------------------------------------------------------------
def _doctor_attacks():
    rows = [(["--machine-json", "/nonexistent"], [1, 2]), (["--machine-json", "/tmp"], [1, 2]),
            (["--machine-json", "/dev/null"], [1, 2]), (["--tune-step", "0"], [1]), (["--tune-step", "abc"], [1]),
            (["--tune", "--tune-ranks", "-3"], [1]), (["--bogus"], [1, 2]), (["--tune-max-bytes", "1e99"], [1]),
            (["--params", "extra"], [0, 1, 2]), (["--clean", "--clean"], [0, 1])]
    out = [dict(cat="tpcomm-doctor", name="doctor %s" % " ".join(a), kind="doctor", args=dict(argv=a, env={}), ok=ok,
                says=[], bound_s=20) for a, ok in rows]
    for var, val in [("TPCOMM_DEBUG", "garbage"), ("TPCOMM_TIMEOUT_MS", "-5"), ("TPCOMM_STAGED_SLOTS", "1e9"),
                     ("TPCOMM_STAGED_CHUNK_BYTES", "4097"), ("TPCOMM_ALGO", "^^^")]:
        out.append(dict(cat="tpcomm-doctor", name="doctor with %s=%s" % (var, val), kind="doctor",
                        args=dict(argv=[], env={var: val}), ok=[2], says=[var], bound_s=20))
    out.append(dict(cat="tpcomm-doctor", name="doctor with XDG_CACHE_HOME=/dev/null", kind="doctor",
                    args=dict(argv=[], env={"XDG_CACHE_HOME": "/dev/null"}), ok=[0, 2], says=[], bound_s=20))
    return out


def all_attacks(params):
    return _call_attacks() + _config_attacks() + _id_attacks() + env_attacks(params) + _rank_attacks() + \
        _socket_attacks() + _doctor_attacks()
