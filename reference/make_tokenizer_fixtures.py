"""Builds the tokenizer parity fixtures under tests/fixtures/tokenizer/ (see docs/tokenizer.md).

Two modes, both using the PyPI `tokenizers` library as the oracle:

  dsv3   A DeepSeek-V3-style tokenizer.json (the V3 pre-tokenizer: three regex Splits + ByteLevel
         without regex, ByteLevel decoder, the V4 special tokens) whose BPE vocabulary (2000) is
         trained by `tokenizers` on a generated mixed corpus (OR problem text, GMPL / Python code,
         numbers, Unicode incl. CJK / emoji / accents, whitespace runs). Writes
           dsv3_style.tokenizer.json, corpus.txt (the training corpus), test_strings.jsonl and
           dsv3_style.expected.jsonl ({"text", "ids", "decoded", "decoded_no_skip"} per string).
         Also writes v4_ids.tokenizer.json: a hand-built vocabulary that reproduces the spec §5
         worked example with the real V4 special-token ids, checked here against `tokenizers`.
  trex   Trains a tokenizer with `trex tokenizer train` on corpus.txt, loads it with `tokenizers`
         and writes trex_trained.tokenizer.json + trex_trained.expected.jsonl (ids from Python).
         It also checks that `trex tokenizer encode` agrees with Python on every test string.

  unicode  Regenerates src/trex/io/tokenizer_unicode_tables.cpp: the Unicode general category
         of every code point as sorted [first, last, category] ranges (from Python's
         unicodedata; unassigned code points, Cn, are left out).

Usage:
  /work/wt-oracle/reference/.venv/bin/python reference/make_tokenizer_fixtures.py unicode
  /work/wt-oracle/reference/.venv/bin/python reference/make_tokenizer_fixtures.py dsv3
  /work/wt-oracle/reference/.venv/bin/python reference/make_tokenizer_fixtures.py trex --trex build/trex
"""

import argparse
import json
import pathlib
import random
import subprocess
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tokenizer"

SPECIAL_TOKENS = [
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜▁pad▁｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<think>",
    "</think>",
]

# The DeepSeek-V3 tokenizer.json pre-tokenizer patterns (JSON-decoded).
DSV3_PATTERNS = [
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]

WORKED_EXAMPLE = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>"
WORKED_EXAMPLE_IDS = [128803, 30594, 128804, 128821, 36101, 128822, 7624, 1]


def make_corpus(seed: int = 7) -> str:
    rng = random.Random(seed)
    items = ["chairs", "tables", "desks", "widgets", "gadgets", "bolts", "panels", "crates"]
    verbs = ["produces", "manufactures", "assembles", "ships", "packs"]
    res = ["labor", "wood", "steel", "machine time", "storage", "paint"]
    lines = []
    for _ in range(400):
        a, b = rng.sample(items, 2)
        r1, r2 = rng.sample(res, 2)
        p1, p2 = rng.randint(2, 950), rng.randint(2, 950)
        lines.append(
            f"A factory {rng.choice(verbs)} {a} and {b}. Each unit of {a} yields a profit of "
            f"${p1}.{rng.randint(0, 99):02d} and each unit of {b} yields ${p2}. Producing one {a} "
            f"needs {rng.randint(1, 12)} hours of {r1} and {rng.randint(1, 30)} kg of {r2}; "
            f"at most {rng.randint(100, 250000)} hours are available. Maximize total profit."
        )
        n = rng.randint(2, 5)
        vals = " ".join(str(rng.randint(0, 99999)) for _ in range(n))
        lines.append(
            "set P;\nparam profit{p in P} >= 0;\nvar x{p in P} >= 0, integer;\n"
            "maximize z: sum{p in P} profit[p] * x[p];\n"
            f"s.t. cap{{r in R}}: sum{{p in P}} use[r,p] * x[p] <= avail[r];\n"
            f"data;\nparam avail := {vals};\nend;\n"
        )
        lines.append(
            "def solve(model):\n    for i in range(%d):\n        x[i] = model.addVar(lb=0.0, "
            "ub=%d.%d, name=f\"x_{i}\")\n    model.setObjective(quicksum(c[i] * x[i] for i in I))\n"
            "\treturn model.optimize()  # TODO: check status == 'OPTIMAL'\n"
            % (rng.randint(1, 999), rng.randint(1, 9999), rng.randint(0, 9))
        )
        lines.append(
            rng.choice(
                [
                    "工厂生产桌子和椅子，每张桌子利润为%d元。请建立线性规划模型。" % rng.randint(1, 500),
                    "最大化利润：目标函数为 %d x + %d y，约束条件如下。" % (rng.randint(1, 99), rng.randint(1, 99)),
                    "ひらがなとカタカナ：モデルを最適化します。コストは%d円です。" % rng.randint(100, 9999),
                    "Café naïve résumé — coût: %d €, Größe ≤ %d, déjà vu!" % (rng.randint(1, 99), rng.randint(1, 999)),
                    "Emoji 🚀🔥 test 👩‍💻 done ✅ (%d%%)" % rng.randint(0, 100),
                    "Σ_{i=1}^{n} x_i ≤ %d ∀ i ∈ I; α=%d.%d, β≥0" % (rng.randint(1, 50), rng.randint(0, 9), rng.randint(0, 99)),
                    "    indented   text\twith\t\ttabs   and    runs    \n\n\n   ",
                    "Он решает задачу оптимизации за %d секунд." % rng.randint(1, 60),
                    "I'm sure they'll say it's FINE, we've CHECKED it, they'd agree; DON'T worry.",
                    "Phone: +1-555-%04d, date 2024-%02d-%02d, pi=3.14159265358979" % (rng.randint(0, 9999), rng.randint(1, 12), rng.randint(1, 28)),
                ]
            )
        )
    return "\n".join(lines) + "\n"


TEST_STRINGS = [
    "",
    "Hello world",
    "Hello, world! How are you?",
    "A factory produces chairs and tables. Each chair yields a profit of $45.50.",
    "Maximize 3x + 4y subject to x + y <= 10, x >= 0.",
    "1234567890",
    "x1=2 y22=333 z4444=55555",
    "3.14159 and 2,718,281 and 1e-10 and -0.5",
    "I'm you're he's we've they'll she'd DON'T It'S",
    "set P;\nparam c{p in P};\nvar x{p in P} >= 0;\nmaximize z: sum{p in P} c[p]*x[p];\n",
    "def f(x):\n    return x ** 2  # square\n\n\nprint(f(3))\n",
    "\tTabs\t\tand    spaces   \n  \n\n   trailing   ",
    "   leading spaces",
    "line1\r\nline2\rline3\n\n\nline4",
    "工厂生产桌子和椅子，每张桌子利润为30元。",
    "你好世界Hello世界123",
    "ひらがなカタカナ漢字まじり文、テスト。",
    "한국어 텍스트 처리",
    "Café naïve résumé coöperate",
    "e\u0301 combining accent and a\u0308\u0304 two marks",
    "Emoji 🚀🔥 👩‍💻 ✅ 🇺🇸",
    "Σ x_i ≤ 100 ∀ i ∈ I; α=0.5, β≥0 → ∞",
    "Math: ² ³ ½ Ⅻ ٣٤٥ ১২৩",
    "Currency: $100 €200 £300 ¥400 ₹500",
    "Punctuation!!! ??? ... --- (((nested))) [a][b] {c} \"quoted\" 'single'",
    "!abc ?Def .xyz ,Q @user #tag",
    "nbsp\u00a0here ideographic\u3000space line\u2028sep zero\u200bwidth",
    "Мир оптимизации: решение за 12 секунд.",
    "مرحبا بالعالم 123",
    "हिन्दी पाठ परीक्षण",
    "<｜User｜>What is 2+2?<｜Assistant｜></think>4<｜end▁of▁sentence｜>",
    WORKED_EXAMPLE,
    "<｜begin▁of▁sentence｜><｜User｜>Solve it.<｜Assistant｜><think>Think.</think>Done.<｜end▁of▁sentence｜>",
    "partial <｜User and <think without close and </think",
    "<think><think></think></think>",
    "text<｜▁pad▁｜><｜▁pad▁｜>more",
    "   \n",
    " ",
    "\n",
    "a",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "                                                            x",
    "0000000 00 0",
    "x_1 + x_2 + ... + x_10 <= 1000000",
    "param demand := 1 120 2 340 3 560;",
    "The optimal value is 12345.678.",
    "混合mixed文本text数字123と日本語テキスト",
    "tab\tseparated\tvalues\t1\t2\t3",
    "UPPER lower MiXeD CamelCaseWord snake_case_word kebab-case-word",
    "URL: https://example.com/path?q=1&r=2#frag",
    "😀😃😄😁",
    "\u0000\u0001\u001f control \u007f chars",
]


# Characters the random (fuzz) strings are drawn from: every class the V3 patterns distinguish.
FUZZ_POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " \t\n\r\x0b\x0c\u00a0\u3000\u2028\u0085\u2003",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "，。、！？：；「」（）《》—…·‘’“”",
    "°±×÷€£¥©®™∑∏√∞≤≥≠∈∀∃→←↑↓♠♥",
    "²³½¼Ⅻⅳ٣٤٥０１２①②",
    "你好世界工厂生产利润模型约束条件龥一",
    "ひらがなカタカナーゟ゠ヿ",
    "한국어텍스트",
    "éèêëàâäôöûüçñßÉÀÖ",
    "αβγδΣΩπλмирдом",
    "\u0301\u0308\u0304\u064b\u093f",
    "🚀🔥✅😀👩\u200d💻",
    "\u200b\u200e\u00ad\ufeff",
    "'s 're 've 'll 'd 'm 't",
]


def fuzz_strings(n: int = 400, seed: int = 11):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pools = rng.sample(FUZZ_POOLS, rng.randint(1, 4))
        length = rng.randint(1, 40)
        out.append("".join(rng.choice(rng.choice(pools)) for _ in range(length)))
    return out


def ids_digest(id_lists) -> str:
    """FNV-1a (64-bit) over the ids as little-endian int32, each list followed by -1."""
    h = 0xCBF29CE484222325
    for ids in id_lists:
        for v in list(ids) + [-1]:
            for byte in (v & 0xFFFFFFFF).to_bytes(4, "little"):
                h ^= byte
                h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def dsv3_tokenizer(vocab_size: int, corpus: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DSV3_PATTERNS]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus.splitlines(keepends=True), trainer=trainer)
    return tok


def expected_rows(tok: Tokenizer, strings):
    rows = []
    for s in strings:
        ids = tok.encode(s).ids
        rows.append(
            {
                "text": s,
                "ids": ids,
                "decoded": tok.decode(ids),
                "decoded_no_skip": tok.decode(ids, skip_special_tokens=False),
            }
        )
    return rows


def write_jsonl(path: pathlib.Path, rows):
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def v4_ids_tokenizer() -> dict:
    """A vocabulary that gives the spec §5 worked example its real V4 ids.

    `tokenizers` ignores the "id" of an added token that is not in the model vocabulary (it
    assigns the next free id), so the special tokens are also entries of model.vocab."""
    byte_chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: 1000 + i for i, c in enumerate(byte_chars)}

    def bl(s: str) -> str:
        table = {}
        for b in list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)):
            table[b] = chr(b)
        n = 0
        for b in range(256):
            if b not in table:
                table[b] = chr(256 + n)
                n += 1
        return "".join(table[b] for b in s.encode("utf-8"))

    merges = []
    next_id = 2000
    for word, final_id in [("你好", 30594), ("推理", 36101), ("答案", 7624)]:
        pieces = list(bl(word))
        while len(pieces) > 1:
            a, b = pieces[0], pieces[1]
            merged = a + b
            merges.append([a, b])
            if merged not in vocab:
                vocab[merged] = final_id if len(pieces) == 2 else next_id
                next_id += 1
            pieces = [merged] + pieces[2:]
    specials = {
        "<｜begin▁of▁sentence｜>": 0,
        "<｜end▁of▁sentence｜>": 1,
        "<｜▁pad▁｜>": 2,
        "<｜User｜>": 128803,
        "<｜Assistant｜>": 128804,
        "<think>": 128821,
        "</think>": 128822,
    }
    vocab.update(specials)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for c, i in specials.items()
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}
                for p in DSV3_PATTERNS
            ]
            + [{"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": vocab,
            # The "a b" string form (the list form is used by dsv3_style.tokenizer.json).
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }


def mode_dsv3():
    OUT.mkdir(parents=True, exist_ok=True)
    corpus = make_corpus()
    (OUT / "corpus.txt").write_text(corpus, encoding="utf-8")
    tok = dsv3_tokenizer(2000, corpus)
    tok.save(str(OUT / "dsv3_style.tokenizer.json"), pretty=False)
    write_jsonl(OUT / "test_strings.jsonl", [{"text": s} for s in TEST_STRINGS])
    write_jsonl(OUT / "dsv3_style.expected.jsonl", expected_rows(tok, TEST_STRINGS))
    write_jsonl(OUT / "dsv3_style.fuzz.jsonl",
                [{"text": s, "ids": tok.encode(s).ids} for s in fuzz_strings()])
    # The whole training corpus, line by line, as a digest (the ids themselves would be large).
    lines = corpus.splitlines(keepends=True)
    encodings = [e.ids for e in tok.encode_batch(lines)]
    digest = {"lines": len(lines), "tokens": sum(len(e) for e in encodings), "fnv1a64": ids_digest(encodings)}
    (OUT / "dsv3_style.corpus_digest.json").write_text(json.dumps(digest) + "\n")

    # A stress test of the merge order: the same tokenizer with 4000 random extra merges (some
    # spelling a token that another pair already makes), corpus digest from Python.
    doc = json.loads(tok.to_str())
    rng = random.Random(5)
    vocab, merges = doc["model"]["vocab"], [list(m) for m in doc["model"]["merges"]]
    tokens = [t for t in vocab if t not in SPECIAL_TOKENS]
    next_id = max(vocab.values()) + 1
    added = 0
    while added < 4000:
        a, b = rng.choice(tokens), rng.choice(tokens)
        if len(a) + len(b) > 10 or [a, b] in merges[-50:]:
            continue
        if a + b in vocab:
            if rng.random() < 0.2:
                merges.append([a, b])
            continue
        vocab[a + b] = next_id
        next_id += 1
        tokens.append(a + b)
        merges.append([a, b])
        added += 1
    doc["model"]["merges"] = merges
    text = json.dumps(doc, ensure_ascii=False)
    (OUT / "random_merges.tokenizer.json").write_text(text, encoding="utf-8")
    rtok = Tokenizer.from_str(text)
    encodings = [e.ids for e in rtok.encode_batch(lines)] + [rtok.encode(s).ids for s in fuzz_strings()]
    digest = {"lines": len(lines), "fuzz": len(fuzz_strings()), "tokens": sum(len(e) for e in encodings),
              "fnv1a64": ids_digest(encodings)}
    (OUT / "random_merges.digest.json").write_text(json.dumps(digest) + "\n")

    v4 = v4_ids_tokenizer()
    text = json.dumps(v4, ensure_ascii=False)
    (OUT / "v4_ids.tokenizer.json").write_text(text, encoding="utf-8")
    ids = Tokenizer.from_str(text).encode(WORKED_EXAMPLE).ids
    assert ids == WORKED_EXAMPLE_IDS, ids
    print(f"dsv3: vocab {tok.get_vocab_size()}, corpus {len(corpus.encode())} bytes, "
          f"{len(TEST_STRINGS)} test strings; worked example ids {ids}")


def mode_trex(trex: str, vocab_size: int):
    corpus_path = OUT / "corpus.txt"
    out = OUT / "trex_trained.tokenizer.json"
    subprocess.run([trex, "tokenizer", "train", "--corpus", str(corpus_path), "--vocab-size",
                    str(vocab_size), "--out", str(out)], check=True)
    tok = Tokenizer.from_file(str(out))
    rows = expected_rows(tok, TEST_STRINGS)
    write_jsonl(OUT / "trex_trained.expected.jsonl", rows)
    # T-Rex's own encoder on the same strings (CLI, one JSON list per line).
    res = subprocess.run([trex, "tokenizer", "encode", "--tokenizer", str(out), "--input",
                          str(OUT / "test_strings.jsonl"), "--jsonl"], check=True,
                         capture_output=True, text=True)
    trex_ids = [json.loads(line)["ids"] for line in res.stdout.splitlines()]
    bad = [r["text"] for r, t in zip(rows, trex_ids) if r["ids"] != t]
    assert len(trex_ids) == len(rows), (len(trex_ids), len(rows))
    # The training corpus, line by line, too.
    lines = corpus_path.read_text(encoding="utf-8").splitlines(keepends=True)
    tmp = OUT.parent / "_corpus_lines.jsonl"
    write_jsonl(tmp, [{"text": s} for s in lines])
    res = subprocess.run([trex, "tokenizer", "encode", "--tokenizer", str(out), "--input", str(tmp),
                          "--jsonl"], check=True, capture_output=True, text=True)
    tmp.unlink()
    corpus_trex = [json.loads(line)["ids"] for line in res.stdout.splitlines()]
    corpus_py = [e.ids for e in tok.encode_batch(lines)]
    bad_corpus = sum(1 for a, b in zip(corpus_trex, corpus_py) if a != b)
    print(f"trex: vocab {tok.get_vocab_size()}; test strings mismatching: {len(bad)}; "
          f"corpus lines mismatching: {bad_corpus} of {len(lines)}")
    if bad or bad_corpus or len(corpus_trex) != len(lines):
        print("MISMATCH", bad[:5])
        sys.exit(1)


CATEGORIES = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
              "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs",
              "Co", "Cn"]


def mode_unicode():
    import unicodedata

    ranges = []
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat == "Cn":
            continue
        if ranges and ranges[-1][2] == cat and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, cat])
    path = pathlib.Path(__file__).resolve().parent.parent / "src/trex/io/tokenizer_unicode_tables.cpp"
    out = [
        "// Generated by reference/make_tokenizer_fixtures.py unicode -- do not edit.",
        f"// Unicode {unicodedata.unidata_version} general categories as sorted, disjoint code point",
        "// ranges; code points in no range are unassigned (Cn).",
        '#include "trex/io/tokenizer_regex.hpp"',
        "",
        "namespace trex::io::unicode {",
        "",
        "// clang-format off",
        f"const CategoryRange kCategoryRanges[] = {{",
    ]
    for a, b, c in ranges:
        out.append(f"    {{0x{a:X}, 0x{b:X}, Category::{c}}},")
    out += ["};", "// clang-format on", "const std::size_t kCategoryRangeCount = sizeof(kCategoryRanges) / sizeof(kCategoryRanges[0]);",
            "", "}  // namespace trex::io::unicode", ""]
    path.write_text("\n".join(out), encoding="utf-8")
    print(f"unicode {unicodedata.unidata_version}: {len(ranges)} ranges -> {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["dsv3", "trex", "unicode"])
    ap.add_argument("--trex", default="build/trex")
    ap.add_argument("--vocab-size", type=int, default=1000)
    args = ap.parse_args()
    if args.mode == "unicode":
        mode_unicode()
    elif args.mode == "dsv3":
        mode_dsv3()
    else:
        mode_trex(args.trex, args.vocab_size)


if __name__ == "__main__":
    main()
