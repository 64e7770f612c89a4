"""Service load balancing (kube-proxy's winkernel): services to HNS load
balancers and remote endpoints, rendered, diffed and written."""
