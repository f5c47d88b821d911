/* Where the serving core records its metrics (issue 11, docs/METRICS.md):
 * each shard writes only its own slot (src/metrics: relaxed loads and
 * stores, no lock, no locked read-modify-write), and crypto jobs carry
 * their timestamps back to the shard, which records them when the answer
 * is queued - so worker threads need no slot at all. With metrics off the
 * slot is NULL: every call below returns at once and no clock is read.
 *
 * Request times:
 *  - total: request read -> its answer queued on the connection;
 *  - exec: the operation itself, queue wait excluded: from the time the
 *    pool began its crypto (kl_job.started_ns) to its completion. For a
 *    forwarded request exec is the remote path (router hand-over to
 *    answer); for an answer given at once it equals total. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509.h>

#include "core/time.h"
#include "server/internal.h"

static kl_metrics_conn mstate(kl_conn_state st)
{
    switch (st) {
    case KL_CONN_HANDSHAKE: return KL_MCONN_HANDSHAKE;
    case KL_CONN_OPEN: return KL_MCONN_OPEN;
    case KL_CONN_DRAINING: return KL_MCONN_DRAINING;
    case KL_CONN_CLOSED: break;
    }
    return KL_MCONN_NONE;
}

void kl_conn_set_state(kl_conn *c, kl_conn_state to)
{
    if (c->state != to)
        kl_metrics_conn_move(c->shard->mx, mstate(c->state), mstate(to));
    c->state = to;
}

uint64_t kl_mx_now(const kl_shard *s)
{
    return s->mx ? kl_now_ns() : 0;
}

void kl_mx_request_read(kl_shard *s, uint8_t opcode)
{
    if (!s->mx)
        return;
    kl_metrics_request(s->mx, opcode);
    kl_metrics_inflight_add(s->mx, 1);
}

void kl_mx_request_done(kl_shard *s, uint8_t opcode, uint8_t err,
                        uint64_t t0_ns, uint64_t exec_ns)
{
    if (!s->mx)
        return;
    kl_metrics_inflight_add(s->mx, -1);
    if (!t0_ns)
        return; /* read before metrics timed it: count only */
    uint64_t now = kl_now_ns(), total = now > t0_ns ? now - t0_ns : 0;
    if (exec_ns == UINT64_MAX)
        exec_ns = total;
    kl_metrics_exec_time(s->mx, opcode, err, exec_ns);
    kl_metrics_total_time(s->mx, opcode, err, total);
}

void kl_mx_job_done(kl_job *job)
{
    kl_srv_job *j = (kl_srv_job *)job;
    uint64_t now = kl_now_ns();
    /* a job that never ran (shed, abandoned): all of it was waiting */
    j->start_ns =
        job->started_ns && job->started_ns >= j->t0_ns && job->started_ns <= now
            ? job->started_ns
            : now;
    j->done_ns = now;
    kl_shard_job_done(job); /* the job is the shard's from here on */
}

void kl_mx_job_complete(kl_shard *s, const kl_srv_job *j)
{
    if (!s->mx || !j->t0_ns || !j->done_ns) {
        kl_mx_request_done(s, j->job.opcode, j->job.err, 0, 0);
        return;
    }
    kl_metrics_queue_wait(s->mx, (int)kl_crypto_cost_class(j->job.key),
                          j->start_ns - j->t0_ns);
    kl_mx_request_done(s, j->job.opcode, j->job.err, j->t0_ns,
                       j->done_ns - j->start_ns);
}

void kl_mx_handshake_failed(kl_shard *s, int reason, const char *tls_error)
{
    if (!s->mx)
        return;
    if (reason < 0) {
        /* OpenSSL's reasons for a refused or missing peer certificate all
         * name the certificate ("certificate verify failed", "peer did
         * not return a certificate", "certificate required"...). */
        reason = tls_error && strstr(tls_error, "certificate")
                     ? KL_HS_FAIL_CERT
                     : KL_HS_FAIL_PROTOCOL;
    }
    kl_metrics_handshake_failed(s->mx, (kl_metrics_hs_fail)reason);
}

void kl_mx_loop_turn(kl_shard *s)
{
    if (!s->mx)
        return;
    uint64_t busy = kl_loop_busy_ns(s->loop);
    if (busy > s->busy_reported) {
        kl_metrics_loop_busy(s->mx, busy - s->busy_reported);
        s->busy_reported = busy;
    }
}

void kl_mx_peer_cert(kl_conn *c)
{
    kl_server *srv = c->shard->srv;
    if (!c->shard->mx)
        return;
    /* certificate_expiration_timestamp_seconds for the client's
     * certificate, as the reference records it on each accepted
     * connection (the same certificate keeps one series) */
    unsigned char *der = NULL;
    size_t len = kl_tls_peer_cert_der(c->tls, &der);
    const unsigned char *p = der;
    X509 *x = len ? d2i_X509(NULL, &p, (long)len) : NULL;
    if (x) {
        char src[INET6_ADDRSTRLEN + 32];
        bool v6 = strchr(srv->listen_address, ':') != NULL;
        snprintf(src, sizeof src, "listener: %s%s%s:%u", v6 ? "[" : "",
                 srv->listen_address, v6 ? "]" : "", srv->port);
        kl_metrics_cert_expiry_add(srv->o.metrics, src, x);
        X509_free(x);
    } else {
        ERR_clear_error();
    }
    free(der);
}
