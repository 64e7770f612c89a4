"""VXLAN across nodes: RemoteSubnetRoute policies on the Overlay network."""
