/* SPDX-License-Identifier: Apache-2.0 */
/* Activation (activation/activate.h) against a mock Origin CA: a
 * libmicrohttpd endpoint on 127.0.0.1 inside this test records what
 * keylessd sends and answers as told - signing the CSR with a CA made here,
 * or failing in each way the real API can. Real keylessd processes:
 * enrolment then serving with the issued certificate (the client trusts
 * only the mock's CA), --manual-activation, every error path (exit 1, the
 * right message, nothing written), and renewal (refused without --renew;
 * with it new files and the old ones kept). */
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

static X509 *new_cert(X509_NAME *subject, EVP_PKEY *pub, long from_s, long to_s,
                      bool ca, const char *dns)
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

static char *cert_pem(X509 *x)
{
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(b, x);
    char *d;
    long n = BIO_get_mem_data(b, &d);
    char *s = strndup(d, (size_t)n);
    BIO_free(b);
    return s;
}

static void make_ca(const char *dir)
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
static char *sign_csr(const char *csr_pem, bool other_key)
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

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status,
                              const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static void copy_header(struct MHD_Connection *c, const char *name, char *dst,
                        size_t cap)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    snprintf(dst, cap, "%s", v ? v : "");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
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

static void mock_start(void)
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

static void mock_set(mock_mode mode)
{
    pthread_mutex_lock(&M.mu);
    M.mode = mode;
    pthread_mutex_unlock(&M.mu);
}

static int mock_requests(void)
{
    pthread_mutex_lock(&M.mu);
    int n = M.requests;
    pthread_mutex_unlock(&M.mu);
    return n;
}

/* ---- helpers ---- */

static char *top, bin[1024], endpoint[256];

static int setup(void **state)
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

static int teardown(void **state)
{
    (void)state;
    MHD_stop_daemon(M.d);
    free(M.body);
    X509_free(ca_cert);
    EVP_PKEY_free(ca_key);
    tp_rmtree(top);
    return 0;
}

static void expect(const char *out, const char *want)
{
    if (!strstr(out, want))
        fail_msg("expected in the output:\n  %s\ngot:\n%s", want, out);
}

/* The identity files of one case, in their own directory. */
typedef struct files {
    char dir[1024], cert[1100], key[1100], csr[1100];
    char a_cert[1200], a_key[1200], a_csr[1200];
} files;

static void files_init(files *f, const char *tag)
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
static int count_entries(const char *dir, const char *containing)
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

static unsigned mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

/* Runs keylessd with the activation flags and more; returns the status. */
static int run(const files *f, const char *const *more, char **out)
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
static void expect_serves_with_issued_cert(const td_daemon *d)
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

static EVP_PKEY *read_key(const char *path)
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
static void check_csr(const char *pem, EVP_PKEY *key)
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

/* No auth_cert, no auth_key, credentials set: keylessd enrols, writes the
 * files with their modes, and serves with the certificate. */
static void test_enrol_and_serve(void **state)
{
    (void)state;
    files f;
    files_init(&f, "enrol");
    mock_set(MOCK_SIGN);
    int before = mock_requests();
    td_daemon d;
    const char *extra[] = {
        f.a_csr,           "--hostname=" HOST, "--origin-ca-api-key=" API_KEY,
        "--zone-id=" ZONE, endpoint,           NULL};
    td_opts o = {.name = "activation-enrol",
                 .cert = f.cert,
                 .key = f.key,
                 .key_dirs = tp_path("keys"),
                 .extra = extra};
    td_start(&d, &o);
    expect_serves_with_issued_cert(&d);
    char *log = td_read_log(&d);
    expect(log, "activation: asking http://127.0.0.1:");
    expect(log, "is plain http (accepted for a loopback address only)");
    expect(log, "activation: wrote auth_cert ");
    if (strstr(log, API_KEY))
        fail_msg("the Origin CA key appears in the log:\n%s", log);
    free(log);
    assert_int_equal(td_stop(&d, 0), 0);

    /* the request */
    assert_int_equal(mock_requests(), before + 1);
    assert_string_equal(M.method, "POST");
    assert_string_equal(M.url, PATH);
    assert_string_equal(M.api_key, API_KEY);
    assert_string_equal(M.content_type, "application/json");
    json_error_t je;
    json_t *body = json_loads(M.body, JSON_REJECT_DUPLICATES, &je);
    assert_non_null(body);
    assert_int_equal(json_object_size(body), 5);
    json_t *names = json_object_get(body, "hostnames");
    assert_int_equal(json_array_size(names), 1);
    assert_string_equal(json_string_value(json_array_get(names, 0)), HOST);
    assert_string_equal(
        json_string_value(json_object_get(body, "request_type")),
        "keyless-certificate");
    assert_int_equal(
        json_integer_value(json_object_get(body, "requested_validity")), 5475);
    assert_string_equal(json_string_value(json_object_get(body, "zone_id")),
                        ZONE);

    /* the files: key 0600, CSR and certificate 0644, all of one key */
    assert_int_equal(mode_of(f.key), 0600);
    assert_int_equal(mode_of(f.csr), 0644);
    assert_int_equal(mode_of(f.cert), 0644);
    EVP_PKEY *key = read_key(f.key);
    check_csr(json_string_value(json_object_get(body, "csr")), key);
    size_t len;
    char *csr_file = tu_read_file(f.csr, &len);
    assert_string_equal(csr_file,
                        json_string_value(json_object_get(body, "csr")));
    free(csr_file);
    json_decref(body);
    EVP_PKEY_free(key);
    assert_int_equal(count_entries(f.dir, NULL), 3); /* no temp files left */

    /* a second start finds a usable identity: no new request */
    td_start(&d, &o);
    expect_serves_with_issued_cert(&d);
    assert_int_equal(td_stop(&d, 0), 0);
    assert_int_equal(mock_requests(), before + 1);
}

static void test_manual_activation(void **state)
{
    (void)state;
    files f;
    files_init(&f, "manual");
    int before = mock_requests();
    char *out;
    const char *manual[] = {"--manual-activation", NULL};
    assert_int_equal(run(&f, manual, &out), 0);
    expect(out, "--manual-activation: generated a new ECDSA P-384 auth_key");
    expect(out, "next: have the CSR signed");
    free(out);
    assert_int_equal(mock_requests(), before); /* no API call */
    assert_int_equal(mode_of(f.key), 0600);
    assert_int_equal(mode_of(f.csr), 0644);
    assert_int_equal(access(f.cert, F_OK), -1);
    EVP_PKEY *key = read_key(f.key);
    size_t len;
    char *csr = tu_read_file(f.csr, &len);
    check_csr(csr, key);
    free(csr);

    /* again: the key is kept, a CSR for it written */
    char *key_before = tu_read_file(f.key, &len);
    assert_int_equal(run(&f, manual, &out), 0);
    expect(out, "kept the existing auth_key");
    free(out);
    char *key_after = tu_read_file(f.key, &len);
    assert_string_equal(key_before, key_after);
    csr = tu_read_file(f.csr, &len);
    check_csr(csr, key);
    free(csr);
    free(key_before);
    free(key_after);
    EVP_PKEY_free(key);

    /* without hostname */
    char a_key[1200];
    snprintf(a_key, sizeof a_key, "--auth-key=%s/none.pem", f.dir);
    assert_int_equal(
        td_run((const char *[]){bin, "--manual-activation", a_key, NULL}, &out,
               10000),
        1);
    expect(out, "--manual-activation needs hostname");
    free(out);
}

/* Each failure of the API: exit 1, a message naming what went wrong,
 * nothing written at all. */
static void test_error_paths(void **state)
{
    (void)state;
    static const struct {
        mock_mode mode;
        const char *want;
    } cases[] = {
        {MOCK_403, "the certificate API answered HTTP 403 (not authorised: "
                   "check origin_ca_api_key"},
        {MOCK_403, "code 10000: \"Authentication error\""},
        {MOCK_500, "the certificate API answered HTTP 500: body "
                   "\"<html>internal server error</html>\""},
        {MOCK_GARBAGE, "is not a JSON object"},
        {MOCK_FALSE, "the certificate API refused the request: code 1010: "
                     "\"Invalid hostname: not in your zone\""},
        {MOCK_NO_CERT, "answered success but without a certificate"},
        {MOCK_OTHER_KEY, "its public key is not the one of the key keylessd "
                         "generated"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        files f;
        char tag[32];
        snprintf(tag, sizeof tag, "err%zu", i);
        files_init(&f, tag);
        mock_set(cases[i].mode);
        int before = mock_requests();
        char *out;
        assert_int_equal(run(&f, NULL, &out), 1);
        expect(out, cases[i].want);
        expect(out, "not starting: see the activation messages above");
        free(out);
        assert_int_equal(mock_requests(), before + 1);
        assert_int_equal(count_entries(f.dir, NULL), 0);
    }

    files f;
    files_init(&f, "down");
    char *out;
    /* endpoint down: a port nobody listens on */
    char down[256];
    snprintf(down, sizeof down, "--init-endpoint=http://127.0.0.1:1%s", PATH);
    assert_int_equal(run(&f, (const char *[]){down, NULL}, &out), 1);
    expect(out, "cannot connect to the certificate API at http://127.0.0.1:1");
    free(out);
    /* too slow */
    mock_set(MOCK_SLOW);
    assert_int_equal(
        run(&f, (const char *[]){"--activation-timeout=1s", NULL}, &out), 1);
    expect(out, "within 1000 ms (activation_timeout)");
    free(out);
    /* plain http to another host is refused before anything is sent */
    assert_int_equal(
        run(&f, (const char *[]){"--init-endpoint=http://192.0.2.1/x", NULL},
            &out),
        1);
    expect(out, "plain http would send the Origin CA key unencrypted");
    free(out);
    assert_int_equal(count_entries(f.dir, NULL), 0);
}

/* An expired auth_cert with credentials: refused without --renew, with
 * the file, the date and both fixes; --check reports the same and what
 * --renew would do; with --renew new files, the old ones kept. */
static void test_renewal(void **state)
{
    (void)state;
    files f;
    files_init(&f, "renew");
    EVP_PKEY *old = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509_NAME *n = X509_NAME_new();
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                               (const unsigned char *)HOST, -1, -1, 0);
    X509 *x = new_cert(n, old, -10L * 86400, -86400, false, HOST);
    X509_NAME_free(n);
    FILE *fp = fopen(f.cert, "w");
    PEM_write_X509(fp, x);
    fclose(fp);
    fp = fopen(f.key, "w");
    fchmod(fileno(fp), 0600);
    PEM_write_PrivateKey(fp, old, NULL, NULL, 0, NULL, NULL);
    fclose(fp);
    X509_free(x);
    EVP_PKEY_free(old);
    size_t len;
    char *old_cert = tu_read_file(f.cert, &len);
    char *old_key = tu_read_file(f.key, &len);

    mock_set(MOCK_SIGN);
    int before = mock_requests();
    char *out, want[1400];
    assert_int_equal(run(&f, NULL, &out), 1);
    snprintf(want, sizeof want, "auth_cert %s: it expired on ", f.cert);
    expect(out, want);
    expect(out, "Either start once with --renew, or set auto_renew: true");
    expect(out, "or put a valid certificate for auth_key");
    free(out);
    assert_int_equal(mock_requests(), before);

    const char *check[] = {"--check", NULL};
    assert_int_equal(run(&f, check, &out), 1);
    expect(out, "Either start once with --renew");
    free(out);
    const char *check_renew[] = {"--check", "--renew", NULL};
    assert_int_equal(run(&f, check_renew, &out), 0);
    expect(out, "a start would renew auth_cert with a new key");
    free(out);
    assert_int_equal(mock_requests(), before);
    assert_int_equal(count_entries(f.dir, NULL), 2);

    td_daemon d;
    const char *extra[] = {
        f.a_csr,   "--hostname=" HOST, "--origin-ca-api-key=" API_KEY,
        "--renew", endpoint,           NULL};
    td_opts o = {.name = "activation-renew",
                 .cert = f.cert,
                 .key = f.key,
                 .extra = extra};
    td_start(&d, &o);
    expect_serves_with_issued_cert(&d);
    char *log = td_read_log(&d);
    expect(log, "activation: kept the previous auth_key as ");
    expect(log, "activation: kept the previous auth_cert as ");
    free(log);
    assert_int_equal(td_stop(&d, 0), 0);
    assert_int_equal(mock_requests(), before + 1);

    char *new_key = tu_read_file(f.key, &len);
    assert_string_not_equal(new_key, old_key);
    free(new_key);
    assert_int_equal(mode_of(f.key), 0600);
    /* server.pem, server-key.pem, server.csr and two backups */
    assert_int_equal(count_entries(f.dir, NULL), 5);
    assert_int_equal(count_entries(f.dir, ".bak"), 2);
    DIR *dd = opendir(f.dir);
    struct dirent *e;
    while ((e = readdir(dd))) {
        if (!strstr(e->d_name, ".bak"))
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", f.dir, e->d_name);
        char *text = tu_read_file(p, &len);
        if (strncmp(e->d_name, "server-key.pem.", 15) == 0) {
            assert_string_equal(text, old_key);
            assert_int_equal(mode_of(p), 0600);
        } else {
            assert_int_equal(strncmp(e->d_name, "server.pem.", 11), 0);
            assert_string_equal(text, old_cert);
        }
        free(text);
    }
    closedir(dd);
    free(old_cert);
    free(old_key);
}

/* A TLS endpoint whose certificate this machine does not trust (the test
 * PKI's server.crt): activation must refuse it, not send the key. */
typedef struct tls_srv {
    int fd;
    SSL_CTX *ctx;
} tls_srv;

static void *tls_serve_one(void *arg)
{
    tls_srv *t = arg;
    int c = accept(t->fd, NULL, NULL);
    if (c >= 0) {
        SSL *ssl = SSL_new(t->ctx);
        SSL_set_fd(ssl, c);
        (void)SSL_accept(ssl); /* the client gives up on verification */
        SSL_free(ssl);
        close(c);
    }
    return NULL;
}

static void test_tls_verified(void **state)
{
    (void)state;
    tls_srv t = {.ctx = SSL_CTX_new(TLS_server_method())};
    assert_non_null(t.ctx);
    assert_int_equal(
        SSL_CTX_use_certificate_chain_file(t.ctx, tp_path("server.crt")), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey_file(t.ctx, tp_path("server.key"),
                                                 SSL_FILETYPE_PEM),
                     1);
    t.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    assert_int_equal(bind(t.fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(t.fd, 4), 0);
    assert_int_equal(getsockname(t.fd, (struct sockaddr *)&a, &al), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, tls_serve_one, &t), 0);
    files f;
    files_init(&f, "tls");
    char url[256], *out;
    snprintf(url, sizeof url, "--init-endpoint=https://127.0.0.1:%u%s",
             (unsigned)ntohs(a.sin_port), PATH);
    assert_int_equal(run(&f, (const char *[]){url, NULL}, &out), 1);
    expect(out, "TLS with the certificate API at https://127.0.0.1:");
    expect(out, "verifies the API's certificate against this machine's CA "
                "store");
    free(out);
    pthread_join(th, NULL);
    close(t.fd);
    SSL_CTX_free(t.ctx);
    assert_int_equal(count_entries(f.dir, NULL), 0);
}

/* --config-only enrols as a start would, then exits 0 without serving. */
static void test_config_only_enrols(void **state)
{
    (void)state;
    files f;
    files_init(&f, "config-only");
    mock_set(MOCK_SIGN);
    int before = mock_requests();
    char *out;
    assert_int_equal(run(&f, (const char *[]){"--config-only", NULL}, &out), 0);
    expect(out, "activation: wrote auth_cert ");
    expect(out, "already configured: auth_cert ");
    free(out);
    assert_int_equal(mock_requests(), before + 1);
    assert_int_equal(mode_of(f.key), 0600);
    assert_int_equal(mode_of(f.cert), 0644);
    /* again: nothing to do */
    assert_int_equal(run(&f, (const char *[]){"--config-only", NULL}, &out), 0);
    free(out);
    assert_int_equal(mock_requests(), before + 1);
}

/* A certificate that expires within 30 days: kept (with a hint) unless
 * renewal is asked for; --config-only --renew renews it. */
static void test_renew_expiring(void **state)
{
    (void)state;
    files f;
    files_init(&f, "expiring");
    EVP_PKEY *old = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509_NAME *n = X509_NAME_new();
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                               (const unsigned char *)HOST, -1, -1, 0);
    X509 *x = new_cert(n, old, -86400, 10L * 86400, false, HOST);
    X509_NAME_free(n);
    FILE *fp = fopen(f.cert, "w");
    PEM_write_X509(fp, x);
    fclose(fp);
    fp = fopen(f.key, "w");
    fchmod(fileno(fp), 0600);
    PEM_write_PrivateKey(fp, old, NULL, NULL, 0, NULL, NULL);
    fclose(fp);
    X509_free(x);
    EVP_PKEY_free(old);
    mock_set(MOCK_SIGN);
    int before = mock_requests();
    char *out;
    assert_int_equal(run(&f, (const char *[]){"--config-only", NULL}, &out), 0);
    expect(out, "start with --renew (or set auto_renew: true) to have "
                "keylessd renew it");
    expect(out, "already configured");
    free(out);
    assert_int_equal(mock_requests(), before);
    assert_int_equal(
        run(&f, (const char *[]){"--config-only", "--auto-renew=true", NULL},
            &out),
        0);
    expect(out, "to renew auth_cert, with a new key");
    expect(out, "activation: kept the previous auth_cert as ");
    free(out);
    assert_int_equal(mock_requests(), before + 1);
    assert_int_equal(count_entries(f.dir, ".bak"), 2);
    assert_int_equal(count_entries(f.dir, NULL), 5);
}

/* --check with nothing on disk and credentials: reports the plan, writes
 * nothing, calls nothing, and passes (the CA file is still checked). */
static void test_check_does_not_enrol(void **state)
{
    (void)state;
    files f;
    files_init(&f, "check");
    int before = mock_requests();
    char *out, kd[1200];
    snprintf(kd, sizeof kd, "--private-key-dirs=%s", tp_path("keys"));
    assert_int_equal(run(&f, (const char *[]){"--check", kd, NULL}, &out), 0);
    expect(out, "a start would enrol with a new key from http://127.0.0.1:");
    expect(out, "(--check changes nothing)");
    expect(out, "configuration OK");
    free(out);
    assert_int_equal(mock_requests(), before);
    assert_int_equal(count_entries(f.dir, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enrol_and_serve),
        cmocka_unit_test(test_manual_activation),
        cmocka_unit_test(test_error_paths),
        cmocka_unit_test(test_renewal),
        cmocka_unit_test(test_check_does_not_enrol),
        cmocka_unit_test(test_renew_expiring),
        cmocka_unit_test(test_tls_verified),
        cmocka_unit_test(test_config_only_enrols),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
