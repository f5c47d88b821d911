#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layer order (docs/DESIGN.md "The map"; the list is KL_LAYERS in
# CMakeLists.txt) holds in the sources: every #include "dir/..." in
# src/<d>/ names <d>, a directory <d> depends on, or one below those.
# The build enforces the same list (each directory compiles against a view
# of src/ holding only what it may use); this check names every wrong
# arrow at once, with file and line, before a compiler sees it.
#
# It also shows both checks failing: a deliberate upward include is put in
# a copy of the tree (this script must name it) and compiled against the
# lower directory's build view (the compiler must refuse it, while the
# same file compiles against the view of a directory above).
set -euo pipefail
src=${KL_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${KL_BIN_DIR:-}

# check ROOT: prints each include against the order; fails if any.
check() {
    local root=$1
    declare -A view=()
    local row dir deps d
    while read -r row; do
        dir=${row%%:*}
        deps=${row#*:}
        view[$dir]=" $dir "
        for d in $deps; do
            view[$dir]+="$d ${view[$d]:-} "
        done
    done < <(sed -n 's/^ *"\([a-z_]*:[a-z_ ]*\)".*/\1/p' "$root/CMakeLists.txt")
    [ "${#view[@]}" -gt 5 ] || { echo "no KL_LAYERS list in $root/CMakeLists.txt" >&2; return 2; }
    local bad=0 f line inc
    for f in "$root"/src/*/*.[ch] "$root"/src/*/*.inc; do
        [ -e "$f" ] || continue
        dir=$(basename "$(dirname "$f")")
        if [ -z "${view[$dir]:-}" ]; then
            echo "${f#"$root"/}: directory src/$dir is not in KL_LAYERS (CMakeLists.txt)"
            bad=1
            continue
        fi
        while IFS=: read -r line inc; do
            inc=${inc#*\"}
            inc=${inc%%/*}
            [ "$inc" = keyless ] && continue # include/keyless: the public API
            case "${view[$dir]}" in
            *" $inc "*) ;;
            *)
                echo "${f#"$root"/}:$line: src/$dir may not include $inc/ (allowed:${view[$dir]})"
                bad=1
                ;;
            esac
        done < <(grep -n '^#include "[a-z_]*/' "$f" || true)
    done
    return $bad
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. The check catches a deliberate upward include (router -> engine).
mkdir -p "$tmp/tree"
cp "$src/CMakeLists.txt" "$tmp/tree/"
cp -r "$src/src" "$tmp/tree/"
printf '#include "engine/internal.h"\n' >"$tmp/tree/src/router/layer_probe.c"
if out=$(check "$tmp/tree"); then
    echo "FAIL: the layer check accepted router including engine" >&2
    exit 1
fi
grep -q "src/router/layer_probe.c:1: src/router may not include engine/" <<<"$out" || {
    echo "FAIL: the layer check did not name the bad include; it said:" >&2
    echo "$out" >&2
    exit 1
}
echo "ok: a deliberate include of engine/ from router/ is named"

# 2. The build's views refuse it too (when a build directory is known).
if [ -n "$bin" ] && [ -d "$bin/layers/router" ]; then
    cc=${KL_CC:-cc}
    flags=(-fsyntax-only -D_GNU_SOURCE -I"$src/include")
    if "$cc" "${flags[@]}" -I"$bin/layers/router" -x c "$tmp/tree/src/router/layer_probe.c" 2>"$tmp/cc.err"; then
        echo "FAIL: router's build view compiled an include of engine/" >&2
        exit 1
    fi
    grep -q "engine/internal.h" "$tmp/cc.err" || { cat "$tmp/cc.err" >&2; exit 1; }
    "$cc" "${flags[@]}" -I"$bin/layers/engine" $(pkg-config --cflags yaml-0.1 jansson 2>/dev/null) \
        -x c "$tmp/tree/src/router/layer_probe.c" || {
        echo "FAIL: the control (engine's own view) did not compile" >&2
        exit 1
    }
    echo "ok: the build refuses engine/ in router's view and accepts it in engine's"
fi

# 3. The real tree keeps the order.
if ! check "$src"; then
    echo "FAIL: includes against the layer order (docs/DESIGN.md \"The map\")" >&2
    exit 1
fi
echo "ok: every include in src/ follows the layer order"
