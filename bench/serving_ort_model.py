"""Triton python-backend model: ONNX Runtime on the model.onnx next to it.

bench/serving.py copies this to <name>_ort/1/model.py, the peer of a kiln
model: same model.onnx, same intra-op thread count (`parameters` `threads`),
same max_batch_size and dynamic batching.  The requests of one execute() are
concatenated along dim 0 into one session run when the model batches (as
kiln's backend gathers them); ONNX inputs the config does not declare are
fed from `parameters` `const_<name>` (silero's sr=16000, which kiln bakes
into its engine).
"""
import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(params.get("threads", "0"))
        so.inter_op_num_threads = 1
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in cfg["input"]]
        self.outputs = [o["name"] for o in cfg["output"]]
        self.batching = cfg.get("max_batch_size", 0) > 0
        self.consts = {}
        types = {"tensor(int64)": np.int64, "tensor(float)": np.float32}
        for i in self.sess.get_inputs():
            if i.name not in self.inputs:
                v = params.get(f"const_{i.name}")
                if v is None:
                    raise pb_utils.TritonModelException(f"ONNX input '{i.name}' is neither in the "
                                                        f"config nor in parameters const_{i.name}")
                self.consts[i.name] = np.array(v, dtype=types[i.type])

    def _run(self, feeds):
        feeds.update(self.consts)
        return self.sess.run(self.outputs, feeds)

    def execute(self, requests):
        got = [{n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in self.inputs}
               for r in requests]
        if self.batching and len(requests) > 1:
            sizes = [g[self.inputs[0]].shape[0] for g in got]
            try:
                outs = self._run({n: np.concatenate([g[n] for g in got]) for n in self.inputs})
                cuts = np.cumsum(sizes)[:-1]
                split = [np.split(o, cuts) for o in outs]
                results = [[s[k] for s in split] for k in range(len(requests))]
            except Exception:  # ragged: one run per request
                results = [None] * len(requests)
        else:
            results = [None] * len(requests)
        responses = []
        for k, g in enumerate(got):
            try:
                outs = results[k] if results[k] is not None else self._run(dict(g))
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor(n, np.ascontiguousarray(o)) for n, o in zip(self.outputs, outs)]))
            except Exception as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
        return responses
