/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-cli: one-shot client for operators debugging a deployment.
 * ping, sign and decrypt against a key server, each answer verified with
 * the public key; ski prints a key's identifier (protocol P7). It runs on
 * libkeyless's kl_target, like every client of the project. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

#include "cli_fleet.h"
#include "client/opnames.h"
#include "client/verify.h"
#include "core/log.h"
#include "core/time.h"
#include "keyless/client.h"
#include "keys/keystore.h"

/* Exit codes (documented in --help). */
enum {
    EXIT_OK = 0,
    EXIT_FAIL = 1,    /* error response, verification failed */
    EXIT_USAGE = 2,   /* bad command line or input file */
    EXIT_CONNECT = 3, /* could not connect or the connection broke */
};

#define CLI_MAX_INPUT 65536

typedef struct cli {
    const char *cmd;
    const char *server;
    const char *cert, *key, *ca, *server_name;
    bool tls12;
    int timeout_ms;
    const char *ski_hex, *pubkey_file, *certkey_file;
    const char *op_name;
    const char *digest_hex, *message, *in_file, *ciphertext_hex, *payload;
    bool encrypt_test;
    bool verbose;
    /* derived */
    EVP_PKEY *pub;
    uint8_t ski[KL_SKI_LEN];
    bool have_ski;
    char key_desc[64];
    char ski_str[2 * KL_SKI_LEN + 1];
} cli;

static void usage(FILE *f)
{
    fputs(
        "usage: keyless-cli COMMAND [OPTIONS]\n"
        "\n"
        "Commands:\n"
        "  ping              send a ping; the pong must echo the payload\n"
        "  sign              have the key server sign; verify the signature\n"
        "  decrypt           have the key server RSA-decrypt; verify the "
        "result\n"
        "  ski FILE...       print the SKI (protocol P7) of certificate, "
        "public\n"
        "                    key or private key files\n"
        "  fleet [servers]   the fleet directory in etcd: servers, regions, "
        "roles,\n"
        "                    health, leases, key sets (docs/FLEET.md); with\n"
        "                    --router URL also a router's view: up or down "
        "and\n"
        "                    the measured latency of each remote\n"
        "  fleet regions     the compliance-region codes (tag 0x17)\n"
        "  fleet publish-set NAME [FILE...]\n"
        "                    publish a key set: the SKIs of the key or "
        "certificate\n"
        "                    FILEs and of --skis LIST (40 hex digits a "
        "line)\n"
        "    fleet options: --etcd URL,... (default http://127.0.0.1:2379)\n"
        "                   --etcd-ca, --etcd-cert, --etcd-key FILE, --prefix "
        "P\n"
        "                   (default /keyless/), --etcd-user U and\n"
        "                   --etcd-password-file FILE (etcd auth), --router "
        "URL\n"
        "                   (a router's metrics address, servers), "
        "--regions R,...\n"
        "                   (publish-set), -json (servers, regions)\n"
        "\n"
        "Connection:\n"
        "  --server HOST:PORT   key server (default 127.0.0.1:2407; IPv6 as "
        "[::1]:2407)\n"
        "  --cert FILE          client certificate (PEM)\n"
        "  --key FILE           its private key (PEM)\n"
        "  --ca FILE            CA the server certificate must chain to\n"
        "  --server-name NAME   name to check in the server certificate "
        "(default: HOST)\n"
        "  --tls12              negotiate TLS 1.2 (the compatibility "
        "profile)\n"
        "  --timeout MS         connect and per-request timeout (default "
        "10000)\n"
        "\n"
        "Key (sign, decrypt): the public key selects the key by its SKI and\n"
        "verifies the answer.\n"
        "  --pubkey FILE        public key file (PEM or DER)\n"
        "  --cert-file FILE     certificate holding the public key\n"
        "  --ski HEX            select by SKI only (the answer cannot be "
        "verified)\n"
        "\n"
        "sign:\n"
        "  --op OP              rsa-md5sha1, rsa-sha1, rsa-sha224, "
        "rsa-sha256,\n"
        "                       rsa-sha384, rsa-sha512, rsa-pss-sha256,\n"
        "                       rsa-pss-sha384, rsa-pss-sha512, "
        "ecdsa-md5sha1,\n"
        "                       ecdsa-sha1 .. ecdsa-sha512, ed25519, the\n"
        "                       protocol's name (OpECDSASignSHA256) or a "
        "number\n"
        "                       (0x15); default: by key type (rsa-sha256,\n"
        "                       ecdsa-sha256, ed25519)\n"
        "  --digest HEX         the digest to sign (not for ed25519)\n"
        "  --message TEXT       a message, hashed with OP's hash (ed25519 "
        "signs it as is)\n"
        "  --in FILE            the message from a file\n"
        "\n"
        "decrypt:\n"
        "  --in FILE            ciphertext (binary)\n"
        "  --ciphertext HEX     ciphertext in hex\n"
        "  --encrypt-test       encrypt a fresh random message with the "
        "public key\n"
        "                       (PKCS#1 v1.5), decrypt it remotely, and check "
        "the\n"
        "                       returned block is 00 02 PS 00 message\n"
        "\n"
        "ping:\n"
        "  --payload TEXT       bytes to echo (default \"keyless-cli\")\n"
        "\n"
        "  -v, --verbose        print connection details\n"
        "  -h, --help           this help\n"
        "\n"
        "Each command prints one verdict line, \"OK: ...\" or \"FAIL: ...\".\n"
        "Exit status: 0 success, 1 failure (error answer, verification "
        "failed),\n"
        "2 bad command line or input, 3 connection failure.\n",
        f);
}

static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "keyless-cli: ");
    fprintf(stderr, fmt, a ? a : "", b ? b : "");
    fprintf(stderr, "\n(see keyless-cli --help)\n");
    return EXIT_USAGE;
}

/* ---- input parsing ------------------------------------------------------ */

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Hex (':' and spaces allowed between bytes) into out. */
static bool parse_hex(const char *s, uint8_t *out, size_t cap, size_t *len)
{
    size_t n = 0;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    while (*s) {
        if (*s == ':' || *s == ' ') {
            s++;
            continue;
        }
        int hi = hexval((unsigned char)s[0]);
        int lo = s[1] ? hexval((unsigned char)s[1]) : -1;
        if (hi < 0 || lo < 0 || n >= cap)
            return false;
        out[n++] = (uint8_t)(hi << 4 | lo);
        s += 2;
    }
    *len = n;
    return true;
}

static void print_hex(FILE *f, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", p[i]);
}

static bool read_input(const char *path, uint8_t *buf, size_t cap, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "keyless-cli: --in %s: %s\n", path, strerror(errno));
        return false;
    }
    *len = fread(buf, 1, cap, f);
    bool too_big = !feof(f) && fgetc(f) != EOF;
    bool err = ferror(f);
    fclose(f);
    if (err || too_big) {
        fprintf(stderr, "keyless-cli: --in %s: %s\n", path,
                err ? "read error" : "larger than the 65535-byte limit");
        return false;
    }
    return true;
}

/* host:port, [v6]:port, host, or a bare IPv6 literal. */
static bool parse_server(const char *s, char *host, size_t hcap, uint16_t *port)
{
    const char *colon = NULL;
    *port = KL_DEFAULT_PORT;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || (size_t)(end - s - 1) >= hcap || end == s + 1)
            return false;
        memcpy(host, s + 1, (size_t)(end - s - 1));
        host[end - s - 1] = 0;
        if (end[1] == 0)
            return true;
        if (end[1] != ':')
            return false;
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon && strchr(s, ':') != colon)
            colon = NULL; /* several colons: an IPv6 literal */
        size_t hl = colon ? (size_t)(colon - s) : strlen(s);
        if (hl == 0 || hl >= hcap)
            return false;
        memcpy(host, s, hl);
        host[hl] = 0;
    }
    if (colon) {
        char *end;
        errno = 0;
        long p = strtol(colon + 1, &end, 10);
        if (errno || *end || end == colon + 1 || p < 1 || p > 65535)
            return false;
        *port = (uint16_t)p;
    }
    return true;
}

/* ---- operations by name ------------------------------------------------- */

static bool op_fits_key(uint8_t op, EVP_PKEY *pk)
{
    switch (kl_op_classify(op)) {
    case KL_OPC_RSA:
    case KL_OPC_RSA_PSS: return EVP_PKEY_is_a(pk, "RSA");
    case KL_OPC_ECDSA: return EVP_PKEY_is_a(pk, "EC");
    case KL_OPC_ED25519: return EVP_PKEY_is_a(pk, "ED25519");
    default: return true; /* not a key operation: let the server say */
    }
}

/* ---- key and connection ------------------------------------------------- */

static int load_key(cli *a)
{
    char err[512];
    int given = !!a->pubkey_file + !!a->certkey_file;
    if (given > 1)
        return usage_error("--pubkey and --cert-file both given: use one%s%s",
                           NULL, NULL);
    const char *file = a->pubkey_file ? a->pubkey_file : a->certkey_file;
    const char *flag = a->pubkey_file ? "--pubkey" : "--cert-file";
    if (file) {
        if (kl_pubkey_load(file, &a->pub, err, sizeof err) != KL_OK)
            return usage_error("%s: %s", flag, err);
        if (kl_ski_from_pkey(a->pub, a->ski) != KL_OK)
            return usage_error("%s %s: cannot compute the SKI of this key",
                               flag, file);
        kl_pubkey_desc(a->pub, a->key_desc, sizeof a->key_desc);
        a->have_ski = true;
    }
    if (a->ski_hex) {
        uint8_t s[KL_SKI_LEN];
        if (kl_ski_parse(a->ski_hex, s) != KL_OK)
            return usage_error("--ski %s: expected 40 hex digits%s", a->ski_hex,
                               NULL);
        if (a->have_ski && memcmp(s, a->ski, KL_SKI_LEN) != 0)
            return usage_error("--ski %s does not match the SKI of %s",
                               a->ski_hex, file);
        memcpy(a->ski, s, KL_SKI_LEN);
        a->have_ski = true;
    }
    if (!a->have_ski)
        return usage_error("%s needs a key: --pubkey FILE, --cert-file FILE "
                           "or --ski HEX",
                           a->cmd, NULL);
    if (!a->pub)
        snprintf(a->key_desc, sizeof a->key_desc, "key");
    kl_ski_hex(a->ski, a->ski_str);
    return EXIT_OK;
}

/* The CLI runs on the client library like every other client: a target
 * with one server, connected up front so a connection failure is told
 * apart from an answer that does not come. */
static int connect_server(cli *a, kl_target **t)
{
    char host[256], err[512];
    uint16_t port;
    if (!parse_server(a->server, host, sizeof host, &port))
        return usage_error("--server %s: expected HOST:PORT, HOST or "
                           "[IPv6]:PORT",
                           a->server, NULL);
    if (!!a->cert != !!a->key)
        return usage_error("%s given without %s: the client certificate "
                           "needs its key",
                           a->cert ? "--cert" : "--key",
                           a->cert ? "--key" : "--cert");
    if (!a->ca)
        fprintf(stderr, "keyless-cli: warning: no --ca: the server "
                        "certificate is not verified\n");
    const char *servers[] = {a->server};
    kl_target_opts o = {.servers = servers,
                        .nservers = 1,
                        .cert_file = a->cert,
                        .key_file = a->key,
                        .ca_file = a->ca,
                        .server_name = a->server_name,
                        .tls12_only = a->tls12,
                        .timeout_ms = a->timeout_ms,
                        .connect_timeout_ms = a->timeout_ms,
                        .ping_interval_ms = -1};
    kl_status st = kl_target_new(&o, t, err, sizeof err);
    if (st == KL_OK)
        st = kl_target_connect(*t, a->timeout_ms, err, sizeof err);
    if (st != KL_OK) {
        printf("FAIL: cannot connect: %s\n", err);
        return st == KL_E_CONFIG ? EXIT_USAGE : EXIT_CONNECT;
    }
    if (a->verbose) {
        kl_conn_info ci;
        kl_target_conn_info(*t, &ci);
        fprintf(stderr, "connected to %s port %u with %s %s\n", ci.host,
                (unsigned)ci.port, ci.tls_version, ci.cipher);
    }
    return EXIT_OK;
}

/* Sends one request and waits for its answer; prints FAIL lines itself. */
static int roundtrip(cli *a, kl_target *t, const kl_request_spec *spec,
                     kl_client_result *r, double *ms)
{
    uint64_t t0 = kl_now_ns();
    kl_status st = kl_target_call(t, spec, a->timeout_ms, r);
    *ms = kl_ns_to_ms_f(kl_now_ns() - t0);
    if (st == KL_E_TIMEOUT) {
        printf("FAIL: no answer from %s within %d ms\n", a->server,
               a->timeout_ms);
        return EXIT_CONNECT;
    }
    if (st != KL_OK) {
        kl_conn_info ci;
        kl_target_conn_info(t, &ci);
        printf("FAIL: %s: %s (%s)\n", a->server, kl_status_str(st),
               ci.last_error[0] ? ci.last_error : "no detail");
        return EXIT_CONNECT;
    }
    if (r->opcode == KL_OP_ERROR) {
        printf("FAIL: the key server answered error 0x%02x (%s) to %s\n",
               r->error, kl_err_text(r->error), kl_op_name(spec->opcode));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ---- commands ----------------------------------------------------------- */

static int cmd_ping(cli *a, kl_target *c)
{
    const char *payload = a->payload ? a->payload : "keyless-cli";
    kl_request_spec s = {.opcode = KL_OP_PING,
                         .payload = (const uint8_t *)payload,
                         .payload_len = strlen(payload)};
    kl_client_result r;
    double ms;
    int rc = roundtrip(a, c, &s, &r, &ms);
    if (rc == EXIT_OK) {
        if (r.opcode != KL_OP_PONG) {
            printf("FAIL: answer to a ping has opcode %s, not OpPong\n",
                   kl_op_name(r.opcode));
            rc = EXIT_FAIL;
        } else if (r.payload_len != s.payload_len ||
                   (r.payload_len &&
                    memcmp(r.payload, payload, r.payload_len) != 0)) {
            printf("FAIL: pong payload (%zu bytes) differs from the ping's "
                   "(%zu bytes)\n",
                   r.payload_len, s.payload_len);
            rc = EXIT_FAIL;
        } else {
            printf("OK: pong from %s echoed %zu bytes in %.2f ms\n", a->server,
                   r.payload_len, ms);
        }
    }
    kl_client_result_free(&r);
    return rc;
}

static int cmd_sign(cli *a, kl_target *c, uint8_t op)
{
    static uint8_t msg[CLI_MAX_INPUT];
    uint8_t input[CLI_MAX_INPUT];
    size_t inlen = 0, mlen = 0;
    kl_op_class cls = kl_op_classify(op);

    if (a->digest_hex) {
        if (!parse_hex(a->digest_hex, input, sizeof input, &inlen))
            return usage_error("--digest: not valid hex%s%s", NULL, NULL);
    } else {
        if (a->message) {
            mlen = strlen(a->message);
            memcpy(msg, a->message, mlen < sizeof msg ? mlen : sizeof msg);
        } else if (!read_input(a->in_file, msg, sizeof msg, &mlen)) {
            return EXIT_USAGE;
        }
        if (cls == KL_OPC_ED25519 || !kl_op_md(op)) {
            /* pure Ed25519 signs the message itself (protocol P4) */
            memcpy(input, msg, mlen);
            inlen = mlen;
        } else if (kl_op_digest(op, msg, mlen, input, &inlen) != KL_OK) {
            return usage_error("--op: cannot hash for %s%s", kl_op_name(op),
                               NULL);
        }
    }
    size_t want = kl_op_digest_len(op);
    if (a->digest_hex && (cls == KL_OPC_RSA || cls == KL_OPC_RSA_PSS) && want &&
        inlen != want) {
        char got[64];
        snprintf(got, sizeof got, "%zu, expected %zu", inlen, want);
        return usage_error("--digest: %s needs a digest of that hash's size: "
                           "got %s bytes",
                           kl_op_name(op), got);
    }

    kl_request_spec s = {
        .opcode = op, .payload = input, .payload_len = inlen, .ski = a->ski};
    kl_client_result r;
    double ms;
    int rc = roundtrip(a, c, &s, &r, &ms);
    if (rc != EXIT_OK) {
        kl_client_result_free(&r);
        return rc;
    }
    char why[256] = "";
    if (!a->pub) {
        printf("UNVERIFIED: %s answered %zu bytes with key %s in %.2f ms "
               "(give --pubkey or --cert-file to verify)\n",
               kl_op_name(op), r.payload_len, a->ski_str, ms);
        printf("signature: ");
        print_hex(stdout, r.payload, r.payload_len);
        printf("\n");
    } else if (kl_verify_output(a->pub, op, input, inlen, r.payload,
                                r.payload_len, why, sizeof why) == KL_OK) {
        const char *kind = cls == KL_OPC_RSA_PSS ? " RSA-PSS"
                           : cls == KL_OPC_RSA   ? " PKCS#1 v1.5"
                                                 : "";
        printf("OK: %s%s signature (%zu bytes, %s) verified with key %s in "
               "%.2f ms\n",
               a->key_desc, kind, r.payload_len, kl_op_name(op), a->ski_str,
               ms);
    } else {
        printf("FAIL: %s signature from the key server does not verify with "
               "key %s: %s\n",
               a->key_desc, a->ski_str, why);
        rc = EXIT_FAIL;
    }
    if (a->verbose && rc == EXIT_OK && a->pub) {
        printf("signature: ");
        print_hex(stdout, r.payload, r.payload_len);
        printf("\n");
    }
    kl_client_result_free(&r);
    return rc;
}

/* A fresh PKCS#1 v1.5 ciphertext of a TLS-premaster-like message. */
static int encrypt_test_input(cli *a, uint8_t *ct, size_t *ctlen, uint8_t *pt,
                              size_t ptlen)
{
    pt[0] = 0x03;
    pt[1] = 0x03;
    if (RAND_bytes(pt + 2, (int)ptlen - 2) != 1)
        return EXIT_FAIL;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, a->pub, NULL);
    bool ok = ctx && EVP_PKEY_encrypt_init(ctx) == 1 &&
              EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1 &&
              EVP_PKEY_encrypt(ctx, ct, ctlen, pt, ptlen) == 1;
    EVP_PKEY_CTX_free(ctx);
    if (!ok) {
        printf("FAIL: cannot encrypt with the public key\n");
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

static int cmd_decrypt(cli *a, kl_target *c)
{
    uint8_t ct[CLI_MAX_INPUT], pt[48];
    size_t ctlen = 0;

    if (a->encrypt_test) {
        ctlen = sizeof ct;
        int rc = encrypt_test_input(a, ct, &ctlen, pt, sizeof pt);
        if (rc != EXIT_OK)
            return rc;
    } else if (a->ciphertext_hex) {
        if (!parse_hex(a->ciphertext_hex, ct, sizeof ct, &ctlen) || !ctlen)
            return usage_error("--ciphertext: not valid hex%s%s", NULL, NULL);
    } else if (!read_input(a->in_file, ct, sizeof ct, &ctlen)) {
        return EXIT_USAGE;
    }

    kl_request_spec s = {.opcode = KL_OP_RSA_DECRYPT,
                         .payload = ct,
                         .payload_len = ctlen,
                         .ski = a->ski};
    kl_client_result r;
    double ms;
    int rc = roundtrip(a, c, &s, &r, &ms);
    if (rc != EXIT_OK) {
        kl_client_result_free(&r);
        return rc;
    }
    const uint8_t *m = NULL;
    size_t mlen = 0;
    bool padded =
        kl_pkcs1_type2_unpad(r.payload, r.payload_len, &m, &mlen) == KL_OK;
    char why[256] = "";
    if (!a->pub) {
        printf("UNVERIFIED: decrypt answered a %zu-byte block with key %s "
               "(give --pubkey or --cert-file to verify)\n",
               r.payload_len, a->ski_str);
    } else if (kl_verify_output(a->pub, KL_OP_RSA_DECRYPT, ct, ctlen, r.payload,
                                r.payload_len, why, sizeof why) != KL_OK) {
        printf("FAIL: decrypt result does not match the ciphertext with key "
               "%s: %s\n",
               a->ski_str, why);
        rc = EXIT_FAIL;
    } else if (a->encrypt_test &&
               !(padded && mlen == sizeof pt && !memcmp(m, pt, mlen))) {
        printf("FAIL: decrypted block is not 00 02 PS 00 followed by the "
               "%zu-byte test message\n",
               sizeof pt);
        rc = EXIT_FAIL;
    } else if (a->encrypt_test) {
        printf("OK: %s decrypt verified: %zu-byte block 00 02 PS 00 + the "
               "%zu-byte test message, key %s, %.2f ms\n",
               a->key_desc, r.payload_len, mlen, a->ski_str, ms);
    } else {
        printf("OK: %s decrypt verified: %zu-byte block re-encrypts to the "
               "ciphertext, key %s, %.2f ms\n",
               a->key_desc, r.payload_len, a->ski_str, ms);
    }
    if (rc == EXIT_OK && !a->encrypt_test) {
        if (padded) {
            printf("message (%zu bytes, PKCS#1 v1.5 padding removed): ", mlen);
            print_hex(stdout, m, mlen);
        } else {
            printf("block (no PKCS#1 v1.5 type-2 padding): ");
            print_hex(stdout, r.payload, r.payload_len);
        }
        printf("\n");
    }
    kl_client_result_free(&r);
    return rc;
}

typedef struct ski_found {
    char hex[2 * KL_SKI_LEN + 1];
    char desc[64];
    int count;
} ski_found;

static void on_key(void *arg, const kl_key *k)
{
    ski_found *f = arg;
    kl_ski_hex(kl_key_ski(k), f->hex);
    kl_key_desc(k, f->desc, sizeof f->desc);
    f->count++;
}

static void on_report(void *arg, int level, const char *path, const char *msg)
{
    char *err = arg;
    if (level >= KL_LOG_ERROR && !err[0])
        snprintf(err, 512, "%s: %s", path, msg);
}

/* Prints the SKI of each file: certificates and public keys through the
 * client's loader; private keys through the key store, which reports the
 * SKI and never hands key material out here. */
static int cmd_ski(int n, char **files)
{
    int rc = EXIT_OK;
    if (n == 0)
        return usage_error("ski: give one or more certificate, public key or "
                           "private key files%s%s",
                           NULL, NULL);
    for (int i = 0; i < n; i++) {
        EVP_PKEY *pk = NULL;
        uint8_t ski[KL_SKI_LEN];
        char hex[2 * KL_SKI_LEN + 1], desc[64], err[512] = "", kerr[512] = "";
        if (kl_pubkey_load(files[i], &pk, err, sizeof err) == KL_OK) {
            if (kl_ski_from_pkey(pk, ski) == KL_OK) {
                kl_ski_hex(ski, hex);
                printf("%s  %s  %s\n", hex,
                       kl_pubkey_desc(pk, desc, sizeof desc), files[i]);
            } else {
                fprintf(stderr, "keyless-cli: %s: unsupported key type\n",
                        files[i]);
                rc = EXIT_USAGE;
            }
            EVP_PKEY_free(pk);
            continue;
        }
        kl_keystore_opts ko = {.allow_group_readable = true,
                               .report = on_report,
                               .report_arg = kerr};
        kl_keystore *ks = kl_keystore_new(&ko);
        ski_found found = {.count = 0};
        if (ks && kl_keystore_add_file(ks, files[i]) == KL_OK)
            kl_keystore_foreach(ks, on_key, &found);
        kl_keystore_free(ks);
        if (found.count == 1) {
            printf("%s  %s  %s\n", found.hex, found.desc, files[i]);
        } else {
            /* neither loader took it: say what the public loader saw,
             * unless the file looked like a private key */
            fprintf(stderr, "keyless-cli: %s\n",
                    strstr(err, "holds a private key") && kerr[0] ? kerr : err);
            rc = EXIT_USAGE;
        }
    }
    return rc;
}

bool kl_cli_parse_ski(const char *hex, uint8_t ski[20])
{
    size_t n = 0;
    return strlen(hex) == 40 && parse_hex(hex, ski, 20, &n) && n == 20;
}

static void on_key_raw(void *arg, const kl_key *k)
{
    memcpy(arg, kl_key_ski(k), KL_SKI_LEN);
}

bool kl_cli_file_ski(const char *path, uint8_t ski[20], char *err,
                     size_t errlen)
{
    EVP_PKEY *pk = NULL;
    char perr[512] = "", kerr[512] = "";
    if (kl_pubkey_load(path, &pk, perr, sizeof perr) == KL_OK) {
        bool ok = kl_ski_from_pkey(pk, ski) == KL_OK;
        EVP_PKEY_free(pk);
        if (!ok)
            snprintf(err, errlen, "%s: unsupported key type", path);
        return ok;
    }
    kl_keystore_opts ko = {
        .allow_group_readable = true, .report = on_report, .report_arg = kerr};
    kl_keystore *ks = kl_keystore_new(&ko);
    uint8_t got[KL_SKI_LEN] = {0}, zero[KL_SKI_LEN] = {0};
    if (ks && kl_keystore_add_file(ks, path) == KL_OK)
        kl_keystore_foreach(ks, on_key_raw, got);
    kl_keystore_free(ks);
    if (memcmp(got, zero, KL_SKI_LEN) != 0) {
        memcpy(ski, got, KL_SKI_LEN);
        return true;
    }
    snprintf(err, errlen, "%s",
             strstr(perr, "holds a private key") && kerr[0] ? kerr : perr);
    return false;
}

/* ---- main --------------------------------------------------------------- */

enum {
    O_SERVER = 256,
    O_CERT,
    O_KEY,
    O_CA,
    O_SERVER_NAME,
    O_TLS12,
    O_TIMEOUT,
    O_SKI,
    O_PUBKEY,
    O_CERT_FILE,
    O_OP,
    O_DIGEST,
    O_MESSAGE,
    O_IN,
    O_CIPHERTEXT,
    O_ENCRYPT_TEST,
    O_PAYLOAD,
};

static const struct option longopts[] = {
    {"server", required_argument, NULL, O_SERVER},
    {"cert", required_argument, NULL, O_CERT},
    {"key", required_argument, NULL, O_KEY},
    {"ca", required_argument, NULL, O_CA},
    {"server-name", required_argument, NULL, O_SERVER_NAME},
    {"tls12", no_argument, NULL, O_TLS12},
    {"timeout", required_argument, NULL, O_TIMEOUT},
    {"ski", required_argument, NULL, O_SKI},
    {"pubkey", required_argument, NULL, O_PUBKEY},
    {"cert-file", required_argument, NULL, O_CERT_FILE},
    {"op", required_argument, NULL, O_OP},
    {"digest", required_argument, NULL, O_DIGEST},
    {"message", required_argument, NULL, O_MESSAGE},
    {"in", required_argument, NULL, O_IN},
    {"ciphertext", required_argument, NULL, O_CIPHERTEXT},
    {"encrypt-test", no_argument, NULL, O_ENCRYPT_TEST},
    {"payload", required_argument, NULL, O_PAYLOAD},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int parse_args(cli *a, int argc, char **argv)
{
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "+vh", longopts, NULL)) != -1) {
        switch (ch) {
        case O_SERVER: a->server = optarg; break;
        case O_CERT: a->cert = optarg; break;
        case O_KEY: a->key = optarg; break;
        case O_CA: a->ca = optarg; break;
        case O_SERVER_NAME: a->server_name = optarg; break;
        case O_TLS12: a->tls12 = true; break;
        case O_TIMEOUT: {
            char *end;
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || *end || v < 1 || v > 3600000)
                return usage_error("--timeout %s: expected milliseconds "
                                   "(1..3600000)",
                                   optarg, NULL);
            a->timeout_ms = (int)v;
            break;
        }
        case O_SKI: a->ski_hex = optarg; break;
        case O_PUBKEY: a->pubkey_file = optarg; break;
        case O_CERT_FILE: a->certkey_file = optarg; break;
        case O_OP: a->op_name = optarg; break;
        case O_DIGEST: a->digest_hex = optarg; break;
        case O_MESSAGE: a->message = optarg; break;
        case O_IN: a->in_file = optarg; break;
        case O_CIPHERTEXT: a->ciphertext_hex = optarg; break;
        case O_ENCRYPT_TEST: a->encrypt_test = true; break;
        case O_PAYLOAD: a->payload = optarg; break;
        case 'v': a->verbose = true; break;
        case 'h': usage(stdout); exit(EXIT_OK);
        case ':':
            return usage_error("%s needs a value%s", argv[optind - 1], NULL);
        default:
            return usage_error("unknown option %s%s", argv[optind - 1], NULL);
        }
    }
    return EXIT_OK;
}

/* Which inputs each command takes, so a stray flag is named, not ignored. */
static int check_flags(const cli *a)
{
    bool sign = !strcmp(a->cmd, "sign"), dec = !strcmp(a->cmd, "decrypt"),
         ping = !strcmp(a->cmd, "ping");
    if (!ping && a->payload)
        return usage_error("--payload is for ping, not %s%s", a->cmd, NULL);
    if (ping && (a->ski_hex || a->pubkey_file || a->certkey_file))
        return usage_error("ping takes no key (--ski/--pubkey/--cert-file)%s%s",
                           NULL, NULL);
    if (!sign && (a->op_name || a->digest_hex || a->message))
        return usage_error("--op, --digest and --message are for sign, not "
                           "%s%s",
                           a->cmd, NULL);
    if (!dec && (a->ciphertext_hex || a->encrypt_test))
        return usage_error("--ciphertext and --encrypt-test are for decrypt, "
                           "not %s%s",
                           a->cmd, NULL);
    if (ping && a->in_file)
        return usage_error("--in is for sign and decrypt, not ping%s%s", NULL,
                           NULL);
    if (sign && !!a->digest_hex + !!a->message + !!a->in_file != 1)
        return usage_error("sign needs exactly one of --digest, --message "
                           "and --in%s%s",
                           NULL, NULL);
    if (dec && !!a->ciphertext_hex + !!a->in_file + a->encrypt_test != 1)
        return usage_error("decrypt needs exactly one of --in, --ciphertext "
                           "and --encrypt-test%s%s",
                           NULL, NULL);
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    cli a = {.server = "127.0.0.1:2407", .timeout_ms = 10000};
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    a.cmd = argv[1];
    if (!strcmp(a.cmd, "fleet"))
        return kl_cli_fleet(argc - 1, argv + 1);
    if (!strcmp(a.cmd, "ski"))
        return cmd_ski(argc - 2, argv + 2);
    if (strcmp(a.cmd, "ping") && strcmp(a.cmd, "sign") &&
        strcmp(a.cmd, "decrypt"))
        return usage_error("unknown command \"%s\": ping, sign, decrypt or "
                           "ski",
                           a.cmd, NULL);
    int rc = parse_args(&a, argc - 1, argv + 1);
    if (rc != EXIT_OK)
        return rc;
    if (optind < argc - 1)
        return usage_error("unexpected argument \"%s\"%s", argv[optind + 1],
                           NULL);
    if ((rc = check_flags(&a)) != EXIT_OK)
        return rc;

    uint8_t op = KL_OP_RSA_DECRYPT;
    if (strcmp(a.cmd, "ping") != 0) {
        if ((rc = load_key(&a)) != EXIT_OK)
            goto out;
        if (!strcmp(a.cmd, "sign")) {
            if (a.op_name && !kl_op_parse(a.op_name, &op)) {
                rc = usage_error("--op %s: unknown operation (rsa-sha256, "
                                 "ecdsa-sha256, ed25519, ... or 0xNN)",
                                 a.op_name, NULL);
                goto out;
            }
            if (!a.op_name && !a.pub) {
                rc = usage_error("sign with --ski only needs --op%s%s", NULL,
                                 NULL);
                goto out;
            }
            if (!a.op_name)
                op = kl_op_default_for_key(a.pub);
        }
        if (a.pub && !op_fits_key(op, a.pub)) {
            rc =
                usage_error("--op %s does not fit the %s key given",
                            a.op_name ? a.op_name : kl_op_name(op), a.key_desc);
            goto out;
        }
        if (a.encrypt_test && !a.pub) {
            rc = usage_error("--encrypt-test needs the public key: --pubkey "
                             "or --cert-file%s%s",
                             NULL, NULL);
            goto out;
        }
    }

    kl_target *c = NULL;
    if ((rc = connect_server(&a, &c)) != EXIT_OK) {
        kl_target_free(c);
        goto out;
    }
    if (!strcmp(a.cmd, "ping"))
        rc = cmd_ping(&a, c);
    else if (!strcmp(a.cmd, "sign"))
        rc = cmd_sign(&a, c, op);
    else
        rc = cmd_decrypt(&a, c);
    kl_target_free(c);
out:
    EVP_PKEY_free(a.pub);
    return rc;
}
