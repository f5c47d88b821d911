#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The library packages from `make deb`, checked and (as root) installed for
# real:
#   libkeyless0      only libkeyless.so.0 (and its SONAME link), a shlibs
#                    entry and the ldconfig trigger
#   libkeyless-dev   the headers, libkeyless.so and keyless.pc; depends on
#                    exactly its libkeyless0
#   dpkg -i both     `pkg-config --cflags --libs keyless` builds
#                    tests/libkeyless/sign_example.c against /usr, and the
#                    program loads the installed library
#   dpkg -P both     every file gone
# It changes the machine (it is meant for CI and throwaway hosts), so it
# refuses to run where either package is installed.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

command -v dpkg-deb >/dev/null || skip "dpkg-deb not found (not a Debian system)"
tmp=$(mktemp -d)
present() { dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -qv ' not-installed$'; }
cleanup() {
    if [ "$(id -u)" -eq 0 ] && [ -n "${installed:-}" ]; then
        dpkg -P libkeyless-dev libkeyless0 >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

out=${KL_DEB_OUT:-$KL_SRC_DIR/build-deb}
bash "$KL_SRC_DIR/packaging/build-deb.sh" "$out" >"$tmp/debs" 2>"$tmp/build.log" ||
    { tail -20 "$tmp/build.log" >&2; die "make deb failed"; }
lib=$(grep '/libkeyless0_.*\.deb$' "$tmp/debs")
dev=$(grep '/libkeyless-dev_.*\.deb$' "$tmp/debs")
[ -f "$lib" ] && [ -f "$dev" ] || die "make deb did not build both library packages: $(cat "$tmp/debs")"
ok "packages $(basename "$lib") $(basename "$dev")"
version=$(dpkg-deb -f "$lib" Version)

# ---- contents ----
paths() { dpkg-deb -c "$1" | awk '{ print $6 }' | grep -v '/$'; }
lib_files=$(paths "$lib")
dev_files=$(paths "$dev")
check "libkeyless0 holds libkeyless.so.0 and its file" \
    test "$(grep -c '/libkeyless\.so\.0' <<<"$lib_files")" = 2
check "libkeyless0 holds nothing to build with" bash -c '! grep -qE "include/|pkgconfig|libkeyless\.so$" <<<"$1"' _ "$lib_files"
for f in usr/include/keyless/client.h usr/include/keyless/protocol.h usr/include/keyless/status.h \
    pkgconfig/keyless.pc 'libkeyless\.so'; do
    check "libkeyless-dev ships $f" grep -qE "$f\$" <<<"$dev_files"
done
check "libkeyless-dev holds no shared object file" bash -c '! grep -q "\.so\.0" <<<"$1"' _ "$dev_files"
dpkg-deb -e "$lib" "$tmp/libctl"
check "shlibs: libkeyless 0 libkeyless0 (>= $version)" grep -qx "libkeyless 0 libkeyless0 (>= $version)" "$tmp/libctl/shlibs"
check "ldconfig trigger" grep -qx "activate-noawait ldconfig" "$tmp/libctl/triggers"
check "libkeyless0 Depends on libssl3" grep -q "libssl3" <<<"$(dpkg-deb -f "$lib" Depends)"
check "libkeyless-dev Depends on libkeyless0 (= $version)" \
    test "$(dpkg-deb -f "$dev" Depends)" = "libkeyless0 (= $version)"
for d in "$lib" "$dev"; do
    check "$(basename "$d"): copyright shipped" grep -q "/usr/share/doc/.*/copyright$" <<<"$(paths "$d")"
done

# ---- installed for real ----
if [ "$(id -u)" -ne 0 ]; then
    echo "$T: note: not root: the packages were checked but not installed"
    finish
fi
command -v pkg-config >/dev/null || die "pkg-config is needed"
if present libkeyless0 || present libkeyless-dev; then
    skip "libkeyless0 or libkeyless-dev is already installed here: not touching it"
fi
installed=1
check "dpkg -i libkeyless0 libkeyless-dev" sh -c 'DEBIAN_FRONTEND=noninteractive dpkg -i "$1" "$2" >"$3/install.log" 2>&1 || { cat "$3/install.log" >&2; exit 1; }' _ "$lib" "$dev" "$tmp"
check "pkg-config finds keyless $version" test "$(PKG_CONFIG_PATH= pkg-config --modversion keyless 2>/dev/null)" = "$version"
flags=$(PKG_CONFIG_PATH= pkg-config --cflags --libs keyless)
# shellcheck disable=SC2086 # pkg-config output is a word list
check "the example builds with only pkg-config --cflags --libs keyless ($flags)" \
    cc -std=c11 -Wall -Wextra -Werror -o "$tmp/sign_example" "$KL_SRC_DIR/tests/libkeyless/sign_example.c" $flags
deps=$(ldd "$tmp/sign_example" 2>&1) # whole, not piped into grep -q
check "the example loads the installed library" grep -qE "libkeyless\.so\.0 => (/usr)?/lib/" <<<"$deps"
check "keyless.pc gives plain flags (absolute prefix /usr)" test "$(echo $flags)" = "-lkeyless"
rc=0
"$tmp/sign_example" >/dev/null 2>&1 || rc=$?
check "the example runs (usage: exit 2)" test "$rc" = 2
check "dpkg -P libkeyless-dev libkeyless0" sh -c 'dpkg -P libkeyless-dev libkeyless0 >"$1/purge.log" 2>&1 || { cat "$1/purge.log" >&2; exit 1; }' _ "$tmp"
installed=
for f in $lib_files $dev_files; do
    case $f in ./usr/share/doc/*) continue ;; esac
    [ -e "/${f#./}" ] && bad "/${f#./} left after purge"
done
ok "purged: no file left"
finish
