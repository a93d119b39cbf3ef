#!/usr/bin/env python3
"""Builds the library-side GPU mutants of scripts/mutants.py off the GPU machine, so that a device
call only runs their tests (`scripts/gpu.sh ranks` with STEPS=mutants and MUTANTS=the tarball).

    python3 scripts/gpu.d/pack_mutants.py BUILD_DIR OUT.tgz [--only NAME,...]

For each chosen mutant whose tests are in tpcomm_gpu_tests (the test binary links libtpcomm.so,
so a mutant is a library): put the defect back, `ninja -C BUILD_DIR tpcomm`, keep the library as
mutants/NAME/libtpcomm.so.0, restore the source (also on errors); then rebuild the library
unmutated. mutants/MANIFEST lists `NAME<TAB>gtest filter` per mutant. The tarball holds
mutants/ only: unpack it into the build folder of the same commit (scripts/gpu.d/pack_build.sh)."""
import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from mutation_check import ROOT, apply_mutant, gpu_mutants  # noqa: E402  (scripts/, beside gpu.d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    only = set(filter(None, a.only.split(",")))
    chosen = [m for m in gpu_mutants()
              if m["targets"] == ["tpcomm_gpu_tests"] and (not only or m["name"] in only)
              and all(t[0] == "gtest" and t[1] == "tests/gpu/tpcomm_gpu_tests" and len(t) == 3 for t in m["tests"])]
    missing = only - {m["name"] for m in chosen}
    if missing:
        print("pack_mutants: not a library mutant with tpcomm_gpu_tests tests (or unknown): %s" % ", ".join(sorted(missing)))
        return 2
    stage = tempfile.mkdtemp()
    manifest = []
    try:
        for m in chosen:
            originals, texts = apply_mutant(m)  # ValueError: fix text not there once; nothing edited
            try:
                for full, text in texts.items():
                    open(full, "w").write(text)
                r = subprocess.run(["ninja", "-C", build, "tpcomm"], capture_output=True, text=True)
                if r.returncode != 0:
                    print("pack_mutants: %s does not build:\n%s" % (m["name"], (r.stdout + r.stderr)[-3000:]))
                    return 1
                dst = os.path.join(stage, "mutants", m["name"])
                os.makedirs(dst)
                shutil.copy(os.path.realpath(os.path.join(build, "libtpcomm.so.0")), os.path.join(dst, "libtpcomm.so.0"))
            finally:
                for full, text in originals.items():
                    open(full, "w").write(text)
            manifest.append("%s\t%s" % (m["name"], ":".join(t[2] for t in m["tests"])))
            print("pack_mutants: %s built" % m["name"], flush=True)
        r = subprocess.run(["ninja", "-C", build, "tpcomm"], capture_output=True, text=True)
        if r.returncode != 0:
            print("pack_mutants: the unmutated library does not rebuild")
            return 1
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        with open(os.path.join(stage, "mutants", "MANIFEST"), "w") as f:
            f.write("# commit %s: library mutants of scripts/mutants.py, name and gtest filter\n" % commit)
            f.write("\n".join(manifest) + "\n")
        with tarfile.open(a.out, "w:gz") as t:
            t.add(os.path.join(stage, "mutants"), arcname="mutants")
        print("pack_mutants: %d mutants -> %s" % (len(manifest), a.out))
        return 0
    finally:
        shutil.rmtree(stage, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
