"""Calico policy as HNS ACLs and SetPolicy objects: pure rendering, desired
state, and the programmers that write them."""
