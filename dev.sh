#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The two commands of README.md, runnable on a fresh Debian machine (only
# bash needed): installs missing Debian packages, builds, then
#   ./dev.sh run    runs keylessd on its embedded default (dev PKI and demo
#                   keys generated in ./state on first run)
#   ./dev.sh test   runs every test through CTest
# Also: ./dev.sh asan | tsan | fuzz (see Makefile).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install-deps.sh
case "${1:-}" in
run | test | asan | tsan | fuzz) exec make "$1" ;;
*)
    echo "usage: ./dev.sh run|test|asan|tsan|fuzz" >&2
    exit 2
    ;;
esac
