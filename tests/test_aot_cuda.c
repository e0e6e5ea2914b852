/*
 * test_aot_cuda.c — AOT CUDA kernels (kiln_quick_op.cuda_aot).
 *
 * Everywhere (the fake CUDA device of src/device/cuda/fake.c stands in for
 * the GPU while building): the build checks what cuda_aot returned against
 * the kernel's own PTX parameter list (count, and width/class of each),
 * compiles CUDA C with NVRTC (skipped visibly where libnvrtc is absent),
 * stores PTX (no cubin without a GPU) in section AOTCUDA, and the engine
 * round-trips through the file with every field intact and no plugin
 * listed; a damaged kernel record is refused.  On a real GPU the kernels
 * run against a naive reference, from the cubin and (KILN_AOT_CUDA_PTX=1)
 * from the PTX, with Triton-style hidden scratch pointers.
 */
#include "device/cuda/cuda_int.h"
#include "device/device.h"
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>

enum { N = 1000 };

/* ------------------------------------------------------------ test op */

/* y = x * s + t (f32), with s an F32 constant and t = numel as an F32
 * expression; hidden scratch as the test asks.  Which kernel cuda_aot
 * returns is chosen by g_mode. */
static int g_mode;
enum { M_CUDA, M_CUDA_SCRATCH, M_PTX_BAD_TYPE, M_PTX_FEW, M_PTX_NO_ENTRY, M_PTX_SCRATCH, M_PTX_TEXT, M_CUDA_BAD };
static const char *g_ptx; /* M_PTX_TEXT: the PTX to hand over */

static const char k_cuda[] =
    "extern \"C\" __global__ void k_axpb(const float *x, float *y, long long n, float s, float t) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = x[i] * s + t;\n"
    "}\n";
/* The same, staging each value in its block's slice of the global scratch
 * (256 floats per block) and checking that the profile scratch is NULL. */
static const char k_cuda_scratch[] =
    "extern \"C\" __global__ void k_axpb(const float *x, float *y, long long n, float s, float t,\n"
    "                                    float *gs, float *ps) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    float *mine = gs + blockIdx.x * 256;\n"
    "    if (i < n) mine[threadIdx.x] = x[i] * s;\n"
    "    __syncthreads();\n"
    "    if (i < n) y[i] = ps ? __int_as_float(0x7fc00000) : mine[threadIdx.x] + t;\n"
    "}\n";
static const char k_cuda_bad[] =
    "extern \"C\" __global__ void k_axpb(const float *x, float *y, long long n, float s, float t) {\n"
    "    y[0] = undeclared_name;\n"
    "}\n";
#define PTX_HEAD ".version 8.0\n.target sm_75\n.address_size 64\n"
static const char k_ptx_bad_type[] = PTX_HEAD
    ".visible .entry k_axpb(\n\t.param .u64 .ptr .global .align 1 k_axpb_param_0,\n"
    "\t.param .u64 k_axpb_param_1,\n\t.param .u32 k_axpb_param_2,\n\t.param .f32 k_axpb_param_3,\n"
    "\t.param .f32 k_axpb_param_4\n)\n{\n\tret;\n}\n";
static const char k_ptx_few[] = PTX_HEAD
    ".visible .entry k_axpb(\n\t.param .u64 k_axpb_param_0,\n\t.param .u64 k_axpb_param_1\n)\n{\n\tret;\n}\n";
static const char k_ptx_other[] = PTX_HEAD ".visible .entry other(\n\t.param .u64 p0\n)\n{\n\tret;\n}\n";
static const char k_ptx_scratch[] = PTX_HEAD
    ".visible .entry k_axpb(\n\t.param .u64 .ptr .global .align 1 k_axpb_param_0,\n"
    "\t.param .u64 .ptr .global .align 1 k_axpb_param_1,\n\t.param .u64 k_axpb_param_2,\n"
    "\t.param .f32 k_axpb_param_3,\n\t.param .b32 k_axpb_param_4,\n"
    "\t.param .u64 .ptr .global .align 1 k_axpb_param_5,\n\t.param .u64 .ptr .global .align 1 k_axpb_param_6\n"
    ")\n{\n\tret;\n}\n";

static int axpb_cuda_aot(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic, kiln_aot_kernel *k) {
    (void)io, (void)tactic;
    const kiln_expr *n = c->in[0].dims[0];
    for (int d = 1; d < c->in[0].ndim; d++) n = kiln_expr_mul(c->x, n, c->in[0].dims[d]);
    k->lang = g_mode == M_CUDA || g_mode == M_CUDA_SCRATCH ? KILN_AOT_LANG_CUDA : KILN_AOT_LANG_PTX;
    k->lang = g_mode == M_CUDA_BAD ? KILN_AOT_LANG_CUDA : k->lang;
    k->source = g_mode == M_CUDA ? k_cuda : g_mode == M_CUDA_SCRATCH ? k_cuda_scratch : g_mode == M_CUDA_BAD ? k_cuda_bad
              : g_mode == M_PTX_BAD_TYPE ? k_ptx_bad_type : g_mode == M_PTX_FEW ? k_ptx_few
              : g_mode == M_PTX_NO_ENTRY ? k_ptx_other : g_mode == M_PTX_SCRATCH ? k_ptx_scratch : g_ptx;
    k->entry = "k_axpb";
    k->grid[0] = kiln_expr_ceildiv(c->x, n, kiln_expr_const(c->x, 256));
    k->block[0] = kiln_expr_const(c->x, 256);
    k->nscalars = 3;
    k->scalar_types[0] = KILN_SCALAR_I64;
    k->scalars[0] = n;
    k->scalar_types[1] = KILN_SCALAR_F32;
    k->fscalars[1] = 1.5;
    k->scalar_types[2] = KILN_SCALAR_F32;
    k->scalars[2] = n; /* an F32 scalar from an expression */
    if (g_mode == M_CUDA_SCRATCH || g_mode == M_PTX_SCRATCH) {
        k->nscratch = 2;
        k->scratch_bytes[0] = 256 * sizeof(float);
        k->scratch_bytes[1] = 0;
    }
    return 0;
}
static const kiln_quick_op axpb_op = {
    .ns = "aotcu", .name = "axpb", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .shape = same_shape, .cuda_aot = axpb_cuda_aot, .aot_signature = "i64,f32,f32"};
KILN_OP(axpb_op)

/* ------------------------------------------------------------ helpers */

/* x -> axpb -> y, or (chain) x -> axpb -> t -> axpb -> y: two GPU layers
 * on device memory, which the runtime captures into a CUDA graph. */
static kiln_network *axpb_net(int chain) {
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {10, N / 10};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    const char *in[] = {"x"}, *out[] = {chain ? "t" : "y"}, *in2[] = {"t"}, *out2[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "aotcu::axpb", 1, "axpb", 1, in, 1, out));
    if (chain) ASSERT(kiln_network_add_layer(net, "aotcu::axpb", 1, "axpb2", 1, in2, 1, out2));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

static int build_net(int mode, int chain, kiln_engine **e) {
    g_mode = mode;
    kiln_network *net = axpb_net(chain);
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    *e = NULL;
    int rc = kiln_build(net, cfg, e, NULL);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return rc;
}
static int build(int mode, kiln_engine **e) { return build_net(mode, 0, e); }

/* A real GPU (not the stand-in)? */
static int have_gpu(void) {
    kiln__cuda_fake(0);
    return kiln__device_get(KILN_DEVICE_CUDA) != NULL;
}

/* NVRTC present?  Tests of CUDA C sources skip visibly without it. */
static int have_nvrtc(void) {
    char *ptx = NULL;
    size_t n = 0;
    int rc = kiln__nvrtc_ptx("extern \"C\" __global__ void f() {}", "probe", 75, &ptx, &n);
    kiln_free(ptx);
    if (rc) fprintf(stderr, "SKIP (no NVRTC here): %s\n", kiln_errmsg());
    return rc == 0;
}

/* Run e on fresh random x; y against the reference x * 1.5 + N (applied
 * `layers` times). */
static void run_check_n(kiln_engine *e, uint64_t seed, int layers) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    static float x[N], y[N];
    for (int rep = 0; rep < 3; rep++) { /* the later runs replay a CUDA graph */
        for (int i = 0; i < N; i++) x[i] = test_randf(&seed, -3, 3);
        memset(y, 0xA5, sizeof y);
        ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
        ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
        ASSERT_OK(kiln_context_run(ctx));
        for (int i = 0; i < N; i++) {
            double want = x[i];
            for (int l = 0; l < layers; l++) want = (double)(float)want * 1.5 + N;
            ASSERT_NEAR(y[i], want, 1e-3);
        }
    }
    kiln_context_free(ctx);
}
static void run_check(kiln_engine *e, uint64_t seed) { run_check_n(e, seed, 1); }

/* ------------------------------------------------------------ tests */

TEST_IMPL(signature_checked_against_ptx) {
    int gpu = have_gpu();
    kiln__cuda_fake(!gpu);
    kiln_engine *e = NULL;
    ASSERT_EQ(build(M_PTX_BAD_TYPE, &e), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'axpb' (aotcu::axpb v1)");
    ASSERT_CONTAINS(kiln_errmsg(), "AOT CUDA kernel k_axpb: parameter 2 is .u32, kiln passes i64 (scalar 0)");
    ASSERT_EQ(build(M_PTX_FEW, &e), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "takes 2 parameters, kiln passes 5 (2 pointers for inputs and outputs, 3 scalars, "
                                   "0 hidden scratch pointers)");
    ASSERT_EQ(build(M_PTX_NO_ENTRY, &e), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "the PTX has no .entry k_axpb");
    kiln__cuda_fake(0);
}

/* Built on the stand-in (PTX only, no cubin): the record round-trips. */
TEST_IMPL(engine_file_round_trip) {
    if (!have_nvrtc()) return;
    kiln__cuda_fake(1);
    kiln_engine *e = NULL;
    ASSERT_OK(build(M_CUDA, &e));
    ASSERT_EQ(e->nacu, 1);
    ASSERT_EQ(e->naot, 0);
    ASSERT_EQ(e->nplugins, 0); /* an AOT layer needs no plugin */
    const kiln__elayer *L = NULL;
    for (int32_t l = 0; l < e->nlayers; l++)
        if (!strcmp(e->layers[l].name, "axpb")) L = &e->layers[l];
    ASSERT(L);
    ASSERT_EQ(L->device, KILN_DEVICE_CUDA);
    ASSERT_EQ(L->aot_kernel, 0);
    const kiln__aot_cuda *k = &e->acu[0];
    ASSERT_CONTAINS(k->ptx, ".entry k_axpb");
    ASSERT_EQ(k->cubin_size, 0);
    ASSERT_EQ(k->sm, 0);
    ASSERT_EQ(k->nptr, 2);
    ASSERT_EQ(k->nscalars, 3);
    ASSERT_EQ(k->scalars[1], -1);
    ASSERT(k->scalars[2] >= 0);
    ASSERT(kiln_engine_has_code(e));
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *e2 = NULL;
    kiln_load_options lo = {.code = KILN_CODE_ALLOW};
    ASSERT_OK(kiln_engine_load_memory_ex(buf, size, &lo, &e2));
    const kiln__aot_cuda *k2 = &e2->acu[0];
    ASSERT_EQ(e2->nacu, 1);
    ASSERT_STR_EQ(k2->entry, "k_axpb");
    ASSERT_EQ(k2->ptx_size, k->ptx_size);
    ASSERT(!memcmp(k2->ptx, k->ptx, k->ptx_size) && k2->ptx[k2->ptx_size] == 0);
    for (int d = 0; d < 3; d++) {
        ASSERT_EQ(k2->grid[d], k->grid[d]);
        ASSERT_EQ(k2->block[d], k->block[d]);
    }
    ASSERT_EQ(k2->fscalars[1], 1.5);
    ASSERT_EQ(k2->scalars[2], k->scalars[2]);
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    ASSERT_OK(kiln_engine_inspect(e2, f));
    fclose(f);
    ASSERT_CONTAINS(text, "AOT CUDA kernels (1)");
    ASSERT_CONTAINS(text, "entry k_axpb, from CUDA C");
    free(text);

    /* damage: a byte of the PTX (the section checksum and the record's
     * SHA-256 both catch it), a truncated section, never a crash */
    uint8_t *bad = malloc(size);
    memcpy(bad, buf, size);
    uint8_t *at = memmem(bad, size, ".entry k_axpb", 13);
    ASSERT(at);
    at[7] ^= 0x20;
    kiln_engine *e3 = NULL;
    int rc = kiln_engine_load_memory_ex(bad, size, &lo, &e3);
    ASSERT(rc == KILN_ECHECKSUM || rc == KILN_EFORMAT);
    ASSERT(!e3);
    free(bad);
    kiln_free(buf);
    kiln_engine_free(e2);
    kiln_engine_free(e);
    kiln__cuda_fake(0);
}

/* The AOTCUDA section behind a valid checksum: every byte flipped, the
 * file re-checksummed, loaded.  Never a crash (ASan build); a flip inside
 * the PTX is caught by its SHA-256; most others by the record's checks. */
TEST_IMPL(section_bytes_flipped) {
    if (!have_nvrtc()) return;
    kiln__cuda_fake(1);
    kiln_engine *e = NULL;
    ASSERT_OK(build(M_CUDA, &e));
    void *buf = NULL;
    size_t n = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &n));
    uint8_t *c = malloc(n);
    uint32_t nsec, siglen, hsize;
    memcpy(&nsec, (uint8_t *)buf + 20, 4);
    memcpy(&siglen, (uint8_t *)buf + 24, 4);
    memcpy(&hsize, (uint8_t *)buf + 12, 4);
    size_t ent = 0;
    for (uint32_t i = 0; i < nsec && !ent; i++) {
        uint32_t id;
        memcpy(&id, (uint8_t *)buf + 40 + ((siglen + 7u) & ~7u) + 32 * i, 4);
        if (id == 14) ent = 40 + ((siglen + 7u) & ~7u) + 32 * i; /* SEC_AOTCUDA */
    }
    ASSERT(ent);
    uint64_t off, size;
    memcpy(&off, (uint8_t *)buf + ent + 8, 8);
    memcpy(&size, (uint8_t *)buf + ent + 16, 8);
    const uint8_t *ptx = memmem((uint8_t *)buf + off, size, ".entry k_axpb", 13);
    ASSERT(ptx);
    kiln_load_options lo = {.code = KILN_CODE_ALLOW};
    int refused = 0;
    for (uint64_t at = 0; at < size; at++) {
        memcpy(c, buf, n);
        c[off + at] ^= 0xFF;
        kiln__file_reseal(c, n);
        kiln_engine *e2 = NULL;
        int rc = kiln_engine_load_memory_ex(c, n, &lo, &e2);
        if (rc) {
            refused++;
            ASSERT(!e2);
        }
        if ((const uint8_t *)buf + off + at == ptx + 8) {
            ASSERT_EQ(rc, KILN_ECHECKSUM);
            ASSERT_CONTAINS(kiln_errmsg(), "section AOTCUDA: kernel 0");
            ASSERT_CONTAINS(kiln_errmsg(), "does not match the SHA-256");
        }
        kiln_engine_free(e2);
    }
    fprintf(stderr, "%d of %llu flipped bytes refused\n", refused, (unsigned long long)size);
    ASSERT(refused > (int)(size * 9 / 10)); /* all but a few scalar values and the like */
    free(c);
    kiln_free(buf);
    kiln_engine_free(e);
    kiln__cuda_fake(0);
}

/* A CUDA C source NVRTC rejects: the build fails with NVRTC's log. */
TEST_IMPL(nvrtc_error_fails_build) {
    if (!have_nvrtc()) return;
    int gpu = have_gpu();
    kiln__cuda_fake(!gpu);
    kiln_engine *e = NULL;
    ASSERT_EQ(build(M_CUDA_BAD, &e), KILN_ECOMPILE);
    ASSERT_CONTAINS(kiln_errmsg(), "op aotcu::axpb v1: AOT CUDA kernel k_axpb: NVRTC (--gpu-architecture=compute_");
    ASSERT_CONTAINS(kiln_errmsg(), "kernel.cu(2)");
    ASSERT_CONTAINS(kiln_errmsg(), "undeclared_name");
    kiln__cuda_fake(0);
}

/* NVRTC's PTX goes through the compile cache directory: the first build
 * writes one aot-cuda-*.ptx, the next build of the same kernel reads it
 * back instead of compiling (proved by a marker added to the cached file,
 * which the second engine's PTX carries). */
TEST_IMPL(nvrtc_output_cached) {
    if (!have_nvrtc()) return;
    int gpu = have_gpu();
    kiln__cuda_fake(!gpu);
    char dir[] = "/tmp/kiln-nvrtc-cache-XXXXXX", path[256] = "", cmd[300];
    ASSERT(mkdtemp(dir));
    const char *old = getenv("KILN_CACHE_DIR");
    char *saved = old ? kiln__strdup(old) : NULL;
    setenv("KILN_CACHE_DIR", dir, 1);
    kiln_engine *e = NULL;
    ASSERT_OK(build(M_CUDA, &e));
    ASSERT(!strstr(e->acu[0].ptx, "from the cache"));
    kiln_engine_free(e);
    DIR *d = opendir(dir);
    ASSERT(d);
    int files = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (!strncmp(de->d_name, "aot-cuda-", 9)) {
            files++;
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        }
    closedir(d);
    ASSERT_EQ(files, 1);
    FILE *f = fopen(path, "a");
    ASSERT(f);
    fputs("\n// from the cache\n", f);
    fclose(f);
    ASSERT_OK(build(M_CUDA, &e));
    ASSERT_CONTAINS(e->acu[0].ptx, "// from the cache");
    ASSERT_CONTAINS(e->acu[0].ptx, ".entry k_axpb");
    if (gpu) run_check(e, 7); /* the cached PTX still runs */
    kiln_engine_free(e);
    if (saved) setenv("KILN_CACHE_DIR", saved, 1);
    else unsetenv("KILN_CACHE_DIR");
    kiln__free(saved);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
    kiln__cuda_fake(0);
}

/* The plugin-side API: misuse and the no-GPU case are errors, not crashes. */
TEST_IMPL(cuda_module_api_errors) {
    kiln_cuda_module *m = (kiln_cuda_module *)&m;
    ASSERT_EQ(kiln_cuda_module_get(NULL, KILN_AOT_LANG_CUDA, "t", &m), KILN_EINVAL);
    ASSERT_EQ(kiln_cuda_module_get("x", 7, "t", &m), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "lang 7 is neither KILN_AOT_LANG_CUDA (1) nor KILN_AOT_LANG_PTX (2)");
    ASSERT(!m);
    unsigned g[3] = {1, 1, 1}, b[3] = {1, 1, 1};
    kiln_call call = {.layer = "L"};
    ASSERT_EQ(kiln_cuda_launch(NULL, m, "f", g, b, 0, NULL), KILN_EINVAL);
    ASSERT_EQ(kiln_cuda_launch(&call, (kiln_cuda_module *)&call, "f", g, b, 0, NULL), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_cuda_launch(f, layer 'L'): not a CUDA call");
    if (!have_gpu()) {
        ASSERT_EQ(kiln_cuda_module_get(k_cuda, KILN_AOT_LANG_CUDA, "test kernels", &m), KILN_EDEVICE);
        ASSERT_CONTAINS(kiln_errmsg(), "test kernels: no CUDA device");
    }
}

/* Hidden scratch pointers are part of the checked signature. */
TEST_IMPL(hidden_scratch_declared) {
    int gpu = have_gpu();
    kiln__cuda_fake(!gpu);
    kiln_engine *e = NULL;
    if (!gpu) { /* PTX with an empty body: checked and stored, not run */
        ASSERT_OK(build(M_PTX_SCRATCH, &e));
        ASSERT_EQ(e->acu[0].nscratch, 2);
        ASSERT_EQ(e->acu[0].scratch_bytes[0], 256 * sizeof(float));
        kiln_engine_free(e);
    }
    g_ptx = k_ptx_scratch; /* 7 parameters, declared without scratch: 5 */
    ASSERT_EQ(build(M_PTX_TEXT, &e), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "takes more than the 5 parameters kiln passes");
    kiln__cuda_fake(0);
}

/* On a GPU: run from the cubin, from the PTX, and with scratch. */
TEST_IMPL(runs_on_gpu) {
    if (!have_gpu()) {
        fprintf(stderr, "SKIP runs_on_gpu: %s\n", kiln_errmsg());
        return;
    }
    if (!have_nvrtc()) return;
    kiln_engine *e = NULL;
    ASSERT_OK(build(M_CUDA, &e));
    ASSERT(e->acu[0].cubin_size > 0 && e->acu[0].sm > 0);
    run_check(e, 7);
    ASSERT_EQ(e->acu[0].from_ptx, 0);
    /* the same engine, loaded again with the PTX forced: the driver compiles it */
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    setenv("KILN_AOT_CUDA_PTX", "1", 1);
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    run_check(e2, 8);
    ASSERT_EQ(e2->acu[0].from_ptx, 1);
    unsetenv("KILN_AOT_CUDA_PTX");
    kiln_engine_free(e2);
    kiln_free(buf);
    kiln_engine_free(e);
    /* PTX given as text (NVRTC's output for the same kernel) */
    char *ptx = NULL;
    size_t n = 0;
    const kiln__cuda_info *info = NULL;
    ASSERT_OK(kiln__cuda_init(NULL, &info));
    ASSERT_OK(kiln__nvrtc_ptx(k_cuda, "test", info->sm_major * 10 + info->sm_minor, &ptx, &n));
    g_ptx = ptx;
    ASSERT_OK(build(M_PTX_TEXT, &e));
    run_check(e, 9);
    kiln_engine_free(e);
    kiln_free(ptx);
    /* two AOT layers on device memory: captured as a CUDA graph, replayed */
    ASSERT_OK(build_net(M_CUDA, 1, &e));
    ASSERT_EQ(e->nacu, 2);
    run_check_n(e, 11, 2);
    kiln_engine_free(e);
    /* Triton's two hidden trailing pointers: a scratch buffer and NULL */
    ASSERT_OK(build(M_CUDA_SCRATCH, &e));
    run_check(e, 10);
    kiln_engine_free(e);
}

TEST_LIST(TEST_ENTRY(signature_checked_against_ptx), TEST_ENTRY(engine_file_round_trip), TEST_ENTRY(section_bytes_flipped),
          TEST_ENTRY(hidden_scratch_declared), TEST_ENTRY(nvrtc_error_fails_build), TEST_ENTRY(nvrtc_output_cached), TEST_ENTRY(cuda_module_api_errors),
          TEST_ENTRY(runs_on_gpu))
