"""The simulated host kept in step with its file: each access re-reads it if
another process changed it, and a write access rewrites it.

Only what an access touched is encoded again (every object after a
re-read or a flush), and a file is rewritten only when an object differs
from what it holds; the calls counted here are saved with the next
write. A mixin over :class:`~dataplane.windows.sim.simhost.SimHost`'s state.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections import Counter
from collections.abc import Callable, Iterator

from dataplane.windows.hns.hcn import HnsVersion, Json
from dataplane.windows.sim.simhost_file import HostFile, document, encode
from dataplane.windows.sim.simhost_rules import guid

__all__ = ["NEWEST", "SECTIONS", "STORES", "FileSync"]

NEWEST = HnsVersion(15, 4)  # every feature this driver uses (a file without a Version)


class FileSync:
    """The file methods of :class:`~dataplane.windows.sim.simhost.SimHost`."""

    networks: dict[str, Json]
    endpoints: dict[str, Json]
    load_balancers: dict[str, Json]
    _version: HnsVersion
    _lock: threading.Lock
    _file: HostFile | None
    _saved_calls: Counter[str]
    _unsaved_calls: Counter[str]
    _encoded: dict[str, dict[str, bytes]]
    _touched: set[tuple[str, str]]
    _encoded_all: bool
    _writing: bool

    @contextlib.contextmanager
    def _access(self, *, write: bool) -> Iterator[None]:
        """One access: the thread lock and, for a file host, the file's lock
        around a re-read if another process changed it and, when ``write``
        and the body succeeded, a rewrite."""
        with self._lock:
            if self._file is None:
                yield
                return
            with self._file.locked() as data:
                if data:
                    self._adopt(data)
                self._writing = write
                try:
                    yield
                finally:
                    self._writing = False
                # No object changed (a read that could have written): no
                # write; the calls counted are saved with the next, or at
                # flush(). A call that raised writes nothing either.
                if write and self._encode_touched():
                    self._file.write_document(self._document())

    def _adopt(self, data: Json) -> None:
        """The host as the file holds it; ValueError if it is not one."""
        raw = data.get("Version") or {"Major": NEWEST.major, "Minor": NEWEST.minor}
        try:
            self._version = HnsVersion(int(raw["Major"]), int(raw["Minor"]))
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"a bad Version {raw!r}") from exc
        for key, store in (
            ("Networks", self.networks),
            ("Endpoints", self.endpoints),
            ("LoadBalancers", self.load_balancers),
        ):
            store.clear()
            for obj in data.get(key) or ():
                if not isinstance(obj, dict) or not obj.get("ID"):
                    raise ValueError(f"an object in {key} has no ID: {obj!r}")
                store[guid(obj["ID"])] = obj
        self._encoded_all = False
        self._saved_calls = Counter({str(k): int(v) for k, v in (data.get("Calls") or {}).items()})

    def _data(self) -> Json:
        """The whole host as the file holds it; the calls made here are saved with it."""
        self._saved_calls += self._unsaved_calls
        self._unsaved_calls = Counter()
        return {
            "Version": {"Major": self._version.major, "Minor": self._version.minor},
            "Networks": copy.deepcopy(list(self.networks.values())),
            "Endpoints": copy.deepcopy(list(self.endpoints.values())),
            "LoadBalancers": copy.deepcopy(list(self.load_balancers.values())),
            "Calls": dict(sorted(self._saved_calls.items())),
        }

    def _touch(self, kind: str, object_id: str) -> None:
        """The object may change in this access: encode it again when writing."""
        if self._writing:
            self._touched.add((kind, guid(object_id)))

    def _encode_touched(self) -> bool:
        """Encode again what this access touched (everything after a re-read or a
        flush); whether any object now differs from what the file holds."""
        changed = not self._encoded_all
        for kind in SECTIONS:
            store, encoded = STORES[kind](self), self._encoded[kind]
            if not self._encoded_all:
                encoded.clear()
            for object_id in {i for k, i in self._touched if k == kind}:
                obj = store.get(object_id)
                text = None if obj is None else encode(obj)
                if encoded.get(object_id) != text:
                    changed = True
                    if text is None:
                        del encoded[object_id]
                    else:
                        encoded[object_id] = text
            if len(encoded) != len(store):  # a re-read or a flush: encoded whole
                changed = True
                for object_id, obj in store.items():
                    if object_id not in encoded:
                        encoded[object_id] = encode(obj)
        self._touched.clear()
        self._encoded_all = True
        return changed

    def _document(self) -> bytes:
        """The file's text from the objects' kept texts; the calls made here with it.
        What changes at every write comes last (a rewrite starts where it differs)."""
        self._saved_calls += self._unsaved_calls
        self._unsaved_calls = Counter()
        members: dict[str, bytes | list[bytes]] = {
            section: [self._encoded[kind][i] for i in STORES[kind](self)]
            for kind, section in SECTIONS.items()
        }
        members["Version"] = encode({"Major": self._version.major, "Minor": self._version.minor})
        members["Calls"] = encode(dict(sorted(self._saved_calls.items())))
        return document(members)

    def snapshot(self) -> Json:
        """The whole host as the file holds it (``Calls``: every run's, for a file host)."""
        with self._access(write=False):
            return self._data()

    def flush(self) -> None:
        """Save the calls counted since the last write, and every object as it is now
        (the calls save what they change; this also what was changed behind them)."""
        if self._file is not None:
            with self._access(write=True):
                self._encoded_all = False  # every object again, and always a write


# The store of each HCN object kind.
STORES: dict[str, Callable[[FileSync], dict[str, Json]]] = {
    "Network": lambda host: host.networks,
    "Endpoint": lambda host: host.endpoints,
    "LoadBalancer": lambda host: host.load_balancers,
}
# Each kind's list in the file.
SECTIONS = {"Network": "Networks", "Endpoint": "Endpoints", "LoadBalancer": "LoadBalancers"}
