"""Reading the kernel's IP sets: ``ipset save`` output parsed into what each set is and holds.

A set's header (type, family, maxelem and any option we never ask for) is
kept apart from its members, so the programmer can tell a set that needs
new members from one that must be recreated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["DEFAULT_MAXELEM", "KernelSet", "SetMeta", "parse_save"]

DEFAULT_MAXELEM = 65536  # what the kernel uses when create names none


@dataclass(frozen=True, slots=True)
class SetMeta:
    """What a set is, as opposed to what it holds.

    ``extras`` are header options we never ask for (timeout, counters,
    comment, ...): a set carrying them is not the set we want.
    """

    type: str
    family: str
    maxelem: int
    extras: tuple[str, ...] = ()

    def create_line(self, name: str) -> str:
        return f"create {name} {self.type} family {self.family} maxelem {self.maxelem}"


@dataclass(slots=True)
class KernelSet:
    meta: SetMeta
    members: set[str]


# Header options followed by a value; every other header word is a flag.
_VALUED = frozenset(
    {"family", "hashsize", "maxelem", "bucketsize", "initval"}
    | {"timeout", "netmask", "bitmask", "markmask", "range", "size"}
)
# Options that do not change what a set matches: the kernel grows hashsize
# by itself, and bucketsize/initval are tuning.
_NEUTRAL = frozenset({"family", "hashsize", "maxelem", "bucketsize", "initval"})


def _parse_header(set_type: str, words: list[str]) -> SetMeta:
    family, maxelem, extras = "inet", DEFAULT_MAXELEM, []
    i = 0
    while i < len(words):
        key = words[i]
        if key in _VALUED and i + 1 < len(words):
            value = words[i + 1]
            i += 2
            if key == "family":
                family = value
            elif key == "maxelem":
                # Unparseable: -1 never equals what we want, so it is rewritten.
                maxelem = int(value) if value.isdigit() else -1
            elif key not in _NEUTRAL:
                extras.append(f"{key} {value}")
        else:
            extras.append(key)
            i += 1
    return SetMeta(set_type, family, maxelem, tuple(sorted(extras)))


def parse_save(
    text: str | Iterable[str], want: Callable[[str], bool] = lambda _name: True
) -> dict[str, KernelSet]:
    """Parse ``ipset save`` output into sets, keeping those ``want`` accepts.

    Tolerant of what the tool may print around the data: blank lines,
    comments, ``COMMIT``, per-member options (``timeout 0 comment "x y"``)
    and unknown lines are skipped; members of an unknown set are dropped.
    """
    sets: dict[str, KernelSet] = {}
    for line in text.splitlines() if isinstance(text, str) else text:
        # At most 4 words: a member's options (a long comment) are not split.
        words = line.split(maxsplit=3)
        if len(words) < 3:
            continue
        verb, name = words[0], words[1]
        if verb == "add":
            found = sets.get(name)
            if found is not None:
                found.members.add(words[2])
        elif verb == "create" and want(name):
            options = words[3].split() if len(words) == 4 else []
            sets[name] = KernelSet(_parse_header(words[2], options), set())
    return sets
