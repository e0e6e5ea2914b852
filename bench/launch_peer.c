/*
 * launch_peer.c — kiln-bench-launch: the raw-launch peer of
 * bench/plugin_overhead.py.  It compiles a kernel of signature
 * (const float *x, float *y, long long n) with NVRTC, then launches it from
 * C with cuLaunchKernel in a loop — eagerly, and captured into a CUDA graph —
 * through kiln's own driver table (src/device/cuda), so the AOT row of the
 * benchmark is compared with the cheapest launch C can make, not with a
 * launch from Python.
 *
 *   kiln-bench-launch SOURCE.cu ENTRY N BLOCK CHAIN REPS
 *
 * Prints one line "eager_us E graph_us G": the marginal cost of one launch,
 * (time of reps x [CHAIN + 1 launches + sync] - time of reps x [1 launch +
 * sync]) / (CHAIN x reps), best of 3, eager and as graph replays (one graph
 * of CHAIN + 1 kernels against one of 1).  The output is checked (y = -x for
 * the benchmark's kernel) and a mismatch is an error.  Exit 0 on success,
 * 1 with a message otherwise.
 */
#include "device/cuda/cuda_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { CAPTURE_THREAD_LOCAL = 1, MEMCPY_HTOD = 1, MEMCPY_DTOH = 2 };

typedef struct peer {
    const kiln__cu *cu;
    CUfunction f;
    CUstream s;
    unsigned grid, block;
    void *args[3];
} peer;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int launch(const peer *p) {
    return kiln__cuda_check(p->cu->LaunchKernel(p->f, p->grid, 1, 1, p->block, 1, 1, 0, p->s, (void **)p->args, NULL),
                            "cuLaunchKernel");
}

/* Best of 3 x reps of [k launches (or one graph of k) + sync], seconds per rep. */
static int time_k(const peer *p, int k, int graph, int reps, double *best) {
    const kiln__cu *cu = p->cu;
    CUgraph g = NULL;
    CUgraphExec ge = NULL;
    int rc = 0;
    if (graph) {
        rc = kiln__cuda_check(cu->StreamBeginCapture(p->s, CAPTURE_THREAD_LOCAL), "cuStreamBeginCapture");
        for (int i = 0; !rc && i < k; i++) rc = launch(p);
        int rc2 = kiln__cuda_check(cu->StreamEndCapture(p->s, &g), "cuStreamEndCapture");
        rc = rc ? rc : rc2;
        if (!rc) rc = kiln__cuda_check(cu->GraphInstantiateWithFlags(&ge, g, 0), "cuGraphInstantiate");
    }
    *best = INFINITY;
    for (int round = 0; !rc && round < 4; round++) { /* round 0 warms up */
        double t0 = now_s();
        for (int r = 0; !rc && r < reps; r++) {
            if (graph) rc = kiln__cuda_check(cu->GraphLaunch(ge, p->s), "cuGraphLaunch");
            else
                for (int i = 0; !rc && i < k; i++) rc = launch(p);
            if (!rc) rc = kiln__cuda_check(cu->StreamSynchronize(p->s), "cuStreamSynchronize");
        }
        double t = (now_s() - t0) / reps;
        if (round && t < *best) *best = t;
    }
    if (ge) cu->GraphExecDestroy(ge);
    if (g) cu->GraphDestroy(g);
    return rc;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (n >= 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)n + 1))) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = 0;
        }
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: kiln-bench-launch SOURCE.cu ENTRY N BLOCK CHAIN REPS\n");
        return 2;
    }
    long long n = atoll(argv[3]);
    int block = atoi(argv[4]), chain = atoi(argv[5]), reps = atoi(argv[6]);
    if (n <= 0 || block <= 0 || block > 1024 || chain <= 0 || reps <= 0) {
        fprintf(stderr, "kiln-bench-launch: N, BLOCK (1..1024), CHAIN and REPS must be positive\n");
        return 2;
    }
    char *src = read_file(argv[1]);
    if (!src) {
        fprintf(stderr, "kiln-bench-launch: cannot read %s\n", argv[1]);
        return 1;
    }
    const kiln__cu *cu = NULL;
    const kiln__cuda_info *info = NULL;
    char *ptx = NULL;
    size_t ptx_n = 0;
    CUmodule mod = NULL;
    CUdeviceptr x = 0, y = 0;
    float *hx = malloc((size_t)n * sizeof *hx), *hy = malloc((size_t)n * sizeof *hy);
    peer p = {0};
    double e1 = 0, en = 0, g1 = 0, gn = 0;
    int rc = hx && hy ? kiln__cuda_init(&cu, &info) : KILN_ENOMEM;
    if (!rc) rc = kiln__nvrtc_ptx(src, argv[1], 10 * info->sm_major + info->sm_minor, &ptx, &ptx_n);
    if (!rc) rc = kiln__cuda_check(cu->ModuleLoadData(&mod, ptx), "cuModuleLoadData");
    if (!rc) rc = kiln__cuda_check(cu->ModuleGetFunction(&p.f, mod, argv[2]), "cuModuleGetFunction");
    if (!rc) rc = kiln__cuda_check(cu->StreamCreate(&p.s, 0), "cuStreamCreate");
    if (!rc) rc = kiln__cuda_check(cu->MemAlloc(&x, (size_t)n * sizeof *hx), "cuMemAlloc");
    if (!rc) rc = kiln__cuda_check(cu->MemAlloc(&y, (size_t)n * sizeof *hy), "cuMemAlloc");
    if (!rc) {
        srand((unsigned)time(NULL));
        for (long long i = 0; i < n; i++) hx[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        rc = kiln__cuda_check(cu->MemcpyAsync(x, (CUdeviceptr)(uintptr_t)hx, (size_t)n * sizeof *hx, p.s),
                              "cuMemcpyAsync");
        if (!rc) rc = kiln__cuda_check(cu->MemsetD8Async(y, 0xff, (size_t)n * sizeof *hy, p.s), "cuMemsetD8Async");
    }
    p.cu = cu;
    p.block = (unsigned)block;
    p.grid = (unsigned)((n + block - 1) / block);
    p.args[0] = &x;
    p.args[1] = &y;
    p.args[2] = &n;
    if (!rc) rc = time_k(&p, 1, 0, reps, &e1);
    if (!rc) rc = time_k(&p, 1 + chain, 0, reps, &en);
    if (!rc) rc = time_k(&p, 1, 1, reps, &g1);
    if (!rc) rc = time_k(&p, 1 + chain, 1, reps, &gn);
    if (!rc) rc = kiln__cuda_check(cu->MemcpyAsync((CUdeviceptr)(uintptr_t)hy, y, (size_t)n * sizeof *hy, p.s),
                                   "cuMemcpyAsync");
    if (!rc) rc = kiln__cuda_check(cu->StreamSynchronize(p.s), "cuStreamSynchronize");
    for (long long i = 0; !rc && i < n; i++)
        if (hy[i] != -hx[i]) {
            fprintf(stderr, "kiln-bench-launch: y[%lld] = %g, expected %g\n", i, hy[i], -hx[i]);
            rc = KILN_EINTERNAL;
        }
    if (rc) fprintf(stderr, "kiln-bench-launch: %s\n", kiln_errmsg());
    else printf("eager_us %.3f graph_us %.3f\n", (en - e1) / chain * 1e6, (gn - g1) / chain * 1e6);
    if (x) cu->MemFree(x);
    if (y) cu->MemFree(y);
    if (p.s) cu->StreamDestroy(p.s);
    if (mod) cu->ModuleUnload(mod);
    kiln__free(ptx);
    free(src);
    free(hx);
    free(hy);
    return rc ? 1 : 0;
}
