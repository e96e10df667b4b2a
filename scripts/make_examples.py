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

Usage: python3 scripts/make_examples.py [--out DIR] [--large DIR]
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


class GraphBuilder:
    """Nodes and initializers of a model built by hand, the initializers kept
    by name (`self.w`) for the numpy reference."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.w = [], [], {}

    def const(self, name, array):
        array = np.asarray(array)
        self.inits.append(numpy_helper.from_array(array, name=name))
        self.w[name] = array
        return name

    def node(self, op, inputs, outputs, **attrs):
        outputs = [outputs] if isinstance(outputs, str) else outputs
        self.nodes.append(helper.make_node(op, inputs, outputs, name=outputs[0], **attrs))
        return outputs[0]

    def model(self, input_shape, output_shape, doc):
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape))],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(output_shape))],
            self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tessera scripts/make_examples.py", doc_string=doc)
        m.ir_version = IR_VERSION
        onnx.checker.check_model(m, full_check=True)
        return m


class Builder(GraphBuilder):
    """An MLP, with a float64 numpy reference built alongside."""

    def __init__(self, name, seed):
        super().__init__(name, seed)
        self.steps = []  # numpy functions reproducing the graph, for the check

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
        # Name the last node's result `output`.
        assert y == self.nodes[-1].name
        self.nodes[-1].output[0] = "output"
        return super().model([BATCH, d_in], [BATCH, d_out], doc)

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


def layer_norm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


class Gpt2Block(GraphBuilder):
    """GPT-2 transformer blocks (pre-LayerNorm), as PyTorch exports them at opset 17.

    LayerNormalization, the fused QKV projection and Split, heads by Reshape and
    Transpose, scaled dot products, a causal mask by Where, Softmax, the output
    projection and residual, then LayerNormalization, the MLP with GELU (tanh
    form, written out with Pow and Tanh as GPT-2's code does) and the residual.
    With `layers` > 1 the blocks are chained, their names prefixed `h<i>.`.
    """

    def __init__(self, name, d, heads, seq, seed, layers=1):
        super().__init__(name, seed)
        self.d, self.heads, self.seq, self.layers = d, heads, seq, layers

    def weight(self, *shape):
        return (self.rng.standard_normal(shape) * 0.02).astype(np.float32)

    def prefix(self, layer):
        return f"h{layer}." if self.layers > 1 else ""

    def build(self):
        x = "input"
        for layer in range(self.layers):
            out = "output" if layer == self.layers - 1 else f"{self.prefix(layer)}output"
            x = self.block(x, self.prefix(layer), out)
        d, H, S = self.d, self.heads, self.seq
        blocks = f"{self.layers} GPT-2 blocks" if self.layers > 1 else "GPT-2 block"
        return self.model([1, S, d], [1, S, d], f"{blocks}: d={d}, {H} heads, sequence {S}, causal.")

    def block(self, x, p, out):
        d, H, S = self.d, self.heads, self.seq
        dh = d // H
        f32 = lambda v: np.array(v, dtype=np.float32)
        i64 = lambda v: np.array(v, dtype=np.int64)
        c = lambda name, array: self.const(p + name, array)
        n = lambda op, ins, outs, **attrs: self.node(op, ins, [p + o for o in outs] if isinstance(outs, list) else p + outs, **attrs)
        ln = lambda v, i: n("LayerNormalization", [v, c(f"ln_{i}.weight", (1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32)), c(f"ln_{i}.bias", self.weight(d))], f"ln_{i}", axis=-1, epsilon=1e-5)
        linear = lambda v, name, fi, fo: n("Add", [n("MatMul", [v, c(f"{name}.weight", self.weight(fi, fo))], f"{name}.matmul"), c(f"{name}.bias", self.weight(fo))], name)
        h = ln(x, 1)
        qkv = linear(h, "attn.c_attn", d, 3 * d)
        n("Split", [qkv, c("attn.split", i64([d, d, d]))], ["q", "k", "v"], axis=-1)
        heads = c("attn.heads", i64([1, S, H, dh]))
        q = n("Transpose", [n("Reshape", [p + "q", heads], "q.heads")], "q.t", perm=[0, 2, 1, 3])
        k = n("Transpose", [n("Reshape", [p + "k", heads], "k.heads")], "k.t", perm=[0, 2, 3, 1])
        v = n("Transpose", [n("Reshape", [p + "v", heads], "v.heads")], "v.t", perm=[0, 2, 1, 3])
        s = n("Mul", [n("MatMul", [q, k], "attn.scores"), c("attn.scale", f32(1 / np.sqrt(dh)))], "attn.scaled")
        s = n("Where", [c("attn.causal", np.tril(np.ones((S, S), dtype=bool))), s, c("attn.masked", f32(-1e9))], "attn.masked_scores")
        pr = n("Softmax", [s], "attn.probs", axis=-1)
        o = n("Transpose", [n("MatMul", [pr, v], "attn.context")], "attn.context.t", perm=[0, 2, 1, 3])
        o = n("Reshape", [o, c("attn.merge", i64([1, S, d]))], "attn.merged")
        x1 = n("Add", [x, linear(o, "attn.c_proj", d, d)], "residual_1")
        f = linear(ln(x1, 2), "mlp.c_fc", d, 4 * d)
        cube = n("Mul", [n("Pow", [f, c("gelu.three", f32(3.0))], "gelu.cube"), c("gelu.k", f32(0.044715))], "gelu.cubic")
        t = n("Tanh", [n("Mul", [n("Add", [f, cube], "gelu.poly"), c("gelu.s", f32(np.sqrt(2 / np.pi)))], "gelu.scaled")], "gelu.tanh")
        g = n("Mul", [n("Mul", [f, c("gelu.half", f32(0.5))], "gelu.half_x"), n("Add", [t, c("gelu.one", f32(1.0))], "gelu.one_plus")], "gelu")
        return self.node("Add", [x1, linear(g, "mlp.c_proj", 4 * d, d)], out)

    def reference(self, x):
        x = x.astype(np.float64)
        for layer in range(self.layers):
            x = self.reference_block(x, self.prefix(layer))
        return x

    def reference_block(self, x, p):
        w = {k[len(p):]: v.astype(np.float64) if v.dtype == np.float32 else v
             for k, v in self.w.items() if k.startswith(p)}
        d, H, S = self.d, self.heads, self.seq
        dh = d // H
        lin = lambda v, name: v @ w[f"{name}.weight"] + w[f"{name}.bias"]
        h = layer_norm(x, w["ln_1.weight"], w["ln_1.bias"])
        q, k, v = np.split(lin(h, "attn.c_attn"), 3, axis=-1)
        split = lambda t: t.reshape(1, S, H, dh).transpose(0, 2, 1, 3)
        s = split(q) @ split(k).transpose(0, 1, 3, 2) / np.sqrt(dh)
        s = np.where(np.tril(np.ones((S, S), dtype=bool)), s, -1e9)
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o = (pr @ split(v)).transpose(0, 2, 1, 3).reshape(1, S, d)
        x1 = x + lin(o, "attn.c_proj")
        f = lin(layer_norm(x1, w["ln_2.weight"], w["ln_2.bias"]), "mlp.c_fc")
        g = 0.5 * f * (1 + np.tanh(np.sqrt(2 / np.pi) * (f + 0.044715 * f ** 3)))
        return x1 + lin(g, "mlp.c_proj")


class SmallCnn(GraphBuilder):
    """A small CNN: two conv-BN-relu stages with max pooling, a residual block
    (conv-BN-relu, conv-BN, add, relu), global average pooling and a linear head."""

    def conv_bn(self, x, cin, cout, name, relu=True, stride=1):
        w = (self.rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        y = self.node("Conv", [x, self.const(f"{name}.weight", w)], f"{name}.conv",
                      pads=[1, 1, 1, 1], strides=[stride, stride])
        bn = [self.const(f"{name}.bn.{k}", v) for k, v in [
            ("scale", (1 + 0.1 * self.rng.standard_normal(cout)).astype(np.float32)),
            ("bias", (0.1 * self.rng.standard_normal(cout)).astype(np.float32)),
            ("mean", (0.1 * self.rng.standard_normal(cout)).astype(np.float32)),
            ("var", (1 + 0.1 * self.rng.random(cout)).astype(np.float32)),
        ]]
        y = self.node("BatchNormalization", [y] + bn, f"{name}.bn", epsilon=1e-5)
        return self.node("Relu", [y], f"{name}.relu") if relu else y

    def build(self):
        x = self.conv_bn("input", 3, 8, "stage1")
        x = self.node("MaxPool", [x], "stage1.pool", kernel_shape=[2, 2], strides=[2, 2])
        x = self.conv_bn(x, 8, 16, "stage2")
        x = self.node("MaxPool", [x], "stage2.pool", kernel_shape=[2, 2], strides=[2, 2])
        h = self.conv_bn(x, 16, 16, "res.a")
        h = self.conv_bn(h, 16, 16, "res.b", relu=False)
        x = self.node("Relu", [self.node("Add", [x, h], "res.add")], "res.relu")
        x = self.node("GlobalAveragePool", [x], "gap")
        x = self.node("Flatten", [x], "flat", axis=1)
        w = (self.rng.standard_normal((10, 16)) * 0.25).astype(np.float32)
        b = (0.1 * self.rng.standard_normal(10)).astype(np.float32)
        self.node("Gemm", [x, self.const("head.weight", w), self.const("head.bias", b)], "output", transB=1)
        return self.model([2, 3, 16, 16], [2, 10],
                          "Small CNN: conv-BN-relu-pool x2, a residual block, global average pool, linear.")

    def reference(self, x):
        w = {k: v.astype(np.float64) for k, v in self.w.items()}

        def conv(x, k):
            n, c, h, wd = x.shape
            p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
            out = np.zeros((n, k.shape[0], h, wd))
            for a in range(3):
                for b in range(3):
                    out += np.einsum("nchw,mc->nmhw", p[:, :, a:a + h, b:b + wd], k[:, :, a, b])
            return out

        def conv_bn(x, name, relu=True):
            y = conv(x, w[f"{name}.weight"])
            g, b, mu, var = (w[f"{name}.bn.{k}"][None, :, None, None] for k in ["scale", "bias", "mean", "var"])
            y = (y - mu) / np.sqrt(var + 1e-5) * g + b
            return np.maximum(y, 0) if relu else y

        def pool(x):
            n, c, h, wd = x.shape
            return x.reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))

        x = pool(conv_bn(x.astype(np.float64), "stage1"))
        x = pool(conv_bn(x, "stage2"))
        h = conv_bn(conv_bn(x, "res.a"), "res.b", relu=False)
        x = np.maximum(x + h, 0).mean(axis=(2, 3))
        return x @ w["head.weight"].T + w["head.bias"]


class Int8Mlp(GraphBuilder):
    """An int8 quantised MLP as a static-quantisation export writes it:
    QuantizeLinear of the float input, QLinearMatMul with int8 weights, a
    DequantizeLinear, bias and Relu in float, quantise again, a second
    QLinearMatMul, and a final DequantizeLinear."""

    def build(self):
        c, n = self.const, self.node
        f32 = lambda x: np.array(x, dtype=np.float32)
        c("x.scale", f32(0.03)); c("x.zero", np.array(0, np.int8))
        c("h.scale", f32(0.05)); c("h.zero", np.array(-10, np.int8))
        c("y.scale", f32(0.1)); c("y.zero", np.array(5, np.int8))
        for i, (fi, fo) in enumerate([(32, 64), (64, 10)], start=1):
            c(f"fc{i}.weight", self.rng.integers(-60, 60, (fi, fo)).astype(np.int8))
            c(f"fc{i}.scale", f32(0.004))
            c(f"fc{i}.zero", np.array(0, np.int8))
        c("fc1.bias", (0.1 * self.rng.standard_normal(64)).astype(np.float32))
        q = n("QuantizeLinear", ["input", "x.scale", "x.zero"], "x.q")
        h = n("QLinearMatMul", [q, "x.scale", "x.zero", "fc1.weight", "fc1.scale", "fc1.zero", "h.scale", "h.zero"], "fc1")
        h = n("DequantizeLinear", [h, "h.scale", "h.zero"], "fc1.dq")
        h = n("Relu", [n("Add", [h, "fc1.bias"], "fc1.add")], "fc1.relu")
        h = n("QuantizeLinear", [h, "h.scale", "h.zero"], "fc1.q")
        y = n("QLinearMatMul", [h, "h.scale", "h.zero", "fc2.weight", "fc2.scale", "fc2.zero", "y.scale", "y.zero"], "fc2")
        n("DequantizeLinear", [y, "y.scale", "y.zero"], "output")
        return self.model([BATCH, 32], [BATCH, 10],
                          "int8 MLP 32 -> 64 -> 10: QuantizeLinear, QLinearMatMul, DequantizeLinear.")

    def reference(self, x):
        w = self.w
        # Round halves to even and saturate, as QuantizeLinear does.
        def quant(v, s, z):
            return np.clip(np.round(v / float(s)) + int(z), -128, 127)

        def qmm(a, az, a_s, wn, y_s, yz):
            acc = (a - int(az)) @ (w[f"{wn}.weight"].astype(np.int64) - int(w[f"{wn}.zero"]))
            k = np.float32(a_s) * np.float32(w[f"{wn}.scale"]) / np.float32(y_s)
            return np.clip(np.round(acc * float(k)) + int(yz), -128, 127)

        q = quant(x.astype(np.float32), w["x.scale"], w["x.zero"])
        h = qmm(q, w["x.zero"], w["x.scale"], "fc1", w["h.scale"], w["h.zero"])
        h = (h - int(w["h.zero"])) * float(w["h.scale"])
        h = np.maximum(h + w["fc1.bias"].astype(np.float64), 0)
        h = quant(h.astype(np.float32), w["h.scale"], w["h.zero"])
        y = qmm(h, w["h.zero"], w["h.scale"], "fc2", w["y.scale"], w["y.zero"])
        return (y - int(w["y.zero"])) * float(w["y.scale"])


def int8_mlp():
    b = Int8Mlp("mlp_int8", 9)
    return b, b.build(), 32


def small_cnn():
    b = SmallCnn("cnn_small", 8)
    return b, b.build(), (2, 3, 16, 16)


def gpt2_block(name, d, heads, seq, seed, layers=1):
    b = Gpt2Block(name, d, heads, seq, seed, layers)
    return b, b.build(), (1, seq, d)


MODELS = [
    mlp_small,
    mlp_medium,
    lambda: matmul_bias_relu("matmul_bias_relu_small", 16, 3),
    lambda: matmul_bias_relu("matmul_bias_relu_large", 128, 4),
    lambda: gpt2_block("gpt2_block_small", 64, 4, 16, 5),
    small_cnn,
    int8_mlp,
]

# Too large to commit (28 MB of weights for a block, 340 MB for GPT-2 small's
# twelve): written with --large, for benchmarks.
LARGE = [
    lambda: gpt2_block("gpt2_block_full", 768, 12, 128, 6),
    lambda: gpt2_block("gpt2_block_s512", 768, 12, 512, 6),
    lambda: gpt2_block("gpt2_small_12", 768, 12, 128, 6, layers=12),
]


def write(out_dir, build, max_bytes=MAX_BYTES):
    b, model, shape = build()
    shape = (BATCH, shape) if isinstance(shape, int) else shape
    model_dir = out_dir / b.name
    data_dir = model_dir / "test_data_set_0"
    data_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / "model.onnx"
    onnx.save(model, str(path))

    x = np.random.default_rng(1000 + sum(map(ord, b.name))).standard_normal(shape).astype(np.float32)
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
    if size > max_bytes:
        sys.exit(f"{b.name}: model.onnx is {size} bytes, over {max_bytes}")
    print(f"{b.name}: {size} bytes, input {list(x.shape)}, output {list(y.shape)}, "
          f"max |ort - f64 reference| = {err:.2e}")


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=root / "examples")
    parser.add_argument("--large", type=pathlib.Path, metavar="DIR",
                        help="write only the full-size models (not committed) into DIR")
    args = parser.parse_args()
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    if args.large:
        for build in LARGE:
            write(args.large, build, max_bytes=1 << 30)
        return
    for build in MODELS:
        write(args.out, build)


if __name__ == "__main__":
    main()
