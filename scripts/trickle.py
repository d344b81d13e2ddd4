#!/usr/bin/env python3
"""The proxy's CPU for bytes trickled one at a time: request heads into
the handshake, and first flights into vetted raw tunnels.

Starts BINARY on 127.0.0.1:PORT with two rules on one loopback port (a
silent upstream listening there): `localhost` raw, `a.localhost`
inspected, so a tunnel to localhost is vetted (its first flight read and
parsed before anything is relayed). For each case, opens CONNS
connections and sends each its bytes one per send, every connection's
next byte after a short pause, so each byte arrives on its own; the bytes
stay just short of their end (or of the bound):

- a 30 KiB CONNECT head (thirty 1,000-byte headers), to the handshake;
- into vetted tunnels: a 16 KiB request head, 16 KiB of CRLFs, and a
  ClientHello in 30 KiB of one-byte records.

Prints the proxy's CPU seconds (utime + stime, /proc) per case: the
wake-ups and reads a byte costs, plus whatever parsing costs (quadratic
in the size if every arrival re-parses what came so far).

    scripts/trickle.py target/release/portcullis [PORT] [CONNS]
    # two builds, same run:
    for b in "$BASELINE_BIN" target/release/portcullis; do scripts/trickle.py "$b"; done
"""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

binary = sys.argv[1]
port = int(sys.argv[2]) if len(sys.argv) > 2 else 39011
conns = int(sys.argv[3]) if len(sys.argv) > 3 else 4

# The silent upstream: accepts and holds every connection.
upstream = socket.socket()
upstream.bind(("127.0.0.1", 0))
upstream.listen(64)
up_port = upstream.getsockname()[1]
held = []
threading.Thread(target=lambda: [held.append(upstream.accept()) for _ in iter(int, 1)], daemon=True).start()

config = f"""
[timeouts]
handshake = "120s"

[[rules]]
name = "inspected"
action = "allow"
host = "a.localhost"
port = {up_port}
inspect = "http"

[[rules]]
name = "raw"
action = "allow"
hosts = ["localhost"]
cidrs = ["127.0.0.1/32"]
match = "both"
ports = [{up_port}]
"""


def hello_in_one_byte_records(size):
    """A ClientHello message of `size` bytes (padding), one byte a record."""
    body = bytes([3, 3]) + bytes(32) + bytes([0, 0, 2, 0x13, 0x01, 1, 0])
    pad = size - 4 - len(body) - 2 - 4
    body += (pad + 4).to_bytes(2, "big") + bytes([0, 21]) + pad.to_bytes(2, "big") + bytes(pad)
    msg = bytes([1]) + len(body).to_bytes(3, "big") + body
    return b"".join(b"\x16\x03\x01\x00\x01" + msg[i : i + 1] for i in range(len(msg)))


connect_head = b"CONNECT example.test:443 HTTP/1.1\r\n"
connect_head += b"".join(b"X-F: " + b"f" * 1000 + b"\r\n" for _ in range(30))
head = b"GET / HTTP/1.1\r\nHost: localhost\r\n"
head += b"".join(b"X-F: " + b"f" * 500 + b"\r\n" for _ in range(31))
# Into the handshake: no CONNECT first.
heads = {"30 KiB CONNECT head": connect_head}
# Into a vetted tunnel, after its CONNECT.
flights = {
    # All but the end: incomplete throughout.
    "16 KiB request head": head,
    "16 KiB of CRLFs": b"\r\n" * 8100,
    "ClientHello, 1-byte records (30 KiB)": hello_in_one_byte_records(5 * 1024)[:-1],
}

with tempfile.NamedTemporaryFile("w", suffix=".toml") as cfg:
    cfg.write(config)
    cfg.flush()
    proxy = subprocess.Popen(
        [binary, "--listen", f"127.0.0.1:{port}", "--config", cfg.name], stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)

        def cpu():
            fields = open(f"/proc/{proxy.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        cases = [(name, b, False) for name, b in heads.items()]
        cases += [(name, b, True) for name, b in flights.items()]
        for name, flight, tunnel in cases:
            socks = []
            for _ in range(conns):
                s = socket.create_connection(("127.0.0.1", port))
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if tunnel:
                    s.sendall(f"CONNECT localhost:{up_port} HTTP/1.1\r\n\r\n".encode())
                    reply = s.recv(4096)
                    assert reply.startswith(b"HTTP/1.1 200"), reply
                socks.append(s)
            before = cpu()
            for i in range(len(flight)):
                for s in socks:
                    s.send(flight[i : i + 1])
                time.sleep(0.00002)
            time.sleep(0.3)
            spent = cpu() - before
            for s in socks:
                s.setblocking(False)
                try:
                    early = s.recv(4096)
                except BlockingIOError:
                    early = b""
                assert not early, f"{name}: answered early: {early[:80]!r}"
                s.close()
            print(f"{binary}: {name}, {conns} connections of {len(flight)} bytes, a byte per send: proxy CPU {spent:.2f} s")
    finally:
        proxy.kill()
