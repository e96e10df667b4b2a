//! The ops: each ONNX node becomes IR nodes (canonicalised: `Gemm` is
//! `Transpose` + `MatMul` + `Mul` + `Add`, `Flatten` is `Reshape`, `Constant`
//! is a constant, `Identity` an alias unless it names a graph output). Shapes
//! and element types are inferred as the nodes are added.
//!
//! By family: `elementwise` (with the activations), `gemm`, `einsum`,
//! `shape` (shapes and layouts), `pad`, `resize`, `constant`, `reduce`
//! (reductions and normalisations), `conv` (convolution, transposed
//! convolution and pooling), `quant` (quantisation), `rnn` (the recurrent
//! ops, unrolled) and `static_eval` (the ops evaluated when compiling: shape
//! arithmetic). Every op is decomposed into the IR's ops, none needs one of
//! its own. Here: the claimed ops, the dispatch on the op type, and what
//! every op's lowering uses (its inputs, its arity, adding IR nodes,
//! constants, axes, constant integer inputs and gathers at constant indices).

mod constant;
mod conv;
mod einsum;
mod elementwise;
mod gemm;
mod logic;
mod pad;
mod quant;
mod reduce;
mod resize;
mod rnn;
mod shape;
mod static_eval;

use super::ImportError;
use super::import::{Importer, is_default_domain};
use super::node::NodeCx;
use super::proto::NodeProto;
use super::tensor::{MAX_CONSTANT_ELEMENTS, MAX_ELEMENTS, checked_numel};
use crate::ir::{ElemType, Op, ReduceKind, Tensor, TensorType, Unary, ValueId, infer};
use constant::constant;
use conv::{conv, conv_transpose, global_pool, pool};
use einsum::einsum;
use elementwise::{
    ExpUnit, binary, cast, clip, exp_unit, gelu, hard_sigmoid, hard_swish, identity, leaky_relu,
    mish, pow, prelu, relu, softplus, softsign, swish, unary, variadic, where_,
};
use gemm::gemm;
use pad::pad;
use quant::{conv_integer, dequantize, dynamic_quantize, matmul_integer, qlinear_matmul, quantize};
use reduce::{
    Extreme, arg_extreme, batch_norm, group_norm, instance_norm, layer_norm, log_softmax, reduce,
    softmax, top_k,
};
use resize::resize;
use shape::{concat, expand, flatten, gather, reshape, slice, split, squeeze, transpose};
use static_eval::{Compare, Logic};

/// The ONNX ops (default domain) the importer claims to support. The
/// conformance runner (`tests/conformance.rs`) runs ONNX's backend node tests
/// of exactly these; `scripts/onnx_node_tests.py` reads the list from this
/// file.
pub const SUPPORTED_OPS: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Ceil",
    "Celu",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvInteger",
    "ConvTranspose",
    "DequantizeLinear",
    "Div",
    "DynamicQuantizeLinear",
    "Einsum",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Floor",
    "GRU",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "GroupNormalization",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "If",
    "InstanceNormalization",
    "LSTM",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "MatMul",
    "MatMulInteger",
    "Max",
    "MaxPool",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "PRelu",
    "Pad",
    "Pow",
    "QLinearMatMul",
    "QuantizeLinear",
    "RNN",
    "Range",
    "Reciprocal",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Resize",
    "Round",
    "Selu",
    "Shape",
    "Sigmoid",
    "Size",
    "Slice",
    "Softmax",
    "Softplus",
    "Softsign",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Swish",
    "Tanh",
    "TopK",
    "Transpose",
    "Unsqueeze",
    "Where",
    "Xor",
];

/// What a node lowered to.
enum Lowered {
    /// A new value: it takes the node output's ONNX name.
    Value(ValueId),
    /// An existing value, now also known by the node output's name.
    Alias(ValueId),
    /// One new value per output (absent outputs are `None`).
    Many(Vec<Option<ValueId>>),
    /// One existing value per output, now also known by its name.
    Aliases(Vec<Option<ValueId>>),
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
        "LeakyRelu" => leaky_relu(imp, &cx),
        "PRelu" => prelu(imp, &cx),
        "Elu" => exp_unit(imp, &cx, ExpUnit::Elu),
        "Selu" => exp_unit(imp, &cx, ExpUnit::Selu),
        "Celu" => exp_unit(imp, &cx, ExpUnit::Celu),
        "Softplus" => softplus(imp, &cx),
        "Softsign" => softsign(imp, &cx),
        "Mish" => mish(imp, &cx),
        "Swish" => swish(imp, &cx),
        "Clip" => clip(imp, &cx),
        "HardSigmoid" => hard_sigmoid(imp, &cx),
        "HardSwish" => hard_swish(imp, &cx),
        "Pow" => pow(imp, &cx),
        "Gelu" => gelu(imp, &cx),
        "Max" => variadic(imp, &cx, Op::Max),
        "Min" => variadic(imp, &cx, Op::Min),
        name if Unary::ALL.iter().any(|u| u.is_onnx() && u.name() == name) => {
            let u = Unary::ALL
                .into_iter()
                .find(|u| u.is_onnx() && u.name() == name)
                .unwrap_or(Unary::Neg);
            unary(imp, &cx, u)
        }
        "Identity" => identity(imp, &cx),
        "Gemm" => gemm(imp, &cx),
        "Einsum" => einsum(imp, &cx),
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
        "ArgMax" => arg_extreme(imp, &cx, Extreme::Max),
        "ArgMin" => arg_extreme(imp, &cx, Extreme::Min),
        "TopK" => top_k(imp, &cx),
        "DynamicQuantizeLinear" => dynamic_quantize(imp, &cx),
        "ConvInteger" => conv_integer(imp, &cx),
        "Softmax" => softmax(imp, &cx),
        "LogSoftmax" => log_softmax(imp, &cx),
        "LayerNormalization" => layer_norm(imp, &cx),
        "InstanceNormalization" => instance_norm(imp, &cx),
        "GroupNormalization" => group_norm(imp, &cx),
        "Slice" => slice(imp, &cx),
        "Split" => split(imp, &cx),
        "Concat" => concat(imp, &cx),
        "Pad" => pad(imp, &cx),
        "Resize" => resize(imp, &cx),
        "Where" => where_(imp, &cx),
        "Gather" => gather(imp, &cx),
        "Conv" => conv(imp, &cx),
        "ConvTranspose" => conv_transpose(imp, &cx),
        "MaxPool" => pool(imp, &cx, true),
        "AveragePool" => pool(imp, &cx, false),
        "GlobalAveragePool" => global_pool(imp, &cx, ReduceKind::Mean),
        "GlobalMaxPool" => global_pool(imp, &cx, ReduceKind::Max),
        "BatchNormalization" => batch_norm(imp, &cx),
        "QuantizeLinear" => quantize(imp, &cx),
        "DequantizeLinear" => dequantize(imp, &cx),
        "MatMulInteger" => matmul_integer(imp, &cx).map(Lowered::Value),
        "QLinearMatMul" => qlinear_matmul(imp, &cx),
        "Shape" => static_eval::shape(imp, &cx),
        "Size" => static_eval::size(imp, &cx),
        "ConstantOfShape" => static_eval::constant_of_shape(imp, &cx),
        "Range" => static_eval::range(imp, &cx),
        "Equal" => logic::compare(imp, &cx, Compare::Equal),
        "Less" => logic::compare(imp, &cx, Compare::Less),
        "LessOrEqual" => logic::compare(imp, &cx, Compare::LessOrEqual),
        "Greater" => logic::compare(imp, &cx, Compare::Greater),
        "GreaterOrEqual" => logic::compare(imp, &cx, Compare::GreaterOrEqual),
        "And" => logic::logic(imp, &cx, Logic::And),
        "Or" => logic::logic(imp, &cx, Logic::Or),
        "Xor" => logic::logic(imp, &cx, Logic::Xor),
        "Not" => logic::not(imp, &cx),
        "Floor" => static_eval::rounding(imp, &cx, false),
        "Ceil" => static_eval::rounding(imp, &cx, true),
        "Mod" => static_eval::modulo(imp, &cx),
        "ReduceProd" => static_eval::reduce_prod(imp, &cx),
        "If" => static_eval::if_(imp, &cx),
        "RNN" => rnn::recurrent(imp, &cx, rnn::Cell::Rnn),
        "GRU" => rnn::recurrent(imp, &cx, rnn::Cell::Gru),
        "LSTM" => rnn::recurrent(imp, &cx, rnn::Cell::Lstm),
        _ => Err(ImportError::UnsupportedOp {
            node: cx.node.clone(),
            op_type: proto.op_type.clone(),
            opset: imp.opset,
        }),
    }?;
    bind_output(imp, &cx, lowered)
}

fn bind_output(imp: &mut Importer, cx: &NodeCx, lowered: Lowered) -> Result<(), ImportError> {
    if let Lowered::Many(vs) | Lowered::Aliases(vs) = &lowered {
        let rename = matches!(lowered, Lowered::Many(_));
        for (name, v) in cx.proto.output.iter().zip(vs) {
            if let Some(v) = v.filter(|_| !name.is_empty()) {
                imp.bind(name, v, rename)?;
            }
        }
        return Ok(());
    }
    let Some(name) = cx.proto.output.first().filter(|n| !n.is_empty()) else {
        return Ok(()); // an unnamed result nothing can read
    };
    match lowered {
        Lowered::Many(_) | Lowered::Aliases(_) => Ok(()),
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
pub(super) fn optional_input(
    imp: &Importer,
    cx: &NodeCx,
    i: usize,
) -> Result<Option<ValueId>, ImportError> {
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
    if let Some(v) = fold(imp, &name, &op, &inputs, &out) {
        return Ok(v);
    }
    let outputs = imp
        .g
        .add_node(name, op.clone(), inputs)
        .map_err(|e| cx.shape_err(e))?;
    outputs
        .first()
        .copied()
        .ok_or_else(|| op_err(cx, &op, "the op gives no result"))
}

/// The result of `op` as a constant when its inputs are all constants and it
/// evaluates (to the inferred type): shape computations fold as they are
/// imported, so that what reads them (`Reshape`'s shape, `Slice`'s bounds)
/// sees constants. A node that fails to evaluate (an integer division by
/// zero) is kept, so the error surfaces when the graph runs.
fn fold(
    imp: &mut Importer,
    name: &str,
    op: &Op,
    inputs: &[ValueId],
    out: &[TensorType],
) -> Option<ValueId> {
    if out.iter().any(|t| t.numel() > MAX_CONSTANT_ELEMENTS) {
        return None;
    }
    let args: Vec<&Tensor> = inputs
        .iter()
        .map(|v| imp.g.constants.get(v))
        .collect::<Option<_>>()?;
    let mut results = crate::interp::eval_node(op, &args).ok()?;
    if results.len() != 1 || out.len() != 1 || results[0].ty != out[0] {
        return None;
    }
    Some(imp.g.add_constant(name, results.remove(0)))
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

// ---- Shared by several families ----

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
    if !matches!(t.ty.elem, ElemType::I64 | ElemType::I32) || t.ty.shape.len() != 1 {
        let ty = &t.ty;
        return Err(cx.shape_err(format!(
            "`{name}` must be a 1-D int64 (or int32) tensor, it is {ty}"
        )));
    }
    Ok(t.data.iter().map(|x| *x as i64).collect())
}

/// `x` reshaped to `shape` for this node (itself when it has that shape).
fn reshape_to(
    imp: &mut Importer,
    cx: &NodeCx,
    step: &str,
    x: ValueId,
    shape: Vec<usize>,
) -> Result<ValueId, ImportError> {
    if imp.g.ty(x).shape == shape {
        return Ok(x);
    }
    add(imp, cx, step, Op::Reshape { shape }, vec![x])
}

/// The constant value of `v`, or an error naming it as not constant.
fn constant_of<'a>(imp: &'a Importer, cx: &NodeCx, v: ValueId) -> Result<&'a Tensor, ImportError> {
    imp.g
        .constants
        .get(&v)
        .ok_or_else(|| ImportError::NotConstant {
            node: cx.node.clone(),
            op_type: cx.op_type(),
            value: imp.g.values[v.index()].name.clone(),
        })
}

/// A constant of type `elem` and `shape` holding `data` (row-major), named
/// after the node and `what`.
fn constant_tensor(
    imp: &mut Importer,
    cx: &NodeCx,
    what: &str,
    elem: ElemType,
    shape: Vec<usize>,
    data: Vec<f64>,
) -> ValueId {
    let t = Tensor::new(TensorType { elem, shape }, data);
    imp.g.add_constant(format!("{}/{what}", cx.name), t)
}

/// `x` along `axis` at constant `indices` (each in range): a `Slice` when
/// they are one increasing run, else a `Gather`.
fn gather_at(
    imp: &mut Importer,
    cx: &NodeCx,
    step: &str,
    x: ValueId,
    axis: usize,
    indices: &[i64],
) -> Result<ValueId, ImportError> {
    let shape = imp.g.ty(x).shape.clone();
    let run = indices.windows(2).all(|w| w[1] == w[0] + 1);
    if run {
        let first = indices.first().copied().unwrap_or(0);
        let mut starts = vec![0; shape.len()];
        let mut ends: Vec<i64> = shape.iter().map(|d| *d as i64).collect();
        (starts[axis], ends[axis]) = (first, first + indices.len() as i64);
        let steps = vec![1; shape.len()];
        let op = Op::Slice {
            starts,
            ends,
            steps,
        };
        return add(imp, cx, step, op, vec![x]);
    }
    let data = indices.iter().map(|i| *i as f64).collect();
    let shape = vec![indices.len()];
    let at = constant_tensor(
        imp,
        cx,
        &format!("{step}_indices"),
        ElemType::I64,
        shape,
        data,
    );
    add(imp, cx, step, Op::Gather { axis }, vec![x, at])
}

/// An axis in `-rank..rank`, resolved.
fn axis_of(cx: &NodeCx, what: &str, a: i64, rank: usize) -> Result<usize, ImportError> {
    let r = i64::try_from(rank).unwrap_or(i64::MAX);
    let x = if a < 0 { a + r } else { a };
    usize::try_from(x)
        .ok()
        .filter(|x| *x < rank)
        .ok_or_else(|| cx.attr_err(what, format!("{a} is out of range for rank {rank}")))
}

/// Importing and running one node in the op families' tests.
#[cfg(test)]
mod testing {
    use crate::ir::{ElemType, Tensor, TensorType};
    use crate::onnx::proto::tensor_proto::DataType;
    use crate::onnx::proto::{GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto};
    use crate::onnx::{ImportOptions, import_model};

    /// Imports a model of `node` at `opset`, whose one graph input is `x`
    /// (float, of shape `dims`), its other inputs `inits`, its output `y`.
    pub fn import(
        node: NodeProto,
        opset: i64,
        dims: &[i64],
        inits: Vec<TensorProto>,
    ) -> Result<crate::ir::Graph, String> {
        let graph = GraphProto {
            node: vec![node],
            name: "test".to_owned(),
            initializer: inits,
            input: vec![ValueInfoProto::tensor("x", DataType::Float, dims)],
            output: vec![ValueInfoProto {
                name: "y".to_owned(),
                ..ValueInfoProto::default()
            }],
            ..GraphProto::default()
        };
        let model = ModelProto::with_graph(graph, opset);
        import_model(&model, &ImportOptions::default()).map_err(|e| e.to_string())
    }

    /// [`import`], then runs the graph on the interpreter with `x`: the
    /// output's shape and values.
    pub fn run(
        node: NodeProto,
        opset: i64,
        (dims, x): (&[i64], &[f32]),
        inits: Vec<TensorProto>,
    ) -> (Vec<usize>, Vec<f64>) {
        let g = import(node, opset, dims, inits).unwrap_or_else(|e| panic!("import: {e}"));
        crate::ir::verify(&g).unwrap_or_else(|e| panic!("verify: {e:?}"));
        let ty = TensorType {
            elem: ElemType::F32,
            shape: dims.iter().map(|d| *d as usize).collect(),
        };
        let input = Tensor::new(ty, x.iter().map(|v| f64::from(*v)).collect());
        let out = crate::interp::run(&g, &[input]).unwrap_or_else(|e| panic!("interp: {e}"));
        (out[0].ty.shape.clone(), out[0].data.to_vec())
    }

    /// Whether `got` is `want` within `tol`, element by element.
    pub fn close(got: &[f64], want: &[f64], tol: f64) -> bool {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() <= tol)
    }
}

#[cfg(test)]
mod tests {
    use super::SUPPORTED_OPS;

    #[test]
    fn the_claimed_ops_are_sorted_and_distinct() {
        assert!(SUPPORTED_OPS.windows(2).all(|w| w[0] < w[1]));
    }
}
