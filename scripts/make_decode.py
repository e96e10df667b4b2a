#!/usr/bin/env python3
"""Writes a GPT-2 block for single-token decode with a KV cache, for benchmarks.

Usage: python3 scripts/make_decode.py DIR [--d 768] [--heads 12] [--cache 1024] [--layers 1]

The block takes the new token's activations `input` [1, 1, d] and the cache of
earlier keys and values, `past_k` and `past_v` [1, heads, cache, d / heads];
it appends the token's key and value (Concat), attends over all cache + 1
positions (no mask: every earlier position is visible), and runs the
output projection, LayerNorm and the MLP with GELU, as GPT-2 does. It is
written to DIR/gpt2_decode_kv<cache>/model.onnx with onnxruntime's output
for seeded inputs in test_data_set_0 (input_0..2.pb, output_0.pb). With
`--layers N` (N > 1) it stacks N such blocks, each with its own cache
(`past_k.<i>`, `past_v.<i>`), and a final LayerNorm, as GPT-2's transformer
does (no embeddings or LM head), to DIR/gpt2_decode_<N>l_kv<cache>. Needs
`pip install onnx==1.23.2 onnxruntime numpy`.
"""

import argparse
import pathlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET, IR_VERSION = 17, 8


def build(d, heads, cache, seed=7, layers=1):
    rng = np.random.default_rng(seed)
    dh = d // heads
    nodes, inits = [], []
    x, past = "input", []
    for i in range(layers):
        # One block's names as they were for a single block; stacked
        # blocks' prefixed with their index.
        pre = f"h{i}." if layers > 1 else ""
        sub_nodes, sub_inits = block(rng, d, heads, dh, x, pre)
        nodes += sub_nodes
        inits += sub_inits
        past += [f"past_k{'.' + str(i) if layers > 1 else ''}", f"past_v{'.' + str(i) if layers > 1 else ''}"]
        x = pre + "output"
    out = x
    if layers > 1:
        w = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name="ln_f.weight"))
        inits.append(numpy_helper.from_array((rng.standard_normal(d) * 0.02).astype(np.float32), name="ln_f.bias"))
        nodes.append(helper.make_node("LayerNormalization", [x, "ln_f.weight", "ln_f.bias"], ["output"], name="ln_f", axis=-1, epsilon=1e-5))
        out = "output"
    assert out == "output"
    cache_shape = [1, heads, cache, dh]
    name = f"gpt2_decode_kv{cache}" if layers == 1 else f"gpt2_decode_{layers}l_kv{cache}"
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, d])]
        + [helper.make_tensor_value_info(p, TensorProto.FLOAT, cache_shape) for p in past],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, d])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="tessera scripts/make_decode.py",
                          doc_string=f"GPT-2 block, one-token decode: d={d}, {heads} heads, KV cache {cache}." if layers == 1
                          else f"GPT-2 transformer of {layers} blocks, one-token decode: d={d}, {heads} heads, KV cache {cache}.")
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m, full_check=True)
    return m, cache_shape, past


def block(rng, d, heads, dh, x_in, pre):
    """One GPT-2 block reading `x_in`; every name prefixed with `pre`."""
    nodes, inits = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a), name=name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    w = lambda *s: (rng.standard_normal(s) * 0.02).astype(np.float32)
    i64 = lambda x: np.array(x, dtype=np.int64)
    f32 = lambda x: np.array(x, dtype=np.float32)
    ln = lambda x, i: node("LayerNormalization", [x, const(f"ln_{i}.weight", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)), const(f"ln_{i}.bias", w(d))], f"ln_{i}", axis=-1, epsilon=1e-5)
    linear = lambda x, name, fi, fo: node("Add", [node("MatMul", [x, const(f"{name}.weight", w(fi, fo))], f"{name}.matmul"), const(f"{name}.bias", w(fo))], name)

    qkv = linear(ln("input", 1), "attn.c_attn", d, 3 * d)
    nodes.append(helper.make_node("Split", [qkv, const("attn.split", i64([d, d, d]))], ["q", "k", "v"], name="attn.split_qkv", axis=-1))
    heads_shape = const("attn.heads", i64([1, 1, heads, dh]))
    t = lambda x, n: node("Transpose", [node("Reshape", [x, heads_shape], f"{n}.heads")], f"{n}.t", perm=[0, 2, 1, 3])
    q, k, v = t("q", "q"), t("k", "k"), t("v", "v")
    k_all = node("Concat", ["past_k", k], "k.all", axis=2)
    v_all = node("Concat", ["past_v", v], "v.all", axis=2)
    kt = node("Transpose", [k_all], "k.all.t", perm=[0, 1, 3, 2])
    s = node("Mul", [node("MatMul", [q, kt], "attn.scores"), const("attn.scale", f32(1 / np.sqrt(dh)))], "attn.scaled")
    p = node("Softmax", [s], "attn.probs", axis=-1)
    o = node("Transpose", [node("MatMul", [p, v_all], "attn.context")], "attn.context.t", perm=[0, 2, 1, 3])
    o = node("Reshape", [o, const("attn.merge", i64([1, 1, d]))], "attn.merged")
    x1 = node("Add", ["input", linear(o, "attn.c_proj", d, d)], "residual_1")
    f = linear(ln(x1, 2), "mlp.c_fc", d, 4 * d)
    cube = node("Mul", [node("Pow", [f, const("gelu.three", f32(3.0))], "gelu.cube"), const("gelu.k", f32(0.044715))], "gelu.cubic")
    th = node("Tanh", [node("Mul", [node("Add", [f, cube], "gelu.poly"), const("gelu.s", f32(np.sqrt(2 / np.pi)))], "gelu.scaled")], "gelu.tanh")
    g = node("Mul", [node("Mul", [f, const("gelu.half", f32(0.5))], "gelu.half_x"), node("Add", [th, const("gelu.one", f32(1.0))], "gelu.one_plus")], "gelu")
    node("Add", [x1, linear(g, "mlp.c_proj", 4 * d, d)], "output")
    if not pre and x_in == "input":
        return nodes, inits
    suffix = pre[1:-1] if pre else ""
    ren = {n: pre + n for nd in nodes for n in nd.output}
    ren.update({t.name: pre + t.name for t in inits})
    ren.update({"input": x_in, "past_k": f"past_k.{suffix}", "past_v": f"past_v.{suffix}"})
    for nd in nodes:
        nd.name = pre + nd.name
        nd.input[:] = [ren.get(n, n) for n in nd.input]
        nd.output[:] = [ren.get(n, n) for n in nd.output]
    for t in inits:
        t.name = ren[t.name]
    return nodes, inits


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=pathlib.Path)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--cache", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=1)
    a = ap.parse_args()
    m, cache_shape, past = build(a.d, a.heads, a.cache, layers=a.layers)
    out = a.dir / m.graph.name
    data = out / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(out / "model.onnx"))
    rng = np.random.default_rng(1)
    feeds = {"input": rng.standard_normal((1, 1, a.d)).astype(np.float32)}
    for p in past:
        feeds[p] = rng.standard_normal(cache_shape).astype(np.float32)
    (y,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(["output"], feeds)
    for i, (name, x) in enumerate(feeds.items()):
        (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(x, name=name).SerializeToString())
    (data / "output_0.pb").write_bytes(numpy_helper.from_array(y, name="output").SerializeToString())
    print(f"{out}: output {list(y.shape)}")


if __name__ == "__main__":
    main()
