"""Print a wire-facts-only transcription of a Felix ``felixbackend.proto``.

Usage::

    python scripts/transcribe_felix_proto.py PATH/TO/felixbackend.proto \
        --tag v3.32.1 [--note "extra header line"]... > tests/felix_releases/v3_32.proto

The input is compiled with ``grpc_tools.protoc`` into a ``FileDescriptorSet``
and the output is printed from that descriptor alone, so nothing of the
source text (comments, layout, file options) is carried over: only package,
message, enum, field and service names, numbers, types, labels, oneofs, maps
and reserved numbers and names. The output is a plain proto3 file that
compiles to a structurally identical descriptor (``--check`` verifies this).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from google.protobuf import descriptor_pb2 as d

_FDP = d.FieldDescriptorProto

_SCALAR_NAMES: dict[int, str] = {
    _FDP.TYPE_DOUBLE: "double",
    _FDP.TYPE_FLOAT: "float",
    _FDP.TYPE_INT64: "int64",
    _FDP.TYPE_UINT64: "uint64",
    _FDP.TYPE_INT32: "int32",
    _FDP.TYPE_FIXED64: "fixed64",
    _FDP.TYPE_FIXED32: "fixed32",
    _FDP.TYPE_BOOL: "bool",
    _FDP.TYPE_STRING: "string",
    _FDP.TYPE_BYTES: "bytes",
    _FDP.TYPE_UINT32: "uint32",
    _FDP.TYPE_SFIXED32: "sfixed32",
    _FDP.TYPE_SFIXED64: "sfixed64",
    _FDP.TYPE_SINT32: "sint32",
    _FDP.TYPE_SINT64: "sint64",
}

_INDENT = "  "


def compile_proto(proto: Path) -> d.FileDescriptorSet:
    """Compile ``proto`` (imports resolved beside it) into a FileDescriptorSet."""
    proto = proto.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        argv = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto.parent}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            str(proto),
        ]
        if subprocess.run(argv, check=False).returncode != 0:
            raise SystemExit(f"protoc failed on {proto}")
        fds = d.FileDescriptorSet()
        fds.ParseFromString(out.read_bytes())
        return fds


def _main_file(fds: d.FileDescriptorSet, proto: Path) -> d.FileDescriptorProto:
    for f in fds.file:
        if f.name == proto.name:
            return f
    raise SystemExit(f"{proto.name} not found in compiled descriptor set")


def _reserved_numbers(ranges: Sequence[tuple[int, int]]) -> str:
    """Format inclusive ``(start, end)`` ranges as a proto ``reserved`` list."""
    parts = [str(a) if a == b else f"{a} to {b}" for a, b in ranges]
    return ", ".join(parts)


def _reserved_names(names: Sequence[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


class _Printer:
    def __init__(self, file: d.FileDescriptorProto) -> None:
        self.package = file.package
        # Full names (no leading dot) of every message, for map-entry lookup
        # and for checking that a shortened type name resolves correctly.
        self.messages: dict[str, d.DescriptorProto] = {}
        self.enums: set[str] = set()
        prefix = f"{file.package}." if file.package else ""
        for m in file.message_type:
            self._index(prefix + m.name, m)
        for e in file.enum_type:
            self.enums.add(prefix + e.name)
        self.lines: list[str] = []

    def _index(self, full: str, msg: d.DescriptorProto) -> None:
        self.messages[full] = msg
        for n in msg.nested_type:
            self._index(f"{full}.{n.name}", n)
        for e in msg.enum_type:
            self.enums.add(f"{full}.{e.name}")

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(f"{_INDENT * depth}{text}" if text else "")

    def _type_ref(self, type_name: str, scope: str) -> str:
        """Shortest spelling of ``type_name`` that protoc resolves back to it from ``scope``."""
        full = type_name.lstrip(".")
        pkg = f"{self.package}." if self.package else ""
        if not full.startswith(pkg):
            return type_name
        rel = full[len(pkg) :]
        first = rel.split(".", 1)[0]
        # protoc resolves the first component from the innermost scope outwards.
        parts = scope.split(".") if scope else []
        for i in range(len(parts), -1, -1):
            candidate = ".".join([*parts[:i], first])
            if candidate in self.messages or candidate in self.enums:
                resolved = ".".join([*parts[:i], rel])
                return rel if resolved == full else type_name
        return type_name

    def _field_type(self, f: d.FieldDescriptorProto, scope: str) -> str:
        if f.type in (_FDP.TYPE_MESSAGE, _FDP.TYPE_ENUM, _FDP.TYPE_GROUP):
            return self._type_ref(f.type_name, scope)
        return _SCALAR_NAMES[f.type]

    def _map_entry(self, f: d.FieldDescriptorProto) -> d.DescriptorProto | None:
        if f.type != _FDP.TYPE_MESSAGE or f.label != _FDP.LABEL_REPEATED:
            return None
        entry = self.messages.get(f.type_name.lstrip("."))
        if entry is not None and entry.options.map_entry:
            return entry
        return None

    def _field_line(self, f: d.FieldDescriptorProto, scope: str) -> str:
        entry = self._map_entry(f)
        if entry is not None:
            key, value = entry.field[0], entry.field[1]
            kv = f"{self._field_type(key, scope)}, {self._field_type(value, scope)}"
            return f"map<{kv}> {f.name} = {f.number};"
        label = ""
        if f.label == _FDP.LABEL_REPEATED:
            label = "repeated "
        elif f.proto3_optional:
            label = "optional "
        suffix = " [deprecated = true]" if f.options.deprecated else ""
        return f"{label}{self._field_type(f, scope)} {f.name} = {f.number}{suffix};"

    def enum(self, e: d.EnumDescriptorProto, depth: int) -> None:
        self.emit(depth, f"enum {e.name} {{")
        if e.options.allow_alias:
            self.emit(depth + 1, "option allow_alias = true;")
        for v in e.value:
            self.emit(depth + 1, f"{v.name} = {v.number};")
        if e.reserved_range:
            nums = _reserved_numbers([(r.start, r.end) for r in e.reserved_range])
            self.emit(depth + 1, f"reserved {nums};")
        if e.reserved_name:
            self.emit(depth + 1, f"reserved {_reserved_names(e.reserved_name)};")
        self.emit(depth, "}")

    def message(self, m: d.DescriptorProto, scope: str, depth: int) -> None:
        full = f"{scope}.{m.name}" if scope else m.name
        self.emit(depth, f"message {m.name} {{")
        inner = depth + 1
        start = len(self.lines)
        for e in m.enum_type:
            self.enum(e, inner)
        for n in m.nested_type:
            if not n.options.map_entry:
                self.message(n, full, inner)
        emitted_oneofs: set[int] = set()
        for f in m.field:
            real_oneof = f.HasField("oneof_index") and not f.proto3_optional
            if not real_oneof:
                self.emit(inner, self._field_line(f, full))
                continue
            idx = f.oneof_index
            if idx in emitted_oneofs:
                continue
            emitted_oneofs.add(idx)
            self.emit(inner, f"oneof {m.oneof_decl[idx].name} {{")
            for g in m.field:
                if g.HasField("oneof_index") and g.oneof_index == idx and not g.proto3_optional:
                    self.emit(inner + 1, self._field_line(g, full))
            self.emit(inner, "}")
        if m.reserved_range:
            # DescriptorProto reserved ranges are end-exclusive.
            nums = _reserved_numbers([(r.start, r.end - 1) for r in m.reserved_range])
            self.emit(inner, f"reserved {nums};")
        if m.reserved_name:
            self.emit(inner, f"reserved {_reserved_names(m.reserved_name)};")
        if len(self.lines) == start:
            self.lines[-1] += "}"
        else:
            self.emit(depth, "}")

    def service(self, s: d.ServiceDescriptorProto) -> None:
        self.emit(0, f"service {s.name} {{")
        for meth in s.method:
            arg = ("stream " if meth.client_streaming else "") + self._type_ref(
                meth.input_type, self.package
            )
            ret = ("stream " if meth.server_streaming else "") + self._type_ref(
                meth.output_type, self.package
            )
            self.emit(1, f"rpc {meth.name}({arg}) returns ({ret});")
        self.emit(0, "}")


def transcribe(file: d.FileDescriptorProto, header: Sequence[str]) -> str:
    """Render ``file`` as proto3 source with ``header`` as its leading comment lines."""
    if file.syntax != "proto3":
        raise SystemExit(f"only proto3 files are supported, got syntax {file.syntax!r}")
    p = _Printer(file)
    for line in header:
        p.emit(0, f"// {line}".rstrip())
    if header:
        p.emit(0, "")
    p.emit(0, 'syntax = "proto3";')
    if file.package:
        p.emit(0, f"package {file.package};")
    for dep in file.dependency:
        p.emit(0, f'import "{dep}";')
    scope = file.package
    for s in file.service:
        p.emit(0, "")
        p.service(s)
    for e in file.enum_type:
        p.emit(0, "")
        p.enum(e, 0)
    for m in file.message_type:
        p.emit(0, "")
        p.message(m, scope, 0)
    return "\n".join(p.lines) + "\n"


# --- structural comparison -------------------------------------------------


def _walk_messages(
    msgs: Sequence[d.DescriptorProto], prefix: str
) -> Iterator[tuple[str, d.DescriptorProto]]:
    for m in msgs:
        full = f"{prefix}.{m.name}"
        yield full, m
        yield from _walk_messages(m.nested_type, full)


def _walk_enums(file: d.FileDescriptorProto) -> Iterator[tuple[str, d.EnumDescriptorProto]]:
    for e in file.enum_type:
        yield f"{file.package}.{e.name}", e
    for full, m in _walk_messages(file.message_type, file.package):
        for e in m.enum_type:
            yield f"{full}.{e.name}", e


def structure(file: d.FileDescriptorProto) -> dict[str, object]:
    """A comparable summary of every message, enum and service in ``file``."""
    out: dict[str, object] = {}
    for full, m in _walk_messages(file.message_type, file.package):
        fields = {
            f.number: (
                f.name,
                f.type,
                f.label,
                f.type_name,
                m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None,
                f.proto3_optional,
                f.json_name,
                f.options.SerializeToString(deterministic=True),
            )
            for f in m.field
        }
        out[f"message {full}"] = (
            fields,
            [o.name for o in m.oneof_decl],
            sorted((r.start, r.end) for r in m.reserved_range),
            sorted(m.reserved_name),
            m.options.SerializeToString(deterministic=True),
        )
    for full, e in _walk_enums(file):
        out[f"enum {full}"] = (
            [(v.name, v.number) for v in e.value],
            sorted((r.start, r.end) for r in e.reserved_range),
            sorted(e.reserved_name),
            e.options.SerializeToString(deterministic=True),
        )
    for s in file.service:
        out[f"service {file.package}.{s.name}"] = [
            (x.name, x.input_type, x.output_type, x.client_streaming, x.server_streaming)
            for x in s.method
        ]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("proto", type=Path, help="path to a felixbackend.proto")
    ap.add_argument("--tag", default="", help="Calico release tag the input came from")
    ap.add_argument("--note", action="append", default=[], help="extra header comment line")
    ap.add_argument(
        "--check",
        action="store_true",
        help="also compile the output and fail unless it matches the input structurally",
    )
    args = ap.parse_args(argv)
    proto: Path = args.proto
    src = _main_file(compile_proto(proto), proto)

    tag: str = args.tag or "an unnamed revision"
    header = [
        f"Felix wire schema as of Calico {tag}, transcribed for tests.",
        "",
        "Generated by scripts/transcribe_felix_proto.py from the compiled descriptor",
        "of that release's felixbackend.proto: wire facts only (names, numbers, types,",
        "labels, oneofs, reserved numbers and names). Tests compile it at run time and",
        "load it into a private descriptor pool, apart from the driver's own schema.",
        *(["", *args.note] if args.note else []),
    ]
    text = transcribe(src, header)

    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / proto.name
            copy.write_text(text)
            again = _main_file(compile_proto(copy), copy)
        if structure(again) != structure(src):
            a, b = structure(src), structure(again)
            bad = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            print(f"structural mismatch: {bad}", file=sys.stderr)
            return 1
        n = len(structure(src))
        print(f"check ok: {n} messages/enums/services identical", file=sys.stderr)

    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
