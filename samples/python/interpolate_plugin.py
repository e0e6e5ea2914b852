#!/usr/bin/env python3
"""The documents' `interpolate` plugin (torch2trt style) defined from Python
with kiln.plugin.SourcePlugin: C source compiled on first use, cached, and
rebuilt when it changes.  torch.nn.functional.interpolate semantics on NCHW
float: `size` (output H, W), `mode` "nearest" | "bilinear", `align_corners`.

    python3 interpolate_plugin.py [--mode nearest|bilinear] [--align_corners] [--size 13 17]
"""
import argparse
import os
import sys

import numpy as np

import kiln
import kiln.plugin as kp

HELPERS = r"""
/* Source coordinate of output index o (torch's rules). */
static double src_coord(int64_t o, int64_t in, int64_t out, int bilinear, int align) {
    if (!bilinear) return floor((double)o * (double)in / (double)out);
    if (align) return out > 1 ? (double)o * (double)(in - 1) / (double)(out - 1) : 0.0;
    double s = ((double)o + 0.5) * (double)in / (double)out - 0.5;
    return s < 0 ? 0 : s;
}
"""

FORWARD = r"""
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    const char *mode = kiln_attrs_string(c->attrs, "mode");
    int bil = strcmp(mode, "bilinear") == 0, align = (int)kiln_attrs_int(c->attrs, "align_corners");
    if (!bil && strcmp(mode, "nearest"))
        return kiln_set_error(KILN_EATTR, "interpolate: mode '%s', expected nearest or bilinear", mode);
    int64_t H = x->dims[2], W = x->dims[3], OH = y->dims[2], OW = y->dims[3];
    const float *xs = IN(0);
    float *ys = OUT(0);
    for (int64_t p = 0; p < x->dims[0] * x->dims[1]; p++) {
        const float *xp = xs + p * H * W;
        float *yp = ys + p * OH * OW;
        for (int64_t oy = 0; oy < OH; oy++) {
            double sy = src_coord(oy, H, OH, bil, align);
            int64_t y0 = (int64_t)sy < H - 1 ? (int64_t)sy : H - 1, y1 = y0 + 1 < H ? y0 + 1 : H - 1;
            float wy = (float)(sy - (double)y0);
            for (int64_t ox = 0; ox < OW; ox++) {
                double sx = src_coord(ox, W, OW, bil, align);
                int64_t x0 = (int64_t)sx < W - 1 ? (int64_t)sx : W - 1, x1 = x0 + 1 < W ? x0 + 1 : W - 1;
                if (!bil) { yp[oy * OW + ox] = xp[y0 * W + x0]; continue; }
                float wx = (float)(sx - (double)x0);
                float top = xp[y0 * W + x0] + (xp[y0 * W + x1] - xp[y0 * W + x0]) * wx;
                float bot = xp[y1 * W + x0] + (xp[y1 * W + x1] - xp[y1 * W + x0]) * wx;
                yp[oy * OW + ox] = top + (bot - top) * wy;
            }
        }
    }
"""

interpolate = kp.SourcePlugin("sample::interpolate_py", forward=FORWARD, extra_src=HELPERS,
                              attrs={"mode": "str", "align_corners": "int"}, cflags=["-O2"])


def reference(x, size, mode, align):
    n, c, h, w = x.shape
    oh, ow = size

    def coords(o, i, out):
        o = np.arange(out, dtype=np.float64)
        if mode == "nearest":
            s = np.floor(o * i / out)
        elif align:
            s = o * (i - 1) / (out - 1) if out > 1 else np.zeros(out)
        else:
            s = np.maximum((o + 0.5) * i / out - 0.5, 0)
        i0 = np.minimum(s.astype(np.int64), i - 1)
        return i0, np.minimum(i0 + 1, i - 1), (s - i0).astype(np.float32)

    y0, y1, wy = coords(None, h, oh)
    x0, x1, wx = coords(None, w, ow)
    if mode == "nearest":
        return x[:, :, y0][:, :, :, x0]
    top = x[:, :, y0][:, :, :, x0] + (x[:, :, y0][:, :, :, x1] - x[:, :, y0][:, :, :, x0]) * wx
    bot = x[:, :, y1][:, :, :, x0] + (x[:, :, y1][:, :, :, x1] - x[:, :, y1][:, :, :, x0]) * wx
    return top + (bot - top) * wy[:, None]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["nearest", "bilinear"], default="bilinear")
    ap.add_argument("--align_corners", action="store_true")
    ap.add_argument("--size", type=int, nargs=2, default=[13, 17])
    ap.add_argument("--rebuild", action="store_true", help="compile even if cached")
    args = ap.parse_args(argv)
    lib = interpolate.build(rebuild=args.rebuild)
    print(f"plugin library: {lib}")
    b = kiln.Builder()
    net = b.create_network()
    x = net.add_input("x", kiln.float32, (2, 3, 6, 8))
    layer = interpolate.add_to_network(net, [x], [((2, 3, *args.size), kiln.float32)], mode=args.mode,
                                       align_corners=int(args.align_corners))
    net.mark_output(layer.get_output(0))
    eng = b.build_engine(net, b.create_builder_config())
    seed = int.from_bytes(os.urandom(4), "little")
    xv = np.random.default_rng(seed).standard_normal((2, 3, 6, 8)).astype(np.float32)
    y = eng.create_execution_context().execute({"x": xv})[eng.outputs[0]]
    want = reference(xv, args.size, args.mode, args.align_corners)
    ok = y.shape == want.shape and np.allclose(y, want, rtol=1e-5, atol=1e-5)
    print(f"seed {seed}: {args.mode} align_corners={args.align_corners} {xv.shape} -> {y.shape} "
          f"{'matches' if ok else 'DIFFERS from'} numpy")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
