//! The ops: each ONNX node becomes IR nodes (canonicalised: `Gemm` is
//! `Transpose` + `MatMul` + `Mul` + `Add`, `Flatten` is `Reshape`, `Constant`
//! is a constant, `Identity` an alias unless it names a graph output). Shapes
//! and element types are inferred as the nodes are added.

use super::ImportError;
use super::import::{Importer, is_default_domain};
use super::node::NodeCx;
use super::proto::NodeProto;
use super::tensor::{MAX_ELEMENTS, checked_numel, data_type_name, elem_type, tensor_from_proto};
use crate::ir::{
    ElemType, Op, PoolKind, ReduceKind, Tensor, TensorType, Unary, ValueId, Window, infer,
};

/// The ONNX ops (default domain) the importer claims to support. The
/// conformance runner (`tests/conformance.rs`) runs ONNX's backend node tests
/// of exactly these.
pub const SUPPORTED_OPS: &[&str] = &[
    "Abs",
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Concat",
    "Constant",
    "Conv",
    "DequantizeLinear",
    "Div",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Gelu",
    "Gemm",
    "Gather",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Identity",
    "LayerNormalization",
    "Log",
    "MatMul",
    "MatMulInteger",
    "Max",
    "MaxPool",
    "Min",
    "Mul",
    "Neg",
    "Pow",
    "QLinearMatMul",
    "QuantizeLinear",
    "Reciprocal",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Round",
    "Sigmoid",
    "Slice",
    "Softmax",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Tanh",
    "Transpose",
    "Unsqueeze",
    "Where",
];

/// What a node lowered to.
enum Lowered {
    /// A new value: it takes the node output's ONNX name.
    Value(ValueId),
    /// An existing value, now also known by the node output's name.
    Alias(ValueId),
    /// One new value per output (absent outputs are `None`).
    Many(Vec<Option<ValueId>>),
}

/// Lowers one node (the `index`-th of the graph) into the graph.
pub(super) fn lower(
    imp: &mut Importer,
    proto: &NodeProto,
    index: usize,
) -> Result<(), ImportError> {
    let cx = NodeCx::new(proto, index);
    if !is_default_domain(&proto.domain) {
        return Err(ImportError::UnsupportedDomain {
            node: cx.node,
            op_type: proto.op_type.clone(),
            domain: proto.domain.clone(),
        });
    }
    let lowered = match proto.op_type.as_str() {
        "MatMul" => binary(imp, &cx, Op::MatMul),
        "Add" => binary(imp, &cx, Op::Add),
        "Sub" => binary(imp, &cx, Op::Sub),
        "Mul" => binary(imp, &cx, Op::Mul),
        "Div" => binary(imp, &cx, Op::Div),
        "Relu" => relu(imp, &cx),
        "Pow" => pow(imp, &cx),
        "Gelu" => gelu(imp, &cx),
        "Max" => variadic(imp, &cx, Op::Max),
        "Min" => variadic(imp, &cx, Op::Min),
        name if Unary::ALL.iter().any(|u| u.name() == name) => {
            let u = Unary::ALL
                .into_iter()
                .find(|u| u.name() == name)
                .unwrap_or(Unary::Neg);
            unary(imp, &cx, u)
        }
        "Identity" => identity(imp, &cx),
        "Gemm" => gemm(imp, &cx),
        "Reshape" => reshape(imp, &cx),
        "Flatten" => flatten(imp, &cx),
        "Unsqueeze" => squeeze(imp, &cx, true),
        "Expand" => expand(imp, &cx),
        "Squeeze" => squeeze(imp, &cx, false),
        "Transpose" => transpose(imp, &cx),
        "Cast" => cast(imp, &cx),
        "Constant" => constant(imp, &cx),
        "ReduceSum" => reduce(imp, &cx, ReduceKind::Sum),
        "ReduceMean" => reduce(imp, &cx, ReduceKind::Mean),
        "ReduceMax" => reduce(imp, &cx, ReduceKind::Max),
        "ReduceMin" => reduce(imp, &cx, ReduceKind::Min),
        "Softmax" => softmax(imp, &cx),
        "LayerNormalization" => layer_norm(imp, &cx),
        "Slice" => slice(imp, &cx),
        "Split" => split(imp, &cx),
        "Concat" => concat(imp, &cx),
        "Where" => where_(imp, &cx),
        "Gather" => gather(imp, &cx),
        "Conv" => conv(imp, &cx),
        "MaxPool" => pool(imp, &cx, true),
        "AveragePool" => pool(imp, &cx, false),
        "GlobalAveragePool" => global_pool(imp, &cx, ReduceKind::Mean),
        "GlobalMaxPool" => global_pool(imp, &cx, ReduceKind::Max),
        "BatchNormalization" => batch_norm(imp, &cx),
        "QuantizeLinear" => quantize(imp, &cx),
        "DequantizeLinear" => dequantize(imp, &cx),
        "MatMulInteger" => matmul_integer(imp, &cx).map(Lowered::Value),
        "QLinearMatMul" => qlinear_matmul(imp, &cx),
        _ => Err(ImportError::UnsupportedOp {
            node: cx.node.clone(),
            op_type: proto.op_type.clone(),
            opset: imp.opset,
        }),
    }?;
    bind_output(imp, &cx, lowered)
}

fn bind_output(imp: &mut Importer, cx: &NodeCx, lowered: Lowered) -> Result<(), ImportError> {
    if let Lowered::Many(vs) = lowered {
        for (name, v) in cx.proto.output.iter().zip(vs) {
            if let Some(v) = v.filter(|_| !name.is_empty()) {
                imp.bind(name, v, true)?;
            }
        }
        return Ok(());
    }
    let Some(name) = cx.proto.output.first().filter(|n| !n.is_empty()) else {
        return Ok(()); // an unnamed result nothing can read
    };
    match lowered {
        Lowered::Many(_) => Ok(()),
        Lowered::Value(v) => imp.bind(name, v, true),
        Lowered::Alias(v) => imp.bind(name, v, false),
    }
}

// ---- Inputs, outputs and node creation ----

/// Checks the node has `min..=max` inputs (absent optional ones included) and one output.
fn arity(cx: &NodeCx, min: usize, max: usize) -> Result<(), ImportError> {
    let n = cx.proto.input.len();
    if n < min || n > max {
        let expected = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        let plural = if max == 1 { "" } else { "s" };
        return Err(cx.arity_err(format!("takes {expected} input{plural}, has {n}")));
    }
    match cx.proto.output.len() {
        1 => Ok(()),
        k => Err(cx.arity_err(format!("has {k} outputs, the op has 1"))),
    }
}

/// Input `i`, which must be present.
fn input(imp: &Importer, cx: &NodeCx, i: usize) -> Result<ValueId, ImportError> {
    optional_input(imp, cx, i)?.ok_or_else(|| ImportError::MissingInput {
        node: cx.node.clone(),
        op_type: cx.op_type(),
        position: i,
        value: String::new(),
    })
}

/// Input `i`, or `None` when absent (past the end or named `""`).
fn optional_input(imp: &Importer, cx: &NodeCx, i: usize) -> Result<Option<ValueId>, ImportError> {
    match cx.proto.input.get(i).filter(|n| !n.is_empty()) {
        None => Ok(None),
        Some(name) => imp
            .value(name)
            .map(Some)
            .ok_or_else(|| ImportError::MissingInput {
                node: cx.node.clone(),
                op_type: cx.op_type(),
                position: i,
                value: name.clone(),
            }),
    }
}

/// Adds an IR node for this ONNX node (`step` names the part of a decomposed
/// op) and returns its result, with a typed error if the op does not fit its inputs.
fn add(
    imp: &mut Importer,
    cx: &NodeCx,
    step: &str,
    op: Op,
    inputs: Vec<ValueId>,
) -> Result<ValueId, ImportError> {
    let tys: Vec<TensorType> = inputs.iter().map(|v| imp.g.ty(*v).clone()).collect();
    let out = infer(&op, &tys).map_err(|e| op_err(cx, &op, &e))?;
    if out.iter().any(|t| checked_numel(&t.shape).is_none()) {
        let e = format!("the result has more than {MAX_ELEMENTS} elements");
        return Err(op_err(cx, &op, &e));
    }
    let name = if step.is_empty() {
        cx.name.clone()
    } else {
        format!("{}/{step}", cx.name)
    };
    let outputs = imp
        .g
        .add_node(name, op.clone(), inputs)
        .map_err(|e| cx.shape_err(e))?;
    outputs
        .first()
        .copied()
        .ok_or_else(|| op_err(cx, &op, "the op gives no result"))
}

/// A shape error, naming the IR op when it is a part of a decomposed ONNX op.
fn op_err(cx: &NodeCx, op: &Op, e: &str) -> ImportError {
    if op.name() == cx.proto.op_type {
        cx.shape_err(e)
    } else {
        cx.shape_err(format!("{}: {e}", op.name()))
    }
}

/// A scalar constant of type `elem`.
fn scalar(imp: &mut Importer, name: String, elem: ElemType, x: f64) -> ValueId {
    let ty = TensorType {
        elem,
        shape: vec![],
    };
    imp.g.add_constant(name, Tensor::new(ty, vec![x]))
}

// ---- The ops ----

/// `MatMul`, `Add`, `Sub`, `Mul`, `Div`: two inputs, numpy broadcasting.
fn binary(imp: &mut Importer, cx: &NodeCx, op: Op) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&[])?;
    let (a, b) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    add(imp, cx, "", op, vec![a, b]).map(Lowered::Value)
}

/// `Max` / `Min` of one or more inputs (numpy broadcasting), as a chain of
/// binary ops; of one input, the input.
fn variadic(imp: &mut Importer, cx: &NodeCx, op: Op) -> Result<Lowered, ImportError> {
    let n = cx.proto.input.len();
    if n == 0 || cx.proto.output.len() != 1 {
        return Err(cx.arity_err("takes at least 1 input and has 1 output"));
    }
    cx.check_attributes(&[])?;
    let mut acc = input(imp, cx, 0)?;
    if n == 1 {
        return add(imp, cx, "", Op::Identity, vec![acc]).map(Lowered::Value);
    }
    for i in 1..n {
        let x = input(imp, cx, i)?;
        let step = if i + 1 == n {
            String::new()
        } else {
            format!("part{i}")
        };
        acc = add(imp, cx, &step, op.clone(), vec![acc, x])?;
    }
    Ok(Lowered::Value(acc))
}

/// `x ^ p` with a constant scalar exponent, canonicalised: `x * x` (and
/// further products) for small integers, `Sqrt`, `Reciprocal`, or
/// `Exp(Log(x) * p)` in general (NaN for a negative base, as ONNX gives for a
/// non-integer exponent).
fn pow(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&[])?;
    let (x, e) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let Some(t) = imp.g.constants.get(&e) else {
        return Err(ImportError::NotConstant {
            node: cx.node.clone(),
            op_type: cx.op_type(),
            value: imp.g.values[e.index()].name.clone(),
        });
    };
    if t.data.len() != 1 {
        let ty = &t.ty;
        return Err(cx.shape_err(format!(
            "the exponent must be a scalar constant, it is {ty}"
        )));
    }
    if !imp.g.ty(x).elem.is_float() {
        let ty = imp.g.ty(x);
        return Err(cx.shape_err(format!("the base must be floating-point, it is {ty}")));
    }
    let p = t.data[0];
    let mul = |imp: &mut Importer, a: ValueId, b: ValueId, step: &str| {
        add(imp, cx, step, Op::Mul, vec![a, b])
    };
    let un = |imp: &mut Importer, u: Unary, a: ValueId, step: &str| {
        add(imp, cx, step, Op::Unary(u), vec![a])
    };
    let v = if p == 1.0 {
        add(imp, cx, "", Op::Identity, vec![x])?
    } else if p == 2.0 {
        mul(imp, x, x, "")?
    } else if p == 3.0 {
        let sq = mul(imp, x, x, "square")?;
        mul(imp, sq, x, "")?
    } else if p == 4.0 {
        let sq = mul(imp, x, x, "square")?;
        mul(imp, sq, sq, "")?
    } else if p == 0.5 {
        un(imp, Unary::Sqrt, x, "")?
    } else if p == -1.0 {
        un(imp, Unary::Reciprocal, x, "")?
    } else if p == -0.5 {
        let r = un(imp, Unary::Sqrt, x, "sqrt")?;
        un(imp, Unary::Reciprocal, r, "")?
    } else {
        let elem = imp.g.ty(x).elem;
        let l = un(imp, Unary::Log, x, "log")?;
        let k = scalar(imp, format!("{}/exponent", cx.name), elem, p);
        let m = mul(imp, l, k, "scaled")?;
        un(imp, Unary::Exp, m, "")?
    };
    Ok(Lowered::Value(v))
}

/// `Gelu` (opset 20), canonicalised: `0.5 · x · (1 + erf(x / √2))`, or with
/// `approximate = "tanh"`, `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`.
fn gelu(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["approximate"])?;
    let x = input(imp, cx, 0)?;
    let elem = imp.g.ty(x).elem;
    if !elem.is_float() {
        let ty = imp.g.ty(x);
        return Err(cx.shape_err(format!(
            "Gelu is defined on floating-point tensors, the input is {ty}"
        )));
    }
    let approximate = cx.string("approximate", "none")?;
    let k = |imp: &mut Importer, what: &str, v: f64| {
        scalar(imp, format!("{}/{what}", cx.name), elem, v)
    };
    let inner = match approximate.as_str() {
        "none" => {
            let c = k(imp, "inv_sqrt2", std::f64::consts::FRAC_1_SQRT_2);
            let s = add(imp, cx, "scaled", Op::Mul, vec![x, c])?;
            add(imp, cx, "erf", Op::Unary(Unary::Erf), vec![s])?
        }
        "tanh" => {
            let x2 = add(imp, cx, "square", Op::Mul, vec![x, x])?;
            let x3 = add(imp, cx, "cube", Op::Mul, vec![x2, x])?;
            let a = k(imp, "coeff", 0.044715);
            let ax3 = add(imp, cx, "cubic", Op::Mul, vec![x3, a])?;
            let sum = add(imp, cx, "poly", Op::Add, vec![x, ax3])?;
            let c = k(imp, "sqrt_2_over_pi", (2.0 / std::f64::consts::PI).sqrt());
            let s = add(imp, cx, "scaled", Op::Mul, vec![sum, c])?;
            add(imp, cx, "tanh", Op::Unary(Unary::Tanh), vec![s])?
        }
        other => {
            return Err(cx.attr_err(
                "approximate",
                format!("must be \"none\" or \"tanh\", is \"{other}\""),
            ));
        }
    };
    let one = k(imp, "one", 1.0);
    let onep = add(imp, cx, "one_plus", Op::Add, vec![inner, one])?;
    let half = k(imp, "half", 0.5);
    let hx = add(imp, cx, "half_x", Op::Mul, vec![x, half])?;
    add(imp, cx, "", Op::Mul, vec![hx, onep]).map(Lowered::Value)
}

fn unary(imp: &mut Importer, cx: &NodeCx, u: Unary) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = input(imp, cx, 0)?;
    add(imp, cx, "", Op::Unary(u), vec![x]).map(Lowered::Value)
}

fn relu(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = input(imp, cx, 0)?;
    add(imp, cx, "", Op::Relu, vec![x]).map(Lowered::Value)
}

/// An alias of its input, except for a graph output, which keeps its own value.
fn identity(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = input(imp, cx, 0)?;
    let names_output = cx.proto.output.iter().any(|o| imp.is_graph_output(o));
    if names_output {
        add(imp, cx, "", Op::Identity, vec![x]).map(Lowered::Value)
    } else {
        Ok(Lowered::Alias(x))
    }
}

/// `alpha * A' * B' + beta * C` as `Transpose`, `MatMul`, `Mul` by a constant, `Add`.
fn gemm(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 3)?;
    cx.check_attributes(&["alpha", "beta", "transA", "transB"])?;
    let (alpha, beta) = (cx.float("alpha", 1.0)?, cx.float("beta", 1.0)?);
    let (trans_a, trans_b) = (cx.flag("transA")?, cx.flag("transB")?);
    let (a, b) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let c = optional_input(imp, cx, 2)?;
    let a = gemm_operand(imp, cx, a, trans_a, "transpose_a")?;
    let b = gemm_operand(imp, cx, b, trans_b, "transpose_b")?;
    let mut y = add(imp, cx, "matmul", Op::MatMul, vec![a, b])?;
    if alpha != 1.0 {
        y = scale(imp, cx, y, alpha, "alpha")?;
    }
    if let Some(c) = c {
        y = gemm_bias(imp, cx, y, c, beta)?;
    }
    Ok(Lowered::Value(y))
}

/// A 2-D operand of `Gemm`, transposed if asked.
fn gemm_operand(
    imp: &mut Importer,
    cx: &NodeCx,
    v: ValueId,
    transpose: bool,
    step: &str,
) -> Result<ValueId, ImportError> {
    let ty = imp.g.ty(v);
    if ty.shape.len() != 2 {
        let name = &imp.g.values[v.index()].name;
        return Err(cx.shape_err(format!("operand `{name}` must be 2-D, it is {ty}")));
    }
    if !transpose {
        return Ok(v);
    }
    add(imp, cx, step, Op::Transpose { perm: vec![1, 0] }, vec![v])
}

/// `v * factor`, the factor a scalar constant of `v`'s element type.
fn scale(
    imp: &mut Importer,
    cx: &NodeCx,
    v: ValueId,
    factor: f32,
    what: &str,
) -> Result<ValueId, ImportError> {
    let elem = imp.g.ty(v).elem;
    let k = scalar(imp, format!("{}/{what}", cx.name), elem, f64::from(factor));
    add(imp, cx, &format!("mul_{what}"), Op::Mul, vec![v, k])
}

/// `y + beta * C`, with `C` broadcast to `y`'s shape (never the other way).
fn gemm_bias(
    imp: &mut Importer,
    cx: &NodeCx,
    y: ValueId,
    c: ValueId,
    beta: f32,
) -> Result<ValueId, ImportError> {
    let c = if beta == 1.0 {
        c
    } else {
        scale(imp, cx, c, beta, "beta")?
    };
    let shape = imp.g.ty(y).shape.clone();
    let out = add(imp, cx, "add", Op::Add, vec![y, c])?;
    if imp.g.ty(out).shape != shape {
        let c_ty = imp.g.ty(c);
        return Err(cx.shape_err(format!(
            "C ({c_ty}) does not broadcast to the result shape {shape:?}"
        )));
    }
    Ok(out)
}

/// `Reshape` with a constant shape: `0` copies the input dimension (unless
/// `allowzero`), `-1` is inferred.
fn reshape(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&["allowzero"])?;
    let allowzero = cx.flag("allowzero")?;
    let (x, s) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let spec = constant_ints(imp, cx, s)?;
    let shape = reshape_shape(&imp.g.ty(x).shape, &spec, allowzero).map_err(|e| cx.shape_err(e))?;
    add(imp, cx, "", Op::Reshape { shape }, vec![x]).map(Lowered::Value)
}

/// The values of a constant 1-D `int64` input.
fn constant_ints(imp: &Importer, cx: &NodeCx, v: ValueId) -> Result<Vec<i64>, ImportError> {
    let name = &imp.g.values[v.index()].name;
    let Some(t) = imp.g.constants.get(&v) else {
        return Err(ImportError::NotConstant {
            node: cx.node.clone(),
            op_type: cx.op_type(),
            value: name.clone(),
        });
    };
    if t.ty.elem != ElemType::I64 || t.ty.shape.len() != 1 {
        let ty = &t.ty;
        return Err(cx.shape_err(format!("`{name}` must be a 1-D int64 tensor, it is {ty}")));
    }
    Ok(t.data.iter().map(|x| *x as i64).collect())
}

/// The output shape of `Reshape`: ONNX's rules for `0` and `-1`.
pub(super) fn reshape_shape(
    input: &[usize],
    spec: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, String> {
    if allowzero && spec.contains(&0) && spec.contains(&-1) {
        return Err(format!("shape {spec:?} has both 0 and -1 with allowzero"));
    }
    let mut out = Vec::with_capacity(spec.len());
    let mut inferred = None;
    for (i, &d) in spec.iter().enumerate() {
        out.push(match d {
            -1 if inferred.is_some() => return Err(format!("shape {spec:?} has more than one -1")),
            -1 => {
                inferred = Some(i);
                1
            }
            0 if !allowzero => *input.get(i).ok_or_else(|| {
                format!("shape {spec:?}: the 0 at position {i} copies a dimension the input {input:?} does not have")
            })?,
            d => usize::try_from(d).map_err(|_| format!("shape {spec:?} has the invalid dimension {d}"))?,
        });
    }
    let numel: usize = input.iter().product();
    let known = checked_numel(&out).ok_or_else(|| format!("shape {spec:?} is too large"))?;
    if let Some(i) = inferred {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(format!(
                "cannot infer the -1 of {spec:?}: {numel} elements {input:?} do not divide into it"
            ));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(format!(
            "cannot reshape {numel} elements {input:?} into {out:?}"
        ));
    }
    Ok(out)
}

/// `Expand(x, shape)`: `x` broadcast with `shape` (numpy rules, either side
/// may broadcast), canonicalised as `x + zeros(shape)`.
fn expand(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&[])?;
    let (x, s) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let spec = constant_ints(imp, cx, s)?;
    let dims: Vec<usize> = spec
        .iter()
        .map(|d| {
            usize::try_from(*d)
                .map_err(|_| cx.shape_err(format!("shape {spec:?} has a negative dimension")))
        })
        .collect::<Result<_, _>>()?;
    let elem = imp.g.ty(x).elem;
    let n = checked_numel(&dims)
        .filter(|n| *n <= MAX_ELEMENTS)
        .ok_or_else(|| cx.shape_err(format!("shape {spec:?} is too large")))?;
    let zeros = imp.g.add_constant(
        format!("{}/zeros", cx.name),
        Tensor::new(TensorType { elem, shape: dims }, vec![0.0; n]),
    );
    add(imp, cx, "", Op::Add, vec![x, zeros]).map(Lowered::Value)
}

/// `Unsqueeze` (insert size-1 dimensions at `axes` of the result) and
/// `Squeeze` (remove the size-1 dimensions at `axes`, or all of them), as a
/// `Reshape`. Axes are an attribute before opset 13 and an input from 13 on.
fn squeeze(imp: &mut Importer, cx: &NodeCx, insert: bool) -> Result<Lowered, ImportError> {
    let x = input(imp, cx, 0)?;
    let axes: Option<Vec<i64>> = if imp.opset >= 13 {
        arity(cx, 1, 2)?;
        cx.check_attributes(&[])?;
        match cx.proto.input.get(1).filter(|n| !n.is_empty()) {
            Some(_) => {
                let a = input(imp, cx, 1)?;
                Some(constant_ints(imp, cx, a)?)
            }
            None => None,
        }
    } else {
        arity(cx, 1, 1)?;
        cx.check_attributes(&["axes"])?;
        cx.ints("axes")?.map(<[i64]>::to_vec)
    };
    let shape = imp.g.ty(x).shape.clone();
    let out_rank = if insert {
        shape.len() + axes.as_ref().map_or(0, Vec::len)
    } else {
        shape.len()
    };
    let rank = i64::try_from(out_rank).unwrap_or(i64::MAX);
    let resolve = |a: i64| -> Result<usize, ImportError> {
        let r = if a < 0 { a + rank } else { a };
        usize::try_from(r)
            .ok()
            .filter(|r| *r < out_rank)
            .ok_or_else(|| cx.attr_err("axes", format!("{a} is out of range for rank {rank}")))
    };
    let new_shape: Vec<usize> = if insert {
        let Some(axes) = axes else {
            return Err(cx.attr_err("axes", "required, missing"));
        };
        let mut at: Vec<usize> = axes.iter().map(|a| resolve(*a)).collect::<Result<_, _>>()?;
        at.sort_unstable();
        if at.windows(2).any(|w| w[0] == w[1]) {
            return Err(cx.attr_err("axes", "repeats an axis"));
        }
        let mut it = shape.iter();
        (0..out_rank)
            .map(|i| {
                if at.contains(&i) {
                    1
                } else {
                    *it.next().unwrap_or(&1)
                }
            })
            .collect()
    } else {
        let at: Vec<usize> = match &axes {
            Some(axes) => axes.iter().map(|a| resolve(*a)).collect::<Result<_, _>>()?,
            None => (0..shape.len()).filter(|&i| shape[i] == 1).collect(),
        };
        if let Some(&bad) = at.iter().find(|&&i| shape[i] != 1) {
            return Err(cx.shape_err(format!(
                "cannot squeeze dimension {bad} of size {}",
                shape[bad]
            )));
        }
        shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !at.contains(i))
            .map(|(_, d)| *d)
            .collect()
    };
    add(imp, cx, "", Op::Reshape { shape: new_shape }, vec![x]).map(Lowered::Value)
}

/// `Flatten` as a 2-D `Reshape` around `axis`.
fn flatten(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["axis"])?;
    let x = input(imp, cx, 0)?;
    let shape = imp.g.ty(x).shape.clone();
    let axis = cx.int("axis", 1)?;
    let rank = i64::try_from(shape.len()).unwrap_or(i64::MAX);
    let resolved = if axis < 0 { axis + rank } else { axis };
    let split = usize::try_from(resolved)
        .ok()
        .and_then(|a| shape.split_at_checked(a))
        .ok_or_else(|| {
            cx.attr_err(
                "axis",
                format!("{axis} is out of range for a {rank}-D input"),
            )
        })?;
    let (outer, inner) = (split.0.iter().product(), split.1.iter().product());
    add(
        imp,
        cx,
        "",
        Op::Reshape {
            shape: vec![outer, inner],
        },
        vec![x],
    )
    .map(Lowered::Value)
}

/// `Transpose`; without `perm`, the dimensions reversed.
fn transpose(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["perm"])?;
    let x = input(imp, cx, 0)?;
    let rank = imp.g.ty(x).shape.len();
    let perm = match cx.ints("perm")? {
        None => (0..rank).rev().collect(),
        Some(p) => p
            .iter()
            .map(|d| usize::try_from(*d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| cx.attr_err("perm", format!("{p:?} has a negative entry")))?,
    };
    add(imp, cx, "", Op::Transpose { perm }, vec![x]).map(Lowered::Value)
}

/// `Cast` to the element type `to` (`saturate` only concerns 8-bit floats, which the IR lacks).
fn cast(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["to", "saturate"])?;
    let x = input(imp, cx, 0)?;
    let to = cx.required_int("to")?;
    let data_type = i32::try_from(to).unwrap_or(i32::MAX);
    let to = elem_type(data_type).ok_or_else(|| {
        cx.attr_err(
            "to",
            format!("unsupported element type {}", data_type_name(data_type)),
        )
    })?;
    add(imp, cx, "", Op::Cast { to }, vec![x]).map(Lowered::Value)
}

/// The attributes a `Constant` may carry.
const CONSTANT_ATTRIBUTES: &[&str] = &[
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
    "sparse_value",
];

/// `Constant`: a constant value named by the node's output.
fn constant(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 0, 0)?;
    cx.check_attributes(CONSTANT_ATTRIBUTES)?;
    let [attr] = cx.proto.attribute.as_slice() else {
        let n = cx.proto.attribute.len();
        return Err(cx.attr_err(
            "value",
            format!("a Constant needs exactly one value attribute, it has {n}"),
        ));
    };
    let tensor = constant_value(cx, &attr.name)?;
    let name = cx.proto.output.first().cloned().unwrap_or_default();
    Ok(Lowered::Value(imp.g.add_constant(name, tensor)))
}

fn constant_value(cx: &NodeCx, attr: &str) -> Result<Tensor, ImportError> {
    let list = |elem, data: Vec<f64>| {
        let shape = vec![data.len()];
        Tensor::new(TensorType { elem, shape }, data)
    };
    let scalar = |elem, x| {
        Tensor::new(
            TensorType {
                elem,
                shape: vec![],
            },
            vec![x],
        )
    };
    Ok(match attr {
        "value" => constant_tensor(cx)?,
        "value_float" => scalar(ElemType::F32, f64::from(cx.float(attr, 0.0)?)),
        "value_int" => scalar(ElemType::I64, cx.int(attr, 0)? as f64),
        "value_floats" => {
            let v = cx.floats(attr)?.unwrap_or_default();
            list(ElemType::F32, v.iter().map(|x| f64::from(*x)).collect())
        }
        "value_ints" => {
            let v = cx.ints(attr)?.unwrap_or_default();
            list(ElemType::I64, v.iter().map(|x| *x as f64).collect())
        }
        _ => return Err(cx.attr_err(attr, "string and sparse constants are not supported")),
    })
}

fn constant_tensor(cx: &NodeCx) -> Result<Tensor, ImportError> {
    let t = cx
        .tensor("value")?
        .ok_or_else(|| cx.attr_err("value", "required, missing"))?;
    tensor_from_proto(t).map_err(|e| match e {
        ImportError::Tensor { message, .. } => cx.attr_err("value", message),
        other => other,
    })
}

// ---- Reductions, normalisations, slicing and joining ----

/// An axis in `-rank..rank`, resolved.
fn axis_of(cx: &NodeCx, what: &str, a: i64, rank: usize) -> Result<usize, ImportError> {
    let r = i64::try_from(rank).unwrap_or(i64::MAX);
    let x = if a < 0 { a + r } else { a };
    usize::try_from(x)
        .ok()
        .filter(|x| *x < rank)
        .ok_or_else(|| cx.attr_err(what, format!("{a} is out of range for rank {rank}")))
}

/// Sorted distinct axes.
fn axes_of(cx: &NodeCx, what: &str, axes: &[i64], rank: usize) -> Result<Vec<usize>, ImportError> {
    let mut out: Vec<usize> = axes
        .iter()
        .map(|a| axis_of(cx, what, *a, rank))
        .collect::<Result<_, _>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(cx.attr_err(what, format!("{axes:?} repeats an axis")));
    }
    Ok(out)
}

/// `ReduceSum` / `ReduceMean` / `ReduceMax` / `ReduceMin`. The axes are an
/// input from opset 13 (`ReduceSum`) or 18 (the others), an attribute
/// before; no axes means all of them, or nothing with `noop_with_empty_axes`.
fn reduce(imp: &mut Importer, cx: &NodeCx, kind: ReduceKind) -> Result<Lowered, ImportError> {
    let from_input = imp.opset >= if kind == ReduceKind::Sum { 13 } else { 18 };
    let x = input(imp, cx, 0)?;
    let rank = imp.g.ty(x).shape.len();
    let axes = if from_input {
        arity(cx, 1, 2)?;
        cx.check_attributes(&["keepdims", "noop_with_empty_axes"])?;
        match optional_input(imp, cx, 1)? {
            Some(a) => Some(constant_ints(imp, cx, a)?),
            None => None,
        }
    } else {
        arity(cx, 1, 1)?;
        cx.check_attributes(&["axes", "keepdims"])?;
        cx.ints("axes")?.map(<[i64]>::to_vec)
    };
    let keepdims = cx.int("keepdims", 1)? != 0;
    let noop = from_input && cx.int("noop_with_empty_axes", 0)? != 0;
    let axes = match axes.filter(|a| !a.is_empty()) {
        Some(a) => axes_of(cx, "axes", &a, rank)?,
        None if noop => return add(imp, cx, "", Op::Identity, vec![x]).map(Lowered::Value),
        None => (0..rank).collect(),
    };
    let op = Op::Reduce {
        kind,
        axes,
        keepdims,
    };
    add(imp, cx, "", op, vec![x]).map(Lowered::Value)
}

/// `Softmax` as `exp(x - max) / sum(exp(x - max))` over `axis` (opset 13 on),
/// or over `axis` and every later dimension (before 13, where the input is
/// seen as a matrix split at `axis`).
fn softmax(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["axis"])?;
    let x = input(imp, cx, 0)?;
    let rank = imp.g.ty(x).shape.len();
    if !imp.g.ty(x).elem.is_float() {
        let ty = imp.g.ty(x);
        return Err(cx.shape_err(format!(
            "Softmax is defined on floating-point tensors, the input is {ty}"
        )));
    }
    let default = if imp.opset >= 13 { -1 } else { 1 };
    let axis = axis_of(cx, "axis", cx.int("axis", default)?, rank.max(1))?;
    let axes: Vec<usize> = if imp.opset >= 13 {
        vec![axis]
    } else {
        (axis..rank).collect()
    };
    let red = |kind| Op::Reduce {
        kind,
        axes: axes.clone(),
        keepdims: true,
    };
    let m = add(imp, cx, "max", red(ReduceKind::Max), vec![x])?;
    let d = add(imp, cx, "shifted", Op::Sub, vec![x, m])?;
    let e = add(imp, cx, "exp", Op::Unary(Unary::Exp), vec![d])?;
    let s = add(imp, cx, "sum", red(ReduceKind::Sum), vec![e])?;
    add(imp, cx, "", Op::Div, vec![e, s]).map(Lowered::Value)
}

/// `LayerNormalization` (opset 17) over `axis` and every later dimension:
/// `(x - mean) / sqrt(var + epsilon) * scale + bias`, decomposed into the
/// reductions and element-wise ops a model exporter writes out by hand.
/// The optional `Mean` and `InvStdDev` outputs are bound too.
fn layer_norm(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let n = cx.proto.input.len();
    if !(2..=3).contains(&n) {
        return Err(cx.arity_err(format!("takes 2 to 3 inputs, has {n}")));
    }
    if cx.proto.output.is_empty() || cx.proto.output.len() > 3 {
        let k = cx.proto.output.len();
        return Err(cx.arity_err(format!("has {k} outputs, the op has 1 to 3")));
    }
    cx.check_attributes(&["axis", "epsilon", "stash_type"])?;
    if cx.int("stash_type", 1)? != 1 {
        return Err(cx.attr_err("stash_type", "only 1 (float32 statistics) is supported"));
    }
    let (x, scale) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let bias = optional_input(imp, cx, 2)?;
    let ty = imp.g.ty(x).clone();
    if !ty.elem.is_float() {
        return Err(cx.shape_err(format!("the input must be floating-point, it is {ty}")));
    }
    let rank = ty.shape.len();
    let axis = axis_of(cx, "axis", cx.int("axis", -1)?, rank)?;
    let eps = scalar(
        imp,
        format!("{}/epsilon", cx.name),
        ty.elem,
        f64::from(cx.float("epsilon", 1e-5)?),
    );
    let mean_op = Op::Reduce {
        kind: ReduceKind::Mean,
        axes: (axis..rank).collect(),
        keepdims: true,
    };
    let mean = add(imp, cx, "mean", mean_op.clone(), vec![x])?;
    let d = add(imp, cx, "centered", Op::Sub, vec![x, mean])?;
    let sq = add(imp, cx, "square", Op::Mul, vec![d, d])?;
    let var = add(imp, cx, "variance", mean_op, vec![sq])?;
    let ve = add(imp, cx, "variance_eps", Op::Add, vec![var, eps])?;
    let sd = add(imp, cx, "stddev", Op::Unary(Unary::Sqrt), vec![ve])?;
    let inv = add(
        imp,
        cx,
        "inv_stddev",
        Op::Unary(Unary::Reciprocal),
        vec![sd],
    )?;
    let normed = add(imp, cx, "normalized", Op::Mul, vec![d, inv])?;
    let mut y = add(imp, cx, "scaled", Op::Mul, vec![normed, scale])?;
    if let Some(b) = bias {
        y = add(imp, cx, "", Op::Add, vec![y, b])?;
    }
    Ok(Lowered::Many(vec![Some(y), Some(mean), Some(inv)]))
}

/// ONNX `Slice` bounds for one dimension of size `d`, normalised as
/// [`Op::Slice`] wants them.
fn slice_bounds(d: i64, start: i64, end: i64, step: i64) -> (i64, i64) {
    let wrap = |x: i64| if x < 0 { x.saturating_add(d) } else { x };
    let (s, e) = (wrap(start), wrap(end));
    if step > 0 {
        (s.clamp(0, d), e.clamp(0, d))
    } else {
        (s.clamp(0, (d - 1).max(0)), e.clamp(-1, d - 1))
    }
}

/// `Slice`: constant starts, ends, axes and steps (inputs from opset 10,
/// attributes before).
fn slice(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let x = input(imp, cx, 0)?;
    let shape = imp.g.ty(x).shape.clone();
    let rank = shape.len();
    let (starts, ends, axes, steps) = if imp.opset >= 10 {
        arity(cx, 3, 5)?;
        cx.check_attributes(&[])?;
        let get = |imp: &Importer, i: usize| -> Result<Option<Vec<i64>>, ImportError> {
            match optional_input(imp, cx, i)? {
                Some(v) => constant_ints(imp, cx, v).map(Some),
                None => Ok(None),
            }
        };
        (
            get(imp, 1)?.unwrap_or_default(),
            get(imp, 2)?.unwrap_or_default(),
            get(imp, 3)?,
            get(imp, 4)?,
        )
    } else {
        arity(cx, 1, 1)?;
        cx.check_attributes(&["starts", "ends", "axes"])?;
        let need = |n: &str| -> Result<Vec<i64>, ImportError> {
            cx.ints(n)?
                .map(<[i64]>::to_vec)
                .ok_or_else(|| cx.attr_err(n, "required, missing"))
        };
        (
            need("starts")?,
            need("ends")?,
            cx.ints("axes")?.map(<[i64]>::to_vec),
            None,
        )
    };
    let k = starts.len();
    let axes = axes.unwrap_or_else(|| (0..k as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; k]);
    if ends.len() != k || axes.len() != k || steps.len() != k {
        return Err(cx.shape_err(format!(
            "starts, ends, axes and steps have different lengths ({k}, {}, {}, {})",
            ends.len(),
            axes.len(),
            steps.len()
        )));
    }
    let mut st = vec![0i64; rank];
    let mut en: Vec<i64> = shape.iter().map(|d| *d as i64).collect();
    let mut sp = vec![1i64; rank];
    let mut seen = vec![false; rank];
    for i in 0..k {
        let a = axis_of(cx, "axes", axes[i], rank)?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(cx.attr_err("axes", format!("{axes:?} repeats an axis")));
        }
        if steps[i] == 0 {
            return Err(cx.shape_err("a step is 0"));
        }
        let (s, e) = slice_bounds(shape[a] as i64, starts[i], ends[i], steps[i]);
        (st[a], en[a], sp[a]) = (s, e, steps[i]);
    }
    let op = Op::Slice {
        starts: st,
        ends: en,
        steps: sp,
    };
    add(imp, cx, "", op, vec![x]).map(Lowered::Value)
}

/// `Split` into slices along `axis`: sizes from the `split` input (opset 13
/// on) or attribute, else equal parts (the last smaller, opset 18's
/// `num_outputs`).
fn split(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let x = input(imp, cx, 0)?;
    let shape = imp.g.ty(x).shape.clone();
    let rank = shape.len();
    let sizes = if imp.opset >= 13 {
        let n = cx.proto.input.len();
        if !(1..=2).contains(&n) {
            return Err(cx.arity_err(format!("takes 1 to 2 inputs, has {n}")));
        }
        cx.check_attributes(&["axis", "num_outputs"])?;
        match optional_input(imp, cx, 1)? {
            Some(v) => Some(constant_ints(imp, cx, v)?),
            None => None,
        }
    } else {
        if cx.proto.input.len() != 1 {
            return Err(cx.arity_err("takes 1 input"));
        }
        cx.check_attributes(&["axis", "split"])?;
        cx.ints("split")?.map(<[i64]>::to_vec)
    };
    let axis = axis_of(cx, "axis", cx.int("axis", 0)?, rank)?;
    let d = shape[axis] as i64;
    let outs = cx.proto.output.len() as i64;
    let sizes = match sizes {
        Some(s) => s,
        None => {
            let parts = cx.int("num_outputs", outs)?;
            if parts <= 0 {
                return Err(cx.attr_err("num_outputs", "must be positive"));
            }
            let each = (d + parts - 1) / parts;
            (0..parts).map(|i| each.min(d - i * each).max(0)).collect()
        }
    };
    if sizes.len() as i64 != outs || sizes.iter().any(|s| *s < 0) || sizes.iter().sum::<i64>() != d
    {
        return Err(cx.shape_err(format!(
            "split sizes {sizes:?} do not cut dimension {axis} of size {d} into {outs} parts"
        )));
    }
    let mut at = 0;
    let mut vs = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        let mut st = vec![0i64; rank];
        let mut en: Vec<i64> = shape.iter().map(|d| *d as i64).collect();
        (st[axis], en[axis]) = (at, at + size);
        at += size;
        let op = Op::Slice {
            starts: st,
            ends: en,
            steps: vec![1; rank],
        };
        vs.push(Some(add(imp, cx, &format!("part{i}"), op, vec![x])?));
    }
    Ok(Lowered::Many(vs))
}

/// `Concat` along `axis`.
fn concat(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    if cx.proto.input.is_empty() || cx.proto.output.len() != 1 {
        return Err(cx.arity_err("takes at least 1 input and has 1 output"));
    }
    cx.check_attributes(&["axis"])?;
    let xs: Vec<ValueId> = (0..cx.proto.input.len())
        .map(|i| input(imp, cx, i))
        .collect::<Result<_, _>>()?;
    let rank = imp.g.ty(xs[0]).shape.len();
    let axis = axis_of(cx, "axis", cx.required_int("axis")?, rank)?;
    add(imp, cx, "", Op::Concat { axis }, xs).map(Lowered::Value)
}

/// `Gather` along `axis` (negative counts from the end).
fn gather(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&["axis"])?;
    let data = input(imp, cx, 0)?;
    let indices = input(imp, cx, 1)?;
    let rank = imp.g.ty(data).shape.len() as i64;
    let axis = cx.int("axis", 0)?;
    let a = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&a) {
        return Err(cx.attr_err("axis", format!("{axis} is out of range for rank {rank}")));
    }
    add(
        imp,
        cx,
        "",
        Op::Gather { axis: a as usize },
        vec![data, indices],
    )
    .map(Lowered::Value)
}

/// `Where(cond, x, y)`.
fn where_(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 3, 3)?;
    cx.check_attributes(&[])?;
    let xs: Vec<ValueId> = (0..3)
        .map(|i| input(imp, cx, i))
        .collect::<Result<_, _>>()?;
    add(imp, cx, "", Op::Where, xs).map(Lowered::Value)
}

// ---- Convolution, pooling, batch normalisation ----

/// The window of a 2-D `Conv` / `MaxPool` / `AveragePool` over `x`, from its
/// attributes (`auto_pad` resolved).
fn window(cx: &NodeCx, x: &[usize], kernel: [usize; 2]) -> Result<Window, ImportError> {
    let two = |name: &str, default: usize| -> Result<[usize; 2], ImportError> {
        match cx.ints(name)? {
            None => Ok([default; 2]),
            Some([a, b]) if *a > 0 && *b > 0 => Ok([*a as usize, *b as usize]),
            Some(v) => Err(cx.attr_err(
                name,
                format!("{v:?}: two positive values expected (2-D only)"),
            )),
        }
    };
    let strides = two("strides", 1)?;
    let dilations = two("dilations", 1)?;
    let ceil = cx.int("ceil_mode", 0)? != 0;
    let auto_pad = cx.string("auto_pad", "NOTSET")?;
    let pads = match auto_pad.as_str() {
        "NOTSET" => match cx.ints("pads")? {
            None => [0; 4],
            Some(p) if p.len() == 4 && p.iter().all(|v| *v >= 0) => {
                [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize]
            }
            Some(p) => {
                return Err(
                    cx.attr_err("pads", format!("{p:?}: four non-negative values expected"))
                );
            }
        },
        "VALID" => [0; 4],
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut p = [0; 4];
            for i in 0..2 {
                let out = x[2 + i].div_ceil(strides[i]);
                let span = (kernel[i] - 1) * dilations[i] + 1;
                let total = ((out - 1) * strides[i] + span).saturating_sub(x[2 + i]);
                let (lo, hi) = if auto_pad == "SAME_UPPER" {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                };
                (p[i], p[i + 2]) = (lo, hi);
            }
            p
        }
        other => return Err(cx.attr_err("auto_pad", format!("unknown value \"{other}\""))),
    };
    Ok(Window {
        kernel,
        strides,
        pads,
        dilations,
        ceil,
    })
}

fn four_d(imp: &Importer, cx: &NodeCx, v: ValueId, what: &str) -> Result<Vec<usize>, ImportError> {
    let ty = imp.g.ty(v);
    if ty.shape.len() != 4 || !ty.elem.is_float() {
        return Err(cx.shape_err(format!(
            "{what} must be a 4-D floating-point tensor (2-D only), it is {ty}"
        )));
    }
    Ok(ty.shape.clone())
}

/// `Conv` (2-D): strides, padding (or `auto_pad`), dilations, groups.
fn conv(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 3)?;
    cx.check_attributes(&[
        "auto_pad",
        "dilations",
        "group",
        "kernel_shape",
        "pads",
        "strides",
    ])?;
    let (x, w) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let xs = four_d(imp, cx, x, "the input")?;
    let ws = four_d(imp, cx, w, "the weight")?;
    if let Some(k) = cx.ints("kernel_shape")?
        && k.iter().map(|d| *d as usize).ne(ws[2..].iter().copied())
    {
        return Err(cx.attr_err(
            "kernel_shape",
            format!("{k:?} is not the weights' {:?}", &ws[2..]),
        ));
    }
    let groups = usize::try_from(cx.int("group", 1)?)
        .ok()
        .filter(|g| *g > 0)
        .ok_or_else(|| cx.attr_err("group", "must be positive"))?;
    let window = window(cx, &xs, [ws[2], ws[3]])?;
    let mut ins = vec![x, w];
    if let Some(b) = optional_input(imp, cx, 2)? {
        ins.push(b);
    }
    add(imp, cx, "", Op::Conv { window, groups }, ins).map(Lowered::Value)
}

/// `MaxPool` / `AveragePool` (2-D). MaxPool's optional `Indices` output is not supported.
fn pool(imp: &mut Importer, cx: &NodeCx, max: bool) -> Result<Lowered, ImportError> {
    if cx.proto.input.len() != 1 {
        return Err(cx.arity_err("takes 1 input"));
    }
    if cx.proto.output.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(cx.arity_err("the Indices output is not supported"));
    }
    let mut known = vec![
        "auto_pad",
        "ceil_mode",
        "dilations",
        "kernel_shape",
        "pads",
        "strides",
    ];
    known.push(if max {
        "storage_order"
    } else {
        "count_include_pad"
    });
    cx.check_attributes(&known)?;
    let x = input(imp, cx, 0)?;
    let xs = four_d(imp, cx, x, "the input")?;
    let k = cx
        .ints("kernel_shape")?
        .ok_or_else(|| cx.attr_err("kernel_shape", "required, missing"))?;
    let [a, b] = k else {
        return Err(cx.attr_err("kernel_shape", format!("{k:?}: 2-D only")));
    };
    if *a <= 0 || *b <= 0 {
        return Err(cx.attr_err("kernel_shape", format!("{k:?} must be positive")));
    }
    let window = window(cx, &xs, [*a as usize, *b as usize])?;
    let kind = if max {
        PoolKind::Max
    } else {
        PoolKind::Average {
            count_include_pad: cx.int("count_include_pad", 0)? != 0,
        }
    };
    add(imp, cx, "", Op::Pool { kind, window }, vec![x]).map(Lowered::Value)
}

/// `GlobalAveragePool` / `GlobalMaxPool`: a reduction over the spatial dimensions.
fn global_pool(imp: &mut Importer, cx: &NodeCx, kind: ReduceKind) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = input(imp, cx, 0)?;
    let rank = imp.g.ty(x).shape.len();
    if rank < 3 || !imp.g.ty(x).elem.is_float() {
        let ty = imp.g.ty(x);
        return Err(cx.shape_err(format!(
            "the input must be a floating-point [N, C, ...] tensor, it is {ty}"
        )));
    }
    let op = Op::Reduce {
        kind,
        axes: (2..rank).collect(),
        keepdims: true,
    };
    add(imp, cx, "", op, vec![x]).map(Lowered::Value)
}

/// `BatchNormalization` in inference mode: `x · a + b` per channel, with
/// `a = scale / sqrt(var + eps)` and `b = bias - mean · a` (computed at import
/// when the statistics are constants, else as ops).
fn batch_norm(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    if cx.proto.input.len() != 5 {
        return Err(cx.arity_err(format!("takes 5 inputs, has {}", cx.proto.input.len())));
    }
    if cx.proto.output.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(
            cx.arity_err("the training outputs (running mean and variance) are not supported")
        );
    }
    cx.check_attributes(&["epsilon", "momentum", "training_mode", "spatial"])?;
    if cx.int("training_mode", 0)? != 0 {
        return Err(cx.attr_err("training_mode", "only inference (0) is supported"));
    }
    let x = input(imp, cx, 0)?;
    let ins: Vec<ValueId> = (1..5)
        .map(|i| input(imp, cx, i))
        .collect::<Result<_, _>>()?;
    let ty = imp.g.ty(x).clone();
    if ty.shape.len() < 2 || !ty.elem.is_float() {
        return Err(cx.shape_err(format!(
            "the input must be a floating-point [N, C, ...] tensor, it is {ty}"
        )));
    }
    let c = ty.shape[1];
    // Per-channel values broadcast over [N, C, ...]: shape [C, 1, ...].
    let mut shape = vec![c];
    shape.extend(std::iter::repeat_n(1, ty.shape.len() - 2));
    let eps = f64::from(cx.float("epsilon", 1e-5)?);
    let consts: Option<Vec<&Tensor>> = ins.iter().map(|v| imp.g.constants.get(v)).collect();
    let Some(k) = consts else {
        return Err(ImportError::NotConstant {
            node: cx.node.clone(),
            op_type: cx.op_type(),
            value: "scale, bias, mean and variance".to_owned(),
        });
    };
    if k.iter().any(|t| t.data.len() != c) {
        return Err(cx.shape_err(format!(
            "scale, bias, mean and variance must have {c} elements"
        )));
    }
    let a: Vec<f64> = (0..c)
        .map(|i| k[0].data[i] / (k[3].data[i] + eps).sqrt())
        .collect();
    let b: Vec<f64> = (0..c).map(|i| k[1].data[i] - k[2].data[i] * a[i]).collect();
    let elem = ty.elem;
    let mut constant = |name: &str, data: Vec<f64>| {
        let t = Tensor::new(
            TensorType {
                elem,
                shape: shape.clone(),
            },
            data,
        );
        imp.g.add_constant(format!("{}/{name}", cx.name), t)
    };
    let (a, b) = (constant("scale", a), constant("shift", b));
    let y = add(imp, cx, "scaled", Op::Mul, vec![x, a])?;
    add(imp, cx, "", Op::Add, vec![y, b]).map(Lowered::Value)
}

// ---- Quantisation ----

/// The integer range of a quantised type.
fn int_range(elem: ElemType) -> Option<(f64, f64)> {
    match elem {
        ElemType::I8 => Some((-128.0, 127.0)),
        ElemType::U8 => Some((0.0, 255.0)),
        ElemType::I32 => Some((-2147483648.0, 2147483647.0)),
        _ => None,
    }
}

/// A constant scale or zero point as `elem` values broadcast along `axis`
/// of a `rank`-D tensor (a scalar stays a scalar; a 1-D one becomes
/// `[C, 1, ..., 1]`).
fn per_axis(
    imp: &mut Importer,
    cx: &NodeCx,
    v: ValueId,
    axis: usize,
    rank: usize,
    elem: ElemType,
    what: &str,
) -> Result<ValueId, ImportError> {
    let Some(t) = imp.g.constants.get(&v).cloned() else {
        return Err(ImportError::NotConstant {
            node: cx.node.clone(),
            op_type: cx.op_type(),
            value: imp.g.values[v.index()].name.clone(),
        });
    };
    let shape = match t.ty.shape.as_slice() {
        [] | [1] => vec![],
        [c] => {
            let mut s = vec![*c];
            s.extend(std::iter::repeat_n(1, rank.saturating_sub(axis + 1)));
            s
        }
        other => {
            return Err(cx.shape_err(format!(
                "the {what} must be a scalar or 1-D, it is {other:?}"
            )));
        }
    };
    let ty = TensorType { elem, shape };
    Ok(imp.g.add_constant(
        format!("{}/{what}", cx.name),
        Tensor::new(ty, t.data.to_vec()),
    ))
}

/// `QuantizeLinear`: `saturate(round(x / scale) + zero_point)` in the zero
/// point's type (uint8 without one), per tensor or along `axis`.
fn quantize(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 3)?;
    cx.check_attributes(&["axis", "saturate"])?;
    let (x, s) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let zp = optional_input(imp, cx, 2)?;
    let ty = imp.g.ty(x).clone();
    if !ty.elem.is_float() {
        return Err(cx.shape_err(format!("the input must be floating-point, it is {ty}")));
    }
    let out = zp.map_or(ElemType::U8, |z| imp.g.ty(z).elem);
    let (lo, hi) = int_range(out)
        .filter(|_| out != ElemType::I32)
        .ok_or_else(|| {
            cx.shape_err(format!(
                "quantising to {} is not supported (int8, uint8)",
                out.name()
            ))
        })?;
    let rank = ty.shape.len();
    let axis = axis_of(cx, "axis", cx.int("axis", 1)?, rank.max(1))?;
    let sv = per_axis(imp, cx, s, axis, rank, ty.elem, "scale")?;
    let mut q = add(imp, cx, "scaled", Op::Div, vec![x, sv])?;
    q = add(imp, cx, "rounded", Op::Unary(Unary::Round), vec![q])?;
    if let Some(z) = zp {
        let zf = per_axis(imp, cx, z, axis, rank, ty.elem, "zero_point")?;
        q = add(imp, cx, "shifted", Op::Add, vec![q, zf])?;
    }
    let k = |imp: &mut Importer, what: &str, v: f64| {
        scalar(imp, format!("{}/{what}", cx.name), ty.elem, v)
    };
    let (lo, hi) = (k(imp, "low", lo), k(imp, "high", hi));
    q = add(imp, cx, "at_least", Op::Max, vec![q, lo])?;
    q = add(imp, cx, "at_most", Op::Min, vec![q, hi])?;
    add(imp, cx, "", Op::Cast { to: out }, vec![q]).map(Lowered::Value)
}

/// `DequantizeLinear`: `(x - zero_point) · scale`, per tensor or along `axis`.
fn dequantize(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 3)?;
    cx.check_attributes(&["axis"])?;
    let (x, s) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let zp = optional_input(imp, cx, 2)?;
    let ty = imp.g.ty(x).clone();
    if int_range(ty.elem).is_none() {
        return Err(cx.shape_err(format!(
            "dequantising {} is not supported (int8, uint8, int32)",
            ty.elem.name()
        )));
    }
    let f = imp.g.ty(s).elem;
    let rank = ty.shape.len();
    let axis = axis_of(cx, "axis", cx.int("axis", 1)?, rank.max(1))?;
    let mut y = add(imp, cx, "float", Op::Cast { to: f }, vec![x])?;
    if let Some(z) = zp {
        let zf = per_axis(imp, cx, z, axis, rank, f, "zero_point")?;
        y = add(imp, cx, "centered", Op::Sub, vec![y, zf])?;
    }
    let sv = per_axis(imp, cx, s, axis, rank, f, "scale")?;
    add(imp, cx, "", Op::Mul, vec![y, sv]).map(Lowered::Value)
}

/// `MatMulInteger`: `(A - a_zero_point) · (B - b_zero_point)` in int32; a
/// zero point per row of A or per column of B, or one for all.
fn matmul_integer(imp: &mut Importer, cx: &NodeCx) -> Result<ValueId, ImportError> {
    arity(cx, 2, 4)?;
    cx.check_attributes(&[])?;
    let (a, b) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let (azp, bzp) = (optional_input(imp, cx, 2)?, optional_input(imp, cx, 3)?);
    integer_product(imp, cx, a, azp, b, bzp)
}

fn integer_product(
    imp: &mut Importer,
    cx: &NodeCx,
    a: ValueId,
    azp: Option<ValueId>,
    b: ValueId,
    bzp: Option<ValueId>,
) -> Result<ValueId, ImportError> {
    let side = |imp: &mut Importer, v: ValueId, zp: Option<ValueId>, is_a: bool| {
        let ty = imp.g.ty(v).clone();
        if !matches!(ty.elem, ElemType::I8 | ElemType::U8) {
            return Err(cx.shape_err(format!("the operands must be int8 or uint8, one is {ty}")));
        }
        let name = if is_a { "a" } else { "b" };
        let mut x = add(
            imp,
            cx,
            &format!("{name}_wide"),
            Op::Cast { to: ElemType::I32 },
            vec![v],
        )?;
        if let Some(z) = zp {
            let Some(t) = imp.g.constants.get(&z).cloned() else {
                return Err(ImportError::NotConstant {
                    node: cx.node.clone(),
                    op_type: cx.op_type(),
                    value: imp.g.values[z.index()].name.clone(),
                });
            };
            // Per row of A: [M, 1]; per column of B: [N]; else a scalar.
            let shape = match (t.ty.shape.as_slice(), is_a) {
                ([] | [1], _) => vec![],
                ([m], true) => vec![*m, 1],
                ([n], false) => vec![*n],
                (other, _) => {
                    return Err(
                        cx.shape_err(format!("a zero point of shape {other:?} is not supported"))
                    );
                }
            };
            let ty = TensorType {
                elem: ElemType::I32,
                shape,
            };
            let zc = imp.g.add_constant(
                format!("{}/{name}_zero_point", cx.name),
                Tensor::new(ty, t.data.to_vec()),
            );
            x = add(imp, cx, &format!("{name}_centered"), Op::Sub, vec![x, zc])?;
        }
        Ok(x)
    };
    let a = side(imp, a, azp, true)?;
    let b = side(imp, b, bzp, false)?;
    add(imp, cx, "product", Op::MatMul, vec![a, b])
}

/// `QLinearMatMul`: the integer product of the centred operands, scaled by
/// `a_scale · b_scale / y_scale`, rounded, shifted by `y_zero_point` and
/// saturated to its type.
fn qlinear_matmul(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    if cx.proto.input.len() != 8 {
        return Err(cx.arity_err(format!("takes 8 inputs, has {}", cx.proto.input.len())));
    }
    cx.check_attributes(&[])?;
    let v: Vec<ValueId> = (0..8)
        .map(|i| input(imp, cx, i))
        .collect::<Result<_, _>>()?;
    let (a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp) = (v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    let acc = integer_product(imp, cx, a, Some(a_zp), b, Some(b_zp))?;
    let scale = |imp: &Importer, v: ValueId| -> Result<f64, ImportError> {
        match imp.g.constants.get(&v) {
            Some(t) if t.data.len() == 1 => Ok(t.data[0]),
            Some(_) => Err(cx.shape_err("only per-tensor scales and zero points are supported")),
            None => Err(ImportError::NotConstant {
                node: cx.node.clone(),
                op_type: cx.op_type(),
                value: imp.g.values[v.index()].name.clone(),
            }),
        }
    };
    let k = scale(imp, a_s)? * scale(imp, b_s)? / scale(imp, y_s)?;
    let out = imp.g.ty(y_zp).elem;
    let (lo, hi) = int_range(out)
        .filter(|_| out != ElemType::I32)
        .ok_or_else(|| {
            cx.shape_err(format!(
                "a {} result is not supported (int8, uint8)",
                out.name()
            ))
        })?;
    let zp = scale(imp, y_zp)?;
    let f = ElemType::F32;
    let c =
        |imp: &mut Importer, what: &str, x: f64| scalar(imp, format!("{}/{what}", cx.name), f, x);
    let mut y = add(imp, cx, "float", Op::Cast { to: f }, vec![acc])?;
    let kc = c(imp, "requantize", k);
    y = add(imp, cx, "scaled", Op::Mul, vec![y, kc])?;
    y = add(imp, cx, "rounded", Op::Unary(Unary::Round), vec![y])?;
    let zc = c(imp, "zero_point", zp);
    y = add(imp, cx, "shifted", Op::Add, vec![y, zc])?;
    let (l, h) = (c(imp, "low", lo), c(imp, "high", hi));
    y = add(imp, cx, "at_least", Op::Max, vec![y, l])?;
    y = add(imp, cx, "at_most", Op::Min, vec![y, h])?;
    add(imp, cx, "", Op::Cast { to: out }, vec![y]).map(Lowered::Value)
}

#[cfg(test)]
mod tests {
    use super::reshape_shape;

    #[test]
    fn reshape_copies_zeros_and_infers_minus_one() {
        assert_eq!(reshape_shape(&[2, 3, 4], &[0, -1], false), Ok(vec![2, 12]));
        assert_eq!(reshape_shape(&[2, 3, 4], &[-1], false), Ok(vec![24]));
        assert_eq!(
            reshape_shape(&[2, 3, 4], &[4, 0, 2], false),
            Ok(vec![4, 3, 2])
        );
        assert_eq!(reshape_shape(&[0, 3], &[3, 0], true), Ok(vec![3, 0]));
        assert_eq!(reshape_shape(&[6], &[], false).map_err(|_| ()), Err(()));
        assert_eq!(reshape_shape(&[1], &[], false), Ok(vec![]));
    }

    #[test]
    fn reshape_refuses_what_onnx_refuses() {
        let err = |input: &[usize], spec: &[i64], allowzero| {
            reshape_shape(input, spec, allowzero).expect_err("refused")
        };
        assert!(err(&[6], &[-1, -1], false).contains("more than one -1"));
        assert!(err(&[6], &[4, -1], false).contains("do not divide"));
        assert!(err(&[6], &[0, 0], false).contains("does not have"));
        assert!(err(&[6], &[-2, 3], false).contains("invalid dimension -2"));
        assert!(err(&[0], &[0, -1], true).contains("both 0 and -1"));
        assert!(err(&[6], &[i64::MAX, i64::MAX], false).contains("too large"));
        assert!(err(&[6], &[5], false).contains("cannot reshape"));
    }
}
