/* SPDX-License-Identifier: Apache-2.0 */
/* A real Prometheus server (Debian's prometheus package) scrapes the
 * metrics endpoint, and a PromQL query returns the recorded request count:
 * the exposition is not only well-formed but ingested as the
 * reference's dashboards will query it. Everything on 127.0.0.1. */
#include "testutil.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "keyless/protocol.h"
#include "mhttp.h"
#include "mtest.h"

extern char **environ;

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Polls a PromQL query until its body contains want (up to 60 s). */
static bool query_until(uint16_t port, const char *query_enc, const char *want,
                        char *last, size_t lastlen)
{
    char path[512];
    snprintf(path, sizeof path, "/api/v1/query?query=%s", query_enc);
    for (int i = 0; i < 240; i++) {
        mh_reply r;
        if (mh_request(port, "GET", path, NULL, &r) == 0) {
            snprintf(last, lastlen, "%d %s", r.status, r.body);
            bool hit = r.status == 200 && strstr(r.body, want);
            mh_free(&r);
            if (hit)
                return true;
        }
        nanosleep(&(struct timespec){0, 250000000}, NULL);
    }
    return false;
}

static void test_prometheus_scrapes(void **state)
{
    (void)state;
    if (system("command -v prometheus >/dev/null 2>&1") != 0) {
        print_message("SKIP: prometheus not found; install Debian's "
                      "`prometheus` package (scripts/install-deps.sh)\n");
        skip();
    }
    kl_metrics *m = kl_metrics_new();
    kl_metrics_local *l = kl_metrics_local_new(m, 0);
    for (int i = 0; i < 5; i++) {
        kl_metrics_request(l, KL_OP_ECDSA_SIGN_SHA256);
        kl_metrics_exec_time(l, KL_OP_ECDSA_SIGN_SHA256, KL_OK, 150000);
    }
    char err[256];
    kl_metrics_http_opts o = kl_metrics_http_defaults;
    o.address = "127.0.0.1";
    o.port = 0;
    kl_metrics_http *h = kl_metrics_http_start(m, &o, err, sizeof err);
    assert_non_null(h);

    char dir[] = "/tmp/kl-prom-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cfg[64], data[64], listen[64], cfgarg[96], dataarg[96];
    snprintf(cfg, sizeof cfg, "%s/prometheus.yml", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f,
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: keylessd\n"
            "    static_configs:\n      - targets: ['127.0.0.1:%u']\n",
            kl_metrics_http_port(h));
    fclose(f);
    uint16_t pport = free_port();
    snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%u", pport);
    snprintf(cfgarg, sizeof cfgarg, "--config.file=%s", cfg);
    snprintf(dataarg, sizeof dataarg, "--storage.tsdb.path=%s", data);
    char *argv[] = {"prometheus",       cfgarg, dataarg, listen,
                    "--log.level=warn", NULL};
    pid_t pid;
    assert_int_equal(
        posix_spawnp(&pid, "prometheus", NULL, NULL, argv, environ), 0);

    char last[4096] = "";
    bool ok = query_until(pport,
                          "keyless_requests%7Bopcode%3D%22OpECDSASignSHA256%22"
                          "%7D",
                          ",\"5\"]", last, sizeof last);
    /* The histogram arrives with the reference's labels and buckets. */
    bool hist = ok && query_until(pport,
                                  "keyless_request_exec_duration_per_opcode_"
                                  "bucket%7Btype%3D%22ecdsa%22%2Cerror%3D%22"
                                  "no%20error%22%2Cle%3D%220.0002%22%7D",
                                  ",\"5\"]", last, sizeof last);

    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    assert_int_equal(system(rm), 0);
    kl_metrics_http_stop(h);
    kl_metrics_free(m);
    if (!ok || !hist)
        fail_msg("query did not return 5; last answer: %s", last);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prometheus_scrapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
