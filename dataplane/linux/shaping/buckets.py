"""Bandwidth limits as the kernel's token bucket filters take them. Pure.

Felix shapes a workload's traffic as the CNI bandwidth plugin does
(``felix/dataplane/linux/qos/qos.go``):

- *ingress* (to the workload): a TBF qdisc at the root of the workload's
  host-side interface, which the kernel sends the workload's traffic to;
- *egress* (from the workload): an ``ingress`` qdisc on that interface
  whose u32 filter redirects every packet (mirred) to an IFB device,
  ``bwcali`` and a digest of the interface's name, with the TBF at its
  root: a TBF only shapes what the kernel sends to a device.

The bucket's numbers follow Felix's: rate and burst from bits to bytes;
a queue of 25 ms at the rate beyond the burst; with a peak rate, a
minimum burst of at least the device's MTU and its Ethernet header. A
burst whose drain time overflows the kernel's 32-bit buffer (in scheduler
ticks; Calico's default burst, 512 MiB, does at any rate below ~15
Mbit/s) is cut to the most that fits, as Felix caps it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache

from dataplane.model import Bandwidth

__all__ = ["IFB_PREFIX", "Shaping", "TokenBucket", "ifb_name", "tick_in_usec", "token_bucket"]

IFB_PREFIX = "bwcali"
_IFNAMSIZ = 15
_ETHERNET_HEADER = 14
LATENCY_MS = 25
_U32 = 0xFFFF_FFFF


@cache
def tick_in_usec() -> float:
    """Packet-scheduler ticks per microsecond, as tc reads them (``/proc/net/psched``)."""
    try:
        with open("/proc/net/psched", encoding="ascii") as f:
            t2us, us2t, clock_res, _ = (int(v, 16) for v in f.read().split())
    except (OSError, ValueError):
        return 1.0
    return t2us / us2t * (clock_res / 1_000_000)


def ifb_name(iface: str) -> str:
    """The IFB device shaping ``iface``'s egress: Felix's name for it."""
    digest = hashlib.sha512(iface.encode()).hexdigest()
    return (IFB_PREFIX + digest)[:_IFNAMSIZ]


@dataclass(frozen=True, slots=True)
class Shaping:
    """One interface's limits: traffic to the workload (``ingress``) and from it."""

    ingress: Bandwidth | None = None
    egress: Bandwidth | None = None


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """One TBF, in bytes and bytes per second (``peak`` 0: no peak rate)."""

    rate: int
    burst: int
    peak: int = 0
    minburst: int = 0

    def tc_args(self) -> str:
        """The ``tbf ...`` arguments of ``tc qdisc replace``."""
        text = f"tbf rate {self.rate * 8}bit burst {self.burst}b latency {LATENCY_MS}ms"
        if self.peak:
            text += f" peakrate {self.peak * 8}bit minburst {self.minburst}b"
        return text

    def held_by(self, options: dict[str, object]) -> bool:
        """Whether a TBF whose ``tc -j`` options are ``options`` is this one.

        The kernel keeps the burst as a drain time in ticks, so what tc
        reports back is within a rounding of what was written.
        """

        def near(key: str, want: int) -> bool:
            got = options.get(key)
            return isinstance(got, int) and abs(got - want) <= max(64, want // 100)

        if options.get("rate") != self.rate or not near("burst", self.burst):
            return False
        if self.peak:
            return near("minburst", self.minburst)
        return "minburst" not in options


def token_bucket(bandwidth: Bandwidth, mtu: int) -> TokenBucket:
    """``bandwidth`` as the TBF for a device of ``mtu``."""
    rate = max(bandwidth.rate // 8, 1)
    most = int(_U32 / tick_in_usec() * rate / 1_000_000)  # the buffer's u32 of ticks
    burst = min(max(bandwidth.burst // 8, 1), most)
    if not bandwidth.peakrate:
        return TokenBucket(rate, burst)
    minburst = max(bandwidth.minburst, mtu + _ETHERNET_HEADER)
    return TokenBucket(rate, burst, bandwidth.peakrate // 8, minburst)
