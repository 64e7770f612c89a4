"""Pure renderers: model values in, frozen chains out (rule model, iptables syntax).

Policies, profiles, endpoints and their dispatch (``filter``), host
endpoint policy in raw and mangle (``hostpolicy``), NAT-outgoing and
floating IPs (``nat``), kube-proxy's service chains (``service``), the
overlay's rules; the names and marks they share; and the map from each
rendered rule back to the policy rule it came from (``rule_labels``).
No I/O: the writers call these and the programmers write the result.
"""
