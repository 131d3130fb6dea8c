"""The contents lists at the top of docs/operations.md and docs/deployment.md: each names
every section and subsection in order, and every link into these pages, from the README
or any page of docs/, names a heading they have (GitHub's anchors) or an anchor they set."""

import re

import pytest

from deploy_harness import REPO

PAGES = ["docs/operations.md", "docs/deployment.md"]


def slug(title):
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped,
    each space a hyphen."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def headings(text):
    """(level, title, anchor) of each heading outside code blocks; a repeated anchor gets
    -1, -2, ... as on GitHub."""
    found, seen, fenced = [], {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"^(#{1,6}) (.+?)\s*#*\s*$", line)
        if match:
            anchor = slug(match.group(2))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.append((len(match.group(1)), match.group(2), anchor if count == 0 else f"{anchor}-{count}"))
    return found


def contents(text):
    """The (indent level, title, anchor) rows of the list after the `Contents:` line."""
    lines = text.splitlines()
    start = lines.index("Contents:")
    rows = []
    for line in lines[start + 2:]:
        match = re.match(r"^( *)- \[(.+)\]\(#([^)]+)\)$", line)
        if not match:
            break
        rows.append((len(match.group(1)) // 2 + 2, match.group(2), match.group(3)))
    return rows


@pytest.mark.parametrize("page", PAGES)
def test_the_contents_list_names_every_section_in_order(page):
    text = (REPO / page).read_text()
    sections = [heading for heading in headings(text) if heading[0] in (2, 3)]
    assert contents(text) == sections


def test_every_link_into_these_pages_names_one_of_their_headings():
    anchors = {}
    for page in PAGES:
        text = (REPO / page).read_text()
        anchors[page] = {anchor for _, _, anchor in headings(text)} | set(re.findall(r'<a id="([^"]+)"></a>', text))
    sources = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for source in sources:
        for target, anchor in re.findall(r"\]\(([\w./-]*?)#([^)\s]+)\)", source.read_text()):
            page = (source.parent / target).resolve().relative_to(REPO).as_posix() if target else \
                source.relative_to(REPO).as_posix()
            if page in anchors and anchor not in anchors[page]:
                broken.append(f"{source.relative_to(REPO)}: {target}#{anchor}")
    assert broken == []
