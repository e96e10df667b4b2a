#!/usr/bin/env python3
"""Compares ResNet convolution layers on `systolic-os` with SCALE-Sim's cycles for the same layer.

Usage: python3 scripts/scalesim_conv.py --scalesim-python PY [--tessera PATH] [--out FILE.md] [--report-only]

Setup as for scripts/scalesim_check.py (SCALE-Sim 3.0.0 in its own
interpreter PY, onnx here).

Each layer (ResNet-18's 3x3 convolutions and ResNet-50's 1x1 ones, "same"
padding) runs in SCALE-Sim as a convolution topology (its IFMAP is the
padded image) on the default 32x32 output-stationary array, and in tessera
as the second of two such convolutions with a ReLU between, as in a
residual block: its image is made on the machine, as a network's are, not
handed over by the user in f32. Compared:

- SCALE-Sim's "Total Cycles (incl. prefetch)" against the cycles of
  tessera's region for that convolution (its product with the bias, from
  the first transfer to the last store);
- for reference, SCALE-Sim's compute cycles (its folds back to back).

Exit status 1 if a layer is more than 10% slower in tessera than in
SCALE-Sim (unless --report-only).
"""

import argparse
import json
import os
import pathlib
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from scalesim_check import CFG, finish, run_scalesim

# (name, H = W, channels in, channels out, kernel, stride)
LAYERS = [
    ("resnet18 conv2_x", 56, 64, 64, 3, 1),
    ("resnet18 conv3_x", 28, 128, 128, 3, 1),
    ("resnet18 conv4_x", 14, 256, 256, 3, 1),
    ("resnet50 conv2_x 1x1 reduce", 56, 256, 64, 1, 1),
    ("resnet50 conv2_x 1x1 expand", 56, 64, 256, 1, 1),
]

RUN_SCALESIM = """
import sys
from scalesim.scale_sim import scalesim
d = sys.argv[1]
s = scalesim(save_disk_space=True, verbose=False, config=d + "/cfg.cfg",
             topology=d + "/topo.csv", layout=d + "/layout.csv", input_type_gemm=False)
s.run_scale(top_path=d + "/out")
"""


def scalesim_cycles(py, tmp, h, c, m, k, s):
    d = pathlib.Path(tempfile.mkdtemp(dir=tmp))
    p = k // 2
    (d / "cfg.cfg").write_text(CFG.format(rows=32, cols=32, df="os"))
    (d / "topo.csv").write_text(
        "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
        f"c0, {h + 2 * p}, {h + 2 * p}, {k}, {k}, {c}, {m}, {s},\n")
    (d / "layout.csv").write_text("Layer, a, b, c, d, e, f, g,\nc0, 1, 1, 1, 1, 1, 1, 1,\n")
    return run_scalesim(py, RUN_SCALESIM, d)


def block_model(path, h, c, m, k, s):
    """conv1 (c -> c, stride 1), ReLU, conv2 (c -> m, stride s): conv2 is the layer."""
    rng = np.random.default_rng(0)
    p = k // 2
    w1 = (rng.standard_normal((c, c, k, k)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((m, c, k, k)) * 0.05).astype(np.float32)
    b1 = (rng.standard_normal(c) * 0.05).astype(np.float32)
    b2 = (rng.standard_normal(m) * 0.05).astype(np.float32)
    oh = (h + 2 * p - k) // s + 1
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[k, k], pads=[p] * 4),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2", kernel_shape=[k, k],
                         pads=[p] * 4, strides=[s, s]),
    ]
    g = helper.make_graph(
        nodes, "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, oh, oh])],
        [numpy_helper.from_array(a, n) for a, n in [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2")]])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def tessera_layer(exe, model):
    p = subprocess.run([exe, "run", model, "-t", "systolic-os", "--format", "json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "failed"
    r = json.loads(p.stdout)
    mine = [x for x in r["regions"] if x["region"].startswith("MatMul(conv2/")]
    if len(mine) != 1:
        return None, f"conv2's product is not one region: {[x['region'] for x in r['regions']]}"
    return mine[0]["cycles"], None


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=str(root / "target/release/tessera"))
    ap.add_argument("--scalesim-python", required=True, help="an interpreter with scalesim 3.0.0")
    ap.add_argument("--out", type=pathlib.Path)
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    lines = ["| layer | image | C → M | kernel | SCALE-Sim compute | SCALE-Sim incl. prefetch | tessera region | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    slow = 0
    with tempfile.TemporaryDirectory() as tmp:
        for (name, h, c, m, k, s) in LAYERS:
            model = os.path.join(tmp, f"b{h}_{c}_{m}_{k}_{s}.onnx")
            block_model(model, h, c, m, k, s)
            sc, sp = scalesim_cycles(a.scalesim_python, tmp, h, c, m, k, s)
            tc, err = tessera_layer(a.tessera, model)
            head = f"| {name} | {h}×{h} | {c} → {m} | {k}×{k}/{s} | {sc} | {sp} |"
            if err:
                lines.append(f"{head} {err} | |")
                slow += 1
            else:
                slow += tc > 1.1 * sp
                lines.append(f"{head} {tc} | {tc / sp:.3f} |")
            print(lines[-1], flush=True)
    finish(lines, a, slow, "layer(s) more than 10% slower than SCALE-Sim")


if __name__ == "__main__":
    main()
