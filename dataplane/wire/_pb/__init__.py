"""Generated protobuf code for ``proto/felixbackend.proto`` (``make proto``).

Nothing outside the transport, the loop and the managers imports this:
protobuf objects stop at the managers.
"""
