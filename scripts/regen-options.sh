#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates the option reference in docs/OPERATIONS.md and the OPTIONS of
# packaging/man/keylessd.8 from the option table (src/daemon/options.c),
# between their BEGIN/END OPTIONS markers. test_dropin_modes fails until
# this has run after an option changed.
#   scripts/regen-options.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/keylessd
[ -x "$bin" ] || { echo "regen-options: build keylessd first ($bin)" >&2; exit 1; }
splice() { # FILE BEGIN-MARKER END-MARKER GENERATED-FILE
    python3 - "$@" <<'PY'
import sys
path, begin, end, gen = sys.argv[1:]
text = open(path).read()
b = text.index(begin) + len(begin)
e = text.index(end)
body = open(gen).read()
if not body.endswith("\n"):
    body += "\n"
open(path, "w").write(text[:b] + "\n" + body + text[e:])
PY
}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$bin" --help-markdown >"$tmp"
splice docs/OPERATIONS.md "<!-- BEGIN OPTIONS -->" "<!-- END OPTIONS -->" "$tmp"
"$bin" --help-man >"$tmp"
splice packaging/man/keylessd.8 '.\" BEGIN OPTIONS' '.\" END OPTIONS' "$tmp"
echo "regen-options: docs/OPERATIONS.md and packaging/man/keylessd.8 updated"
