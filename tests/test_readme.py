"""The README stays a read of minutes, and its links and the docs' lead somewhere."""

from __future__ import annotations

import re

from tests.conftest import REPO

MAX_WORDS = 3000  # issue 40: what a newcomer reads in minutes; the rest is in docs/


def test_the_readme_is_short() -> None:
    words = len((REPO / "README.md").read_text().split())  # as wc -w counts
    assert words <= MAX_WORDS, f"README.md has {words} words; move detail to docs/"


def test_every_relative_link_points_at_a_file() -> None:
    pages = [REPO / "README.md", REPO / "deploy" / "README.md", *(REPO / "docs").glob("*.md")]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, broken
