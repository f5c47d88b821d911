/* SPDX-License-Identifier: Apache-2.0 */
/* kl_sd_notify against a fake service manager: an AF_UNIX datagram socket
 * bound where $NOTIFY_SOCKET points (a path in a temp dir, or an abstract
 * name), which must receive exactly the state text, from this process. */
#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/sdnotify.h"
#include "core/time.h"

typedef struct fake_manager {
    int fd;
    char dir[64];
    char path[128];
} fake_manager;

/* Binds a receiving socket; `abstract_name` NULL means a path socket in a
 * fresh temp dir. Sets $NOTIFY_SOCKET the way systemd would. */
static void fake_open(fake_manager *m, const char *abstract_name)
{
    memset(m, 0, sizeof *m);
    m->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(m->fd >= 0);
    int one = 1;
    /* as systemd does: the kernel then attaches the sender's pid */
    assert_int_equal(
        setsockopt(m->fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one), 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t len;
    if (abstract_name == NULL) {
        strcpy(m->dir, "/tmp/kl-sdnotify-XXXXXX");
        assert_non_null(mkdtemp(m->dir));
        snprintf(m->path, sizeof m->path, "%s/notify", m->dir);
        strcpy(sa.sun_path, m->path);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                          strlen(m->path) + 1);
        assert_int_equal(setenv("NOTIFY_SOCKET", m->path, 1), 0);
    } else {
        size_t n = strlen(abstract_name);
        assert_true(n < sizeof sa.sun_path);
        memcpy(sa.sun_path + 1, abstract_name, n);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
        char env[sizeof sa.sun_path + 2];
        snprintf(env, sizeof env, "@%s", abstract_name);
        assert_int_equal(setenv("NOTIFY_SOCKET", env, 1), 0);
    }
    assert_int_equal(bind(m->fd, (struct sockaddr *)&sa, len), 0);
}

/* Receives one datagram without blocking (a unix datagram is queued by the
 * time sendto returns); checks it came from this process. */
static size_t fake_recv(fake_manager *m, char *buf, size_t cap)
{
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = cap - 1};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = &ctl,
                         .msg_controllen = sizeof ctl};
    ssize_t n = recvmsg(m->fd, &msg, MSG_DONTWAIT);
    assert_true(n >= 0);
    assert_int_equal(msg.msg_flags & MSG_TRUNC, 0);
    buf[n] = '\0';
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    assert_non_null(c);
    assert_int_equal(c->cmsg_level, SOL_SOCKET);
    assert_int_equal(c->cmsg_type, SCM_CREDENTIALS);
    struct ucred cred;
    memcpy(&cred, CMSG_DATA(c), sizeof cred);
    assert_int_equal(cred.pid, getpid());
    return (size_t)n;
}

static void fake_assert_empty(fake_manager *m)
{
    char b[8];
    errno = 0;
    assert_int_equal(recv(m->fd, b, sizeof b, MSG_DONTWAIT), -1);
    assert_int_equal(errno, EAGAIN);
}

static void fake_close(fake_manager *m)
{
    close(m->fd);
    if (m->path[0] != '\0') {
        unlink(m->path);
        rmdir(m->dir);
    }
    unsetenv("NOTIFY_SOCKET");
}

static void test_unset_or_empty_is_a_noop(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(kl_sd_notify("READY=1"), KL_OK);
    assert_int_equal(kl_sd_notify_reloading(), KL_OK);
    setenv("NOTIFY_SOCKET", "", 1);
    assert_int_equal(kl_sd_notify("READY=1"), KL_OK);
    unsetenv("NOTIFY_SOCKET");
}

static void test_path_socket_receives_ready(void **state)
{
    (void)state;
    fake_manager m;
    fake_open(&m, NULL);
    char buf[256];
    assert_int_equal(kl_sd_notify("READY=1"), KL_OK);
    assert_int_equal(fake_recv(&m, buf, sizeof buf), 7);
    assert_string_equal(buf, "READY=1");
    /* several assignments travel in one datagram, byte for byte */
    assert_int_equal(kl_sd_notify("STOPPING=1\nSTATUS=draining 3 requests"),
                     KL_OK);
    fake_recv(&m, buf, sizeof buf);
    assert_string_equal(buf, "STOPPING=1\nSTATUS=draining 3 requests");
    fake_assert_empty(&m);
    fake_close(&m);
}

static void test_abstract_socket_receives_ready(void **state)
{
    (void)state;
    char name[64];
    snprintf(name, sizeof name, "kl-sdnotify-test-%ld-%ld", (long)getpid(),
             (long)time(NULL));
    fake_manager m;
    fake_open(&m, name);
    char buf[64];
    assert_int_equal(kl_sd_notify("READY=1"), KL_OK);
    assert_int_equal(fake_recv(&m, buf, sizeof buf), 7);
    assert_string_equal(buf, "READY=1");
    fake_assert_empty(&m);
    fake_close(&m);
}

/* The longest abstract name sockaddr_un holds: 107 bytes after the NUL. */
static void test_abstract_name_at_the_limit(void **state)
{
    (void)state;
    char name[108];
    int p = snprintf(name, sizeof name, "kl-%ld-", (long)getpid());
    memset(name + p, 'x', sizeof name - 1 - (size_t)p);
    name[sizeof name - 1] = '\0';
    assert_int_equal(strlen(name), 107);
    fake_manager m;
    fake_open(&m, name);
    char buf[64];
    assert_int_equal(kl_sd_notify("READY=1"), KL_OK);
    fake_recv(&m, buf, sizeof buf);
    assert_string_equal(buf, "READY=1");
    fake_close(&m);
}

static void test_reloading_carries_monotonic_time(void **state)
{
    (void)state;
    fake_manager m;
    fake_open(&m, NULL);
    uint64_t before = kl_now_ns() / 1000u;
    assert_int_equal(kl_sd_notify_reloading(), KL_OK);
    uint64_t after = kl_now_ns() / 1000u;
    char buf[128];
    fake_recv(&m, buf, sizeof buf);
    const char *prefix = "RELOADING=1\nMONOTONIC_USEC=";
    assert_int_equal(strncmp(buf, prefix, strlen(prefix)), 0);
    char *end;
    errno = 0;
    unsigned long long usec = strtoull(buf + strlen(prefix), &end, 10);
    assert_int_equal(errno, 0);
    assert_int_equal(*end, '\0');
    assert_true(end != buf + strlen(prefix));
    assert_true(usec >= before && usec <= after);
    fake_close(&m);
}

static void test_rejects_bad_socket_names(void **state)
{
    (void)state;
    /* neither an absolute path nor '@' (systemd's vsock: form unsupported) */
    setenv("NOTIFY_SOCKET", "run/notify", 1);
    assert_int_equal(kl_sd_notify("READY=1"), KL_E_CONFIG);
    setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
    assert_int_equal(kl_sd_notify("READY=1"), KL_E_CONFIG);
    /* '@' with no name */
    setenv("NOTIFY_SOCKET", "@", 1);
    assert_int_equal(kl_sd_notify("READY=1"), KL_E_CONFIG);
    /* a path of 108 bytes leaves no room for its NUL in sun_path */
    char longname[200];
    longname[0] = '/';
    memset(longname + 1, 'a', 107);
    longname[108] = '\0';
    setenv("NOTIFY_SOCKET", longname, 1);
    assert_int_equal(kl_sd_notify("READY=1"), KL_E_CONFIG);
    /* abstract: 108 name bytes plus the leading NUL is one too many */
    longname[0] = '@';
    memset(longname + 1, 'a', 108);
    longname[109] = '\0';
    setenv("NOTIFY_SOCKET", longname, 1);
    assert_int_equal(kl_sd_notify("READY=1"), KL_E_CONFIG);
    assert_int_equal(kl_sd_notify_reloading(), KL_E_CONFIG);
    unsetenv("NOTIFY_SOCKET");
}

static void test_unreachable_socket_is_an_io_error(void **state)
{
    (void)state;
    char dir[] = "/tmp/kl-sdnotify-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/nobody-listens", dir);
    setenv("NOTIFY_SOCKET", path, 1);
    errno = 0;
    assert_int_equal(kl_sd_notify("READY=1"), KL_E_IO);
    assert_int_equal(errno, ENOENT);
    /* an abstract name nobody bound */
    char name[64];
    snprintf(name, sizeof name, "@kl-sdnotify-unbound-%ld", (long)getpid());
    setenv("NOTIFY_SOCKET", name, 1);
    errno = 0;
    assert_int_equal(kl_sd_notify("READY=1"), KL_E_IO);
    assert_int_equal(errno, ECONNREFUSED);
    unsetenv("NOTIFY_SOCKET");
    rmdir(dir);
}

static void test_rejects_empty_state(void **state)
{
    (void)state;
    /* checked before the environment, so a bug shows outside systemd too */
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(kl_sd_notify(NULL), KL_E_BAD_VALUE);
    assert_int_equal(kl_sd_notify(""), KL_E_BAD_VALUE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unset_or_empty_is_a_noop),
        cmocka_unit_test(test_path_socket_receives_ready),
        cmocka_unit_test(test_abstract_socket_receives_ready),
        cmocka_unit_test(test_abstract_name_at_the_limit),
        cmocka_unit_test(test_reloading_carries_monotonic_time),
        cmocka_unit_test(test_rejects_bad_socket_names),
        cmocka_unit_test(test_unreachable_socket_is_an_io_error),
        cmocka_unit_test(test_rejects_empty_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
