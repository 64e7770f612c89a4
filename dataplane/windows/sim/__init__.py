"""The simulated HNS host (for Linux, tests and benchmarks), its shared file,
the rules it enforces, and the evaluators that judge packets and service
connections on any host's state."""
