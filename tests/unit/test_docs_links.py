"""The front door and the manual hold together.

* README.md is a front door: at most 300 lines, and its quickstart is at most 5 commands
  (``tests/integration/test_quickstart.py`` runs them).
* Every relative link in README.md, docs/*.md and bench/README.md names a file that exists, and,
  with ``#anchor``, a heading of that file (GitHub's slug rules: lower case, punctuation dropped,
  spaces to hyphens, ``-1``, ``-2`` for repeats).
* No tracked source or document (``*.py``, ``*.rs``, ``*.go``, ``*.ts``, ``*.md``, scripts and build
  files) cites a tracker issue or a design-note number ("issue 12", "DESIGN-13", "DESIGN D3", a
  bare "(D4)" tag): a reader has neither. They point to a decision record (docs/decisions.md) or a
  doc section, or state the reason. Links to other projects' trackers ("librdkafka#5227",
  ``.../issues/123``) are citations, not history, and stay allowed.
* docs/index.md lists every page of docs/.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", *DOCS, REPO / "bench" / "README.md"]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HISTORY = re.compile(
    r"\b(?i:issues?)\s+#?\d+"  # "issue 12", "Issues #3": this project's tracker
    r"|\bDESIGN\b[\s:-]*D?\d+"  # "DESIGN-13", "DESIGN D3": the design note's numbering
    r"|\(D\d+(?:\s*[-\u2013/,]\s*D?\d+)*[),;:]"  # "(D4)", "(D3, docs/...)", "(D1-D5)": its bare tags
)


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code (links there are not links)."""
    return re.sub(r"`[^`\n]*`", "", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: markup dropped, lower case, punctuation other than ``-`` and ``_``
    removed, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return _LINK.findall(_prose(path.read_text(encoding="utf-8")))


def test_slug_follows_github() -> None:
    assert slug("Three ways to run it, and failover") == "three-ways-to-run-it-and-failover"
    assert slug("Following the audit topic: `bernstein audit follow`") == "following-the-audit-topic-bernstein-audit-follow"
    assert slug("12. The evidence cap: 64 MiB of declared evidence per run") == (
        "12-the-evidence-cap-64-mib-of-declared-evidence-per-run"
    )
    assert slug("How a quote matches a page (`bernstein.quote-normalisation/v1`)") == (
        "how-a-quote-matches-a-page-bernsteinquote-normalisationv1"
    )
    assert slug("Chromium's sandbox and the browser's user") == "chromiums-sandbox-and-the-browsers-user"


def test_the_readme_is_a_front_door() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    block = re.search(r"^## Quickstart\n.*?^```bash\n(.*?)^```", text, re.S | re.M)
    assert block is not None, "README.md has no ```bash block under '## Quickstart'"
    commands = [
        line for line in block.group(1).replace("\\\n", " ").splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    assert 1 <= len(commands) <= 5, commands
    for doc in ("docs/producing.md", "docs/operations.md", "docs/verifier.md", "docs/index.md"):
        assert f"]({doc})" in text, f"README.md does not link {doc}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else resolved}")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    assert broken == [], f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_index_lists_every_page() -> None:
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    listed = {Path(target.partition("#")[0]).name for target in links(REPO / "docs" / "index.md")}
    missing = [page.name for page in DOCS if page.name != "index.md" and page.name not in listed]
    assert missing == [], f"docs/index.md does not list {missing}"
    assert "../bench/README.md" in index


def test_the_link_checker_catches_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [missing](other.md) [bad anchor](#nope) `[code](x.md)`\n", encoding="utf-8")
    assert links(page) == ["#title", "other.md", "#nope"]
    assert anchors(page) == {"title"}


def history_references(text: str) -> list[int]:
    """The numbers of the lines of ``text`` that cite a tracker issue or a design-note number."""
    return [number for number, line in enumerate(text.splitlines(), 1) if _HISTORY.search(line)]


def _tracked_sources() -> list[str]:
    """Every git-tracked source, document, script and build file but the generated data."""
    listed = subprocess.run(
        ["git", "ls-files", "*.py", "*.rs", "*.go", "*.ts", "*.md", "*.sh", "*.toml", "Makefile"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [name for name in listed if not name.startswith(("tests/data/", "schemas/vectors/"))]


def test_nothing_cites_an_issue_or_design_number() -> None:
    """Code, comments, tests and docs alike: a reader of the tree has no tracker and no design note."""
    names = _tracked_sources()
    assert "README.md" in names and "producers/go/config.go" in names and "native/src/facts.rs" in names
    here = Path(__file__).resolve()
    found = [
        f"{name}:{number}"
        for name in names
        if (REPO / name).resolve() != here and (REPO / name).is_file()
        for number in history_references((REPO / name).read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == [], f"cite a decision record (docs/decisions.md) or a doc section, or say the reason instead: {found}"


def test_the_history_check_catches_a_citation() -> None:
    flagged = [
        "fixed in issue 12",
        "see Issue #7",
        "as issues 3 and 4 said",
        "per DESIGN-13",
        "(DESIGN D3, docs/producing.md)",
        "DESIGN D3/D4",
        "configuration from the environment (D4):",
        "descriptions (D3, docs/producing.md)",
        "rules (D1-D5)",
    ]
    allowed = [
        "a librdkafka bug (confluentinc/librdkafka#5227)",
        "https://github.com/apache/kafka/issues/123",
        "the issue is 12 bytes long",
        "the design of the partitioner (docs/producing.md, 'The partitioner')",
        "a 3D view (D)",
        "KIP-679, RFC 8032 and ZIP 215 (decision 22)",
    ]
    assert history_references("\n".join(flagged)) == list(range(1, len(flagged) + 1))
    assert history_references("\n".join(allowed)) == []
