"""docs/architecture.md's module map matches the tree, both ways."""

from __future__ import annotations

import re

from tests.conftest import REPO


def test_module_map_matches_the_tree() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("<!-- module-map:", 1)[1].split("```", 2)[1]
    listed = {m.group(1) for m in re.finditer(r"^(dataplane/\S+\.py)", section, re.M)}
    on_disk = {
        str(p.relative_to(REPO)) for p in (REPO / "dataplane").rglob("*.py") if "_pb" not in p.parts
    }
    assert sorted(on_disk - listed) == [], "modules missing from docs/architecture.md"
    assert sorted(listed - on_disk) == [], "docs/architecture.md lists modules that are gone"
