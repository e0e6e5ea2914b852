"""Where each layer of a sample's engine runs, printed the way the C
samples runner (samples/runner/kiln_samples.c) prints it:

    layer pad_a          sample::circ_pad_plugin v1 on cuda, JIT impl tactic 2

then the per-device counts.  The copies and type conversions the builder
inserted are listed too (they are layers of the engine)."""


def report(engine, device):
    """Print the placement; return the names of the sample's plugin layers
    (namespace "sample") that do not run on `device` ("cpu" or "cuda"),
    or ["(no plugin layer)"] when the engine has none."""
    misplaced, seen = [], 0
    for layer in engine.layers:
        kind = "AOT kernel" if layer["aot"] else "JIT impl"
        print(f"  layer {layer['name']:<14} {layer['op']} v{layer['version']} on {layer['device']}, "
              f"{kind} tactic {layer['tactic']}")
        if layer["op"].startswith("sample::"):
            seen += 1
            if layer["device"] != device:
                misplaced.append(layer["name"])
    print(f"placement: {engine.num_gpu_layers} layer(s) on the GPU, {engine.num_cpu_layers} on the CPU")
    return misplaced if seen else ["(no plugin layer)"]
