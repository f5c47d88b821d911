#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make deb`: builds the Debian package with dpkg-deb alone (no debhelper):
#   OUT/keylessd_<version>_<arch>.deb
# from a release build in OUT/cmake installed into OUT/root. The maintainer
# scripts and package texts are in packaging/debian/. Environment:
#   JOBS                 parallel build jobs (default 2)
#   KL_DEB_BUILD_TYPE    CMake build type (default RelWithDebInfo; stripped)
#   KL_DEB_MAINTAINER    the Maintainer field ("Name <mail>")
#   SOURCE_DATE_EPOCH    time stamp of every file (default: the last commit)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
out=${1:-build-deb}
mkdir -p "$out"
out=$(cd "$out" && pwd)
jobs=${JOBS:-2}
maintainer=${KL_DEB_MAINTAINER:-keylessd developers <keylessd@localhost>}

for tool in cmake dpkg-deb gzip; do
    command -v "$tool" >/dev/null ||
        { echo "build-deb: $tool is needed" >&2; exit 1; }
done

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

# 1. A release build of the programs, installed under /usr into a stage.
cmake -S "$src" -B "$out/cmake" -DCMAKE_BUILD_TYPE="${KL_DEB_BUILD_TYPE:-RelWithDebInfo}" \
    -DKL_TESTS=OFF -DCMAKE_INSTALL_PREFIX=/usr \
    -DKL_SYSTEMD_UNITDIR=/lib/systemd/system -DKL_CONFDIR=/etc/keyless >/dev/null
cmake --build "$out/cmake" -j "$jobs"
root=$out/root
rm -rf "$root"
DESTDIR=$root cmake --install "$out/cmake" --strip >/dev/null
for f in usr/sbin/keylessd usr/bin/keyless-cli; do
    [ -x "$root/$f" ] || {
        echo "build-deb: $f was not built (a full build, with every src/ area, is needed)" >&2
        exit 1
    }
done
version=$(cat "$out/cmake/VERSION")
arch=$(dpkg --print-architecture)

# 2. What only the package has: the service environment file, the Debian
#    documents, and the modes postinst completes with the keyless owner.
install -d -m 0755 "$root/etc/default"
install -m 0600 "$here/keylessd.default" "$root/etc/default/keylessd"
doc=$root/usr/share/doc/keylessd
install -d -m 0755 "$doc"
install -m 0644 "$here/debian/copyright" "$here/debian/README.Debian" "$doc/"
sed -e "s/@VERSION@/$version/" -e "s/@MAINTAINER@/$maintainer/" \
    -e "s/@DATE@/$(date -R -u -d "@$SOURCE_DATE_EPOCH")/" \
    "$here/debian/changelog.in" | gzip -9n >"$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"
chmod 0750 "$root/etc/keyless"
chmod 0640 "$root/etc/keyless/gokeyless.yaml"
chmod 0700 "$root/etc/keyless/keys"

# 3. Depends: computed from the binaries when dpkg-shlibdeps is there (it
#    wants a debian/control to read), else the libraries this build links.
depends="libc6, libssl3, libyaml-0-2, libjansson4, libp11-kit0, libcurl4"
if command -v dpkg-shlibdeps >/dev/null; then
    work=$out/shlibdeps
    rm -rf "$work"
    mkdir -p "$work/debian"
    printf 'Source: keylessd\n\nPackage: keylessd\nArchitecture: any\n' \
        >"$work/debian/control"
    bins=()
    for f in "$root"/usr/sbin/* "$root"/usr/bin/*; do bins+=("-e$f"); done
    if line=$(cd "$work" && dpkg-shlibdeps -O "${bins[@]}" 2>/dev/null); then
        depends=${line#shlibs:Depends=}
    else
        echo "build-deb: dpkg-shlibdeps failed; using the fixed list" >&2
    fi
fi
depends="$depends, adduser"

# 4. Control files and the archive.
mkdir -p "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" \
    -e "s/@MAINTAINER@/$maintainer/" -e "s/@SIZE@/$size/" \
    -e "s/@DEPENDS@/$depends/" "$here/debian/control.in" >"$root/DEBIAN/control"
install -m 0644 "$here/debian/conffiles" "$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do
    install -m 0755 "$here/debian/$s" "$root/DEBIAN/$s"
done
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' |
    LC_ALL=C sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
# conffiles are not listed in md5sums (dpkg tracks them itself)
sed -i -e '\# etc/#d' "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"

find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
deb=$out/keylessd_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
