/* SPDX-License-Identifier: Apache-2.0 */
/* Request encoding (the client side of P3), in the reference client's item
 * order, padded like responses (P5). */
#include "keyless/protocol.h"

#include <string.h>

#include "core/cursor.h"
#include "proto/internal.h"

#define MAX_ITEMS 14

typedef struct enc_item {
    uint8_t tag;
    const void *p;
    size_t n;
} enc_item;

typedef struct enc_list {
    enc_item items[MAX_ITEMS];
    size_t count;
    size_t body; /* bytes of all items so far */
} enc_list;

static void add(enc_list *l, uint8_t tag, const void *p, size_t n)
{
    l->items[l->count].tag = tag;
    l->items[l->count].p = p;
    l->items[l->count].n = n;
    l->count++;
    l->body += KL_ITEM_HEADER_LEN + n;
}

/* Strings are written when present and non-empty, like the reference
 * client, which skips empty fields. */
static void add_str(enc_list *l, uint8_t tag, const char *s)
{
    if (s && s[0])
        add(l, tag, s, strlen(s));
}

static kl_status add_ip(enc_list *l, uint8_t tag, const uint8_t *ip, size_t n)
{
    if (!ip)
        return KL_OK;
    /* Never emit what our own parser would reject (P3). */
    KL_ENSURE(n == 4 || n == 16, KL_E_BAD_VALUE);
    add(l, tag, ip, n);
    return KL_OK;
}

static kl_status collect(enc_list *l, const kl_request_spec *s)
{
    KL_ENSURE(s->payload_len == 0 || s->payload, KL_E_BAD_VALUE);
    KL_ENSURE(s->supplemental_len == 0 || s->supplemental, KL_E_BAD_VALUE);
    KL_ENSURE(s->span_context_len == 0 || s->span_context, KL_E_BAD_VALUE);

    add(l, KL_TAG_OPCODE, &s->opcode, 1);
    /* An empty payload is omitted: the reference's Ping(nil) sends only
     * opcode and padding (vector "ping-empty"). */
    if (s->payload_len)
        add(l, KL_TAG_PAYLOAD, s->payload, s->payload_len);
    if (s->supplemental_len)
        add(l, KL_TAG_SUPPLEMENTAL, s->supplemental, s->supplemental_len);
    if (s->ski)
        add(l, KL_TAG_SKI, s->ski, KL_SKI_LEN);
    if (s->digest)
        add(l, KL_TAG_DIGEST, s->digest, KL_DIGEST_LEN);
    KL_GUARD(add_ip(l, KL_TAG_CLIENT_IP, s->client_ip, s->client_ip_len));
    KL_GUARD(add_ip(l, KL_TAG_SERVER_IP, s->server_ip, s->server_ip_len));
    add_str(l, KL_TAG_SNI, s->sni);
    add_str(l, KL_TAG_CERT_ID, s->cert_id);
    add_str(l, KL_TAG_CUSTOM_FUNC, s->custom_func);
    if (s->span_context_len)
        add(l, KL_TAG_SPAN_CONTEXT, s->span_context, s->span_context_len);
    add_str(l, KL_TAG_REQ_CONTEXT, s->req_context);
    if (s->has_compliance)
        add(l, KL_TAG_COMPLIANCE, &s->compliance, 1);
    return KL_OK;
}

kl_status kl_request_encode(uint8_t *out, size_t cap,
                            const kl_request_spec *spec, size_t *out_len)
{
    enc_list l;
    kl_writer w;
    size_t total;

    memset(&l, 0, sizeof l);
    KL_GUARD(collect(&l, spec));
    /* P2: the 16-bit length bounds the body, padding excluded (padding is
     * only added to messages under 1024 bytes). Checking the total also
     * bounds every item's length. */
    KL_ENSURE(l.body <= KL_MAX_BODY, KL_E_TOO_LARGE);
    total = spec->no_padding ? KL_HEADER_LEN + l.body
                             : kl_padded_message_len(l.body);
    KL_ENSURE(out != NULL && cap >= total, KL_E_TOO_LARGE);

    kl_writer_init(&w, out, cap);
    KL_GUARD(kl_write_u8(&w, KL_VERSION_MAJOR));
    KL_GUARD(kl_write_u8(&w, KL_VERSION_MINOR));
    KL_GUARD(kl_write_u16(&w, (uint16_t)(total - KL_HEADER_LEN)));
    KL_GUARD(kl_write_u32(&w, spec->id));
    for (size_t i = 0; i < l.count; i++) {
        KL_GUARD(kl_write_u8(&w, l.items[i].tag));
        KL_GUARD(kl_write_u16(&w, (uint16_t)l.items[i].n));
        KL_GUARD(kl_write_bytes(&w, l.items[i].p, l.items[i].n));
    }
    KL_GUARD(kl_proto_write_padding(&w, total));
    KL_ENSURE(w.len == total, KL_E_INTERNAL);
    *out_len = w.len;
    return KL_OK;
}
