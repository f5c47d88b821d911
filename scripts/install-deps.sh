#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages keylessd needs to build and test, only those
# that are missing. Safe to run again; needs root (or sudo) when it installs.
set -euo pipefail

pkgs=(build-essential cmake pkg-config clang libclang-rt-dev
      libssl-dev openssl libyaml-dev libjansson-dev libcmocka-dev
      python3 procps iproute2 libp11-kit-dev p11-kit softhsm2 opensc
      libmicrohttpd-dev libcurl4-openssl-dev prometheus nginx-light haproxy curl gnuplot-nox nghttp2-client
      ${KL_EXTRA_PKGS:-})

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
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
