"""A small threaded TCP proxy between the library and Redis, for network faults.

    proxy = FaultProxy(upstream_port).start()
    url = proxy.url                 # give this to the code under test
    proxy.set_mode("latency", ms=50)
    proxy.set_mode("blackhole")     # accept connections, forward nothing, drop every byte
    proxy.set_mode("reset")         # RST every existing connection, and every new one
    proxy.set_mode("pass")
    proxy.stop()

Modes are switched at runtime from any thread; each pump re-reads the mode for every chunk.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

MODES = ("pass", "latency", "blackhole", "reset")


def _rst(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0) instead of a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class FaultProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.mode = "pass"
        self.latency = 0.0
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket | None]] = []
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self.accepted = 0
        self.resets = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> FaultProxy:
        threading.Thread(target=self._accept_loop, name="fault-proxy-accept", daemon=True).start()
        return self

    def set_mode(self, mode: str, ms: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        with self._lock:
            self.mode, self.latency = mode, ms / 1000.0
            conns = list(self._conns) if mode == "reset" else []
            if mode == "reset":
                self._conns.clear()
        for client, upstream in conns:
            self.resets += 1
            _rst(client)
            if upstream is not None:
                _rst(upstream)

    def stop(self) -> None:
        self._stopped.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            conns, self._conns = self._conns, []
        for client, upstream in conns:
            _rst(client)
            if upstream is not None:
                _rst(upstream)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            with self._lock:
                mode = self.mode
            if mode == "reset":
                self.resets += 1
                _rst(client)
                continue
            upstream: socket.socket | None = None
            if mode != "blackhole":
                try:
                    upstream = socket.create_connection(self.upstream, timeout=2)
                    upstream.settimeout(None)
                except OSError:
                    _rst(client)
                    continue
            with self._lock:
                self._conns.append((client, upstream))
            threading.Thread(target=self._serve, args=(client, upstream), daemon=True,
                             name="fault-proxy-conn").start()

    def _serve(self, client: socket.socket, upstream: socket.socket | None) -> None:
        """Pump both directions on one thread with select, re-reading the mode for every chunk.
        A connection accepted during a blackhole has no upstream: it only swallows bytes."""
        try:
            while not self._stopped.is_set():
                socks = [client] if upstream is None else [client, upstream]
                try:
                    ready, _, _ = select.select(socks, [], [], 0.1)
                except (OSError, ValueError):
                    return
                for sock in ready:
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    with self._lock:
                        mode, latency = self.mode, self.latency
                    if mode == "blackhole" or upstream is None:
                        continue  # dropped
                    if mode == "reset":
                        return
                    if mode == "latency" and latency:
                        time.sleep(latency)
                    other = upstream if sock is client else client
                    try:
                        other.sendall(data)
                    except OSError:
                        return
        finally:
            with self._lock:
                if (client, upstream) in self._conns:
                    self._conns.remove((client, upstream))
            _rst(client)
            if upstream is not None:
                _rst(upstream)
