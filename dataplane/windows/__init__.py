"""The Windows platform: HNS (HCN V2) endpoints' ACLs, load balancers and overlay routes.

So far: the HCN interface (``hcn``), the simulated HNS host (``simhost``)
and the ACL evaluator (``acl``) every Windows claim is proven with.
"""
