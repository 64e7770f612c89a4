"""One ``ipset restore`` script and what the kernel holds once it succeeds."""

from __future__ import annotations

from dataplane.linux.ipsets.save import KernelSet, SetMeta

__all__ = ["RestoreBatch"]


class RestoreBatch:
    """The lines of one ``ipset restore`` and what the kernel holds after it."""

    def __init__(self) -> None:
        self.creates: list[str] = []
        self.swaps: list[str] = []
        self.deltas: list[str] = []
        self.recreates: list[str] = []  # last: destroying a referenced set fails
        self.written: list[tuple[str, SetMeta, set[str]]] = []
        self.patched: list[tuple[KernelSet, set[str], set[str]]] = []
        self.destroyed: list[str] = []
        self.touched: set[str] = set()  # every kernel set name the script writes

    def __bool__(self) -> bool:
        return bool(self.written or self.patched or self.destroyed)

    def create(self, name: str, meta: SetMeta, members: set[str]) -> None:
        self.creates.append(meta.create_line(name))
        self.creates.extend([f"add {name} {m}" for m in members])
        self.written.append((name, meta, members))
        self.touched.add(name)

    def swap(
        self, name: str, temp: str, meta: SetMeta, members: set[str], *, temp_exists: bool
    ) -> None:
        lines = self.swaps
        if temp_exists:  # a leftover from an interrupted rewrite: start empty
            lines.append(f"destroy {temp}")
        lines.append(meta.create_line(temp))
        lines.extend([f"add {temp} {m}" for m in members])
        lines.append(f"swap {temp} {name}")
        lines.append(f"destroy {temp}")
        self.written.append((name, meta, members))
        self.destroyed.append(temp)
        self.touched.update((name, temp))

    def patch(self, name: str, have: KernelSet, gone: set[str], new: set[str]) -> None:
        # Deletions first, so a set near maxelem has room for the additions.
        self.deltas.extend([f"del {name} {m}" for m in gone])
        self.deltas.extend([f"add {name} {m}" for m in new])
        self.patched.append((have, gone, new))
        self.touched.add(name)

    def recreate(self, name: str, meta: SetMeta, members: set[str]) -> None:
        self.recreates.append(f"destroy {name}")
        self.recreates.append(meta.create_line(name))
        self.recreates.extend([f"add {name} {m}" for m in members])
        self.written.append((name, meta, members))
        self.touched.add(name)

    def script(self) -> str:
        lines = [*self.creates, *self.swaps, *self.deltas, *self.recreates]
        return "\n".join(lines) + "\n"

    def commit(self, kernel: dict[str, KernelSet]) -> None:
        """Record in ``kernel`` (our cache) what the kernel holds after success."""
        for name in self.destroyed:
            kernel.pop(name, None)
        for name, meta, members in self.written:
            kernel[name] = KernelSet(meta, set(members))
        for have, gone, new in self.patched:
            have.members -= gone
            have.members |= new
