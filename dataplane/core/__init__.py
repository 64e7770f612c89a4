"""The loop core: the two-phase loop and what it is built on.

``loop`` (the engine and embedding API), ``platform`` (the interface every
platform implements, and the reverse-index lookups it may use), ``status``
(endpoint status reporting), ``backoff`` (apply retries), and two pieces the
managers and platforms share: ``diffstore`` (full desired values in, the
changes out) and ``quarantine`` (objects the dataplane refused, retried
alone with backoff).
"""
