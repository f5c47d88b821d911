#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots keyless-bench results: latency percentiles and throughput, one
group per result file, as one PNG (gnuplot; Debian: gnuplot-nox).

usage: plot.py [-o OUT.png] [--title TEXT] [--linear] RESULT.json[=LABEL] ...

Each RESULT.json is the output of `keyless-bench -json` (a run of
bench/run.sh keeps them as WORKDIR/NAME.N.json). LABEL names its group on
the chart; the default is the file name without .json. The left panel
shows p50, p90, p99 and p99.9 latency in microseconds (log scale unless
--linear), the right panel operations per second with the error count
when there were errors. Exits 2 on a file that is not keyless-bench JSON,
naming it, and 3 when gnuplot is missing.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

PCTS = ["p50", "p90", "p99", "p99.9"]


def usage(msg):
    sys.stderr.write("plot.py: %s\n%s" % (msg, __doc__.split("\n\n")[1] + "\n"))
    sys.exit(2)


def load(arg):
    path, _, label = arg.partition("=")
    if not label:
        label = os.path.basename(path)
        if label.endswith(".json"):
            label = label[:-5]
    try:
        with open(path) as f:
            r = json.load(f)
        lat = r["latency_us"]
        row = {"label": label, "ops": float(r["ops_per_sec"]),
               "errors": int(r.get("errors", 0))}
        for p in PCTS:
            row[p] = float(lat[p])
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.stderr.write("plot.py: %s: not a keyless-bench -json result "
                         "(%s)\n" % (path, e))
        sys.exit(2)
    return row


def gp_str(s):
    # a gnuplot string in double quotes
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv):
    out, title, linear, files = "bench-plot.png", "keyless-bench", False, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-o", "--output", "--title"):
            if i + 1 >= len(argv):
                usage("%s needs a value" % a)
            if a == "--title":
                title = argv[i + 1]
            else:
                out = argv[i + 1]
            i += 2
            continue
        if a == "--linear":
            linear = True
        elif a in ("-h", "--help"):
            sys.stdout.write(__doc__)
            return 0
        elif a.startswith("-"):
            usage("unknown option %s" % a)
        else:
            files.append(a)
        i += 1
    if not files:
        usage("no result files")
    rows = [load(f) for f in files]
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        sys.stderr.write("plot.py: gnuplot not found; apt-get install "
                         "gnuplot-nox\n")
        return 3
    with tempfile.TemporaryDirectory(prefix="kl-plot-") as tmp:
        data = os.path.join(tmp, "data.tsv")
        with open(data, "w") as f:
            f.write("label\t%s\tops\terrors\n" % "\t".join(PCTS))
            for r in rows:
                # labels go through gnuplot's xticlabels: no tabs or quotes
                lab = r["label"].replace("\t", " ").replace('"', "'")
                f.write('"%s"\t%s\t%.3f\t%d\n' % (
                    lab, "\t".join("%.3f" % r[p] for p in PCTS), r["ops"],
                    r["errors"]))
        width = max(900, 260 * len(rows) + 400)
        lines = [
            "set terminal pngcairo size %d,520 noenhanced font ',10'" % width,
            "set output %s" % gp_str(out),
            "set datafile separator '\\t'",
            "set multiplot layout 1,2 title %s" % gp_str(title),
            "set style data histograms",
            "set style histogram clustered gap 1",
            "set style fill solid 0.85 border -1",
            "set boxwidth 0.9",
            "set key top left",
            "set grid ytics",
            "set xtics rotate by -20",
            "set title 'latency percentiles (us)'",
            "set ylabel 'microseconds'",
        ]
        if not linear:
            lines += ["set logscale y"]
        lines += [
            "plot for [c=2:%d] %s using c:xtic(1) title columnheader(c)"
            % (1 + len(PCTS), gp_str(data)),
            "unset logscale y",
            "set yrange [0:*]",
            "set title 'throughput (operations/s)'",
            "set ylabel 'operations per second'",
            "set key off",
            "plot %s using %d:xtic(1) lc rgb '#3a7bd5', '' using 0:%d:"
            "(sprintf('%%.0f%%s', column(%d), column(%d) > 0 ? "
            "sprintf(' (%%d errors)', column(%d)) : '')) with labels "
            "offset 0,0.8 notitle"
            % (gp_str(data), 2 + len(PCTS), 2 + len(PCTS), 2 + len(PCTS),
               3 + len(PCTS), 3 + len(PCTS)),
            "unset multiplot",
        ]
        script = os.path.join(tmp, "plot.gp")
        with open(script, "w") as f:
            f.write("\n".join(lines) + "\n")
        p = subprocess.run([gnuplot, script], capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write("plot.py: gnuplot failed:\n%s" % p.stderr)
            return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
