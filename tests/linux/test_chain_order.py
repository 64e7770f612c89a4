"""New chains are created leaves first: no chain before a new chain it jumps to."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dataplane.linux.iptables.chain_order import leaves_first
from dataplane.linux.iptables.chains import IptRule


def _jumps(*targets: str) -> tuple[IptRule, ...]:
    return tuple(IptRule("-p tcp", f"-j {t}") for t in targets)


def test_a_tree_comes_out_leaves_first_and_old_chains_are_left_out() -> None:
    rules = {
        "cali-root": _jumps("cali-mid", "cali-old"),
        "cali-mid": (*_jumps("cali-leaf"), IptRule("", "-g cali-leaf2")),
        "cali-leaf": (IptRule("", "-j ACCEPT"),),
        "cali-leaf2": (),
        "cali-old": (),
    }
    new = {"cali-root", "cali-mid", "cali-leaf", "cali-leaf2"}
    order = leaves_first(new, rules)
    assert sorted(order) == sorted(new)
    assert order.index("cali-leaf") < order.index("cali-mid") < order.index("cali-root")
    assert order.index("cali-leaf2") < order.index("cali-mid")


@given(st.data())
def test_every_chain_follows_the_new_chains_it_reaches(data: st.DataObject) -> None:
    count = data.draw(st.integers(1, 12))
    names = [f"c{i}" for i in range(count)]
    # Edges only from higher to lower index: a DAG, as iptables demands.
    rules = {
        name: _jumps(*data.draw(st.lists(st.sampled_from(names[:i]), max_size=3)) if i else ())
        for i, name in enumerate(names)
    }
    new = set(data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
    order = leaves_first(new, rules)
    assert sorted(order) == sorted(new)
    for name in order:
        for rule in rules[name]:
            target = rule.action.split()[1]
            if target in new:
                assert order.index(target) < order.index(name)
