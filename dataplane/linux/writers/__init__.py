"""Linux writers: one per feature, each owning its desired state and rendering.

A writer takes the model values the managers hand the platform, keeps what
its feature needs, and at each apply writes the chains (or IP sets, routes)
that changed into the programmers of a :class:`~.target.Target`. Writers do
no I/O of their own and never read one another; the platform forwards each
sink call to the writers that care (:mod:`dataplane.linux.desired` holds
them all) and runs the programmers in its one order.

=====================  ==========================================================
``base.FilterBase``    static filter chains and the built-in chain hooks
``policy.PolicyWriter``  one chain per policy / profile and direction
``workloads.WorkloadWriter``  workload endpoint chains and the dispatch trees
``hosts.HostEndpointWriter``  host endpoint chains; untracked (raw) and pre-DNAT (mangle)
``nat.NatWriter``      IP pool sets, NAT-outgoing, floating IPs
``services.ServiceWriter``  service chains, the service dispatch tree, rejects
``routes.RoutesWriter``  workload routes and per-interface sysctls
``overlay.OverlayWriter``  VTEPs, Felix's routes, node addresses; the overlay plan and its IP sets
=====================  ==========================================================
"""
