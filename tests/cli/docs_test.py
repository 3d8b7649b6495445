"""The user documentation stands on its own: every relative link in README.md and docs/*.md (and in
the folders' READMEs) names a file of the repository, and no README or docs page points outside the
repository (`../shared`), refers to an issue (`issue 12`) or quotes a commit hash (7-40 hex digits).
History belongs in tools/bench/NOTES.md and git, which this test does not read. The user's guide
(README.md and docs/*.md) also cites no section of a specification (`spec §9`, `spec/attention.md`):
it links the docs page that says the same.

Usage: docs_test.py [--root REPO]   (default: two folders above this file)
"""
import argparse
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*```")
FORBIDDEN = [
    ("a path outside the repository", re.compile(r"\.\./shared")),
    ("an issue reference", re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)),
    # A commit hash: 7-40 hex digits with at least one digit and one letter (so neither a decimal
    # number nor a word such as 'defaced' counts), also inside a file name (`x_20261201_f02b8d1.json`).
    ("a commit hash",
     re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z])")),
]
# Only in the user's guide: README.md at the top and docs/*.md.
USER_GUIDE_FORBIDDEN = [
    ("a specification reference instead of a docs link", re.compile(r"\bspec\s*§|\bspec/[A-Za-z0-9_-]+\.md")),
]
SCIENTIFIC = re.compile(r"[0-9]+e[0-9]+")
SKIP_DIRS = {"third_party", "node_modules", "__pycache__"}


def pages(root):
    """README.md anywhere in the source tree (not build folders or hidden ones) and docs/*.md."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith(".") and not d.startswith("build") and d not in SKIP_DIRS)
        rel = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            if name == "README.md" or (rel == "docs" and name.endswith(".md")):
                found.append(os.path.join(dirpath, name))
    return found


def link_targets(text):
    """(line number, target) of every Markdown link outside fenced code blocks."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for m in LINK.finditer(line):
            yield number, m.group(1)


def is_user_guide(path, root):
    rel = os.path.relpath(path, root)
    return rel == "README.md" or (os.path.dirname(rel) == "docs" and rel.endswith(".md"))


def problems_in(path, text, root):
    out = []
    forbidden = FORBIDDEN + (USER_GUIDE_FORBIDDEN if is_user_guide(path, root) else [])
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in forbidden:
            for m in pattern.finditer(line):
                if SCIENTIFIC.fullmatch(m.group(0)):
                    continue  # a number such as 1979e12, not a hash
                out.append(f"{path}:{number}: {what}: '{m.group(0)}'")
                break
    for number, target in link_targets(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor in the same page
        file_part = target.split("#", 1)[0]
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        if not os.path.exists(resolved):
            out.append(f"{path}:{number}: link to '{target}': {os.path.relpath(resolved, root)} does not exist")
        elif os.path.relpath(resolved, root).startswith(".."):
            out.append(f"{path}:{number}: link to '{target}' leaves the repository")
    return out


def self_check(root):
    """The checks find what they are meant to find: planted lines must each give one problem."""
    planted = {
        "see ../shared/spec/attention.md": 2,  # outside the repository, and a spec reference
        "fixed in Issue 32": 1,
        "measured at 5067397c on the VM": 1,
        "see `results/bench_20261201_f02b8d1.json`": 1,
        "[page](docs/no-such-page.md)": 1,
        "the criteria of spec §9": 1,
        "as spec/attention.md says": 1,
        "the embedding spec, [embedding-spec.md](docs/embedding-spec.md), spec.json": 0,
        "1234567 samples, 64 bytes, 1979e12 FLOP/s, a defaced README, [home](README.md), [web](https://example.org)": 0,
    }
    fake = os.path.join(root, "README.md")
    for line, expected in planted.items():
        got = problems_in(fake, line, root)
        if len(got) != expected:
            return f"self-check: '{line}' gave {len(got)} problems, expected {expected}: {got}"
    folder_readme = os.path.join(root, "sim", "README.md")
    got = problems_in(folder_readme, "the criteria of spec §9", root)
    if got:
        return f"self-check: a folder README's spec reference gave problems: {got}"
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    error = self_check(root)
    if error:
        print(error)
        return 1
    files = pages(root)
    if not any(os.path.relpath(f, root) == "README.md" for f in files):
        print(f"no README.md under {root}")
        return 1
    problems = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            problems += problems_in(path, f.read(), root)
    for p in problems:
        print(p.replace(root + os.sep, ""))
    print(f"{len(files)} pages checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
