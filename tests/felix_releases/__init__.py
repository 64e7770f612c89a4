"""Felix's wire schema per Calico release line, for encoding messages as that Felix does.

Each ``vX_Y.proto`` beside this file is a wire-facts-only transcription of one
release's ``felixbackend.proto`` (made by ``scripts/transcribe_felix_proto.py``).
:func:`schema` compiles one with ``grpc_tools.protoc`` at test time and loads it
into a private :class:`~google.protobuf.descriptor_pool.DescriptorPool`: every
release, like the driver's own generated module, defines package ``felix``, so
they cannot share the default pool, but any number of private pools can live
in one process side by side.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FileDescriptor
from google.protobuf.message import Message

__all__ = ["RELEASES", "ReleaseSchema", "proto_path", "schema"]

RELEASES: tuple[str, ...] = ("v3.30", "v3.31", "v3.32", "v3.33")

_HERE = Path(__file__).resolve().parent


def proto_path(release: str) -> Path:
    """The transcribed ``.proto`` for ``release`` (e.g. ``"v3.32"`` -> ``v3_32.proto``)."""
    if release not in RELEASES:
        raise ValueError(f"unknown Felix release {release!r}; known: {', '.join(RELEASES)}")
    return _HERE / f"{release.replace('.', '_')}.proto"


@dataclass(frozen=True)
class ReleaseSchema:
    """One Felix release's schema, loaded in a descriptor pool of its own."""

    release: str
    pool: descriptor_pool.DescriptorPool
    file: FileDescriptor

    @property
    def package(self) -> str:
        return self.file.package

    def descriptor(self, name: str) -> Descriptor:
        """Descriptor of message ``name`` (relative to the package, e.g. ``"TierInfo"``)."""
        return self.pool.FindMessageTypeByName(f"{self.package}.{name}")

    def descriptor_proto(self, name: str) -> descriptor_pb2.DescriptorProto:
        """``DescriptorProto`` of message ``name``; unlike a Descriptor it lists reserved ones."""
        proto = descriptor_pb2.DescriptorProto()
        self.descriptor(name).CopyToProto(proto)
        return proto

    def enum(self, name: str) -> EnumDescriptor:
        """Descriptor of enum ``name`` (relative to the package, e.g. ``"IPVersion"``)."""
        return self.pool.FindEnumTypeByName(f"{self.package}.{name}")

    def message(self, name: str) -> type[Message]:
        """The message class for ``name`` in this release (e.g. ``"ToDataplane"``)."""
        return message_factory.GetMessageClass(self.descriptor(name))

    def new(self, name: str, /, **fields: Any) -> Message:
        """An instance of message ``name`` initialised with ``fields``.

        ``name`` is positional-only, so a message's own ``name`` field can be passed.
        """
        ctor: Callable[..., Message] = self.message(name)
        return ctor(**fields)


def _compile(proto: Path) -> descriptor_pb2.FileDescriptorSet:
    with tempfile.TemporaryDirectory(prefix="felix-release-") as tmp:
        out = Path(tmp) / "set.pb"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{proto.parent}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                str(proto),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"protoc failed on {proto.name}:\n{result.stderr}")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


@functools.cache
def schema(release: str) -> ReleaseSchema:
    """Compile and load ``release``'s schema (once per process) into a private pool."""
    proto = proto_path(release)
    fds = _compile(proto)
    pool = descriptor_pool.DescriptorPool()
    for file_proto in fds.file:
        pool.Add(file_proto)
    return ReleaseSchema(release=release, pool=pool, file=pool.FindFileByName(proto.name))
