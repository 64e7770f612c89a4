"""What each Felix release's source says: its settings, its wire, what its dataplanes read.

Read straight from the source archives of :mod:`testbed.upstream.calico`
(checked against ``SHA256SUMS`` first; no build, no Go): the parity table
(``docs/felix-parity.md``) is generated from these facts and a test holds
the driver's own table (:mod:`dataplane.parity`) to them.

* :attr:`FelixSource.settings`: ``felix/config/config_params.go``'s
  ``Config`` struct, every field with a ``config:"type;default;flags"`` tag:
  the keys Felix's ``ConfigUpdate`` carries, with their defaults.
* :attr:`FelixSource.linux_reads` / :attr:`FelixSource.windows_reads`: the
  settings ``felix/dataplane/driver.go`` (``driver_windows.go``) hands to
  Felix's own Linux (Windows) dataplane, read directly or through a
  ``Config`` method whose body reads them (``FilterAllowAction()`` reads
  ``IptablesFilterAllowAction`` and ``NftablesFilterAllowAction``).
* :attr:`FelixSource.messages`: ``felix/proto/felixbackend.proto``, every
  message reachable from ``ToDataplane`` with its fields.
* :attr:`FelixSource.linux_handles` / :attr:`FelixSource.windows_handles`:
  the ``ToDataplane`` payload types Felix's Linux (Windows) dataplane
  switches on (``case *proto.X`` outside tests).
"""

from __future__ import annotations

import functools
import re
import tarfile
from dataclasses import dataclass, field

from testbed.upstream.calico import Archive, archives

__all__ = ["FelixSource", "Setting", "felix_sources", "go_name"]

CONFIG = "felix/config/config_params.go"
LINUX_DRIVER = "felix/dataplane/driver.go"
WINDOWS_DRIVER = "felix/dataplane/driver_windows.go"
PROTO = "felix/proto/felixbackend.proto"
# Each dataplane's own source: where its ``case *proto.X`` switches are.
PLATFORM_DIRS = {"linux": "felix/dataplane/linux/", "windows": "felix/dataplane/windows/"}

_TAGGED = re.compile(r"^\s+([A-Z]\w*)\s+[^`\n]+`config:\"([^\"]*)\"", re.MULTILINE)
_METHOD = re.compile(r"^func \((\w+) \*Config\) (\w+)\(\)[^{]*\{(.*?)^\}", re.MULTILINE | re.DOTALL)
_HANDLED = re.compile(r"case \*proto\.(\w+)\b")


@dataclass(frozen=True)
class Setting:
    """One key of Felix's configuration: its name, its type and its default."""

    name: str
    kind: str  # the tag's type: bool, int, seconds, oneof(...), iface-list, ...
    default: str


@dataclass(frozen=True)
class FelixSource:
    """The facts of one release's source that the parity table needs."""

    label: str
    settings: dict[str, Setting]
    linux_reads: frozenset[str]
    windows_reads: frozenset[str]
    messages: dict[str, tuple[str, ...]]  # message -> its fields, in the proto's order
    linux_handles: frozenset[str]
    windows_handles: frozenset[str]
    field_types: dict[tuple[str, str], str] = field(default_factory=dict)


def _settings(config_go: str) -> dict[str, Setting]:
    found: dict[str, Setting] = {}
    for name, tag in _TAGGED.findall(config_go):
        kind, _, rest = tag.partition(";")
        default, _, _flags = rest.partition(";")
        found[name] = Setting(name, kind, default)
    return found


def _reads(driver_go: str, config_go: str, settings: dict[str, Setting]) -> frozenset[str]:
    """Settings a driver file reads from ``configParams``, through methods too."""
    methods = {
        name: {key for key in re.findall(rf"\b{receiver}\.(\w+)", body) if key in settings}
        for receiver, name, body in _METHOD.findall(config_go)
    }
    read: set[str] = set()
    for name in set(re.findall(r"\bconfigParams\.(\w+)", driver_go)):
        if name in settings:
            read.add(name)
        else:
            read |= methods.get(name, set())
    return frozenset(read)


def _proto(text: str) -> tuple[dict[str, tuple[str, ...]], dict[tuple[str, str], str]]:
    """Every message's fields (nested messages by their own name); field types."""
    fields: dict[str, list[str]] = {}
    types: dict[tuple[str, str], str] = {}
    stack: list[tuple[str, str]] = []  # (block kind, name)
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        opened = re.match(r"(message|enum|oneof)\s+(\w+)\s*\{", line)
        if opened:
            stack.append((opened[1], opened[2]))
            if opened[1] == "message":
                fields.setdefault(opened[2], [])
            continue
        if line.startswith("}"):
            if stack:
                stack.pop()
            continue
        if not stack or stack[-1][0] == "enum":
            continue
        one = re.match(r"(?:repeated\s+|optional\s+)?(map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+", line)
        if one is None:
            continue
        owner = next(name for kind, name in reversed(stack) if kind == "message")
        fields[owner].append(one[2])
        types[(owner, one[2])] = one[1]
    reachable: dict[str, tuple[str, ...]] = {}
    todo = ["ToDataplane"]
    while todo:
        name = todo.pop()
        if name in reachable or name not in fields:
            continue
        reachable[name] = tuple(fields[name])
        for field_name in fields[name]:
            kind = types[(name, field_name)]
            if kind.startswith("map<"):
                kind = kind[4:-1].split(",")[1].strip()
            todo.append(kind.rsplit(".", 1)[-1])
    return reachable, {k: v for k, v in types.items() if k[0] in reachable}


def go_name(proto_field: str) -> str:
    """The Go field protoc-gen-go makes of a proto field (``ipv4_nets`` -> ``Ipv4Nets``)."""
    return "".join(part[:1].upper() + part[1:] for part in proto_field.split("_"))


def read_archive(item: Archive) -> FelixSource:
    """The facts of one archive (verified against SHA256SUMS first)."""
    item.verify()
    texts: dict[str, str] = {}
    handled: dict[str, set[str]] = {"linux": set(), "windows": set()}
    with tarfile.open(item.path, mode="r|xz") as tar:
        for member in tar:
            path = member.name.split("/", 1)[1] if "/" in member.name else ""
            wanted = path in (CONFIG, LINUX_DRIVER, WINDOWS_DRIVER, PROTO)
            go = path.endswith(".go") and not path.endswith("_test.go")
            platform = next(
                (name for name, folder in PLATFORM_DIRS.items() if go and path.startswith(folder)),
                None,
            )
            if not member.isfile() or not (wanted or platform):
                continue
            extracted = tar.extractfile(member)
            assert extracted is not None
            text = extracted.read().decode()
            if wanted:
                texts[path] = text
            if platform:
                handled[platform] |= set(_HANDLED.findall(text))
    settings = _settings(texts[CONFIG])
    messages, types = _proto(texts[PROTO])
    return FelixSource(
        label=item.label,
        settings=settings,
        linux_reads=_reads(texts[LINUX_DRIVER], texts[CONFIG], settings),
        windows_reads=_reads(texts.get(WINDOWS_DRIVER, ""), texts[CONFIG], settings),
        messages=messages,
        linux_handles=frozenset(handled["linux"]),
        windows_handles=frozenset(handled["windows"]),
        field_types=types,
    )


@functools.cache
def felix_sources() -> tuple[FelixSource, ...]:
    """Every archive's facts, oldest release first (SHA256SUMS's order)."""
    return tuple(read_archive(item) for item in archives())
