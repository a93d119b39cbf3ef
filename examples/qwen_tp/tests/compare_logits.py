#!/usr/bin/env python3
"""compare_logits.py REF.logits OTHER.logits [--from P]

Compares two qwen_tp --dump-logits files (logits_dump.h: "QWLOGIT1", positions, vocab, ids, fp32
logits) of the same id sequence, e.g. an uncompressed run and an --allreduce-compression run
teacher-forced over the same tokens. Prints, over rows P.. (default 0): the largest |difference|
of a logit, that difference over the largest |logit| of the reference, and how many rows pick
the same argmax (the greedy token). Standard library only. Exit status 2 when the files do not
hold the same ids and vocabulary.
"""
import argparse
import struct
import sys
from array import array


def read_dump(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != b"QWLOGIT1":
        sys.exit("%s: not a QWLOGIT1 file" % path)
    positions, vocab = struct.unpack_from("<II", raw, 8)
    ids = list(struct.unpack_from("<%di" % positions, raw, 16))
    logits = array("f")
    logits.frombytes(raw[16 + 4 * positions:])
    if sys.byteorder != "little":
        logits.byteswap()
    if len(logits) != positions * vocab:
        sys.exit("%s: %d floats, expected %d x %d" % (path, len(logits), positions, vocab))
    return ids, vocab, logits


def argmax(row):
    best = 0
    for i in range(1, len(row)):
        if row[i] > row[best]:
            best = i
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref")
    ap.add_argument("other")
    ap.add_argument("--from", dest="start", type=int, default=0, help="first row compared")
    a = ap.parse_args()
    ids, vocab, ref = read_dump(a.ref)
    ids2, vocab2, other = read_dump(a.other)
    if ids != ids2 or vocab != vocab2:
        print("different sequences: %d ids x %d vocab vs %d x %d" % (len(ids), vocab, len(ids2), vocab2))
        return 2
    rows = range(max(0, a.start), len(ids))
    max_diff = max_ref = 0.0
    same = 0
    for p in rows:
        r = ref[p * vocab:(p + 1) * vocab]
        o = other[p * vocab:(p + 1) * vocab]
        max_diff = max(max_diff, max(abs(x - y) for x, y in zip(r, o)))
        max_ref = max(max_ref, max(abs(x) for x in r))
        same += argmax(r) == argmax(o)
    n = len(rows)
    print("rows %d..%d (%d): max |logit diff| %.4g, over max |logit| %.4g: %.3g; same argmax %d/%d" %
          (rows.start, len(ids) - 1, n, max_diff, max_ref, max_diff / max_ref if max_ref else 0.0, same, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
