/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for libkeyless's response path (client issue): bytes
 * as read from a key server's socket go through the pipeline - chunked
 * reassembly, framing (protocol P2), response parsing (P5/P6) and id
 * matching against outstanding and cancelled requests (reqtable) - and
 * the invariants that the asynchronous client relies on are checked,
 * aborting on the first one that breaks.
 *
 * Input: one control byte, then the stream. The control byte chooses the
 * chunk size of the reads (1..8 bytes, or everything at once) and which
 * requests are cancelled before their answers arrive. Before feeding,
 * every complete frame's id in the stream is registered as a request, so
 * matched, cancelled and unknown answers are all reached. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/pipeline.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static void drain(kl_pipeline *p)
{
    for (;;) {
        size_t before = kl_reqtable_count(&p->reqs);
        kl_client_result r;
        kl_status st = kl_pipeline_next(p, &r, 1000);
        if (st == KL_E_AGAIN)
            return;
        if (st == KL_E_BAD_VALUE) {
            /* skipped; its id (if outstanding) is accounted for */
            CHECK(kl_reqtable_count(&p->reqs) <= before);
            continue;
        }
        CHECK(st == KL_OK);
        CHECK(r.msg && r.msg_len >= KL_HEADER_LEN);
        CHECK(r.opcode == KL_OP_RESPONSE || r.opcode == KL_OP_PONG ||
              r.opcode == KL_OP_ERROR);
        if (r.opcode != KL_OP_ERROR)
            CHECK(r.error == KL_ERR_NONE);
        if (r.payload) {
            CHECK(r.payload >= r.msg + KL_HEADER_LEN);
            CHECK(r.payload_len <= r.msg_len);
            CHECK((size_t)(r.payload - r.msg) <= r.msg_len - r.payload_len);
        } else {
            CHECK(r.payload_len == 0);
        }
        /* answers to cancelled requests met on the way were dropped in
         * the same call, so the count may fall further */
        if (r.tracked)
            CHECK(kl_reqtable_count(&p->reqs) < before);
        else
            CHECK(kl_reqtable_count(&p->reqs) <= before);
        kl_header h;
        CHECK(kl_header_decode(r.msg, r.msg_len, &h) == KL_OK);
        CHECK(h.id == r.id && (size_t)h.length + KL_HEADER_LEN == r.msg_len);
        kl_client_result_free(&r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t ctl = data[0];
    const uint8_t *in = data + 1;
    size_t len = size - 1;
    kl_pipeline p;
    kl_pipeline_init(&p);

    /* register the ids of the complete frames as outstanding requests;
     * every third one (shifted by ctl) is cancelled */
    size_t at = 0, k = 0;
    while (at < len) {
        kl_header h;
        size_t flen;
        if (kl_frame_peek(in + at, len - at, &h, &flen) != KL_OK)
            break;
        kl_request_spec s = {.id = h.id, .opcode = KL_OP_PING};
        CHECK(kl_pipeline_queue(&p, &s, false, NULL, 1) == KL_OK);
        if ((k + (ctl >> 4)) % 3 == 0)
            CHECK(kl_reqtable_cancel(&p.reqs, h.id) == KL_OK);
        at += flen;
        k++;
    }
    size_t out_len;
    (void)kl_pipeline_out(&p, &out_len);
    kl_pipeline_out_done(&p, out_len);

    size_t chunk = (ctl & 7) ? (size_t)(ctl & 7) : len;
    for (size_t off = 0; off < len;) {
        uint8_t *dst;
        size_t cap;
        if (kl_pipeline_in_space(&p, &dst, &cap) != KL_OK)
            break;
        size_t n = len - off < chunk ? len - off : chunk;
        if (n > cap)
            n = cap;
        memcpy(dst, in + off, n);
        kl_pipeline_in_commit(&p, n);
        off += n;
        drain(&p);
    }
    /* whatever is left is an incomplete frame */
    CHECK(!kl_pipeline_has_frame(&p));
    kl_pipeline_free(&p);
    return 0;
}
