"""Talking to the Host Network Service: the HCN interface, the ctypes binding to
computenetwork.dll, the seam every call goes through, metering, HNS's ACL format."""
