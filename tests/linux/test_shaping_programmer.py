"""The shaping programmer against the fake tc: it converges, repairs, cleans up, and is quiet.

The same behaviours on the real kernel, with real transfers, are
``tests/kernel/test_qos_bandwidth.py``.
"""

from __future__ import annotations

import trio

from dataplane.linux.shaping.buckets import Shaping, ifb_name
from dataplane.linux.shaping.programmer import ShapingProgrammer
from dataplane.model import Bandwidth
from tests.linux.fake_tc import FakeTrafficControl

LIMIT = Bandwidth(8_000_000, 800_000)


def test_limits_land_then_nothing_is_written_again_then_they_go() -> None:
    tc = FakeTrafficControl({"cali1": 1500, "cali2": 1500})
    shaping = ShapingProgrammer(tc)

    async def main() -> None:
        shaping.set_plan({"cali1": Shaping(LIMIT, LIMIT), "cali2": Shaping()})
        await shaping.apply()
        ifb = ifb_name("cali1")
        assert tc.root["cali1"]["options"] == {"rate": 1_000_000, "burst": 100_000}
        assert tc.root[ifb]["kind"] == "tbf" and tc.redirects == {"cali1": ifb}
        assert "cali2" not in tc.root and shaping.held_back() == {}
        # A refresh that finds it all in place writes nothing.
        batches = tc.batches
        shaping.mark_for_resync()
        await shaping.apply()
        assert tc.batches == batches
        # A pod without limits coming reads and writes nothing.
        shaping.set_plan({"cali1": Shaping(LIMIT, LIMIT), "cali2": Shaping(), "cali3": Shaping()})
        await shaping.apply()
        assert tc.batches == batches
        # Tampering is repaired at the refresh.
        del tc.root["cali1"]
        tc.redirects.clear()
        shaping.mark_for_resync()
        await shaping.apply()
        assert "cali1" in tc.root and tc.redirects == {"cali1": ifb}
        # Limits gone: the TBF, the ingress qdisc and the IFB device go.
        shaping.set_plan({"cali1": Shaping(), "cali2": Shaping()})
        await shaping.apply()
        assert tc.root == {} and tc.ingress == set() and ifb not in tc.links

    trio.run(main)


def test_a_missing_interface_is_held_back_then_shaped_when_it_comes() -> None:
    tc = FakeTrafficControl({})
    shaping = ShapingProgrammer(tc)

    async def main() -> None:
        shaping.set_plan({"cali9": Shaping(LIMIT)})
        await shaping.apply()
        assert shaping.take_refusals() == [
            ("cali9", "no such interface yet; shaped once it exists")
        ]
        tc.links["cali9"] = 1500
        shaping.links_changed()
        await shaping.apply()
        assert shaping.held_back() == {} and tc.root["cali9"]["kind"] == "tbf"

    trio.run(main)
