"""FakeIPSet: the ``ipset`` command-line tool over an in-memory kernel.

It is a :class:`~dataplane.linux.kernel.cmd.CommandRunner` that only knows
``ipset``, and it models the semantics the programmer relies on, as ipset
v7.17 on Linux 6.x behaves (the contract suite runs the same tests against
both, which is what keeps this honest):

- sets have a type (hash:ip, hash:net, hash:ip,port), a family and a
  ``maxelem``; ``hashsize`` is accepted and ignored; other header options
  (``counters``, ``timeout N``, ...) are kept and printed;
- members are checked against type and family and stored in the kernel's
  spelling: hash:net clears host bits, prints a full-length prefix as a bare
  address and refuses /0; addresses print as ``inet_ntop`` does;
- ``create`` of an existing set fails, with ``-exist`` only if the header
  differs (hashsize excepted); ``add`` of a present / ``del`` of an absent
  member fails without ``-exist``; ``destroy`` of a missing set fails
  without ``-exist``, of a referenced set (see ``in_use``) always;
- ``swap`` needs both sets with equal type and family;
- ``restore`` runs line by line and stops at the first error, reporting
  ``Error in line N``; what ran before stays applied.

Fault switch: with ``fail_restores = N`` the next N restores apply only the
first half of their commands and then fail, as the real tool can leave an
unknown prefix of a failed script applied.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandResult

__all__ = ["FakeIPSet", "FakeSet"]

_VERSION = "ipset v7.17"
_FAMILIES = {"inet": socket.AF_INET, "inet6": socket.AF_INET6}
_BITS = {"inet": 32, "inet6": 128}
_REVISIONS = {"hash:ip": 6, "hash:net": 7, "hash:ip,port": 7}
_PROTOCOLS = frozenset({"tcp", "udp", "sctp", "udplite"})
_VALUED = frozenset({"family", "hashsize", "maxelem", "timeout", "netmask", "bucketsize"})
_FLAGS = frozenset({"counters", "comment", "skbinfo", "forceadd"})
_ALIASES = {
    "-N": "create", "n": "create", "-A": "add", "-D": "del", "-X": "destroy", "x": "destroy",
    "-F": "flush", "-W": "swap", "-E": "rename", "e": "rename", "-L": "list", "-S": "save",
    "-R": "restore",
}  # fmt: skip


class _Error(Exception):
    """An error the real tool would print after ``ipset vX.Y: ``."""


@dataclass(slots=True)
class FakeSet:
    type: str
    family: str
    maxelem: int
    extras: tuple[str, ...] = ()
    members: dict[str, None] = field(default_factory=dict)  # ordered, like a listing

    def header(self) -> str:
        extras = "".join(f" {extra}" for extra in self.extras)
        return (
            f"family {self.family} hashsize 1024 maxelem {self.maxelem}{extras}"
            " bucketsize 12 initval 0x00000000"
        )


def _address(text: str, family: str) -> tuple[str, bytes]:
    try:
        packed = socket.inet_pton(_FAMILIES[family], text)
    except (OSError, ValueError):
        version = "IPv4" if family == "inet" else "IPv6"
        raise _Error(
            f"Syntax error: cannot parse {text}: resolving to {version} address failed"
        ) from None
    return socket.inet_ntop(_FAMILIES[family], packed), packed


def _element(set_type: str, family: str, text: str) -> str:
    """The kernel's spelling of ``text`` as a member of such a set."""
    bits = _BITS[family]
    if set_type == "hash:ip,port":
        address_text, comma, proto_port = text.partition(",")
        if not comma:
            raise _Error(f"Syntax error: cannot parse {text}: missing port")
        protocol, colon, port_text = proto_port.rpartition(":")
        protocol = protocol if colon else "tcp"
        if protocol not in _PROTOCOLS or not port_text.isdigit() or int(port_text) > 65535:
            raise _Error(f"Syntax error: cannot parse {proto_port} as a port")
        return f"{_address(address_text, family)[0]},{protocol}:{int(port_text)}"
    address_text, slash, length_text = text.partition("/")
    address, packed = _address(address_text, family)
    if not slash:
        return address
    if not length_text.isdigit() or int(length_text) > bits:
        raise _Error(f"Syntax error: cannot parse {text}")
    length = int(length_text)
    if set_type == "hash:ip":
        if length != bits:  # the real tool expands IPv4 ranges; nothing here needs that
            raise _Error(f"fake: CIDR {text} in hash:ip is not modelled")
        return address
    if length == 0:
        raise _Error("The value of the CIDR parameter of the IP address is invalid")
    value = int.from_bytes(packed, "big") & ~((1 << (bits - length)) - 1)
    network = socket.inet_ntop(_FAMILIES[family], value.to_bytes(bits // 8, "big"))
    return network if length == bits else f"{network}/{length}"


class FakeIPSet:
    """In-memory kernel IP sets behind the ``ipset`` command line.

    Attributes:
        sets: the kernel's sets by name, in creation order.
        in_use: names a (pretend) iptables rule references: not destroyable.
        fail_restores: the next this-many restores half-apply, then fail.
        restores: every restore script received, in order.
    """

    def __init__(self) -> None:
        self.sets: dict[str, FakeSet] = {}
        self.in_use: set[str] = set()
        self.fail_restores = 0
        self.restores: list[str] = []

    def snapshot(self) -> dict[str, tuple[str, str, frozenset[str]]]:
        """name → (type, family, members): the state tests compare."""
        return {name: (s.type, s.family, frozenset(s.members)) for name, s in self.sets.items()}

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        if not argv or argv[0] != "ipset":
            raise ProgrammingError(f"{argv[0] if argv else '?'}: cannot run: not in this fake")
        result = self._main(list(argv[1:]), (stdin or b"").decode())
        if check and result.returncode != 0:
            raise ProgrammingError(
                f"{' '.join(argv[:3])}: exit {result.returncode}: "
                + result.stderr.decode().strip().replace("\n", " | ")[:500]
            )
        return result

    # -- the command line -------------------------------------------------------

    def _main(self, args: list[str], stdin: str) -> CommandResult:
        flags = {a for a in args if a.startswith("-") and a not in _ALIASES}
        words = [_ALIASES.get(a, a) for a in args if a not in flags]
        exist = bool(flags & {"-exist", "-!"})
        out: list[str] = []
        try:
            if not words:
                raise _Error("Syntax error: no command specified")
            command, rest = words[0], words[1:]
            if command == "restore":
                return self._restore(stdin, exist)
            if command == "list":
                self._list(rest, flags, out)
            elif command == "save":
                self._save(rest, out)
            elif command == "version":
                out.append(f"{_VERSION}, protocol version: 7")
            else:
                self._command(command, rest, exist)
        except _Error as exc:
            return CommandResult(1, b"", f"{_VERSION}: {exc}\n".encode())
        return CommandResult(0, "".join(out).encode(), b"")

    def _restore(self, script: str, exist: bool) -> CommandResult:
        self.restores.append(script)
        lines = script.splitlines()
        stop_before = None
        if self.fail_restores > 0:
            self.fail_restores -= 1
            stop_before = len(lines) // 2 + 1
        for number, line in enumerate(lines, 1):
            if number == stop_before:
                return CommandResult(
                    1, b"", f"{_VERSION}: Error in line {number}: fault\n".encode()
                )
            words = line.split()
            if not words or words[0].startswith("#") or words[0] == "COMMIT":
                continue
            try:
                command = _ALIASES.get(words[0], words[0])
                if command in ("list", "save", "restore", "version"):
                    raise _Error(f"Syntax error: {command} is not allowed in restore")
                self._command(command, words[1:], exist)
            except _Error as exc:
                return CommandResult(
                    1, b"", f"{_VERSION}: Error in line {number}: {exc}\n".encode()
                )
        if stop_before is not None:  # a script too short to cut still fails
            return CommandResult(1, b"", f"{_VERSION}: Error in line 1: fault\n".encode())
        return CommandResult(0, b"", b"")

    def _get(self, name: str) -> FakeSet:
        found = self.sets.get(name)
        if found is None:
            raise _Error("The set with the given name does not exist")
        return found

    def _command(self, command: str, args: list[str], exist: bool) -> None:
        if command == "create" and len(args) >= 2:
            self._create(args[0], args[1], args[2:], exist)
        elif command in ("add", "del") and len(args) >= 2:
            target = self._get(args[0])
            member = _element(target.type, target.family, args[1])
            if command == "add":
                if member in target.members:
                    if not exist:
                        raise _Error("Element cannot be added to the set: it's already added")
                elif len(target.members) >= target.maxelem:
                    raise _Error("Hash is full, cannot add more elements")
                else:
                    target.members[member] = None
            elif member in target.members:
                del target.members[member]
            elif not exist:
                raise _Error("Element cannot be deleted from the set: it's not added")
        elif command == "destroy":
            self._destroy(args[:1], exist)
        elif command == "flush":
            for target in [self._get(args[0])] if args else list(self.sets.values()):
                target.members.clear()
        elif command == "swap" and len(args) == 2:
            first, second = self._get(args[0]), self._get(args[1])
            if (first.type, first.family) != (second.type, second.family):
                raise _Error("The sets cannot be swapped: their type does not match")
            self.sets[args[0]], self.sets[args[1]] = second, first
        elif command == "rename" and len(args) == 2:
            target = self._get(args[0])
            if args[1] in self.sets:
                raise _Error("Set cannot be renamed: a set with the new name already exists")
            if args[0] in self.in_use:
                raise _Error("Set cannot be renamed: it is in use by a kernel component")
            del self.sets[args[0]]
            self.sets[args[1]] = target
        else:
            raise _Error(f"Syntax error: cannot parse command {command} {' '.join(args)}")

    def _create(self, name: str, set_type: str, options: list[str], exist: bool) -> None:
        if len(name) > 31:
            raise _Error(f"Syntax error: setname '{name}' is longer than 31 characters")
        if set_type not in _REVISIONS:
            raise _Error(f"Syntax error: typename '{set_type}' is unknown")
        family, maxelem, extras = "inet", 65536, []
        i = 0
        while i < len(options):
            key = options[i]
            if key in _VALUED and i + 1 < len(options):
                value = options[i + 1]
                if key == "family":
                    if value not in _FAMILIES:
                        raise _Error(f"Syntax error: unknown family {value}")
                    family = value
                elif key == "maxelem":
                    maxelem = int(value)
                elif key != "hashsize":
                    extras.append(f"{key} {value}")
                i += 2
            elif key in _FLAGS:
                extras.append(key)
                i += 1
            else:
                raise _Error(f"Syntax error: unknown argument {key}")
        new = FakeSet(set_type, family, maxelem, tuple(extras))
        old = self.sets.get(name)
        if old is not None:
            same = (old.type, old.family, old.maxelem, old.extras) == (
                new.type,
                new.family,
                new.maxelem,
                new.extras,
            )
            if not (exist and same):
                raise _Error("Set cannot be created: set with the same name already exists")
            return
        self.sets[name] = new

    def _destroy(self, names: list[str], exist: bool) -> None:
        if not names:  # destroy everything that is not referenced
            if self.in_use & self.sets.keys():
                raise _Error("Set cannot be destroyed: it is in use by a kernel component")
            self.sets.clear()
            return
        name = names[0]
        if name not in self.sets:
            if not exist:
                raise _Error("The set with the given name does not exist")
            return
        if name in self.in_use:
            raise _Error("Set cannot be destroyed: it is in use by a kernel component")
        del self.sets[name]

    # -- output ---------------------------------------------------------------------

    def _selected(self, names: list[str]) -> list[tuple[str, FakeSet]]:
        if names:
            return [(names[0], self._get(names[0]))]
        return list(self.sets.items())

    def _list(self, names: list[str], flags: set[str], out: list[str]) -> None:
        if flags & {"-n", "-name"}:
            out.extend(f"{name}\n" for name, _ in self._selected(names))
            return
        blocks = []
        for name, s in self._selected(names):
            lines = [
                f"Name: {name}",
                f"Type: {s.type}",
                f"Revision: {_REVISIONS[s.type]}",
                f"Header: {s.header()}",
                f"Size in memory: {200 + 64 * len(s.members)}",
                f"References: {int(name in self.in_use)}",
                f"Number of entries: {len(s.members)}",
            ]
            if not flags & {"-t", "-terse"}:
                lines.append("Members:")
                lines.extend(s.members)
            blocks.append("\n".join(lines) + "\n")
        out.append("\n".join(blocks))

    def _save(self, names: list[str], out: list[str]) -> None:
        for name, s in self._selected(names):
            out.append(f"create {name} {s.type} {s.header()}\n")
            out.extend(f"add {name} {member}\n" for member in s.members)
