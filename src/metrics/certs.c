/* SPDX-License-Identifier: Apache-2.0 */
/* certificate_expiration_timestamp_seconds: one gauge per certificate, with
 * the reference's labels and their formats (decimal serial number, the
 * subject CN, the sorted comma-joined DNS SANs, "1"/"0" for CA, server and
 * client use), so its expiry alerts keep matching. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "metrics/internal.h"

struct mx_cert {
    char *source;
    char *labels; /* rendered, escaped, sorted by label name; the key */
    long long not_after;
};

static char *serial_dec(X509 *c)
{
    BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(c), NULL);
    char *s = bn ? BN_bn2dec(bn) : NULL;
    BN_free(bn);
    char *r = strdup(s ? s : "");
    OPENSSL_free(s);
    return r;
}

/* A name from a certificate (n bytes) as a label value, malloc'd: in full
 * length, a NUL or other control byte written \xNN, so that a CN like
 * "edge-1\0.attacker" is not shown as "edge-1" (docs/SECURITY.md; the
 * server refuses such peer certificates, a configured one can still hold
 * them). */
static char *name_text(const unsigned char *p, int n)
{
    char *r = malloc(n > 0 ? (size_t)n * 4 + 1 : 1);
    size_t pos = 0;
    for (int i = 0; r && i < n; i++) {
        if (p[i] < 0x20 || p[i] == 0x7f)
            pos += (size_t)sprintf(r + pos, "\\x%02x", p[i]);
        else
            r[pos++] = (char)p[i];
    }
    if (r)
        r[pos] = 0;
    return r;
}

/* The last CN of the subject, as Go's pkix.Name keeps it. */
static char *common_name(X509 *c)
{
    X509_NAME *n = X509_get_subject_name(c);
    int i = -1, last = -1;
    while ((i = X509_NAME_get_index_by_NID(n, NID_commonName, i)) >= 0)
        last = i;
    unsigned char *u = NULL;
    int len = last < 0
                  ? -1
                  : ASN1_STRING_to_UTF8(&u, X509_NAME_ENTRY_get_data(
                                                X509_NAME_get_entry(n, last)));
    if (len < 0)
        ERR_clear_error();
    char *r = name_text(u, len);
    OPENSSL_free(u);
    return r;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void dns_names(X509 *c, mx_buf *out)
{
    GENERAL_NAMES *gens = X509_get_ext_d2i(c, NID_subject_alt_name, NULL, NULL);
    int n = gens ? sk_GENERAL_NAME_num(gens) : 0;
    char **v = n > 0 ? calloc((size_t)n, sizeof *v) : NULL;
    int k = 0;
    for (int i = 0; v && i < n; i++) {
        GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        if (g->type == GEN_DNS &&
            (v[k] = name_text(ASN1_STRING_get0_data(g->d.dNSName),
                              ASN1_STRING_length(g->d.dNSName))) != NULL)
            k++;
    }
    if (v)
        qsort(v, (size_t)k, sizeof *v, cmp_str);
    for (int i = 0; i < k; i++) {
        if (i)
            mx_puts(out, ",");
        mx_put_label_value(out, v[i]);
    }
    for (int i = 0; i < k; i++)
        free(v[i]);
    free(v);
    GENERAL_NAMES_free(gens);
}

static bool is_ca(X509 *c)
{
    BASIC_CONSTRAINTS *bc =
        X509_get_ext_d2i(c, NID_basic_constraints, NULL, NULL);
    bool ca = bc && bc->ca;
    BASIC_CONSTRAINTS_free(bc);
    return ca;
}

/* Without an extendedKeyUsage extension neither is set (as the
 * reference); anyExtendedKeyUsage sets both. */
static bool has_eku(X509 *c, uint32_t bit)
{
    if (!(X509_get_extension_flags(c) & EXFLAG_XKUSAGE))
        return false;
    return (X509_get_extended_key_usage(c) & (bit | XKU_ANYEKU)) != 0;
}

/* Without identities (metrics_identities: false) the labels that name the
 * certificate's holder stay, empty, so queries and alerts written for them
 * still parse. */
static char *render_labels(const char *source, X509 *c, bool identities)
{
    mx_buf b = {0};
    char *serial = identities ? serial_dec(c) : NULL;
    char *cn = identities ? common_name(c) : NULL;
    mx_printf(&b, "ca=\"%d\",client=\"%d\",cn=\"", is_ca(c),
              has_eku(c, XKU_SSL_CLIENT));
    mx_put_label_value(&b, cn ? cn : "");
    mx_puts(&b, "\",hostnames=\"");
    if (identities)
        dns_names(c, &b);
    mx_puts(&b, "\",serial_no=\"");
    mx_put_label_value(&b, serial ? serial : "");
    mx_printf(&b, "\",server=\"%d\",source=\"", has_eku(c, XKU_SSL_SERVER));
    mx_put_label_value(&b, source);
    mx_puts(&b, "\"");
    free(serial);
    free(cn);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

void kl_metrics_cert_expiry_add(kl_metrics *m, const char *source, X509 *c)
{
    struct tm tm;
    if (!m || !c || !source || !ASN1_TIME_to_tm(X509_get0_notAfter(c), &tm))
        return;
    long long not_after = (long long)timegm(&tm);
    bool identities = atomic_load(&m->identities);
    char *labels = render_labels(source, c, identities);
    if (!labels)
        return;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->ncerts; i++)
        if (strcmp(m->certs[i].labels, labels) == 0) {
            /* with identities, the same certificate; without, several
             * may share the labels: the series shows the first to
             * expire */
            if (identities || not_after < m->certs[i].not_after)
                m->certs[i].not_after = not_after;
            pthread_mutex_unlock(&m->lock);
            free(labels);
            return;
        }
    mx_cert *grown = NULL;
    char *src = NULL;
    if (m->ncerts < KL_METRICS_MAX_CERTS &&
        (grown = realloc(m->certs, (m->ncerts + 1) * sizeof *grown)) &&
        (src = strdup(source))) {
        m->certs = grown;
        m->certs[m->ncerts++] = (mx_cert){src, labels, not_after};
        labels = NULL;
    } else {
        if (grown)
            m->certs = grown;
        atomic_fetch_add_explicit(&m->certs_dropped, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&m->lock);
    free(labels);
}

void kl_metrics_set_identities(kl_metrics *m, bool on)
{
    atomic_store(&m->identities, on);
}

kl_status kl_metrics_cert_expiry_add_file(kl_metrics *m, const char *path)
{
    return kl_metrics_cert_expiry_add_file_as(m, path, path);
}

kl_status kl_metrics_cert_expiry_add_file_as(kl_metrics *m, const char *path,
                                             const char *source)
{
    BIO *bio = BIO_new_file(path, "r");
    KL_ENSURE(bio, KL_E_IO);
    int n = 0;
    X509 *c;
    while ((c = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
        kl_metrics_cert_expiry_add(m, source, c);
        X509_free(c);
        n++;
    }
    /* The loop ends on "no start line" at the end of the file. */
    ERR_clear_error();
    BIO_free(bio);
    return n > 0 ? KL_OK : KL_E_BAD_VALUE;
}

void kl_metrics_cert_expiry_forget(kl_metrics *m, const char *source)
{
    pthread_mutex_lock(&m->lock);
    size_t k = 0;
    for (size_t i = 0; i < m->ncerts; i++) {
        if (strcmp(m->certs[i].source, source) == 0) {
            free(m->certs[i].source);
            free(m->certs[i].labels);
        } else {
            m->certs[k++] = m->certs[i];
        }
    }
    m->ncerts = k;
    pthread_mutex_unlock(&m->lock);
}

void mx_render_certs(kl_metrics *m, mx_buf *b)
{
    mx_family(b, "certificate_expiration_timestamp_seconds", "gauge",
              "Expiry time (Unix seconds) of each loaded or presented "
              "certificate.");
    for (size_t i = 0; i < m->ncerts; i++)
        mx_printf(b, "certificate_expiration_timestamp_seconds{%s} %lld\n",
                  m->certs[i].labels, m->certs[i].not_after);
}

void mx_certs_free(kl_metrics *m)
{
    for (size_t i = 0; i < m->ncerts; i++) {
        free(m->certs[i].source);
        free(m->certs[i].labels);
    }
    free(m->certs);
}
