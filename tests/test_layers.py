"""Each platform's parts import only the parts below them (docs/architecture.md).

A part is a package under ``dataplane/linux`` or ``dataplane/windows``;
the modules at a platform's top level (its platform, programmers, reports)
may take from every part. An import across or up the layers fails here,
named, rather than slowly tangling the tree.
"""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO

_LINUX_LOW = {"kernel", "rules", "iptables", "ipsets", "netlink", "nftables", "shaping"}
LAYERS: dict[str, dict[str, set[str]]] = {
    "linux": {
        "kernel": set(),
        "rules": set(),  # the rule model: values only
        "iptables": {"kernel", "rules"},
        "ipsets": {"kernel"},
        "netlink": {"kernel"},
        "shaping": {"kernel"},
        "nftables": {"kernel", "rules"},
        "render": _LINUX_LOW,
        "writers": _LINUX_LOW | {"render"},
    },
    "windows": {
        "hns": set(),
        "view": {"hns"},
        "sim": {"hns"},
        "policy": {"hns", "view"},
        "services": {"hns", "view"},
        "overlay": {"hns", "view", "policy"},
    },
}


def _imported(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("platform", sorted(LAYERS))
def test_imports_only_go_down(platform: str) -> None:
    allowed = LAYERS[platform]
    base = REPO / "dataplane" / platform
    parts = {p.name for p in base.iterdir() if (p / "__init__.py").exists()}
    assert parts == set(allowed), "a part with no place in the layers, or a layer gone"
    wrong = []
    for path in sorted(base.rglob("*.py")):
        inner = path.relative_to(base).parts
        if len(inner) == 1:
            continue  # the platform's top: takes from every part
        part = inner[0]
        for module in sorted(_imported(ast.parse(path.read_text()))):
            prefix = f"dataplane.{platform}."
            if not module.startswith(prefix):
                continue
            target = module.removeprefix(prefix).split(".")[0]
            if target != part and target not in allowed[part]:
                wrong.append(f"{path.relative_to(REPO)} imports {module}")
    assert wrong == []
