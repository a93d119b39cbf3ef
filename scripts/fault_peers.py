"""Hostile peers of the socket bootstrap for scripts/fault_campaign.py: socket_scenario(lib, name)
-> (status, message), OK when the real ranks got through (or, for a squatter, when no rank trusted
it and it saw no secret), 99 with the reason otherwise."""
import ctypes
import os
import socket
import struct
import threading
import time

from fault_attacks import OK
from fault_workers import UniqueId, WRONG, config, floats, id_bytes, init, last_error, new_id


def _port(uid):
    return struct.unpack("!H", id_bytes(uid)[6:8])[0]


def _rank(lib, uid, n, r, out, timeout_ms=4000):
    cfg, keep = config(timeout_ms=timeout_ms)
    code, comm, msg = init(lib, uid, n, r, cfg)
    if code == OK:
        x = floats(8, 1.0)
        code = lib.tpcommAllReduce(x, x, 8, 0, 0, comm, None)
        msg = last_error(lib)
        lib.tpcommCommDestroy(comm)
    out[r] = (code, msg)


def _connect(port, timeout=2.0):
    end = time.time() + timeout
    while time.time() < end:
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", port))
            return s
        except OSError:
            s.close()
            time.sleep(0.01)
    return None


def _with_real_ranks(lib, attack, n=2, first=1):
    """Rank 0 starts; attack(uid, port, out) runs once it listens; then ranks first..n-1 join."""
    uid = new_id(lib)
    out = {}
    root = threading.Thread(target=_rank, args=(lib, uid, n, 0, out))
    root.start()
    probe = _connect(_port(uid))
    if probe:
        probe.close()
    attack(uid, _port(uid), out)
    ts = [threading.Thread(target=_rank, args=(lib, uid, n, r, out)) for r in range(first, n)]
    for t in ts:
        t.start()
    for t in ts + [root]:
        t.join()
    bad = [(r, c, m) for r, (c, m) in sorted(out.items()) if c != OK]
    return (OK, "real ranks through") if not bad else (WRONG, "rank %d: status %d: %s" % bad[0])


def _squatter(lib):
    uid = new_id(lib)
    port, secret = _port(uid), id_bytes(uid)[32:64]
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(4)
    out = {}
    t = threading.Thread(target=_rank, args=(lib, uid, 2, 1, out, 1500))
    t.start()
    srv.settimeout(3)
    got = b""
    try:
        c, _ = srv.accept()
        c.settimeout(0.3)
        c.sendall(b"WCPT" + struct.pack("<I", 2) + bytes(range(32)))  # a challenge, as rank 0 sends one
        try:
            got += c.recv(4096)
        except OSError:
            pass
        c.sendall(b"WCPT" + bytes(508))  # a verdict of success, without a proof
        try:
            got += c.recv(4096)
        except OSError:
            pass
        c.close()
    except OSError:
        pass
    t.join()
    srv.close()
    leaked = any(secret[k:k + 8] in got for k in range(0, 32, 8))
    if leaked:
        return WRONG, "the rank sent the job's secret to a squatter"
    if out.get(1, (OK,))[0] == OK:
        return WRONG, "the rank accepted a squatter as its rank 0"
    return OK, "no secret leaked, squatter refused: " + out[1][1][:120]


def socket_scenario(lib, name):
    if name == "squatter on the port":
        return _squatter(lib)
    held = []

    def attack(uid, port, out):
        if name == "wrong secret":
            bad = UniqueId()
            raw = bytearray(id_bytes(uid))
            raw[40] ^= 0x5A
            ctypes.memmove(ctypes.byref(bad), bytes(raw), 128)
            _rank(lib, bad, 2, 1, {}, 1500)
        elif name in ("garbage hello", "half a hello then close", "connect and close"):
            s = _connect(port)
            if s and name == "garbage hello":
                s.sendall(os.urandom(300))
            elif s and name == "half a hello then close":
                s.sendall(b"WCPT" + struct.pack("<I", 2) + b"\x01\x00")
            if s:
                time.sleep(0.05)
                s.close()
        elif name == "200 idle connections":
            for _ in range(200):
                s = _connect(port, 0.5)
                if s:
                    held.append(s)
        elif name == "hello of another size":
            _rank(lib, uid, 3, 1, {}, 1500)
        elif name == "rank out of range":
            _rank(lib, uid, 3, 2, {}, 1500)
        elif name == "rank twice":  # 3 ranks: the real rank 1, then a second rank 1 (refused), then rank 2
            t = threading.Thread(target=_rank, args=(lib, uid, 3, 1, out))
            t.start()
            held.append(t)
            time.sleep(0.3)
            dup = {}
            _rank(lib, uid, 3, 1, dup, 1500)
            if dup[1][0] == OK:
                out[9] = (WRONG, "a second rank 1 was let in")

    try:
        if name == "rank twice":
            r = _with_real_ranks(lib, attack, n=3, first=2)
            for t in held:
                t.join()
            return r
        return _with_real_ranks(lib, attack)
    finally:
        for s in held:
            if isinstance(s, socket.socket):
                s.close()
