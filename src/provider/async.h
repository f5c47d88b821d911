/* SPDX-License-Identifier: Apache-2.0 */
/* Key operations inside OpenSSL async jobs (docs/PROVIDER.md "Asynchronous
 * key operations").
 *
 * When libssl runs a handshake in an async job (SSL_MODE_ASYNC: HAProxy's
 * ssl-mode-async, `openssl s_server -async`), a key operation must not
 * block the application's event loop for a round trip to the key server.
 * So, inside a job, the request is handed to libkeyless (kl_async_submit)
 * and the job pauses (ASYNC_pause_job); the application polls the job's
 * wait descriptors (SSL_get_all_async_fds / SSL_get_changed_async_fds) and
 * resumes the handshake when ours becomes readable. The target's I/O is
 * driven by the I/O thread (io.h), whose completion callback stores the
 * answer and signals the descriptor.
 *
 * The wait descriptor is an eventfd registered with the job's
 * ASYNC_WAIT_CTX under the provider's own key: one per context (that is,
 * per SSL), created on the first operation and reused by every later one,
 * and closed only by the context's cleanup callback - never by us
 * otherwise, because the application has it in its poller (closing it
 * behind HAProxy's back crashes it). A resume before the answer is there
 * (spurious) pauses again. When the application frees the SSL while its
 * job is paused (a client that went away), the cleanup callback cancels
 * the request, closes the descriptor and frees what the operation held
 * once the completion, if already running, is done with it: no descriptor
 * or memory of ours outlives the SSL. */
#ifndef KL_PROVIDER_ASYNC_H
#define KL_PROVIDER_ASYNC_H

#include "keyless/client.h"
#include "provider/io.h"

/* Inside an async job: submits spec to target t (budget timeout_ms),
 * pauses until the outcome, and returns 1 with it in *st (KL_OK: *out holds
 * the answer, freed with kl_client_result_free). Outside a job, or when the
 * job machinery is unavailable (no descriptor, no I/O thread), returns 0
 * and does nothing: the caller blocks in kl_target_call instead. */
int klp_async_call(klp_io *io, kl_target *t, const kl_request_spec *spec,
                   int timeout_ms, kl_client_result *out, kl_status *st);

/* Wait slots alive in this process (tests: none may outlive its SSL). */
long klp_async_live(void);

#endif
