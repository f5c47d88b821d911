/* SPDX-License-Identifier: Apache-2.0 */
/* The activation tests' fixture (test_activation.c, test_activation_renew.c):
 * a mock Origin CA - a libmicrohttpd endpoint on 127.0.0.1 that records what
 * keylessd sends and answers as told, signing the CSR with a CA made here or
 * failing in each way the real API can - and the helpers that run keylessd
 * against it and check what it wrote. */
#ifndef KL_TEST_ACTIVATION_MOCK_H
#define KL_TEST_ACTIVATION_MOCK_H

#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define HOST "keyless.example.test"
#define API_KEY "v1.0-0123456789abcdef-supersecretoriginkey"
#define ZONE "023e105f4ecef8ad9ca31a8372d0c353"
#define PATH "/client/v4/certificates"

typedef enum mock_mode {
    MOCK_SIGN,
    MOCK_403,
    MOCK_500,
    MOCK_GARBAGE,
    MOCK_FALSE,
    MOCK_NO_CERT,
    MOCK_OTHER_KEY,
    MOCK_SLOW,
} mock_mode;

/* ---- a test CA that the mock signs with ---- */

static EVP_PKEY *ca_key;
static X509 *ca_cert;
static char ca_file[1200];

static inline X509 *new_cert(X509_NAME *subject, EVP_PKEY *pub, long from_s,
                             long to_s, bool ca, const char *dns)
{
    static long serial = 1000;
    X509 *x = X509_new();
    assert_non_null(x);
    X509_set_version(x, X509_VERSION_3);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_set_subject_name(x, subject);
    X509_set_issuer_name(x, ca ? subject : X509_get_subject_name(ca_cert));
    X509_gmtime_adj(X509_getm_notBefore(x), from_s);
    X509_gmtime_adj(X509_getm_notAfter(x), to_s);
    X509_set_pubkey(x, pub);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, ca ? x : ca_cert, x, NULL, NULL, 0);
    char san[256];
    snprintf(san, sizeof san, "DNS:%s", dns ? dns : "x");
    const char *exts[][2] = {
        {"basicConstraints", ca ? "critical,CA:TRUE" : "CA:FALSE"},
        {"keyUsage", ca ? "critical,keyCertSign,cRLSign" : "digitalSignature"},
        {"extendedKeyUsage", ca ? NULL : "serverAuth"},
        {"subjectAltName", ca ? NULL : san},
    };
    for (size_t i = 0; i < 4; i++) {
        if (!exts[i][1])
            continue;
        X509_EXTENSION *e = X509V3_EXT_conf(NULL, &v3, exts[i][0], exts[i][1]);
        assert_non_null(e);
        X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
    }
    assert_true(X509_sign(x, ca ? pub : ca_key, EVP_sha256()) > 0);
    return x;
}

static inline char *cert_pem(X509 *x)
{
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(b, x);
    char *d;
    long n = BIO_get_mem_data(b, &d);
    char *s = strndup(d, (size_t)n);
    BIO_free(b);
    return s;
}

static inline void make_ca(const char *dir)
{
    ca_key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    assert_non_null(ca_key);
    X509_NAME *n = X509_NAME_new();
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                               (const unsigned char *)"Mock Origin CA", -1, -1,
                               0);
    ca_cert = new_cert(n, ca_key, -3600, 3650L * 86400, true, NULL);
    X509_NAME_free(n);
    snprintf(ca_file, sizeof ca_file, "%s/mock-ca.pem", dir);
    FILE *f = fopen(ca_file, "w");
    assert_non_null(f);
    PEM_write_X509(f, ca_cert);
    fclose(f);
}

/* A certificate for the CSR's key (or another key), CN and SAN HOST. */
static inline char *sign_csr(const char *csr_pem, bool other_key)
{
    BIO *b = BIO_new_mem_buf(csr_pem, -1);
    X509_REQ *req = PEM_read_bio_X509_REQ(b, NULL, NULL, NULL);
    BIO_free(b);
    if (!req)
        return NULL;
    EVP_PKEY *pub = X509_REQ_get_pubkey(req);
    EVP_PKEY *other =
        other_key ? EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384") : NULL;
    X509 *x = new_cert(X509_REQ_get_subject_name(req), other ? other : pub, -60,
                       365L * 86400, false, HOST);
    char *pem = cert_pem(x);
    X509_free(x);
    EVP_PKEY_free(other);
    EVP_PKEY_free(pub);
    X509_REQ_free(req);
    return pem;
}

/* ---- the mock API ---- */

typedef struct mock {
    struct MHD_Daemon *d;
    uint16_t port;
    pthread_mutex_t mu;
    mock_mode mode;
    int requests;
    char method[16], url[256], api_key[256], content_type[128];
    char *body; /* of the last request */
} mock;

static mock M = {.mu = PTHREAD_MUTEX_INITIALIZER};

typedef struct upload {
    char *data;
    size_t len;
} upload;

static inline enum MHD_Result answer(struct MHD_Connection *c, unsigned status,
                                     const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static inline void copy_header(struct MHD_Connection *c, const char *name,
                               char *dst, size_t cap)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    snprintf(dst, cap, "%s", v ? v : "");
}

static inline enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                                     const char *url, const char *method,
                                     const char *version, const char *data,
                                     size_t *size, void **con)
{
    (void)cls;
    (void)version;
    upload *u = *con;
    if (!u) {
        *con = calloc(1, sizeof(upload));
        return *con ? MHD_YES : MHD_NO;
    }
    if (*size) {
        u->data = realloc(u->data, u->len + *size + 1);
        memcpy(u->data + u->len, data, *size);
        u->len += *size;
        u->data[u->len] = '\0';
        *size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&M.mu);
    M.requests++;
    snprintf(M.method, sizeof M.method, "%s", method);
    snprintf(M.url, sizeof M.url, "%s", url);
    copy_header(c, "X-Auth-User-Service-Key", M.api_key, sizeof M.api_key);
    copy_header(c, "Content-Type", M.content_type, sizeof M.content_type);
    free(M.body);
    M.body = u->data ? strdup(u->data) : strdup("");
    mock_mode mode = M.mode;
    pthread_mutex_unlock(&M.mu);

    char *csr = NULL;
    json_t *req = u->data ? json_loads(u->data, 0, NULL) : NULL;
    if (json_is_string(json_object_get(req, "csr")))
        csr = strdup(json_string_value(json_object_get(req, "csr")));
    json_decref(req);
    free(u->data);
    free(u);
    *con = NULL;

    enum MHD_Result ret;
    switch (mode) {
    case MOCK_403:
        ret = answer(c, 403,
                     "{\"success\":false,\"errors\":[{\"code\":10000,"
                     "\"message\":\"Authentication error\"}],\"messages\":[],"
                     "\"result\":null}");
        break;
    case MOCK_500:
        ret = answer(c, 500, "<html>internal server error</html>");
        break;
    case MOCK_GARBAGE:
        ret = answer(c, 200, "<html>this is no JSON</html>");
        break;
    case MOCK_FALSE:
        ret = answer(c, 200,
                     "{\"success\":false,\"errors\":[{\"code\":1010,"
                     "\"message\":\"Invalid hostname: not in your zone\"}],"
                     "\"messages\":[],\"result\":null}");
        break;
    case MOCK_NO_CERT:
        ret = answer(c, 200,
                     "{\"success\":true,\"errors\":[],\"messages\":[],"
                     "\"result\":{\"id\":\"1\"}}");
        break;
    case MOCK_SLOW:
        sleep(3);
        ret = answer(c, 200, "{}");
        break;
    default: {
        char *pem = csr ? sign_csr(csr, mode == MOCK_OTHER_KEY) : NULL;
        if (!pem) {
            ret = answer(c, 400, "{\"success\":false,\"errors\":[]}");
            break;
        }
        json_t *o =
            json_pack("{s:b, s:[], s:[], s:{s:s, s:s, s:s, s:i}}", "success", 1,
                      "errors", "messages", "result", "id",
                      "328578533902268680212849205732770752308", "certificate",
                      pem, "expires_on", "2041-11-22 17:32:00 +0000 UTC",
                      "requested_validity", 5475);
        char *text = json_dumps(o, 0);
        ret = answer(c, 200, text);
        free(text);
        json_decref(o);
        free(pem);
    }
    }
    free(csr);
    return ret;
}

static inline void mock_start(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    M.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
                               MHD_USE_THREAD_PER_CONNECTION,
                           0, NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR,
                           (struct sockaddr *)&a, MHD_OPTION_END);
    assert_non_null(M.d);
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(M.d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(i);
    M.port = i->port;
}

static inline void mock_set(mock_mode mode)
{
    pthread_mutex_lock(&M.mu);
    M.mode = mode;
    pthread_mutex_unlock(&M.mu);
}

static inline int mock_requests(void)
{
    pthread_mutex_lock(&M.mu);
    int n = M.requests;
    pthread_mutex_unlock(&M.mu);
    return n;
}

/* ---- helpers ---- */

static char *top, bin[1024], endpoint[256];

static inline int setup(void **state)
{
    (void)state;
    top = tp_tempdir("activation");
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    (void)tp_dir();
    make_ca(top);
    mock_start();
    snprintf(endpoint, sizeof endpoint, "--init-endpoint=http://127.0.0.1:%u%s",
             (unsigned)M.port, PATH);
    return 0;
}

static inline int teardown(void **state)
{
    (void)state;
    MHD_stop_daemon(M.d);
    free(M.body);
    X509_free(ca_cert);
    EVP_PKEY_free(ca_key);
    tp_rmtree(top);
    return 0;
}

static inline void expect(const char *out, const char *want)
{
    if (!strstr(out, want))
        fail_msg("expected in the output:\n  %s\ngot:\n%s", want, out);
}

/* The identity files of one case, in their own directory. */
typedef struct files {
    char dir[1024], cert[1100], key[1100], csr[1100];
    char a_cert[1200], a_key[1200], a_csr[1200];
} files;

static inline void files_init(files *f, const char *tag)
{
    snprintf(f->dir, sizeof f->dir, "%s/%s", top, tag);
    assert_int_equal(mkdir(f->dir, 0700), 0);
    snprintf(f->cert, sizeof f->cert, "%s/server.pem", f->dir);
    snprintf(f->key, sizeof f->key, "%s/server-key.pem", f->dir);
    snprintf(f->csr, sizeof f->csr, "%s/server.csr", f->dir);
    snprintf(f->a_cert, sizeof f->a_cert, "--auth-cert=%s", f->cert);
    snprintf(f->a_key, sizeof f->a_key, "--auth-key=%s", f->key);
    snprintf(f->a_csr, sizeof f->a_csr, "--auth-csr=%s", f->csr);
}

/* Entries of the directory (not . and ..). */
static inline int count_entries(const char *dir, const char *containing)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            (!containing || strstr(e->d_name, containing)))
            n++;
    closedir(d);
    return n;
}

static inline unsigned mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

/* Runs keylessd with the activation flags and more; returns the status. */
static inline int run(const files *f, const char *const *more, char **out)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = f->a_cert;
    argv[n++] = f->a_key;
    argv[n++] = f->a_csr;
    argv[n++] = "--hostname=" HOST;
    argv[n++] = "--origin-ca-api-key=" API_KEY;
    argv[n++] = "--zone-id=" ZONE;
    argv[n++] = endpoint;
    argv[n++] = "--listen-address=127.0.0.1";
    argv[n++] = "--metrics-port=0";
    static char ca[1200];
    snprintf(ca, sizeof ca, "--cloudflare-ca-cert=%s", tp_path("ca.crt"));
    argv[n++] = ca;
    for (int i = 0; more && more[i]; i++)
        argv[n++] = more[i];
    argv[n] = NULL;
    int rc = td_run(argv, out, 60000);
    if (strstr(*out, API_KEY))
        fail_msg("the Origin CA key appears in the output:\n%s", *out);
    /* under ASan/UBSan an error exit would hide a report behind status 1 */
    if (strstr(*out, "Sanitizer") || strstr(*out, "runtime error"))
        fail_msg("sanitizer report:\n%s", *out);
    return rc;
}

/* Connects to d verifying its certificate against the mock CA and the
 * name HOST; a ping must come back. */
static inline void expect_serves_with_issued_cert(const td_daemon *d)
{
    kl_client_opts o = td_client_opts(d);
    o.ca_file = ca_file;
    o.server_name = HOST;
    kl_client *c = NULL;
    char err[512];
    if (kl_client_connect(&o, &c, err, sizeof err) != KL_OK) {
        td_dump_log(d);
        fail_msg("connect with the issued certificate: %s", err);
    }
    td_expect_ping(d, c);
    kl_client_close(c);
}

static inline EVP_PKEY *read_key(const char *path)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    EVP_PKEY *k = PEM_read_PrivateKey(fp, NULL, NULL, NULL);
    fclose(fp);
    assert_non_null(k);
    return k;
}

/* The CSR: signed with ECDSA-SHA384 by a P-384 key, which is key; CN and
 * the one SAN dNSName are HOST. */
static inline void check_csr(const char *pem, EVP_PKEY *key)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509_REQ *req = PEM_read_bio_X509_REQ(b, NULL, NULL, NULL);
    BIO_free(b);
    assert_non_null(req);
    EVP_PKEY *pub = X509_REQ_get_pubkey(req);
    assert_non_null(pub);
    assert_int_equal(X509_REQ_verify(req, pub), 1);
    assert_int_equal(X509_REQ_get_signature_nid(req), NID_ecdsa_with_SHA384);
    char group[64];
    size_t gl;
    assert_int_equal(EVP_PKEY_get_group_name(pub, group, sizeof group, &gl), 1);
    assert_string_equal(group, "secp384r1");
    assert_int_equal(EVP_PKEY_eq(pub, key), 1);
    char cn[256];
    assert_true(X509_NAME_get_text_by_NID(X509_REQ_get_subject_name(req),
                                          NID_commonName, cn, sizeof cn) > 0);
    assert_string_equal(cn, HOST);
    STACK_OF(X509_EXTENSION) *exts = X509_REQ_get_extensions(req);
    assert_non_null(exts);
    GENERAL_NAMES *gens = NULL;
    for (int i = 0; i < sk_X509_EXTENSION_num(exts); i++) {
        X509_EXTENSION *e = sk_X509_EXTENSION_value(exts, i);
        if (OBJ_obj2nid(X509_EXTENSION_get_object(e)) == NID_subject_alt_name)
            gens = X509V3_EXT_d2i(e);
    }
    assert_non_null(gens);
    assert_int_equal(sk_GENERAL_NAME_num(gens), 1);
    GENERAL_NAME *gn = sk_GENERAL_NAME_value(gens, 0);
    assert_int_equal(gn->type, GEN_DNS);
    assert_string_equal((const char *)ASN1_STRING_get0_data(gn->d.dNSName),
                        HOST);
    GENERAL_NAMES_free(gens);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    EVP_PKEY_free(pub);
    X509_REQ_free(req);
}

/* ---- tests ---- */

#endif
