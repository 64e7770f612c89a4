"""The platform's view of HNS, kept up to date at a real host's cost.

Through ``computenetwork.dll`` reading one object is an open, a query and
a close, and an enumeration returns ids only, so a full listing of a
1,000-endpoint node is about 3,000 calls. The view is therefore kept, not
rebuilt: an enumeration of each of our networks (one call, filtered to
that network as hcsshim's ``ListEndpointsOfNetwork`` filters it) says
which endpoints appeared and vanished; only the new ones are read. An
endpoint appearing is usually a pod's, whose ACLs are already rendered:
its ACLs are written through the handle that read it (an open, a query,
a modify, a close), so a new pod costs five calls from its
``WorkloadEndpointUpdate`` to its ACLs written. What the programmers
write (ACLs, remote endpoints) they put in the view themselves.

Changes to an endpoint's content behind our back (an ACL removed) show
only by reading it again: :mod:`dataplane.windows.view.hns_refresh` spreads those reads.
"""

from __future__ import annotations

from collections.abc import Iterable

from dataplane.windows.hns.calls import CallHcn
from dataplane.windows.hns.hcn import HCN, EndpointRead, HcnError, WriteAfterRead
from dataplane.windows.view.hns_view import HnsView, acl_key, our_networks

__all__ = ["HnsListing"]


class HnsListing:
    """Keeps one :class:`HnsView` in step with HNS, reading as little as it can."""

    def __init__(self, hcn: HCN, call: CallHcn, pattern: str) -> None:
        self._hcn = hcn
        self._call = call
        self._pattern = pattern
        self.view: HnsView | None = None

    async def networks(self) -> None:
        """List the networks (few, and their policies are ours to check) and keep
        the endpoints of those still ours."""
        listed = await self._call(self._hcn.list_networks)
        networks = our_networks(listed, self._pattern)
        view = self.view if self.view is not None else HnsView()
        for gone in view.networks.keys() - networks.keys():
            for endpoint_id in view.ids(gone):
                view.forget(endpoint_id)
        view.networks = networks
        self.view = view

    async def endpoints(self, then: WriteAfterRead | None = None) -> bool:
        """Enumerate our networks' endpoints: forget the vanished, read the new
        (with ``then`` deciding a write through the same handle). True if the
        view changed."""
        view = self.view
        assert view is not None, "networks() first"
        changed = False
        for network_id in sorted(view.networks):
            try:
                listed = await self._call(self._hcn.enumerate_endpoints, network_id)
            except HcnError as exc:
                if exc.not_found:  # the network went: the next networks() listing drops it
                    continue
                raise
            present = {str(i).upper() for i in listed}
            known = view.ids(network_id)
            for gone in known - present:
                view.forget(gone)
                changed = True
            for new in sorted(present - known):
                changed = await self.read(new, then) or changed
        return changed

    async def reread(self, ids: Iterable[str]) -> None:
        """Read these endpoints again (the refresh's share): what HNS holds now."""
        for endpoint_id in ids:
            await self.read(endpoint_id)

    async def read(self, endpoint_id: str, then: WriteAfterRead | None = None) -> bool:
        """Read one endpoint into the view (gone: forgotten); True if it is there."""
        view = self.view
        assert view is not None
        try:
            read: EndpointRead = await self._call(self._hcn.read_endpoint, endpoint_id, then)
        except HcnError as exc:
            if not exc.not_found:
                raise
            view.forget(endpoint_id.upper())
            return False
        view.add(read.endpoint)
        found = view.endpoints.get(endpoint_id.upper())
        if found is not None and read.written is not None and read.error is None:
            # Update replaced the endpoint's ACL list with the request's.
            found.acls = acl_key(read.written["Settings"]["Policies"])
        return True
