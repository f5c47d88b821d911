/* SPDX-License-Identifier: Apache-2.0 */
/* Key operations inside OpenSSL async jobs (see async.h). */
#include "provider/async.h"

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <openssl/async.h>
#include <openssl/crypto.h>

/* The key of our descriptor in an ASYNC_WAIT_CTX: this object's address. */
static const char wait_key;

static long live_slots;

/* One per ASYNC_WAIT_CTX (per SSL). Shared by the job (which only runs
 * while the context exists), the completion callback (I/O thread) and the
 * context's cleanup callback; freed by whichever of the last two drops the
 * last reference. */
typedef struct klp_wait {
    pthread_mutex_t mu;
    int refs;  /* the context's, plus one while a request is in flight */
    int efd;   /* -1 once the cleanup callback closed it */
    bool busy; /* a request was submitted; its result not yet taken */
    bool done; /* its result is here */
    kl_target *t;
    uint64_t handle;
    kl_status st;
    uint8_t opcode, error;
    uint8_t *payload; /* malloc'd; may be a decrypted block: wiped */
    size_t payload_len;
} klp_wait;

long klp_async_live(void)
{
    return __atomic_load_n(&live_slots, __ATOMIC_ACQUIRE);
}

static void wait_release(klp_wait *w)
{
    pthread_mutex_lock(&w->mu);
    bool last = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (!last)
        return;
    if (w->payload)
        OPENSSL_cleanse(w->payload, w->payload_len);
    free(w->payload);
    pthread_mutex_destroy(&w->mu);
    free(w);
    __atomic_sub_fetch(&live_slots, 1, __ATOMIC_ACQ_REL);
}

/* Completion (the I/O thread, or whoever drives the target). */
static void on_done(void *arg, const kl_result *res)
{
    klp_wait *w = arg;
    kl_status st = res->status;
    uint8_t *copy = NULL;
    if (st == KL_OK && res->payload_len) {
        if ((copy = malloc(res->payload_len)))
            memcpy(copy, res->payload, res->payload_len);
        else
            st = KL_E_NOMEM;
    }
    pthread_mutex_lock(&w->mu);
    w->st = st;
    w->opcode = res->opcode;
    w->error = res->error;
    w->payload = copy;
    w->payload_len = copy ? res->payload_len : 0;
    w->done = true;
    /* Under the lock: the cleanup callback cannot close it meanwhile (a
     * write to a closed - or reused - descriptor number would go to
     * whatever the application opened next). */
    if (w->efd >= 0) {
        uint64_t one = 1;
        ssize_t n = write(w->efd, &one, sizeof(one));
        (void)n; /* an eventfd takes it */
    }
    pthread_mutex_unlock(&w->mu);
    wait_release(w);
}

/* ASYNC_WAIT_CTX cleanup: the application frees the context (SSL_free).
 * The only place our descriptor is closed. */
static void wait_cleanup(ASYNC_WAIT_CTX *ctx, const void *key, OSSL_ASYNC_FD fd,
                         void *data)
{
    (void)ctx;
    (void)key;
    klp_wait *w = data;
    pthread_mutex_lock(&w->mu);
    w->efd = -1;
    bool pending = w->busy && !w->done;
    kl_target *t = w->t;
    uint64_t handle = w->handle;
    pthread_mutex_unlock(&w->mu);
    close(fd);
    /* An abandoned job: nobody waits for the answer any more. If the
     * cancel comes too late the completion runs (or ran) and drops the
     * request's reference itself. */
    if (pending && kl_async_cancel(t, handle) == KL_OK)
        wait_release(w);
    wait_release(w);
}

/* The context's slot, created and registered on first use. */
static klp_wait *slot_of(ASYNC_WAIT_CTX *ctx)
{
    OSSL_ASYNC_FD fd;
    void *data = NULL;
    if (ASYNC_WAIT_CTX_get_fd(ctx, &wait_key, &fd, &data) && data)
        return data;
    klp_wait *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->efd < 0) {
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    w->refs = 1;
    if (!ASYNC_WAIT_CTX_set_wait_fd(ctx, &wait_key, w->efd, w, wait_cleanup)) {
        close(w->efd);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    __atomic_add_fetch(&live_slots, 1, __ATOMIC_ACQ_REL);
    return w;
}

/* Pauses the job until the answer is here. It pauses at least once, even
 * for an answer that came first: the application learns of a new wait
 * descriptor only from a pause (SSL_ERROR_WANT_ASYNC, then
 * SSL_get_changed_async_fds), and HAProxy later removes every descriptor
 * SSL_get_all_async_fds lists from its poller - one it was never given
 * would trip its checks. */
static void wait_answer(klp_wait *w)
{
    for (;;) {
        if (!ASYNC_pause_job()) {
            /* Cannot pause (not expected inside a job): wait here. */
            struct pollfd p = {.fd = w->efd, .events = POLLIN};
            (void)poll(&p, 1, 100);
        }
        /* Resumed: by our descriptor, or spuriously - look. */
        pthread_mutex_lock(&w->mu);
        bool done = w->done;
        if (done) {
            /* The completion wrote before setting done, under this lock:
             * one read resets the descriptor for the next operation. */
            uint64_t v;
            ssize_t n = read(w->efd, &v, sizeof(v));
            (void)n;
        }
        pthread_mutex_unlock(&w->mu);
        if (done)
            return;
    }
}

int klp_async_call(klp_io *io, kl_target *t, const kl_request_spec *spec,
                   int timeout_ms, kl_client_result *out, kl_status *st)
{
    ASYNC_JOB *job = ASYNC_get_current_job();
    if (!job || !io)
        return 0;
    ASYNC_WAIT_CTX *ctx = ASYNC_get_wait_ctx(job);
    klp_wait *w = ctx ? slot_of(ctx) : NULL;
    if (!w || !klp_io_ensure(io))
        return 0;
    pthread_mutex_lock(&w->mu);
    bool busy = w->busy;
    if (!busy) {
        w->busy = true;
        w->done = false;
        w->t = t;
        w->handle = 0;
        w->refs++; /* the request's */
    }
    pthread_mutex_unlock(&w->mu);
    if (busy) /* an earlier job's request on this context: not ours */
        return 0;

    uint64_t handle = 0;
    kl_status s = kl_async_submit(t, spec, timeout_ms, on_done, w, &handle);
    if (s != KL_OK) {
        pthread_mutex_lock(&w->mu);
        w->busy = false;
        pthread_mutex_unlock(&w->mu);
        wait_release(w);
        *st = s;
        return 1;
    }
    pthread_mutex_lock(&w->mu);
    w->handle = handle;
    pthread_mutex_unlock(&w->mu);

    wait_answer(w);

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&w->mu);
    *st = w->st;
    out->opcode = w->opcode;
    out->error = w->error;
    out->msg = w->payload; /* freed by kl_client_result_free */
    out->msg_len = w->payload_len;
    out->payload = w->payload;
    out->payload_len = w->payload_len;
    out->tracked = true;
    w->payload = NULL;
    w->payload_len = 0;
    w->busy = w->done = false;
    pthread_mutex_unlock(&w->mu);
    return 1;
}
