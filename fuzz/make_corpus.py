"""Write the seed corpora, fuzz/corpus/<target>/, from the repository's own messages.

::

    python fuzz/make_corpus.py        # from the repository root, in the venv

Seeds are inputs in the layout of :mod:`fuzz.common` (a 4-byte header, then
a frame stream):

* ``examples/demo-node.log``, the recorded log of one node;
* the session of ``tests/felix_releases`` (policies in four tiers, staged
  ones, a Kubernetes policy, a host endpoint, host metadata, a service, a
  VXLAN overlay, churn after InSync) as each of v3.30, v3.31, v3.32 and
  v3.33 says it, whole and one message at a time;
* a ConfigUpdate with every key the driver reads, one message of each
  payload type, and (for ``frames``) the malformed streams the framing
  tests name: a truncated length and body, an oversize length, an empty
  envelope, a FromDataplane, an unknown payload.

Each target's directory is emptied and rewritten; the output is the same on
every run. The fuzzers add what they find to a work directory, never here
(see fuzz/run.py).
"""

from __future__ import annotations

import shutil
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dataplane.config import felix_keys  # noqa: E402
from dataplane.wire._pb import felixbackend_pb2 as pb  # noqa: E402
from dataplane.wire.framing import encode_frame, encode_frames  # noqa: E402
from dataplane.wire.msglog import envelopes  # noqa: E402
from dataplane.wire.releases import Release  # noqa: E402
from fuzz.common import header_bytes  # noqa: E402
from tests.felix_releases import RELEASES  # noqa: E402
from tests.felix_releases.session import after_sync, master_session  # noqa: E402
from tests.felix_releases.speak import Speaker, speak  # noqa: E402
from tests.kernel import scenario  # noqa: E402

CORPUS = ROOT / "fuzz" / "corpus"
TARGETS = ("frames", "envelopes", "managers")
_IFACES = {p.name: p.iface for p in scenario.PODS}
_LENGTH = struct.Struct("<Q")


def _session() -> list[pb.ToDataplane]:
    first = master_session(_IFACES, overlay=True)
    return first + after_sync(len(first) + 1)


def _release(name: str) -> Release:
    return Release(name)


def _config_all_keys() -> bytes:
    """One ConfigUpdate naming every key the driver reads, with Felix's default-ish values."""
    values = {
        "InterfacePrefix": "cali,tap",
        "LogSeverityScreen": "Debug",
        "FailsafeInboundHostPorts": "tcp:22,udp:68",
        "FailsafeOutboundHostPorts": "udp:53",
        "NATPortRange": "32768:65535",
        "KubeNodePortRanges": "30000:32767",
        "IptablesMarkMask": "0xffff0000",
        "ExternalNodesCIDRList": "10.9.0.0/16",
        "NATOutgoingExclusions": "IPPoolsOnly",
        "WindowsServiceSourceVIP": "10.0.0.250",
        "FelixHostname": "node-a",
    }
    raw = {key: values.get(key, "1") for key, _field, _default in sorted(felix_keys())}
    return encode_frames(envelopes([pb.ConfigUpdate(config=raw), pb.InSync()]))


def _one_of_each() -> dict[str, bytes]:
    """A frame of every payload type that carries something, from the session and demo."""
    seen: dict[str, bytes] = {}
    demo = (ROOT / "examples" / "demo-node.log").read_bytes()
    pos = 0
    while pos < len(demo):
        (length,) = _LENGTH.unpack_from(demo, pos)
        frame = demo[pos : pos + 8 + length]
        kind = pb.ToDataplane.FromString(frame[8:]).WhichOneof("payload")
        seen.setdefault(str(kind), frame)
        pos += 8 + length
    for envelope in _session():
        seen.setdefault(str(envelope.WhichOneof("payload")), encode_frame(envelope))
    return seen


def _malformed() -> dict[str, bytes]:
    good = encode_frames(envelopes([pb.IPSetUpdate(id="s:a", members=["10.0.0.1"]), pb.InSync()]))
    unknown = b"\x78\x2a\xba\x3e\x02\x08\x01"  # seq 42, payload field 999
    wrong = pb.FromDataplane(
        sequence_number=7, process_status_update=pb.ProcessStatusUpdate(iso_timestamp="t")
    )
    return {
        "empty": b"",
        "truncated-length": good + b"\x01\x02",
        "truncated-body": good[:-3],
        "oversize-length": good + _LENGTH.pack(1 << 40) + b"x" * 10,
        "empty-envelope": good + _LENGTH.pack(0),
        "garbage-body": _LENGTH.pack(6) + b"\xff" * 6,
        "from-dataplane": encode_frame(wrong),
        "unknown-payload": _LENGTH.pack(len(unknown)) + unknown + good,
    }


def seeds() -> dict[str, dict[str, bytes]]:
    """Every target's seeds, by file name."""
    session = _session()
    spoken = {r: speak(session, r) for r in RELEASES}
    demo = (ROOT / "examples" / "demo-node.log").read_bytes()
    auto = header_bytes(None)
    out: dict[str, dict[str, bytes]] = {t: {} for t in TARGETS}

    def add(targets: Iterable[str], name: str, data: bytes) -> None:
        for target in targets:
            out[target][name] = data

    add(TARGETS, "demo-node", auto + demo)
    add(TARGETS, "config-all-keys", auto + _config_all_keys())
    for i, release in enumerate(RELEASES):
        add(TARGETS, f"session-{release}", auto + spoken[release])
        forced = header_bytes(_release(release), knob=i + 1, a=7 * i, b=3 + i)
        add(("frames",), f"session-{release}-forced", forced + spoken[release])
        # One message at a time, as that release says it (the speaker keeps
        # the state later messages depend on).
        speaker = Speaker(release)
        for seq, envelope in enumerate(session, start=1):
            kind = envelope.WhichOneof("payload")
            data = (forced if seq % 2 else auto) + speaker.frames(envelope)
            add(("envelopes",), f"{release}-{seq:02d}-{kind}", data)
    for kind, frame in _one_of_each().items():
        add(("frames", "managers"), f"one-{kind}", auto + frame)
    managers_batches = header_bytes(None, knob=1, a=2)
    add(("managers",), "demo-node-batches-of-1", managers_batches + demo)
    for name, data in _malformed().items():
        add(("frames", "envelopes"), f"malformed-{name}", auto + data)
    return out


def main() -> None:
    total = 0
    for target, files in seeds().items():
        directory = CORPUS / target
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for name, data in sorted(files.items()):
            (directory / name).write_bytes(data)
        size = sum(len(d) for d in files.values())
        total += size
        print(f"{directory.relative_to(ROOT)}: {len(files)} seeds, {size} bytes")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
