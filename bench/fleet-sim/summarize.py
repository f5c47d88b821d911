#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Medians over several fleet-simulation runs (the JSON files fleetsim.py
--out wrote): one Markdown table per scenario measure, each cell the
median of the runs with every run's value beside it.

    python3 bench/fleet-sim/summarize.py run1.json run2.json run3.json
"""
import json
import statistics
import sys


def med(vals):
    v = [x for x in vals if x is not None]
    return statistics.median(v) if v else None


def f(v, d=0):
    return "-" if v is None else ("%." + str(d) + "f") % v


def cell(vals, d=0):
    m = med(vals)
    return "%s (%s)" % (f(m, d), ", ".join(f(x, d) for x in vals))


def worst(bench, suffix):
    v = [b["p99_ms"] for k, b in bench.items() if k.endswith(suffix) and "p99_ms" in b]
    return max(v) if v else None


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    names = []
    for r in runs:
        for n in r["scenarios"]:
            if n not in names:
                names.append(n)
    print("Medians of %d run(s); each run's value in brackets.\n" % len(runs))
    print("| scenario | requests | failed | local p99, worst region (ms) | "
          "remote p99, worst region (ms) | convergence p50 (ms) | "
          "convergence p99 (ms) | CPU: simulation / machine (cores) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in names:
        sc = [r["scenarios"][n] for r in runs if n in r["scenarios"]]
        req = [sum((b.get("ok") or 0) + (b.get("errors") or 0)
                   for b in s["bench"].values()) for s in sc]
        err = [sum(b.get("errors") or 0 for b in s["bench"].values()) for s in sc]
        lp = [worst(s["bench"], "-local") for s in sc]
        rp = [worst(s["bench"], "-remote") for s in sc]
        conv = []
        for key in ("convergence", "join_convergence", "expiry_convergence"):
            if key in sc[0]:
                conv.append((key.replace("_convergence", "").replace(
                    "convergence", ""), [s[key] for s in sc]))
        c50 = "; ".join((k + ": " if k else "") + cell([c["p50_ms"] for c in v])
                        for k, v in conv) or "-"
        c99 = "; ".join((k + ": " if k else "") + cell([c["p99_ms"] for c in v])
                        for k, v in conv) or "-"
        cpu = "%s / %s" % (f(med([s["cpu"]["sim_cores"] for s in sc]), 2),
                           f(med([s["cpu"]["machine_busy_cores"] for s in sc]), 2))
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            n, f(med(req)), cell(err), cell(lp, 1), cell(rp, 1), c50, c99, cpu))
    st = [r["scenarios"]["steady"] for r in runs if "steady" in r["scenarios"]]
    if st:
        print("\nSteady state, etcd per server per second (median of runs):\n")
        print("| raft proposals (writes) | puts | deletes | lease keepalive "
              "messages (not writes) | ranges |")
        print("|---|---|---|---|---|")
        e = [s["etcd_per_server_per_s"] for s in st]
        print("| %s | %s | %s | %s | %s |" % tuple(
            f(med([x[k] for x in e]), 3)
            for k in ("proposals", "puts", "deletes", "keepalive_msgs", "ranges")))
        print("\nSteady state, per process (median of runs; within a run, "
              "median / max over the servers):\n")
        print("| kind | servers | descriptors | connections in | "
              "connections out | RSS (MB) |")
        print("|---|---|---|---|---|---|")
        for kind in ("keys", "egress"):
            d = [s["fleet"][kind] for s in st if kind in s["fleet"]]
            if not d:
                continue

            def mm(k):
                return "%s / %s" % (f(med([x[k]["median"] for x in d])),
                                    f(med([x[k]["max"] for x in d])))
            print("| %s | %d | %s | %s | %s | %s |" % (
                kind, d[0]["n"], mm("fds"), mm("conns_in"), mm("conns_out"),
                f(med([x["rss_kb"]["median"] for x in d]) / 1024, 1)))
    hot = [r["scenarios"]["hot_zone"] for r in runs if "hot_zone" in r["scenarios"]]
    if hot:
        hb = [h["bench"].get("hot", {}) for h in hot]
        print("\nHot zone (the hot set's own load, from %s to %s):\n" % (
            "sfo", "mel"))
        print("| requests | failed | p50 (ms) | p99 (ms) | hot servers' "
              "connections in (max) | their descriptors (max) |")
        print("|---|---|---|---|---|---|")
        print("| %s | %s | %s | %s | %s | %s |" % (
            f(med([(b.get("ok") or 0) + (b.get("errors") or 0) for b in hb])),
            cell([b.get("errors") for b in hb]),
            cell([b.get("p50_ms") for b in hb], 1),
            cell([b.get("p99_ms") for b in hb], 1),
            f(med([max(x["conns_in"] for x in h["hot_servers"] if x) for h in hot])),
            f(med([max(x["fds"] for x in h["hot_servers"] if x) for h in hot]))))
    ex = [r["scenarios"]["expiry"] for r in runs if "expiry" in r["scenarios"]]
    if ex:
        print("\nLease expiry: SIGKILL to the record's delete (the TTL "
              "running out), min-max: %s" % ", ".join(
                  "%s-%s s" % (f(e["kill_to_delete_s"]["min"], 2),
                               f(e["kill_to_delete_s"]["max"], 2)) for e in ex))


if __name__ == "__main__":
    main(sys.argv[1:])
