"""A table's chains held back: what the kernel refused, kept out of the
way, blamed one line at a time, and retried alone.

A mixin over :class:`~dataplane.linux.iptables.table.Table`'s state. A
quarantined chain keeps the version the kernel holds (its last good one)
or, if it has none, is written fail-closed; the parser's refusals are
found before a restore (:class:`ChainChecker`), the commit's by the line a
failed restore names.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from dataplane.core.quarantine import Quarantine
from dataplane.linux.iptables.chain_check import ChainChecker, RefusedChain, refusal_at
from dataplane.linux.iptables.chains import IptRule, rule_hashes

__all__ = ["HeldBack"]

log = logging.getLogger("dataplane.linux.iptables.table")


class HeldBack:
    """The quarantine methods of :class:`~dataplane.linux.iptables.table.Table`."""

    quarantine: Quarantine[str]
    fail_closed: tuple[IptRule, ...]
    _refusals: list[RefusedChain]
    _checker: ChainChecker
    _desired: dict[str, tuple[IptRule, ...]]
    _hashes: dict[str, list[str]]
    _dirty: set[str]
    _actual_chains: dict[str, list[str | None]] | None
    _fail_closed_hashes: dict[str, list[str]]

    def _writable(self, name: str) -> tuple[tuple[IptRule, ...], list[str]] | None:
        """What to write for ``name`` now: None for nothing.

        A quarantined chain the kernel holds keeps that (last good) version;
        one it does not hold gets the fail-closed rules.
        """
        desired = self._desired.get(name)
        if desired is None:
            return None
        if name not in self.quarantine:
            return desired, self._hashes[name]
        assert self._actual_chains is not None
        if name in self._actual_chains and self._actual_chains[name] != self._closed_hashes(name):
            return None
        return self.fail_closed, self._closed_hashes(name)

    def _closed_hashes(self, name: str) -> list[str]:
        hashes = self._fail_closed_hashes.get(name)
        if hashes is None:
            hashes = self._fail_closed_hashes[name] = rule_hashes(name, self.fail_closed)
        return hashes

    def _pending(self) -> dict[str, tuple[tuple[IptRule, ...], list[str]]]:
        """Chains the next restore would write with their desired rules."""
        actual = self._actual_chains or {}
        return {
            name: (self._desired[name], self._hashes[name])
            for name in self._dirty
            if name in self._desired
            and name not in self.quarantine
            and actual.get(name) != self._hashes[name]
        }

    def _blame(self, error: str, lines: Sequence[str]) -> bool:
        """Quarantine the chain of the input line a failed commit names.

        True if that line writes a rule of one of our chains the table
        still wants and that is not quarantined yet (so writing without it
        can succeed).
        """
        refusal = refusal_at(error, lines, self._hashes)
        if refusal is None or refusal.chain in self.quarantine:
            return False
        self.quarantine.reject(refusal.chain, refusal.message)
        self._refusals.append(refusal)
        return True

    async def _isolate(self) -> bool:
        """Quarantine the chains the parser refuses; True if there were any."""
        refused = await self._checker.refused(self._pending())
        for refusal in refused:
            self.quarantine.reject(refusal.chain, refusal.message)
            self._refusals.append(refusal)
        return bool(refused)

    async def _retry_quarantined(self) -> None:
        """Test quarantined chains whose retry is due; release those that pass."""
        due = [n for n in self.quarantine.due() if n in self._desired]
        if not due:
            return
        chains = {n: (self._desired[n], self._hashes[n]) for n in due}
        still = {r.chain: r for r in await self._checker.refused(chains)}
        for name in due:
            refusal = still.get(name)
            if refusal is None:
                self.quarantine.release(name)
                self._dirty.add(name)
                log.info("%r chain %s accepted on retry; out of quarantine", self, name)
            else:
                self.quarantine.reject(name, refusal.message)

    def keeps_last_good(self, name: str) -> bool:
        """True if quarantined ``name`` runs a version we wrote, not the fail-closed one."""
        held = (self._actual_chains or {}).get(name)
        return held is not None and held != self._closed_hashes(name)

    def held_back(self) -> dict[str, str]:
        """Chains in quarantine now, and the kernel's reason."""
        return self.quarantine.reasons()

    def take_refusals(self) -> list[RefusedChain]:
        """Chains refused since the last call (each reported once)."""
        refusals, self._refusals = self._refusals, []
        return refusals
