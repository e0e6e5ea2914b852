/*
 * test_aot_cache_race.c — AOT kernels compiled concurrently into one
 * compile cache (ctest -j runs several builds of the same sample kernel on
 * one KILN_CACHE_DIR; a multi-threaded program builds engines at once).
 *
 * Rounds of 4 threads compile the same kernel source, started together
 * (a barrier) and then a few ms apart, each round on an emptied cache so
 * every thread misses and runs the compiler.  Every compile must succeed and yield the same
 * object.  (A kernel source kept under one name per cache key was unlinked
 * by the first compile to finish while another compiler was about to read
 * it: "cc: error: ...aot-...c: No such file or directory".)
 */
#include "kiln_int.h"
#include "test.h"

#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

enum { THREADS = 4, ROUNDS = 12 };

static const char src[] =
    "#include <stdint.h>\n"
    "void race_k(float *y, const float *x, int64_t n) {\n"
    "    for (int64_t i = 0; i < n; i++) y[i] = 3.0f * x[i] + 1.0f;\n"
    "}\n";

static pthread_barrier_t g_bar;
typedef struct job {
    int delay_us; /* after the barrier: starts spread over a compile's length */
    int rc;
    char msg[600];
    uint8_t *so;
    size_t n;
} job;

static void *compile_one(void *ud) {
    job *j = ud;
    pthread_barrier_wait(&g_bar);
    usleep((useconds_t)j->delay_us);
    j->rc = kiln__aot_compile(src, "race_k", &j->so, &j->n, NULL);
    if (j->rc) snprintf(j->msg, sizeof j->msg, "%s", kiln_errmsg());
    return NULL;
}

static void empty_dir(const char *dir) {
    DIR *d = opendir(dir);
    ASSERT(d);
    struct dirent *e;
    char p[4200];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' || (e->d_name[1] && strcmp(e->d_name, ".."))) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
}

TEST_IMPL(concurrent_misses) {
    char dir[] = "/tmp/kiln-aot-race-XXXXXX";
    ASSERT(mkdtemp(dir));
    ASSERT_EQ(setenv("KILN_CACHE_DIR", dir, 1), 0);
    for (int round = 0; round < ROUNDS; round++) {
        empty_dir(dir);
        job jobs[THREADS];
        pthread_t th[THREADS];
        memset(jobs, 0, sizeof jobs);
        for (int t = 0; t < THREADS; t++) jobs[t].delay_us = ((round * 7 + t * 13) % 40) * 1000;
        ASSERT_EQ(pthread_barrier_init(&g_bar, NULL, THREADS), 0);
        for (int t = 0; t < THREADS; t++) ASSERT_EQ(pthread_create(&th[t], NULL, compile_one, &jobs[t]), 0);
        for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
        pthread_barrier_destroy(&g_bar);
        for (int t = 0; t < THREADS; t++) {
            if (jobs[t].rc) TEST__FAIL("round %d thread %d: %s", round, t, jobs[t].msg);
            ASSERT(jobs[t].n > 0 && jobs[t].n == jobs[0].n);
            ASSERT(!memcmp(jobs[t].so, jobs[0].so, jobs[0].n));
        }
        for (int t = 0; t < THREADS; t++) kiln__free(jobs[t].so);
    }
    empty_dir(dir);
    rmdir(dir);
}

TEST_LIST(TEST_ENTRY(concurrent_misses))
