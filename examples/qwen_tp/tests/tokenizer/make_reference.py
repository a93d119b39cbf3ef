#!/usr/bin/env python3
"""make_reference.py --out DIR: the Hugging Face side of qwen_tokenizer_test's parity check.

Trains a small byte-level BPE with `tokenizers` using Qwen2's pre-tokenizer settings (Split on
Qwen2's regex, Isolated; ByteLevel without its own regex; ByteLevel decoder) on the corpus below
plus a few standard-library sources, adds Qwen's special tokens, and writes DIR/tokenizer.json
(no normalizer) and DIR/tokenizer_nfc.json (Qwen3's NFC normalizer), with DIR/reference.jsonl and
DIR/reference_nfc.jsonl: one {"text", "ids", "decoded", "nfc"} per test text, ids from
tokenizer.encode(text).ids, nfc from unicodedata.normalize. The C++ test encodes the same texts
and compares.
"""
import argparse
import json
import os
import random
import sysconfig
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Hand-written texts: ASCII, contractions, CJK, emoji (ZWJ sequences, skin tones, flags),
# combining marks (decomposed accents, Devanagari, Thai), long whitespace runs, digits, code.
CORPUS = [
    "Hello, world! This is a test.",
    "I'll say it's what they've done; we're sure you'd agree, DON'T YOU? I'M fine. She'S here.",
    "The year 2024 had 366 days; 3.14159 is pi, 1,000,000 is a million, and 0x1F is 31.",
    "1234567890 12 345 6789",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002\u6211\u4eec\u53bb\u516c\u56ed\u5427\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
    "emoji: \U0001F600\U0001F602 \U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7 \u2764\ufe0f",
    "combining: e\u0301te\u0301 cafe\u0301 n\u0303 a\u0308\u0304 Zalgo: Z\u0351\u036b\u0343a\u0358l\u0336g\u0315o",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd",
    "spaces:          ten before, tabs:\t\t\tthree, end   ",
    "lines\n\n\nthree newlines\r\nCRLF\r\n\r\n  \n   indented\n\t\n",
    "    \n        \n    x",
    "                                                                                     ",
    "def f(x):\n    return [i**2 for i in range(x) if i % 3 == 0]  # squares\n\nprint(f(10))\n",
    "int main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : -1;\n}\n",
    "if (a && b || !c) { x += y->z; } else { x <<= 2; } // ok?!...",
    "<html><body class=\"main\">&nbsp;&amp;</body></html>",
    "URL: https://example.com/path?query=1&b=2#frag, mail: a.b@c.org",
    "punctuation runs: !!! ??? ... --- *** ### $$$ %%% ^^^ ((( ))) [[[ ]]]",
    "nbsp:\u00a0here, ideographic space:\u3000there, line sep:\u2028, thin:\u2009x, nel:\u0085y",
    "math: \u2211\u222b\u221e \u00bd \u00b2 \u2460 \u2167 \u0661\u0662\u0663 \u0967\u0968 \uff11\uff12",
    "Greek \u0391\u03b8\u03ae\u03bd\u03b1 Cyrillic \u041c\u043e\u0441\u043a\u0432\u0430 long s: \u017ftop it\u017f",
    "mixed\u4e2d\u6587English\u6df7\u5408123\u6570\u5b57",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve 'LL 'x '",
    "trailing spaces before newline   \nand before the end   ",
    "\n",
    " ",
    "a",
]

# NFC at work: decomposed accents, marks out of canonical order, Hangul jamo, singletons (Angstrom
# sign, Ohm sign), composition exclusions (Devanagari nukta forms, U+0344), a text starting with
# a mark, precomposed forms that must stay.
NFC_TEXTS = [
    "re\u0301sume\u0301 vs r\u00e9sum\u00e9, A\u030a vs \u00c5 vs \u212b, \u2126hm",
    "a\u0323\u0302 a\u0302\u0323 \u1ea1\u0302 Vie\u0323\u0302t Nam \u1ec7",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af \ud55c\uae00 \u1100\u1161 \uac00\u11a8",
    "\u0915\u093c \u0958 \u0344 \u0308\u0301 \u0301starts with a mark",
    "o\u0308\u0304 \u022b \u01d6 u\u0308\u0304 e\u0327\u0306 \u1e1d",
    "\u0041\u030a\u0301 \u01fa \u0390 \u03b9\u0308\u0301",
]

SPECIAL_TEXTS = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more<|endoftext|><|endoftext|>",
    "<think>reasoning</think> answer",
    "<|im_start|<|im_end|>>",
]


def random_texts(n, seed=1234):
    rng = random.Random(seed)
    pieces = ["a", "Z", "the", " ", "  ", "\t", "\n", "\r\n", "'", "'s", "'LL", "7", "42", "!", "?!", ".", ",",
              "\u4e2d", "\u6587", "\u3002", "\U0001F600", "\u200d", "\ufe0f", "\u0301", "e\u0301", "\u00e9",
              "\u00a0", "\u3000", "\u0967", "\u00b2", "_", "-", "(", ")", "{", "}", "#", "\u0928\u094d", "\u017f",
              "\U0001F44D\U0001F3FD", "x", "foo", "Bar", "   ", "\n\n", "$", "\u2028"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def stdlib_text(limit_bytes=400_000):
    """A few standard-library sources, so the vocabulary has code merges (every machine has them)."""
    root = sysconfig.get_paths()["stdlib"]
    chunks, total = [], 0
    for name in ["textwrap.py", "string.py", "json/encoder.py", "json/decoder.py", "heapq.py", "bisect.py",
                 "functools.py", "argparse.py"]:
        path = os.path.join(root, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                chunks.append(f.read())
            total += len(chunks[-1])
            if total > limit_bytes:
                break
    return chunks


def build_tokenizer(train_texts, vocab_size, nfc=False):
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train_texts, trainer=trainer)
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=False)])
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=3000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    texts = CORPUS + random_texts(400) + NFC_TEXTS + SPECIAL_TEXTS + stdlib_text(60_000)[:2]
    train = CORPUS * 20 + stdlib_text()
    for nfc, suffix in ((False, ""), (True, "_nfc")):
        tok = build_tokenizer(train, args.vocab_size, nfc)
        tok.save(os.path.join(args.out, "tokenizer%s.json" % suffix))
        with open(os.path.join(args.out, "reference%s.jsonl" % suffix), "w", encoding="utf-8") as f:
            for t in texts:
                ids = tok.encode(t).ids
                f.write(json.dumps({"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                                    "nfc": unicodedata.normalize("NFC", t)}) + "\n")
    print("[qwen_tokenizer] wrote %s/tokenizer.json and tokenizer_nfc.json (%d tokens each), %d reference texts "
          "(Unicode %s)" % (args.out, tok.get_vocab_size(), len(texts), unicodedata.unidata_version))


if __name__ == "__main__":
    main()
