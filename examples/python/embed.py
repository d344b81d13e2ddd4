"""Embedding portcullis from Python with ctypes: start a proxy that allows
one origin, relay one real HTTP request through it (urllib), read the
counters, replace the policy (the same request is then refused), watch the
session events, shut down.

    cargo rustc --release --lib --crate-type cdylib
    python3 examples/python/embed.py target/release/libportcullis.so 127.0.0.1:8080

Exit status 0 when every step behaved as expected.
"""

import ctypes
import json
import sys
import urllib.error
import urllib.request

OK, CONFIG = 0, 2  # PortcullisStatus values from include/portcullis.h

EVENT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


def load(path):
    lib = ctypes.CDLL(path)
    P, S = ctypes.c_void_p, ctypes.c_char_p
    out_p, out_s = ctypes.POINTER(P), ctypes.POINTER(P)
    lib.portcullis_version.restype = S
    lib.portcullis_last_error.restype = S
    sig = {
        "portcullis_start": [S, ctypes.POINTER(S), ctypes.c_size_t,
                             ctypes.POINTER(S), ctypes.c_size_t, out_p],
        "portcullis_start_toml": [S, out_p],
        "portcullis_local_addr": [P, ctypes.c_size_t, out_s],
        "portcullis_stats_json": [P, out_s],
        "portcullis_replace_policy": [P, S],
        "portcullis_subscribe": [P, EVENT_CALLBACK, P],
        "portcullis_stop": [P, ctypes.c_int],
    }
    for name, args in sig.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, ctypes.c_int
    lib.portcullis_free.argtypes, lib.portcullis_free.restype = [P], None
    lib.portcullis_string_free.argtypes, lib.portcullis_string_free.restype = [P], None
    return lib


class PortcullisError(Exception):
    pass


def check(lib, status, what):
    if status != OK:
        why = lib.portcullis_last_error()
        raise PortcullisError(f"{what}: status {status}: {why.decode() if why else '?'}")


def take_string(lib, ptr):
    """Copies a string portcullis handed out, then frees it (we own it)."""
    try:
        return ctypes.string_at(ptr.value).decode()
    finally:
        lib.portcullis_string_free(ptr)


def get_through(proxy_addr, origin):
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": f"http://{proxy_addr}"}))
    try:
        with opener.open(f"http://{origin}/hello", timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def main(lib_path, origin):
    lib = load(lib_path)
    print("portcullis", lib.portcullis_version().decode())

    # Loopback is refused unless a rule names it: allow exactly the origin.
    allow = (ctypes.c_char_p * 1)(origin.encode())
    proxy = ctypes.c_void_p()
    check(lib, lib.portcullis_start(b"127.0.0.1:0", allow, 1, None, 0,
                                    ctypes.byref(proxy)), "portcullis_start")
    try:
        events = []

        # Called on the proxy's portcullis-evt thread; the string is
        # copied by ctypes (c_char_p -> bytes) before the call returns.
        @EVENT_CALLBACK
        def on_event(_user_data, event_json):
            events.append(json.loads(event_json))

        check(lib, lib.portcullis_subscribe(proxy, on_event, None), "portcullis_subscribe")

        out = ctypes.c_void_p()
        check(lib, lib.portcullis_local_addr(proxy, 0, ctypes.byref(out)), "portcullis_local_addr")
        addr = take_string(lib, out)
        print("proxy on", addr)

        first = get_through(addr, origin)
        print(f"response: {first}")

        check(lib, lib.portcullis_stats_json(proxy, ctypes.byref(out)), "portcullis_stats_json")
        stats = json.loads(take_string(lib, out))
        print("stats: allowed=%d denied=%d" % (stats["allowed"], stats["denied"]))

        status = lib.portcullis_replace_policy(proxy, b"[[rules]]\nactoin = \"allow\"\n")
        if status == CONFIG:
            print("bad policy refused:", lib.portcullis_last_error().decode())
        check(lib, lib.portcullis_replace_policy(
            proxy,
            b'[[rules]]\nname = "example-only"\naction = "allow"\n'
            b'hosts = ["example.com"]\nports = [443]\n'), "portcullis_replace_policy")
        second = get_through(addr, origin)
        print(f"response: {second}")

        # Stopping delivers the queued events before it returns.
        check(lib, lib.portcullis_stop(proxy, 0), "portcullis_stop")
    finally:
        lib.portcullis_free(proxy)

    for e in events:
        print("event:", json.dumps(e))
    sessions = [e for e in events if e["event"] == "session"]
    print("first=%d second=%d sessions=%d decisions=%s" % (
        first[0], second[0], len(sessions), ",".join(e.get("decision", "-") for e in sessions)))
    ok = first[0] == 200 and second[0] == 403 and stats["allowed"] >= 1 and len(sessions) == 2
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} LIBPORTCULLIS.so HOST:PORT")
    sys.exit(main(sys.argv[1], sys.argv[2]))
