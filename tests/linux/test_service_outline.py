"""A service's outline (what a start records of it, its elements aside) claims
exactly what its whole contribution does: the table trusts one where the
other would be made, so a frontend, timeout or shared element the two
disagreed on would be claimed at a start and never written, or the reverse."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.linux.nftables.service_layout import ServiceLayout
from dataplane.model.services import Service, ServicePort
from tests.linux.test_service_layout import LAYOUT, services_drawn

LAYOUT6 = ServiceLayout(6, "cali-svc", LAYOUT.masq_mark)

# Besides the table tests' services: more ports (one listed twice, a
# protocol the table has no frontend for), external IPs, ExternalName.
ports = st.lists(
    st.builds(
        ServicePort,
        st.sampled_from(["http", "dns", ""]),
        st.sampled_from(["tcp", "udp", "sctp", "icmp"]),
        st.sampled_from([53, 80]),
        st.sampled_from([0, 30080]),
    ),
    max_size=4,
)
more = st.builds(
    lambda service, kind, extra, listed: dataclasses.replace(
        service,
        type=kind,
        external_ips=tuple(extra),
        ports=(*service.ports, *listed),
    ),
    services_drawn,
    st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]),
    st.lists(st.sampled_from(["192.0.2.1", "10.96.0.1", "2001:db8::1"]), max_size=2),
    ports,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([LAYOUT, LAYOUT6]), more)
def test_an_outline_claims_what_the_contribution_does(
    layout: ServiceLayout, service: Service
) -> None:
    whole = layout.contribution(service)
    outline = layout.outline(service)
    assert outline.frontends == tuple(whole.frontends)
    timeouts = {f.affinity.timeout for f in whole.frontends.values() if f.affinity}
    assert outline.timeouts == timeouts
    assert dict(outline.shared) == dict(whole.shared)
