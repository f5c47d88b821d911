#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The scale and storm scenarios' results (bench/scale.sh writes them
under WORK): the Targets rows for bench/summarize.py, and a markdown
section of their own.

    bench/scale.py WORK [--smoke]     prints the section (run.sh --scale)

Raw files: scale-keys.{one,many}.N.{json,mem,log}, storm.N.json,
storm.flags, flood.tsv, flood.PHASE.*.out, nonce.json."""
import glob
import json
import os
import re
import statistics
import sys

MB200_KIB = 200e6 / 1024  # the target's 200 MB, in the KiB of VmHWM


def _med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def _json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _verdict(ok):
    return "not measured" if ok is None else ("**met**" if ok else "**not met**")


def _fmt(x, d=2):
    return "-" if x is None else f"{x:,.{d}f}"


def keys(work):
    """Medians of the key-store scenario, or None when it did not run."""
    out = {"one": [], "many": [], "load_s": [], "mib": [], "nkeys": None,
           "rss_one": [], "rss_many": [], "wall_many": [], "errors": 0}
    for which in ("one", "many"):
        for jf in sorted(glob.glob(f"{work}/scale-keys.{which}.*.json")):
            j = _json(jf)
            if j:
                out[which].append(j["ops_per_sec"])
                out["errors"] += j.get("errors", 0)
        for mf in sorted(glob.glob(f"{work}/scale-keys.{which}.*.mem")):
            wall, rss, _hwm = open(mf).read().split()[:3]
            out[f"rss_{which}"].append(int(rss))
            if which == "many":
                out["wall_many"].append(float(wall))
    for lf in sorted(glob.glob(f"{work}/scale-keys.many.*.log")):
        m = re.search(r"key store: (\d+) keys loaded in ([0-9.]+)s, "
                      r"(?:about ([0-9.]+) MiB)?", open(lf).read())
        if m:
            out["nkeys"] = int(m.group(1))
            out["load_s"].append(float(m.group(2)))
            out["mib"].append(float(m.group(3)) if m.group(3) else None)
    if not out["many"]:
        return None
    r = {k: _med(v) if isinstance(v, list) else v for k, v in out.items()}
    r["runs"] = len(out["many"])
    r["ratio"] = r["many"] / r["one"] if r["one"] else None
    return r


def storm(work):
    runs = [j for j in (_json(f) for f in sorted(glob.glob(f"{work}/storm.*.json"))) if j]
    if not runs:
        return None
    all_s = [j["all_served_s"] for j in runs]
    return {
        "runs": len(runs),
        "clients": runs[0]["clients"],
        "share": _med([j["resumed_share"] for j in runs]),
        # a run that did not serve everyone counts as infinitely slow
        "all_s": _med([float("inf") if a is None else a for a in all_s]),
        "p50": _med([j["served_p50_s"] for j in runs]),
        "p99": _med([j["served_p99_s"] for j in runs]),
        "retries": _med([j["retries"] for j in runs]),
        "never": max(j["never_served"] for j in runs),
        "prime_s": _med([j["prime_s"] for j in runs]),
        "tls": runs[0]["tls_version"],
        "flags": open(f"{work}/storm.flags").read().strip()
        if os.path.exists(f"{work}/storm.flags") else "",
    }


def flood(work):
    try:
        rows = [l.rstrip("\n").split("\t") for l in open(f"{work}/flood.tsv") if l.strip()]
    except OSError:
        return None
    out = []
    for name, rss0, hwm, rss in rows:
        tools = []
        for f in sorted(glob.glob(f"{work}/flood.{name}.*.out")):
            txt = open(f).read().strip().splitlines()
            # keyless-bench -idle: the line that says how many opened
            opened = [t for t in txt if t.startswith("Idle connections open")]
            tools.append(opened[0] if opened else txt[-1] if txt else "(no output)")
        out.append({"phase": name, "rss0": int(rss0 or 0), "hwm": int(hwm or 0),
                    "rss": int(rss or 0), "tools": tools})
    return out or None


def rows(work):
    """(measure, target, measured, verdict) for the Targets table."""
    r = []
    f = flood(work)
    if f:
        peak = max(f, key=lambda p: p["hwm"])
        r.append(("memory under any client behaviour (floods, default limits, one key)", "<= 200 MB",
                  f"peak VmHWM {peak['hwm'] / 1024:,.0f} MiB = {peak['hwm'] * 1024 / 1e6:,.0f} MB "
                  f"({peak['phase']} flood); "
                  + ", ".join(f"{p['phase']} {p['hwm'] / 1024:,.0f}" for p in f) + " MiB",
                  _verdict(peak["hwm"] <= MB200_KIB)))
    else:
        r.append(("memory under any client behaviour", "<= 200 MB", "-", "not measured by this run"))
    k = keys(work)
    if k:
        ok = None if k["load_s"] is None or k["ratio"] is None else (
            k["load_s"] <= 5 and k["ratio"] >= 0.95)
        r.append((f"{k['nkeys'] or 0:,} EC keys: load time, throughput vs one key, key store memory",
                  "<= 5 s, within 5%, reported",
                  f"loaded in {_fmt(k['load_s'])} s; {_fmt(k['many'], 0)}/s vs {_fmt(k['one'], 0)}/s "
                  f"= {_fmt(k['ratio'])}x; key store {_fmt(k['mib'], 0)} MiB "
                  f"(RSS {_fmt(k['rss_one'] / 1024 if k['rss_one'] else None, 0)} -> "
                  f"{_fmt(k['rss_many'] / 1024 if k['rss_many'] else None, 0)} MiB)",
                  _verdict(ok)))
    else:
        r.append(("100,000 EC keys: load time, throughput", "<= 5 s, within 5%", "-",
                  "not measured by this run"))
    s = storm(work)
    if s:
        ok = s["share"] >= 0.99 and s["all_s"] <= 5
        all_s = "not all served" if s["all_s"] == float("inf") else f"all served in {s['all_s']:.2f} s"
        r.append((f"reconnect storm, {s['clients']:,} clients", ">= 99% resumed in 5 s",
                  f"{s['share'] * 100:.1f}% resumed, {all_s} ({s['retries']:,.0f} retries)",
                  _verdict(ok)))
    else:
        r.append(("reconnect storm, 10,000 clients", ">= 99% resumed in 5 s", "-",
                  "not measured by this run"))
    return r


def section(work, smoke=False):
    """The "Scale and storm scenarios" markdown lines."""
    L = ["## Scale and storm scenarios" + (" (smoke: tiny sizes, not numbers)" if smoke else ""), ""]
    L.append("bench/scale.sh, run by `bench/run.sh` (alone: `bench/run.sh --scale`).")
    L.append("")
    L.append("| measure | target | measured | |")
    L.append("|---|---|---|---|")
    for t in rows(work):
        L.append("| " + " | ".join(t) + " |")
    k = keys(work)
    if k:
        L += ["", f"**Many keys** ({k['nkeys'] or 0:,} P-256 keys from bench/tools/keygen-many.c, medians of "
              f"{k['runs']}): keylessd's own load line `key store: N keys loaded in X s, about Y MiB` "
              f"(heap growth over the load) says {_fmt(k['load_s'])} s and {_fmt(k['mib'], 1)} MiB "
              f"({_fmt(k['mib'] * 1048576 / k['nkeys'] / 1024 if k['mib'] and k['nkeys'] else None, 1)} KiB per key); "
              f"start to listening {_fmt(k['wall_many'])} s; RSS once loaded "
              f"{_fmt(k['rss_many'] / 1024 if k['rss_many'] else None, 0)} MiB vs "
              f"{_fmt(k['rss_one'] / 1024 if k['rss_one'] else None, 0)} MiB with one key. "
              f"ECDSA-SHA256 8 x 64 with each request signing with a random key of the "
              f"{k['nkeys'] or 0:,} (`keyless-bench -ski-file`): {_fmt(k['many'], 0)}/s, one-key store "
              f"{_fmt(k['one'], 0)}/s ({_fmt(k['ratio'])}x); errors {k['errors']}."]
    s = storm(work)
    if s:
        L += ["", f"**Reconnect storm** (bench/tools/storm.c, medians of {s['runs']}): {s['clients']:,} clients "
              f"primed with full mutual-TLS handshakes (50 at a time, {_fmt(s['prime_s'], 1)} s), then all "
              f"reconnect at once offering their sessions ({s['tls']}); served = the pong of a ping came back. "
              f"Resumed {s['share'] * 100:.1f}%; time to serve: p50 {_fmt(s['p50'])} s, p99 {_fmt(s['p99'])} s, "
              f"all {('-' if s['all_s'] == float('inf') else _fmt(s['all_s']))} s; connections closed by keylessd's "
              f"handshake limits and retried (10-160 ms backoff): {s['retries']:,.0f}; never served: {s['never']}. "
              f"keylessd flags: `{s['flags']}` (every client shares 127.0.0.1, one source)."]
    f = flood(work)
    if f:
        L += ["", "**Floods** (bench/tools/flood.c and keyless-bench -idle; one fresh keylessd per flood with "
              "default limits and one key; VmHWM at the end of the flood):", "",
              "| flood | RSS before | peak RSS (VmHWM) | RSS at the end | what the clients did |", "|---|---:|---:|---:|---|"]
        for p in f:
            L.append(f"| {p['phase']} | {p['rss0'] / 1024:,.1f} MiB | {p['hwm'] / 1024:,.1f} MiB | "
                     f"{p['rss'] / 1024:,.1f} MiB | {'<br>'.join(t.replace('|', '/') for t in p['tools'])} |")
    n = _json(f"{work}/nonce.json")
    if n:
        e, st, sx = n["evp_sign_us"], n["setup_us"], n["sign_ex_us"]
        L += ["", f"**ECDSA nonce precomputation** (bench/tools/ecdsa-nonce.c, P-256, {n['iterations']:,} "
              f"signatures x {n['reps']} rounds, one core, best / median us per operation): EVP_PKEY_sign "
              f"{e['best']:.2f} / {e['median']:.2f}; ECDSA_do_sign {n['full_sign_us']['best']:.2f} / "
              f"{n['full_sign_us']['median']:.2f}; ECDSA_sign_setup alone (what could move to idle time) "
              f"{st['best']:.2f} / {st['median']:.2f}; ECDSA_do_sign_ex with a precomputed (kinv, r) "
              f"{sx['best']:.2f} / {sx['median']:.2f}. See docs/DESIGN.md for the decision."]
    return L


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: scale.py WORK [--smoke]")
    print("\n".join(section(sys.argv[1], "--smoke" in sys.argv[2:])))
