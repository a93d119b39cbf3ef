#!/usr/bin/env python3
"""ctest qwen_make_corpus: train/make_corpus.py on a hand-made interpreter tree, in a few seconds on
the CPU. Exit 77 (skipped) without `tokenizers`, unless TPCOMM_REQUIRE_TORCH=1 (ctest
qwen_make_corpus_torch, label torch: the torch venv of tests/python, which has it).

The tree: a standard library of three files (one of them also inside a package), the Python
documentation's sources (one .txt, one file of another kind), and a site folder with an MIT
package (its vendored copy of another package inside), a GPL package, a package with no licence
in its metadata and a single-module MIT package. Checked:
- the MIT packages' files are in, the vendored copy, the GPL and the unlicensed packages are out,
  and the manifest names each left-out package with its licence and reason;
- a text present twice is kept once; every record has a split, and the splits' counts and bytes
  in the manifest are the records';
- corpus_sha256 is the compressed file's, corpus_text_sha256 its decompressed lines';
- a second run gives the same corpus, text hash and tokenizer (deterministic for the same files);
- --package-cap-mb stops a package's files past the cap;
- bad arguments (an interpreter that cannot run or answers wrongly, a vocabulary below the byte
  alphabet, a cap of 0 or below) exit 2 naming the argument, with no traceback and nothing written;
  a --docs that is not a folder is said in the log.
"""
import hashlib
import json
import lzma
import os
import stat
import subprocess
import sys
import tempfile

import importlib.util

if importlib.util.find_spec("tokenizers") is None:
    if os.environ.get("TPCOMM_REQUIRE_TORCH") == "1":  # the torch label's venv: here it must run
        print("[qwen_make_corpus] FAILED: TPCOMM_REQUIRE_TORCH=1 and this Python lacks tokenizers")
        sys.exit(1)
    print("[qwen_make_corpus] SKIPPED: this Python lacks tokenizers")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_CORPUS = os.path.join(HERE, "..", "train", "make_corpus.py")
from checklist import Checklist  # noqa: E402

check = Checklist()


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def source(name, lines=40):
    """A distinct Python text of a few KB."""
    return "".join("def %s_%d(x):\n    return x * %d + len(%r)\n\n" % (name, i, i, name) for i in range(lines))


def dist(site, name, metadata, tops=None):
    info = os.path.join(site, "%s-1.0.dist-info" % name)
    write(os.path.join(info, "METADATA"), "Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n%s\nlong description\n"
          % (name, metadata))
    if tops is not None:
        write(os.path.join(info, "top_level.txt"), "".join(t + "\n" for t in tops))


def build_tree(root):
    stdlib, site, docs = (os.path.join(root, d) for d in ("stdlib", "site", "docs"))
    shared = source("shared")
    write(os.path.join(stdlib, "alpha.py"), source("alpha"))
    write(os.path.join(stdlib, "beta.py"), shared)
    write(os.path.join(stdlib, "sub", "gamma.py"), source("gamma"))
    write(os.path.join(docs, "library", "intro.rst.txt"), "Introduction\n============\n\n" + "Some prose. " * 200)
    write(os.path.join(docs, "library", "image.png"), "not text the corpus takes")
    dist(site, "mitpkg", "License: MIT", ["mitpkg"])
    write(os.path.join(site, "mitpkg", "__init__.py"), source("mitpkg_init"))
    write(os.path.join(site, "mitpkg", "core.py"), source("mitpkg_core"))
    write(os.path.join(site, "mitpkg", "copy_of_beta.py"), shared)  # the stdlib's text again
    write(os.path.join(site, "mitpkg", "_vendor", "other.py"), source("vendored"))
    dist(site, "gplpkg", "License: GPL-3.0-or-later", ["gplpkg"])
    write(os.path.join(site, "gplpkg", "__init__.py"), source("gpl"))
    dist(site, "nolicence", "Summary: no licence field", ["nolicence"])
    write(os.path.join(site, "nolicence", "__init__.py"), source("nolicence"))
    dist(site, "onemodule", "Classifier: License :: OSI Approved :: BSD License", ["onemodule"])
    write(os.path.join(site, "onemodule.py"), source("onemodule"))
    dist(site, "bigpkg", "License-Expression: Apache-2.0", ["bigpkg"])
    for i in range(6):  # ~13 KB each: --package-cap-mb 0.02 keeps the first two
        write(os.path.join(site, "bigpkg", "m%d.py" % i), source("big%d" % i, 150))
    # make_corpus.py asks each interpreter for its paths; this one answers with the tree's.
    fake = os.path.join(root, "fakepython")
    write(fake, "#!/bin/sh\necho '%s'\n" % json.dumps({"stdlib": stdlib, "site": [site], "version": "3.99.0"}))
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
    return fake, docs


def run(fake, docs, out, cap_mb):
    r = subprocess.run([sys.executable, MAKE_CORPUS, "--out", out, "--python", fake, "--docs", docs,
                        "--max-mb", "5", "--package-cap-mb", str(cap_mb), "--vocab-size", "300"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
    check("make_corpus.py exits 0 (%s)" % out, r.returncode == 0)
    with open(os.path.join(out, "MANIFEST.json")) as f:
        manifest = json.load(f)
    raw = open(os.path.join(out, "corpus.jsonl.xz"), "rb").read()
    lines = lzma.decompress(raw)
    records = [json.loads(x) for x in lines.decode("utf-8").splitlines()]
    return manifest, raw, lines, records


def main():
    with tempfile.TemporaryDirectory() as root:
        fake, docs = build_tree(root)
        m, raw, lines, records = run(fake, docs, os.path.join(root, "out1"), 0.02)
        names = {(r["source"], r["path"]) for r in records}
        sources = {s["source"]: s for s in m["sources"]}
        left = {x["package"]: x for x in m["left_out"]}

        check("the standard library's three files are in",
              {("python3.99.0-stdlib", p) for p in ("alpha.py", "beta.py", "sub/gamma.py")} <= names)
        check("the documentation's .txt is in, the other file is not",
              ("python-docs", "library/intro.rst.txt") in names and not any(p.endswith(".png") for _, p in names))
        check("the MIT package's own files are in",
              {("pkg:mitpkg", "mitpkg/__init__.py"), ("pkg:mitpkg", "mitpkg/core.py")} <= names)
        check("the single-module BSD package is in", ("pkg:onemodule", "onemodule.py") in names)
        check("the vendored copy inside the MIT package is out", not any("_vendor" in p for _, p in names))
        check("the text present twice is kept once (the stdlib's copy)",
              ("pkg:mitpkg", "mitpkg/copy_of_beta.py") not in names and ("python3.99.0-stdlib", "beta.py") in names)
        check("the GPL and the unlicensed packages' files are out",
              not any(s in ("pkg:gplpkg", "pkg:nolicence") for s, _ in names))
        check("the manifest names the GPL package as left out, with its licence",
              "gplpkg" in left and "GPL" in left["gplpkg"]["licence"] and "permissive" in left["gplpkg"]["why"])
        check("the manifest names the package without a licence as left out",
              "nolicence" in left and left["nolicence"]["licence"] == "(none in metadata)")
        check("each kept source carries its licence in the manifest",
              sources.get("pkg:mitpkg", {}).get("licence") == "MIT" and "BSD" in sources.get("pkg:onemodule", {}).get("licence", ""))
        big = sorted(p for s, p in names if s == "pkg:bigpkg")
        check("--package-cap-mb 0.02 stops the package past its cap (%d of 6 files kept)" % len(big),
              0 < len(big) < 6 and big == ["bigpkg/m%d.py" % i for i in range(len(big))])
        check("every record has one of the three splits", all(r["split"] in ("train", "valid", "heldout") for r in records))
        counts = {s: {"files": sum(r["split"] == s for r in records),
                      "bytes": sum(len(r["text"].encode()) for r in records if r["split"] == s)}
                  for s in ("train", "valid", "heldout")}
        check("the manifest's split counts and bytes are the records'", m["splits"] == counts)
        check("corpus_sha256 is the compressed file's", m["corpus_sha256"] == hashlib.sha256(raw).hexdigest())
        check("corpus_text_sha256 is the decompressed lines'", m["corpus_text_sha256"] == hashlib.sha256(lines).hexdigest())
        check("text_bytes sums the records' texts", m["text_bytes"] == sum(len(r["text"].encode()) for r in records))

        # Bad arguments: refused with exit 2 and the argument named, nothing written.
        wrong = os.path.join(root, "wrongpython")
        write(wrong, "#!/bin/sh\necho '{\"stdlib\": 3}'\n")
        os.chmod(wrong, os.stat(wrong).st_mode | stat.S_IEXEC)
        for what, args, named in (("an interpreter that is not there", ["--python", os.path.join(root, "missing")], "--python"),
                                  ("an interpreter answering without a site list", ["--python", wrong], "--python"),
                                  ("--vocab-size 10", ["--python", fake, "--vocab-size", "10"], "--vocab-size"),
                                  ("--package-cap-mb 0", ["--python", fake, "--package-cap-mb", "0"], "--package-cap-mb"),
                                  ("--max-mb -1", ["--python", fake, "--max-mb", "-1"], "--max-mb")):
            out = os.path.join(root, "refused")
            r = subprocess.run([sys.executable, MAKE_CORPUS, "--out", out, "--docs", docs] + args,
                               capture_output=True, text=True)
            check("%s: exit 2, '%s' named, no traceback, nothing written" % (what, named),
                  r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr and not os.path.exists(out))
        r = subprocess.run([sys.executable, MAKE_CORPUS, "--out", os.path.join(root, "nodocs"), "--python", fake,
                            "--docs", os.path.join(root, "missing-docs"), "--vocab-size", "300"], capture_output=True, text=True)
        check("a --docs that is not a folder is said in the log, and the rest made",
              r.returncode == 0 and "is not a folder" in r.stdout and os.path.exists(os.path.join(root, "nodocs", "MANIFEST.json")))

        m2, raw2, _, _ = run(fake, docs, os.path.join(root, "out2"), 0.02)
        check("a second run gives the same corpus (sha256 of the file and of the text)",
              raw2 == raw and m2["corpus_text_sha256"] == m["corpus_text_sha256"])
        tok1 = open(os.path.join(root, "out1", "tokenizer.json"), "rb").read()
        tok2 = open(os.path.join(root, "out2", "tokenizer.json"), "rb").read()
        check("and the same tokenizer.json", tok1 == tok2)

    print("[qwen_make_corpus] %d checks, %d failed%s" % (check.count, len(check.failed),
                                                        (": " + "; ".join(check.failed)) if check.failed else ""))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
