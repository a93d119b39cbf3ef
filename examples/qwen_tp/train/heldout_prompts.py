#!/usr/bin/env python3
"""heldout_prompts.py CORPUS_XZ WORKDIR TF_CHARS PREFIXES PREFIX_CHARS [PREDICT]: the texts
draft_session.sh measures the draft on, from a make_corpus.py corpus's held-out split (never
trained on):

  WORKDIR/tf.txt         whole held-out files, <|endoftext|> between them, until TF_CHARS characters
                         (the teacher-forced text);
  WORKDIR/prefixJ.txt    PREFIXES prompts of PREFIX_CHARS characters, each ending at a line break at a
                         point drawn inside a long held-out file (the free-running prompts).

Prints where each piece comes from and, where the corpus's tokenizer.json lies beside CORPUS_XZ,
the distinct 4-gram share of the file's own next PREDICT (64) tokens after each prompt: how much
the text itself repeats where a free-running run is judged degenerate. The files are taken in an order fixed by a hash of their paths
(mixing the sources), and each cut point from a generator seeded by the file's name: the same
prompts on every machine, whatever model is measured. degeneracy_probe.py and train_tiny_qwen.py
--probe build their prompts with the same functions (from another split, or more of them).
"""
import hashlib
import json
import lzma
import os
import random
import sys


def ordered(records):
    """[(path, "source:path", text)] -> [(sha1 of the path, "source:path", text)], sorted by the hash."""
    return sorted((hashlib.sha1(path.encode()).hexdigest(), name, text) for path, name, text in records)


def load_split(corpus_xz, split="heldout"):
    """ordered() records of one split."""
    records = []
    with lzma.open(corpus_xz, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["split"] == split:
                records.append((r["path"], r["source"] + ":" + r["path"], r["text"]))
    return ordered(records)


def tf_parts(files, tf_chars):
    """[(name, text)]: whole files in order, the last one cut, until tf_chars characters."""
    parts, n = [], 0
    for _, name, text in files:
        if n >= tf_chars:
            break
        parts.append((name, text[:tf_chars - n]))
        n += len(parts[-1][1])
    return parts


def prefixes(files, nprefix, pchars):
    """[(name, start, end, text)]: nprefix prompts of pchars characters ending at a line break, at a
    point drawn inside a file of at least pchars + 1200 characters; the files evenly spread over the
    long ones."""
    long_texts = [(name, t) for _, name, t in files if len(t) >= pchars + 1200]
    out = []
    for j in range(min(nprefix, len(long_texts))):
        name, text = long_texts[j * len(long_texts) // nprefix]
        rng = random.Random("%s:%d" % (name, j))
        cut = text.rfind("\n", pchars, rng.randrange(pchars + 400, len(text) - 400)) + 1
        out.append((name, cut - pchars, cut, text[cut - pchars:cut]))
    return out


def distinct4(ids):
    """Share of distinct 4-grams among ids (draft_summary.py's and degeneracy_probe.py's measure)."""
    grams = [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
    return len(set(grams)) / len(grams) if grams else float("nan")


def main():
    path, work, tf_chars, nprefix, pchars = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    predict = int(sys.argv[6]) if len(sys.argv) > 6 else 64
    tok = None
    tok_path = os.path.join(os.path.dirname(os.path.abspath(path)), "tokenizer.json")
    if os.path.exists(tok_path):
        try:
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(tok_path)
        except ImportError:
            pass
    held = load_split(path)
    texts = {name: text for _, name, text in held}
    parts = tf_parts(held, tf_chars)
    for name, text in parts:
        print("## tf text: %s (%d characters)" % (name, len(text)))
    with open(os.path.join(work, "tf.txt"), "w") as f:
        f.write("<|endoftext|>".join(text for _, text in parts))
    for j, (name, start, end, text) in enumerate(prefixes(held, nprefix, pchars)):
        with open(os.path.join(work, "prefix%d.txt" % j), "w") as f:
            f.write(text)
        own = ""
        if tok is not None:  # the file's next tokens, cut at the same token count as a run's output
            own = "; the text's own next %d tokens: distinct 4-gram share %.3f" % (
                predict, distinct4(tok.encode(texts[name][end:end + 40 * predict]).ids[:predict]))
        print("## prefix%d: characters %d..%d of %s%s" % (j, start, end, name, own))


if __name__ == "__main__":
    main()
