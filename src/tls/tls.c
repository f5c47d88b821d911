/* SPDX-License-Identifier: Apache-2.0 */
/* The only file that calls SSL_*: context building for the
 * key server and its clients, and one translation of SSL_get_error. */
#include "tls/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct kl_tls_ctx {
    SSL_CTX *ssl_ctx;
    bool is_server;
    /* SHA-256 of what the context was built from (material_digest):
     * equal digests, equal behaviour towards every peer */
    unsigned char material[32];
    /* SHA-256 of what decides whether a peer is trusted: the trusted
     * certificates and CRLs and the verification time (trust_digest) */
    unsigned char trust[32];
};

struct kl_tls_conn {
    SSL *ssl;
    char err[256];
    char peer[128];    /* the peer's CN for logs (peer_text) */
    bool peer_seen;    /* peer is set from the peer's certificate */
    char refused[128]; /* why the peer's names were refused, or "" */
};

/* Protocol P1: the compatibility profile the reference server offers. */
static const char tls12_ciphers[] =
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384";

/* Appends OpenSSL's queued reasons to buf (and empties the queue, which is
 * per thread: stale entries would confuse the next SSL_get_error). */
static void drain_errors(char *buf, size_t len)
{
    unsigned long e;
    size_t n = strlen(buf);
    while ((e = ERR_get_error()) != 0) {
        char one[160];
        ERR_error_string_n(e, one, sizeof one);
        /* keep only the reason: after the last ':' of the long form */
        const char *reason = ERR_reason_error_string(e);
        if (n < len)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "; " : "",
                                  reason ? reason : one);
    }
    if (n >= len && len > 0)
        buf[len - 1] = 0;
}

static void seterr(char *err, size_t errlen, const char *fmt, const char *a,
                   const char *b)
{
    if (!err || !errlen)
        return;
    snprintf(err, errlen, fmt, a, b ? b : "");
    char reasons[256] = "";
    drain_errors(reasons, sizeof reasons);
    if (reasons[0]) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, " (%s)", reasons);
    }
}

/* Counts the certificates in a PEM file; -1 when it cannot be read. */
static int count_pem_certs(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0;
    X509 *x;
    while ((x = PEM_read_X509(f, NULL, NULL, NULL)) != NULL) {
        X509_free(x);
        n++;
    }
    fclose(f);
    ERR_clear_error(); /* the loop ends on a "no start line" error */
    return n;
}

static bool load_ca(SSL_CTX *ctx, const char *ca_file, bool is_server,
                    char *err, size_t errlen)
{
    int n = count_pem_certs(ca_file);
    if (n < 0) {
        seterr(err, errlen, "CA file %s: cannot open: %s", ca_file,
               strerror(errno));
        return false;
    }
    if (n == 0) {
        seterr(err, errlen,
               "CA file %s holds no PEM certificate (expected the CA that "
               "signs %s certificates)",
               ca_file, is_server ? "client" : "server");
        return false;
    }
    /* Only this file: the system store is never consulted (P1). */
    if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
        seterr(err, errlen, "CA file %s: cannot load%s", ca_file, NULL);
        return false;
    }
    if (is_server) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca_file);
        if (names)
            SSL_CTX_set_client_CA_list(ctx, names);
    }
    return true;
}

static bool load_identity(SSL_CTX *ctx, const kl_tls_opts *o, char *err,
                          size_t errlen)
{
    if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1) {
        seterr(err, errlen,
               "certificate %s: cannot load a PEM certificate chain%s",
               o->cert_file, NULL);
        return false;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1) {
        seterr(err, errlen, "private key %s: cannot load a PEM private key%s",
               o->key_file, NULL);
        return false;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        seterr(err, errlen,
               "certificate %s does not match private key %s: use the key "
               "the certificate was issued for",
               o->cert_file, o->key_file);
        return false;
    }
    return true;
}

/* The index of the first byte a certificate name must not hold - NUL,
 * another control character (below 0x20) or DEL - or -1
 * (docs/SECURITY.md, Network: before authentication). */
static int bad_byte(const unsigned char *p, int n)
{
    for (int i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == 0x7f)
            return i;
    return -1;
}

/* The first subject CN of x (the one the access lists match), as UTF-8
 * with any control byte written \xNN: a name for log lines, also of a
 * certificate refused for its name. "" when there is none. */
static void peer_text(X509 *x, char *out, size_t cap)
{
    out[0] = 0;
    X509_NAME *nm = X509_get_subject_name(x);
    int i = X509_NAME_get_index_by_NID(nm, NID_commonName, -1);
    unsigned char *u = NULL;
    int n = i < 0 ? -1
                  : ASN1_STRING_to_UTF8(&u, X509_NAME_ENTRY_get_data(
                                                X509_NAME_get_entry(nm, i)));
    size_t pos = 0;
    for (int k = 0; k < n; k++) {
        bool ctl = u[k] < 0x20 || u[k] == 0x7f;
        if (pos + (ctl ? 4 : 1) >= cap)
            break;
        if (ctl)
            pos += (size_t)snprintf(out + pos, cap - pos, "\\x%02x", u[k]);
        else
            out[pos++] = (char)u[k];
    }
    out[pos] = 0;
    OPENSSL_free(u);
    if (n < 0)
        ERR_clear_error();
}

/* Whether a peer certificate's names are unusable, and why (into why): a
 * subject attribute or a DNS, e-mail or URI subjectAltName holding a NUL
 * or another control character. Such a name would compare, log or show
 * in metrics as something it is not ("edge-1\0.attacker" as "edge-1"), so
 * the handshake is refused (docs/SECURITY.md). */
static bool names_problem(X509 *x, char *why, size_t cap)
{
    X509_NAME *nm = X509_get_subject_name(x);
    for (int i = 0; i < X509_NAME_entry_count(nm); i++) {
        X509_NAME_ENTRY *e = X509_NAME_get_entry(nm, i);
        int nid = OBJ_obj2nid(X509_NAME_ENTRY_get_object(e));
        const char *what = nid != NID_undef ? OBJ_nid2sn(nid) : "attribute";
        unsigned char *u = NULL;
        int n = ASN1_STRING_to_UTF8(&u, X509_NAME_ENTRY_get_data(e));
        if (n < 0) {
            ERR_clear_error();
            if (nid != NID_commonName)
                continue; /* not text: neither matched nor logged */
            snprintf(why, cap, "its subject CN is not valid text");
            return true;
        }
        int bad = bad_byte(u, n);
        if (bad >= 0)
            snprintf(why, cap,
                     "its subject %s holds a control character (0x%02x at "
                     "byte %d)",
                     what, u[bad], bad);
        OPENSSL_free(u);
        if (bad >= 0)
            return true;
    }
    GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    bool bad_san = false;
    for (int i = 0; !bad_san && gens && i < sk_GENERAL_NAME_num(gens); i++) {
        int type;
        const ASN1_STRING *s =
            GENERAL_NAME_get0_value(sk_GENERAL_NAME_value(gens, i), &type);
        if (type != GEN_DNS && type != GEN_EMAIL && type != GEN_URI)
            continue;
        const unsigned char *d = ASN1_STRING_get0_data(s);
        int bad = bad_byte(d, ASN1_STRING_length(s));
        if (bad >= 0) {
            snprintf(why, cap,
                     "its subjectAltName %s holds a control character (0x%02x "
                     "at byte %d)",
                     type == GEN_DNS     ? "DNS"
                     : type == GEN_EMAIL ? "email"
                                         : "URI",
                     d[bad], bad);
            bad_san = true;
        }
    }
    GENERAL_NAMES_free(gens);
    return bad_san;
}

/* The server's verify callback, run for each certificate of the peer's
 * chain. On the first call it keeps the leaf's name (a refused client
 * certificate is logged with its name, docs/OPERATIONS.md Logs, and once
 * the handshake failed the SSL no longer holds the peer's certificate) and
 * checks the leaf's names (names_problem, docs/SECURITY.md); a certificate
 * refused for its names fails verification whatever its chain. */
static int check_peer(int ok, X509_STORE_CTX *st)
{
    SSL *ssl =
        X509_STORE_CTX_get_ex_data(st, SSL_get_ex_data_X509_STORE_CTX_idx());
    kl_tls_conn *c = ssl ? SSL_get_app_data(ssl) : NULL;
    X509 *leaf = X509_STORE_CTX_get0_cert(st);
    if (!c || !leaf)
        return ok;
    if (!c->peer_seen) {
        c->peer_seen = true;
        peer_text(leaf, c->peer, sizeof c->peer);
        if (!names_problem(leaf, c->refused, sizeof c->refused))
            c->refused[0] = 0;
    }
    if (!c->refused[0])
        return ok;
    if (ok)
        X509_STORE_CTX_set_error(st, X509_V_ERR_APPLICATION_VERIFICATION);
    return 0;
}

static long session_cache_size(const kl_tls_opts *o)
{
    return o->session_cache > 0 ? o->session_cache : 20480;
}

/* Feeds one item (a certificate's DER, the options) into the digest,
 * length first so that no two sequences of items hash alike. */
static bool hash_item(EVP_MD_CTX *md, const void *p, size_t len)
{
    uint64_t n = len;
    return EVP_DigestUpdate(md, &n, sizeof n) == 1 &&
           EVP_DigestUpdate(md, p, len) == 1;
}

static bool hash_der(EVP_MD_CTX *md, const X509 *x)
{
    unsigned char *der = NULL;
    int n = i2d_X509(x, &der);
    bool ok = n > 0 && hash_item(md, der, (size_t)n);
    OPENSSL_free(der);
    return ok;
}

/* SHA-256 of one trusted object's DER, for sorting (the store's order is
 * OpenSSL's business). */
static bool object_digest(const X509_OBJECT *obj, unsigned char out[32])
{
    X509 *x = X509_OBJECT_get0_X509(obj);
    X509_CRL *crl = X509_OBJECT_get0_X509_CRL(obj);
    unsigned char *der = NULL;
    int n = x ? i2d_X509(x, &der) : crl ? i2d_X509_CRL(crl, &der) : 0;
    /* a one-byte prefix keeps a certificate and a CRL apart */
    unsigned char kind = x ? 'C' : 'R';
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = n > 0 && md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
              EVP_DigestUpdate(md, &kind, 1) == 1 &&
              EVP_DigestUpdate(md, der, (size_t)n) == 1 &&
              EVP_DigestFinal_ex(md, out, NULL) == 1;
    EVP_MD_CTX_free(md);
    OPENSSL_free(der);
    return ok;
}

static int cmp32(const void *a, const void *b)
{
    return memcmp(a, b, 32);
}

/* What decides whether a peer is trusted, as loaded: the verification
 * time option and every certificate and CRL of the context's store (sorted:
 * the store's order is OpenSSL's business). Two contexts with the same
 * digest accept the same peer chains (kl_tls_ctx_same_trust). Runs before
 * the context is shared: no other thread touches its store. */
static bool trust_digest(SSL_CTX *ctx, const kl_tls_opts *o,
                         unsigned char out[32])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1;
    long long vt = o->verify_time;
    ok = ok && hash_item(md, &vt, sizeof vt);
    STACK_OF(X509_OBJECT) *objs =
        X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
    int n = objs ? sk_X509_OBJECT_num(objs) : 0;
    unsigned char(*each)[32] = n > 0 ? calloc((size_t)n, 32) : NULL;
    ok = ok && (n == 0 || each);
    int kept = 0;
    for (int i = 0; ok && i < n; i++) {
        const X509_OBJECT *obj = sk_X509_OBJECT_value(objs, i);
        int type = X509_OBJECT_get_type(obj);
        if (type != X509_LU_X509 && type != X509_LU_CRL)
            continue;
        ok = object_digest(obj, each[kept++]);
    }
    if (ok && kept > 0)
        qsort(each, (size_t)kept, 32, cmp32);
    uint64_t count = (uint64_t)kept;
    ok = ok && hash_item(md, &count, sizeof count);
    for (int i = 0; ok && i < kept; i++)
        ok = EVP_DigestUpdate(md, each[i], 32) == 1;
    free(each);
    ok = ok && EVP_DigestFinal_ex(md, out, NULL) == 1;
    EVP_MD_CTX_free(md);
    return ok;
}

/* What decides how the context treats a peer, as loaded (not the files'
 * names or times, and read from the context itself, so that a file
 * rewritten between two reads cannot make a stale digest): the options,
 * the own certificate chain (the private key is the one that matches the
 * leaf, checked at load), and what it trusts (trust, from trust_digest).
 * A reload compares it with the serving context's to keep that context,
 * and so its session cache (kl_tls_ctx_same). */
static bool material_digest(SSL_CTX *ctx, const kl_tls_opts *o, bool is_server,
                            const unsigned char trust[32],
                            unsigned char out[32])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1;
    long long opts[] = {
        is_server,
        is_server ? o->disable_tls13 : o->tls12_only,
        o->verify_time,
        is_server ? session_cache_size(o) : 0,
    };
    ok = ok && hash_item(md, opts, sizeof opts);
    X509 *leaf = SSL_CTX_get0_certificate(ctx);
    ok = ok && (!leaf || hash_der(md, leaf));
    STACK_OF(X509) *chain = NULL;
    if (ok && leaf && SSL_CTX_get0_chain_certs(ctx, &chain) == 1 && chain)
        for (int i = 0; ok && i < sk_X509_num(chain); i++)
            ok = hash_der(md, sk_X509_value(chain, i));
    ok = ok && hash_item(md, trust, 32);
    ok = ok && EVP_DigestFinal_ex(md, out, NULL) == 1;
    EVP_MD_CTX_free(md);
    return ok;
}

static kl_tls_ctx *ctx_new(const kl_tls_opts *o, bool is_server, char *err,
                           size_t errlen)
{
    ERR_clear_error();
    SSL_CTX *ctx =
        SSL_CTX_new(is_server ? TLS_server_method() : TLS_client_method());
    if (!ctx) {
        seterr(err, errlen, "cannot create a TLS context%s%s", "", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    bool only12 = is_server ? o->disable_tls13 : o->tls12_only;
    SSL_CTX_set_max_proto_version(ctx, only12 ? TLS1_2_VERSION : 0);
    if (SSL_CTX_set_cipher_list(ctx, tls12_ciphers) != 1)
        goto fail_generic;
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF |
                                 SSL_OP_NO_COMPRESSION);
    /* Partial writes let the event loop keep the unsent tail in its own
     * buffer, which may move when it grows; released buffers keep idle
     * connections small. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);

    if (o->cert_file || o->key_file) {
        if (!o->cert_file || !o->key_file) {
            seterr(err, errlen, "a certificate needs its key: %s%s",
                   o->cert_file ? "key file missing" : "certificate missing",
                   NULL);
            goto fail;
        }
        if (!load_identity(ctx, o, err, errlen))
            goto fail;
    } else if (is_server) {
        seterr(err, errlen, "the server needs a certificate and key%s%s", "",
               NULL);
        goto fail;
    }

    if (o->ca_file) {
        if (!load_ca(ctx, o->ca_file, is_server, err, errlen))
            goto fail;
    } else if (is_server) {
        seterr(err, errlen,
               "the server needs a CA file to verify client certificates%s%s",
               "", NULL);
        goto fail;
    }

    if (is_server) {
        /* P1: a client certificate is required, chained to the configured
         * CA, with clientAuth usage (or no EKU). */
        SSL_CTX_set_verify(
            ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, check_peer);
        SSL_CTX_set_purpose(ctx, X509_PURPOSE_SSL_CLIENT);
        SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
        static const unsigned char sid_ctx[] = "keylessd";
        SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
        /* Resumption from the server's own session cache (stateful: the
         * TLS 1.3 ticket, or the TLS 1.2 session ID, only names the
         * cached session), not from self-contained tickets: a stateless
         * ticket carries the client's certificate, and decoding it was
         * about half of a resumed handshake's ~480 us (d2i_SSL_SESSION);
         * from the cache a resumed handshake costs ~220 us - what decides
         * a reconnect storm of thousands of edges (bench/RESULTS
         * "reconnect storm"). One context serves every shard, so one
         * cache does too. A reload keeps the serving context, cache and
         * all, when the new one was built from the same material
         * (kl_tls_ctx_same); a new context starts an empty cache, so no
         * session outlives a change of CA or identity. */
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
        /* One TLS 1.3 ticket per connection: a stateful ticket is used
         * once, so a resumption takes one cache entry and adds one. With
         * OpenSSL's default of two, each resumption added one more, and
         * in a storm the new tickets pushed the waiting clients' entries
         * out of a full cache (10,000 clients: 0% resumed instead of
         * 100%; test_tls_resume, bench "reconnect storm"). */
        SSL_CTX_set_num_tickets(ctx, 1);
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
        SSL_CTX_sess_set_cache_size(ctx, session_cache_size(o));
    } else if (o->ca_file) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        SSL_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER);
    }

    if (o->verify_time)
        X509_VERIFY_PARAM_set_time(SSL_CTX_get0_param(ctx),
                                   (time_t)o->verify_time);

    kl_tls_ctx *t = calloc(1, sizeof *t);
    if (!t)
        goto fail_generic;
    if (!trust_digest(ctx, o, t->trust) ||
        !material_digest(ctx, o, is_server, t->trust, t->material)) {
        free(t);
        goto fail_generic;
    }
    t->ssl_ctx = ctx;
    t->is_server = is_server;
    return t;

fail_generic:
    seterr(err, errlen, "cannot configure the TLS context%s%s", "", NULL);
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

kl_tls_ctx *kl_tls_server_ctx_new(const kl_tls_opts *o, char *err,
                                  size_t errlen)
{
    return ctx_new(o, true, err, errlen);
}

kl_tls_ctx *kl_tls_client_ctx_new(const kl_tls_opts *o, char *err,
                                  size_t errlen)
{
    return ctx_new(o, false, err, errlen);
}

bool kl_tls_ctx_same(const kl_tls_ctx *a, const kl_tls_ctx *b)
{
    return a && b && a->is_server == b->is_server &&
           memcmp(a->material, b->material, sizeof a->material) == 0;
}

bool kl_tls_ctx_same_trust(const kl_tls_ctx *a, const kl_tls_ctx *b)
{
    return a && b && a->is_server == b->is_server &&
           memcmp(a->trust, b->trust, sizeof a->trust) == 0;
}

void kl_tls_ctx_free(kl_tls_ctx *ctx)
{
    if (!ctx)
        return;
    SSL_CTX_free(ctx->ssl_ctx);
    free(ctx);
}

static bool is_ip_literal(const char *name)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, name, buf) == 1 ||
           inet_pton(AF_INET6, name, buf) == 1;
}

kl_tls_conn *kl_tls_conn_new(kl_tls_ctx *ctx, int fd, bool is_server,
                             const char *server_name)
{
    kl_tls_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ssl = SSL_new(ctx->ssl_ctx);
    if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
        SSL_free(c->ssl);
        free(c);
        ERR_clear_error();
        return NULL;
    }
    SSL_set_app_data(c->ssl, c); /* for check_peer */
    if (is_server) {
        SSL_set_accept_state(c->ssl);
    } else {
        SSL_set_connect_state(c->ssl);
        if (server_name && *server_name) {
            if (is_ip_literal(server_name)) {
                X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
                X509_VERIFY_PARAM_set1_ip_asc(vp, server_name);
            } else {
                SSL_set_tlsext_host_name(c->ssl, server_name);
                SSL_set1_host(c->ssl, server_name);
            }
        }
    }
    return c;
}

void kl_tls_conn_free(kl_tls_conn *c)
{
    if (!c)
        return;
    /* Edges often close without close_notify, and OpenSSL drops the cached
     * session of a connection freed without a shutdown: an established
     * connection counts as shut down, so its session stays resumable (a
     * fatal alert has already removed it). */
    if (SSL_is_server(c->ssl) && SSL_is_init_finished(c->ssl))
        SSL_set_shutdown(c->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(c->ssl);
    free(c);
}

/* The single translation of SSL_get_error. */
static kl_io translate(kl_tls_conn *c, int ret)
{
    int e = SSL_get_error(c->ssl, ret);
    switch (e) {
    case SSL_ERROR_WANT_READ: return KL_IO_WANT_READ;
    case SSL_ERROR_WANT_WRITE: return KL_IO_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN: ERR_clear_error(); return KL_IO_EOF;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0) {
            if (errno == 0 || errno == ECONNRESET || errno == EPIPE) {
                snprintf(c->err, sizeof c->err, "%s",
                         errno ? strerror(errno) : "connection closed");
                return errno == 0 ? KL_IO_EOF : KL_IO_ERROR;
            }
            snprintf(c->err, sizeof c->err, "%s", strerror(errno));
            return KL_IO_ERROR;
        }
        /* OpenSSL queued a reason */
        __attribute__((fallthrough));
    default: {
        c->err[0] = 0;
        long vr = SSL_get_verify_result(c->ssl);
        size_t n = 0;
        /* the chain's own failure first (e.g. an untrusted CA), then the
         * names' (check_peer) */
        if (vr != X509_V_OK && vr != X509_V_ERR_APPLICATION_VERIFICATION)
            n = (size_t)snprintf(c->err, sizeof c->err,
                                 "certificate verify failed: %s",
                                 X509_verify_cert_error_string(vr));
        if (c->refused[0] && n < sizeof c->err &&
            snprintf(c->err + n, sizeof c->err - n,
                     "%sclient certificate refused: %s; names must be plain "
                     "text (docs/SECURITY.md)",
                     n ? "; " : "", c->refused) >= (int)(sizeof c->err - n))
            c->err[sizeof c->err - 1] = 0; /* cut: still one line */
        drain_errors(c->err, sizeof c->err);
        if (!c->err[0])
            snprintf(c->err, sizeof c->err, "TLS error %d", e);
        return KL_IO_ERROR;
    }
    }
}

kl_io kl_tls_handshake(kl_tls_conn *c)
{
    errno = 0;
    int r = SSL_do_handshake(c->ssl);
    if (r == 1)
        return KL_IO_OK;
    return translate(c, r);
}

kl_io kl_tls_read(kl_tls_conn *c, void *buf, size_t cap, size_t *n)
{
    errno = 0;
    *n = 0;
    if (SSL_read_ex(c->ssl, buf, cap, n) == 1)
        return KL_IO_OK;
    return translate(c, 0);
}

kl_io kl_tls_write(kl_tls_conn *c, const void *buf, size_t len, size_t *n)
{
    errno = 0;
    *n = 0;
    if (len == 0)
        return KL_IO_OK;
    if (SSL_write_ex(c->ssl, buf, len, n) == 1)
        return KL_IO_OK;
    return translate(c, 0);
}

size_t kl_tls_pending(const kl_tls_conn *c)
{
    int p = SSL_pending(c->ssl);
    return p > 0 ? (size_t)p : 0;
}

void kl_tls_shutdown(kl_tls_conn *c)
{
    if (!c || !c->ssl)
        return;
    /* One attempt: sends close_notify if the socket takes it; never waits
     * for the peer's. */
    if (SSL_is_init_finished(c->ssl))
        (void)SSL_shutdown(c->ssl);
    ERR_clear_error();
}

bool kl_tls_handshake_started(const kl_tls_conn *c)
{
    BIO *rb = SSL_get_rbio(c->ssl);
    return rb && BIO_number_read(rb) > 0;
}

uint64_t kl_tls_bytes_read(const kl_tls_conn *c)
{
    BIO *rb = SSL_get_rbio(c->ssl);
    return rb ? BIO_number_read(rb) : 0;
}

const char *kl_tls_last_error(const kl_tls_conn *c)
{
    return c->err[0] ? c->err : "unknown TLS error";
}

const char *kl_tls_peer_name(const kl_tls_conn *c)
{
    kl_tls_conn *m = (kl_tls_conn *)c;
    if (m->peer_seen)
        return m->peer;
    /* a resumed session: no verification ran, its certificate was checked
     * when the session was made */
    X509 *x = SSL_get0_peer_certificate(c->ssl);
    if (!x)
        return "";
    peer_text(x, m->peer, sizeof m->peer);
    m->peer_seen = true;
    return m->peer;
}

size_t kl_tls_peer_cert_der(const kl_tls_conn *c, unsigned char **der)
{
    *der = NULL;
    X509 *x = SSL_get0_peer_certificate(c->ssl);
    if (!x)
        return 0;
    unsigned char *buf = NULL;
    int n = i2d_X509(x, &buf); /* allocates with OPENSSL_malloc */
    if (n <= 0)
        return 0;
    *der = malloc((size_t)n);
    if (*der)
        memcpy(*der, buf, (size_t)n);
    OPENSSL_free(buf);
    return *der ? (size_t)n : 0;
}

/* docs/SECURITY.md "Revocation and expiry": the peer's certificate as it
 * came in the handshake (a resumed session keeps it, and the intermediates
 * the client sent), verified again as the handshake under ctx verifies it
 * (ssl_client purpose, the context's verification parameters: purpose,
 * depth, time, CRL flags). The store is shared with every shard and with
 * handshakes in progress; OpenSSL locks its lookups. */
bool kl_tls_conn_reverify(const kl_tls_conn *c, const kl_tls_ctx *ctx,
                          char *why, size_t len)
{
    X509 *leaf = SSL_get0_peer_certificate(c->ssl);
    if (!leaf) {
        snprintf(why, len, "no client certificate");
        return false;
    }
    /* on a server, the chain the client sent without its own certificate */
    STACK_OF(X509) *sent = SSL_get_peer_cert_chain(c->ssl);
    X509_STORE_CTX *st = X509_STORE_CTX_new();
    bool ok = false;
    if (st &&
        X509_STORE_CTX_init(st, SSL_CTX_get_cert_store(ctx->ssl_ctx), leaf,
                            sent) == 1 &&
        X509_STORE_CTX_set_default(st, "ssl_client") == 1 &&
        X509_VERIFY_PARAM_set1(X509_STORE_CTX_get0_param(st),
                               SSL_CTX_get0_param(ctx->ssl_ctx)) == 1) {
        int r = X509_verify_cert(st);
        ok = r == 1;
        if (!ok)
            snprintf(why, len, "%s",
                     r < 0 ? "certificate verification could not run"
                           : X509_verify_cert_error_string(
                                 X509_STORE_CTX_get_error(st)));
    } else {
        snprintf(why, len, "out of memory verifying the client certificate");
    }
    X509_STORE_CTX_free(st);
    ERR_clear_error();
    return ok;
}

/* Seconds since 1970 of an ASN.1 time; false when it does not parse. */
static bool asn1_unix(const ASN1_TIME *t, int64_t *out)
{
    ASN1_TIME *epoch = ASN1_TIME_set(NULL, 0);
    int days = 0, secs = 0;
    bool ok = epoch && t && ASN1_TIME_diff(&days, &secs, epoch, t) == 1;
    ASN1_TIME_free(epoch);
    if (ok)
        *out = (int64_t)days * 86400 + secs;
    return ok;
}

bool kl_tls_peer_not_after(const kl_tls_conn *c, int64_t *not_after)
{
    /* verified as of a fixed time (verify_time): the handshake's notion
     * of expiry does not move with the clock, so neither does this one */
    if (X509_VERIFY_PARAM_get_flags(SSL_get0_param(c->ssl)) &
        X509_V_FLAG_USE_CHECK_TIME)
        return false;
    X509 *leaf = SSL_get0_peer_certificate(c->ssl);
    if (!leaf)
        return false;
    bool found = asn1_unix(X509_get0_notAfter(leaf), not_after);
    /* the chain the handshake verified (leaf to trust anchor); a resumed
     * session has none, and then the intermediates the client sent */
    STACK_OF(X509) *chain = SSL_get0_verified_chain(c->ssl);
    if (!chain)
        chain = SSL_get_peer_cert_chain(c->ssl);
    for (int i = 0; chain && i < sk_X509_num(chain); i++) {
        int64_t t;
        if (asn1_unix(X509_get0_notAfter(sk_X509_value(chain, i)), &t) &&
            (!found || t < *not_after)) {
            *not_after = t;
            found = true;
        }
    }
    ERR_clear_error();
    return found;
}

const char *kl_tls_version(const kl_tls_conn *c)
{
    return SSL_get_version(c->ssl);
}

const char *kl_tls_cipher(const kl_tls_conn *c)
{
    return SSL_get_cipher_name(c->ssl);
}
