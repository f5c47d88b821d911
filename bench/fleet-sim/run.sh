#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The fleet simulation (docs/FLEET.md "The fleet simulation"): builds what
# it runs, then bench/fleet-sim/fleetsim.py with the arguments given
# (FLEET_SIM_ARGS from `make fleet-sim`). Root: it makes a network
# namespace per region (kls-mel, kls-sin, kls-sfo, kls-iad, kls-fra) and
# removes them at the end. Not part of CI: about 4 minutes, 2 GB of
# memory at 50 servers.
#
#   bash bench/fleet-sim/run.sh [BUILD_DIR] [fleetsim.py flags...]
#   make fleet-sim FLEET_SIM_ARGS="--keys-per-region 8 --egress-per-region 2"
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
[ $# -gt 0 ] && shift
if [ "$(id -u)" != 0 ]; then
    echo "fleet-sim: needs root (network namespaces)" >&2
    exit 1
fi
for tool in etcd ip openssl python3; do
    command -v $tool >/dev/null || {
        echo "fleet-sim: $tool is needed (scripts/install-deps.sh installs it)" >&2
        exit 1
    }
done
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j 2 --target keylessd keyless-cli keyless-bench \
    faultproxy -- --no-print-directory >/dev/null
out=${FLEET_SIM_OUT:-$build/fleet-sim-$(date -u +%Y%m%d-%H%M%S).json}
cd "$root"
python3 bench/fleet-sim/fleetsim.py --build "$build" --src "$root" \
    --out "$out" "$@"
echo "results: $out"
