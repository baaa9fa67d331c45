"""The README stays a front page (issue 58): at most 15,000 bytes, one short Status line per capability, each
linking to where its numbers are."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def status_rows() -> list[list[str]]:
    section = README[README.index("## Status"):README.index("\n## ", README.index("## Status") + 1)]
    return [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| [")]


def test_the_readme_is_at_most_15000_bytes():
    assert len(README.encode("utf-8")) <= 15_000


def test_each_status_line_is_short_and_links_to_an_existing_section_file():
    rows = status_rows()
    assert len(rows) >= 10
    for part, state in rows:
        assert len(state) <= 160, part
        target = part[part.index("](") + 2:part.rindex(")")].split("#")[0]
        assert (ROOT / target).is_file(), part
