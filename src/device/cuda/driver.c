/*
 * driver.c — the CUDA driver API, loaded with dlopen at first use.
 *
 * kiln__cuda_init loads libcuda.so.1, resolves the functions of kiln__cu
 * (the versioned names the toolkit's header maps to: cuMemAlloc_v2 and so on), runs cuInit,
 * picks device $KILN_CUDA_DEVICE (default 0), retains its primary context
 * and reads the facts kiln needs.  The outcome (success, or the message of
 * the failure) is computed once and remembered: a machine without a driver
 * answers every later call with the same clear "no CUDA device (...)".
 */
#include "device/cuda/cuda_int.h"
#include "device/cuda/cudnn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    CU_ATTR_SM_MAJOR = 75,
    CU_ATTR_SM_MINOR = 76,
    CU_ATTR_SMEM_OPTIN = 97, /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    CU_ERR_OOM = 2,
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static kiln__cu g_cu;
static kiln__cuda_info g_info;
static CUcontext g_ctx;
static int g_status;           /* 0 ready, else the KILN_E* of the failure */
static char g_why[512];        /* the failure's message */
static _Thread_local int t_entered;

static const char *err_text(CUresult r, char *buf, size_t size) {
    const char *name = NULL, *str = NULL;
    if (g_cu.GetErrorName) g_cu.GetErrorName(r, &name);
    if (g_cu.GetErrorString) g_cu.GetErrorString(r, &str);
    snprintf(buf, size, "%s: %s", name ? name : "CUDA error", str ? str : "unknown");
    return buf;
}

int kiln__cuda_check(CUresult r, const char *call) {
    if (r == 0) return 0;
    char b[256];
    return kiln__err(r == CU_ERR_OOM ? KILN_ENOMEM : KILN_EDEVICE, "%s: %s (error %d)", call,
                     err_text(r, b, sizeof b), r);
}

static void fail(const char *fmt, const char *a, const char *b) {
    char m[400];
    snprintf(m, sizeof m, fmt, a, b);
    snprintf(g_why, sizeof g_why, "no CUDA device (%s)", m);
    g_status = KILN_EDEVICE;
}

const char *kiln__dl_resolve(void *h, const kiln__dl_sym *syms, size_t n) {
    for (size_t i = 0; i < n; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot && syms[i].alt) *syms[i].slot = dlsym(h, syms[i].alt);
        if (!*syms[i].slot) return syms[i].name;
    }
    return NULL;
}

static void init_once(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        fail("cannot load the driver library libcuda.so.1: %s%s", e ? e : "not found", "");
        return;
    }
    const kiln__dl_sym need[] = {
#define S(field, a, b) {(void **)&g_cu.field, a, b}
        S(Init, "cuInit", NULL),
        S(DriverGetVersion, "cuDriverGetVersion", NULL),
        S(DeviceGetCount, "cuDeviceGetCount", NULL),
        S(DeviceGet, "cuDeviceGet", NULL),
        S(DeviceGetName, "cuDeviceGetName", NULL),
        S(DeviceGetAttribute, "cuDeviceGetAttribute", NULL),
        S(DeviceTotalMem, "cuDeviceTotalMem_v2", "cuDeviceTotalMem"),
        S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
        S(CtxSetCurrent, "cuCtxSetCurrent", NULL),
        S(CtxSynchronize, "cuCtxSynchronize", NULL),
        S(MemGetInfo, "cuMemGetInfo_v2", "cuMemGetInfo"),
        S(MemAlloc, "cuMemAlloc_v2", "cuMemAlloc"),
        S(MemFree, "cuMemFree_v2", "cuMemFree"),
        S(MemAllocHost, "cuMemAllocHost_v2", "cuMemAllocHost"),
        S(MemFreeHost, "cuMemFreeHost", NULL),
        S(MemcpyAsync, "cuMemcpyAsync", NULL),
        S(MemsetD8Async, "cuMemsetD8Async", NULL),
        S(StreamCreate, "cuStreamCreate", NULL),
        S(StreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy"),
        S(StreamSynchronize, "cuStreamSynchronize", NULL),
        S(EventCreate, "cuEventCreate", NULL),
        S(EventDestroy, "cuEventDestroy_v2", "cuEventDestroy"),
        S(EventRecord, "cuEventRecord", NULL),
        S(EventSynchronize, "cuEventSynchronize", NULL),
        S(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
        S(ModuleLoadData, "cuModuleLoadData", NULL),
        S(ModuleGetFunction, "cuModuleGetFunction", NULL),
        S(FuncSetAttribute, "cuFuncSetAttribute", NULL),
        S(LaunchKernel, "cuLaunchKernel", NULL),
        S(StreamBeginCapture, "cuStreamBeginCapture_v2", NULL),
        S(StreamEndCapture, "cuStreamEndCapture", NULL),
        S(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", NULL),
        S(GraphLaunch, "cuGraphLaunch", NULL),
        S(GraphExecDestroy, "cuGraphExecDestroy", NULL),
        S(GraphDestroy, "cuGraphDestroy", NULL),
        S(GetErrorString, "cuGetErrorString", NULL),
        S(GetErrorName, "cuGetErrorName", NULL),
        S(PointerGetAttributes, "cuPointerGetAttributes", NULL),
        S(LinkCreate, "cuLinkCreate_v2", "cuLinkCreate"),
        S(LinkAddData, "cuLinkAddData_v2", "cuLinkAddData"),
        S(LinkComplete, "cuLinkComplete", NULL),
        S(LinkDestroy, "cuLinkDestroy", NULL),
        S(ModuleUnload, "cuModuleUnload", NULL),
#undef S
    };
    const char *miss = kiln__dl_resolve(h, need, sizeof need / sizeof need[0]);
    if (miss) {
        fail("libcuda.so.1 lacks %s%s (driver too old?)", miss, "");
        return;
    }
    char b[256];
    CUresult r = g_cu.Init(0);
    if (r) {
        fail("cuInit: %s%s", err_text(r, b, sizeof b), "");
        return;
    }
    int count = 0;
    g_cu.DriverGetVersion(&g_info.driver_version);
    if ((r = g_cu.DeviceGetCount(&count)) || count <= 0) {
        fail("%s%s", r ? err_text(r, b, sizeof b) : "the driver sees no GPU", "");
        return;
    }
    const char *env = getenv("KILN_CUDA_DEVICE");
    int ord = env && *env ? atoi(env) : 0;
    if (ord < 0 || ord >= count) {
        char n[64];
        snprintf(n, sizeof n, "%d", count);
        fail("KILN_CUDA_DEVICE=%s, the driver sees %s device(s)", env, n);
        return;
    }
    CUdevice dev;
    if ((r = g_cu.DeviceGet(&dev, ord)) || (r = g_cu.DevicePrimaryCtxRetain(&g_ctx, dev))) {
        fail("cuDeviceGet/cuDevicePrimaryCtxRetain: %s%s", err_text(r, b, sizeof b), "");
        return;
    }
    g_info.ordinal = ord;
    g_cu.DeviceGetName(g_info.name, (int)sizeof g_info.name, dev);
    g_cu.DeviceGetAttribute(&g_info.sm_major, CU_ATTR_SM_MAJOR, dev);
    g_cu.DeviceGetAttribute(&g_info.sm_minor, CU_ATTR_SM_MINOR, dev);
    g_cu.DeviceGetAttribute(&g_info.smem_optin, CU_ATTR_SMEM_OPTIN, dev);
    g_cu.DeviceTotalMem(&g_info.total_mem, dev);
    g_status = 0;
}

int kiln__cuda_init(const kiln__cu **cu, const kiln__cuda_info **info) {
    pthread_once(&g_once, init_once);
    if (g_status) return kiln__err(g_status, "%s", g_why);
    if (!t_entered) {
        CUresult r = g_cu.CtxSetCurrent(g_ctx);
        if (r) return kiln__cuda_check(r, "cuCtxSetCurrent");
        t_entered = 1;
    }
    if (cu) *cu = &g_cu;
    if (info) *info = &g_info;
    return 0;
}

int kiln__cuda_enter(void) { return kiln__cuda_init(NULL, NULL); }

int kiln__cuda_have_kernels(void) { return kiln__cuda_fatbin_size > 0; }

KILN_API int kiln_devices_describe(char *buf, size_t size) {
    KILN__ARG(buf || !size, 0);
    const kiln__cuda_info *in = NULL;
    size_t n = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (n < size) n += (size_t)snprintf(buf + n, size - n, __VA_ARGS__);                       \
    } while (0)
    if (size) buf[0] = 0;
    PUT("cpu: %s\n", kiln_cpu_signature());
    int rc = kiln__cuda_init(NULL, &in);
    if (rc) {
        PUT("cuda: %s\n", kiln_errmsg());
    } else {
        PUT("cuda %d: %s, sm_%d%d, %.1f GiB, driver %d.%d\n", in->ordinal, in->name, in->sm_major, in->sm_minor,
            (double)in->total_mem / (1024.0 * 1024.0 * 1024.0), in->driver_version / 1000,
            in->driver_version % 1000 / 10);
    }
    if (kiln__cuda_have_kernels())
        PUT("cuda kernels: embedded fatbin, %lu bytes\n", kiln__cuda_fatbin_size);
    else
        PUT("cuda kernels: built without CUDA kernels (nvcc not found at build)\n");
    if (!rc) { /* optional: Conv tactics when found */
        char line[1200];
        kiln__cudnn_describe(line, sizeof line);
        PUT("%s", line);
    }
#undef PUT
    return rc ? 0 : 1;
}
