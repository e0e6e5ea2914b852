"""Shared helpers for the kiln Python tests (run by scripts/test.sh from a
venv with `pip install .`)."""
import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def rng(request):
    # a fresh seed per test, printed on failure
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    return np.random.default_rng(seed)


def build(network, *, profiles=None, flags=0, threads=1, reps=1):
    """Serialized engine of a network; profiles: {input: (min, opt, max)}."""
    import kiln

    b = kiln.Builder()
    cfg = b.create_builder_config()
    cfg.flags = kiln.BuilderFlag(flags)
    cfg.threads = threads
    cfg.timing_reps = reps
    if profiles:
        p = b.create_optimization_profile()
        for name, (mn, op, mx) in profiles.items():
            p.set_shape(name, mn, op, mx)
        cfg.add_optimization_profile(p)
    return b.build_serialized_network(network, cfg)


def load(plan):
    import kiln

    return kiln.Runtime().deserialize_engine(plan)
