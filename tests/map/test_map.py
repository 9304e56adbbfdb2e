#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_map.py SOURCE_DIR - HACKING.md's map of the tree held to the tree: every entry names a file
# that exists and says what lives there in a whole sentence (brackets and quotes closed, not ending
# on a word that leaves it hanging, not a cut-off start of the file's own opening comment), each
# file's opening comment names the file it opens (the module's name the entry is listed under),
# and in a git checkout every tracked file has an entry (but the data of the fuzz corpora and
# golden fixtures).
import os
import re
import subprocess
import sys

# Words a sentence does not end on: an entry ending on one was cut short.
HANGING = {
    "a", "an", "the", "and", "or", "nor", "but", "of", "to", "by", "with", "without", "when",
    "while", "from", "in", "into", "on", "onto", "for", "its", "their", "as", "that", "which",
    "at", "beside", "than", "is", "are", "be", "if", "so", "not", "no", "per", "every",
    "whose", "who", "where", "after", "before", "until", "through", "over", "under", "between",
    "via", "brings",
}
DATA = ("tests/fuzz/corpus/", "tests/fixtures/golden/")


def entries(hacking):
    """(line number, path, text) of every row of the map's tables."""
    out, in_map = [], False
    with open(hacking, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("## "):
                in_map = line.strip() == "## Map of the tree"
                continue
            m = re.match(r"^\| `([^`]+)` \| (.*) \|$", line.rstrip("\n"))
            if in_map and m:
                out.append((n, m.group(1), m.group(2).strip()))
    return out


def flat(text):
    return re.sub(r"\s+", " ", text).strip()


def opening_comment(path):
    """The first comment of a source file after its SPDX line, flattened, or None."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(8192)
    except (OSError, UnicodeDecodeError):
        return None
    ext = os.path.splitext(path)[1]
    if ext in (".c", ".h"):
        for m in re.finditer(r"/\*(.*?)\*/", text, re.S):
            body = flat(re.sub(r"\n\s*\* ?", " ", m.group(1)))
            if not body.startswith("SPDX-License-Identifier"):
                return body
        return None
    if ext == ".py":
        m = re.search(r'^\s*(?:#[^\n]*\n\s*)*"""(.*?)"""', text, re.S)
        if m:
            return flat(m.group(1))
    lines = []
    for line in text.splitlines()[:30]:
        if line.startswith("#!") or "SPDX-License-Identifier" in line:
            continue
        if line.startswith("#"):
            lines.append(line.lstrip("#").strip())
        elif lines:
            break
    return flat(" ".join(lines)) if lines else None


def whole_sentence(text):
    """Why `text` is not a whole sentence, or None."""
    bare = re.sub(r"`[^`]*`", "CODE", text)
    if text.count("`") % 2:
        return "a code span is not closed"
    for o, c in ("()", "[]", "{}"):
        if bare.count(o) != bare.count(c):
            return f"{o} and {c} do not pair"
    if bare.count('"') % 2:
        return "a quotation is not closed"
    if re.search(r"[,:;(\-]$", bare):
        return "it ends on a comma, colon or dash"
    last = re.findall(r"[A-Za-z'-]+", bare)
    if last and last[-1].lower() in HANGING:
        return f"it ends on '{last[-1]}'"
    return None


def main(src):
    hacking = os.path.join(src, "HACKING.md")
    bad = []
    listed = set()
    for n, path, text in entries(hacking):
        where = f"HACKING.md:{n}: {path}"
        listed.add(path)
        full = os.path.join(src, path)
        if not os.path.exists(full):
            bad.append(f"{where}: no such file")
            continue
        why = whole_sentence(text)
        if why:
            bad.append(f"{where}: not a whole sentence ({why})")
        oc = opening_comment(full)
        if oc is None:
            continue
        name = os.path.basename(path)
        # "name - what it owns", "path - ...", or a docstring that starts with a sentence.
        head = re.match(r"^(\S+) - ", oc)
        if head and os.path.basename(head.group(1)) not in (name, os.path.splitext(name)[0]):
            bad.append(f"{where}: its opening comment names {head.group(1)}")
        entry = flat(re.sub(r"`", "", text)).rstrip(".")
        said = flat(re.sub(r"`", "", oc[head.end():] if head else oc))
        if len(entry) > 20 and said.startswith(entry) and \
                re.match(r" [a-z0-9]", said[len(entry):len(entry) + 2]):
            bad.append(f"{where}: the entry stops where the file's comment goes on "
                       f"(\"...{said[len(entry):len(entry) + 30]}\")")
    try:
        tracked = subprocess.run(["git", "-C", src, "ls-files"], check=True, capture_output=True,
                                 text=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        tracked = []
    for path in tracked:
        if path and not path.startswith(DATA) and path not in listed and \
                os.path.exists(os.path.join(src, path)):
            bad.append(f"HACKING.md: no entry for {path}")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
