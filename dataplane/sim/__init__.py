"""The sim platform: the dataplane kept in memory, for replay, tests and demos.

A platform package like :mod:`dataplane.linux`: it consumes the same
managers' values (effective policy included) and keeps them, programmed
state separate from desired, so replay and the loop's tests see exactly
what a kernel platform would be handed.
"""

from dataplane.sim.dump import describe_rule, dump_state
from dataplane.sim.platform import SimPlatform, SimState

__all__ = ["SimPlatform", "SimState", "describe_rule", "dump_state"]
