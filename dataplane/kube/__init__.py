"""The Kubernetes API as a source of services (kube-proxy's job).

``connection`` says how to reach the API server, ``api`` makes the list and
watch calls, ``reflector`` keeps one kind of object in step with the
cluster. See docs/kubernetes.md.
"""
