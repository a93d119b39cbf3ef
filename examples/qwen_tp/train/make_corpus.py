#!/usr/bin/env python3
"""make_corpus.py --out DIR [--python PY ...] [--docs DIR] [--max-mb 260] [--package-cap-mb 24]

Builds the training corpus of the MTP draft model from what a machine has installed, so that a
GPU machine without a network can train on it (train_tiny_qwen.py --corpus DIR):

  - the Python standard library's .py files (the interpreters given by --python; PSF-2.0);
  - the Python documentation's reStructuredText sources (--docs, default Debian's python3.11-doc:
    /usr/share/doc/python3.11/html/_sources; PSF-2.0, code examples 0BSD);
  - the .py files of the installed packages of those interpreters whose metadata names a
    permissive licence (MIT, BSD, Apache-2.0, PSF, ISC, Unlicense, 0BSD, Zlib, HPND), at most
    --package-cap-mb per distribution name over every site and version (so no single package
    dominates); packages whose licence is
    copyleft, unknown or missing are left out, and the manifest lists every one with its reason.

Files are taken in sorted order; exact duplicates (the same text under two paths, e.g. a package
installed for two interpreters) are kept once. Each file goes to one split by a hash of its path
(sha1 of "source:relative path"; one distribution installed twice, in two versions, keeps each
path in one split); vendored copies of other packages (_vendor/, extern/, ...) are left out: 2% held out (never trained on, never used to choose a
checkpoint: evaluation, teacher-forced acceptance, prompts), 1% validation (train_tiny_qwen.py
--keep-best), the rest training. Writes

  DIR/corpus.jsonl.xz   one JSON object a line: {"split", "source", "path", "text"}
  DIR/tokenizer.json    a byte-level BPE with Qwen2's pre-tokenizer settings trained on the
                        training split (tests/tokenizer/make_reference.py's build_tokenizer),
                        --vocab-size ids in all
  DIR/MANIFEST.json     sources, licences, bytes and files per split, what was left out and why,
                        sha256 of corpus.jsonl.xz and of its uncompressed lines

Deterministic for a given set of installed files. Needs `tokenizers`.
"""
import argparse
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "tokenizer"))

PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache|PSF|Python Software Foundation|ISC|Unlicense|0BSD|Zlib|HPND|"
                        r"Historical Permission)\b", re.I)
# Copies of other packages inside a package: left out (they would put near-copies of one text in
# two splits).
VENDORED = ("_vendor", "vendor", "_vendored", "vendored", "extern", "_distutils")
COPYLEFT = re.compile(r"\b(GPL|LGPL|AGPL|MPL|Mozilla|EPL|CDDL|copyleft)\b", re.I)


def log(msg):
    print("[corpus] %s" % msg, flush=True)


def interp_paths(py):
    out = subprocess.run([py, "-c", "import json, site, sys, sysconfig; p = sysconfig.get_paths(); "
                          "print(json.dumps({'stdlib': p['stdlib'], 'site': sorted(set([p['purelib'], p['platlib']] + "
                          "(site.getsitepackages() if hasattr(site, 'getsitepackages') else []))), "
                          "'version': sys.version.split()[0]}))"], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    if not (isinstance(d, dict) and isinstance(d.get("stdlib"), str) and isinstance(d.get("version"), str) and
            isinstance(d.get("site"), list) and all(isinstance(x, str) for x in d["site"])):
        raise ValueError("not {stdlib, site, version}")
    return d


def py_files(root, skip_dirs=()):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in skip_dirs and x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                yield os.path.join(d, f)


def read_text(path, limit=2_000_000):
    try:
        if os.path.getsize(path) > limit:
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def dist_licence(dist_info):
    """(licence string, permissive?) from a .dist-info / .egg-info folder's metadata."""
    meta = ""
    for name in ("METADATA", "PKG-INFO"):
        p = os.path.join(dist_info, name)
        if os.path.exists(p):
            meta = open(p, encoding="utf-8", errors="replace").read().split("\n\n")[0]
            break
    fields = []
    for line in meta.splitlines():
        if line.startswith(("License-Expression:", "License:")):
            fields.append(line.split(":", 1)[1].strip())
        elif line.startswith("Classifier: License ::"):
            fields.append(line.split("::")[-1].strip())
    text = "; ".join(f for f in fields if f and f.upper() != "UNKNOWN")[:200]
    if not text:
        return "(none in metadata)", False
    return text, bool(PERMISSIVE.search(text)) and not COPYLEFT.search(text)


def packages_of(site):
    """[(distribution name, licence, permissive, [top-level folders or modules])] of a site folder."""
    out = []
    for entry in sorted(os.listdir(site)):
        if not entry.endswith((".dist-info", ".egg-info")):
            continue
        info = os.path.join(site, entry)
        name = entry.split("-")[0].lower()  # name-version.dist-info: one key for every installed version
        tops = []
        top_file = os.path.join(info, "top_level.txt")
        record = os.path.join(info, "RECORD")
        if os.path.exists(top_file):
            tops = [t.strip() for t in open(top_file) if t.strip()]
        elif os.path.exists(record):
            tops = sorted({line.split("/")[0].split(",")[0] for line in open(record, errors="replace")
                           if line.split(",")[0].endswith(".py") and not line.startswith("..")})
        lic, ok = dist_licence(info)
        out.append((name, lic, ok, [t for t in tops if t and not t.endswith((".dist-info", ".egg-info"))]))
    return out


def split_of(key):
    h = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 100
    return "heldout" if h < 2 else "valid" if h == 50 else "train"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--python", action="append", default=[], help="interpreters whose stdlib and packages to read "
                    "(default: this one)")
    ap.add_argument("--docs", default="/usr/share/doc/python3.11/html/_sources")
    ap.add_argument("--max-mb", type=float, default=260, help="stop adding package files past this many MB of text")
    ap.add_argument("--package-cap-mb", type=float, default=24)
    ap.add_argument("--vocab-size", type=int, default=4096)
    args = ap.parse_args()
    try:
        from make_reference import SPECIALS, build_tokenizer  # Qwen2's pre-tokenizer settings, as qwen_tp is tested against
    except ImportError as e:
        sys.exit("make_corpus.py: needs the tokenizers package (pip install tokenizers): %s" % e)
    min_vocab = 256 + len(SPECIALS) + 2  # the byte alphabet, the special tokens, <think> and </think>
    if args.vocab_size < min_vocab:
        ap.error("--vocab-size %d: a byte-level BPE needs at least %d ids" % (args.vocab_size, min_vocab))
    if not args.max_mb > 0 or not args.package_cap_mb > 0:
        ap.error("--max-mb %g, --package-cap-mb %g: each must be above 0" % (args.max_mb, args.package_cap_mb))
    t0 = time.time()
    pys = args.python or [sys.executable]
    paths = {}
    for py in pys:  # every interpreter answers before anything is written
        try:
            paths[py] = interp_paths(py)
        except subprocess.CalledProcessError as e:
            ap.error("--python %s: asked for its paths, it exited with status %d" % (py, e.returncode))
        except OSError as e:
            ap.error("--python %s: cannot run it (%s)" % (py, e.strerror or e))
        except ValueError:
            ap.error("--python %s: its answer to the paths query is not the JSON expected" % py)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        ap.error("--out %s: %s" % (args.out, e.strerror or e))
    seen, records, manifest = set(), [], {"sources": [], "left_out": [], "splits": {}}

    def add(source, rel, text):
        if not text or not text.strip():
            return 0
        digest = hashlib.sha1(text.encode()).hexdigest()
        if digest in seen:
            return 0
        seen.add(digest)
        records.append({"split": split_of(source + ":" + rel), "source": source, "path": rel, "text": text})
        return len(text.encode())

    for py in pys:
        p = paths[py]
        n = sum(add("python%s-stdlib" % p["version"], os.path.relpath(f, p["stdlib"]), read_text(f))
                for f in py_files(p["stdlib"], ("site-packages", "dist-packages")))
        manifest["sources"].append({"source": "python%s-stdlib" % p["version"], "root": p["stdlib"],
                                    "licence": "PSF-2.0", "bytes": n})
        log("stdlib of Python %s: %.1f MB" % (p["version"], n / 1e6))
    if os.path.isdir(args.docs):
        n = 0
        for d, dirs, files in os.walk(args.docs):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(".txt"):
                    full = os.path.join(d, f)
                    n += add("python-docs", os.path.relpath(full, args.docs), read_text(full))
        manifest["sources"].append({"source": "python-docs", "root": args.docs,
                                    "licence": "PSF-2.0 (documentation; code examples 0BSD)", "bytes": n})
        log("Python documentation sources: %.1f MB" % (n / 1e6))
    else:
        log("Python documentation sources: %s is not a folder, none taken (--docs)" % args.docs)
    total = sum(len(r["text"].encode()) for r in records)
    per_package = {}  # bytes taken per distribution name, over every site and version
    for py in pys:
        for site in paths[py]["site"]:
            if not os.path.isdir(site):
                continue
            for name, lic, ok, tops in packages_of(site):
                if not ok:
                    manifest["left_out"].append({"package": name, "site": site, "licence": lic,
                                                 "why": "licence not known to be permissive"})
                    continue
                n = per_package.get(name, 0)
                for top in tops:
                    base = os.path.join(site, top)
                    files = list(py_files(base, VENDORED)) if os.path.isdir(base) else [base + ".py"] if os.path.exists(base + ".py") else []
                    for f in files:
                        if n >= args.package_cap_mb * 1e6 or total >= args.max_mb * 1e6:
                            break
                        got = add("pkg:" + name, os.path.relpath(f, site), read_text(f))
                        n, total = n + got, total + got
                if n > per_package.get(name, 0):
                    manifest["sources"].append({"source": "pkg:" + name, "root": site, "licence": lic,
                                                "bytes": n - per_package.get(name, 0)})
                per_package[name] = n
    log("with packages: %d files, %.1f MB of text (%.0f s)" % (len(records), total / 1e6, time.time() - t0))
    for s in ("train", "valid", "heldout"):
        sel = [r for r in records if r["split"] == s]
        manifest["splits"][s] = {"files": len(sel), "bytes": sum(len(r["text"].encode()) for r in sel)}
    log("splits: %s" % manifest["splits"])

    t1 = time.time()
    train_texts = [r["text"] for r in records if r["split"] == "train"]
    tok = build_tokenizer(train_texts, args.vocab_size - 2)  # it adds <think> and </think> after training
    tok.save(os.path.join(args.out, "tokenizer.json"))
    log("tokenizer: %d ids (%.0f s)%s" % (tok.get_vocab_size(), time.time() - t1,
                                         "; fewer than --vocab-size %d: the text has no more pairs seen twice"
                                         % args.vocab_size if tok.get_vocab_size() < args.vocab_size else ""))
    manifest["tokenizer_ids"] = tok.get_vocab_size()

    t2 = time.time()
    path = os.path.join(args.out, "corpus.jsonl.xz")
    text_sha = hashlib.sha256()  # of the uncompressed lines: the same whatever liblzma compressed them
    with lzma.open(path, "wt", encoding="utf-8", preset=6) as f:
        for r in records:
            line = json.dumps(r, ensure_ascii=False) + "\n"
            f.write(line)
            text_sha.update(line.encode("utf-8"))
    manifest["corpus_sha256"] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    manifest["corpus_text_sha256"] = text_sha.hexdigest()
    manifest["corpus_xz_bytes"] = os.path.getsize(path)
    manifest["text_bytes"] = total
    manifest["made_with"] = {"pythons": pys, "docs": args.docs, "max_mb": args.max_mb,
                             "package_cap_mb": args.package_cap_mb, "vocab_size": args.vocab_size}
    with open(os.path.join(args.out, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    log("wrote %s: %.1f MB compressed (%.0f s); MANIFEST.json, tokenizer.json" % (path, os.path.getsize(path) / 1e6,
                                                                                  time.time() - t2))


if __name__ == "__main__":
    main()
