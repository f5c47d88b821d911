#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make deb`: builds the Debian packages with dpkg-deb alone (no debhelper):
#   OUT/keylessd_<version>_<arch>.deb        the key server and tools
#   OUT/libkeyless0_<version>_<arch>.deb     libkeyless.so.0 (the client library)
#   OUT/libkeyless-dev_<version>_<arch>.deb  its headers, libkeyless.so and keyless.pc
# from a release build in OUT/cmake installed into OUT/root (the library's
# files then move to OUT/root-libkeyless0 and OUT/root-libkeyless-dev). The
# maintainer scripts and package texts are in packaging/debian/. Prints
# the three paths, keylessd's last. Environment:
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
    -DKL_TESTS=OFF -DCMAKE_INSTALL_PREFIX=/usr -DKL_PC_RELOCATABLE=OFF \
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

# 1b. The library's files go to their own packages: the shared object (by
#     its SONAME) to libkeyless0, what one builds with to libkeyless-dev.
libdir=$(cd "$root" && find usr/lib -name 'libkeyless.so.0' | head -1)
[ -n "$libdir" ] || { echo "build-deb: libkeyless.so.0 was not installed" >&2; exit 1; }
libdir=$(dirname "$libdir")
lib_root=$out/root-libkeyless0
dev_root=$out/root-libkeyless-dev
rm -rf "$lib_root" "$dev_root"
install -d "$lib_root/$libdir" "$dev_root/$libdir" "$dev_root/usr/include"
mv "$root/$libdir"/libkeyless.so.0* "$lib_root/$libdir/"
mv "$root/$libdir/libkeyless.so" "$dev_root/$libdir/"
mv "$root/$libdir/pkgconfig" "$dev_root/$libdir/"
mv "$root/usr/include/keyless" "$dev_root/usr/include/"
rmdir "$root/usr/include" 2>/dev/null || true
rmdir -p "$root/$libdir" 2>/dev/null || true

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
for r in "$lib_root:libkeyless0" "$dev_root:libkeyless-dev"; do
    d=${r%%:*}/usr/share/doc/${r##*:}
    install -d -m 0755 "$d"
    install -m 0644 "$here/debian/copyright" "$d/"
    install -m 0644 "$doc/changelog.gz" "$d/"
done
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

# 4. Control files and the archives. pack ROOT NAME DEPENDS: the control
#    file from packaging/debian/NAME.control.in (keylessd's: control.in),
#    md5sums, and the .deb; prints its path.
pack() {
    local r=$1 name=$2 deps=$3 tmpl=$here/debian/$2.control.in size deb
    [ "$name" = keylessd ] && tmpl=$here/debian/control.in
    mkdir -p "$r/DEBIAN"
    size=$(du -sk --exclude=DEBIAN "$r" | cut -f1)
    sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" \
        -e "s/@MAINTAINER@/$maintainer/" -e "s/@SIZE@/$size/" \
        -e "s/@DEPENDS@/$deps/" "$tmpl" >"$r/DEBIAN/control"
    (cd "$r" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' |
        LC_ALL=C sort -z | xargs -0 md5sum) >"$r/DEBIAN/md5sums"
    # conffiles are not listed in md5sums (dpkg tracks them itself)
    sed -i -e '\# etc/#d' "$r/DEBIAN/md5sums"
    chmod 0644 "$r/DEBIAN/md5sums"
    find "$r" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    deb=$out/${name}_${version}_${arch}.deb
    dpkg-deb --root-owner-group -Zxz --build "$r" "$deb" >/dev/null
    echo "$deb"
}

# libkeyless0: the library's own dependencies, its shlibs entry (packages
# built against it depend on this version or later) and ldconfig.
lib_depends="libc6, libssl3, libjansson4"
if command -v dpkg-shlibdeps >/dev/null; then
    work=$out/shlibdeps-lib
    rm -rf "$work"
    mkdir -p "$work/debian"
    printf 'Source: keylessd\n\nPackage: libkeyless0\nArchitecture: any\n' \
        >"$work/debian/control"
    if line=$(cd "$work" && dpkg-shlibdeps -O "-e$lib_root/$libdir/libkeyless.so.0" 2>/dev/null); then
        lib_depends=${line#shlibs:Depends=}
    fi
fi
mkdir -p "$lib_root/DEBIAN"
echo "libkeyless 0 libkeyless0 (>= $version)" >"$lib_root/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"$lib_root/DEBIAN/triggers"
chmod 0644 "$lib_root/DEBIAN/shlibs" "$lib_root/DEBIAN/triggers"
pack "$lib_root" libkeyless0 "$lib_depends"
pack "$dev_root" libkeyless-dev "libkeyless0 (= $version)"

mkdir -p "$root/DEBIAN"
install -m 0644 "$here/debian/conffiles" "$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do
    install -m 0755 "$here/debian/$s" "$root/DEBIAN/$s"
done
pack "$root" keylessd "$depends"
