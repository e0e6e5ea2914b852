"""samples/python/qdp_runner.py: every sample and flag combination of the
documents runs and checks itself against numpy (PASS, exit 0)."""
import re
import subprocess
import sys

import pytest

from conftest import ROOT

RUNNER = ROOT / "samples" / "python" / "qdp_runner.py"
# the runner's line per layer (as kiln-samples prints it)
LAYER = re.compile(r"^  layer (\S+) +(\S+) v(\d+) on (cpu|cuda), (JIT impl|AOT kernel) tactic (\d+)$", re.M)


def plugin_layers(out):
    """{layer name: (device, kind)} of the sample plugin layers the runner listed."""
    return {m[1]: (m[4], m[5]) for m in LAYER.finditer(out) if m[2].startswith("sample::")}


@pytest.mark.parametrize("args", [
    "add", "add --autotune -v", "add --aot", "add --mode onnx --aot",
    "inplace_add", "inplace_add --autotune",
    "non_zero", "non_zero --mode onnx",
    "circ_pad", "circ_pad --multi_tactic -v", "circ_pad --aot", "circ_pad --mode onnx",
])
def test_qdp_runner(args):
    r = subprocess.run([sys.executable, str(RUNNER), *args.split()], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    layers = plugin_layers(r.stdout)
    kind = "AOT kernel" if "--aot" in args else "JIT impl"
    assert layers and all(v == ("cpu", kind) for v in layers.values()), r.stdout
    if "-v" in args and "--autotune" in args:
        assert r.stdout.count("impl elemwise_add_plugin") >= 2  # calls while timing, then the run


def test_qdp_runner_save_load(tmp_path):
    for flag in ("--save_engine", "--load_engine"):
        r = subprocess.run([sys.executable, str(RUNNER), "circ_pad", "--multi_tactic", flag, "--artifacts_dir",
                            str(tmp_path)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "circ_pad.kiln").exists()


def test_qdp_runner_refuses_bad_flags():
    r = subprocess.run([sys.executable, str(RUNNER), "non_zero", "--autotune"], capture_output=True, text=True)
    assert r.returncode == 2 and "--autotune applies to add and inplace_add" in r.stderr
