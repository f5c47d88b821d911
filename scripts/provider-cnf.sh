#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# provider-cnf.sh OUT MODULE: writes an openssl.cnf that loads OpenSSL's
# default provider and then the keyless provider MODULE (keyless.so), the
# configuration docs/PROVIDER.md describes. Used by the e2e tests and the
# nginx benchmark so that both run the terminator exactly the same way.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OUT MODULE" >&2; exit 2; }
cat >"$1" <<CNF
openssl_conf = openssl_init
[openssl_init]
providers = provider_sect
[provider_sect]
default = default_sect
keyless = keyless_sect
[default_sect]
activate = 1
[keyless_sect]
module = $2
activate = 1
CNF
