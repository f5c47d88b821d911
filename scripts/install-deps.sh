#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages keylessd needs to build and test, only those
# that are missing. Safe to run again; needs root (or sudo) when it installs.
# apt's progress is shown. Packages that ship a service (nginx, HAProxy,
# Prometheus, etcd: the tests run their own instances on loopback) are
# installed without starting it, and on a host with systemd the services
# this run installed are left disabled: a developer machine does not grow
# daemons listening on port 80, 9090 or 2379 because the tests need the
# binaries.
set -euo pipefail

pkgs=(build-essential cmake pkg-config clang clang-format libclang-rt-dev
      libssl-dev openssl libyaml-dev libjansson-dev libcmocka-dev
      python3 procps iproute2 libp11-kit-dev p11-kit softhsm2 opensc
      libmicrohttpd-dev libcurl4-openssl-dev prometheus nginx-light haproxy curl gnuplot-nox nghttp2-client
      etcd-server etcd-client
      swtpm swtpm-tools tpm2-tools tpm2-openssl libtss2-tcti-swtpm0
      ${KL_EXTRA_PKGS:-})
# package -> the service unit it would enable
declare -A services=([nginx-light]=nginx [haproxy]=haproxy [prometheus]=prometheus
                   [etcd-server]=etcd)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive

# invoke-rc.d asks /usr/sbin/policy-rc.d whether a service may start; 101
# means "no". Only when the host has none of its own, and removed after.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# install-deps.sh: no service starts during the install\nexit 101\n' |
        $SUDO tee "$policy" >/dev/null
    $SUDO chmod 0755 "$policy"
    own_policy=1
fi
cleanup() { [ "$own_policy" -eq 0 ] || $SUDO rm -f "$policy"; }
trap cleanup EXIT

$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    for p in "${missing[@]}"; do
        unit=${services[$p]:-}
        [ -n "$unit" ] || continue
        echo "install-deps: leaving the $unit service (installed for the tests) disabled and stopped" >&2
        $SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true
    done
fi
