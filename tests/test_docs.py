"""The docs a newcomer reads: the README stays short, and no relative link in the README,
ARCHITECTURE.md or docs/ points at a missing file or heading (the usual casualty of moving
text between pages)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250  # issue 43: read in ten minutes

FENCE = re.compile(r"^```.*?^```[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The page without its code blocks, where `#` starts a comment and `](` is no link."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(_prose(page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    prose = INLINE_CODE.sub("", _prose(page.read_text()))
    return [target for target in LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def test_slug_follows_github():
    assert slug("The UI's run launcher") == "the-uis-run-launcher"
    assert slug("Where \"small\" ends (`bench.executors`)") == "where-small-ends-benchexecutors"
    assert slug("Which messages are trained on (`sft.train_on`)") == "which-messages-are-trained-on-sfttrain_on"
    assert slug("Conversion rules (NeMo Gym → chat)") == "conversion-rules-nemo-gym--chat"


def test_the_readme_is_read_in_ten_minutes():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_every_page_links_somewhere():  # the link finder finds links at all
    assert len(relative_links(ROOT / "README.md")) >= 10


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_earlier_benchmark_rounds_live_in_git_history():
    assert not (ROOT / "docs" / "performance-history.md").exists()
    for page in PAGES:
        assert "performance-history" not in page.read_text(), page.relative_to(ROOT)
