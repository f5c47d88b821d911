/* Logging to stderr. Levels follow the reference server's `loglevel`
 * (0 debug .. 5 fatal, default 1 = info). Never log key material. */
#ifndef KL_CORE_LOG_H
#define KL_CORE_LOG_H

enum kl_log_level {
    KL_LOG_DEBUG = 0,
    KL_LOG_INFO = 1,
    KL_LOG_WARN = 2,
    KL_LOG_ERROR = 3,
    KL_LOG_CRITICAL = 4,
    KL_LOG_FATAL = 5,
};

void kl_log_set_level(int level);
int kl_log_get_level(void);
/* Prefix lines with a name (e.g. "keylessd"); default none. */
void kl_log_set_prefix(const char *prefix);

void kl_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define kl_debug(...)                                                          \
    do {                                                                       \
        if (kl_log_get_level() <= KL_LOG_DEBUG)                                \
            kl_log(KL_LOG_DEBUG, __VA_ARGS__);                                 \
    } while (0)
#define kl_info(...) kl_log(KL_LOG_INFO, __VA_ARGS__)
#define kl_warn(...) kl_log(KL_LOG_WARN, __VA_ARGS__)
#define kl_error(...) kl_log(KL_LOG_ERROR, __VA_ARGS__)
#define kl_fatal(...) kl_log(KL_LOG_FATAL, __VA_ARGS__)

#endif
