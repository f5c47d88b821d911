/* SPDX-License-Identifier: Apache-2.0 */
/* The I/O thread that drives a libkeyless target for asynchronous key
 * operations.
 *
 * An operation inside an OpenSSL async job only submits its request and
 * pauses; somebody must then run the target's I/O and fire the completion
 * that wakes the job. That is one small thread per target and process: it
 * polls kl_async_fd() and calls kl_async_process(). Why a thread rather
 * than driving from the job's resume path: a paused job is resumed only
 * when its wait descriptor fires, and only the completion can fire it - so
 * without an independent driver nobody would read the answer. The thread
 * makes every answer arrive on time whatever the application does, costs
 * nothing when idle (it sleeps in poll), and never runs application code.
 *
 * Fork (libkeyless's rules): nothing is started before the first
 * asynchronous operation, and it is started in the process that makes it.
 * A child does not have its parent's thread; klp_io_ensure notices the new
 * process id and starts one of its own (the target drops its inherited
 * state on its own). Blocking operations (outside async jobs) drive the
 * target themselves and need no thread. */
#ifndef KL_PROVIDER_IO_H
#define KL_PROVIDER_IO_H

#include "keyless/client.h"

typedef struct klp_io klp_io;

/* For target t (not owned). Opens and starts nothing. NULL: no memory. */
klp_io *klp_io_new(kl_target *t);
/* Makes sure a thread of this process drives the target. 1, or 0 when it
 * cannot start (no descriptors, no threads): the caller then waits for its
 * operation by blocking, as outside a job. */
int klp_io_ensure(klp_io *io);
/* Stops and joins the thread when this process started it; closes what
 * this process holds. Before kl_target_free. NULL is fine. */
void klp_io_free(klp_io *io);

#endif
