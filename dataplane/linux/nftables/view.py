"""One iptables table's chains inside our one nftables table per family.

The writers program tables by their iptables names (``filter``, ``nat``,
``mangle``, ``raw``) and their chains and hooks by iptables' names
(``cali-INPUT``, the built-in ``INPUT``). On nftables all four live in one
table per family (their IP sets must sit beside the rules that look them
up), so a view gives each its share of it: chain ``cali-INPUT`` of
``filter`` is ``filter-cali-INPUT``, and the built-in ``INPUT`` is base
chain ``filter-INPUT``, hooked where iptables' would be, at iptables'
priority for that table. The rules' jumps carry the same prefix (the
serialiser's ``chain_prefix``). This is the layout Felix's nftables mode
uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dataplane.linux.nftables.elements import Verdict, ifname, verdict_element
from dataplane.linux.nftables.iface_data import DataSet, Held, InterfaceData
from dataplane.linux.nftables.serialise import NftRule
from dataplane.linux.nftables.table import BaseChain, NftTable
from dataplane.linux.rules.chain import Chain

__all__ = ["HOOKS", "NftTableView"]

# iptables' priorities, as nft numbers them (nft names some, but not for
# every hook: "dstnat" is refused on output).
_PRIORITY = {"raw": -300, "mangle": -150, "filter": 0}
_NAT = {"PREROUTING": -100, "OUTPUT": -100, "INPUT": 100, "POSTROUTING": 100}

# The built-in chains of each table, and how their base chains hook in.
HOOKS: dict[str, dict[str, str]] = {
    "raw": {
        b: f"type filter hook {b.lower()} priority {_PRIORITY['raw']}"
        for b in ("PREROUTING", "OUTPUT")
    },
    "mangle": {
        b: f"type filter hook {b.lower()} priority {_PRIORITY['mangle']}"
        for b in ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")
    },
    "nat": {b: f"type nat hook {b.lower()} priority {p}" for b, p in _NAT.items()},
    "filter": {
        b: f"type filter hook {b.lower()} priority {_PRIORITY['filter']}"
        for b in ("INPUT", "FORWARD", "OUTPUT")
    },
}


class NftTableView:
    """iptables table ``name`` (IPv``version``) as a share of ``table``."""

    def __init__(self, table: NftTable, name: str, version: int) -> None:
        if name not in HOOKS:
            raise ValueError(f"not a table of ours: {name}")
        self.table = table
        self.name = name
        self.version = version
        self.prefix = f"{name}-"
        self._chains: set[str] = set()  # this view's chains, unprefixed
        # Chains handed over since the last take_changed (None: not asked yet).
        self._changed: set[str] | None = None
        self._sizes: dict[str, int] = {}  # rules per chain (metrics)
        self.rule_count = 0  # rules in this view's chains, kept as they change

    def update_chain(self, chain: Chain[NftRule]) -> None:
        self._chains.add(chain.name)
        self.table.update_chain(Chain(self.prefix + chain.name, chain.rules))
        self.rule_count += len(chain.rules) - self._sizes.get(chain.name, 0)
        self._sizes[chain.name] = len(chain.rules)
        if self._changed is not None:
            self._changed.add(chain.name)

    def remove_chain(self, name: str) -> None:
        self._chains.discard(name)
        self.table.remove_chain(self.prefix + name)
        self.rule_count -= self._sizes.pop(name, 0)
        if self._changed is not None:
            self._changed.add(name)

    def chain_count(self) -> int:
        """How many chains this view holds (metrics)."""
        return len(self._chains)

    def take_changed(self) -> set[str]:
        """Chains handed over or removed since the last call (every chain of
        this view at the first call: tracking starts then)."""
        if self._changed is None:
            self._changed = set()
            return set(self._chains)
        changed, self._changed = self._changed, set()
        return changed

    def desired(self, name: str) -> tuple[tuple[NftRule, ...], Sequence[str]] | None:
        """Chain ``name``'s desired rules and their hash comments; None if not desired."""
        return self.table.desired(self.prefix + name)

    def set_chains(self, chains: Iterable[Chain[NftRule]]) -> None:
        """Exactly ``chains`` in this view; the other tables' chains stay."""
        wanted = list(chains)
        names = {c.name for c in wanted}
        for stale in self._chains - names:
            self.remove_chain(stale)
        for chain in wanted:
            self.update_chain(chain)

    def set_hooks(self, builtin: str, rules: Sequence[NftRule]) -> None:
        """Our rules in the base chain standing for built-in ``builtin``."""
        spec = HOOKS[self.name].get(builtin)
        if spec is None:
            raise ValueError(f"{self.name} has no built-in chain {builtin}")
        self.table.set_base_chain(BaseChain(self.prefix + builtin, spec, tuple(rules)))

    # --- per-interface data (endpoint dispatch) ------------------------------------

    @property
    def has_data(self) -> bool:
        """Whether the table keeps per-interface sets (the driver's tables do)."""
        return self.table.data is not None

    def _data(self) -> InterfaceData:
        if self.table.data is None:
            raise ValueError(f"table {self.table.name} keeps no per-interface data")
        return self.table.data

    def declare(self, data_set: DataSet) -> None:
        self._data().declare(data_set)

    def put_goto(self, name: str, iface: str, chain: str | None) -> None:
        """``iface``'s element of verdict map ``name``: goto this view's
        ``chain`` (None: no element)."""
        if chain is None:
            self._data().put(name, iface, Held())
            return
        target = self.prefix + chain
        element = verdict_element(ifname(iface).value, Verdict("goto", target))
        self._data().put(name, iface, Held(frozenset((element,)), target))

    def put_elements(self, name: str, iface: str, elements: frozenset[bytes]) -> None:
        """``iface``'s elements of set ``name``."""
        self._data().put(name, iface, Held(elements))
