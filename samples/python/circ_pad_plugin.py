#!/usr/bin/env python3
"""The class-plugin circ_pad (TensorRT's circ_pad_plugin samples, IPluginV3
and IPluginV2DynamicExt styles) on kiln: torch CircularPad semantics, two
tactics timed by the builder, and with --per-format-tactics tactics that
depend on the chosen type (FP32: 1 and 2, FP16: 2 only).

    python3 circ_pad_plugin.py [--precision fp32|fp16] [--per-format-tactics]
                               [--style v3|v2] [--device cpu|cuda]
                               [--impl cuda-python|cupy|triton|numba|torch] [-v]

On the CPU enqueue uses numpy; with --device cuda it runs on the GPU in the
implementation --impl names (circ_pad_cuda.py).  Builds X[10,3,32,32] ->
circ_pad -> circ_pad, runs it on random input, checks against
numpy.pad(mode="wrap") and prints PASS or FAIL.
"""
import argparse
import json
import os
import sys

import numpy as np

import kiln

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import placement  # noqa: E402

# --device cuda: the circ_pad_cuda backend enqueue runs (None: numpy)
GPU = {"impl": None}


def reference(x, pads):
    width = [(0, 0)] * x.ndim
    for i in range(len(pads) // 2):
        width[x.ndim - i - 1] = (int(pads[2 * i]), int(pads[2 * i + 1]))
    return np.pad(x, width, mode="wrap")


def padded_dims(pads, dims, expr_builder):
    """The output dims: each of the last len(pads) // 2 dims grows by its
    two pads."""
    out = kiln.DimsExprs(dims)
    for i in range(len(pads) // 2):
        d = len(out) - i - 1
        out[d] = expr_builder.operation(kiln.DimensionOperation.SUM, dims[d],
                                        expr_builder.constant(int(pads[2 * i] + pads[2 * i + 1])))
    return out


class CircularPaddingPlugin(kiln.IPluginV3, kiln.IPluginV3OneCore, kiln.IPluginV3OneBuild, kiln.IPluginV3OneRuntime):
    plugin_name = "CircularPaddingPlugin"
    plugin_namespace = "sample"
    plugin_version = "1"
    num_outputs = 1
    per_format = False
    log = []

    def __init__(self, fc=None):
        self.pads = np.array([], np.int32)
        for f in fc or []:
            if f.name == "pads":
                self.pads = np.asarray(f.data, np.int32)
        self.tactic = 0
        self.dtype = kiln.float32
        self.X_shape = None

    def get_output_data_types(self, input_types):
        return [input_types[0]]

    def get_output_shapes(self, inputs, shape_inputs, expr_builder):
        return [padded_dims(self.pads, inputs[0], expr_builder)]

    def supports_format_combination(self, pos, in_out, num_inputs):
        desc = in_out[pos].desc
        if desc.format != kiln.TensorFormat.LINEAR:
            return False
        if pos == 0:
            return desc.type in (kiln.float32, kiln.float16)
        return desc.type == in_out[0].desc.type

    def configure_plugin(self, inp, out):
        self.dtype = inp[0].desc.type

    def get_valid_tactics(self):
        if self.per_format and self.dtype == kiln.float16:
            return [2]
        return [1, 2]

    def set_tactic(self, tactic):
        self.tactic = tactic

    def get_timing_cache_id(self):
        return ",".join(str(int(p)) for p in self.pads)

    def on_shape_change(self, inp, out):
        self.X_shape = inp[0].dims

    def enqueue(self, input_desc, output_desc, inputs, outputs, workspace, stream):
        CircularPaddingPlugin.log.append((self.tactic, input_desc[0].type))
        enqueue_circ_pad(self.pads, self.tactic, inputs, outputs, stream)

    def get_fields_to_serialize(self):
        return kiln.PluginFieldCollection([kiln.PluginField("pads", self.pads, kiln.PluginFieldType.INT32)])

    def clone(self):
        c = CircularPaddingPlugin()
        c.__dict__.update(self.__dict__)
        return c


def enqueue_circ_pad(pads, tactic, inputs, outputs, stream):
    if inputs[0].device == "cuda":
        import circ_pad_cuda

        circ_pad_cuda.backend(GPU["impl"]).run(inputs[0], outputs[0], pads, tactic, stream)
        return
    x, y = np.asarray(inputs[0]), np.asarray(outputs[0])
    if tactic == 2:  # gather by index arithmetic
        idx = []
        for d in range(x.ndim):
            i = x.ndim - 1 - d
            before = int(pads[2 * i]) if 2 * i < len(pads) else 0
            idx.append((np.arange(y.shape[d]) - before) % x.shape[d])
        y[...] = x[np.ix_(*idx)]
    else:
        y[...] = reference(x, pads)


class CircularPaddingPluginCreator(kiln.IPluginCreatorV3One):
    """circular padding (torch CircularPad), a class plugin"""

    name = "CircularPaddingPlugin"
    plugin_namespace = "sample"
    plugin_version = "1"
    num_inputs = 1
    field_names = kiln.PluginFieldCollection([kiln.PluginField("pads", np.array([]), kiln.PluginFieldType.INT32)])

    def create_plugin(self, name, fc, phase):
        return CircularPaddingPlugin(fc)


class CircPadPluginV2(kiln.IPluginV2DynamicExt):
    """The same plugin in the V2 style (TensorRT's circ_pad_plugin_*.py):
    state through serialize() / the creator's deserialize_plugin."""

    def __init__(self, fc=None):
        kiln.IPluginV2DynamicExt.__init__(self)
        self.pads = []
        for f in fc or []:
            if f.name == "pads":
                self.pads = [int(p) for p in f.data]
        self.num_outputs = 1
        self.plugin_namespace = ""
        self.plugin_type = "CircPadPluginV2"
        self.plugin_version = "1"
        self.tactic = 0
        self.dtype = kiln.float32

    def get_output_datatype(self, index, input_types):
        return input_types[0]

    def get_output_dimensions(self, output_index, inputs, expr_builder):
        return padded_dims(self.pads, inputs[0], expr_builder)

    def serialize(self):
        return json.dumps({"pads": self.pads}).encode()

    def configure_plugin(self, inp, out):
        self.dtype = inp[0].desc.type

    def supports_format_combination(self, pos, in_out, num_inputs):
        return CircularPaddingPlugin.supports_format_combination(self, pos, in_out, num_inputs)

    def get_valid_tactics(self):  # kiln's V2 adapter honours tactics too
        if CircularPaddingPlugin.per_format and self.dtype == kiln.float16:
            return [2]
        return [1, 2]

    def set_tactic(self, tactic):
        self.tactic = tactic

    def enqueue(self, input_desc, output_desc, inputs, outputs, workspace, stream):
        CircularPaddingPlugin.log.append((self.tactic, input_desc[0].type))
        enqueue_circ_pad(self.pads, self.tactic, inputs, outputs, stream)

    def clone(self):
        c = CircPadPluginV2()
        c.__dict__.update(self.__dict__)
        return c


class CircPadPluginV2Creator(kiln.IPluginCreator):
    """circular padding (torch CircularPad), a V2-style class plugin"""

    name = "CircPadPluginV2"
    plugin_namespace = ""
    plugin_version = "1"
    num_inputs = 1
    field_names = kiln.PluginFieldCollection([kiln.PluginField("pads", np.array([]), kiln.PluginFieldType.INT32)])

    def create_plugin(self, name, fc):
        return CircPadPluginV2(fc)

    def deserialize_plugin(self, name, data):
        p = CircPadPluginV2()
        p.__dict__.update(json.loads(bytes(data)))
        return p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precision", choices=["fp32", "fp16"], default="fp32")
    ap.add_argument("--per-format-tactics", "--per_format_tactics", dest="per_format", action="store_true")
    ap.add_argument("--style", choices=["v3", "v2"], default="v3")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--impl", default="torch", help="--device cuda: cuda-python, cupy, triton, numba or torch")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    CircularPaddingPlugin.per_format = args.per_format
    CircularPaddingPlugin.log.clear()
    logger = kiln.Logger(kiln.Logger.VERBOSE if args.verbose else kiln.Logger.WARNING)
    v2 = args.style == "v2"
    creator = CircPadPluginV2Creator() if v2 else CircularPaddingPluginCreator()
    if args.device == "cuda":
        import circ_pad_cuda

        circ_pad_cuda.backend(args.impl)  # made (and compiled) before the build
        GPU["impl"] = args.impl
        creator.devices = ("cuda",)
        print(f"circ_pad on the GPU: {args.impl}, {args.style} style")
    kiln.get_plugin_registry().register_creator(creator, "sample")

    pads = np.array([1, 1, 1, 1], np.int32)
    builder = kiln.Builder(logger)
    net = builder.create_network()
    x = net.add_input("X", kiln.float32, (10, 3, 32, 32))
    t = x
    fc = kiln.PluginFieldCollection([kiln.PluginField("pads", pads, kiln.PluginFieldType.INT32)])
    for _ in range(2):
        if v2:
            t = net.add_plugin_v2([t], creator.create_plugin(creator.name, fc)).get_output(0)
        else:
            plugin = creator.create_plugin(creator.name, fc, kiln.TensorRTPhase.BUILD)
            t = net.add_plugin_v3([t], [], plugin).get_output(0)
    net.mark_output(t)
    config = builder.create_builder_config()
    config.device = args.device
    if args.precision == "fp16":
        config.set_flag(kiln.BuilderFlag.FP16)
    engine = builder.build_engine(net, config)
    timed = sorted({(tac, dt.name) for tac, dt in CircularPaddingPlugin.log})
    print(f"built: {builder.last_stats['timed']} candidates timed {timed}, "
          f"{builder.last_stats['cache_dedup']} deduplicated")
    misplaced = placement.report(engine, args.device)
    if args.per_format and any(dt == kiln.float16 and tac == 1 for tac, dt in CircularPaddingPlugin.log):
        print("FAIL: tactic 1 timed for FP16 though get_valid_tactics excludes it")
        return 1
    if misplaced:
        print(f"FAIL: --device {args.device}, but plugin layer(s) {', '.join(misplaced)} ran elsewhere")
        return 1
    # a saved engine loads in a fresh runtime and gives the same answer
    engine = kiln.Runtime(logger).deserialize_engine(engine.serialize())
    seed = int.from_bytes(os.urandom(4), "little")
    xv = np.random.default_rng(seed).standard_normal((10, 3, 32, 32)).astype(np.float32)
    y = engine.create_execution_context().execute({"X": xv})[engine.outputs[0]]
    want = reference(reference(xv, pads), pads)
    tol = 1e-2 if args.precision == "fp16" else 0
    ok = y.shape == want.shape and np.allclose(y, want, rtol=tol, atol=tol)
    print(f"seed {seed}: output {y.shape} {'matches' if ok else 'DIFFERS from'} numpy")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
