/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-seal: sealed key files for operators (docs/SEALING.md).
 * keygen makes a server's sealing key; seal encrypts a private key to the
 * servers of the fleet file a policy selects; inspect shows a sealed file
 * without opening it; rewrap re-makes a file for the current fleet; open
 * writes the key back out (recovery with an escrow key). The work is in
 * src/seal; this file reads arguments and files and prints. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>

#include "core/log.h"
#include "keys/keystore.h"
#include "seal/fleetfile.h"
#include "seal_etcd.h"
#include "seal_files.h"
#include "seal/sealed.h"

typedef struct opts {
    const char *cmd, *out, *kem, *policy, *fleet, *key, *file;
    /* the fleet directory instead of a fleet file (seal_etcd.h) */
    const char *etcd, *etcd_ca, *etcd_cert, *etcd_key, *prefix;
    const char *etcd_user, *etcd_password_file;
    const char *out_dir; /* seal: many keys, DIR/NAME.sealed each */
    char **files;        /* every file argument (file is the first) */
    size_t n_files;
    const char *escrow[16];
    size_t n_escrow;
    bool json;
} opts;

static void usage(FILE *f)
{
    fputs(
        "usage: keyless-seal COMMAND [OPTIONS]\n"
        "\n"
        "Commands:\n"
        "  keygen --out FILE [--kem x25519|p256]\n"
        "        make this server's sealing key (PEM, mode 0600); print its\n"
        "        public half for the fleet file (stdout: PEM; stderr: the\n"
        "        raw base64 form)\n"
        "  seal --policy POLICY --fleet FLEET.yaml [--escrow PUB.pem]... "
        "KEY -o OUT\n"
        "        seal the private key file KEY to every server of the fleet\n"
        "        file that is not revoked and satisfies POLICY, and to the\n"
        "        fleet's escrow recipients (and each --escrow public key);\n"
        "        a policy that selects no server is refused\n"
        "  seal --policy POLICY --etcd URL[,URL...] [--prefix P] ... KEY -o "
        "OUT\n"
        "        the same, with the servers of the fleet directory (etcd)\n"
        "        that publish a sealing key, with the attributes they publish\n"
        "        (servers registered now: their records live on leases);\n"
        "        --etcd-ca, --etcd-cert, --etcd-key for mutual TLS,\n"
        "        --etcd-user and --etcd-password-file for etcd's password\n"
        "        auth (a read-only user is enough), --prefix\n"
        "        the directory's (default /keyless/)\n"
        "  seal --policy POLICY --fleet FLEET.yaml [--escrow PUB.pem]... "
        "--out-dir DIR\n"
        "       KEY|KEYDIR...\n"
        "        the same for many keys in one run: each key file given, and\n"
        "        every *.key file below each directory given, into\n"
        "        DIR/NAME.sealed (NAME: the key file's name without .key);\n"
        "        prints the keys sealed per second\n"
        "  inspect [--json] FILE\n"
        "        policy, SKI, key type and recipients, opening nothing\n"
        "  rewrap --fleet FLEET.yaml|--etcd URL --key NODE.key FILE -o OUT\n"
        "        open FILE with a recipient's key (a server's or escrow's)\n"
        "        and seal it again under the same policy to the current\n"
        "        fleet, with a fresh data key; escrow recipients are kept\n"
        "  open --key NODE.key FILE -o OUT.pem\n"
        "        write the private key out as PKCS#8 PEM (mode 0600)\n"
        "  pubkey --key NODE.key\n"
        "        print the public half of a sealing key for the fleet file\n"
        "        (as keygen does)\n"
        "\n"
        "--key takes a sealing key file, or a PKCS#11 URI of a P-256 key on\n"
        "a token (pkcs11:token=...;object=...?module-path=...&pin-source=...,\n"
        "as keylessd's sealing_key): the token does the ECDH; or an\n"
        "OSSL_STORE URI of a key another OpenSSL provider holds\n"
        "(handle:0x81000002 with tpm2-openssl).\n"
        "\n"
        "Policies: name=value, name!=value, name in (v1, v2), and, or, not,\n"
        "parentheses (docs/DESIGN.md \"Sealing policies\"); for example\n"
        "'region=eu-west or region=eu-central'.\n"
        "\n"
        "  -o, --out FILE   output file (refused if it exists; written to a\n"
        "                   temporary file of its directory, flushed, then\n"
        "                   renamed into place)\n"
        "  --out-dir DIR    seal: the directory of the sealed files\n"
        "  -h, --help       this help\n"
        "\n"
        "Exit status: 0 success, 1 failure (cannot open, no recipient, I/O),\n"
        "2 bad command line or input file.\n",
        f);
}

static void report(void *arg, int level, const char *path, const char *msg)
{
    (void)arg;
    (void)level;
    fprintf(stderr, "keyless-seal: %s: %s\n", path, msg);
}

static void first_key(void *arg, const kl_key *k)
{
    const kl_key **out = arg;
    if (!*out)
        *out = k;
}

/* A private key file read as keylessd reads one (keys/load.c: same
 * formats, types and checks, not readable by group or others), with its
 * SKI. */
static int read_private(const char *path, EVP_PKEY **key, uint8_t *ski)
{
    kl_keystore_opts o = {.report = report};
    kl_keystore *ks = kl_keystore_new(&o);
    if (!ks)
        return EXIT_FAIL;
    const kl_key *k = NULL;
    if (kl_keystore_add_file(ks, path) == KL_OK)
        kl_keystore_foreach(ks, first_key, &k);
    if (k) {
        *key = kl_key_pkey(k);
        EVP_PKEY_up_ref(*key);
        memcpy(ski, kl_key_ski(k), KL_SKI_LEN);
    }
    kl_keystore_free(ks);
    return k ? EXIT_OK : EXIT_USAGE;
}

/* Whether --key is an OSSL_STORE URI of another scheme than file: and
 * pkcs11: (handle:0x81000001), not a path (a file of that name is one). */
static bool store_uri(const char *v)
{
    size_t n = strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789+.-");
    struct stat st;
    return n > 1 && v[n] == ':' && strncmp(v, "file:", 5) != 0 &&
           strncmp(v, "pkcs11:", 7) != 0 && stat(v, &st) != 0;
}

/* A sealing private key: keygen's output (X25519 or P-256 PEM), a
 * `pkcs11:` URI of a P-256 key on a token, which does the ECDH
 * (keys/p11_seal.c), or a store URI of another provider's key. */
static int read_node_key(const char *path, EVP_PKEY **key)
{
    if (!strncmp(path, "pkcs11:", 7)) {
        char why[512];
        kl_status s = kl_keys_sealing_key_p11(path, key, why, sizeof why);
        if (s != KL_OK)
            fprintf(stderr, "keyless-seal: --key (a PKCS#11 URI): %s\n", why);
        return s == KL_OK ? EXIT_OK : s == KL_E_CONFIG ? EXIT_USAGE : EXIT_FAIL;
    }
    if (store_uri(path)) {
        /* a key another OpenSSL provider holds (handle:0x81000001) */
        char why[512];
        kl_status s =
            kl_keys_sealing_key_store(path, NULL, key, why, sizeof why);
        if (s != KL_OK)
            fprintf(stderr, "keyless-seal: --key %s: %s\n", path, why);
        return s == KL_OK ? EXIT_OK : s == KL_E_CONFIG ? EXIT_USAGE : EXIT_FAIL;
    }
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & 077))
        fprintf(stderr,
                "keyless-seal: warning: %s is readable by others (mode "
                "%03o): chmod 600 it\n",
                path, (unsigned)(st.st_mode & 0777));
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "keyless-seal: %s: %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    *key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t n = 0;
    if (!*key ||
        (kl_hpke_public(KL_HPKE_KEM_X25519, *key, pk, sizeof pk, &n) != KL_OK &&
         kl_hpke_public(KL_HPKE_KEM_P256, *key, pk, sizeof pk, &n) != KL_OK)) {
        fprintf(stderr,
                "keyless-seal: %s: not a sealing key (a PEM X25519 or P-256 "
                "private key, as keygen writes)\n",
                path);
        EVP_PKEY_free(*key);
        *key = NULL;
        return EXIT_USAGE;
    }
    ERR_clear_error();
    return EXIT_OK;
}

/* The fleet file, or the fleet directory's records (--etcd). */
static int load_fleet(const opts *o, kl_fleetfile **f)
{
    char err[512] = "";
    if (o->etcd) {
        seal_etcd_opts eo = {
            o->etcd,   o->etcd_ca,   o->etcd_cert,         o->etcd_key,
            o->prefix, o->etcd_user, o->etcd_password_file};
        int rc = seal_fleet_from_etcd(&eo, f, err, sizeof err);
        if (rc != 0)
            fprintf(stderr, "keyless-seal: %s\n", err);
        return rc == 0 ? EXIT_OK : rc == 2 ? EXIT_USAGE : EXIT_FAIL;
    }
    if (kl_fleetfile_load(o->fleet, f, err, sizeof err) != KL_OK) {
        fprintf(stderr, "keyless-seal: %s\n", err);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

static int load_sealed(const char *path, kl_sealed **s)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = seal_read_all(path, &buf, &len);
    if (rc != EXIT_OK)
        return rc;
    char err[512];
    kl_status st = kl_sealed_parse(buf, len, s, err, sizeof err);
    free(buf);
    if (st != KL_OK) {
        fprintf(stderr, "keyless-seal: %s: not a valid sealed key file: %s\n",
                path, err);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* ---- recipients --------------------------------------------------------- */

typedef struct rcpts {
    kl_sealed_to v[KL_SEALED_MAX_RECIPIENTS];
    size_t n;
    char names[16][KL_SEALED_MAX_NAME + 1];
    uint8_t pks[16][KL_HPKE_MAX_ENC];
} rcpts;

static bool has_key(const rcpts *r, uint16_t kem, const uint8_t *pk)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].kem == kem && !memcmp(r->v[i].pk, pk, kl_hpke_pk_len(kem)))
            return true;
    return false;
}

/* --escrow FILE: a public key file; its name is the file's, without
 * directory and extension. */
static int add_escrow_file(rcpts *r, size_t i, const char *path)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = seal_read_all(path, &buf, &len);
    if (rc != EXIT_OK)
        return rc;
    char *text = strndup((const char *)buf, len), err[256];
    free(buf);
    uint16_t kem = 0;
    size_t pl = 0;
    kl_status st =
        text ? kl_fleetfile_key(text, &kem, r->pks[i], &pl, err, sizeof err)
             : KL_E_NOMEM;
    free(text);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t nl = strcspn(base, ".");
    if (st != KL_OK || nl == 0 || nl > KL_SEALED_MAX_NAME) {
        fprintf(stderr, "keyless-seal: --escrow %s: %s\n", path,
                st != KL_OK ? err : "the file name makes no recipient name");
        return EXIT_USAGE;
    }
    memcpy(r->names[i], base, nl);
    r->names[i][nl] = 0;
    if (!has_key(r, kem, r->pks[i]))
        r->v[r->n++] =
            (kl_sealed_to){KL_SEALED_ESCROW, r->names[i], kem, r->pks[i], pl};
    return EXIT_OK;
}

/* The fleet's recipients for the policy, then --escrow keys and keep
 * (a previous file's escrow entries) that are not among them yet. */
static int recipients(const opts *o, const kl_fleetfile *f, const kl_policy *p,
                      const kl_sealed *keep, rcpts *r)
{
    kl_sealed_to *to = NULL;
    size_t n = 0, nodes = 0;
    kl_status st = kl_fleetfile_select(f, p, &to, &n, &nodes);
    if (st == KL_E_NOT_FOUND) {
        fprintf(stderr,
                "keyless-seal: the policy selects no server of %s that is "
                "not revoked: nobody could serve the key\n",
                o->etcd ? "the fleet directory" : o->fleet);
        return EXIT_FAIL;
    }
    if (st != KL_OK)
        return EXIT_FAIL;
    memcpy(r->v, to, n * sizeof *to);
    r->n = n;
    free(to);
    for (size_t i = 0; i < o->n_escrow; i++) {
        int rc = add_escrow_file(r, i, o->escrow[i]);
        if (rc != EXIT_OK)
            return rc;
    }
    for (size_t i = 0; keep && i < keep->n_rcpt; i++) {
        const kl_sealed_recipient *e = &keep->rcpt[i];
        if (e->kind == KL_SEALED_ESCROW && !has_key(r, e->kem, e->pk) &&
            r->n < KL_SEALED_MAX_RECIPIENTS)
            r->v[r->n++] = (kl_sealed_to){KL_SEALED_ESCROW, e->name, e->kem,
                                          e->pk, e->pk_len};
    }
    for (size_t i = 0; i < r->n; i++)
        fprintf(stderr, "keyless-seal: recipient %s %s\n",
                r->v[i].kind == KL_SEALED_NODE ? "node  " : "escrow",
                r->v[i].name);
    return EXIT_OK;
}

/* Seals key to r into the new file out_path, or, with pd, into a
 * temporary file not yet flushed nor renamed (seal --out-dir). */
static int seal_to(const char *out_path, const char *policy, EVP_PKEY *key,
                   const uint8_t *ski, const rcpts *r, pending *pd)
{
    uint8_t *out = NULL;
    size_t len = 0;
    char err[512];
    if (kl_sealed_seal(policy, key, ski, r->v, r->n, &out, &len, err,
                       sizeof err) != KL_OK) {
        fprintf(stderr, "keyless-seal: %s\n", err);
        return EXIT_USAGE;
    }
    int rc = pd ? seal_write_tmp(out_path, out, len, 0644, false, pd)
                : seal_write_new(out_path, out, len, 0644);
    free(out);
    if (rc == EXIT_OK && !pd)
        fprintf(stderr, "keyless-seal: wrote %s (%zu bytes, %zu recipients)\n",
                out_path, len, r->n);
    return rc;
}

/* ---- commands ------------------------------------------------------------ */

static int cmd_keygen(const opts *o)
{
    uint16_t kem = KL_HPKE_KEM_X25519;
    if (o->kem && !strcmp(o->kem, "p256"))
        kem = KL_HPKE_KEM_P256;
    else if (o->kem && strcmp(o->kem, "x25519") != 0) {
        fprintf(stderr, "keyless-seal: --kem %s: x25519 or p256\n", o->kem);
        return EXIT_USAGE;
    }
    EVP_PKEY *k = NULL;
    if (kl_hpke_generate(kem, &k) != KL_OK)
        return EXIT_FAIL;
    BIO *priv = BIO_new(BIO_s_secmem());
    char *p = NULL;
    long n = 0;
    int rc = EXIT_FAIL;
    if (priv &&
        PEM_write_bio_PKCS8PrivateKey(priv, k, NULL, NULL, 0, NULL, NULL) ==
            1 &&
        (n = BIO_get_mem_data(priv, &p)) > 0)
        rc = seal_write_new(o->out, p, (size_t)n, 0600);
    BIO_free(priv); /* a secure-heap BIO: cleared on free */
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t pl = 0;
    char b64[128];
    if (rc == EXIT_OK && kl_hpke_public(kem, k, pk, sizeof pk, &pl) == KL_OK &&
        PEM_write_PUBKEY(stdout, k) == 1) {
        EVP_EncodeBlock((unsigned char *)b64, pk, (int)pl);
        fprintf(stderr,
                "keyless-seal: wrote %s (%s, mode 0600); its public half "
                "is above, or as raw base64: %s\n",
                o->out, kem == KL_HPKE_KEM_P256 ? "P-256" : "X25519", b64);
    }
    EVP_PKEY_free(k);
    return rc;
}

/* seal --out-dir: the keys are sealed into temporary files in batches;
 * one syncfs(2) flushes a batch, whose files are then renamed into place
 * (an fsync per file cost ~5 ms, 20 times the sealing itself). */
#define BATCH 1024

typedef struct many {
    const opts *o;
    const rcpts *r;
    pending *batch;
    size_t n_batch, done;
    int rc;
} many;

/* Flushes and renames the batch; after a failure only removes it. */
static void flush_batch(many *m)
{
    if (m->n_batch && m->rc == EXIT_OK) {
        int fd = open(m->o->out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || syncfs(fd) != 0) {
            fprintf(stderr, "keyless-seal: %s: %s\n", m->o->out_dir,
                    strerror(errno));
            m->rc = EXIT_FAIL;
        }
        if (fd >= 0)
            close(fd);
    }
    for (size_t i = 0; i < m->n_batch; i++) {
        if (m->rc != EXIT_OK)
            unlink(m->batch[i].tmp);
        else if ((m->rc = seal_commit(&m->batch[i])) == EXIT_OK)
            m->done++;
    }
    m->n_batch = 0;
}

static void seal_one(void *arg, const kl_key *k)
{
    many *m = arg;
    if (m->rc != EXIT_OK)
        return;
    const char *src = kl_key_path(k);
    const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
    size_t bl = strlen(base);
    if (bl > 4 && !strcmp(base + bl - 4, ".key"))
        bl -= 4;
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/%.*s.sealed", m->o->out_dir,
                     (int)bl, base);
    if (n < 0 || (size_t)n >= sizeof path) {
        fprintf(stderr, "keyless-seal: %s/%s.sealed: %s\n", m->o->out_dir, base,
                strerror(ENAMETOOLONG));
        m->rc = EXIT_FAIL;
        return;
    }
    m->rc = seal_to(path, m->o->policy, kl_key_pkey(k), kl_key_ski(k), m->r,
                    &m->batch[m->n_batch]);
    if (m->rc == EXIT_OK && ++m->n_batch == BATCH)
        flush_batch(m);
}

/* Problems only: a directory's *.sealed files are held elsewhere (info)
 * for a store without a sealing key, which is no news here. */
static void report_problems(void *arg, int level, const char *path,
                            const char *msg)
{
    if (level >= KL_LOG_WARN)
        report(arg, level, path, msg);
}

/* Every key of the files and directories given, read as keylessd reads
 * them (keys/load.c), sealed one after the other into --out-dir; the
 * rate is the sealing's alone (reading the keys is keylessd's load). */
static int seal_many(const opts *o, const rcpts *r)
{
    if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "keyless-seal: %s: %s\n", o->out_dir, strerror(errno));
        return EXIT_FAIL;
    }
    kl_keystore_opts ko = {.report = report_problems};
    kl_keystore *ks = kl_keystore_new(&ko);
    if (!ks)
        return EXIT_FAIL;
    int rc = EXIT_OK;
    for (size_t i = 0; rc == EXIT_OK && i < o->n_files; i++) {
        struct stat st;
        kl_status s = stat(o->files[i], &st) == 0 && S_ISDIR(st.st_mode)
                          ? kl_keystore_add_dir(ks, o->files[i])
                          : kl_keystore_add_file(ks, o->files[i]);
        if (s != KL_OK)
            rc = EXIT_USAGE; /* the store named the file and the reason */
    }
    if (rc == EXIT_OK && kl_keystore_count(ks) == 0) {
        fprintf(stderr, "keyless-seal: no *.key file in %s\n", o->files[0]);
        rc = EXIT_USAGE;
    }
    many m = {.o = o, .r = r, .rc = rc};
    if (rc == EXIT_OK && !(m.batch = calloc(BATCH, sizeof *m.batch)))
        rc = m.rc = EXIT_FAIL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (rc == EXIT_OK)
        kl_keystore_foreach(ks, seal_one, &m);
    flush_batch(&m);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(m.batch);
    if (m.done)
        seal_sync_dir(o->out_dir);
    double secs = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (rc == EXIT_OK)
        fprintf(stderr,
                "keyless-seal: sealed %zu of %zu keys to %zu recipients in "
                "%.3f s (%.1f keys/s) into %s\n",
                m.done, kl_keystore_count(ks), r->n, secs,
                secs > 0 ? (double)m.done / secs : 0.0, o->out_dir);
    kl_keystore_free(ks);
    return rc == EXIT_OK ? m.rc : rc;
}

static int cmd_seal(const opts *o)
{
    EVP_PKEY *key = NULL;
    kl_fleetfile *f = NULL;
    kl_policy *p = NULL;
    rcpts *r = calloc(1, sizeof *r);
    uint8_t ski[KL_SKI_LEN];
    char err[256];
    size_t pos = 0;
    int rc = r ? EXIT_OK : EXIT_FAIL;
    if (rc == EXIT_OK && kl_policy_parse(o->policy, strlen(o->policy), &p, &pos,
                                         err, sizeof err) != KL_OK) {
        fprintf(stderr, "keyless-seal: --policy: %s\n  %s\n  %*s^\n", err,
                o->policy, (int)pos, "");
        rc = EXIT_USAGE;
    }
    if (rc == EXIT_OK)
        rc = load_fleet(o, &f);
    if (rc == EXIT_OK && !o->out_dir)
        rc = read_private(o->file, &key, ski);
    if (rc == EXIT_OK)
        rc = recipients(o, f, p, NULL, r);
    if (rc == EXIT_OK && o->out_dir)
        rc = seal_many(o, r);
    else if (rc == EXIT_OK)
        rc = seal_to(o->out, o->policy, key, ski, r, NULL);
    EVP_PKEY_free(key);
    kl_policy_free(p);
    kl_fleetfile_free(f);
    free(r);
    return rc;
}

/* Opens s with the node key at path; *key and its checked SKI. */
static int open_with(const char *path, const char *file, const kl_sealed *s,
                     EVP_PKEY **key)
{
    EVP_PKEY *node = NULL;
    int rc = read_node_key(path, &node);
    if (rc != EXIT_OK)
        return rc;
    size_t idx = 0;
    char err[512];
    uint8_t ski[KL_SKI_LEN];
    if (kl_sealed_find(s, node, &idx) != KL_OK) {
        /* a token's key is P-256: say so when the file has none */
        uint8_t pk[KL_HPKE_MAX_ENC];
        size_t n = 0, same_kem = 0;
        bool p256 =
            kl_hpke_public(KL_HPKE_KEM_P256, node, pk, sizeof pk, &n) == KL_OK;
        ERR_clear_error();
        for (size_t i = 0; i < s->n_rcpt; i++)
            same_kem += s->rcpt[i].kem ==
                        (p256 ? KL_HPKE_KEM_P256 : KL_HPKE_KEM_X25519);
        bool token = !strncmp(path, "pkcs11:", 7);
        fprintf(stderr, "keyless-seal: %s: not sealed to the key %s%s%s\n",
                file, token ? "on the token of --key" : "in ",
                token ? "" : path,
                same_kem ? ""
                : p256   ? " (the key is P-256; every recipient of the "
                           "file is X25519)"
                         : " (the key is X25519; every recipient of the "
                           "file is P-256)");
        rc = EXIT_FAIL;
    } else if (kl_sealed_open(s, idx, node, key, err, sizeof err) != KL_OK) {
        fprintf(stderr, "keyless-seal: %s: %s\n", file, err);
        rc = EXIT_FAIL;
    } else if (kl_ski_from_pkey(*key, ski) != KL_OK ||
               memcmp(ski, s->ski, KL_SKI_LEN) != 0) {
        fprintf(stderr,
                "keyless-seal: %s: the key inside is not the SKI "
                "the file names\n",
                file);
        EVP_PKEY_free(*key);
        *key = NULL;
        rc = EXIT_FAIL;
    }
    EVP_PKEY_free(node);
    return rc;
}

static int cmd_rewrap(const opts *o)
{
    kl_sealed *s = NULL;
    kl_fleetfile *f = NULL;
    EVP_PKEY *key = NULL;
    rcpts *r = calloc(1, sizeof *r);
    int rc = r ? load_sealed(o->file, &s) : EXIT_FAIL;
    if (rc == EXIT_OK)
        rc = load_fleet(o, &f);
    if (rc == EXIT_OK)
        rc = open_with(o->key, o->file, s, &key);
    if (rc == EXIT_OK)
        rc = recipients(o, f, s->policy, s, r);
    if (rc == EXIT_OK)
        rc = seal_to(o->out, s->policy_text, key, s->ski, r, NULL);
    EVP_PKEY_free(key);
    kl_fleetfile_free(f);
    kl_sealed_free(s);
    free(r);
    return rc;
}

static int cmd_open(const opts *o)
{
    kl_sealed *s = NULL;
    EVP_PKEY *key = NULL;
    int rc = load_sealed(o->file, &s);
    if (rc == EXIT_OK)
        rc = open_with(o->key, o->file, s, &key);
    BIO *b = rc == EXIT_OK ? BIO_new(BIO_s_secmem()) : NULL;
    char *p = NULL;
    long n = 0;
    if (rc == EXIT_OK && (!b ||
                          PEM_write_bio_PKCS8PrivateKey(b, key, NULL, NULL, 0,
                                                        NULL, NULL) != 1 ||
                          (n = BIO_get_mem_data(b, &p)) <= 0))
        rc = EXIT_FAIL;
    if (rc == EXIT_OK)
        rc = seal_write_new(o->out, p, (size_t)n, 0600);
    BIO_free(b);
    EVP_PKEY_free(key);
    kl_sealed_free(s);
    return rc;
}

static int cmd_inspect(const opts *o)
{
    kl_sealed *s = NULL;
    int rc = load_sealed(o->file, &s);
    if (rc == EXIT_OK)
        kl_sealed_print(s, o->json, stdout);
    kl_sealed_free(s);
    return rc;
}

/* The public half of a sealing key as the fleet file takes it: PEM on
 * stdout, the raw base64 form and the KEM on stderr (as keygen prints). */
static void print_public(EVP_PKEY *k, const char *what)
{
    uint16_t kem = KL_HPKE_KEM_X25519;
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t pl = 0;
    char b64[128];
    if (kl_hpke_public(kem, k, pk, sizeof pk, &pl) != KL_OK) {
        kem = KL_HPKE_KEM_P256;
        if (kl_hpke_public(kem, k, pk, sizeof pk, &pl) != KL_OK)
            return;
    }
    ERR_clear_error();
    if (PEM_write_PUBKEY(stdout, k) != 1)
        return;
    EVP_EncodeBlock((unsigned char *)b64, pk, (int)pl);
    fprintf(stderr,
            "keyless-seal: %s (%s); its public half is above, or as raw "
            "base64: %s\n",
            what, kem == KL_HPKE_KEM_P256 ? "P-256" : "X25519", b64);
}

static int cmd_pubkey(const opts *o)
{
    EVP_PKEY *k = NULL;
    int rc = read_node_key(o->key, &k);
    if (rc == EXIT_OK) {
        char what[64];
        snprintf(what, sizeof what, "the sealing key of --key is %s",
                 !strncmp(o->key, "pkcs11:", 7) ? "on a token"
                 : store_uri(o->key)            ? "a provider's"
                                                : "a file");
        print_public(k, what);
    }
    EVP_PKEY_free(k);
    return rc;
}

static int parse_args(int argc, char **argv, opts *o)
{
    static const struct option longs[] = {
        {"out", required_argument, NULL, 'o'},
        {"kem", required_argument, NULL, 'k'},
        {"policy", required_argument, NULL, 'p'},
        {"fleet", required_argument, NULL, 'f'},
        {"key", required_argument, NULL, 'K'},
        {"escrow", required_argument, NULL, 'e'},
        {"out-dir", required_argument, NULL, 'D'},
        {"json", no_argument, NULL, 'j'},
        {"etcd", required_argument, NULL, 'E'},
        {"etcd-ca", required_argument, NULL, 'A'},
        {"etcd-cert", required_argument, NULL, 'C'},
        {"etcd-key", required_argument, NULL, 'Y'},
        {"etcd-user", required_argument, NULL, 'U'},
        {"etcd-password-file", required_argument, NULL, 'W'},
        {"prefix", required_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : -1;
    }
    o->cmd = argv[1];
    optind = 2;
    int c;
    while ((c = getopt_long_only(argc, argv, "o:h", longs, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'D': o->out_dir = optarg; break;
        case 'k': o->kem = optarg; break;
        case 'p': o->policy = optarg; break;
        case 'f': o->fleet = optarg; break;
        case 'K': o->key = optarg; break;
        case 'j': o->json = true; break;
        case 'E': o->etcd = optarg; break;
        case 'A': o->etcd_ca = optarg; break;
        case 'C': o->etcd_cert = optarg; break;
        case 'Y': o->etcd_key = optarg; break;
        case 'U': o->etcd_user = optarg; break;
        case 'W': o->etcd_password_file = optarg; break;
        case 'P': o->prefix = optarg; break;
        case 'e':
            if (o->n_escrow == 16) {
                fputs("keyless-seal: at most 16 --escrow\n", stderr);
                return EXIT_USAGE;
            }
            o->escrow[o->n_escrow++] = optarg;
            break;
        case 'h': usage(stdout); return -1;
        default: return EXIT_USAGE;
        }
    }
    o->files = argv + optind;
    o->n_files = (size_t)(argc - optind);
    if (o->n_files)
        o->file = o->files[0];
    if (o->out_dir && (strcmp(o->cmd, "seal") != 0 || o->out)) {
        fputs("keyless-seal: --out-dir is seal's, instead of -o\n", stderr);
        return EXIT_USAGE;
    }
    if (o->n_files > 1 && !o->out_dir) {
        fprintf(
            stderr, "keyless-seal: unexpected argument '%s'%s\n", o->files[1],
            strcmp(o->cmd, "seal") == 0 ? " (several keys: --out-dir)" : "");
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* Which options each command needs: "o" out, "p" policy, "f" fleet, "K"
 * node key, "F" a file argument. */
static int check_needs(const opts *o, const char *needs)
{
    static const struct {
        char c;
        const char *what;
    } names[] = {{'o', "-o OUT"},
                 {'p', "--policy"},
                 {'f', "--fleet or --etcd"},
                 {'K', "--key"},
                 {'F', "a file argument"}};
    if (o->fleet && o->etcd) {
        fprintf(stderr, "keyless-seal %s: give --fleet or --etcd, not both\n",
                o->cmd);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = names[i].c == 'o'   ? (o->out ? o->out : o->out_dir)
                        : names[i].c == 'p' ? o->policy
                        : names[i].c == 'f' ? (o->fleet ? o->fleet : o->etcd)
                        : names[i].c == 'K' ? o->key
                                            : o->file;
        if (strchr(needs, names[i].c) && !v) {
            fprintf(stderr, "keyless-seal %s: needs %s (see --help)\n", o->cmd,
                    names[i].what);
            return EXIT_USAGE;
        }
    }
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc != EXIT_OK)
        return rc < 0 ? EXIT_OK : rc;
    static const struct {
        const char *name, *needs;
        int (*fn)(const opts *);
    } cmds[] = {{"keygen", "o", cmd_keygen},   {"seal", "opfF", cmd_seal},
                {"inspect", "F", cmd_inspect}, {"rewrap", "ofKF", cmd_rewrap},
                {"open", "oKF", cmd_open},     {"pubkey", "K", cmd_pubkey}};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (!strcmp(o.cmd, cmds[i].name)) {
            rc = check_needs(&o, cmds[i].needs);
            return rc != EXIT_OK ? rc : cmds[i].fn(&o);
        }
    fprintf(stderr, "keyless-seal: unknown command '%s' (see --help)\n", o.cmd);
    return EXIT_USAGE;
}
