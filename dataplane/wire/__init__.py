"""The wire: Felix's protocol in and out of the process.

``_pb`` is generated from ``proto/felixbackend.proto`` (``make proto``);
``framing`` is the length-prefixed envelope format, ``transport`` the pipe
reader thread and sinks, ``msgs`` the envelope helpers, ``msglog`` recorded
message logs for replay. Nothing here knows a manager or a platform.
"""
