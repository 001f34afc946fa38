#!/usr/bin/env python3
"""tok-hf.py: gridlm's tokenizer against Hugging Face `tokenizers`, token
for token.  Run by t/tok-hf.t; prints TAP.

Tokenizers are trained here by `tokenizers` itself (GPT-2 style: ByteLevel
with its regex; Llama-3 style: Split with the real Llama-3 regex, then
ByteLevel without regex, ignore_merges, a TemplateProcessing that adds
<|begin_of_text|>), saved as tokenizer.json, and both encoders are run on a
broad set of strings.  Invalid UTF-8 is compared as bytes: gridlm gets the
raw bytes, Hugging Face the str that bytes.decode("utf-8", "replace")
gives.  With GRIDLM_PREP set, a tokenizer.json written by
`gridlm-prep --train-tokenizer` must load in Hugging Face and encode
identically there and in gridlm.
"""
import json
import os
import random
import subprocess
import sys

from tokenizers import Tokenizer, Regex, AddedToken, models, pre_tokenizers, decoders, trainers, processors

WORK = sys.argv[1]
ENCODE = sys.argv[2]
PREP = sys.argv[3] if len(sys.argv) > 3 else ""
os.makedirs(WORK, exist_ok=True)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")

n_test = 0
failed = 0


def ok(cond, name, diag=None):
    global n_test, failed
    n_test += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (n_test, name))
    if not cond:
        failed += 1
        if diag:
            for line in str(diag).splitlines():
                print("# " + line)
    sys.stdout.flush()


rng = random.Random(20240611)

WORDS = ("the of and to in is was for on that with as by at from his her it an were are which this be "
         "or has had not but first one their its new after who they have two been other year also she "
         "can't won't I'm you're we've they'll he'd it's Don't DON'T IT'S naïve café résumé Straße "
         "über Ångström façade piñata cœur déjà Москва Київ привет мир Ελληνικά γλώσσα "
         "日本語 中文字符 汉字测试 한국어 東京都 北京市 こんにちは カタカナ ひらがな "
         "العربية עברית हिन्दी ภาษาไทย ქართული Հայերեն "
         "function return while for if else struct int32_t printf x86_64 foo_bar fooBar "
         "3.14159 42 1,000,000 2024-06-11 0x1F 1e-9 12345678901234567890 ½ ² ①  ٣ ๕").split()
PUNCT = list(".,;:!?-—–…\"'()[]{}<>/\\|@#$%^&*_+=~`") + ["...", "!!", "?!", "--", "''", "\"\"", "->", "=>", "::"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u2009", "\u3000", "\u0085",
          "\u2028", "\u200b", "\u180e", "\u000b", "\u000c", " " * 17, "\t\t", "\n   \n"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🤖", "✨", "🎉🎉", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𐍈"]


def random_text(n):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.55:
            w = rng.choice(WORDS)
            if rng.random() < 0.2:
                w = w.capitalize() if rng.random() < 0.5 else w.upper()
            out.append(w)
        elif r < 0.7:
            out.append(rng.choice(PUNCT))
        elif r < 0.8:
            out.append(str(rng.randrange(0, 10 ** rng.randrange(1, 12))))
        elif r < 0.85:
            out.append(rng.choice(EMOJI))
        else:
            out.append(rng.choice(SPACES))
        out.append(" " if rng.random() < 0.8 else "")
    return "".join(out)


def corpus():
    return [random_text(rng.randrange(5, 80)) for _ in range(3000)]


TRICKY = [
    "", " ", "  ", "a", " a", "a ", "Hello world", "Hello  world", "Hello\tworld\n",
    "   leading", "trailing   ", " " * 100, "\n" * 50, "\t \t \n \r\n", " " * 1000 + "x",
    "a" + " " * 257 + "b", "x" * 5000, "ab" * 3000, "1234567890" * 20, "3.14159265358979",
    "1,234,567.89", "year 2024 and 1999", "12345", "123 4567 89",
    "I'm can't won't shouldn't y'all 'tis", "I'M CAN'T WON'T", "'s 'S 'll 'LL", "don’t (curly)",
    "日本語のテキスト", "中文，标点。", "汉字 汉字", "한국어 텍스트", "Ελληνικά κείμενο",
    "Здравствуй, мир!", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "😀😀😀", "👨‍👩‍👧‍👦 family", "flag 🇯🇵🇺🇸", "e\u0301 combining", "A\u030a\u0323",
    "\u00a0nbsp\u00a0", "thin\u2009space", "ideo\u3000space", "nel\u0085line", "ls\u2028ps\u2029",
    "zwsp\u200bzwj\u200d", "mongolian\u180evs", "bom\ufeffhere", "\u0000nul\u0000", "ctrl\x01\x02\x7f",
    "<|endoftext|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", " <|endoftext|> ",
    "<|endoftext|", "<|begin_of_text|>hi", "x<|end_of_text|>y<|reserved_special_token_0|>z",
    "<|reserved_special_token_0|><|reserved_special_token_01|>",
    "def f(x):\n    return x ** 2  # square\n", "if (a && b) { c++; }\r\n",
    "https://example.com/path?q=1&r=2#frag", "user@example.org", "C:\\Windows\\System32",
    "ſ K ﬀ İ ß ΐ", "ǅ ǈ ǋ", "𝐀𝐁𝐂 𝟏𝟐𝟑", "①②③ ⅠⅡⅢ ½¾", "٣٤٥ ๑๒๓ ߁", "\U0010ffff\U000e0001",
    "   \n\n\n   text   \n\n", "....!!!???", "------", "=====\n=====", "a.b,c;d:e",
]


def check_tokenizer(name, tok, path, texts, special):
    recs = os.path.join(WORK, name + ".rec")
    with open(recs, "wb") as f:
        for t in texts:
            b = t if isinstance(t, bytes) else t.encode("utf-8")
            f.write(b"%d\n" % len(b))
            f.write(b)
    args = [ENCODE, path, recs] + (["--special"] if special else [])
    out = subprocess.run(args, capture_output=True, check=False)
    if out.returncode != 0:
        ok(False, "%s: tok-encode runs" % name, out.stderr.decode(errors="replace"))
        return
    lines = out.stdout.decode().split("\n")
    bad = []
    for i, t in enumerate(texts):
        s = t.decode("utf-8", "replace") if isinstance(t, bytes) else t
        want = tok.encode(s, add_special_tokens=special).ids
        got = [int(x) for x in lines[i].split()] if lines[i] else []
        if got != want:
            bad.append((t, want, got))
    diag = "\n".join("text %r\n  hf     %s\n  gridlm %s" % (t[:200] if isinstance(t, (str, bytes)) else t, w[:40], g[:40])
                     for t, w, g in bad[:5])
    ok(not bad, "%s: %d texts encode exactly as Hugging Face (%d differ)" % (name, len(texts), len(bad)), diag)


def train_gpt2_style(texts, prefix_space=False):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, tr)
    return tok


def train_llama3_style(texts):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + ["<|reserved_special_token_%d|>" % i for i in range(4)]
    tr = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=specials,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, tr)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def main():
    texts = corpus()
    held_out = [random_text(rng.randrange(1, 200)) for _ in range(1500)]
    cases = TRICKY + held_out

    gpt2 = train_gpt2_style(texts)
    p = os.path.join(WORK, "gpt2.json")
    gpt2.save(p)
    check_tokenizer("gpt2-style", gpt2, p, cases, False)

    # GPT-2's own file pair (vocab.json + merges.txt), as Megatron's
    # GPT2BPETokenizer reads it.
    files = gpt2.model.save(WORK, "gpt2")
    vocab = [f for f in files if f.endswith("vocab.json")][0]
    merges = [f for f in files if f.endswith("merges.txt")][0]
    check_tokenizer("GPT2BPETokenizer (vocab.json + merges.txt)", gpt2, vocab + ":" + merges, cases, False)

    gpt2p = train_gpt2_style(texts, prefix_space=True)
    gpt2p.add_tokens([AddedToken("<tool>", lstrip=True, rstrip=True), AddedToken("word", single_word=True),
                      AddedToken("ｱ", normalized=True)])
    p2 = os.path.join(WORK, "gpt2-prefix.json")
    gpt2p.save(p2)
    extra = ["x <tool>  y", "<tool>", "  <tool>\n", "a<tool>b", "word words sword word.", "wordword",
             " word ", "ｱｱ ｱ", "<tool><tool>  <tool>"]
    check_tokenizer("gpt2-style, prefix space, added tokens", gpt2p, p2, cases[:400] + extra, False)

    llama = train_llama3_style(texts)
    p3 = os.path.join(WORK, "llama3.json")
    llama.save(p3)
    check_tokenizer("llama3-style", llama, p3, cases, False)
    check_tokenizer("llama3-style with special tokens", llama, p3, cases[:300], True)

    # Invalid UTF-8: each case as raw bytes.
    inval = [b"\xff", b"abc\xffdef", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(", b"\xf0\x9f\x98",
             b"\xed\xa0\x80", b"\xc0\xaf", b"\xf5\x80\x80\x80", b"\xf4\x90\x80\x80", b"\x80\x80\x80",
             b"ok \xfe\xfe ok", b"\xe0\x80\x80", b"caf\xe9", b" \xa0\xa1 ", b"\xf0\x90\x80",
             "日本".encode() + b"\x88" + "語".encode(), b"x" * 10 + b"\xc2" + b" " * 10]
    check_tokenizer("invalid UTF-8 (gpt2-style)", gpt2, p, inval, False)
    check_tokenizer("invalid UTF-8 (llama3-style)", llama, p3, inval, False)

    # Decoding: ids back to the bytes of the text.
    recs = os.path.join(WORK, "dec.rec")
    sample = cases[:200]
    with open(recs, "wb") as f:
        for t in sample:
            b = t.encode()
            f.write(b"%d\n" % len(b) + b)
    out = subprocess.run([ENCODE, p, recs, "--decode"], capture_output=True)
    lines = out.stdout.decode().split("\n")
    bad = [t for i, t in enumerate(sample) if bytes.fromhex(lines[i]) != t.encode()]
    ok(out.returncode == 0 and not bad, "decode(encode(text)) == text for %d texts" % len(sample),
       "\n".join(repr(t) for t in bad[:5]))

    if PREP:
        trained_dir = os.path.join(WORK, "trained")
        corpus_path = os.path.join(WORK, "train.jsonl")
        with open(corpus_path, "w") as f:
            for t in texts:
                f.write(json.dumps({"text": t}) + "\n")
        r = subprocess.run([PREP, "--train-tokenizer", "--input", corpus_path, "--vocab-size", "2000",
                            "--output", os.path.join(trained_dir, "tokenizer.json")],
                           capture_output=True)
        ok(r.returncode == 0, "gridlm-prep --train-tokenizer runs", r.stderr.decode(errors="replace"))
        if r.returncode == 0:
            try:
                hf = Tokenizer.from_file(os.path.join(trained_dir, "tokenizer.json"))
                ok(True, "Hugging Face loads gridlm's tokenizer.json")
                ok(hf.get_vocab_size() == 2000, "trained vocabulary has 2000 entries (%d)" % hf.get_vocab_size())
                check_tokenizer("gridlm-trained tokenizer", hf, trained_dir, cases, False)
                # BPE training is deterministic and follows Hugging Face's
                # algorithm: on the same corpus both make the same merges.
                ids = hf.encode(" ".join(texts[:50])).ids
                ok(len(ids) < len(" ".join(texts[:50]).encode()) / 2.0,
                   "trained tokenizer compresses its corpus more than 2x (%d tokens)" % len(ids))
            except Exception as e:  # noqa: BLE001
                ok(False, "Hugging Face loads gridlm's tokenizer.json", str(e))

    print("1..%d" % n_test)
    sys.exit(1 if failed else 0)


main()
