"""Each Felix setting the driver reads changes what it programs, when sent under Felix's name.

One test per ``ConfigUpdate`` key. The configuration is parsed from the raw
map Felix sends (:func:`~dataplane.config.parse_config`, keys in Felix's
spelling), handed to the code that reads the field, and what it programs is
compared with what Felix's default gives, so a key the driver parsed but
never acted on fails its test. Where the loop itself is what acts on a key
(the log level, and the Windows platform's configuration), the key arrives
in a ``ConfigUpdate`` message, which the loop parses with ``parse_config``.

Where rules are the effect, they are read back from the kernel:
a :class:`LinuxPlatform` applies into a throwaway network namespace (root
only; skipped otherwise) and ``iptables-save`` / ``ipset list`` run there.
Its netlink side is the fake (routes are not what these keys change). The
VXLAN device's values are the overlay plan the platform hands the VXLAN
programmer, and the Windows load balancers are the simulated HNS host's.
"""

from __future__ import annotations

import logging
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import trio

from dataplane.config import parse_config
from dataplane.core.healthcheck import HealthCheckServer
from dataplane.core.loop import Dataplane
from dataplane.linux.desired import Desired
from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.kernel.conntrack import ConntrackCleaner
from dataplane.linux.netlink.overlay_plan import OverlayPlan, VxlanDevice
from dataplane.linux.platform import LinuxPlatform
from dataplane.linux.render.chain_names import ChainNames
from dataplane.model import (
    Action,
    EffectivePolicy,
    IPPool,
    NatInfo,
    Policy,
    PolicyKey,
    Rule,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.model.hosts import Encapsulation
from dataplane.model.routes import Vtep, VtepAddress
from dataplane.sim import SimPlatform
from dataplane.windows.hns.hcn import LB_DSR
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import run_trio
from tests.linux.conftest import throwaway_netns
from tests.linux.fake_conntrack import FakeConntrack
from tests.linux.fake_netlink import FakeNetlink
from tests.windows.services_node import LOCAL_V4, backends, messages, overlay_host, service
from tests.windows.windows_node import node, send

# --- a Linux node in a throwaway namespace ------------------------------------------

IFACE = "cali1234abcd"  # the one pod's interface (on the fake netlink)
POD = WorkloadEndpoint(
    WorkloadEndpointKey("k8s", "prod/web-1", "eth0"), IFACE, ipv4_nets=("10.65.0.5/32",)
)
LOG_POLICY = Policy("default", inbound=(Rule(Action.LOG),))


@dataclass(frozen=True)
class Programmed:
    """What the kernel held after one apply: each IP version's rules, and the IP sets."""

    backend: str
    saves: Mapping[int, str]  # iptables-save of every table, per IP version
    ipsets: tuple[str, ...]
    sysctls: Mapping[str, str]  # the values of the sysctls the node had beforehand

    def rules(self, table: str, chain: str, version: int = 4) -> list[str]:
        """``chain``'s rules in ``table``, in order, as ``-A`` lines (read here, not
        with the driver's own parser)."""
        current, out = "", []
        for line in self.saves[version].splitlines():
            if line.startswith("*"):
                current = line[1:]
            elif current == table and line.startswith(f"-A {chain} "):
                out.append(line)
        return out

    def ours(self, version: int) -> list[str]:
        """Every line that names one of our chains."""
        return [line for line in self.saves[version].splitlines() if "cali-" in line]


def _in_netns(netns: str, *argv: str) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, *argv], check=True, capture_output=True, text=True
    )
    return done.stdout


def program(
    raw: Mapping[str, str],
    build: Callable[[LinuxPlatform], None] = lambda platform: None,
    *,
    before: Sequence[Sequence[str]] = (),
    sysctls: Mapping[str, str] = {},
) -> Programmed:
    """Felix's ``raw`` config through a :class:`LinuxPlatform`, applied once into
    a fresh namespace; ``build`` hands it model values as the managers would,
    ``before`` runs commands there first (someone else's rules), ``sysctls``
    are the node's sysctls (path under /proc/sys: value) before the apply."""
    config = parse_config(raw)
    with throwaway_netns("dpfx") as netns, tempfile.TemporaryDirectory() as root:
        for argv in before:
            _in_netns(netns, *argv)
        for name, value in sysctls.items():
            path = Path(root, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{value}\n")
        netlink = FakeNetlink({IFACE: 10})
        platform = LinuxPlatform(
            runner=ProcessRunner(netns),
            netlink=netlink,
            netlink_writer=netlink.write,
            sysctl_root=root,
        )
        platform.configure(config)
        build(platform)
        trio.run(platform.apply)
        after = {name: Path(root, name).read_text().strip() for name in sysctls}
        backend = platform.backend
        assert backend in ("legacy", "nft"), backend
        saves = {
            version: _in_netns(netns, f"{tool}-{backend}-save")
            for version, tool in ((4, "iptables"), (6, "ip6tables"))
        }
        ipsets = tuple(_in_netns(netns, "ipset", "list", "-n").split())
    return Programmed(backend, saves, ipsets, after)


def _with_pool(platform: LinuxPlatform) -> None:
    platform.set_ip_pool("pool-v4", IPPool("10.65.0.0/16", masquerade=True))


def _with_pod(platform: LinuxPlatform) -> None:
    platform.set_workload_endpoint(POD, EffectivePolicy())


def _with_log_policy(platform: LinuxPlatform) -> None:
    platform.set_policy(PolicyKey("log-all"), LOG_POLICY)


# --- the Linux keys, read back from the kernel ---------------------------------------

# Someone else's rule in FORWARD before the driver starts (kube-proxy, docker...).
FOREIGN = "-s 192.0.2.99/32 -j ACCEPT"


def test_chain_insert_mode_append_puts_our_jump_last() -> None:
    before = [["iptables-nft", "-t", "filter", *f"-A FORWARD {FOREIGN}".split()]]

    def forward(raw: Mapping[str, str]) -> list[str]:
        node = program(raw, before=before)
        assert node.backend == "nft"  # where the foreign rule went
        return node.rules("filter", "FORWARD")

    default, appended = forward({}), forward({"ChainInsertMode": "append"})
    assert len(default) == len(appended) == 2
    assert "-j cali-FORWARD" in default[0] and default[1].endswith(FOREIGN)
    assert appended[0].endswith(FOREIGN) and "-j cali-FORWARD" in appended[1]


# Every mark value and mask in a rule: --mark, --set-xmark and friends.
_MARKS = re.compile(
    r"--(?:mark|set-xmark|set-mark|or-mark|and-mark|xor-mark) (0x[0-9a-f]+)(?:/(0x[0-9a-f]+))?"
)


def _mark_bits(node: Programmed) -> int:
    bits = 0
    for version in (4, 6):
        for value, mask in _MARKS.findall(node.saves[version]):
            bits |= int(value, 16) | int(mask or "0", 16)
    return bits


def test_iptables_mark_mask_confines_every_mark_our_rules_use() -> None:
    mask = 0xFFF00000  # twelve bits, without 0xf0000, where the default's marks start
    default = _mark_bits(program({}, _with_pool))
    narrowed = _mark_bits(program({"IptablesMarkMask": hex(mask)}, _with_pool))
    assert narrowed and narrowed & ~mask == 0
    assert default & ~mask, "the default mask's marks would all fit the new mask too"
    assert default & ~0xFFFF0000 == 0


def test_log_prefix_labels_a_log_rule() -> None:
    def log_rules(raw: Mapping[str, str]) -> list[str]:
        node = program(raw, _with_log_policy)
        return [r for r in node.rules("filter", "cali-pi-log-all") if "-j LOG" in r]

    (default,) = log_rules({})
    (mine,) = log_rules({"LogPrefix": "node-7 dropped"})
    assert '--log-prefix "calico-packet: "' in default
    assert '--log-prefix "node-7 dropped: "' in mine


def test_log_action_rate_limit_limits_log_rules() -> None:
    def log_rules(raw: Mapping[str, str]) -> list[str]:
        node = program(raw, _with_log_policy)
        return [line for line in node.ours(4) if "-j LOG" in line]

    assert log_rules({}) and not any("-m limit" in r for r in log_rules({}))
    limited = log_rules({"LogActionRateLimit": "10/second", "LogActionRateLimitBurst": "7"})
    assert limited and all("-m limit --limit 10/sec --limit-burst 7" in r for r in limited)


def _dports(rules: Sequence[str]) -> set[str]:
    """Each rule's destination port, as "proto:port"."""
    return {f"{p}:{d}" for r in rules for p, d in re.findall(r"-p (\w+) .*--dport (\d+)", r)}


def test_failsafe_outbound_host_ports_fill_the_failsafe_out_chain() -> None:
    default = _dports(program({}).rules("filter", "cali-failsafe-out"))
    mine = _dports(
        program({"FailsafeOutboundHostPorts": "tcp:9999"}).rules("filter", "cali-failsafe-out")
    )
    assert mine == {"tcp:9999"}
    assert "tcp:9999" not in default and "udp:53" in default


def test_failsafe_inbound_host_ports_replace_the_failsafe_in_ports() -> None:
    default = _dports(program({}).rules("filter", "cali-failsafe-in"))
    mine = _dports(
        program({"FailsafeInboundHostPorts": "tcp:9999"}).rules("filter", "cali-failsafe-in")
    )
    assert mine == {"tcp:9999"}
    assert "tcp:22" in default and "tcp:9999" not in default


def test_nat_port_range_limits_masquerade_ports() -> None:
    def masquerades(raw: Mapping[str, str]) -> list[str]:
        node = program(raw, _with_pool)
        return [r for r in node.rules("nat", "cali-nat-outgoing") if "MASQUERADE" in r]

    default = masquerades({})
    mine = masquerades({"NATPortRange": "40000:50000"})
    assert default and not any("--to-ports" in r for r in default)
    # TCP and UDP within the range; the rest (no ports to choose) as before.
    assert [r for r in mine if "--to-ports 40000-50000" in r] == [
        r for r in mine if re.search(r"-p (tcp|udp) ", r)
    ]
    assert len([r for r in mine if "--to-ports 40000-50000" in r]) == 2


def test_nat_outgoing_address_snats_to_it_instead_of_masquerading() -> None:
    def rewrites(raw: Mapping[str, str]) -> list[str]:
        node = program(raw, _with_pool)
        return [r.split(" -j ", 1)[1] for r in node.rules("nat", "cali-nat-outgoing")]

    assert rewrites({}) == ["MASQUERADE"]
    assert rewrites({"NATOutgoingAddress": "192.0.2.7"}) == ["SNAT --to-source 192.0.2.7"]
    # Within NATPortRange for TCP and UDP, as Felix joins them.
    ranged = rewrites({"NATOutgoingAddress": "192.0.2.7", "NATPortRange": "40000:50000"})
    assert ranged == [
        "SNAT --to-source 192.0.2.7:40000-50000",
        "SNAT --to-source 192.0.2.7:40000-50000",
        "SNAT --to-source 192.0.2.7",
    ]


def test_iptables_nat_outgoing_interface_filter_limits_nat_to_one_interface() -> None:
    def outgoing(raw: Mapping[str, str]) -> str:
        (rule,) = program(raw, _with_pool).rules("nat", "cali-nat-outgoing")
        return rule

    assert " -o " not in outgoing({})
    assert " -o eth+ " in outgoing({"IptablesNATOutgoingInterfaceFilter": "eth+"})


def test_nat_outgoing_exclusions_ip_pools_and_host_ips_spares_node_addresses() -> None:
    def outgoing(raw: Mapping[str, str]) -> str:
        (rule,) = program(raw, _with_pool).rules("nat", "cali-nat-outgoing")
        return rule

    default = outgoing({})
    mine = outgoing({"NATOutgoingExclusions": "IPPoolsAndHostIPs"})
    assert "all-hosts-net" not in default
    assert re.search(r"-m set ! --match-set cali4\w*all-hosts-net dst", mine), mine


def test_allow_ipip_packets_from_workloads_removes_the_ipip_drop() -> None:
    def from_pod(raw: Mapping[str, str]) -> list[str]:
        return program(raw, _with_pod).rules("filter", f"cali-fw-{IFACE}")

    default = from_pod({})
    allowed = from_pod({"AllowIPIPPacketsFromWorkloads": "true"})
    ipip = re.compile(r"-p (ipencap|4) .*-j DROP")
    assert any(ipip.search(r) for r in default)
    assert allowed and not any(ipip.search(r) for r in allowed)
    # Only the IPIP drop went: the VXLAN one stays.
    assert any("--dport 4789" in r and r.endswith("-j DROP") for r in allowed)


def test_allow_vxlan_packets_from_workloads_removes_the_vxlan_drop() -> None:
    def from_pod(raw: Mapping[str, str]) -> list[str]:
        return program(raw, _with_pod).rules("filter", f"cali-fw-{IFACE}")

    vxlan = re.compile(r"--dport 4789 .*-j DROP")
    default = from_pod({})
    allowed = from_pod({"AllowVXLANPacketsFromWorkloads": "true"})
    assert any(vxlan.search(r) for r in default)
    assert allowed and not any(vxlan.search(r) for r in allowed)
    # Only the VXLAN drop went: the IPIP one stays.
    assert any(re.search(r"-p (ipencap|4) .*-j DROP", r) for r in allowed)


def test_disable_conntrack_invalid_check_stops_dropping_invalid_packets() -> None:
    def invalid_drops(raw: Mapping[str, str]) -> list[str]:
        node = program(raw, _with_pod)
        return [
            line
            for version in (4, 6)
            for line in node.saves[version].splitlines()
            if line.startswith("-A cali-") and "INVALID" in line
        ]

    default = invalid_drops({})
    assert default and all(line.endswith("-j DROP") for line in default)
    assert invalid_drops({"DisableConntrackInvalidCheck": "true"}) == []


def _forwarding_after_apply(raw: Mapping[str, str]) -> tuple[str, str]:
    """IPv4 and IPv6 forwarding after one apply onto a node that had both off."""
    files = ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding")
    after = program(raw, sysctls=dict.fromkeys(files, "0")).sysctls
    return after[files[0]], after[files[1]]


def test_ip_forwarding_disabled_leaves_the_nodes_forwarding_alone() -> None:
    assert _forwarding_after_apply({}) == ("1", "1")  # Felix's default: Enabled
    assert _forwarding_after_apply({"IPForwarding": "Disabled"}) == ("0", "0")


def test_ipv6_support_false_programs_no_ipv6_rules_or_sets() -> None:
    default = program({}, _with_pool)
    v4_only = program({"Ipv6Support": "false"}, _with_pool)
    assert default.ours(6) and any(s.startswith("cali6") for s in default.ipsets)
    assert v4_only.ours(6) == []
    assert not any(s.startswith("cali6") for s in v4_only.ipsets)
    assert v4_only.ours(4) and any(s.startswith("cali4") for s in v4_only.ipsets)


# --- the VXLAN device: the plan the platform hands the VXLAN programmer --------------

NODE = "node-a"
OWN_VTEP = Vtep(
    NODE,
    VtepAddress("66:00:00:00:00:0a", "10.65.0.1", "192.168.101.2"),
    VtepAddress("66:00:00:00:01:0a", "fd00:10:65::1", "fd00:101::2"),
)


def overlay(raw: Mapping[str, str], pools: Encapsulation) -> OverlayPlan:
    """The overlay plan for Felix's ``raw`` config (with this node's name, as Felix
    always sends it), the IP pools' encapsulation ``pools`` and this node's VTEP,
    as the Linux platform's desired state computes it for an apply."""
    desired = Desired(
        ChainNames(),
        ConntrackCleaner(FakeConntrack()),
        HealthCheckServer(),
        lambda set_id, version: None,
    )
    desired.configure(parse_config({"FelixHostname": NODE, **raw}))
    desired.set_encapsulation(pools)
    desired.overlay.set_vtep(OWN_VTEP)
    return desired.plan()


def _device(plan: OverlayPlan, version: int) -> VxlanDevice:
    device = plan.families[version].device
    assert device is not None
    return device


VXLAN_POOLS = Encapsulation(vxlan=True)


def test_vxlan_mtu_sets_the_planned_device_mtu() -> None:
    default = _device(overlay({}, VXLAN_POOLS), 4)
    mine = _device(overlay({"VXLANMTU": "1400"}, VXLAN_POOLS), 4)
    assert (default.name, default.mtu) == ("vxlan.calico", 0)  # 0: the parent's, less 50
    assert (mine.name, mine.mtu) == ("vxlan.calico", 1400)


def test_vxlan_port_sets_the_planned_device_port() -> None:
    default = _device(overlay({}, VXLAN_POOLS), 4)
    mine = _device(overlay({"VXLANPort": "8472"}, VXLAN_POOLS), 4)
    assert default.port == 4789
    assert mine.port == 8472


def test_vxlan_enabled_v6_forces_the_v6_overlay_on() -> None:
    # The pools use no IPv6 VXLAN: only Felix's key can turn the device on.
    default = overlay({}, VXLAN_POOLS)
    forced = overlay({"VXLANEnabledV6": "true"}, VXLAN_POOLS)
    assert default.families[6].device is None
    assert _device(forced, 6).name == "vxlan-v6.calico"
    assert _device(forced, 6).address == "fd00:10:65::1"


# --- keys the loop acts on: sent in a ConfigUpdate, parsed by the loop ---------------


def test_log_severity_screen_sets_the_dataplane_log_level() -> None:
    logger = logging.getLogger("dataplane")
    kept = logger.level

    def level_after(raw: dict[str, str]) -> int:
        logger.setLevel(logging.WARNING)  # neither value sent below
        dataplane = Dataplane(SimPlatform(), follow_log_severity=True)
        dataplane.send_message(pb.ConfigUpdate(config=raw))
        dataplane.close_input()
        run_trio(dataplane.run)
        return logger.level

    try:
        assert level_after({"LogSeverityScreen": "Error"}) == logging.ERROR
        # Felix's default sets INFO back. (With the node's name, as Felix always sends
        # it: a ConfigUpdate equal to the running configuration is skipped whole.)
        assert level_after({"LogSeverityScreen": "Info", "FelixHostname": NODE}) == logging.INFO
    finally:
        logger.setLevel(kept)


def test_windows_service_dsr_flags_the_load_balancers_dsr() -> None:
    def flags(**config: str) -> list[int]:
        host = overlay_host()

        async def main() -> None:
            async with node(host) as (dataplane, _):
                await send(
                    dataplane, *messages(service("web"), backends("web", *LOCAL_V4), **config)
                )

        run_trio(main)
        return [int(lb.get("Flags") or 0) for lb in host.load_balancers.values()]

    default = flags()
    dsr = flags(WindowsServiceDSR="true")
    assert default and not any(f & LB_DSR for f in default)
    assert dsr and all(f & LB_DSR for f in dsr)


def _with_floating_ip(platform: LinuxPlatform) -> None:
    nat = NatInfo(ext_ip="172.16.5.10", int_ip="10.65.0.5")
    platform.set_workload_endpoint(replace(POD, ipv4_nat=(nat,)), EffectivePolicy())


def test_floating_ips_disabled_programs_no_floating_ip() -> None:
    # Felix's floating IP manager programs an endpoint's NAT mappings only
    # with FloatingIPs Enabled (or for an OpenStack endpoint).
    def dnat(raw: Mapping[str, str]) -> list[str]:
        save = program(raw, _with_floating_ip).saves[4]
        return [line for line in save.splitlines() if "172.16.5.10" in line]

    assert dnat({}) == []  # Felix's default: Disabled
    enabled = dnat({"FloatingIPs": "Enabled"})
    assert any("DNAT" in line and "--to-destination 10.65.0.5" in line for line in enabled)
