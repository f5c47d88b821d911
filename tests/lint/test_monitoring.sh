#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The shipped Prometheus rules and Grafana dashboard (packaging/monitoring,
# docs/METRICS.md "Alerts and dashboard"): the rules load, their unit tests
# pass, the dashboard is valid JSON, and every series the rules and the
# dashboard query is one docs/METRICS.md documents.
set -euo pipefail
src=${KL_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
dir=$src/packaging/monitoring
command -v promtool >/dev/null || { echo "promtool not installed (Debian: prometheus): skipped"; exit 77; }
promtool check rules "$dir/keylessd-alerts.yml"
(cd "$dir" && promtool test rules keylessd-alerts.test.yml)
python3 - "$dir" "$src/docs/METRICS.md" <<'PY'
import json, re, sys
d, doc = sys.argv[1], open(sys.argv[2]).read()
dash = json.load(open(d + "/keylessd-dashboard.json"))
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
assert exprs, "dashboard has no queries"
exprs.append(open(d + "/keylessd-alerts.yml").read())
bad = set()
for e in exprs:
    for m in re.findall(r"\b((?:keylessd?|certificate|process)_[a-z0-9_]+)", e):
        base = re.sub(r"_(bucket|count|sum)$", "", m)
        if "`" + base + "`" not in doc:
            bad.add(m)
if bad:
    sys.exit("series not in docs/METRICS.md: " + ", ".join(sorted(bad)))
print("monitoring: %d dashboard queries, rules and series ok" % (len(exprs) - 1))
PY
