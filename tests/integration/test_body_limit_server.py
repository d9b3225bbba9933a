"""A huge body sent to a real `recalld serve` is refused before it is read, auth or parsing."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path

import psutil

from tests.integration.test_cli_serve import _serve, data_dir
from tests.support import free_port, wait_ready

__all__ = ["data_dir"]  # the fixture: a fresh data directory, its PostgreSQL killed afterwards

BIG = 256 * 1024 * 1024
CHUNK = b"x" * (1024 * 1024)


def _send_until_answered(port: int, head: bytes, *, chunked: bool) -> bytes:
    """Send head, then up to BIG body bytes until the server answers; return the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        sent = 0
        pending = b""
        answer = b""
        while sent < BIG:
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(65536)
            if answer:
                break
            if not pending:
                pending = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK
            try:
                written = sock.send(pending)
            except BlockingIOError:
                time.sleep(0.01)  # the server is not reading: it should be answering
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            pending = pending[written:]
            sent += written
        sock.setblocking(True)
        sock.settimeout(10)
        while True:  # the refusal closes the connection: read to its end
            try:
                part = sock.recv(65536)
            except ConnectionResetError:
                break
            if not part:
                break
            answer += part
        return answer


def _status_and_body(answer: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def test_256_mb_without_a_key_is_refused_with_413_and_rss_stays_flat(data_dir: Path) -> None:
    port = free_port()
    server = _serve(data_dir, port)
    try:
        wait_ready(port, server)
        process = psutil.Process(server.pid)
        before = process.memory_info().rss
        declared = (
            f"POST /v1/facts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {BIG}\r\n\r\n"
        ).encode()
        status, body = _status_and_body(_send_until_answered(port, declared, chunked=False))
        assert status == 413
        assert body["error"]["code"] == "payload_too_large"  # type: ignore[index]
        streamed = (
            b"PUT /v1/documents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        status, body = _status_and_body(_send_until_answered(port, streamed, chunked=True))
        assert status == 413
        grown = process.memory_info().rss - before
        assert grown < 50 * 1024 * 1024, f"server RSS grew by {grown / 2**20:.1f} MiB"
    finally:
        server.kill()
        server.wait(10)
