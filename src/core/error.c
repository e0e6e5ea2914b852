/*
 * error.c — status codes, the per-thread error message, logging, asserts.
 *
 * Every failing kiln call leaves a message in a thread-local buffer; callers
 * up the stack add context with kiln__err_prefix ("layer conv1: ...") so the
 * final message reads from the outside in.  Public API misuse is an error
 * status too (KILN__ARG), never an abort: kiln is embedded in other programs.
 */
#include "kiln_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define KILN__ERRMSG_SIZE 4096

static _Thread_local char t_errmsg[KILN__ERRMSG_SIZE];

const char *kiln_strerror(int status) {
    switch (status) {
#define KILN__ERR_STR(name, code, desc) \
    case code: return desc;
        KILN_ERRNO_MAP(KILN__ERR_STR)
#undef KILN__ERR_STR
    default: return "unknown error";
    }
}

const char *kiln_err_name(int status) {
    switch (status) {
#define KILN__ERR_NAME(name, code, desc) \
    case code: return "KILN_E" #name;
        KILN_ERRNO_MAP(KILN__ERR_NAME)
#undef KILN__ERR_NAME
    default: return "KILN_E?";
    }
}

const char *kiln_errmsg(void) { return t_errmsg; }

static int verr(int status, const char *fmt, va_list ap) {
    vsnprintf(t_errmsg, sizeof t_errmsg, fmt, ap);
    return status;
}

int kiln_set_error(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verr(status, fmt, ap);
    va_end(ap);
    return status;
}

int kiln__err(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verr(status, fmt, ap);
    va_end(ap);
    return status;
}

int kiln__err_prefix(int status, const char *fmt, ...) {
    char tmp[KILN__ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return status;
    size_t pn = strlen(tmp);
    if (t_errmsg[0])
        snprintf(tmp + pn, sizeof tmp - pn, ": %s", t_errmsg);
    else
        snprintf(tmp + pn, sizeof tmp - pn, ": %s (status %d returned without a message)",
                 kiln_strerror(status), status);
    memcpy(t_errmsg, tmp, sizeof t_errmsg);
    return status;
}

/* ---------------------------------------------------------------- misuse */

/* Calls made from inside plugin callbacks that cannot return a status (the
 * attribute accessors, expression constructors, kiln_exec_*) record misuse
 * here instead of aborting the host process: the first one on a thread is
 * kept until the builder or runtime, back from the callback, turns it into
 * that callback's error (kiln__misuse_take). */
static _Thread_local int t_misuse;
static _Thread_local char t_misuse_msg[1024];

void kiln__misuse(const char *fmt, ...) {
    char msg[sizeof t_misuse_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kiln__misuse_push(msg);
}

void kiln__misuse_push(const char *msg) {
    kiln__err(KILN_EINVAL, "%s", msg);
    if (t_misuse) return;
    t_misuse = 1;
    snprintf(t_misuse_msg, sizeof t_misuse_msg, "%s", msg);
}

int kiln__misuse_pop(char *buf, size_t size) {
    if (!t_misuse) return 0;
    t_misuse = 0;
    if (size) snprintf(buf, size, "%s", t_misuse_msg);
    return 1;
}

void kiln__misuse_clear(void) { t_misuse = 0; }

int kiln__misuse_take(int rc) {
    if (!t_misuse) return rc;
    t_misuse = 0;
    /* The misuse explains whatever the callback returned after it. */
    return kiln__err(KILN_EINVAL, "%s", t_misuse_msg);
}

/* ---------------------------------------------------------------- logging */

static atomic_int g_log_level = KILN_LOG_WARN;
static kiln_log_fn g_log_fn;
static void *g_log_ud;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;

void kiln_log_set(kiln_log_level level, kiln_log_fn fn, void *ud) {
    pthread_mutex_lock(&g_log_mu);
    atomic_store(&g_log_level, (int)level);
    g_log_fn = fn;
    g_log_ud = ud;
    pthread_mutex_unlock(&g_log_mu);
}

kiln_log_level kiln_log_get_level(void) { return (kiln_log_level)atomic_load(&g_log_level); }

static void vlog(kiln_log_level level, const char *fmt, va_list ap);

void kiln__log(kiln_log_level level, const char *fmt, ...) {
    if ((int)level > atomic_load(&g_log_level)) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void kiln__log_always(kiln_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

static void vlog(kiln_log_level level, const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    static const char *const names[] = {"error", "warning", "info", "verbose"};
    /* The callback runs outside the lock: it may take its own locks (a
     * binding's GIL) while another thread logs or calls kiln_log_set. */
    pthread_mutex_lock(&g_log_mu);
    kiln_log_fn fn = g_log_fn;
    void *ud = g_log_ud;
    pthread_mutex_unlock(&g_log_mu);
    if (fn) {
        fn(ud, level, msg);
    } else {
        const char *ln = (unsigned)level < 4 ? names[level] : "log";
        fprintf(stderr, "kiln %s: %s\n", ln, msg);
    }
}


_Noreturn void kiln__assert_fail(const char *what, const char *file, int line) {
    fprintf(stderr, "%s:%d: kiln assertion failed: %s\n", file, line, what);
    fflush(stderr);
    abort();
}

double kiln__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
