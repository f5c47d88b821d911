/* SPDX-License-Identifier: Apache-2.0 */
/* ECDSA nonce precomputation: is it worth doing? (performance issue)
 *
 * The keyless literature precomputes each ECDSA nonce's (k^-1, r = (kG).x)
 * in idle time so that a burst pays only the cheap half of a signature.
 * OpenSSL 3's EVP interface has no such split; the deprecated EC_KEY
 * calls ECDSA_sign_setup and ECDSA_do_sign_ex do. This program measures,
 * on one core and P-256:
 *   evp-sign   EVP_PKEY_sign of a SHA-256 digest (what keylessd does)
 *   full-sign  ECDSA_do_sign (the same work through the old interface)
 *   setup      ECDSA_sign_setup alone (the part that could move to idle time)
 *   sign-ex    ECDSA_do_sign_ex with a precomputed (kinv, r)
 * and prints one JSON object with microseconds per operation (the best
 * and the median of REPS rounds; the best is the least disturbed by
 * other work on a shared machine).
 *
 * Measurement only: the deprecated calls are used here on purpose, with
 * the warnings silenced for this file; keylessd itself uses EVP only.
 *
 *   ecdsa-nonce [ITERATIONS [REPS]]      (default 20000 5) */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what)
{
    fprintf(stderr, "ecdsa-nonce: %s failed\n", what);
    exit(1);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (iters < 1 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: ecdsa-nonce [ITERATIONS [REPS<=100]]\n");
        return 2;
    }
    EC_KEY *ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
    if (!ec || EC_KEY_generate_key(ec) != 1)
        die("EC_KEY_generate_key");
    EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    EVP_PKEY_CTX *ctx = pk ? EVP_PKEY_CTX_new_from_pkey(NULL, pk, NULL) : NULL;
    if (!ctx || EVP_PKEY_sign_init(ctx) != 1)
        die("EVP_PKEY_sign_init");
    unsigned char dg[32], sig[80];
    RAND_bytes(dg, sizeof dg);
    /* precomputed nonces for sign-ex: one per signature, used once */
    BIGNUM **kinv = calloc((size_t)iters, sizeof *kinv);
    BIGNUM **rp = calloc((size_t)iters, sizeof *rp);
    double *t[4];
    for (int m = 0; m < 4; m++)
        t[m] = calloc((size_t)reps, sizeof(double));
    if (!kinv || !rp || !t[0] || !t[1] || !t[2] || !t[3])
        die("calloc");
    for (int r = 0; r < reps; r++) {
        double t0 = now_us();
        for (int i = 0; i < iters; i++) {
            size_t sl = sizeof sig;
            if (EVP_PKEY_sign(ctx, sig, &sl, dg, sizeof dg) != 1)
                die("EVP_PKEY_sign");
        }
        double t1 = now_us();
        for (int i = 0; i < iters; i++) {
            ECDSA_SIG *s = ECDSA_do_sign(dg, sizeof dg, ec);
            if (!s)
                die("ECDSA_do_sign");
            ECDSA_SIG_free(s);
        }
        double t2 = now_us();
        for (int i = 0; i < iters; i++)
            if (ECDSA_sign_setup(ec, NULL, &kinv[i], &rp[i]) != 1)
                die("ECDSA_sign_setup");
        double t3 = now_us();
        for (int i = 0; i < iters; i++) {
            ECDSA_SIG *s = ECDSA_do_sign_ex(dg, sizeof dg, kinv[i], rp[i], ec);
            if (!s)
                die("ECDSA_do_sign_ex");
            ECDSA_SIG_free(s);
        }
        double t4 = now_us();
        for (int i = 0; i < iters; i++) {
            BN_clear_free(kinv[i]);
            BN_clear_free(rp[i]);
            kinv[i] = rp[i] = NULL;
        }
        t[0][r] = (t1 - t0) / iters;
        t[1][r] = (t2 - t1) / iters;
        t[2][r] = (t3 - t2) / iters;
        t[3][r] = (t4 - t3) / iters;
    }
    static const char *names[] = {"evp_sign", "full_sign", "setup", "sign_ex"};
    printf("{\"curve\": \"P-256\", \"iterations\": %d, \"reps\": %d, "
           "\"openssl\": \"%s\"",
           iters, reps, OpenSSL_version(OPENSSL_VERSION));
    for (int m = 0; m < 4; m++) {
        qsort(t[m], (size_t)reps, sizeof(double), cmp);
        printf(", \"%s_us\": {\"best\": %.2f, \"median\": %.2f}", names[m],
               t[m][0], t[m][reps / 2]);
    }
    printf("}\n");
    for (int m = 0; m < 4; m++)
        free(t[m]);
    free(kinv);
    free(rp);
    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_free(pk);
    EC_KEY_free(ec);
    return 0;
}
