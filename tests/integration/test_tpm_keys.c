/* SPDX-License-Identifier: Apache-2.0 */
/* Keys in a TPM 2.0 through a real keylessd: a software TPM (swtpm) on
 * loopback, the tpm2-openssl provider loaded by openssl.cnf, keys made in
 * the TPM as "TSS2 PRIVATE KEY" files in a key directory (ECDSA P-256,
 * RSA-2048) and one persistent key addressed as handle:0x81000001 (a `uri:`
 * store); no key_propquery: a key another provider holds is signed there
 * (docs/OPERATIONS.md "Accelerators and provider keys").
 * - --keystore-debug lists them as "provider" keys, with the SKIs of their
 *   public keys;
 * - ECDSA, RSA PKCS#1 and RSA-PSS signatures made in the TPM verify with
 *   OpenSSL;
 * - a TPM that stops answering (swtpm stopped) is bounded by the request's
 *   deadline like a PKCS#11 token, while a file key beside it answers at
 *   once; once the TPM answers again, so do its keys;
 * - a persistent P-256 key, handle:0x81000002, is the sealing_key
 *   (docs/SEALING.md "Node identity"): `keyless-seal pubkey` prints it
 *   for the fleet file, a key sealed to it is opened at start - the ECDH
 *   in the TPM - and signs. */
#include "daemon.h"
#include "net.h"
#include "pki.h"
#include "testutil.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "client/verify.h"

static td_daemon d;
static char *dir;
static pid_t tpm_pid;
static EVP_PKEY *ec_pub, *rsa_pub, *h_pub, *file_pub, *sealed_pub;
static uint8_t ec_ski[20], rsa_ski[20], h_ski[20], file_ski[20], sealed_ski[20];

#define OSSL_TPM "openssl %s -provider tpm2 -provider default "

/* Whether something accepts on 127.0.0.1:port. */
static bool accepts(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Whether port can be bound on 127.0.0.1 now. */
static bool port_free(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    bool ok = fd >= 0 &&
              setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
              bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void start_swtpm(uint16_t port, uint16_t ctl_port)
{
    char state[PATH_MAX];
    snprintf(state, sizeof state, "%s/tpm", dir);
    tu_sh("mkdir -p %s", state);
    tpm_pid = fork();
    assert_true(tpm_pid >= 0);
    if (tpm_pid == 0) {
        char srv[64], ctl[64], st[PATH_MAX + 8], log[PATH_MAX + 16];
        snprintf(srv, sizeof srv, "type=tcp,port=%u,bindaddr=127.0.0.1", port);
        snprintf(ctl, sizeof ctl, "type=tcp,port=%u,bindaddr=127.0.0.1",
                 ctl_port);
        snprintf(st, sizeof st, "dir=%s", state);
        snprintf(log, sizeof log, "%s/swtpm.log", dir);
        td_child_setup(log, false, getppid());
        execlp("swtpm", "swtpm", "socket", "--tpm2", "--server", srv, "--ctrl",
               ctl, "--tpmstate", st, "--flags", "not-need-init,startup-clear",
               (char *)NULL);
        _exit(127);
    }
    /* up when its port accepts */
    for (int i = 0; i < 250; i++) {
        if (accepts(port))
            return;
        usleep(20 * 1000);
    }
    fail_msg("swtpm did not start (see %s/swtpm.log)", dir);
}

static EVP_PKEY *pub_of(const char *in, const char *out)
{
    tu_sh(OSSL_TPM "-in %s -pubout -out %s", "pkey", in, out);
    return tp_load_pub(out);
}

static kl_request_spec spec(uint8_t op, const uint8_t *ski, const uint8_t *p,
                            size_t n)
{
    return (kl_request_spec){
        .opcode = op, .payload = p, .payload_len = n, .ski = ski};
}

static void expect_signed(const kl_client_result *r, EVP_PKEY *pub, uint8_t op,
                          const uint8_t *in, size_t n)
{
    char why[256];
    if (r->opcode != KL_OP_RESPONSE)
        fail_msg("op 0x%02x: error %u", op, r->error);
    if (kl_verify_output(pub, op, in, n, r->payload, r->payload_len, why,
                         sizeof why) != KL_OK)
        fail_msg("op 0x%02x: does not verify: %s", op, why);
}

static void sign_and_verify(kl_client *c, uint8_t op, const uint8_t *ski,
                            EVP_PKEY *pub)
{
    uint8_t dg[64];
    const EVP_MD *md = kl_op_md(op);
    size_t n = md ? (size_t)EVP_MD_get_size(md) : 32;
    assert_int_equal(RAND_bytes(dg, (int)n), 1);
    kl_request_spec s = spec(op, ski, dg, n);
    kl_client_result r;
    td_call(&d, c, &s, &r);
    expect_signed(&r, pub, op, dg, n);
    kl_client_result_free(&r);
}

/* swtpm serves one client at a time: the listing runs before the
 * daemon starts (setup) */
static char *listing;
static int listing_rc;

static void test_listed(void **state)
{
    (void)state;
    const char *out = listing;
    assert_int_equal(listing_rc, 0);
    const uint8_t *skis[] = {ec_ski, rsa_ski, h_ski};
    /* the file key beside them stays OpenSSL's */
    char fline[128];
    snprintf(fline, sizeof fline, "%s  ", tp_ski_hex(file_ski));
    const char *fat = strstr(out, fline);
    if (!fat || strncmp(strchr(fat, ' ') + 2 + 15, "file", 4) != 0)
        fail_msg("the file key is not listed as a file key:\n%s", out);
    for (int i = 0; i < 3; i++) {
        char line[128];
        snprintf(line, sizeof line, "%s  ", tp_ski_hex(skis[i]));
        const char *at = strstr(out, line);
        if (!at || !strstr(at, "provider")) {
            fail_msg("SKI %s not listed as a provider key:\n%s", line, out);
        }
    }
}

static void test_signs(void **state)
{
    (void)state;
    kl_client *c = td_connect(&d);
    sign_and_verify(c, KL_OP_ECDSA_SIGN_SHA256, ec_ski, ec_pub);
    sign_and_verify(c, KL_OP_RSA_SIGN_SHA256, rsa_ski, rsa_pub);
    sign_and_verify(c, KL_OP_RSA_PSS_SIGN_SHA256, rsa_ski, rsa_pub);
    sign_and_verify(c, KL_OP_ECDSA_SIGN_SHA256, h_ski, h_pub);
    sign_and_verify(c, KL_OP_ECDSA_SIGN_SHA256, file_ski, file_pub);
    kl_client_close(c);
}

/* The key sealed to the TPM's sealing key was opened and signs. */
static void test_sealed_to_tpm(void **state)
{
    (void)state;
    kl_client *c = td_connect(&d);
    sign_and_verify(c, KL_OP_ECDSA_SIGN_SHA256, sealed_ski, sealed_pub);
    kl_client_close(c);
    char *log = td_read_log(&d);
    if (strstr(log, "sealed key refused") || strstr(log, "held elsewhere"))
        fail_msg("the sealed key was not opened:\n%s", log);
    free(log);
}

static void test_stopped_tpm(void **state)
{
    (void)state;
    kl_client *c = td_connect(&d);
    assert_int_equal(kill(tpm_pid, SIGSTOP), 0);
    uint8_t dg[32] = {5};
    kl_request_spec s = spec(KL_OP_ECDSA_SIGN_SHA256, ec_ski, dg, 32);
    s.req_context = "{\"deadline_ms\":500}";
    double t0 = td_now_ms();
    kl_client_result r;
    td_call(&d, c, &s, &r);
    double took = td_now_ms() - t0;
    printf("a stopped TPM answered after %.0f ms\n", took);
    assert_int_equal(r.opcode, KL_OP_ERROR);
    assert_int_equal(r.error, KL_ERR_INTERNAL);
    assert_true(took >= 450 && took < 3000);
    kl_client_result_free(&r);
    /* a file key is not held up by the TPM */
    t0 = td_now_ms();
    sign_and_verify(c, KL_OP_ECDSA_SIGN_SHA256, file_ski, file_pub);
    assert_true(td_now_ms() - t0 < 500);
    assert_int_equal(kill(tpm_pid, SIGCONT), 0);
    /* the TPM answers again (the stuck call returns first) */
    sign_and_verify(c, KL_OP_ECDSA_SIGN_SHA256, ec_ski, ec_pub);
    kl_client_close(c);
}

static void make_keys(void)
{
    char keys[PATH_MAX], p[3][PATH_MAX + 32];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    tu_sh("mkdir -p %s && chmod 700 %s", keys, keys);
    tu_sh_in(keys,
             OSSL_TPM "-propquery '?provider=tpm2' -algorithm EC -pkeyopt "
                      "group:P-256 -out tpm-ec.key",
             "genpkey");
    tu_sh_in(keys,
             OSSL_TPM "-propquery '?provider=tpm2' -algorithm RSA -pkeyopt "
                      "bits:2048 -out tpm-rsa.key",
             "genpkey");
    tu_sh("chmod 600 %s/*.key", keys);
    tp_copy_key(keys, tp_path("keys/ecdsa-p256.key"));
    EVP_PKEY *sk = tp_genkey(dir, "sealed.pem", "EC", "P-256", 0);
    unsigned char *der = NULL;
    int n = i2d_PUBKEY(sk, &der);
    const unsigned char *q = der;
    sealed_pub = d2i_PUBKEY(NULL, &q, n);
    OPENSSL_free(der);
    EVP_PKEY_free(sk);
    tp_ski(sealed_pub, sealed_ski);
    /* a persistent key (tpm2-tools, no resource manager: flush between) */
    tu_sh_in(dir, "tpm2_createprimary -Q -C o -c primary.ctx && "
                  "tpm2_flushcontext -t && "
                  "tpm2_create -Q -C primary.ctx -G ecc256 -u k.pub -r k.priv "
                  "&& tpm2_flushcontext -t && "
                  "tpm2_load -Q -C primary.ctx -u k.pub -r k.priv -c k.ctx && "
                  "tpm2_flushcontext -t && "
                  "tpm2_evictcontrol -Q -C o -c k.ctx 0x81000001 && "
                  "tpm2_flushcontext -t");
    /* the sealing key: another persistent P-256 key; a file key sealed to
     * it with keyless-seal (which reads the TPM through the provider) */
    tu_sh_in(dir, "tpm2_create -Q -C primary.ctx -G ecc256 -u s.pub -r s.priv "
                  "&& tpm2_flushcontext -t && "
                  "tpm2_load -Q -C primary.ctx -u s.pub -r s.priv -c s.ctx && "
                  "tpm2_flushcontext -t && "
                  "tpm2_evictcontrol -Q -C o -c s.ctx 0x81000002 && "
                  "tpm2_flushcontext -t");
    tu_sh_in(dir,
             "%s/keyless-seal pubkey --key handle:0x81000002 >node.pub "
             "2>/dev/null && "
             "printf 'nodes:\\n  - name: tpm\\n    attributes: {region: eu}\\n"
             "    sealing_key: |\\n' >fleet.yaml && "
             "sed 's/^/      /' node.pub >>fleet.yaml && "
             "%s/keyless-seal seal --policy region=eu --fleet fleet.yaml "
             "sealed.pem -o %s/sealed.sealed 2>/dev/null",
             tu_bin_dir(), tu_bin_dir(), keys);
    snprintf(p[0], sizeof p[0], "%s/tpm-ec.key", keys);
    snprintf(p[1], sizeof p[1], "%s/tpm-rsa.key", keys);
    snprintf(p[2], sizeof p[2], "%s/h.pub.pem", dir);
    char a[PATH_MAX + 16], b[PATH_MAX + 16];
    snprintf(a, sizeof a, "%s/ec.pub.pem", dir);
    snprintf(b, sizeof b, "%s/rsa.pub.pem", dir);
    ec_pub = pub_of(p[0], a);
    rsa_pub = pub_of(p[1], b);
    h_pub = pub_of("handle:0x81000001", p[2]);
    file_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(ec_pub, ec_ski);
    tp_ski(rsa_pub, rsa_ski);
    tp_ski(h_pub, h_ski);
    tp_ski(file_pub, file_ski);
}

static int setup(void **state)
{
    (void)state;
    /* this process reads its OpenSSL configuration now, before
     * OPENSSL_CONF names the TPM's: swtpm serves one client at a time,
     * and that must be keylessd (or the tools), not the test */
    OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, NULL);
    dir = tp_tempdir("tpm-keys");
    /* the swtpm TCTI finds the control channel at port + 1: a pair
     * below the ephemeral range, both free */
    uint16_t port = 0;
    for (unsigned i = 0; i < 200 && !port; i++) {
        uint16_t p =
            (uint16_t)(20000 +
                       ((unsigned)getpid() * 7919u + i * 131u) % 10000u);
        if (port_free(p) && port_free((uint16_t)(p + 1)))
            port = p;
    }
    assert_true(port != 0);
    start_swtpm(port, (uint16_t)(port + 1));
    char tcti[64], cnf[PATH_MAX];
    snprintf(tcti, sizeof tcti, "swtpm:host=127.0.0.1,port=%u", port);
    setenv("TPM2OPENSSL_TCTI", tcti, 1);
    setenv("TPM2TOOLS_TCTI", tcti, 1);
    snprintf(cnf, sizeof cnf, "%s/openssl.cnf", dir);
    FILE *f = fopen(cnf, "w");
    assert_non_null(f);
    fputs("openssl_conf = openssl_init\n[openssl_init]\n"
          "providers = provider_sect\n[provider_sect]\n"
          "default = default_sect\ntpm2 = tpm2_sect\n"
          "[default_sect]\nactivate = 1\n[tpm2_sect]\nactivate = 1\n",
          f);
    fclose(f);
    setenv("OPENSSL_CONF", cnf, 1); /* keylessd inherits it */
    make_keys();
    char keys[PATH_MAX + 32], stores[PATH_MAX * 2];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    snprintf(stores, sizeof stores,
             "--private-key-stores=[{dir: %s}, {uri: \"handle:0x81000001\"}]",
             keys);
    char bin[PATH_MAX];
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    const char *argv[] = {bin, stores, "--keystore-debug", NULL};
    listing_rc = td_run(argv, &listing, 60000);
    static char st[PATH_MAX * 2];
    snprintf(st, sizeof st, "%s", stores);
    static const char *extra[3];
    extra[0] = st;
    extra[1] = "--sealing-key=handle:0x81000002";
    td_opts o = {.name = "tpm-keys", .extra = extra};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int rc = td_stop(&d, 15000);
    if (tpm_pid > 0) {
        kill(tpm_pid, SIGCONT);
        kill(tpm_pid, SIGTERM);
        waitpid(tpm_pid, NULL, 0);
    }
    EVP_PKEY_free(ec_pub);
    EVP_PKEY_free(rsa_pub);
    EVP_PKEY_free(h_pub);
    EVP_PKEY_free(file_pub);
    EVP_PKEY_free(sealed_pub);
    tp_rmtree(dir);
    free(listing);
    assert_int_equal(rc, 0);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listed),
        cmocka_unit_test(test_signs),
        cmocka_unit_test(test_sealed_to_tpm),
        cmocka_unit_test(test_stopped_tpm),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
