#!/usr/bin/env python3
"""Writes ONNX's backend node tests of the ops Tessera claims, for `tests/conformance.rs`.

The claimed ops are `compiler::onnx::SUPPORTED_OPS`, read from
`compiler/src/onnx/ops/mod.rs` (the one place they are listed), unless `--ops`
gives another list. Every node test case of `onnx.backend.test.case.node`
whose model uses only claimed ops (of the default domain, subgraphs included)
is written in the ONNX backend-test layout:

    OUT_DIR/<case>/model.onnx
    OUT_DIR/<case>/test_data_set_0/input_N.pb    (TensorProto, named as the graph input)
    OUT_DIR/<case>/test_data_set_0/output_N.pb   (TensorProto, named as the graph output)

plus

    OUT_DIR/index.json     [{"case", "op", "ops", "dir", "rtol", "atol"}], sorted by case
    OUT_DIR/_skipped.txt   claimed-op cases not written, one "<case>: <reason>" a line
    OUT_DIR/claimed_ops.txt  the op list used, one a line (the runner checks it is current)

`op` is the op the case tests: among the model's claimed node ops, the one its
name is about (`test_<op>_...`, the op in lower case or snake case or one of
the abbreviations of `ALIASES`, the longest match); for a function's expansion
(`..._expanded`, whose model holds the function body rather than the op) the
ONNX op named; else the first node's op.

The data is deterministic: numpy's global generator, which the test cases
draw their inputs from, is seeded before they are collected. OUT_DIR is
emptied first (unless it is not empty and holds no `index.json`).

Usage: python3 scripts/onnx_node_tests.py OUT_DIR [--ops Abs,Add,...] [--ops-file FILE]
Needs: pip install onnx numpy
"""

import argparse
import json
import pathlib
import re
import shutil
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPS_RS = ROOT / "compiler" / "src" / "onnx" / "ops" / "mod.rs"
DEFAULT_DOMAINS = ("", "ai.onnx")


def claimed_ops_from_source(path):
    """The strings of `pub const SUPPORTED_OPS: &[&str] = &[ ... ];` in `path`."""
    text = path.read_text(encoding="utf-8")
    m = re.search(r"pub\s+const\s+SUPPORTED_OPS\s*:\s*&\[&str\]\s*=\s*&\[(.*?)\];", text, re.S)
    if not m:
        sys.exit(f"error: no `pub const SUPPORTED_OPS: &[&str]` in {path}")
    body = re.sub(r"//[^\n]*", "", m.group(1))
    ops = re.findall(r'"([^"]+)"', body)
    if not ops:
        sys.exit(f"error: SUPPORTED_OPS in {path} is empty")
    return ops


def split_ops(text):
    return [op for op in re.split(r"[\s,]+", text) if op]


def node_ops(graph):
    """(domain, op_type) of every node of `graph` and of its subgraphs, in order."""
    out = []
    for node in graph.node:
        out.append((node.domain, node.op_type))
        for attr in node.attribute:
            if attr.HasField("g"):
                out.extend(node_ops(attr.g))
            for g in attr.graphs:
                out.extend(node_ops(g))
    return out


def snake(op):
    """`LayerNormalization` -> `layer_normalization`, `MatMul` -> `mat_mul`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op).lower()


# Names ONNX's node tests use for ops other than the op's own (lower or snake case).
ALIASES = {
    "BatchNormalization": ["batchnorm"],
    "Conv": ["basic_conv"],
    "Dropout": ["training_dropout"],
    "InstanceNormalization": ["instancenorm"],
    "LpNormalization": ["l1normalization", "l2normalization"],
    "MeanVarianceNormalization": ["mvn"],
    "Momentum": ["nesterov_momentum"],
    "NegativeLogLikelihoodLoss": ["nllloss"],
    "Pad": ["constant_pad", "edge_pad", "reflect_pad", "wrap_pad"],
    "RNN": ["simple_rnn"],
    "SoftmaxCrossEntropyLoss": ["sce"],
    "Trilu": ["tril", "triu"],
}


def name_match(case, op):
    """Length of the `test_<op>` prefix of `case` (op in lower or snake case, or an
    alias; followed by `_`, a digit or nothing), or 0."""
    best = 0
    for form in {op.lower(), snake(op), *ALIASES.get(op, [])}:
        prefix = "test_" + form
        rest = case[len(prefix) :]
        if case.startswith(prefix) and (not rest or rest[0] == "_" or rest[0].isdigit()):
            best = max(best, len(prefix))
    return best


def tested_op(case, ops_in_order, claimed, all_ops):
    """The op a case is about (see the module doc)."""
    best, best_len = None, 0
    for op in ops_in_order:
        n = name_match(case, op) if op in claimed else 0
        if n > best_len:
            best, best_len = op, n
    if best:
        return best
    for op in sorted(all_ops):
        n = name_match(case, op)
        if n > best_len:
            best, best_len = op, n
    if best:
        return best
    return ops_in_order[0] if ops_in_order else "?"


def value_kind(vi):
    t = vi.type
    which = t.WhichOneof("value")
    return which or "no type"


def tensor_proto(value, name):
    """A TensorProto of a test value, named `name`; raises ValueError for non-tensors."""
    if isinstance(value, onnx.TensorProto):
        t = onnx.TensorProto()
        t.CopyFrom(value)
        t.name = name
        return t
    if value is None:
        raise ValueError("an absent optional value")
    if isinstance(value, (list, tuple, dict)):
        raise ValueError(f"a {type(value).__name__}, not a tensor")
    if not isinstance(value, (np.ndarray, np.generic)):
        raise ValueError(f"a {type(value).__name__}, not a tensor")
    return numpy_helper.from_array(np.asarray(value), name)


def serialize(message):
    return message.SerializeToString(deterministic=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=pathlib.Path, help="output directory (emptied first)")
    parser.add_argument("--ops", help="comma-separated op list (default: SUPPORTED_OPS of ops/mod.rs)")
    parser.add_argument("--ops-file", type=pathlib.Path, help="file of op names (commas or whitespace)")
    args = parser.parse_args()

    if args.ops:
        claimed = split_ops(args.ops)
    elif args.ops_file:
        claimed = split_ops(args.ops_file.read_text(encoding="utf-8"))
    else:
        claimed = claimed_ops_from_source(OPS_RS)
    claimed_set = set(claimed)
    all_ops = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in DEFAULT_DOMAINS}

    # The cases draw their data from numpy's global generator as they are collected.
    np.random.seed(0)
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = sorted(node_cases.collect_testcases(), key=lambda c: c.name)

    out = args.out
    if out.exists():
        if any(out.iterdir()) and not (out / "index.json").exists():
            sys.exit(f"error: {out} is not empty and holds no index.json: not emptying it")
        shutil.rmtree(out)
    out.mkdir(parents=True)

    index, skipped = [], []
    for case in cases:
        model = case.model
        if model is None or not case.data_sets:
            continue
        ops = node_ops(model.graph)
        if not ops or any(d not in DEFAULT_DOMAINS or op not in claimed_set for d, op in ops):
            continue
        if model.functions:
            skipped.append((case.name, "the model defines local functions"))
            continue
        graph = model.graph
        reason = None
        for what, vis in (("input", graph.input), ("output", graph.output)):
            for vi in vis:
                kind = value_kind(vi)
                if kind != "tensor_type":
                    reason = f"{what} `{vi.name}` is a {kind.replace('_type', '')}, not a tensor"
                    break
            if reason:
                break
        files = {}
        if not reason:
            for k, (inputs, outputs) in enumerate(case.data_sets):
                if len(inputs) != len(graph.input) or len(outputs) != len(graph.output):
                    reason = (
                        f"data set {k} has {len(inputs)} inputs and {len(outputs)} outputs, "
                        f"the graph {len(graph.input)} and {len(graph.output)}"
                    )
                    break
                try:
                    for kind, values, vis in (("input", inputs, graph.input), ("output", outputs, graph.output)):
                        for j, (v, vi) in enumerate(zip(values, vis)):
                            path = f"test_data_set_{k}/{kind}_{j}.pb"
                            files[path] = serialize(tensor_proto(v, vi.name))
                except (ValueError, TypeError, KeyError) as e:
                    reason = f"data set {k}: {kind} {j} (`{vi.name}`): {e}"
                    break
        if reason:
            skipped.append((case.name, reason))
            continue
        d = out / case.name
        d.mkdir()
        (d / "model.onnx").write_bytes(serialize(model))
        for path, data in files.items():
            (d / path).parent.mkdir(exist_ok=True)
            (d / path).write_bytes(data)
        order = list(dict.fromkeys(op for _, op in ops))
        index.append(
            {
                "case": case.name,
                "op": tested_op(case.name, order, claimed_set, all_ops),
                "ops": order,
                "dir": case.name,
                "rtol": case.rtol,
                "atol": case.atol,
            }
        )

    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    (out / "claimed_ops.txt").write_text("".join(f"{op}\n" for op in claimed), encoding="utf-8")
    (out / "_skipped.txt").write_text("".join(f"{c}: {r}\n" for c, r in skipped), encoding="utf-8")
    print(
        f"{len(index)} node test cases of {len(claimed)} claimed ops written to {out} "
        f"({len(skipped)} skipped, see _skipped.txt; onnx {onnx.__version__})"
    )


if __name__ == "__main__":
    main()
