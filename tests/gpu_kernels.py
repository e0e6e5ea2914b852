#!/usr/bin/env python3
"""Check kiln's built-in CUDA kernels against PyTorch on the GPU.

usage: gpu_kernels.py KERNELS.cubin|.fatbin [HEADER]

Loads the kernel image with cuModuleLoadData and launches each kernel with
cuLaunchKernel (cuda.bindings), the way libkiln's kiln__cuda_launch does,
passing the by-value argument structs of src/device/cuda/cuda_kernel_args.h
(parsed from the header, so the layouts here cannot drift from it).  Every
case uses fresh random inputs and NaN/0xFF-poisoned outputs and compares
with torch (float64 reference where torch has one); FP16/BF16 tolerances
are a few units in the last place of the output type (kernels compute in
float and round once).  Prints one line per failure and a summary; exit
status 1 on any failure.
"""
import ctypes
import math
import os
import re
import sys

import torch
import torch.nn.functional as F
from cuda.bindings import driver as cu

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "..", "src", "device", "cuda", "cuda_kernel_args.h")

# ---- header parsing -----------------------------------------------------------
CT = {"int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64,
      "float": ctypes.c_float, "double": ctypes.c_double}


def parse_header(path):
    src = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    consts = {m[0]: int(m[1]) for m in re.findall(r"#define\s+(\w+)\s+(\d+)", src)}
    structs, enums = {}, {}
    for body, name in re.findall(r"typedef struct \w+ \{(.*?)\} (\w+);", src, re.S):
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            typ, rest = decl.split(None, 1)
            for var in rest.split(","):
                var = var.strip()
                dims = [int(consts.get(d, d)) for d in re.findall(r"\[(\w+)\]", var)]
                t = ctypes.c_void_p if var.startswith("*") else CT[typ]
                var = var.lstrip("*")
                for d in reversed(dims):
                    t = t * d
                fields.append((var.split("[")[0], t))
        structs[name] = type(name, (ctypes.Structure,), {"_fields_": fields})
    for body, name in re.findall(r"typedef enum \w+ \{(.*?)\} (\w+);", src, re.S):
        v = 0
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            if "=" in item:
                item, val = [s.strip() for s in item.split("=")]
                v = int(val)
            enums[item] = v
            v += 1
    return structs, enums


S, E = parse_header(sys.argv[2] if len(sys.argv) > 2 else HEADER)

# ---- driver ---------------------------------------------------------------------


def ok(r):
    err = r[0] if isinstance(r, tuple) else r
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err}")
    return r[1] if isinstance(r, tuple) and len(r) > 1 else None


torch.cuda.init()
torch.empty(1, device="cuda")
MOD = ok(cu.cuModuleLoadData(open(sys.argv[1], "rb").read()))
_fn = {}


def launch(name, n_threads, args, block=256, grid=None):
    if name not in _fn:
        _fn[name] = ok(cu.cuModuleGetFunction(MOD, name.encode()))
    objs = []
    for a in args:
        if isinstance(a, torch.Tensor):
            objs.append(ctypes.c_void_p(a.data_ptr()))
        elif a is None:
            objs.append(ctypes.c_void_p(0))
        elif isinstance(a, ctypes._SimpleCData) or isinstance(a, ctypes.Structure):
            objs.append(a)
        else:
            raise TypeError(a)
    arr = (ctypes.c_void_p * len(objs))(*[ctypes.cast(ctypes.pointer(o), ctypes.c_void_p) for o in objs])
    if grid is None:
        grid = max(1, min((n_threads + block - 1) // block, 65535 * 8))
    ok(cu.cuLaunchKernel(_fn[name], grid, 1, 1, block, 1, 1, 0, 0, ctypes.addressof(arr), 0))
    ok(cu.cuCtxSynchronize())


i32, i64, f32 = ctypes.c_int32, ctypes.c_int64, ctypes.c_float

# ---- bookkeeping ----------------------------------------------------------------
FAILS, COUNT = [], [0]
gen = torch.Generator(device="cuda").manual_seed(1234)
TD = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
      "i64": torch.int64, "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool}
TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}


def check(name, got, ref, tol=None, dt=None):
    COUNT[0] += 1
    if got.shape != ref.shape:
        FAILS.append(f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}")
        return
    if got.dtype.is_floating_point or ref.dtype.is_floating_point:
        g, r = got.double(), ref.double()
        tol = tol if tol is not None else TOL.get(dt, 2e-5)
        bad = ~(torch.isclose(g, r, rtol=tol, atol=tol, equal_nan=True))
        if bad.any():
            i = bad.nonzero()[0].tolist()
            FAILS.append(f"{name}: {int(bad.sum())}/{g.numel()} differ, first at {i}: got {g[tuple(i)].item()} "
                         f"want {r[tuple(i)].item()}")
    else:
        if not torch.equal(got, ref.to(got.dtype)):
            bad = got != ref.to(got.dtype)
            i = bad.nonzero()[0].tolist()
            FAILS.append(f"{name}: {int(bad.sum())} differ, first at {i}: got {got[tuple(i)].item()} "
                         f"want {ref[tuple(i)].item()}")


def rand(shape, dt, lo=-3.0, hi=3.0):
    if dt in ("f32", "f16", "bf16"):
        return (torch.rand(shape, generator=gen, device="cuda") * (hi - lo) + lo).to(TD[dt])
    if dt == "bool":
        return torch.rand(shape, generator=gen, device="cuda") < 0.5
    return torch.randint(int(lo) * 10, int(hi) * 10 + 1, shape, generator=gen, device="cuda").to(TD[dt])


def poison(shape, dt):
    t = torch.empty(shape, dtype=TD[dt] if isinstance(dt, str) else dt, device="cuda")
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    else:
        t.view(torch.uint8).fill_(0xA5) if t.dtype != torch.bool else t.view(torch.uint8).fill_(0xA5)
    return t


def iter_for(out_shape, operands, small=True):
    """kiln_cu_iter over out_shape; operands: list of (shape, strides) broadcast into it."""
    it = S["kiln_cu_iter"]()
    nd = len(out_shape)
    it.ndim = max(nd, 1)
    it.numel = math.prod(out_shape)
    it.small = 1 if small and it.numel < 2**31 else 0
    for d in range(nd):
        it.dims[d] = out_shape[d]
    if nd == 0:
        it.dims[0] = 1
    for k, (shape, st) in enumerate(operands):
        off = nd - len(shape)
        for d in range(len(shape)):
            it.st[k][off + d] = 0 if shape[d] == 1 and out_shape[off + d] != 1 else st[d]
    return it


def bshape(a, b):
    return list(torch.broadcast_shapes(tuple(a), tuple(b)))


# ---- elementwise ---------------------------------------------------------------------
def test_binary():
    shapes = [([2, 3, 4, 5], [3, 1, 5]), ([7, 1], [1, 9]), ([1000], [1000]), ([4, 1], [])]
    fops = {"KILN_CU_ADD": torch.add, "KILN_CU_SUB": torch.sub, "KILN_CU_MUL": torch.mul,
            "KILN_CU_DIV": torch.div, "KILN_CU_POW": torch.pow, "KILN_CU_MAX": torch.maximum,
            "KILN_CU_MIN": torch.minimum, "KILN_CU_FMOD": torch.fmod, "KILN_CU_MOD": torch.remainder,
            "KILN_CU_PRELU": lambda x, z: torch.where(x < 0, z * x, x)}
    iops = dict(fops)
    iops["KILN_CU_DIV"] = lambda x, z: torch.div(x, z, rounding_mode="trunc")
    iops["KILN_CU_POW"] = lambda x, z: torch.pow(x, z.abs())
    iops.update({"KILN_CU_BAND": torch.bitwise_and, "KILN_CU_BOR": torch.bitwise_or,
                 "KILN_CU_BXOR": torch.bitwise_xor})
    for dt in ("f32", "f16", "bf16", "i32", "i64"):
        ops = fops if dt in TOL else iops
        for sa, sb in shapes:
            for small in (True, False):
                for op, ref in ops.items():
                    a, b = rand(sa, dt), rand(sb, dt)
                    if op in ("KILN_CU_DIV", "KILN_CU_FMOD", "KILN_CU_MOD") and dt not in TOL:
                        b = torch.where(b == 0, torch.ones_like(b), b)
                    if op == "KILN_CU_POW":
                        if dt in TOL:
                            a = a.abs() + 0.1
                        else:
                            b = (b.abs() % 4)
                            a = a % 7
                    so = bshape(sa, sb)
                    y = poison(so, dt)
                    it = iter_for(so, [(sa, rand(sa, "f32").stride() if sa else []), (sb, torch.empty(sb).stride()),
                                       (so, torch.empty(so).stride())], small)
                    launch("binary_" + dt, it.numel, [it, a, b, y, i32(E[op])])
                    if dt in TOL:
                        r = ref(a.double(), b.double())
                        if op in ("KILN_CU_POW",):
                            r = ref(a.float(), b.float()).double()
                        if op in ("KILN_CU_FMOD", "KILN_CU_MOD") and dt != "f32":
                            r = ref(a.float(), b.float()).double()  # fmod of rounded inputs is exact
                        r = r.to(TD[dt])
                    else:
                        r = ref(a, b)
                    check(f"binary_{dt} {op} {sa}x{sb} small={small}", y, r, dt=dt)
    # integer division / modulo by zero -> 0 as the CPU op
    a = rand([64], "i32")
    z = torch.zeros(64, dtype=torch.int32, device="cuda")
    for op in ("KILN_CU_DIV", "KILN_CU_MOD", "KILN_CU_FMOD"):
        y = poison([64], "i32")
        it = iter_for([64], [([64], [1]), ([64], [1]), ([64], [1])])
        launch("binary_i32", 64, [it, a, z, y, i32(E[op])])
        check(f"binary_i32 {op} by zero", y, torch.zeros_like(a))
    # compare and logic
    cops = {"KILN_CU_EQ": torch.eq, "KILN_CU_LT": torch.lt, "KILN_CU_GT": torch.gt, "KILN_CU_LE": torch.le,
            "KILN_CU_GE": torch.ge}
    for dt in ("f32", "f16", "bf16", "i32", "i64"):
        for op, ref in cops.items():
            sa, sb = [3, 1, 6], [5, 1]
            a, b = rand(sa, dt), rand(sb, dt)
            b[0] = a[0, 0, :1]  # some equal pairs
            so = bshape(sa, sb)
            y = poison(so, "u8")
            it = iter_for(so, [(sa, torch.empty(sa).stride()), (sb, torch.empty(sb).stride()),
                               (so, torch.empty(so).stride())])
            launch("compare_" + dt, it.numel, [it, a, b, y, i32(E[op])])
            check(f"compare_{dt} {op}", y, ref(a, b).to(torch.uint8))
    for op, ref in {"KILN_CU_AND": torch.logical_and, "KILN_CU_OR": torch.logical_or,
                    "KILN_CU_XOR": torch.logical_xor, "KILN_CU_EQ": torch.eq}.items():
        a, b = rand([4, 9], "bool"), rand([9], "bool")
        y = poison([4, 9], "u8")
        it = iter_for([4, 9], [([4, 9], [9, 1]), ([9], [1]), ([4, 9], [9, 1])])
        launch("compare_bool", 36, [it, a, b, y, i32(E[op])])
        check(f"compare_bool {op}", y, ref(a, b).to(torch.uint8))
    # where, by element size
    for dt, sz in (("u8", 1), ("f16", 2), ("f32", 4), ("i64", 8)):
        c, x, z = rand([4, 1, 6], "bool"), rand([5, 1], dt), rand([6], dt)
        so = [4, 5, 6]
        y = poison(so, dt)
        it = iter_for(so, [([4, 1, 6], [6, 6, 1]), ([5, 1], [1, 1]), ([6], [1])])
        launch(f"where_{sz}", it.numel, [it, c, x, z, y])
        check(f"where_{sz}", y, torch.where(c, x, z))


def test_unary():
    A = E
    acts = {
        "KILN_CU_ACT_RELU": (torch.relu, 0, 0), "KILN_CU_ACT_CLIP": (lambda x: x.clamp(-0.5, 1.25), -0.5, 1.25),
        "KILN_CU_ACT_SIGMOID": (torch.sigmoid, 0, 0),
        "KILN_CU_ACT_HARDSIGMOID": (lambda x: (0.2 * x + 0.5).clamp(0, 1), 0.2, 0.5),
        "KILN_CU_ACT_HARDSWISH": (F.hardswish, 0, 0), "KILN_CU_ACT_TANH": (torch.tanh, 0, 0),
        "KILN_CU_ACT_LEAKYRELU": (lambda x: F.leaky_relu(x, 0.1), 0.1, 0),
        "KILN_CU_ACT_ELU": (lambda x: F.elu(x, 0.7), 0.7, 0),
        "KILN_CU_ACT_SELU": (torch.selu, 1.6732632423543772, 1.0507009873554805),
        "KILN_CU_ACT_GELU": (F.gelu, 0, 0), "KILN_CU_ACT_GELU_TANH": (lambda x: F.gelu(x, approximate="tanh"), 0, 0),
        "KILN_CU_ACT_SOFTPLUS": (F.softplus, 0, 0), "KILN_CU_ACT_SOFTSIGN": (F.softsign, 0, 0),
        "KILN_CU_ACT_MISH": (F.mish, 0, 0), "KILN_CU_ACT_SILU": (F.silu, 0, 0),
        "KILN_CU_ACT_THRESHOLDEDRELU": (lambda x: torch.where(x > 0.3, x, 0 * x), 0.3, 0),
        "KILN_CU_ACT_CELU": (lambda x: F.celu(x, 1.3), 1.3, 0),
        "KILN_CU_ACT_EXP": (torch.exp, 0, 0), "KILN_CU_ACT_LOG": (lambda x: torch.log(x.abs() + 0.01), 0, 0),
        "KILN_CU_ACT_SQRT": (lambda x: torch.sqrt(x.abs()), 0, 0),
        "KILN_CU_ACT_RECIPROCAL": (torch.reciprocal, 0, 0), "KILN_CU_ACT_ABS": (torch.abs, 0, 0),
        "KILN_CU_ACT_NEG": (torch.neg, 0, 0), "KILN_CU_ACT_FLOOR": (torch.floor, 0, 0),
        "KILN_CU_ACT_CEIL": (torch.ceil, 0, 0), "KILN_CU_ACT_ROUND": (torch.round, 0, 0),
        "KILN_CU_ACT_SIGN": (torch.sign, 0, 0), "KILN_CU_ACT_ERF": (torch.erf, 0, 0),
        "KILN_CU_ACT_SIN": (torch.sin, 0, 0), "KILN_CU_ACT_COS": (torch.cos, 0, 0),
        "KILN_CU_ACT_TAN": (torch.tan, 0, 0), "KILN_CU_ACT_ASIN": (lambda x: torch.asin(x / 3.5), 0, 0),
        "KILN_CU_ACT_ACOS": (lambda x: torch.acos(x / 3.5), 0, 0), "KILN_CU_ACT_ATAN": (torch.atan, 0, 0),
        "KILN_CU_ACT_SINH": (torch.sinh, 0, 0), "KILN_CU_ACT_COSH": (torch.cosh, 0, 0),
        "KILN_CU_ACT_ASINH": (torch.asinh, 0, 0), "KILN_CU_ACT_ACOSH": (lambda x: torch.acosh(x.abs() + 1), 0, 0),
        "KILN_CU_ACT_ATANH": (lambda x: torch.atanh(x / 3.5), 0, 0),
        "KILN_CU_ACT_AFFINE": (lambda x: 0.25 * x - 1.5, 0.25, -1.5),
        "KILN_CU_ACT_SHRINK": (lambda x: torch.where(x < -0.5, x + 0.25, torch.where(x > 0.5, x - 0.25, 0 * x)),
                               0.5, 0.25),
    }
    pre = {"KILN_CU_ACT_LOG": lambda x: x.abs() + 0.01, "KILN_CU_ACT_SQRT": torch.abs,
           "KILN_CU_ACT_ASIN": lambda x: x / 3.5, "KILN_CU_ACT_ACOS": lambda x: x / 3.5,
           "KILN_CU_ACT_ATANH": lambda x: x / 3.5, "KILN_CU_ACT_ACOSH": lambda x: x.abs() + 1}
    for dt in ("f32", "f16", "bf16"):
        for act, (ref, a, b) in acts.items():
            n = 3001
            x = rand([n], dt)
            if act == "KILN_CU_ACT_RECIPROCAL":
                x = torch.where(x.abs() < 0.1, torch.full_like(x, 0.5), x)
            x = pre.get(act, lambda v: v)(x.float()).to(TD[dt])
            refx = {"KILN_CU_ACT_LOG": torch.log, "KILN_CU_ACT_SQRT": torch.sqrt, "KILN_CU_ACT_ASIN": torch.asin,
                    "KILN_CU_ACT_ACOS": torch.acos, "KILN_CU_ACT_ATANH": torch.atanh,
                    "KILN_CU_ACT_ACOSH": torch.acosh}.get(act, ref)
            y = poison([n], dt)
            launch("unary_" + dt, n, [i64(n), x, y, i32(A[act]), f32(a), f32(b)])
            r = refx(x.double()).to(TD[dt])
            tol = 3e-5 if dt == "f32" and act in ("KILN_CU_ACT_TAN", "KILN_CU_ACT_COSH", "KILN_CU_ACT_SINH",
                                                  "KILN_CU_ACT_EXP") else None
            check(f"unary_{dt} {act}", y, r, tol=tol, dt=dt)
    for dt in ("f32", "f16", "bf16"):  # IsNaN / IsInf
        x = rand([64], dt, -5, 5)
        x[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0, float("nan"), -float("inf")]).to(TD[dt])
        for what, neg, pos, ref in ((0, 1, 1, torch.isnan(x)), (1, 1, 1, torch.isinf(x)),
                                    (1, 0, 1, torch.isposinf(x)), (1, 1, 0, torch.isneginf(x))):
            y = poison([64], "u8")
            launch("classify_" + dt, 64, [i64(64), x, y, i32(what), i32(neg), i32(pos)])
            check(f"classify_{dt} what={what} neg={neg} pos={pos}", y, ref.to(torch.uint8))
    for dt in ("i32", "i64"):
        for act, ref in {"KILN_CU_ACT_ABS": torch.abs, "KILN_CU_ACT_NEG": torch.neg,
                         "KILN_CU_ACT_RELU": lambda v: v.clamp(min=0), "KILN_CU_ACT_SIGN": torch.sign,
                         "KILN_CU_ACT_CLIP": lambda v: v.clamp(-7, 11)}.items():
            x = rand([777], dt)
            y = poison([777], dt)
            launch("unary_" + dt, 777, [i64(777), x, y, i32(E[act]), i64(-7), i64(11)])
            check(f"unary_{dt} {act}", y, ref(x))


def test_cast():
    names = ["f32", "f16", "bf16", "i8", "u8", "i32", "i64", "bool"]
    for s in names:
        if s in TOL:
            x = rand([500], s, -400, 400)
            x[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5], device="cuda").to(TD[s])
        elif s == "bool":
            x = rand([500], s)
        else:
            x = torch.randint(-128 if s != "u8" else 0, 128 if s != "u8" else 256, (500,), generator=gen,
                              device="cuda").to(TD[s])
            if s in ("i32", "i64"):
                x[:3] = torch.tensor([70000, -70000, 300], device="cuda").to(TD[s])
        for d in names:
            y = poison([500], d if d != "bool" else "u8")
            launch(f"cast_{s}_{d}", 500, [i64(500), x, y])
            # reference: the Cast op's CPU semantics (kiln__ops_cast): float->int truncates, NaN->0,
            # saturates to int64 and wraps to the target; int->int wraps
            xd = x.double().cpu()
            if d == "bool":
                r = (xd != 0).to(torch.uint8)
            elif d in TOL:
                r = x.float().cpu().to(TD[d]) if s != "bool" else xd.to(TD[d])
            elif s in TOL:
                big, low = xd >= 9.2233720368547758e18, xd <= -9.2233720368547758e18
                mid = torch.where(big | low | xd.isnan(), torch.zeros_like(xd), xd).trunc().to(torch.int64)
                lim = torch.iinfo(torch.int64)
                r = torch.where(big, torch.full_like(mid, lim.max), torch.where(low, torch.full_like(mid, lim.min), mid))
                r = r.to(TD[d])
            else:
                r = x.cpu().to(torch.int64).to(TD[d]) if s != "bool" else x.cpu().to(TD[d])
            check(f"cast_{s}_{d}", y.cpu(), r, tol=0, dt=d)


def test_norms():
    for dt in TOL:
        N, C, H, W = 2, 5, 7, 9
        x, sc, b, m, v = rand([N, C, H, W], dt), rand([C], dt), rand([C], dt), rand([C], dt), rand([C], dt, 0.1, 2)
        y = poison([N, C, H, W], dt)
        launch("batchnorm_" + dt, x.numel(), [i64(x.numel()), i64(C), i64(H * W), x, sc, b, m, v, f32(1e-5), y,
                                              i32(E["KILN_CU_ACT_RELU"]), f32(0), f32(0)])
        r = torch.relu(F.batch_norm(x.double(), m.double(), v.double(), sc.double(), b.double(), eps=1e-5))
        check(f"batchnorm_{dt}", y, r.to(TD[dt]), dt=dt)
        # LayerNormalization over the last 2 dims, Instance, Group
        P = S["kiln_cu_norm"]
        x = rand([3, 4, 96], dt)
        sc, b = rand([96], dt), rand([96], dt)
        p = P(planes=12, inner=96, affine=0, eps=1e-5, se=96, be=96, div=1, mod=1, sub=1, cpg=1, groups=1)
        y, mo, ro = poison([3, 4, 96], dt), poison([12], "f32"), poison([12], "f32")
        launch("norm_" + dt, 0, [p, x, sc, b, y, mo, ro], block=128, grid=12)
        r = F.layer_norm(x.double(), [96], sc.double(), b.double(), eps=1e-5)
        check(f"layernorm_{dt}", y, r.to(TD[dt]), tol=TOL[dt] * 4, dt=dt)
        check(f"layernorm_{dt} mean", mo, x.double().mean(-1).flatten(), tol=1e-5)
        check(f"layernorm_{dt} rstd", ro, (x.double().var(-1, unbiased=False) + 1e-5).rsqrt().flatten(), tol=1e-4)
        x = rand([2, 6, 5, 50], dt)
        sc, b = rand([6], dt), rand([6], dt)
        p = P(planes=12, inner=250, affine=1, eps=1e-5, se=1, be=1, div=1, mod=6, sub=1, cpg=1, groups=1)
        y = poison(x.shape, dt)
        launch("norm_" + dt, 0, [p, x, sc, b, y, None, None], block=256, grid=12)
        r = F.instance_norm(x.double(), weight=sc.double(), bias=b.double(), eps=1e-5)
        check(f"instancenorm_{dt}", y, r.to(TD[dt]), tol=TOL[dt] * 4, dt=dt)
        # GroupNormalization v21: 3 groups of 2 channels, per-channel affine
        p = P(planes=6, inner=500, affine=2, eps=1e-5, se=1, be=1, div=1, mod=1, sub=250, cpg=2, groups=3)
        y = poison(x.shape, dt)
        launch("norm_" + dt, 0, [p, x, sc, b, y, None, None], block=256, grid=6)
        r = F.group_norm(x.double(), 3, sc.double(), b.double(), eps=1e-5)
        check(f"groupnorm_{dt}", y, r.to(TD[dt]), tol=TOL[dt] * 4, dt=dt)


def test_softmax():
    for dt in TOL:
        for log in (0, 1):
            x = rand([37, 1000], dt, -8, 8)
            y = poison(x.shape, dt)
            launch("softmax_rows_" + dt, 0, [i64(1000), x, y, i32(log)], block=256, grid=37)
            r = (F.log_softmax if log else F.softmax)(x.double(), -1)
            check(f"softmax_rows_{dt} log={log}", y, r.to(TD[dt]), tol=TOL[dt] * 2, dt=dt)
            x = rand([3, 17, 29], dt, -8, 8)
            y = poison(x.shape, dt)
            launch("softmax_cols_" + dt, 3 * 29, [i64(3), i64(17), i64(29), x, y, i32(log)])
            r = (F.log_softmax if log else F.softmax)(x.double(), 1)
            check(f"softmax_cols_{dt} log={log}", y, r.to(TD[dt]), tol=TOL[dt] * 2, dt=dt)


def reduce_iters(shape, axes):
    keep = [d for d in range(len(shape)) if d not in axes]
    st = torch.empty(shape).stride()
    ko = [shape[d] for d in keep]
    kst = torch.empty(ko).stride() if ko else []
    out = S["kiln_cu_iter"](ndim=max(1, len(keep)), small=0, numel=max(1, math.prod(ko)))
    for i, d in enumerate(keep):
        out.dims[i], out.st[0][i], out.st[1][i] = shape[d], st[d], kst[i]
    if not keep:
        out.dims[0] = 1
    red = S["kiln_cu_iter"](ndim=len(axes), small=0, numel=math.prod(shape[d] for d in axes))
    for i, d in enumerate(axes):
        red.dims[i], red.st[0][i] = shape[d], st[d]
    return out, red, ko


def prod_axes(x, axes):
    for a in sorted(axes, reverse=True):
        x = x.prod(a)
    return x


def test_reduce():
    refs = {"KILN_CU_RSUM": lambda x, a: x.sum(a), "KILN_CU_RMEAN": lambda x, a: x.mean(a),
            "KILN_CU_RMAX": lambda x, a: x.amax(a), "KILN_CU_RMIN": lambda x, a: x.amin(a),
            "KILN_CU_RPROD": lambda x, a: prod_axes(x, a),
            "KILN_CU_RL1": lambda x, a: x.abs().sum(a), "KILN_CU_RL2": lambda x, a: x.square().sum(a).sqrt(),
            "KILN_CU_RLOGSUM": lambda x, a: x.sum(a).log(), "KILN_CU_RLOGSUMEXP": lambda x, a: x.logsumexp(a),
            "KILN_CU_RSUMSQUARE": lambda x, a: x.square().sum(a)}
    for dt in TOL:
        for shape, axes in (([4, 6, 50], [2]), ([4, 6, 50], [1]), ([3, 4, 5, 6], [1, 3]), ([2, 300], [0, 1])):
            for op, ref in refs.items():
                lo, hi = (0.5, 1.5) if op in ("KILN_CU_RPROD", "KILN_CU_RLOGSUM") else (-2, 2)
                x = rand(shape, dt, lo, hi)
                out, red, ko = reduce_iters(shape, axes)
                y = poison(ko or [1], dt)
                launch("reduce_" + dt, 0, [out, red, x, y, i32(E[op])], block=128, grid=out.numel)
                r = ref(x.double(), axes).reshape(ko or [1])
                check(f"reduce_{dt} {op} {shape} axes={axes}", y, r.to(TD[dt]), tol=TOL[dt] * 4, dt=dt)
        for op, ref in (("KILN_CU_RARGMAX", torch.argmax), ("KILN_CU_RARGMIN", torch.argmin)):
            x = rand([5, 40, 7], dt)
            x[0, 3:9, 0] = x[0, 2, 0]  # ties: the first index wins
            out, red, ko = reduce_iters([5, 40, 7], [1])
            y = poison(ko, "i64")
            launch("reduce_arg_" + dt, 0, [out, red, x, y, i32(E[op]), i32(0)], block=64, grid=out.numel)
            r = ref(x.float(), 1)
            check(f"reduce_arg_{dt} {op}", y, r)
        # NaN, with the CPU op's sequential rule: a NaN first element wins, later ones never
        x = rand([2, 9], dt)
        x[0, 0] = float("nan")
        x[1, 4] = float("nan")
        out, red, ko = reduce_iters([2, 9], [1])
        y = poison(ko, "i64")
        launch("reduce_arg_" + dt, 0, [out, red, x, y, i32(E["KILN_CU_RARGMAX"]), i32(0)], block=32, grid=2)
        xf = x.float().clone()
        xf[1, 4] = -float("inf")
        check(f"reduce_arg_{dt} NaN rule", y, torch.stack([torch.tensor(0, device="cuda"), xf[1].argmax()]))
    for dt in ("i32", "i64"):
        x = rand([6, 33], dt)
        out, red, ko = reduce_iters([6, 33], [1])
        for op, ref in (("KILN_CU_RSUM", lambda v: v.sum(1)), ("KILN_CU_RMAX", lambda v: v.amax(1)),
                        ("KILN_CU_RMIN", lambda v: v.amin(1))):
            y = poison(ko, dt)
            launch("reduce_" + dt, 0, [out, red, x, y, i32(E[op])], block=64, grid=6)
            check(f"reduce_{dt} {op}", y, ref(x).to(TD[dt]))


def test_pool():
    P = S["kiln_cu_pool"]
    for dt in TOL:
        for (k, s, pad, dil, ceil) in ((3, 2, 1, 1, False), (2, 2, 0, 1, True), (3, 1, 1, 2, False)):
            x = rand([2, 3, 13, 11], dt)
            N, C, H, W = x.shape
            yt, it = F.max_pool2d(x.float(), k, s, pad, dil, ceil_mode=ceil, return_indices=True)
            OH, OW = yt.shape[2:]
            pe_h = pe_w = pad  # ceil_mode's extra windows are not padding: the divisor stops at H + pad
            g = P(planes=N * C, kind=0, count_pad=0, order=0, p=0)
            g.id[:] = [1, H, W]
            g.o[:] = [1, OH, OW]
            g.k[:], g.s[:], g.d[:], g.pb[:], g.pe[:] = [1, k, k], [1, s, s], [1, dil, dil], [0, pad, pad], [0, pe_h, pe_w]
            y, ind = poison(yt.shape, dt), poison(yt.shape, "i64")
            launch("pool_" + dt, yt.numel(), [g, x, y, ind])
            check(f"maxpool_{dt} k{k} s{s} p{pad} d{dil} ceil={ceil}", y, yt.to(TD[dt]), dt=dt)
            plane = (torch.arange(N * C, device="cuda") * H * W).reshape(N, C, 1, 1)
            check(f"maxpool_{dt} indices k{k}", ind, it + plane)
            if dil == 1:
                for cip in (0, 1):
                    yt = F.avg_pool2d(x.double(), k, s, pad, ceil_mode=ceil, count_include_pad=bool(cip))
                    g.kind, g.count_pad = 1, cip
                    y = poison(yt.shape, dt)
                    launch("pool_" + dt, yt.numel(), [g, x, y, None])
                    check(f"avgpool_{dt} k{k} s{s} p{pad} cip={cip} ceil={ceil}", y, yt.to(TD[dt]), dt=dt)


def conv_geom(x, w, s, p, d, g, oh, ow, act=0, a=0.0, b=0.0):
    N, C, H, W = x.shape
    return S["kiln_cu_conv"](n=N, c=C, h=H, w=W, k=0, oh=oh, ow=ow, kh=w.shape[2], kw=w.shape[3], sh=s, sw=s,
                             ph=p, pw=p, dh=d, dw=d, group=g, act=act, act_a=a, act_b=b)


def test_conv():
    relu = E["KILN_CU_ACT_RELU"]
    cases = [(1, 8, 16, 15, 3, 1, 1, 1, 1), (2, 6, 9, 12, 3, 2, 1, 1, 3), (1, 16, 16, 20, 3, 1, 1, 1, 16),
             (1, 8, 8, 10, 3, 1, 2, 2, 8), (2, 4, 6, 7, 1, 1, 0, 1, 1), (1, 3, 5, 17, 5, 2, 2, 1, 1),
             (1, 4, 4, 9, 3, 2, 1, 3, 2)]
    for dt in TOL:
        for (N, C, K, HW, kk, s, p, d, g) in cases:
            x, w, bias = rand([N, C, HW, HW + 1], dt), rand([K, C // g, kk, kk], dt, -0.5, 0.5), rand([K], dt)
            r = torch.relu(F.conv2d(x.double(), w.double(), bias.double(), s, p, d, g))
            OH, OW = r.shape[2:]
            geo = conv_geom(x, w, s, p, d, g, OH, OW, relu)
            geo.k = K
            y = poison(r.shape, dt)
            launch("conv_direct_" + dt, r.numel(), [geo, x, w, bias, y])
            tol = TOL[dt] * 4
            check(f"conv_direct_{dt} {N, C, K, HW, kk, s, p, d, g}", y, r.to(TD[dt]), tol=tol, dt=dt)
            # im2col + GEMM (torch matmul stands in for kiln__cuda_gemm) + bias_act
            ck = C * kk * kk
            col = poison([N, ck, OH * OW], dt)  # all N images in one launch
            launch("im2col_" + dt, N * ck * OH * OW, [geo, i64(N), i64(ck * OH * OW), x, col])
            ref_col = F.unfold(x.float(), kk, d, p, s).to(TD[dt])
            check(f"im2col_{dt} {N, C, K, HW, kk, s, p, d, g}", col, ref_col, tol=0, dt=dt)
            cg = col.float().reshape(N, g, ck // g, OH * OW)
            wg = w.float().reshape(g, K // g, ck // g)
            yy = torch.einsum("gkc,ngcs->ngks", wg, cg).reshape(N, K, OH, OW).to(TD[dt]).contiguous()
            launch("bias_act_" + dt, yy.numel(), [i64(yy.numel()), i64(K), i64(OH * OW), yy, bias, i32(relu),
                                                  f32(0), f32(0)])
            check(f"im2col+gemm+bias_act_{dt} {N, C, K, HW, kk, s, p, d, g}", yy, r.to(TD[dt]), tol=tol * 2, dt=dt)
        for (N, C, K, H, kk, s, p, d, g) in ((1, 8, 4, 9, 2, 2, 0, 1, 1), (2, 6, 6, 7, 3, 2, 1, 1, 3),
                                             (1, 4, 8, 5, 4, 2, 1, 1, 1), (1, 4, 4, 6, 3, 3, 2, 2, 2)):
            x, w, bias = rand([N, C, H, H + 2], dt), rand([C, K // g, kk, kk], dt, -0.5, 0.5), rand([K], dt)
            r = F.conv_transpose2d(x.double(), w.double(), bias.double(), s, p, 0, g, d)
            OH, OW = r.shape[2:]
            geo = conv_geom(x, w, s, p, d, g, OH, OW)
            geo.k = K
            y = poison(r.shape, dt)
            launch("conv_transpose_" + dt, r.numel(), [geo, x, w, bias, y])
            check(f"conv_transpose_{dt} {N, C, K, H, kk, s, p, d, g}", y, r.to(TD[dt]), tol=TOL[dt] * 4, dt=dt)


def test_copy():
    for sz, dt in ((1, "u8"), (2, "bf16"), (4, "f32"), (8, "i64")):
        x = rand([3, 4, 5, 6], dt)
        # Transpose (0, 2, 3, 1)
        perm = [0, 2, 3, 1]
        r = x.permute(perm).contiguous()
        y = poison(r.shape, dt)
        it = iter_for(list(r.shape), [(list(r.shape), [x.stride(p) for p in perm]),
                                      (list(r.shape), list(r.stride()))])
        launch(f"copy_{sz}", it.numel, [it, x, y])
        check(f"copy_{sz} transpose", y, r, tol=0)
        # Slice with a negative step: x[:, 3:0:-2, ::2, 1:]
        v = x[:, 1:4:2, ::2, 1:].flip(1)
        r = v.contiguous()
        base = x[:, 3:, :, 1:]
        y = poison(r.shape, dt)
        it = iter_for(list(r.shape), [(list(r.shape), [x.stride(0), -2 * x.stride(1), 2 * x.stride(2), 1]),
                                      (list(r.shape), list(r.stride()))])
        launch(f"copy_{sz}", it.numel, [it, base, y])
        check(f"copy_{sz} slice", y, r, tol=0)
        # Expand [4, 1, 6] -> [3, 4, 5, 6]
        e = rand([4, 1, 6], dt)
        y = poison([3, 4, 5, 6], dt)
        it = iter_for([3, 4, 5, 6], [([4, 1, 6], [6, 6, 1]), ([3, 4, 5, 6], [120, 30, 6, 1])])
        launch(f"copy_{sz}", it.numel, [it, e, y])
        check(f"copy_{sz} expand", y, e.expand(3, 4, 5, 6), tol=0)
        # Concat along axis 1 of two parts
        a, b = rand([2, 3, 5], dt), rand([2, 4, 5], dt)
        y = poison([2, 7, 5], dt)
        for part, off in ((a, 0), (b, 3)):
            it = iter_for(list(part.shape), [(list(part.shape), list(part.stride())), (list(part.shape), [35, 5, 1])])
            launch(f"copy_{sz}", it.numel, [it, part, y[:, off:]])
        check(f"copy_{sz} concat", y, torch.cat([a, b], 1), tol=0)
        # Tile [2, 3] x (2, 3): dims as [rep, dim] pairs
        t = rand([2, 3], dt)
        y = poison([4, 9], dt)
        it = iter_for([2, 2, 3, 3], [([2, 2, 3, 3], [0, 3, 0, 1]), ([2, 2, 3, 3], [18, 9, 3, 1])])
        launch(f"copy_{sz}", it.numel, [it, t, y])
        check(f"copy_{sz} tile", y, t.repeat(2, 3), tol=0)
        # Pad modes (torch: constant, reflect, replicate, circular) on [2, 3, 7, 8]
        x = rand([2, 3, 7, 8], dt)
        for mode, tm in ((0, "constant"), (1, "reflect"), (2, "replicate"), (3, "circular")):
            pads = (2, 3, 1, 4)  # w begin/end, h begin/end
            if tm == "constant":
                r = F.pad(x.float() if dt == "bf16" else x, pads, "constant", 0).to(x.dtype) if sz != 1 else \
                    F.pad(x, pads, "constant", 0)
            else:
                r = F.pad(x.float(), pads, tm).to(x.dtype)
            p = S["kiln_cu_pad"](ndim=4, mode=mode, value=0)
            p.out_dims[:4] = list(r.shape)
            p.in_dims[:4] = list(x.shape)
            p.begin[:4] = [0, 0, pads[2], pads[0]]
            y = poison(r.shape, dt)
            launch(f"pad_{sz}", r.numel(), [p, x, y])
            check(f"pad_{sz} {tm}", y, r, tol=0)
        # Gather along axis 1 with negative indices
        x = rand([3, 10, 4], dt)
        for it_name, idt in (("i32", torch.int32), ("i64", torch.int64)):
            idx = torch.randint(-10, 10, (6,), generator=gen, device="cuda").to(idt)
            y = poison([3, 6, 4], dt)
            launch(f"gather_{sz}_{it_name}", 72, [S["kiln_cu_check"](), i64(3), i64(10), i64(4), i64(6), idx, x, y])
            check(f"gather_{sz}_{it_name}", y, x[:, (idx.long() % 10)], tol=0)
        # an index out of range is reported in the fault record (mapped page-locked memory), tagged
        fault = S["kiln_cu_fault"].from_address(ok(cu.cuMemAllocHost(ctypes.sizeof(S["kiln_cu_fault"]))))
        ctypes.memset(ctypes.addressof(fault), 0, ctypes.sizeof(fault))
        idx = torch.tensor([1, 12, 0], dtype=torch.int64, device="cuda")
        y = poison([3, 3, 4], dt)
        launch(f"gather_{sz}_i64", 36, [S["kiln_cu_check"](fault=ctypes.addressof(fault), tag=77), i64(3), i64(10),
                                         i64(4), i64(3), idx, x, y])
        torch.cuda.synchronize()
        COUNT[0] += 1
        got = (fault.code, fault.tag, fault.value, fault.lo, fault.hi, fault.pos, fault.input)
        if got != (E.get("KILN_CU_FAULT_INDEX", 1), 77, 12, -10, 10, 1, 1):
            FAILS.append(f"gather_{sz}_i64 out of range: fault record {got}")


def test_resize():
    R = S["kiln_cu_resize"]
    for dt in TOL:
        x = rand([2, 3, 11, 14], dt)
        for (mode, coord, nearest, tmode, ac, size) in (
                (1, 0, 0, "bilinear", False, (23, 9)), (1, 2, 0, "bilinear", True, (20, 31)),
                (2, 0, 0, "bicubic", False, (17, 28)), (0, 3, 2, "nearest", None, (22, 28)),
                (0, 0, 1, "nearest-exact", None, (25, 7))):
            kw = {"align_corners": ac} if ac is not None else {}
            r = F.interpolate(x.double(), size=size, mode=tmode, **kw)
            p = R(ndim=4, mode=mode, nearest=nearest, coord=coord, have_sizes=1, exclude_outside=0, cubic_a=-0.75,
                  extrapolation=0)
            p.in_dims[:4] = list(x.shape)
            p.out_dims[:4] = list(r.shape)
            p.scale[:4] = [1.0, 1.0, size[0] / x.shape[2], size[1] / x.shape[3]]
            y = poison(r.shape, dt)
            launch("resize_" + dt, r.numel(), [p, x, y])
            check(f"resize_{dt} {tmode} ac={ac} {size}", y, r.to(TD[dt]), tol=TOL[dt] * 4, dt=dt)


def test_harness_fails():
    """Negative control: a kernel run with the wrong op must be caught."""
    a, b = rand([100], "f32"), rand([100], "f32")
    y = poison([100], "f32")
    it = iter_for([100], [([100], [1]), ([100], [1]), ([100], [1])])
    launch("binary_f32", 100, [it, a, b, y, i32(E["KILN_CU_SUB"])])
    n = len(FAILS)
    check("control", y, a + b)
    check("control unwritten", poison([100], "f32"), a + b)
    if len(FAILS) != n + 2:
        FAILS.append("harness: a wrong or unwritten output passed the comparison")
    else:
        del FAILS[n:]


for t in (test_harness_fails, test_binary, test_unary, test_cast, test_norms, test_softmax, test_reduce, test_pool, test_conv,
          test_copy, test_resize):
    n0, f0 = COUNT[0], len(FAILS)
    try:
        t()
    except Exception as e:  # a launch failure: report and go on with the next family
        FAILS.append(f"{t.__name__}: {type(e).__name__}: {e}")
    print(f"{t.__name__}: {COUNT[0] - n0} checks, {len(FAILS) - f0} failed", flush=True)
for f in FAILS[:200]:
    print("FAIL", f)
print(f"gpu_kernels: {COUNT[0]} checks, {len(FAILS)} failed on {torch.cuda.get_device_name()}")
sys.exit(1 if FAILS else 0)
