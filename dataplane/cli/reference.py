"""``docs/configuration.md``, written from the option table and Felix's keys.

``python -m dataplane.cli.reference > docs/configuration.md`` regenerates it;
a test fails when the committed page differs, so the page cannot go stale.
"""

from __future__ import annotations

import argparse

from dataplane.cli import version
from dataplane.cli.options import GLOBAL_OPTIONS, Option
from dataplane.config import ProtoPort, felix_keys

__all__ = ["markdown"]

_HEAD = """\
# Configuration reference

Generated from the code (`python -m dataplane.cli.reference`); a test
fails when this page is stale.

## Options and variables

Every option below is accepted before the command or after it, and also
read from its variable (Felix starts the driver with no arguments, so
under Felix the variables on the calico-node container are the way). The
command line wins; an empty variable counts as unset; a list is
comma-separated. A value that does not parse is one line naming the
option or variable, the value and what is accepted, and exit 2.

| option | variable | default | accepts | what it does |
| --- | --- | --- | --- | --- |
"""

_FELIX = """
## From Felix (ConfigUpdate)

Felix sends its configuration in `ConfigUpdate`; the driver reads these
keys (case-insensitive, as Felix) and ignores the rest. A key whose value
does not parse is reported in one line and keeps its previous value.

| Felix key | default |
| --- | --- |
"""


def _accepts(option: Option) -> str:
    """What the option accepts, in its reader's own words: the message it
    gives for a value nothing accepts (one source for the error and the page)."""
    if option.choices is not None:
        return ", ".join(f"`{c}`" for c in option.choices) + " (any case)"
    if option.read is None:
        return "text"
    try:
        option.read("\x00")
    except argparse.ArgumentTypeError as exc:
        return str(exc).split(": ", 1)[1].removeprefix("expected ")
    raise AssertionError(f"{option.flag} accepts a NUL byte")


def _default(value: object) -> str:
    if value is None or value == ():
        return "—"
    return f"`{value}`"


def _felix_default(key: str, value: object) -> str:
    """A default as Felix's own configuration would spell it."""
    if value is None or value == ():
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and key.endswith("MarkMask"):
        return f"`{value:#x}`"
    if value == "":
        return "(empty)"
    if isinstance(value, tuple):
        parts = [
            f"{p.protocol}:{p.port}" if isinstance(p, ProtoPort) else ":".join(map(str, p))
            for p in value
        ]
        return f"`{','.join(parts)}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("%%", "%")


def markdown() -> str:
    rows = [
        f"| `{o.flag}` | `{o.env}` | {_default(o.default)} | {_cell(_accepts(o))} |"
        f" {_cell(o.help)} |"
        for o in GLOBAL_OPTIONS
    ]
    keys = [
        f"| `{key}` | {_felix_default(key, default)} |" for key, _field, default in felix_keys()
    ]
    alone = (
        "\nWith no variable, and before any command: `--version` ("
        + version.FLAG_HELP
        + ", then exit 0) and `--help`.\n"
    )
    return _HEAD + "\n".join(rows) + "\n" + alone + _FELIX + "\n".join(keys) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
