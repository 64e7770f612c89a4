"""The tests' reference evaluator of Calico (Felix) policy semantics.

It is the product's own: :mod:`dataplane.ops.evaluate`, the engine behind
``dataplane-driver explain``, re-exported under the names the tests have
always used. Every kernel probe (``tests/kernel/test_differential.py``) and
every simulated-host verdict (``tests/windows/``) compared against it is
therefore also a check that ``explain`` agrees with the node. The
semantics are written down in that module's docstring.
"""

from __future__ import annotations

from dataplane.ops.evaluate import (
    PROTOCOL_NUMBERS,
    Decision,
    Direction,
    Packet,
    PolicyState,
    endpoint_decision,
    forward_decision,
    rule_matches,
)

__all__ = [
    "PROTOCOL_NUMBERS",
    "Decision",
    "Direction",
    "Packet",
    "PolicyState",
    "endpoint_decision",
    "forward_decision",
    "rule_matches",
]
