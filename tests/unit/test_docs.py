"""The documentation: a short README, links that resolve, a self-contained repository, a valid CITATION.cff.

Link targets are checked as files; a `#fragment` pointing into a Markdown file is checked against that
file's headings, slugged as GitHub does (lower case, punctuation dropped, spaces to hyphens, -1, -2 ...
for repeats).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_LIMIT = 12_000  # bytes: a README a newcomer reads in five minutes

# Docs written on other branches at the same time; they exist once those branches are merged.
# The coordinator removes this set after the merge, so that a link to a missing file fails again.
ALLOW_PENDING: set[str] = set()      # docs another branch adds (none now)

# Files outside this repository that nothing in it may point to (split so that this file does not
# match itself).
OUTSIDE = tuple(a + b for a, b in [("papers", ".md"), ("DESIGN", ".md"), ("threads", ".md"),
                                    ("style", ".md"), ("../", "shared")])

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> str:
    """Markdown without fenced code blocks and inline code spans (their brackets are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def is_relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target)  # http:, https:, mailto: ...


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def rel(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def test_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; keep it under {README_LIMIT} (move depth to docs/)"


def test_readme_starts_with_setup_run_and_test() -> None:
    first_block = FENCE.search(README.read_text(encoding="utf-8"))
    assert first_block is not None
    for command in ("make setup", "make run", "make test"):
        assert command in first_block.group(0), f"the README's first code block lacks `{command}`"


@pytest.mark.parametrize("doc", markdown_files(), ids=rel)
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if not is_relative(target):
            continue
        file_part, _, fragment = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc.resolve()
        try:
            name = rel(dest)
        except ValueError:
            broken.append(f"{target} (outside the repository)")
            continue
        if name in ALLOW_PENDING and not dest.exists():
            continue
        if not dest.exists():
            broken.append(f"{target} (no such file: {name})")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target} (no heading '#{fragment}' in {name})")
    assert not broken, f"{rel(doc)}: broken links: {broken}"


def test_readme_maps_every_doc() -> None:
    linked = {rel((ROOT / t.partition("#")[0]).resolve()) for t in links(README) if is_relative(t)}
    docs = {rel(p) for p in DOCS.glob("*.md")} | ALLOW_PENDING
    missing = sorted(docs - linked)
    assert not missing, f"docs not linked from the README's map: {missing}"


def test_slug_follows_github() -> None:
    assert slug("Selection cost: `make fig-selection`") == "selection-cost-make-fig-selection"
    assert slug("How P workers run on one machine (`backend=thread`)") == \
        "how-p-workers-run-on-one-machine-backendthread"
    assert slug("The papers' figures") == "the-papers-figures"


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file() and b"\0" not in path.read_bytes()[:8192]:
            files.append(path)
    return files


def test_no_reference_to_files_outside_the_repository() -> None:
    hits = []
    for path in tracked_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        hits += [f"{rel(path)}: {word}" for word in OUTSIDE if word in text]
    assert not hits, "cite the paper or the released code instead (docs/references.md):\n" + "\n".join(hits)


def test_no_reference_outside_in_docs() -> None:
    """README.md, docs/, LICENSE and CITATION.cff are this branch's: they stand alone already."""
    own = [*markdown_files(), ROOT / "LICENSE", ROOT / "CITATION.cff"]
    hits = [f"{rel(p)}: {w}" for p in own for w in OUTSIDE if w in p.read_text(encoding="utf-8")]
    assert not hits, hits


# The papers reproduced: a fragment of each title.
PAPERS = (
    "Global Top-k Sparsification",                   # gTop-k, ICDCS 2019
    "Convergence Analysis of Distributed SGD",       # IJCAI 2019
    "Understanding Top-k Sparsification",            # arXiv:1911.08772
    "Performance Modeling and Evaluation",           # DataCom 2018
    "DAG Model of Synchronous SGD",                  # arXiv:1805.03812
    "Benchmarking State-of-the-Art Deep Learning",   # DLBench, arXiv:1608.07249
)


def test_citation_cff() -> None:
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    for key in ("cff-version", "message", "title", "authors"):
        assert cff.get(key), f"CITATION.cff lacks {key}"
    assert cff["cff-version"] == "1.2.0"
    assert cff["license"] == "MIT"
    refs = cff.get("references") or []
    for ref in refs:
        assert ref.get("type") and ref.get("title") and ref.get("authors"), ref
    titles = " | ".join(" ".join(str(r["title"]).split()) for r in refs)
    missing = [p for p in PAPERS if p not in titles]
    assert not missing, f"CITATION.cff does not cite: {missing}"
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
