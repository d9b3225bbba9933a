"""The bench's client processes: standard library only, and all sending from the same instant.

They share the machine's cores with the server they measure. Importing the rest of the bench
(httpx, the corpus generators) cost each spawned process about 0.2 s of CPU, and workers that
started early were already measuring while later ones still imported: at concurrency 8 that
was about 2 s of CPU taken from the server inside a 15 s window.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.parse
from multiprocessing.synchronize import Barrier
from typing import Any

# Set in each pool process by `start_together`; the worker waits on it before its clock starts.
_start: Barrier | None = None


def start_together(barrier: Barrier) -> None:
    """Pool initializer: remember the barrier every worker (and the parent) waits on."""
    global _start
    _start = barrier


def connect(base_url: str) -> http.client.HTTPConnection:
    """A bare keep-alive connection to the server."""
    url = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    return connection(url.hostname or "127.0.0.1", url.port, timeout=30)


class Client:
    """One keep-alive HTTP/1.1 connection that POSTs JSON, as cheaply as Python can.

    http.client sends a request's headers and body in two writes (each a wake-up of the server's
    event loop, and on loopback the receiving side's network processing runs in the sender's
    write) and parses response headers with the email package: about 0.8 ms of client CPU per
    search, taken from the server on a 2-core machine. One write per request and a header split
    cost a fraction of that.
    """

    def __init__(self, base_url: str, api_key: str) -> None:
        url = urllib.parse.urlsplit(base_url)
        self._https = url.scheme == "https"
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._headers = (
            f"Host: {url.netloc}\r\nAuthorization: Bearer {api_key}\r\n"
            "Content-Type: application/json\r\nConnection: keep-alive\r\n"
        ).encode()
        self._sock: socket.socket | None = None
        self._buffer = b""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self._host, self._port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._https:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self._host)
        self._buffer = b""
        return sock

    def close(self) -> None:
        """Drop the connection (the next request opens a new one)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _receive(self, sock: socket.socket) -> None:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self._buffer += chunk

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Status, headers (lower-case names) and body of one POST."""
        sock = self._sock = self._sock or self._connect()
        sock.sendall(
            b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
            % ((self._prefix + path).encode(), self._headers, len(body), body)
        )
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            self._receive(sock)
        head, self._buffer = self._buffer[:end].decode("latin-1"), self._buffer[end + 4 :]
        status_line, *lines = head.split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        # The service always sends Content-Length; anything else counts as an error.
        length = int(headers["content-length"])
        while len(self._buffer) < length:
            self._receive(sock)
        content, self._buffer = self._buffer[:length], self._buffer[length:]
        if headers.get("connection", "").lower() == "close":
            self.close()
        return int(status_line.split(" ", 2)[1]), headers, content


def parse_server_timing(header: str | None) -> dict[str, float]:
    """`name;dur=ms` pairs of a Server-Timing header."""
    out: dict[str, float] = {}
    for part in (header or "").split(","):
        name, _, duration = part.strip().partition(";dur=")
        if name and duration:
            try:
                out[name] = float(duration)
            except ValueError:
                continue
    return out


def worker(
    args: tuple[str, str, str, str, list[str], float, int, int, dict[str, Any]],
) -> tuple[list[float], int, dict[str, list[float]]]:
    """Send queries one after another for `duration` seconds; latencies, errors, server timings."""
    base_url, api_key, endpoint, mode, queries, duration, max_requests, offset, extra = args
    latencies: list[float] = []
    errors = 0
    legs: dict[str, list[float]] = {}
    client = Client(base_url, api_key)
    if _start is not None:
        _start.wait()
    deadline = time.perf_counter() + duration
    i = offset
    while time.perf_counter() < deadline and len(latencies) + errors < max_requests:
        query = queries[i % len(queries)]
        i += 1
        body: dict[str, Any] = (
            {"query": query, "mode": mode, "limit": 10, **extra}
            if endpoint == "search"
            else {"topic": query, "limit": 10}
        )
        started = time.perf_counter()
        try:
            status, headers, content = client.post(f"/v1/{endpoint}", json.dumps(body).encode())
            json.loads(content)
        except (OSError, KeyError, ValueError):
            errors += 1
            client.close()
            continue
        elapsed = (time.perf_counter() - started) * 1000
        if status != 200:
            errors += 1
            continue
        latencies.append(elapsed)
        for leg, ms in parse_server_timing(headers.get("server-timing")).items():
            legs.setdefault(leg, []).append(ms)
    client.close()
    return latencies, errors, legs
