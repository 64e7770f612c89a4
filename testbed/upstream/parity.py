"""docs/felix-parity.md: each Felix setting, what Felix's dataplanes and this driver do with it.

Generated from the source archives' facts (:mod:`testbed.upstream.felix_source`)
and the driver's own table (:mod:`dataplane.felix_settings`, the keys
:mod:`dataplane.config` reads)::

    python -m testbed.upstream.parity            # print it
    python -m testbed.upstream.parity --write    # write docs/felix-parity.md

``tests/test_felix_parity.py`` fails when the file is not what this
prints, or when a release has a key a dataplane of Felix's reads that the
driver's table does not name.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dataplane.config import felix_keys
from dataplane.felix_fields import FIELDS
from dataplane.felix_settings import (
    BPF,
    DRIVER_KEYS,
    WIREGUARD,
    Disposition,
    Honoured,
    NotForPlatform,
    NotNeeded,
    Refused,
    disposition,
)
from testbed.upstream.felix_source import FelixSource, Setting, felix_sources

__all__ = ["DOC", "render"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "felix-parity.md"


def release_order(label: str) -> tuple[int, ...]:
    """Oldest first: tags and branches by their version, master last."""
    if label.startswith("master"):
        return (999,)
    return tuple(int(part) for part in label.lstrip("v").split("-")[0].split("."))


def _releases(key: str, sources: Sequence[FelixSource]) -> str:
    having = [key in s.settings for s in sources]
    if all(having):
        return "all"
    first, last = having.index(True), len(having) - 1 - having[::-1].index(True)
    if all(having[first : last + 1]):
        if last == len(having) - 1:
            return f"from {sources[first].label}"
        if first == 0:
            return f"to {sources[last].label}"
    return ", ".join(s.label for s, has in zip(sources, having, strict=True) if has)


def _default(key: str, sources: Sequence[FelixSource]) -> str:
    defaults: list[str] = []
    for s in sources:
        setting: Setting | None = s.settings.get(key)
        if setting is not None and setting.default not in defaults:
            defaults.append(setting.default)
    return " / ".join(f"`{d}`" if d else "(empty)" for d in defaults)


def _felix(key: str, sources: Sequence[FelixSource]) -> str:
    linux = any(key in s.linux_reads for s in sources)
    windows = any(key in s.windows_reads for s in sources)
    return {(True, True): "Linux, Windows", (True, False): "Linux", (False, True): "Windows"}.get(
        (linux, windows), "none"
    )


def _described(found: Disposition | None) -> tuple[str, str] | None:
    if isinstance(found, Honoured):
        return "honoured", f"`{found.proof}`" + (f"; {found.note}" if found.note else "")
    if isinstance(found, NotForPlatform):
        return "not for this platform", found.why
    if isinstance(found, NotNeeded):
        return "not needed", found.why
    if isinstance(found, Refused):
        return "refused", found.why
    return None


def _ours(key: str, honoured: set[str]) -> tuple[str, str]:
    described = _described(disposition(key))
    if described is not None:
        return described
    if key in honoured:  # read, but its proof not named yet: the test says so
        return "honoured", "(no test named)"
    return "Felix's own", ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _payload_type(source: FelixSource, payload: str) -> str:
    kind = source.field_types.get(("ToDataplane", payload), "")
    return kind.rsplit(".", 1)[-1]


def _messages(sources: Sequence[FelixSource]) -> list[str]:
    """The messages section: Felix's handling of each payload, then every field."""
    payloads: dict[str, list[str]] = {}
    for s in sources:
        for payload in s.messages.get("ToDataplane", ()):
            payloads.setdefault(payload, [])
    lines = [
        "| payload | releases | Felix's Linux dataplane | Felix's Windows dataplane |",
        "| --- | --- | --- | --- |",
    ]
    for payload in payloads:
        having = [s for s in sources if payload in s.messages.get("ToDataplane", ())]
        kind = _payload_type(having[-1], payload)
        linux = any(_payload_type(s, payload) in s.linux_handles for s in having)
        windows = any(_payload_type(s, payload) in s.windows_handles for s in having)
        releases = "all" if len(having) == len(sources) else ", ".join(s.label for s in having)
        if not kind[:1].isupper():  # a scalar (sequence_number), not a message
            linux_text = windows_text = "—"
        else:
            linux_text = "switches on it" if linux else "does not"
            windows_text = "switches on it" if windows else "does not"
        lines.append(f"| `{payload}` | {releases} | {linux_text} | {windows_text} |")
    lines += [
        "",
        "And every field of every message, grouped where one entry covers several:",
        "",
        "| message | fields | this driver | why, or the test |",
        "| --- | --- | --- | --- |",
    ]
    names: dict[str, list[str]] = {}
    for s in sources:
        for message, fields in s.messages.items():
            for name in fields:
                if name not in names.setdefault(message, []):
                    names[message].append(name)
    for message in sorted(names, key=lambda m: (m != "ToDataplane", m)):
        groups: dict[int, tuple[Disposition | None, list[str]]] = {}
        for name in names[message]:
            found = FIELDS.get(message, {}).get(name)
            groups.setdefault(id(found), (found, []))[1].append(name)
        for found, grouped in groups.values():
            ours, why = _described(found) or ("not named", "")
            listed = ", ".join(f"`{f}`" for f in grouped)
            lines.append(f"| `{message}` | {listed} | {ours} | {_cell(why)} |")
    return lines


def render(sources: Sequence[FelixSource]) -> str:
    """The whole document."""
    sources = sorted(sources, key=lambda s: release_order(s.label))
    labels = ", ".join(s.label for s in sources)
    honoured = {key for key, _field, _default in felix_keys()}
    keys = sorted(set().union(*(s.settings for s in sources)))
    rows: list[str] = []
    own: list[str] = []
    families: dict[str, list[str]] = {"bpf": [], "wireguard": []}
    counts: dict[str, int] = {}
    for key in keys:
        ours, why = _ours(key, honoured)
        felix = _felix(key, sources)
        if ours == "Felix's own" and felix == "none":
            own.append(key)
            continue
        counts[ours] = counts.get(ours, 0) + 1
        found = disposition(key)
        if found is BPF or found is WIREGUARD:
            families["bpf" if found is BPF else "wireguard"].append(key)
            continue
        rows.append(
            f"| `{key}` | {_releases(key, sources)} | {_cell(_default(key, sources))} | {felix}"
            f" | {ours} | {_cell(why)} |"
        )
    summary = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    extra = ", ".join(f"`{k}`" for k in sorted(DRIVER_KEYS))
    return "\n".join(
        [
            "# Felix's settings and messages: what Felix's dataplanes do, what this driver does",
            "",
            "Generated by `python -m testbed.upstream.parity --write` from the Calico source",
            f"archives in `../shared/upstream/` ({labels}) and the driver's own table",
            "(`dataplane/felix_settings.py`); `tests/test_felix_parity.py` fails when this",
            "file is stale or a release has a key a dataplane of Felix's reads that the",
            "driver's table does not name. Do not edit it by hand.",
            "",
            "*Felix's dataplanes* says which of Felix's own dataplanes is handed the key:",
            "`felix/dataplane/driver.go` (Linux) or `driver_windows.go` (Windows) reads it,",
            "directly or through a `Config` method. *This driver*:",
            "",
            "* **honoured**: it acts on the key as Felix does; the test that proves it;",
            "* **not for this platform**: the key belongs to a part of Felix the driver is",
            "  not (the eBPF dataplane, WireGuard, XDP, Felix's own process), or only tunes",
            "  a feature refused elsewhere;",
            "* **not needed**: what the key tunes, the driver does another way;",
            "* **refused**: Felix's Linux dataplane acts on it and the driver does not. Sent",
            "  with any value but Felix's default (or the harmless values the entry names),",
            "  it is one WARNING line when it arrives (`seq=N config[Key]='value' refused:",
            "  why`) and a `setting` record in error in `show`, with the same reason; the",
            "  node is programmed as with the default.",
            "",
            f"In all: {summary}.",
            "",
            "| key | releases | Felix's default | Felix's dataplanes | this driver"
            " | why, or the test |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
            "## The eBPF dataplane's and WireGuard's",
            "",
            f"Not for this platform: {BPF.why}. Refused with a value that",
            "matters only as `BPFEnabled` (above); every other key of that dataplane only",
            "tunes it:",
            "",
            ", ".join(f"`{k}`" for k in families["bpf"]) + ".",
            "",
            f"Not for this platform: {WIREGUARD.why}. Refused with a value",
            "that matters only as `WireguardEnabled` and `WireguardEnabledV6` (above); the",
            "others only tune it:",
            "",
            ", ".join(f"`{k}`" for k in families["wireguard"]) + ".",
            "",
            "## Felix's own",
            "",
            "No dataplane of Felix's is handed these (its datastore and Typha, its own",
            "logging, health, metrics and usage reports, the calculation graph's inputs,",
            "flow logs); Felix acts on them before anything reaches a driver, and this",
            "driver has nothing to do with them:",
            "",
            ", ".join(f"`{k}`" for k in own) + ".",
            "",
            "## Messages",
            "",
            "Which `ToDataplane` payloads Felix's own dataplanes switch on (`case",
            "*proto.X` in `felix/dataplane/linux/` and `felix/dataplane/windows/`, tests",
            "aside); what this driver does with each field is in the table after it",
            "(`dataplane/felix_fields.py`). A message carrying a refused field is",
            "programmed without it; the first one is a WARNING line (`seq=N",
            "kind.path refused: why`) and a `field` record in error in `show`.",
            "",
            *_messages(sources),
            "",
            "## The driver's own keys",
            "",
            "Read by this driver, in no Felix release's `config_params.go` (set them in",
            f"FelixConfiguration or the environment as any other key): {extra}.",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {DOC.name}")
    args = parser.parse_args(argv)
    text = render(felix_sources())
    if args.write:
        DOC.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
