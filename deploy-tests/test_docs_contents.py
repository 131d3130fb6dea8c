"""The contents lists at the top of docs/operations.md and docs/deployment.md: each names
every section and subsection in order, and every link into these pages, from the README
or any page of docs/, names a heading they have (GitHub's anchors) or an anchor they set.
And the map of the targets in docs/development.md: every target of Package.swift, each with
its dependencies as Package.swift gives them, every arrow pointing up the map."""

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


def package_targets():
    """{name: [dependencies]} of every target of Package.swift, in its order."""
    text = re.sub(r"//[^\n]*", "", (REPO / "Package.swift").read_text())
    targets = {}
    for match in re.finditer(r'\.(?:target|systemLibrary|executableTarget|testTarget)\(\s*name: "([^"]+)"(.*?)\)\s*,?\n', text, re.S):
        dependencies = re.search(r"dependencies: \[(.*?)\]", match.group(2), re.S)
        assert match.group(1) not in targets, match.group(1)
        targets[match.group(1)] = re.findall(r'"([^"]+)"', dependencies.group(1)) if dependencies else []
    return targets


def target_map():
    """[(name, [dependencies])] of the rows of docs/development.md's map, in its order."""
    lines = (REPO / "docs/development.md").read_text().splitlines()
    start = lines.index("### The targets")
    header = lines.index("| target | holds | depends on |", start)
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith("| "):
            break
        match = re.match(r"^\| `([^`]+)` \| .+ \| (.+) \|$", line)
        assert match, line
        rows.append((match.group(1), re.findall(r"`([^`]+)`", match.group(2))))
    return rows


def test_the_target_map_names_every_target_of_the_package_once_and_no_other():
    names = [name for name, _ in target_map()]
    assert len(names) == len(set(names)), names
    targets = package_targets()
    assert "SIWAStore" in targets and "SIWAServer" not in targets
    assert sorted(names) == sorted(targets)


def test_the_target_map_gives_each_target_its_dependencies_as_package_swift_does():
    targets = package_targets()
    for name, dependencies in target_map():
        assert sorted(dependencies) == sorted(targets.get(name, [])), name


def test_every_arrow_of_the_target_map_points_up_the_map():
    seen = set()
    for name, dependencies in target_map():
        assert set(dependencies) <= seen, (name, set(dependencies) - seen)
        seen.add(name)

