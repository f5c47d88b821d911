#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turns the raw results of bench/run.sh into RESULTS.md and a chart.

usage: summarize.py WORKDIR OUTDIR SMOKE

WORKDIR holds, per scenario run, NAME.N.json (keyless-bench -json) and
NAME.N.cpu ("server-cpu-before server-cpu-after rss-kb"), scenarios.tsv,
ceiling.ALG (openssl speed sign/s, one per run), idle.mem, date, loadavg.*.
"""
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys

work, out, smoke = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

CEIL_ALG = {"ecdsa-p256": "ecdsap256", "ed25519": "ed25519", "rsa-2048": "rsa2048"}
CORES = 2  # `openssl speed -multi 2`: the two-core ceiling


def med(v):
    return statistics.median(v) if v else float("nan")


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


# The ceiling is the best of its runs: other work on the machine can only
# lower it, and a lowered ceiling would flatter every ratio against it.
ceiling, ceiling_runs = {}, {}
for prim, alg in CEIL_ALG.items():
    vals = [float(x) for x in read(f"{work}/ceiling.{alg}").split() if x]
    ceiling_runs[prim] = vals
    ceiling[prim] = max(vals) if vals else float("nan")

scen = []
for line in read(f"{work}/scenarios.tsv").splitlines():
    name, prim, desc, cmd = line.split("\t")
    runs = []
    for jf in sorted(glob.glob(f"{work}/{name}.*.json")):
        if jf.endswith(".neighbour.json"):
            continue
        try:
            j = json.load(open(jf))
        except (OSError, ValueError):
            continue
        if j.get("client_stopped"):
            # SIGSTOPped and resumed mid-run (keyless-bench says so): its
            # latencies include the stop - not a measurement of keylessd
            print(f"summarize: {jf}: the client was stopped during the run; "
                  "run left out", file=sys.stderr)
            continue
        cpu = read(jf[:-5] + ".cpu").split()
        srv = float(cpu[1]) - float(cpu[0]) if len(cpu) >= 2 else float("nan")
        ops = j["operations"]
        # cores busy with anything but keylessd and the bench(es) of this
        # scenario, over the measured window
        other = float("nan")
        if len(cpu) >= 7 and float(cpu[6]) > float(cpu[4]):
            busy = (float(cpu[5]) - float(cpu[3])) / (float(cpu[6]) - float(cpu[4])) * CORES
            win = j["duration_s"] or 1
            bench_cores = j["client_cpu"]["us_per_op"] * ops / 1e6 / win
            nb = jf[:-5] + ".neighbour.json"
            if os.path.exists(nb):
                try:
                    n = json.load(open(nb))
                    bench_cores += n["client_cpu"]["core_share"]
                except (OSError, ValueError, KeyError):
                    pass
            other = max(0.0, busy - srv / win - bench_cores)
        # the ceiling measured right before this run (PAIR_ALG in run.sh):
        # keylessd's CPU/op against it, both at the host's speed of the moment
        pc = read(jf[:-5] + ".ceiling")
        paired = float("nan")
        if pc and ops:
            try:
                paired = (srv / ops * 1e6) / (CORES / float(pc) * 1e6)
            except (ValueError, ZeroDivisionError):
                pass
        runs.append({
            "paired": paired,
            "ops_s": j["ops_per_sec"],
            "p50": j["latency_us"]["p50"],
            "p99": j["latency_us"]["p99"],
            "p999": j["latency_us"]["p99.9"],
            "errors": j["errors"],
            "srv_us_op": srv / ops * 1e6 if ops else float("nan"),
            "cli_us_op": j["client_cpu"]["us_per_op"],
            "other": other,
        })
    s = {"name": name, "prim": prim, "desc": desc, "cmd": cmd, "n": len(runs)}
    for k in ("ops_s", "p50", "p99", "p999", "srv_us_op", "cli_us_op", "other", "paired"):
        s[k] = med([r[k] for r in runs])
    s["errors"] = sum(r["errors"] for r in runs)
    scen.append(s)
by = {s["name"]: s for s in scen}


def g(name, key):
    return by.get(name, {}).get(key, float("nan"))


def ceil_us(prim):
    """The ceiling's CPU time per operation per core, in microseconds."""
    c = ceiling.get(prim)
    return CORES / c * 1e6 if c else float("nan")


def verdict(ok):
    if ok is None:
        return "not measured"
    return "**met**" if ok else "**not met**"


def fmt(x, d=2):
    if x != x:  # NaN
        return "-"
    return f"{x:,.{d}f}"


targets = []
for prim, cpu_t, thr_t in (("ecdsa-p256", 1.15, 0.58), ("ed25519", 1.15, 0.57),
                           ("rsa-2048", 1.05, 0.85)):
    n = f"{prim}-8x64"
    ratio = g(n, "srv_us_op") / ceil_us(prim)
    share = g(n, "ops_s") / ceiling[prim] if ceiling.get(prim) else float("nan")
    # judged against the ceiling measured right before each run when there
    # is one (the host drifts by several % within a run); the run's best
    # ceiling is shown as well
    paired = g(n, "paired")
    if paired == paired:
        text = (f"{fmt(g(n, 'srv_us_op'))} us; x the ceiling measured before each run: "
                f"median {fmt(paired)}x (x the run's best ceiling, {fmt(ceil_us(prim))} us: {fmt(ratio)}x)")
        judged = paired
    else:
        text = f"{fmt(g(n, 'srv_us_op'))} us vs {fmt(ceil_us(prim))} us = {fmt(ratio)}x"
        judged = ratio
    targets.append((f"CPU per operation, 8 x 64, {prim}", f"<= {cpu_t}x", text,
                    verdict(judged <= cpu_t if judged == judged else None)))
    targets.append((f"throughput, 8 x 64, {prim}, share of the ceiling",
                    f">= {thr_t}", f"{fmt(g(n, 'ops_s'), 0)}/s of {fmt(ceiling[prim], 0)}/s = {fmt(share)}",
                    verdict(share >= thr_t if share == share else None)))
for prim in ("ecdsa-p256", "ed25519", "rsa-2048"):
    r = g(f"{prim}-1x1024", "ops_s") / g(f"{prim}-8x64", "ops_s")
    targets.append((f"1 x 1024 vs 8 x 64, {prim}", ">= 0.8x",
                    f"{fmt(g(f'{prim}-1x1024', 'ops_s'), 0)}/s vs {fmt(g(f'{prim}-8x64', 'ops_s'), 0)}/s = {fmt(r)}x",
                    verdict(r >= 0.8 if r == r else None)))
r = g("ecdsa-p256-2shards", "ops_s") / g("ecdsa-p256-1shard", "ops_s")
targets.append(("scaling, ECDSA 8 x 64: 2 shards vs 1", ">= 1.8x",
                f"{fmt(g('ecdsa-p256-2shards', 'ops_s'), 0)}/s vs {fmt(g('ecdsa-p256-1shard', 'ops_s'), 0)}/s = {fmt(r)}x",
                verdict(r >= 1.8 if r == r else None)))
r = g("ecdsa-p256-2shards", "ops_s") / g("ecdsa-p256-1cpu", "ops_s")
targets.append(("scaling with CPUs, ECDSA 8 x 64: 2 shards on 2 CPUs vs 1 shard + 1 worker on 1 CPU",
                ">= 1.8x",
                f"{fmt(g('ecdsa-p256-2shards', 'ops_s'), 0)}/s vs {fmt(g('ecdsa-p256-1cpu', 'ops_s'), 0)}/s = {fmt(r)}x",
                verdict(r >= 1.8 if r == r else None)))
for name, prim, lim in (("ecdsa-p256-open50", "ecdsa-p256", 1000),
                        ("ecdsa-p256-open50-tick", "ecdsa-p256, client sends on a 100 us grid", 1000),
                        ("ecdsa-p256-open50-rt", "ecdsa-p256, keylessd --realtime-priority=1", 1000),
                        ("ecdsa-p256-open50-tick-rt",
                         "ecdsa-p256, keylessd --realtime-priority=1, client sends on a 100 us grid", 1000),
                        ("rsa-2048-open50", "rsa-2048", 3000)):
    p = g(name, "p99")
    targets.append((f"p99 at 50% of peak, open loop, {prim}", f"<= {lim / 1000:g} ms",
                    f"{fmt(p / 1000)} ms", verdict(p <= lim if p == p else None)))
solo, mixed = g("ecdsa-p256-iso-solo", "p99"), g("ecdsa-p256-iso-rsa4096", "p99")
ok = None if mixed != mixed else (mixed <= 2 * solo and mixed <= 2000)
targets.append(("isolation: ECDSA p99 next to 64 RSA-4096 in flight", "<= 2x solo and <= 2 ms",
                f"{fmt(mixed / 1000)} ms vs {fmt(solo / 1000)} ms solo = {fmt(mixed / solo if solo else float('nan'))}x",
                verdict(ok)))
idle = read(f"{work}/idle.mem").split()
if len(idle) >= 3:
    n, r0, r1 = int(idle[0]), int(idle[1]), int(idle[2])
    per = (r1 - r0) / n
    targets.append((f"memory per idle connection ({n:,} connections)", "<= 40 KB",
                    f"{fmt(per, 1)} KB (RSS {r0:,} KB -> {r1:,} KB)", verdict(per <= 40)))
# the scale and storm rows (bench/scale.sh wrote them; scale.py reads them)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale  # noqa: E402
targets += scale.rows(work)

machine = sh("lscpu | grep -E '^(Model name|CPU\\(s\\)|Thread|Core|Socket|Hypervisor)' | sed 's/  */ /g'")
lines = []
lines.append("# keylessd performance: results" + (" (smoke run: 1 s each, not numbers)" if smoke else ""))
lines.append("")
lines.append("Written by `bench/run.sh`" + (" --smoke" if smoke else "") + " (see bench/README.md for what each "
             "scenario means). Client and server share this machine.")
lines.append("")
lines.append(f"- date: {read(f'{work}/date')}")
commit = os.environ.get("BENCH_COMMIT") or sh(
    "git -C " + os.path.dirname(os.path.abspath(__file__)) + " describe --always --dirty") or "unknown"
lines.append(f"- commit: {commit}")
lines.append(f"- kernel: {platform.release()}; OpenSSL: {sh('openssl version')}")
lines.append(f"- nproc: {sh('nproc')}; memory: {sh('grep MemTotal /proc/meminfo').split(':')[-1].strip()}")
for m in machine.splitlines():
    lines.append(f"- {m}")
lines.append(f"- load average before / after: {read(f'{work}/loadavg.before')} / {read(f'{work}/loadavg.after')}")
lines.append("- medians of %d run(s) per scenario" % max([s["n"] for s in scen] + [0]))
lines.append("")
lines.append("## Ceiling: `openssl speed -multi 2` (same run)")
lines.append("")
lines.append("| primitive | signatures/s, 2 cores (best run) | runs | CPU per signature per core |")
lines.append("|---|---:|---|---:|")
for prim, alg in CEIL_ALG.items():
    runs = ", ".join(fmt(v, 0) for v in ceiling_runs[prim])
    lines.append(f"| {prim} (`{alg}`) | {fmt(ceiling[prim], 0)} | {runs} | {fmt(ceil_us(prim))} us |")
lines.append("")
lines.append("The best run is the ceiling: other work on the machine can only lower it.")
lines.append("")
lines.append("## Targets")
lines.append("")
lines.append("| measure | target | measured | |")
lines.append("|---|---|---|---|")
for t in targets:
    lines.append("| " + " | ".join(t) + " |")
lines.append("")
lines.append("## Scenarios")
lines.append("")
lines.append("| scenario | ops/s | share of ceiling | p50 | p99 | p99.9 | keylessd CPU/op | x ceiling | bench CPU/op | other load | errors |")
lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in scen:
    c = ceiling.get(s["prim"])
    share = s["ops_s"] / c if c else float("nan")
    lines.append(f"| {s['name']}: {s['desc']} | {fmt(s['ops_s'], 0)} | {fmt(share)} | "
                 f"{fmt(s['p50'] / 1000, 3)} ms | {fmt(s['p99'] / 1000, 3)} ms | {fmt(s['p999'] / 1000, 3)} ms | "
                 f"{fmt(s['srv_us_op'], 1)} us | {fmt(s['srv_us_op'] / ceil_us(s['prim']))} | "
                 f"{fmt(s['cli_us_op'], 1)} us | {fmt(s['other'])} | {s['errors']} |")
lines.append("")
lines.append("keylessd CPU/op is its user+system time (/proc/PID/stat) over the measured window divided by the")
lines.append("operations completed in it; \"x ceiling\" divides that by the ceiling's time per operation per core.")
lines.append("Open-loop latencies run from each request's intended send time. \"other load\" is the cores")
lines.append("(of 2) busy with anything but keylessd and keyless-bench during the window (from /proc/stat):")
lines.append("well above 0 means the run shared the machine and its figures are low.")
lines.append("")
lines.append("## Commands")
lines.append("")
lines.append("Every scenario also passes `-cert -key -ca -server 127.0.0.1:PORT -json -warmup W -duration D`;")
lines.append("keylessd runs with `--shards=0 --workers=0` (one per CPU) unless the scenario says otherwise.")
lines.append("")
lines.append("```")
for s in scen:
    lines.append(f"{s['name']}: {s['cmd'].replace(work, '$WORK')}")
lines.append("```")

chart = f"{out}/results.png"
if shutil.which("gnuplot") and scen:
    dat = f"{work}/chart.dat"
    with open(dat, "w") as f:
        for i, s in enumerate(scen):
            f.write(f"{i} \"{s['name']}\" {s['ops_s']:.1f} {s['p50'] / 1000:.4f} {s['p99'] / 1000:.4f}\n")
    gp = f"""
set terminal pngcairo size 1400,900 font ',10'
set output '{chart}'
set multiplot layout 2,1 title 'keylessd: keyless-bench scenarios ({read(f"{work}/date")})'
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set xtics rotate by -30 left
set grid ytics
set ylabel 'operations/s'
set logscale y
set title 'throughput (median)'
plot '{dat}' using 3:xtic(2) title 'ops/s' lc rgb '#3465a4'
set title 'latency (median of runs; open loop from intended send times)'
set ylabel 'ms'
plot '{dat}' using 4:xtic(2) title 'p50' lc rgb '#73d216', '' using 5 title 'p99' lc rgb '#cc0000'
unset multiplot
"""
    subprocess.run(["gnuplot"], input=gp, text=True, check=False)
    if os.path.exists(chart):
        lines.append("")
        lines.append("## Chart")
        lines.append("")
        lines.append("![throughput and latency per scenario](results.png)")
else:
    lines.append("")
    lines.append("(no chart: gnuplot is not installed - `apt-get install gnuplot-nox`)")

lines.append("")
lines += scale.section(work, smoke)

# Sections of RESULTS.md that this script does not write - added by other
# scripts (bench/run.sh --remote prints "Geo routing (remote path)") or by
# hand ("Reading this run", "Hardening runs") - are kept verbatim, in
# their order, after the generated ones: a full run must not delete them.
OWNED = ("Ceiling", "Targets", "Scenarios", "Commands", "Chart", "Scale and storm scenarios")


def md_sections(text):
    """[heading, text] of every '## ' section, in order; text is verbatim
    (heading line included) up to the next '## ' outside a code fence."""
    secs, cur, fence = [], None, False
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            cur = [line[3:].strip(), line]
            secs.append(cur)
        elif cur is not None:
            cur[1] += line
    return secs


def owned(heading, generated):
    base = heading.split(" (")[0].strip()
    return base in generated or any(
        heading == p or heading.startswith(p + " ") or heading.startswith(p + ":") for p in OWNED)


text = "\n".join(lines) + "\n"
generated = {h.split(" (")[0].strip() for h, _ in md_sections(text)}
kept = [sec for h, sec in md_sections(read(f"{out}/RESULTS.md") + "\n") if not owned(h, generated)]
for sec in kept:
    if not text.endswith("\n\n"):
        text += "\n"
    text += sec.rstrip("\n") + "\n"
with open(f"{out}/RESULTS.md", "w") as f:
    f.write(text)
