"""A TCP proxy on loopback that adds a fixed delay to every HTTP request passing through it:
the latency of a network between an object store's clients and the store, for benchmarks
against a local emulator (tools/gcs_emulator.py).

HTTP-aware in one respect only: on each connection, the first bytes the client sends after
the server's last response bytes (or after connecting) start a new request, and those bytes
are held back for the delay before they are forwarded; the rest of the request (a body sent
in many chunks) and every response byte pass at once. So each request/response exchange
costs one delay -- one round trip -- whatever its size, and requests on different
connections are delayed in parallel, as on a network. (Requests pipelined on one connection
without waiting for responses would be delayed once; HTTP clients here do not pipeline.)

    python tools/latency_proxy.py --target 127.0.0.1:4443 --delay-ms 20 [--port 0]

prints ``listening on 127.0.0.1:PORT`` and forwards until terminated; :func:`start_process`
runs it so from a benchmark (its own process: the forwarding threads then do not compete with
the benchmark for the interpreter lock), :class:`LatencyProxy` in this process.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional, Tuple

_CHUNK = 1 << 16


class LatencyProxy:
    """The proxy (module docstring), served by threads of this process."""

    def __init__(self, target: Tuple[str, int], delay_s: float, port: int = 0):
        self.target = (target[0], int(target[1]))
        self.delay_s = float(delay_s)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", int(port)))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self.requests = 0                      # requests delayed so far
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "LatencyProxy":
        self._thread = threading.Thread(target=self._accept, name="latency-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> "LatencyProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return                         # closed by stop()
            try:
                upstream = socket.create_connection(self.target, timeout=30)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _Connection(self, client, upstream).start()

    def _counted(self) -> None:
        with self._lock:
            self.requests += 1


class _Connection:
    """One client connection and its upstream connection: two pumping threads sharing the
    "next client bytes start a request" flag."""

    def __init__(self, proxy: LatencyProxy, client: socket.socket, upstream: socket.socket):
        self.proxy, self.client, self.upstream = proxy, client, upstream
        self.request_starts = True
        self._closed = threading.Event()

    def start(self) -> None:
        for target in (self._to_server, self._to_client):
            threading.Thread(target=target, daemon=True).start()

    def _close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        for s in (self.client, self.upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _to_server(self) -> None:
        try:
            while True:
                data = self.client.recv(_CHUNK)
                if not data:
                    break
                if self.request_starts:
                    self.request_starts = False
                    self.proxy._counted()
                    if self.proxy.delay_s > 0:
                        time.sleep(self.proxy.delay_s)
                self.upstream.sendall(data)
        except OSError:
            pass
        self._close()

    def _to_client(self) -> None:
        try:
            while True:
                data = self.upstream.recv(_CHUNK)
                if not data:
                    break
                self.request_starts = True     # the client's next bytes are a new request
                self.client.sendall(data)
        except OSError:
            pass
        self._close()


def _die_with_parent() -> None:
    """In the child before exec: the kernel sends SIGTERM when the parent thread dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):       # not Linux: terminate() still stops it
        pass


def start_process(target: str, delay_ms: float) -> Tuple[subprocess.Popen, int]:
    """This module as a child process in front of ``target`` (``host:port``); returns the
    process and the port it listens on. Stop it with ``terminate()`` and ``wait()`` (it also
    ends when the process that started it dies)."""
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--target", target,
                          "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True, preexec_fn=_die_with_parent)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        p.kill()
        p.wait()
        raise RuntimeError("the latency proxy did not start: %r" % line)
    return p, int(line.rsplit(":", 1)[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="host:port to forward to")
    ap.add_argument("--delay-ms", type=float, required=True, help="delay added per request")
    ap.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one)")
    args = ap.parse_args(argv)
    host, port = args.target.rsplit(":", 1)
    proxy = LatencyProxy((host, int(port)), args.delay_ms / 1000.0, args.port).start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print("listening on 127.0.0.1:%d" % proxy.port, flush=True)
    while not done.wait(1.0):
        pass
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
