"""A traffic agent living in one namespace, and the client that drives it.

Why an agent: a verdict is a real packet, and spawning ``ip netns exec python``
per probe costs ~50 ms; a matrix of probes would take seconds. Instead one
long-lived process per namespace speaks JSON lines on stdin/stdout.

Protocol: each request is ``{"id": n, "op": ..., **args}``; each reply is
``{"id": n, "result": {...}}`` or ``{"id": n, "error": "..."}`` (the op itself
failed, e.g. a port already bound). A probe that gets no answer is not an
error: its result is ``{"ok": false, "reply": null, "error": "timeout"}``.
Requests run on their own threads, so one namespace can probe many targets at
once; replies may come back out of order and are matched by id.

Invariants: every blocking call has a deadline; the agent exits as soon as its
stdin closes (the owning test went away), whatever its servers are doing.

The agent half uses the stdlib only: it runs as a script under whichever
Python the client names, inside the namespace.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import IO, Any

IP_PKTINFO = 8  # <linux/in.h>; the socket module does not export it.
PROBE_LINE = b"probe\n"
_ICMP_REPLY = {socket.AF_INET: 0, socket.AF_INET6: 129}
_ICMP_REQUEST = {socket.AF_INET: 8, socket.AF_INET6: 128}
_ICMP_UNREACH = {socket.AF_INET: {3, 11}, socket.AF_INET6: {1, 3}}


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ipaddress.ip_address(addr).version == 6 else socket.AF_INET


def _same_addr(a: str, b: str) -> bool:
    return ipaddress.ip_address(a.split("%", 1)[0]) == ipaddress.ip_address(b.split("%", 1)[0])


def _probe(ok: bool, reply: str | None = None, error: str | None = None) -> dict[str, Any]:
    return {"ok": ok, "reply": reply, "error": error}


def _error_name(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    return exc.strerror or type(exc).__name__


class _LineSocket:
    """A TCP socket with its own read buffer, so a late reply never confuses
    the next exchange's framing, and every read honours a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def exchange(self, deadline: float) -> dict[str, Any]:
        try:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            self.sock.sendall(PROBE_LINE)
            while b"\n" not in self._buf:
                self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = self.sock.recv(4096)
                if not chunk:
                    return _probe(False, error="closed by peer")
                self._buf += chunk
        except OSError as exc:
            return _probe(False, error=_error_name(exc))
        line, self._buf = self._buf.split(b"\n", 1)
        return _probe(True, reply=line.decode())


class Agent:
    """Serves requests from one client; owns the namespace's servers."""

    def __init__(self, name: str, out: IO[bytes]) -> None:
        self.name = name
        self._out = out
        self._out_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._peers: dict[tuple[str, int], list[str]] = {}
        self._held: dict[int, _LineSocket] = {}
        self._ids = itertools.count(1)

    def handle(self, line: bytes) -> None:
        request = json.loads(line)
        try:
            response = {"id": request["id"], "result": self._dispatch(request)}
        except Exception as exc:  # reported to the client, not swallowed
            response = {"id": request["id"], "error": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(response).encode() + b"\n"
        with self._out_lock:
            self._out.write(data)
            self._out.flush()

    def _dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        deadline = time.monotonic() + float(req.get("timeout", 1.0))
        if op == "listen":
            self._listen(req["proto"], int(req["port"]), int(req["family"]))
            return {}
        if op == "peers":
            with self._state_lock:
                return {"peers": list(self._peers.get((req["proto"], int(req["port"])), []))}
        if op == "connect":
            sport = req.get("sport")  # optional fixed source port
            if req["proto"] == "udp":
                return self._udp_probe(req["dst"], int(req["port"]), deadline, sport)
            conn, result = self._tcp_open(req["dst"], int(req["port"]), deadline, sport)
            if conn is not None:
                conn.sock.close()
            return result
        if op == "icmp":
            return self._icmp_echo(req["dst"], deadline)
        if op == "hold":
            conn, result = self._tcp_open(req["dst"], int(req["port"]), deadline)
            if conn is not None:
                with self._state_lock:
                    result["hold_id"] = hold_id = next(self._ids)
                    self._held[hold_id] = conn
            return result
        if op == "check":
            with self._state_lock:
                held = self._held[int(req["hold_id"])]
            return held.exchange(deadline)
        if op == "close":
            with self._state_lock:
                held = self._held.pop(int(req["hold_id"]))
            held.sock.close()
            return {}
        raise ValueError(f"unknown op {op!r}")

    # --- servers -------------------------------------------------------------

    def _listen(self, proto: str, port: int, family: int) -> None:
        af = socket.AF_INET6 if family == 6 else socket.AF_INET
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        sock = socket.socket(af, kind)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if af == socket.AF_INET6:
            # Separate v4 and v6 sockets on one port, so peers are never v4-mapped.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(("::" if af == socket.AF_INET6 else "0.0.0.0", port))
        with self._state_lock:
            self._peers.setdefault((proto, port), [])
        if proto == "tcp":
            sock.listen(128)
            target = self._tcp_accept_loop
        else:
            # Reply from the address the datagram was sent to, as a real UDP
            # server must, or a connected client drops the reply.
            if af == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
            else:
                sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
            target = self._udp_loop
        threading.Thread(target=target, args=(sock, port), daemon=True).start()

    def _record(self, proto: str, port: int, peer: str) -> None:
        with self._state_lock:
            self._peers[(proto, port)].append(str(ipaddress.ip_address(peer.split("%", 1)[0])))

    def _tcp_accept_loop(self, sock: socket.socket, port: int) -> None:
        while True:
            conn, peer = sock.accept()
            self._record("tcp", port, peer[0])
            threading.Thread(target=self._tcp_serve, args=(conn,), daemon=True).start()

    def _tcp_serve(self, conn: socket.socket) -> None:
        """Answer every line until the client closes: held connections need it."""
        reply = self.name.encode() + b"\n"
        buf = b""
        with conn:
            try:
                while chunk := conn.recv(4096):
                    buf += chunk
                    while b"\n" in buf:
                        _, buf = buf.split(b"\n", 1)
                        conn.sendall(reply)
            except OSError:
                return

    def _udp_loop(self, sock: socket.socket, port: int) -> None:
        reply = self.name.encode()
        while True:
            _, ancdata, _, peer = sock.recvmsg(65535, socket.CMSG_SPACE(32))
            self._record("udp", port, peer[0])
            cmsgs = []
            for level, kind, data in ancdata:
                if level == socket.IPPROTO_IP and kind == IP_PKTINFO:
                    _, _, dst = struct.unpack("=i4s4s", data[:12])
                    cmsgs.append((level, kind, struct.pack("=i4s4s", 0, dst, bytes(4))))
                elif level == socket.IPPROTO_IPV6 and kind == socket.IPV6_PKTINFO:
                    cmsgs.append((level, kind, data[:16] + bytes(4)))
            try:
                sock.sendmsg([reply], cmsgs, 0, peer)
            except OSError:
                continue

    # --- clients -------------------------------------------------------------

    def _tcp_open(
        self, dst: str, port: int, deadline: float, sport: int | None = None
    ) -> tuple[_LineSocket | None, dict[str, Any]]:
        """Connect and do one exchange: "ok" means a server really answered."""
        sock = socket.socket(_family(dst), socket.SOCK_STREAM)
        if sport is not None:
            # Reset on close (no TIME_WAIT), so the same source port can probe
            # the same server again at once.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            _bind_source(sock, dst, sport)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.connect((dst, port))
        except OSError as exc:
            sock.close()
            return None, _probe(False, error=_error_name(exc))
        conn = _LineSocket(sock)
        result = conn.exchange(deadline)
        if not result["ok"]:
            sock.close()
            return None, result
        return conn, result

    def _udp_probe(
        self, dst: str, port: int, deadline: float, sport: int | None = None
    ) -> dict[str, Any]:
        with socket.socket(_family(dst), socket.SOCK_DGRAM) as sock:
            if sport is not None:
                _bind_source(sock, dst, sport)
            try:
                sock.connect((dst, port))
                sock.send(PROBE_LINE)
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                return _probe(True, reply=sock.recv(65535).decode())
            except OSError as exc:
                return _probe(False, error=_error_name(exc))

    def _icmp_echo(self, dst: str, deadline: float) -> dict[str, Any]:
        af = _family(dst)
        proto = socket.IPPROTO_ICMPV6 if af == socket.AF_INET6 else socket.IPPROTO_ICMP
        # Every raw socket sees every ICMP packet, so (ident, seq) tell ours apart.
        n = next(self._ids)
        ident, seq = (os.getpid() + n) & 0xFFFF, n & 0xFFFF
        packet = struct.pack("!BBHHH", _ICMP_REQUEST[af], 0, 0, ident, seq) + b"dataplane-probe"
        if af == socket.AF_INET:  # the kernel checksums ICMPv6 itself
            packet = packet[:2] + struct.pack("!H", _checksum(packet)) + packet[4:]
        with socket.socket(af, socket.SOCK_RAW, proto) as sock:
            try:
                sock.sendto(packet, (dst, 0))
                while True:
                    sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    data, peer = sock.recvfrom(65535)
                    if af == socket.AF_INET:
                        data = data[(data[0] & 0x0F) * 4 :]  # v4 raw sockets include the IP header
                    kind = data[0]
                    if kind == _ICMP_REPLY[af] and data[4:8] == packet[4:8]:
                        if _same_addr(peer[0], dst):
                            return _probe(True, reply=peer[0])
                    elif kind in _ICMP_UNREACH[af] and packet[4:8] in data[8:]:
                        return _probe(False, error=f"icmp error type {kind} from {peer[0]}")
            except OSError as exc:
                return _probe(False, error=_error_name(exc))


def _bind_source(sock: socket.socket, dst: str, sport: int) -> None:
    """Bind a client socket to source port ``sport`` (policy tests match on it).

    A failure raises (the op fails loudly): it is no verdict about the network.
    """
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if _family(dst) == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(("::", sport))
        else:
            sock.bind(("0.0.0.0", sport))
    except OSError:
        sock.close()
        raise


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return int(~total & 0xFFFF)


def main(argv: list[str]) -> None:
    agent = Agent(argv[1] if len(argv) > 1 else socket.gethostname(), sys.stdout.buffer)
    for line in sys.stdin.buffer:
        threading.Thread(target=agent.handle, args=(line,), daemon=True).start()
    # stdin closed: the owner is gone. Leave at once, servers and all.
    os._exit(0)


# --- client side ------------------------------------------------------------


class AgentError(RuntimeError):
    """The agent could not run an op, died, or did not answer in time."""


@dataclass(frozen=True)
class ProbeResult:
    """One probe's verdict: ``ok`` only if the far end really answered."""

    ok: bool
    reply: str | None = None
    error: str | None = None


class HeldConnection:
    """An established TCP connection kept open inside the agent.

    ``check`` exchanges a line on the same connection, proving an established
    flow survives a change (policy update, conntrack flush, ...).
    """

    def __init__(self, agent: AgentClient, hold_id: int, first_reply: str | None) -> None:
        self._agent = agent
        self.hold_id = hold_id
        self.first_reply = first_reply

    def check(self, timeout: float = 1.0) -> bool:
        return bool(self._agent.call("check", timeout, hold_id=self.hold_id)["ok"])

    def close(self) -> None:
        self._agent.call("close", hold_id=self.hold_id)

    def __enter__(self) -> HeldConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AgentClient:
    """Starts the agent on first use and multiplexes calls over its pipes.

    Thread-safe: concurrent calls are matched to replies by request id.
    """

    # Headroom over an op's own timeout: covers interpreter start-up on the
    # first call and scheduling noise; a stuck agent still fails the call.
    SLACK = 5.0

    def __init__(self, netns: str, name: str, python: str = sys.executable) -> None:
        self.netns = netns
        self.name = name
        self._python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._pending: dict[int, Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def call(self, op: str, timeout: float = 1.0, **args: object) -> dict[str, Any]:
        future: Future[dict[str, Any]] = Future()
        with self._lock:
            proc = self._start()
            request_id = next(self._ids)
            self._pending[request_id] = future
            line = json.dumps({"id": request_id, "op": op, "timeout": timeout, **args})
            try:
                assert proc.stdin is not None
                proc.stdin.write(line.encode() + b"\n")
                proc.stdin.flush()
            except OSError as exc:
                self._pending.pop(request_id, None)
                raise AgentError(f"agent in {self.netns} is gone: {exc}") from exc
        try:
            response = future.result(timeout=timeout + self.SLACK)
        except TimeoutError as exc:
            raise AgentError(f"agent in {self.netns} did not answer {op}") from exc
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
        if "error" in response:
            raise AgentError(f"{op} in {self.netns} failed: {response['error']}")
        result: dict[str, Any] = response["result"]
        return result

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            argv = ["ip", "netns", "exec", self.netns, self._python, __file__, self.name]
            # Own session: a Ctrl-C aimed at the test run must not also kill
            # (and traceback) the agents; the topology stops them itself.
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
            )
            threading.Thread(target=self._read_replies, args=(self._proc,), daemon=True).start()
        return self._proc

    def _read_replies(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            response = json.loads(line)
            with self._lock:
                future = self._pending.get(response["id"])
            if future is not None:
                future.set_result(response)
        with self._lock:
            orphans, self._pending = list(self._pending.values()), {}
        for future in orphans:
            if not future.done():  # answered, but its caller has not collected it yet
                future.set_exception(AgentError(f"agent in {self.netns} exited"))

    def hold(self, proto: str, dst: str, port: int, timeout: float = 1.0) -> HeldConnection:
        """Open a TCP connection, do one exchange, and keep it open."""
        result = self.call("hold", timeout, proto=proto, dst=dst, port=port)
        if not result["ok"]:
            raise AgentError(f"{self.name} could not hold {dst}:{port}: {result['error']}")
        return HeldConnection(self, int(result["hold_id"]), result["reply"])

    def stop(self, timeout: float = 2.0) -> None:
        """Close stdin (the agent's cue to exit); kill it if it lingers."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        if proc.stdout is not None:
            proc.stdout.close()


if __name__ == "__main__":
    main(sys.argv)
