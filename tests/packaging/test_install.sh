#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make install` / `cmake --install` into a DESTDIR: the expected layout
# (keylessd in sbin, the clients in bin, man pages gzipped, the unit
# pointing at the prefix, /etc/keyless with keys/ at 0700), and a second
# install that keeps the operator's configuration. No root needed.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[ -x "$KL_BIN_DIR/keylessd" ] || skip "$KL_BIN_DIR/keylessd not built (needs a full build)"
[ -f "$KL_BIN_DIR/cmake_install.cmake" ] || skip "$KL_BIN_DIR is not a CMake build directory"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

install_to() { # DESTDIR PREFIX
    DESTDIR=$1 cmake --install "$KL_BIN_DIR" --prefix "$2" >"$tmp/log" 2>&1 || {
        sed "s/^/$T:   /" "$tmp/log" >&2
        return 1
    }
}

d=$tmp/usr
check "install with DESTDIR and prefix /usr" install_to "$d" /usr
check "keylessd in sbin" test -x "$d/usr/sbin/keylessd"
check "keylessd not in bin" test ! -e "$d/usr/bin/keylessd"
check "keyless-cli in bin" test -x "$d/usr/bin/keyless-cli"
if [ -x "$KL_BIN_DIR/keyless-bench" ]; then
    check "keyless-bench in bin" test -x "$d/usr/bin/keyless-bench"
fi
check "installed keylessd runs (--version)" quiet "$d/usr/sbin/keylessd" --version
for page in man8/keylessd.8 man1/keyless-cli.1 man1/keyless-keyref.1; do
    f=$d/usr/share/man/$page.gz
    check "$page.gz is gzip and renders" sh -c \
        "gzip -t '$f' && zcat '$f' | groff -man -Tutf8 -wall 2>&1 >/dev/null | (! grep .)"
done
# Every program installed has its man page.
for prog in "$d"/usr/bin/* "$d"/usr/sbin/*; do
    name=$(basename "$prog")
    check "man page for $name" sh -c "ls '$d'/usr/share/man/man[18]/'$name'.[18].gz >/dev/null 2>&1"
done
unit=$d/usr/lib/systemd/system/keylessd.service
check "unit installed" test -f "$unit"
check "unit ExecStart follows the prefix" grep -qx 'ExecStart=/usr/sbin/keylessd' "$unit"
check "unit is the packaged one otherwise" \
    cmp -s "$unit" "$KL_SRC_DIR/packaging/keylessd.service"
check "sample configuration installed" \
    cmp -s "$d/etc/keyless/gokeyless.yaml" "$KL_SRC_DIR/packaging/gokeyless.yaml"
mode_is "$d/etc/keyless/gokeyless.yaml" 640
mode_is "$d/etc/keyless/keys" 700
check "README in the doc directory" test -f "$d/usr/share/doc/keylessd/README.md"
for f in keylessd-alerts.yml keylessd-dashboard.json; do
    check "monitoring example $f installed" \
        cmp -s "$d/usr/share/doc/keylessd/examples/monitoring/$f" "$KL_SRC_DIR/packaging/monitoring/$f"
done
# Every docs/*.md page, and so every page a shipped page points to.
for page in "$KL_SRC_DIR"/docs/*.md; do
    check "docs/$(basename "$page") in the doc directory" \
        cmp -s "$page" "$d/usr/share/doc/keylessd/$(basename "$page")"
done
links_shipped() {
    local f p missing=0
    for f in "$d"/usr/share/doc/keylessd/*.md; do
        for p in $(grep -o -E 'docs/[A-Z]+\.md' "$f" | sort -u); do
            [ -f "$d/usr/share/doc/keylessd/${p#docs/}" ] || {
                echo "$T:   $(basename "$f") points to $p, not shipped" >&2
                missing=1
            }
        done
    done
    return $missing
}
check "every docs/ page a shipped page points to is shipped" links_shipped

# Another prefix: the unit must name that binary.
o=$tmp/opt
check "install with prefix /opt/keyless" install_to "$o" /opt/keyless
check "keylessd under /opt/keyless/sbin" test -x "$o/opt/keyless/sbin/keylessd"
check "unit ExecStart=/opt/keyless/sbin/keylessd" \
    grep -qx 'ExecStart=/opt/keyless/sbin/keylessd' "$o/opt/keyless/lib/systemd/system/keylessd.service"
check "/etc/keyless stays absolute" test -f "$o/etc/keyless/gokeyless.yaml"

# Installing again must not overwrite the operator's configuration.
echo "port: 3407" >"$d/etc/keyless/gokeyless.yaml"
check "second install" install_to "$d" /usr
check "operator's gokeyless.yaml kept" grep -qx 'port: 3407' "$d/etc/keyless/gokeyless.yaml"
check "sample next to it as gokeyless.yaml.dist" \
    cmp -s "$d/etc/keyless/gokeyless.yaml.dist" "$KL_SRC_DIR/packaging/gokeyless.yaml"

finish
