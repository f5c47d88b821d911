#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turns the raw results of bench/nginx/run.sh into RESULTS.md.

usage: summarize.py WORKDIR OUTDIR SMOKE

WORKDIR holds, per run, CASE.MODE.REP.h2load (h2load's output) and
CASE.MODE.REP.cpu (lines "wall T0 T1", "h2load USER SYS", "workers A0 B0
A1 B1", "keylessd K0 K1", "machine BUSY0 TOTAL0 BUSY1 TOTAL1", "kdreq R0
R1"), speed.ALG.N (openssl speed -multi 2), meta, date, loadavg.*,
nginx.conf.txt. A hand-written section of an existing OUTDIR/RESULTS.md
between the ANALYSIS markers is kept (it explains a particular run).
"""
import glob
import os
import platform
import re
import statistics
import subprocess
import sys

work, out, smoke = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
CORES = os.cpu_count() or 2
TARGET = 0.8
CASES = {
    "p256-tls13": ("TLS 1.3, ECDSA P-256", "ecdsap256", "ECDSA P-256 sign"),
    "rsa2048-tls13": ("TLS 1.3, RSA-2048 (RSA-PSS)", "rsa2048", "RSA-2048 sign"),
    "rsa2048-kx": ("TLS 1.2 RSA key exchange, AES256-GCM-SHA384, RSA-2048",
                   "rsa2048", "RSA-2048 private op (decrypt = sign)"),
}
MARK0, MARK1 = "<!-- ANALYSIS: kept by summarize.py -->", "<!-- /ANALYSIS -->"


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return ""


def med(v):
    return statistics.median(v) if v else float("nan")


meta = {}
for line in read(f"{work}/meta").splitlines():
    k, _, v = line.partition(" ")
    meta.setdefault(k, []).append(v)
m1 = lambda k: (meta.get(k) or [""])[0]

# ---- the ceiling: sign/s of `openssl speed -multi 2`, best of its runs
# (other work can only lower it; a lowered ceiling would flatter us)
ceiling = {}
for alg in ("ecdsap256", "rsa2048"):
    vals = []
    for f in glob.glob(f"{work}/speed.{alg}.*"):
        lines = read(f).splitlines()
        for i, l in enumerate(lines):
            if "sign/s" in l and i + 1 < len(lines):
                vals.append(float(lines[i + 1].split()[-2]))
    ceiling[alg] = (max(vals) if vals else float("nan"), vals)


# ---- the runs
def parse_run(case, mode, rep):
    base = f"{work}/{case}.{mode}.{rep}"
    h = read(base + ".h2load")
    rp, _, att = rep.partition("-")
    r = {"rep": int(rp), "attempt": int(att or 0),
         "kept": read(f"{work}/kept.{case}.{rp}", "0") == (att or "0")}
    m = re.search(r"finished in ([0-9.]+)(m?s), ([0-9.]+) req/s", h)
    r["rate"] = float(m.group(3)) if m else 0.0
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, "
                  r"(\d+) succeeded, (\d+) failed, (\d+) errored", h)
    r["done"], r["ok"], r["failed"], r["errored"] = (
        (int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(6)))
        if m else (0, 0, 0, 0))
    m = re.search(r"TLS Protocol: (\S+)", h)
    r["proto"] = m.group(1) if m else "?"
    m = re.search(r"Cipher: (\S+)", h)
    r["cipher"] = m.group(1) if m else "?"
    cpu = {}
    for l in read(base + ".cpu").splitlines():
        f = l.split()
        cpu[f[0]] = [float(x) if x != "-" else None for x in f[1:]]
    wall = cpu["wall"][1] - cpu["wall"][0]
    w = cpu["workers"]
    n = len(w) // 2
    r["w_split"] = [w[n + i] - w[i] for i in range(n)]
    r["wall"] = wall
    r["cpu"] = {
        "h2load": sum(cpu["h2load"]),
        "workers": sum(r["w_split"]),
        "keylessd": cpu["keylessd"][1] - cpu["keylessd"][0],
    }
    mb = cpu["machine"]
    hz = os.sysconf("SC_CLK_TCK")
    busy = (mb[2] - mb[0]) / hz
    total = (mb[3] - mb[1]) / hz
    r["cpu"]["other"] = max(0.0, busy - sum(r["cpu"].values()))
    r["idle_cores"] = max(0.0, (total - busy) / (total / CORES)) if total else 0
    k = cpu.get("kdreq", [None, None])
    r["kdreq"] = "-" if None in k else int(k[1] - k[0])
    return r


allruns, runs = {}, {}
for f in sorted(glob.glob(f"{work}/*.*.*.h2load")):
    case, mode, rep = os.path.basename(f).rsplit(".", 4)[0:3]
    if case not in CASES:
        continue
    r = parse_run(case, mode, rep)
    allruns.setdefault((case, mode), []).append(r)
    if r["kept"]:
        runs.setdefault((case, mode), []).append(r)
retried = sum(1 for R in allruns.values() for r in R if not r["kept"])

# keylessd's total at its stop against the keyless handshakes
kd = dict((l.split()[0], l.split()[1:]) for l in read(f"{work}/kdtotal").splitlines() if l.split())
hs = sum(r["done"] for (c, m), R in allruns.items() if m == "keyless" for r in R)
extra = int((kd.get("extra") or ["0"])[0])
if "stopped" in kd:
    total, errors = int(kd["stopped"][1]), int(kd["stopped"][2])
    pings = total - hs - extra
    maxp = int((kd.get("maxpings") or ["0"])[0])
    ok = errors == 0 and 0 <= pings <= maxp
    ops_check = (f"keylessd answered {total:,} requests ({errors} errors): "
                 f"{hs:,} keyless handshakes in the runs, {extra:,} outside "
                 f"them and {pings} more, " +
                 (f"idle pings (at most {maxp}): one key operation per "
                  f"handshake" if ok else
                  "**not one key operation per handshake**"))
else:
    ops_check = "keylessd's request count at its stop was not found"

def srvms(r):
    return 1000 * (r["cpu"]["workers"] + r["cpu"]["keylessd"]) / max(1, r["done"])


def allms(r):
    return 1000 * (r["cpu"]["h2load"] + r["cpu"]["workers"] +
                   r["cpu"]["keylessd"]) / max(1, r["done"])


lines = []
P = lines.append
title = "nginx: full TLS handshakes per second, keyless versus local key"
P(f"# {title}" + (" (smoke run: not a measurement)" if smoke else ""))
P("")
P(f"Measured by `bench/nginx/run.sh{' --smoke' if smoke else ''}` on "
  f"{read(work + '/date')}. The same nginx (a master "
  f"and {m1('ngworkers')} workers) serves each certificate twice, on two ports: with the key "
  f"on local disk and with a keyless key reference (keyless.so, keylessd on "
  f"this machine over 127.0.0.1). Every request is a new TCP connection and "
  f"a full handshake (`keepalive_timeout 0`, session tickets and session "
  f"cache off; {ops_check}). Client: h2load, {m1('threads')} threads, "
  f"{m1('conc')} connections at a time, the same number of requests for "
  f"local and keyless, sized by a calibration run for about {m1('dur')} s "
  f"with the local key (each run's length is in the last table); medians of "
  f"{m1('reps')} runs, local and keyless alternating.")
P("")
P(f"| case | local key, hs/s | keyless, hs/s | keyless / local | "
  f"undisturbed pairs | from CPU per handshake | from server CPU per handshake | "
  f"ceiling: `openssl speed -multi 2` |")
P("|---|---:|---:|---:|---:|---:|---:|---|")
ratios = {}
for case, (desc, alg, prim) in CASES.items():
    L = runs.get((case, "local"), [])
    K = runs.get((case, "keyless"), [])
    if not L or not K:
        continue
    lm, km = med([r["rate"] for r in L]), med([r["rate"] for r in K])
    ratio = km / lm if lm else float("nan")
    ratios[case] = ratio
    mark = ""
    if case == "p256-tls13":
        mark = " (target >= 0.8: " + ("met" if ratio >= TARGET else "**not met**") + ")"
    cl, ck = med([allms(r) for r in L]), med([allms(r) for r in K])
    sl, sk = med([srvms(r) for r in L]), med([srvms(r) for r in K])
    # every attempt whose two runs both had the machine nearly to
    # themselves: the median of their own keyless/local ratios
    omax = float(m1("other_max") or 0.15)
    quiet = lambda r: r["cpu"]["other"] / r["wall"] <= omax
    kl = {(r["rep"], r["attempt"]): r for r in allruns.get((case, "local"), [])}
    qr = [r["rate"] / kl[(r["rep"], r["attempt"])]["rate"]
          for r in allruns.get((case, "keyless"), [])
          if (r["rep"], r["attempt"]) in kl and quiet(r) and quiet(kl[(r["rep"], r["attempt"])])
          and kl[(r["rep"], r["attempt"])]["rate"]]
    qtxt = f"{med(qr):.2f} (n={len(qr)})" if qr else "none"
    P(f"| {desc} | {lm:,.0f} | {km:,.0f} | **{ratio:.2f}**{mark} | {qtxt} | "
      f"{cl / ck if ck else float('nan'):.2f} | "
      f"{sl / sk if sk else float('nan'):.2f} | {ceiling[alg][0]:,.0f} {prim}/s |")
P("")
P("*keyless / local* is the ratio of the median handshake rates (kept runs). "
  "*Undisturbed pairs*: the median keyless/local ratio of the attempts (kept "
  "or not) in which other work used at most "
  f"{m1('other_max')} cores during both runs, and how many there were. *From CPU "
  "per handshake* is the ratio of the CPU that h2load, the nginx workers and "
  "keylessd together spent per handshake (local over keyless, medians): the "
  "rate ratio on a machine where those three alone saturate the cores. It "
  "hardly depends on what else runs meanwhile, where the rates do. *From "
  "server CPU* leaves the client out (nginx workers + keylessd only): the "
  "ratio when the client's CPU is not on the same cores.")
P("")
P("Where the CPU went: cores used over each run (median; the machine has "
  f"{CORES}, shared by h2load, nginx's {m1('ngworkers')} workers and keylessd), and CPU "
  "milliseconds per handshake. `other` is the rest of the machine's busy "
  "time (nginx's master, the kernel's softirq work not charged to a "
  "process, anything else running); `idle` is unused core time.")
P("")
P("| case | key | hs/s | h2load | nginx workers | keylessd | other | idle | "
  "ms/hs h2load | ms/hs nginx | ms/hs keylessd | ms/hs all |")
P("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for case in CASES:
    for mode in ("local", "keyless"):
        R = runs.get((case, mode), [])
        if not R:
            continue
        c = lambda k: med([r["cpu"][k] / r["wall"] for r in R])
        ms = lambda k: med([1000 * r["cpu"][k] / max(1, r["done"]) for r in R])
        P(f"| {case} | {mode} | {med([r['rate'] for r in R]):,.0f} | "
          f"{c('h2load'):.2f} | {c('workers'):.2f} | {c('keylessd'):.2f} | "
          f"{c('other'):.2f} | {med([r['idle_cores'] for r in R]):.2f} | "
          f"{ms('h2load'):.3f} | {ms('workers'):.3f} | {ms('keylessd'):.3f} | "
          f"{med([allms(r) for r in R]):.3f} |")
P("")

old = read(f"{out}/RESULTS.md")
if MARK0 in old and MARK1 in old and not smoke:
    P(old[old.index(MARK0):old.index(MARK1) + len(MARK1)])
    P("")

# ---- perf (PERF=1): where the nginx workers' and keylessd's time went
def perf_rows(path, n):
    rows = []
    for l in read(path).splitlines():
        l = l.rstrip()
        m = re.match(r"\s+([0-9.]+)%\s+(\S+)\s+(\S+)(?:\s+\[.\]\s+(.*))?$", l)
        if m:
            rows.append((float(m.group(1)), m.group(2), m.group(3), m.group(4)))
    return rows[:n]


if glob.glob(f"{work}/perf-dso.*"):
    P("## Profiles (`PERF=1`)")
    P("")
    P("One more run per cell under `perf record` (cpu-clock samples of the two "
      "nginx workers and keylessd; percentages of those samples).")
    P("")
    P("| case | key | nginx | keylessd | by process and library (>= 2%) |")
    P("|---|---|---:|---:|---|")
    for case in CASES:
        for mode in ("local", "keyless"):
            rows = perf_rows(f"{work}/perf-dso.{case}.{mode}", 1000)
            if not rows:
                continue
            by = lambda c: sum(r[0] for r in rows if r[1] == c)
            top = ", ".join(f"{r[1]} {r[2]} {r[0]:.1f}%" for r in rows if r[0] >= 2)
            P(f"| {case} | {mode} | {by('nginx'):.1f}% | {by('keylessd'):.1f}% | {top} |")
    P("")
    for case in CASES:
        rows = [r for r in perf_rows(f"{work}/perf-sym.{case}.keyless", 1000)
                if r[3] and not r[3].startswith("0x")][:12]
        if rows:
            P(f"Top named symbols, {case} keyless (libcrypto's own are not "
              f"resolved: no debug symbols): " + ", ".join(
                f"{r[1]} `{(r[3] or '?').strip()}` ({r[2]}) {r[0]:.1f}%" for r in rows) + ".")
            P("")

P("## Every run")
P("")
P(f"A pair (local and keyless run of one repetition) during which other work "
  f"on the machine used more than {m1('other_max')} cores in either run was "
  f"run again, at most {m1('retries')} times, and the least disturbed "
  f"attempt kept; {retried} runs were set aside that way (`kept`: no).")
P("")
P("| case | key | run | attempt | kept | hs/s | done | failed+errored | key ops | "
  "protocol | cipher | CPU s: h2load / each nginx worker / keylessd | "
  "other work, cores | wall s |")
P("|---|---|---:|---:|---|---:|---:|---:|---:|---|---|---|---:|---:|")
for case in CASES:
    for mode in ("local", "keyless"):
        for r in sorted(allruns.get((case, mode), []),
                        key=lambda r: (r["rep"], r["attempt"])):
            P(f"| {case} | {mode} | {r['rep']} | {r['attempt'] + 1} | "
              f"{'yes' if r['kept'] else 'no'} | {r['rate']:,.0f} | {r['done']} | "
              f"{r['failed'] + r['errored']} | {r['kdreq']} | {r['proto']} | "
              f"{r['cipher']} | {r['cpu']['h2load']:.2f} / "
              f"{' / '.join(f'{x:.2f}' for x in r['w_split'])} / "
              f"{r['cpu']['keylessd']:.2f} | {r['cpu']['other'] / r['wall']:.2f} | "
              f"{r['wall']:.1f} |")
P("")
P("Ceiling runs (`openssl speed -multi 2 -seconds "
  f"{m1('speed_s')}`, sign/s; the best is used): " +
  "; ".join(f"{alg} {', '.join(f'{v:,.0f}' for v in ceiling[alg][1])}"
            for alg in ceiling) + ".")
P("")
P("## How it was measured")
P("")
model = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2") or platform.processor()
mb = [float(x) for x in read(f"{work}/machine.before", "0 1 0 1").split()]
busy_before = CORES * (mb[2] - mb[0]) / max(1.0, mb[3] - mb[1])
P(f"- Machine: {CORES} CPUs, {model.strip()}, {sh('uname -sr')}, shared with "
  f"other work: {busy_before:.2f} of its {CORES} cores were busy in the 2 s "
  f"before the runs; load average before {read(work + '/loadavg.before')}, "
  f"after {read(work + '/loadavg.after')}.")
P(f"- Software: {m1('nginx')}; {m1('h2load')}; {m1('openssl')}; keylessd "
  f"and keyless.so at commit {m1('commit')}.")
P(f"- keylessd: `{m1('keylessd')}` with its defaults (shards and workers: one "
  "per CPU; `--loglevel=1`: a successful request logs nothing), the two demo "
  "keys; " + ("its /metrics read before and after each run (`key ops`)."
              if (kd.get("metrics") or ["0"])[0] == "1" else
              "this build does not serve /metrics, so `key ops` per run is `-` "
              "and only the total at its stop is checked (above)."))
P("- Client, per run (`-n` requests, no warm-up: with one connection per "
  "request the steady state starts at once; `-D` is not used because "
  "h2load 1.52 hangs at the end of a timed run when the server closes "
  "connections, nghttp2 issue 2250):")
P("")
nreq = dict(x.split() for x in meta.get("nreq", []))
for c in meta.get("case", []):
    name, _, args = c.partition(" ")
    P(f"  - {name}: `h2load {args} -n {nreq.get(name, '?')} https://127.0.0.1:PORT/`")
P("")
P("- CPU: user + system seconds from `/proc/PID/stat` (fields 14, 15, all "
  "threads) of each nginx worker and keylessd, read before and after each "
  "run; h2load's from the shell's rusage of the child (`time`); the machine's "
  "busy and idle time from `/proc/stat`.")
P(f"- nginx error log lines during the whole run: {read(work + '/nginx-errors', '?')}.")
P("- nginx configuration (ports differ per run):")
P("")
P("```nginx")
P(read(f"{work}/nginx.conf.txt").replace(work, "$WORK"))
P("```")
P("")
with open(f"{out}/RESULTS.md", "w") as f:
    f.write("\n".join(lines))

for case, ratio in ratios.items():
    print(f"{case}: keyless/local = {ratio:.2f}")
