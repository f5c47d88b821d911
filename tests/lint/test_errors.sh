#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One error style (docs/DESIGN.md "Errors"): across modules the server
# passes kl_status, and a status becomes a P6 wire code only through the
# one mapping (core/status.c) that the response encoder calls. This names,
# with file and line:
#   1. a P6 wire constant (KL_ERR_*) in src/ outside the places that may
#      use one: the mapping, the protocol's names and response parsing, the
#      metric label table (in P6 code order) and the client library;
#   2. a header that declares a wire code (uint8_t err) crossing a module
#      boundary outside the client library;
#   3. a function declared in a src/ header that returns int (long,
#      ssize_t) and -1 for a failure; a descriptor getter (*_fd), where -1
#      is POSIX's "no descriptor", is not a failure.
# It first shows each check failing on a deliberate violation in a copy
# of the tree.
set -euo pipefail
src=${KL_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}

# Files that may name P6 wire codes (paths below src/; a trailing / is a
# whole directory).
allowed=(
    core/status.c     # kl_status_to_p6 / kl_status_from_p6
    proto/names.c     # P6 texts and names
    proto/response.c  # parsing an answer (client side)
    metrics/labels.c  # the error label slots, in P6 code order
    client/           # libkeyless: answers received from a server
)

is_allowed() {
    local rel=$1 a
    for a in "${allowed[@]}"; do
        case "$rel" in
        "$a" | "$a"*) [[ $a == */ || $rel == "$a" ]] && return 0 ;;
        esac
    done
    return 1
}

# check ROOT: prints every violation; fails if any.
check() {
    local root=$1 bad=0 f rel out
    # 1. wire constants
    for f in "$root"/src/*/*.[ch] "$root"/src/*/*.inc; do
        [ -e "$f" ] || continue
        rel=${f#"$root"/src/}
        is_allowed "$rel" && continue
        if out=$(grep -n 'KL_ERR_' "$f"); then
            while IFS= read -r line; do
                echo "src/$rel:${line%%:*}: P6 wire code outside the encoder's mapping; pass a kl_status (KL_E_*, core/status.h)"
            done <<<"$out"
            bad=1
        fi
    done
    # 2. wire codes in module interfaces
    for f in "$root"/src/*/*.h; do
        rel=${f#"$root"/src/}
        [[ $rel == client/* ]] && continue
        if out=$(grep -n -E '\buint8_t \*?err(or)?\b' "$f"); then
            while IFS= read -r line; do
                echo "src/$rel:${line%%:*}: a P6 code in an interface; pass a kl_status"
            done <<<"$out"
            bad=1
        fi
    done
    # 3. int functions declared in a header that return -1
    local declared
    declared=$(cat "$root"/src/*/*.h | grep -o -E '\bkl_[a-z0-9_]+\(' | sort -u)
    for f in "$root"/src/*/*.[ch]; do
        rel=${f#"$root"/src/}
        awk -v rel="src/$rel" '
            /^(KL_WUR )?(static inline )?(int|long|ssize_t) \**kl_[a-z0-9_]+\(/ {
                fn = $0
                sub(/\(.*/, "", fn)
                sub(/.* \**/, "", fn)
                next
            }
            /^}/ { fn = ""; next }
            fn != "" && fn !~ /_fd$/ &&
                /return[^;]*([^0-9A-Za-z_]|^)-1[^0-9]/ {
                print rel ":" FNR ":" fn
            }' "$f"
    done | while IFS=: read -r file line fn; do
        if grep -q -x -F "$fn(" <<<"$declared"; then
            echo "$file:$line: $fn (declared in a header) returns -1; return a kl_status, or a bool whose comment says what false means"
            echo x
        fi
    done >"$tmp/int.out"
    if grep -q -v -x x "$tmp/int.out"; then
        grep -v -x x "$tmp/int.out"
        bad=1
    fi
    return $bad
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The checks catch deliberate violations in a copy of the tree.
mkdir -p "$tmp/tree"
cp -r "$src/src" "$tmp/tree/"
cat >"$tmp/tree/src/engine/errors_probe.c" <<'EOF'
#include "engine/errors_probe.h"
int kl_errors_probe(int x)
{
    if (x < 0)
        return -1;
    return x ? KL_ERR_CRYPTO : 0;
}
EOF
cat >"$tmp/tree/src/engine/errors_probe.h" <<'EOF'
int kl_errors_probe(int x);
void kl_errors_probe_answer(uint8_t err);
EOF
if out=$(check "$tmp/tree"); then
    echo "FAIL: the error-style check accepted the probe" >&2
    exit 1
fi
for want in "src/engine/errors_probe.c:6: P6 wire code outside" \
    "src/engine/errors_probe.h:2: a P6 code in an interface" \
    "src/engine/errors_probe.c:5: kl_errors_probe (declared in a header) returns -1"; do
    grep -q -F "$want" <<<"$out" || {
        echo "FAIL: the check did not say \"$want\"; it said:" >&2
        echo "$out" >&2
        exit 1
    }
done
echo "ok: a wire code in engine/, one in an interface and an int -1 function are named"

# The real tree keeps the style.
if ! check "$src"; then
    echo "FAIL: against the error style (docs/DESIGN.md \"Errors\")" >&2
    exit 1
fi
echo "ok: statuses across modules, wire codes only at the encoder's mapping"
