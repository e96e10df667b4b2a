#!/usr/bin/env python3
"""Generates the example ONNX models of `examples/` and their test data.

Every model is built with `onnx.helper` (nothing is downloaded), with weights
drawn from a fixed seed, exported at opset 17 with a batch of 4. For each
model this writes

    examples/<name>/model.onnx
    examples/<name>/test_data_set_0/input_0.pb   (seeded random input)
    examples/<name>/test_data_set_0/output_0.pb  (onnxruntime's output)

in the ONNX backend-test layout (TensorProto files). The outputs are also
checked against a float64 numpy evaluation of the same model.

Usage: python3 scripts/make_examples.py [--out DIR]
Needs: pip install onnx onnxruntime numpy
"""

import argparse
import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # the IR version that introduced opset 17
BATCH = 4
MAX_BYTES = 1 << 20  # no example model over 1 MiB


def weight(rng, shape, fan_in):
    """He-initialised f32 weights, so activations keep their scale through ReLUs."""
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def bias(rng, n):
    return (rng.standard_normal(n) * 0.1).astype(np.float32)


class Builder:
    """Collects nodes and initializers, and a float64 numpy reference alongside."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.steps = []  # numpy functions reproducing the graph, for the check

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(array, name=name))
        return name

    def node(self, op, inputs, output, **attrs):
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def gemm(self, x, fan_in, fan_out, layer):
        """A Gemm with the weight stored [out, in] (transB=1), as PyTorch exports Linear."""
        w = weight(self.rng, (fan_out, fan_in), fan_in)
        b = bias(self.rng, fan_out)
        self.const(f"fc{layer}.weight", w)
        self.const(f"fc{layer}.bias", b)
        self.steps.append(lambda v: v @ w.astype(np.float64).T + b)
        return self.node("Gemm", [x, f"fc{layer}.weight", f"fc{layer}.bias"], f"fc{layer}", transB=1)

    def matmul_add(self, x, fan_in, fan_out, layer):
        """MatMul by a [in, out] weight, then Add of a bias broadcast over the batch."""
        w = weight(self.rng, (fan_in, fan_out), fan_in)
        b = bias(self.rng, fan_out)
        self.const(f"layer{layer}.weight", w)
        self.const(f"layer{layer}.bias", b)
        self.steps.append(lambda v: v @ w.astype(np.float64) + b)
        h = self.node("MatMul", [x, f"layer{layer}.weight"], f"layer{layer}.matmul")
        return self.node("Add", [h, f"layer{layer}.bias"], f"layer{layer}.add")

    def relu(self, x):
        self.steps.append(lambda v: np.maximum(v, 0.0))
        return self.node("Relu", [x], f"{x}.relu")

    def model(self, d_in, y, d_out, doc):
        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [BATCH, d_in])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, [BATCH, d_out])],
            self.inits,
        )
        # Name the last node's result `output`.
        graph.node[-1].output[0] = "output"
        assert y == graph.node[-1].name
        m = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="tessera scripts/make_examples.py",
            doc_string=doc,
        )
        m.ir_version = IR_VERSION
        onnx.checker.check_model(m, full_check=True)
        return m

    def reference(self, x):
        v = x.astype(np.float64)
        for step in self.steps:
            v = step(v)
        return v


def mlp_small():
    b = Builder("mlp_small", seed=1)
    h = b.relu(b.gemm("input", 16, 32, 1))
    y = b.gemm(h, 32, 10, 2)
    return b, b.model(16, y, 10, "MLP 16 -> 32 -> 10: Gemm (transB=1), Relu, Gemm (transB=1)."), 16


def mlp_medium():
    b = Builder("mlp_medium", seed=2)
    h = b.relu(b.matmul_add("input", 64, 256, 1))
    h = b.relu(b.matmul_add(h, 256, 256, 2))
    y = b.matmul_add(h, 256, 10, 3)
    return b, b.model(64, y, 10, "MLP 64 -> 256 -> 256 -> 10: MatMul + Add (+ Relu)."), 64


def matmul_bias_relu(name, d, seed):
    b = Builder(name, seed=seed)
    y = "input"
    for layer in range(1, 4):
        y = b.relu(b.matmul_add(y, d, d, layer))
    return b, b.model(d, y, d, f"3 x (MatMul {d}x{d} + Add + Relu)."), d


MODELS = [
    mlp_small,
    mlp_medium,
    lambda: matmul_bias_relu("matmul_bias_relu_small", 16, 3),
    lambda: matmul_bias_relu("matmul_bias_relu_large", 128, 4),
]


def write(out_dir, build):
    b, model, d_in = build()
    model_dir = out_dir / b.name
    data_dir = model_dir / "test_data_set_0"
    data_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / "model.onnx"
    onnx.save(model, str(path))

    x = np.random.default_rng(1000 + sum(map(ord, b.name))).standard_normal((BATCH, d_in)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(["output"], {"input": x})
    (data_dir / "input_0.pb").write_bytes(numpy_helper.from_array(x, name="input").SerializeToString())
    (data_dir / "output_0.pb").write_bytes(numpy_helper.from_array(y, name="output").SerializeToString())

    ref = b.reference(x)
    err = float(np.max(np.abs(y - ref)))
    scale = float(np.max(np.abs(ref)))
    if not err <= 1e-4 * max(scale, 1.0):
        sys.exit(f"{b.name}: onnxruntime differs from the numpy reference by {err}")
    size = path.stat().st_size
    if size > MAX_BYTES:
        sys.exit(f"{b.name}: model.onnx is {size} bytes, over {MAX_BYTES}")
    print(f"{b.name}: {size} bytes, input {list(x.shape)}, output {list(y.shape)}, "
          f"max |ort - f64 reference| = {err:.2e}")


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=root / "examples")
    args = parser.parse_args()
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    for build in MODELS:
        write(args.out, build)


if __name__ == "__main__":
    main()
