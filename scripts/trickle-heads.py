#!/usr/bin/env python3
"""The proxy's CPU for request heads trickled a byte at a time.

Starts BINARY on 127.0.0.1:PORT (default settings), opens CONNS connections,
and sends each a 30 KiB CONNECT head (thirty 1,000-byte headers) one byte per
send, every connection's next byte after a short pause, so each byte arrives
on its own. Prints the proxy's CPU seconds (utime + stime, /proc) for the
lot: the wake-ups and reads a byte costs, plus whatever parsing the heads
cost (quadratic in a head's size if every arrival re-parses it).

    scripts/trickle-heads.py target/release/portcullis [PORT] [CONNS]
    # two builds, same run:
    for b in "$BASELINE_BIN" target/release/portcullis; do scripts/trickle-heads.py "$b"; done
"""
import os
import socket
import subprocess
import sys
import time

binary = sys.argv[1]
port = int(sys.argv[2]) if len(sys.argv) > 2 else 39001
conns = int(sys.argv[3]) if len(sys.argv) > 3 else 4
proxy = subprocess.Popen([binary, "--listen", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
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

    head = b"CONNECT example.test:443 HTTP/1.1\r\n"
    head += b"".join(b"X-F: " + b"f" * 1000 + b"\r\n" for _ in range(30)) + b"\r\n"
    socks = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    before = cpu()
    # All but the final empty line: the heads stay incomplete throughout.
    for i in range(len(head) - 2):
        for s in socks:
            s.send(head[i : i + 1])
        time.sleep(0.00002)
    time.sleep(0.3)
    spent = cpu() - before
    print(f"{binary}: {conns} heads of {len(head)} bytes, a byte per send: proxy CPU {spent:.2f} s")
finally:
    proxy.kill()
