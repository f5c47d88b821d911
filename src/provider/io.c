/* SPDX-License-Identifier: Apache-2.0 */
/* The per-target I/O thread of asynchronous key operations (see io.h). */
#include "provider/io.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "provider/prov.h"

/* A safety net only: the target's descriptor also fires for its own
 * deadlines and pings, so the thread never needs this timeout to make
 * progress - it bounds the damage if a wake-up were ever lost. */
#define IO_POLL_CAP_MS 1000

struct klp_io {
    struct klp_io *next; /* every klp_io of the process (all_ios) */
    kl_target *t;
    pthread_mutex_t mu; /* starting and stopping */
    pid_t pid;          /* process whose thread runs (atomic); 0: none */
    pthread_t thread;
    int stop_fd;   /* eventfd: the thread exits once it is readable */
    int target_fd; /* kl_async_fd in that process */
};

/* Every klp_io, so that the threads stop before OpenSSL's own exit
 * handler (OPENSSL_cleanup) tears down what they use. Lock order: all_mu,
 * then an io's mu. */
static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static klp_io *all_ios;
static bool exiting; /* under all_mu; read atomically */
static pthread_once_t atexit_once = PTHREAD_ONCE_INIT;

static void *io_main(void *arg)
{
    klp_io *io = arg;
    struct pollfd pf[2] = {
        {.fd = io->stop_fd, .events = POLLIN},
        {.fd = io->target_fd, .events = POLLIN},
    };
    for (;;) {
        int n = poll(pf, 2, IO_POLL_CAP_MS);
        if (n > 0 && pf[0].revents)
            break;
        if (n < 0 && errno != EINTR)
            usleep(10000); /* should not happen; keep deadlines firing */
        /* Nothing to report to: a failure here is a failure of every
         * request, and each gets its own callback. */
        kl_status st = kl_async_process(io->t);
        (void)st;
    }
    return NULL;
}

/* Stops this process's thread of io, if it runs. Called with io->mu. */
static void stop(klp_io *io)
{
    if (io->pid != getpid())
        return;
    /* An eventfd write of 1 to a counter the thread never reads cannot
     * fail: the thread will see it. */
    uint64_t one = 1;
    ssize_t w = write(io->stop_fd, &one, sizeof(one));
    (void)w;
    pthread_join(io->thread, NULL);
    __atomic_store_n(&io->pid, 0, __ATOMIC_RELEASE);
    close(io->stop_fd);
    io->stop_fd = -1;
}

/* Registered when the first thread starts, so after OpenSSL's handler,
 * and therefore run before it: no thread of ours is inside OpenSSL while
 * it cleans up. Operations from here on block instead. */
static void stop_all_at_exit(void)
{
    pthread_mutex_lock(&all_mu);
    __atomic_store_n(&exiting, true, __ATOMIC_RELEASE);
    for (klp_io *io = all_ios; io; io = io->next) {
        pthread_mutex_lock(&io->mu);
        stop(io);
        pthread_mutex_unlock(&io->mu);
    }
    pthread_mutex_unlock(&all_mu);
}

static void register_atexit(void)
{
    atexit(stop_all_at_exit);
}

klp_io *klp_io_new(kl_target *t)
{
    klp_io *io = calloc(1, sizeof(*io));
    if (!io)
        return NULL;
    io->t = t;
    io->stop_fd = io->target_fd = -1;
    pthread_mutex_init(&io->mu, NULL);
    pthread_mutex_lock(&all_mu);
    io->next = all_ios;
    all_ios = io;
    pthread_mutex_unlock(&all_mu);
    return io;
}

/* Called with io->mu held, in a process without a running thread. */
static int start(klp_io *io, pid_t me)
{
    if (io->stop_fd >= 0) {
        /* A child: the parent's thread was not copied by fork; the stop
         * descriptor is an inherited copy, ours to close. */
        close(io->stop_fd);
        io->stop_fd = -1;
    }
    if (__atomic_load_n(&exiting, __ATOMIC_ACQUIRE))
        return 0;
    pthread_once(&atexit_once, register_atexit);
    int tfd = kl_async_fd(io->t); /* created now, in this process */
    if (tfd < 0)
        return 0;
    int sfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sfd < 0)
        return 0;
    io->stop_fd = sfd;
    io->target_fd = tfd;
    /* The application's signals stay with the application's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&io->thread, NULL, io_main, io);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(sfd);
        io->stop_fd = -1;
        klp_log("cannot start the I/O thread of asynchronous key operations "
                "(error %d): they block instead",
                rc);
        return 0;
    }
    pthread_setname_np(io->thread, "keyless-io");
    __atomic_store_n(&io->pid, me, __ATOMIC_RELEASE);
    /* Once per process and target: says the async mode is in use. */
    klp_log("key operations in async jobs: I/O thread started in process %d",
            (int)me);
    return 1;
}

int klp_io_ensure(klp_io *io)
{
    pid_t me = getpid();
    if (__atomic_load_n(&io->pid, __ATOMIC_ACQUIRE) == me)
        return 1;
    pthread_mutex_lock(&io->mu);
    int ok = io->pid == me || start(io, me);
    pthread_mutex_unlock(&io->mu);
    return ok;
}

void klp_io_free(klp_io *io)
{
    if (!io)
        return;
    pthread_mutex_lock(&all_mu);
    for (klp_io **pp = &all_ios; *pp; pp = &(*pp)->next)
        if (*pp == io) {
            *pp = io->next;
            break;
        }
    pthread_mutex_unlock(&all_mu);
    pthread_mutex_lock(&io->mu);
    stop(io);
    pthread_mutex_unlock(&io->mu);
    if (io->stop_fd >= 0) /* a copy inherited from a parent */
        close(io->stop_fd);
    pthread_mutex_destroy(&io->mu);
    free(io);
}
