/* SPDX-License-Identifier: Apache-2.0 */
/* Slow keys for the integration tests. keylessd has no test hook in its
 * request path: a test that needs a key whose operations take a while
 * (answers out of order, draining, idle timeouts, bursts, cancellation,
 * deadlines) puts the key on a SoftHSM2 token behind the test-only
 * fault-injection PKCS#11 module (tests/p11shim), with a rule that stalls
 * every signature and decryption on that token. keylessd serves it like
 * any token key - a slow HSM: on its pool's blocking workers, one per token
 * session, answered through the completion path every key uses, and by
 * its deadline when the token is too slow (crypto/pool.h). A test of the
 * fast and slow workers themselves uses a key that is slow for real
 * (RSA-4096) or the pool's unit tests (tests/unit/crypto/slowexec.h).
 *
 * The first call makes this process's token directory (under
 * $KL_BIN_DIR/test-tmp, removed at exit) and sets SOFTHSM2_CONF,
 * KL_P11SHIM_TARGET and KL_P11SHIM_CTL, which every keylessd started
 * afterwards inherits. Needs SoftHSM2 (scripts/install-deps.sh) and the
 * shim: $KL_P11SHIM (ctest sets it), else $KL_BIN_DIR/libkl_p11shim.so. */
#ifndef KL_TEST_SLOWKEY_H
#define KL_TEST_SLOWKEY_H

/* The user PIN of the tokens made here. */
#define TD_SLOW_PIN "1234"

/* Puts the private key in the PEM file key on a token of its own, on which
 * every signature and decryption takes ms milliseconds (0: no stall), with
 * sessions sessions (how many of its operations run at once, and keylessd's
 * blocking workers; 0: 1). Returns the key's PKCS#11 URI, through the shim
 * and with the PIN, for td_opts.slow_key; it stays valid until the process
 * exits. A key file put on a token belongs in no key directory of the same
 * keylessd (the two would be one SKI twice). Fails the test on error. */
const char *td_slow_key(const char *key, unsigned ms, unsigned sessions);

/* Changes the stall of the token of uri (from td_slow_key) to ms: a
 * keylessd already serving it sees the change at its next operation. */
void td_slow_key_set(const char *uri, unsigned ms);

/* SoftHSM2's PKCS#11 module where Debian (or another layout) puts it;
 * NULL when it is not installed. */
const char *tp_softhsm_module(void);

#endif
