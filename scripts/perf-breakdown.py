#!/usr/bin/env python3
"""Where the gateway's CPU goes per request, from the perf profiles of scripts/bench-wrk.sh (PERF=DIR).

    python3 scripts/perf-breakdown.py DIR STORE...

For each store, and for the buy path and respond, the microseconds of gateway CPU per answered
request spent under each part below (inclusive: a part's callees count in it), as the range over
the rounds. A part's share is its share of perf's samples of the gateway, scaled by the gateway's
CPU per request that /proc gave for that run: perf's sampling in a virtual machine can miss some
of the time, so the shares come from perf and the total from /proc.
"""
import glob
import os
import re
import subprocess
import sys

# (label, symbol): inclusive time under the symbol. Indented labels are parts of the one above.
PARTS = [
    ("net/http: a connection's requests, all of it", "net/http.(*conn).serve"),
    ("  reading the request", "net/http.(*conn).readRequest"),
    ("  Caddy's server handler", "github.com/caddyserver/caddy/v2/modules/caddyhttp.(*Server).ServeHTTP"),
    ("    the seckill handler", "github.com/caddy-seckill/caddy-seckill/caddymodule.(*Handler).ServeHTTP"),
    ("      token check", "github.com/caddy-seckill/caddy-seckill/caddymodule.(*request).authenticate"),
    ("      IP limit", "github.com/caddy-seckill/caddy-seckill/caddymodule.(*request).limitIP"),
    ("      user limit", "github.com/caddy-seckill/caddy-seckill/caddymodule.(*request).limitUser"),
    ("      hashed path", "github.com/caddy-seckill/caddy-seckill/hashedurl.(*Key).Verify"),
    ("      admission (breaker, deadline, store)", "github.com/caddy-seckill/caddy-seckill/admission.(*Guard).Decide"),
    ("        store local: Admit", "github.com/caddy-seckill/caddy-seckill/admission/localstore.(*Store).Admit"),
    ("        store memory: Admit", "github.com/caddy-seckill/caddy-seckill/admission/localstore.(*Memory).Admit"),
    ("      the answer (JSON and headers)", "github.com/caddy-seckill/caddy-seckill/caddymodule.writeJSON"),
    ("    respond", "github.com/caddyserver/caddy/v2/modules/caddyhttp.StaticResponse.ServeHTTP"),
    ("  finishing the answer (its write)", "net/http.(*response).finishRequest"),
    ("store local's writer goroutine (commits)", "github.com/caddy-seckill/caddy-seckill/admission/localstore.(*localWriter).run"),
    ("garbage collector's mark workers", "runtime.gcBgMarkWorker"),
    ("scheduler (finding work)", "runtime.schedule"),
    ("system calls, all", "internal/runtime/syscall/linux.Syscall6"),
]


def shares(perf_file):
    """Inclusive share (0..1) of every symbol in a perf.data file."""
    out = subprocess.run(
        ["perf", "report", "-i", perf_file, "--children", "-g", "none", "--sort", "sym", "--stdio"],
        capture_output=True, text=True, check=True).stdout
    d = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+[\d.]+%\s+\[.\]\s+(.*\S)", line)
        if m:
            d.setdefault(m.group(2), float(m.group(1)) / 100)
    return d


def rounds(folder, store, path):
    """[(cpu µs per request, shares)] of every round of store's path."""
    got = []
    for f in sorted(glob.glob(os.path.join(folder, f"{store}-{path}-*.perf"))):
        base = f[:-len(".perf")]
        with open(base + ".cpu") as c:
            cpu = float(c.read())
        d = shares(f)
        if not d:  # perf took no sample (it happens on a loaded machine): the round would read 0.0
            print(f"perf-breakdown: {f} has no samples; its round is left out", file=sys.stderr)
            continue
        got.append((cpu, d))
    return got


def span(vals):
    if not vals:
        return "—"
    lo, hi = min(vals), max(vals)
    return f"{lo:.1f}" if abs(hi - lo) < 0.05 else f"{lo:.1f}–{hi:.1f}"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    folder = sys.argv[1]
    for store in sys.argv[2:]:
        data = {p: rounds(folder, store, p) for p in ("seckill", "respond")}
        if not data["seckill"]:
            print(f"perf-breakdown: no profiles of store {store} in {folder}", file=sys.stderr)
            continue
        print(f"\n# store {store}: gateway CPU µs per request ({len(data['seckill'])} rounds)")
        print("part | buy path | respond")
        print(f"gateway process, all (/proc) | {span([c for c, _ in data['seckill']])} | {span([c for c, _ in data['respond']])}")
        for label, sym in PARTS:
            cols = []
            for p in ("seckill", "respond"):
                cols.append(span([c * s.get(sym, 0) for c, s in data[p]]))
            if cols == ["0.0", "0.0"]:
                continue
            print(f"{label} | {cols[0]} | {cols[1]}")


if __name__ == "__main__":
    main()
