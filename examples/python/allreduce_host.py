"""Minimal tpcomm example: N host ranks (processes) all-reduce a numpy array.

    pip install .                           # from the repository root
    python examples/python/allreduce_host.py --nranks 4

Rank 0's process makes the unique id; here the launcher makes it and hands it to every rank
through multiprocessing (torch's broadcast_object_list, a file or an environment variable
would do as well: `uid.hex()` / `tpcomm.UniqueId.from_hex(text)`). Loopback: all on one host.
"""
import argparse
import multiprocessing as mp

try:
    import numpy as np
except ImportError:  # `pip install .` brings numpy; a bare PYTHONPATH checkout may lack it
    raise SystemExit("this example needs numpy: pip install numpy (pip install . installs it with tpcomm)")

import tpcomm


def rank_main(rank, nranks, uid, count):
    with tpcomm.Communicator(nranks, uid, rank, device=-1) as comm:  # device -1: a host (CPU) rank
        x = np.full(count, rank + 1, dtype=np.float32)
        comm.all_reduce(x)  # in place, sum over ranks: 1 + 2 + ... + nranks
        expect = nranks * (nranks + 1) / 2
        assert np.all(x == expect), (rank, x[:4])
        if rank == 0:
            print("all_reduce of %d floats over %d ranks: %s == %g everywhere (algorithm %s)"
                  % (count, nranks, x[:3], expect, comm.last_algorithm))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--count", type=int, default=1 << 20)
    a = ap.parse_args()
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=rank_main, args=(r, a.nranks, uid, a.count)) for r in range(a.nranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        raise SystemExit("ranks %s failed" % failed)


if __name__ == "__main__":
    main()
