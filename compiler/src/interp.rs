//! The reference interpreter: runs a [`Graph`] on the host, independent of
//! every target. It is the correctness oracle of the compiler: the outputs of
//! a compiled program are compared with what this module computes.
//!
//! # Semantics (ONNX)
//!
//! - Every op computes in `f64` and rounds its result once to the output
//!   element type ([`ElemType::round`]). For `+`, `-`, `*`, `/` on `f32`,
//!   `f16` and `bf16` this is exactly the correctly rounded result of the
//!   narrow type (an `f64` result rounded again to a format of at most 24
//!   significand bits is never double-rounded wrongly), so element-wise ops
//!   behave like the narrow arithmetic bit for bit.
//! - `MatMul` accumulates the dot products in `f64` and rounds once at the
//!   end. The oracle is therefore *more* accurate than hardware that
//!   accumulates in `f32` (or multiplies `bf16` operands): its error against
//!   the exact result is essentially one rounding to the output type (the
//!   `f64` accumulation error is ~2^-29 of that for `f32`), a target's grows
//!   with the reduction length. Comparisons against the oracle use per-dtype tolerances that
//!   account for this; they are not bit-exact checks.
//! - The binary ops broadcast numpy style ([`crate::ir::broadcast`]).
//! - Integer arithmetic is done in `i64` with wrap-around, then wrapped to the
//!   element type; integer `Div` truncates toward zero (ONNX); division of
//!   integers by zero is an [`InterpError::DivisionByZero`], never a panic.
//!   Float division by zero gives `±inf`/`NaN` (IEEE).
//! - Arithmetic, `Relu` and `MatMul` on `bool` are refused (ONNX types them
//!   on numbers only).
//! - `Cast`, see [`cast`]: float → int truncates toward zero; no saturation.
//!
//! Tensors hold `f64`, so `int64` values are exact only up to 2^53.

use crate::ir::{
    ElemType, Graph, Node, Op, PoolKind, ReduceKind, Tensor, TensorType, ValueId, Window,
    broadcast, infer,
};
use std::fmt;

/// Why a graph or an op could not be evaluated.
#[derive(Clone, Debug, PartialEq)]
pub enum InterpError {
    /// [`run`] was given the wrong number of inputs.
    InputCount {
        /// How many the graph takes.
        expected: usize,
        /// How many were given.
        got: usize,
    },
    /// A graph input's type differs from the graph's declaration.
    InputType {
        /// Position in `g.inputs`.
        index: usize,
        /// The input's name.
        name: String,
        /// The declared type.
        expected: TensorType,
        /// The given type.
        got: TensorType,
    },
    /// A tensor's data length does not match its type.
    BadTensor {
        /// Which tensor (an input, an operand).
        what: String,
        /// Its type.
        ty: TensorType,
        /// Its number of elements.
        len: usize,
    },
    /// The op does not apply to operands of these types (arity, shapes, dtypes).
    Type {
        /// The op's name.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Integer division by zero.
    DivisionByZero,
    /// The graph is malformed: a value is used but never defined, or a node's
    /// result differs from its declared type.
    Graph(String),
    /// An error in a node, with its name.
    Node {
        /// The node's name.
        node: String,
        /// The op's name.
        op: &'static str,
        /// The error.
        error: Box<InterpError>,
    },
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterpError::InputCount { expected, got } => {
                write!(f, "the graph takes {expected} inputs, {got} were given")
            }
            InterpError::InputType {
                index,
                name,
                expected,
                got,
            } => write!(f, "input {index} (`{name}`) must be {expected}, got {got}"),
            InterpError::BadTensor { what, ty, len } => {
                write!(f, "{what} is {ty} but holds {len} elements")
            }
            InterpError::Type { op, message } => write!(f, "{op}: {message}"),
            InterpError::DivisionByZero => write!(f, "integer division by zero"),
            InterpError::Graph(m) => write!(f, "malformed graph: {m}"),
            InterpError::Node { node, op, error } => write!(f, "node `{node}` ({op}): {error}"),
        }
    }
}

impl std::error::Error for InterpError {}

/// Runs a graph. `inputs` are in `g.inputs` order and must have exactly the
/// declared types; the results are in `g.outputs` order.
pub fn run(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, InterpError> {
    check_inputs(g, inputs)?;
    let mut env: Vec<Option<Tensor>> = vec![None; g.values.len()];
    for (v, t) in &g.constants {
        store(&mut env, *v, t.clone())?;
    }
    for (v, t) in g.inputs.iter().zip(inputs) {
        store(&mut env, *v, t.clone())?;
    }
    for node in &g.nodes {
        let outs = eval_graph_node(g, &env, node)?;
        for (v, t) in node.outputs.iter().zip(outs) {
            store(&mut env, *v, t)?;
        }
    }
    g.outputs
        .iter()
        .map(|v| lookup(&env, *v).cloned())
        .collect()
}

/// Checks the count, types and data lengths of the graph inputs.
fn check_inputs(g: &Graph, inputs: &[Tensor]) -> Result<(), InterpError> {
    if inputs.len() != g.inputs.len() {
        return Err(InterpError::InputCount {
            expected: g.inputs.len(),
            got: inputs.len(),
        });
    }
    for (index, (v, t)) in g.inputs.iter().zip(inputs).enumerate() {
        let value = g
            .values
            .get(v.index())
            .ok_or_else(|| InterpError::Graph(format!("input #{} does not exist", v.0)))?;
        if value.ty != t.ty {
            return Err(InterpError::InputType {
                index,
                name: value.name.clone(),
                expected: value.ty.clone(),
                got: t.ty.clone(),
            });
        }
        check_len(t, || format!("input {index} (`{}`)", value.name))?;
    }
    Ok(())
}

/// Sets a value of the environment.
fn store(env: &mut [Option<Tensor>], v: ValueId, t: Tensor) -> Result<(), InterpError> {
    let slot = env
        .get_mut(v.index())
        .ok_or_else(|| InterpError::Graph(format!("value #{} does not exist", v.0)))?;
    *slot = Some(t);
    Ok(())
}

/// A value of the environment, or an error if it was never computed.
fn lookup(env: &[Option<Tensor>], v: ValueId) -> Result<&Tensor, InterpError> {
    env.get(v.index())
        .and_then(Option::as_ref)
        .ok_or_else(|| InterpError::Graph(format!("value #{} is used but never defined", v.0)))
}

/// Evaluates one node of a graph, checking its results against the declared types.
fn eval_graph_node(
    g: &Graph,
    env: &[Option<Tensor>],
    node: &Node,
) -> Result<Vec<Tensor>, InterpError> {
    let at = |error| InterpError::Node {
        node: node.name.clone(),
        op: node.op.name(),
        error: Box::new(error),
    };
    let args = node
        .inputs
        .iter()
        .map(|v| lookup(env, *v))
        .collect::<Result<Vec<_>, _>>()
        .map_err(at)?;
    let outs = eval_node(&node.op, &args).map_err(at)?;
    let declared: Vec<Option<&TensorType>> = node
        .outputs
        .iter()
        .map(|v| g.values.get(v.index()).map(|x| &x.ty))
        .collect();
    let got: Vec<Option<&TensorType>> = outs.iter().map(|t| Some(&t.ty)).collect();
    if declared != got {
        return Err(at(InterpError::Graph(format!(
            "results are {got:?}, the node declares {declared:?}"
        ))));
    }
    Ok(outs)
}

/// Evaluates one op on its operands (which must satisfy the op's type rules).
/// `Gather`: output `[outer, i, inner]` is `data[outer, indices[i], inner]`.
fn gather(
    data: &Tensor,
    indices: &Tensor,
    axis: usize,
    out_ty: &TensorType,
) -> Result<Vec<f64>, InterpError> {
    let dim = data.ty.shape[axis];
    let outer: usize = data.ty.shape[..axis].iter().product();
    let inner: usize = data.ty.shape[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(out_ty.numel());
    for o in 0..outer {
        for &raw in indices.data.iter() {
            let i = if raw < 0.0 { raw + dim as f64 } else { raw };
            if !(0.0..dim as f64).contains(&i) {
                return Err(InterpError::Type {
                    op: "Gather",
                    message: format!("index {raw} is out of range for a dimension of {dim}"),
                });
            }
            let at = (o * dim + i as usize) * inner;
            out.extend_from_slice(&data.data[at..at + inner]);
        }
    }
    Ok(out)
}

pub fn eval_node(op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, InterpError> {
    for (i, t) in inputs.iter().enumerate() {
        check_len(t, || format!("operand {i} of {}", op.name()))?;
    }
    let tys: Vec<TensorType> = inputs.iter().map(|t| t.ty.clone()).collect();
    let out_ty = infer(op, &tys)
        .map_err(|message| InterpError::Type {
            op: op.name(),
            message,
        })?
        .into_iter()
        .next()
        .ok_or_else(|| InterpError::Type {
            op: op.name(),
            message: "the op has no result".to_owned(),
        })?;
    let data = match op {
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            refuse_bool(op, out_ty.elem)?;
            binary(op, inputs[0], inputs[1], &out_ty)?
        }
        Op::Relu => {
            refuse_bool(op, out_ty.elem)?;
            inputs[0].data.iter().map(|&x| relu(x)).collect()
        }
        Op::Unary(u) => {
            refuse_bool(op, out_ty.elem)?;
            inputs[0]
                .data
                .iter()
                .map(|&x| round_to(out_ty.elem, u.eval(x)))
                .collect()
        }
        Op::Max | Op::Min | Op::Less | Op::LessOrEqual => {
            refuse_bool(op, out_ty.elem)?;
            binary(op, inputs[0], inputs[1], &out_ty)?
        }
        Op::Identity | Op::Reshape { .. } => inputs[0].data.to_vec(),
        Op::Transpose { perm } => transpose(inputs[0], perm),
        Op::Cast { to } => inputs[0].data.iter().map(|&x| cast(x, *to)).collect(),
        Op::MatMul => {
            refuse_bool(op, out_ty.elem)?;
            matmul(inputs[0], inputs[1], out_ty.elem)
        }
        Op::Reduce { kind, axes, .. } => {
            refuse_bool(op, out_ty.elem)?;
            reduce(inputs[0], *kind, axes, out_ty.elem)
        }
        Op::Slice { starts, steps, .. } => {
            let t = inputs[0];
            let own = strides(&t.ty.shape);
            // Element i of the result reads start + i * step along each dimension.
            let base: i64 = starts.iter().zip(&own).map(|(s, o)| s * *o as i64).sum();
            let mut out = Vec::with_capacity(out_ty.numel());
            let shape = &out_ty.shape;
            let mut index = vec![0usize; shape.len()];
            for _ in 0..out_ty.numel() {
                let at: i64 = base
                    + index
                        .iter()
                        .zip(steps)
                        .zip(&own)
                        .map(|((i, st), o)| *i as i64 * st * *o as i64)
                        .sum::<i64>();
                out.push(t.data[at as usize]);
                for d in (0..shape.len()).rev() {
                    index[d] += 1;
                    if index[d] < shape[d] {
                        break;
                    }
                    index[d] = 0;
                }
            }
            out
        }
        Op::Concat { axis } => {
            let outer: usize = out_ty.shape[..*axis].iter().product();
            let mut out = Vec::with_capacity(out_ty.numel());
            for o in 0..outer {
                for t in inputs {
                    let chunk: usize = t.ty.shape[*axis..].iter().product();
                    out.extend_from_slice(&t.data[o * chunk..(o + 1) * chunk]);
                }
            }
            out
        }
        Op::Conv { window, groups } => {
            refuse_bool(op, out_ty.elem)?;
            conv(inputs, window, *groups, &out_ty)
        }
        Op::Pool { kind, window } => {
            refuse_bool(op, out_ty.elem)?;
            pool(inputs[0], *kind, window, &out_ty)
        }
        Op::Im2Col { window, fill } => im2col(inputs[0], window, *fill, &out_ty),
        Op::Im2Row { window, fill } => im2row(inputs[0], window, *fill),
        Op::WindowSum { window } => window_sum(inputs[0], inputs[1], window)
            .into_iter()
            .map(|v| round_to(out_ty.elem, v))
            .collect(),
        Op::Gather { axis } => gather(inputs[0], inputs[1], *axis, &out_ty)?,
        Op::Where => {
            let sel = |t: &Tensor| {
                offsets(
                    &out_ty.shape,
                    &broadcast_strides(&t.ty.shape, &out_ty.shape),
                )
            };
            let (ic, ix, iy) = (sel(inputs[0]), sel(inputs[1]), sel(inputs[2]));
            ic.iter()
                .zip(&ix)
                .zip(&iy)
                .map(|((&c, &x), &y)| {
                    if inputs[0].data[c] != 0.0 {
                        inputs[1].data[x]
                    } else {
                        inputs[2].data[y]
                    }
                })
                .collect()
        }
    };
    Ok(vec![Tensor {
        ty: out_ty,
        data: data.into(),
    }])
}

/// Errors unless the data length matches the type (also for shapes whose
/// element count overflows, rather than panicking).
fn check_len(t: &Tensor, what: impl FnOnce() -> String) -> Result<(), InterpError> {
    let numel = t.ty.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if numel == Some(t.data.len()) {
        Ok(())
    } else {
        Err(InterpError::BadTensor {
            what: what(),
            ty: t.ty.clone(),
            len: t.data.len(),
        })
    }
}

/// Refuses numeric ops on booleans.
fn refuse_bool(op: &Op, elem: ElemType) -> Result<(), InterpError> {
    if elem == ElemType::Bool {
        Err(InterpError::Type {
            op: op.name(),
            message: "not defined on bool tensors".to_owned(),
        })
    } else {
        Ok(())
    }
}

/// Rounds `x` to `elem`: [`ElemType::round`], except that `int64` also wraps
/// around modulo 2^64 and maps `NaN`/`±inf` to 0, as the narrower integers do.
fn round_to(elem: ElemType, x: f64) -> f64 {
    if elem != ElemType::I64 {
        return elem.round(x);
    }
    let half = 2f64.powi(63);
    match x.trunc() {
        t if !t.is_finite() => 0.0,
        t if (-half..half).contains(&t) => t,
        // Out of range: a multiple of 2^11 or more, so the wrap is exact.
        t => {
            let r = t.rem_euclid(2.0 * half);
            if r >= half { r - 2.0 * half } else { r }
        }
    }
}

/// `Cast` of one element to `to` (ONNX):
/// - float → float rounds to nearest even; values beyond the target's range
///   become `±inf` (no saturation: ONNX's `saturate` attribute concerns only
///   float8 types, which the IR does not have); `NaN` stays `NaN`;
/// - float → int truncates toward zero; out-of-range values wrap around
///   modulo 2^bits and `NaN`/`±inf` become 0 (ONNX leaves both undefined;
///   this is [`ElemType::round`], the rule the whole IR uses) — no saturation;
/// - int → int wraps around (two's complement); int → float rounds to nearest;
/// - anything → bool is `x != 0` (`NaN` is true); bool → anything is 0 or 1.
pub fn cast(x: f64, to: ElemType) -> f64 {
    round_to(to, x)
}

/// `max(x, 0)`, keeping `NaN`.
fn relu(x: f64) -> f64 {
    if x > 0.0 || x.is_nan() { x } else { 0.0 }
}

/// Row-major strides of a shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The strides with which an operand of shape `from` is read when broadcast
/// to `to` (right-aligned; 0 along broadcast and missing dimensions).
pub(crate) fn broadcast_strides(from: &[usize], to: &[usize]) -> Vec<usize> {
    let own = strides(from);
    let lead = to.len().saturating_sub(from.len());
    (0..to.len())
        .map(|i| match i.checked_sub(lead) {
            Some(j) if from[j] != 1 => own[j],
            _ => 0,
        })
        .collect()
}

/// For every element of a tensor of `shape` (row-major), the offset
/// `sum(index[i] * strides[i])` of the element it reads.
pub(crate) fn offsets(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut index = vec![0usize; shape.len()];
    let mut offset = 0usize;
    for _ in 0..n {
        out.push(offset);
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            offset += strides[d];
            if index[d] < shape[d] {
                break;
            }
            offset -= strides[d] * shape[d];
            index[d] = 0;
        }
    }
    out
}

/// A binary element-wise op with broadcasting, rounded to `out.elem`.
fn binary(op: &Op, a: &Tensor, b: &Tensor, out: &TensorType) -> Result<Vec<f64>, InterpError> {
    let ia = offsets(&out.shape, &broadcast_strides(&a.ty.shape, &out.shape));
    let ib = offsets(&out.shape, &broadcast_strides(&b.ty.shape, &out.shape));
    ia.iter()
        .zip(&ib)
        .map(|(&i, &j)| scalar(op, a.data[i], b.data[j], out.elem))
        .collect()
}

/// One element of a binary op: in `f64` for floats, in wrapping `i64` for
/// integers; rounded to `elem`.
fn scalar(op: &Op, x: f64, y: f64, elem: ElemType) -> Result<f64, InterpError> {
    if elem.is_float() {
        let r = match op {
            Op::Add => x + y,
            Op::Sub => x - y,
            Op::Mul => x * y,
            // ONNX Max/Min propagate NaN.
            Op::Max if x.is_nan() || y.is_nan() => f64::NAN,
            Op::Min if x.is_nan() || y.is_nan() => f64::NAN,
            Op::Max => x.max(y),
            Op::Min => x.min(y),
            Op::Less => f64::from(u8::from(x < y)),
            Op::LessOrEqual => f64::from(u8::from(x <= y)),
            _ => x / y,
        };
        return Ok(round_to(elem, r));
    }
    let (x, y) = (x as i64, y as i64);
    let r = match op {
        Op::Max => x.max(y),
        Op::Min => x.min(y),
        Op::Add => x.wrapping_add(y),
        Op::Sub => x.wrapping_sub(y),
        Op::Mul => x.wrapping_mul(y),
        _ if y == 0 => return Err(InterpError::DivisionByZero),
        _ => x.wrapping_div(y),
    };
    Ok(round_to(elem, r as f64))
}

/// A reduction over `axes`: sums in `f64` (wrapping `i64` for integers),
/// rounded once to `elem`; NaN propagates through `Max` and `Min`; the
/// reduction of no elements is 0 for sums, NaN for means, -inf / +inf for
/// `Max` / `Min` (ONNX's identities).
fn reduce(t: &Tensor, kind: ReduceKind, axes: &[usize], elem: ElemType) -> Vec<f64> {
    let shape = &t.ty.shape;
    // Output strides over the input's dimensions (0 along reduced ones).
    let kept: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(i, d)| if axes.contains(&i) { 1 } else { *d })
        .collect();
    let kst = strides(&kept);
    let ost: Vec<usize> = (0..shape.len())
        .map(|i| if axes.contains(&i) { 0 } else { kst[i] })
        .collect();
    let n_out: usize = kept.iter().product();
    let count: usize = axes.iter().map(|a| shape[*a]).product();
    let init = match kind {
        ReduceKind::Sum | ReduceKind::Mean => 0.0,
        ReduceKind::Max => f64::NEG_INFINITY,
        ReduceKind::Min => f64::INFINITY,
    };
    let mut acc = vec![init; n_out];
    for (x, o) in t.data.iter().zip(offsets(shape, &ost)) {
        let a = &mut acc[o];
        *a = match kind {
            ReduceKind::Sum | ReduceKind::Mean if elem.is_float() => *a + x,
            ReduceKind::Sum | ReduceKind::Mean => (*a as i64).wrapping_add(*x as i64) as f64,
            _ if x.is_nan() || a.is_nan() => f64::NAN,
            ReduceKind::Max => a.max(*x),
            ReduceKind::Min => a.min(*x),
        };
    }
    acc.into_iter()
        .map(|a| {
            let v = if kind == ReduceKind::Mean {
                a / count as f64
            } else {
                a
            };
            round_to(elem, v)
        })
        .collect()
}

/// For output position `(oh, ow)` and kernel position `(kh, kw)`, the input
/// position it reads, if inside the input.
fn window_at(w: &Window, hw: [usize; 2], o: [usize; 2], k: [usize; 2]) -> Option<[usize; 2]> {
    let mut at = [0; 2];
    for i in 0..2 {
        let p = (o[i] * w.strides[i] + k[i] * w.dilations[i]) as i64 - w.pads[i] as i64;
        if p < 0 || p >= hw[i] as i64 {
            return None;
        }
        at[i] = p as usize;
    }
    Some(at)
}

/// 2-D convolution, accumulated in `f64` and rounded once.
fn conv(inputs: &[&Tensor], w: &Window, groups: usize, out: &TensorType) -> Vec<f64> {
    let (x, k) = (inputs[0], inputs[1]);
    let [n, c, h, wd] = [x.ty.shape[0], x.ty.shape[1], x.ty.shape[2], x.ty.shape[3]];
    let [m, cg, kh, kw] = [k.ty.shape[0], k.ty.shape[1], k.ty.shape[2], k.ty.shape[3]];
    let [oh, ow] = [out.shape[2], out.shape[3]];
    let mg = m / groups.max(1);
    let mut y = Vec::with_capacity(out.numel());
    for b in 0..n {
        for oc in 0..m {
            let g = oc / mg.max(1);
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = inputs.get(2).map_or(0.0, |bias| bias.data[oc]);
                    for ci in 0..cg {
                        let ch = g * cg + ci;
                        for a in 0..kh {
                            for bb in 0..kw {
                                if let Some([ih, iw]) = window_at(w, [h, wd], [i, j], [a, bb]) {
                                    acc += k.data[((oc * cg + ci) * kh + a) * kw + bb]
                                        * x.data[((b * c + ch) * h + ih) * wd + iw];
                                }
                            }
                        }
                    }
                    y.push(round_to(out.elem, acc));
                }
            }
        }
    }
    y
}

/// 2-D max or average pooling (padding never counts for the maximum).
fn pool(x: &Tensor, kind: PoolKind, w: &Window, out: &TensorType) -> Vec<f64> {
    let [n, c, h, wd] = [x.ty.shape[0], x.ty.shape[1], x.ty.shape[2], x.ty.shape[3]];
    let [oh, ow] = [out.shape[2], out.shape[3]];
    let mut y = Vec::with_capacity(out.numel());
    for p in 0..n * c {
        for i in 0..oh {
            for j in 0..ow {
                let (mut acc, mut valid, mut padded) = (None::<f64>, 0usize, 0usize);
                for a in 0..w.kernel[0] {
                    for b in 0..w.kernel[1] {
                        // Inside the padded input (what count_include_pad counts)?
                        let inside = |o: usize,
                                      k: usize,
                                      s: usize,
                                      d: usize,
                                      pb: usize,
                                      size: usize,
                                      pe: usize| {
                            let q = (o * s + k * d) as i64 - pb as i64;
                            q >= -(pb as i64) && q < (size + pe) as i64
                        };
                        if inside(i, a, w.strides[0], w.dilations[0], w.pads[0], h, w.pads[2])
                            && inside(j, b, w.strides[1], w.dilations[1], w.pads[1], wd, w.pads[3])
                        {
                            padded += 1;
                        }
                        if let Some([ih, iw]) = window_at(w, [h, wd], [i, j], [a, b]) {
                            let v = x.data[(p * h + ih) * wd + iw];
                            valid += 1;
                            acc = Some(match (kind, acc) {
                                (_, None) => v,
                                (PoolKind::Max, Some(m)) if v.is_nan() || m.is_nan() => f64::NAN,
                                (PoolKind::Max, Some(m)) => m.max(v),
                                (PoolKind::Average { .. }, Some(s)) => s + v,
                            });
                        }
                    }
                }
                let v = match kind {
                    PoolKind::Max => acc.unwrap_or(f64::NEG_INFINITY),
                    PoolKind::Average { count_include_pad } => {
                        let count = if count_include_pad { padded } else { valid };
                        acc.unwrap_or(0.0) / count.max(1) as f64
                    }
                };
                y.push(round_to(out.elem, v));
            }
        }
    }
    y
}

/// The windows as rows (see [`Op::Im2Col`]).
fn im2col(x: &Tensor, w: &Window, fill: f64, out: &TensorType) -> Vec<f64> {
    let [n, c, h, wd] = [x.ty.shape[0], x.ty.shape[1], x.ty.shape[2], x.ty.shape[3]];
    let ohw = out.shape[3];
    let ow = w.output([h, wd]).map_or(1, |o| o[1]).max(1);
    let mut y = Vec::with_capacity(out.numel());
    for p in 0..n * c {
        for a in 0..w.kernel[0] {
            for b in 0..w.kernel[1] {
                for q in 0..ohw {
                    let v = match window_at(w, [h, wd], [q / ow, q % ow], [a, b]) {
                        Some([ih, iw]) => x.data[(p * h + ih) * wd + iw],
                        None => fill,
                    };
                    y.push(v);
                }
            }
        }
    }
    y
}

/// The windows as rows of a channels-last image (see [`Op::Im2Row`]).
fn im2row(x: &Tensor, w: &Window, fill: f64) -> Vec<f64> {
    let [n, h, wd, c] = [x.ty.shape[0], x.ty.shape[1], x.ty.shape[2], x.ty.shape[3]];
    let [oh, ow] = w.output([h, wd]).unwrap_or([0, 0]);
    let kk = w.kernel[0] * w.kernel[1];
    let mut y = Vec::with_capacity(n * oh * ow * kk * c);
    for p in 0..n {
        for q in 0..oh * ow {
            for a in 0..w.kernel[0] {
                for b in 0..w.kernel[1] {
                    match window_at(w, [h, wd], [q / ow, q % ow], [a, b]) {
                        Some([ih, iw]) => {
                            let at = ((p * h + ih) * wd + iw) * c;
                            y.extend_from_slice(&x.data[at..at + c]);
                        }
                        None => y.extend(std::iter::repeat_n(fill, c)),
                    }
                }
            }
        }
    }
    y
}

/// A depthwise window sum of a channels-last image (see
/// [`Op::WindowSum`]), accumulated in `f64` and rounded once.
fn window_sum(x: &Tensor, k: &Tensor, w: &Window) -> Vec<f64> {
    let [n, h, wd, c] = [x.ty.shape[0], x.ty.shape[1], x.ty.shape[2], x.ty.shape[3]];
    let [oh, ow] = w.output([h, wd]).unwrap_or([0, 0]);
    let mut y = Vec::with_capacity(n * oh * ow * c);
    for p in 0..n {
        for q in 0..oh * ow {
            for ch in 0..c {
                let mut acc = 0.0;
                for a in 0..w.kernel[0] {
                    for b in 0..w.kernel[1] {
                        if let Some([ih, iw]) = window_at(w, [h, wd], [q / ow, q % ow], [a, b]) {
                            let j = a * w.kernel[1] + b;
                            acc += x.data[((p * h + ih) * wd + iw) * c + ch] * k.data[j * c + ch];
                        }
                    }
                }
                y.push(acc);
            }
        }
    }
    y
}

/// `Transpose`: output dimension `i` is input dimension `perm[i]`.
fn transpose(t: &Tensor, perm: &[usize]) -> Vec<f64> {
    let own = strides(&t.ty.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| t.ty.shape[p]).collect();
    let st: Vec<usize> = perm.iter().map(|&p| own[p]).collect();
    offsets(&shape, &st).iter().map(|&i| t.data[i]).collect()
}

/// numpy `matmul`: 1-D operands promoted (`[k]` → `[1, k]` and `[k, 1]`),
/// batch dimensions broadcast; each dot product accumulated in `f64` (floats)
/// or wrapping `i64` (integers) and rounded once to `elem`. The shapes have
/// been checked by [`infer`].
fn matmul(a: &Tensor, b: &Tensor, elem: ElemType) -> Vec<f64> {
    let sa = promote(&a.ty.shape, true);
    let sb = promote(&b.ty.shape, false);
    let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
    let (ba, bb) = (&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    let batch = broadcast(ba, bb).unwrap_or_default();
    let scale = |s: Vec<usize>, f: usize| s.into_iter().map(|x| x * f).collect::<Vec<_>>();
    let oa = offsets(&batch, &scale(broadcast_strides(ba, &batch), m * k));
    let ob = offsets(&batch, &scale(broadcast_strides(bb, &batch), k * n));
    let mut out = Vec::with_capacity(oa.len() * m * n);
    for (&pa, &pb) in oa.iter().zip(&ob) {
        for i in 0..m {
            for j in 0..n {
                let row = &a.data[pa + i * k..pa + (i + 1) * k];
                let col = (0..k).map(|l| b.data[pb + l * n + j]);
                out.push(round_to(elem, dot(row, col, elem)));
            }
        }
    }
    out
}

/// A dot product: accumulated in `f64` for floats, in wrapping `i64` for integers.
fn dot(row: &[f64], col: impl Iterator<Item = f64>, elem: ElemType) -> f64 {
    if elem.is_float() {
        row.iter().zip(col).map(|(x, y)| x * y).sum()
    } else {
        let s = row.iter().zip(col).fold(0i64, |acc, (&x, y)| {
            acc.wrapping_add((x as i64).wrapping_mul(y as i64))
        });
        s as f64
    }
}

/// A matmul operand's shape with a 1-D operand promoted to a matrix
/// (`[k]` → `[1, k]` on the left, `[k, 1]` on the right).
fn promote(shape: &[usize], left: bool) -> Vec<usize> {
    match shape {
        [k] if left => vec![1, *k],
        [k] => vec![*k, 1],
        s => s.to_vec(),
    }
}

/// The constant-folding pass: evaluates every node whose inputs are all
/// constants and turns its results into constants, in topological order (so
/// chains of constant nodes fold completely). Returns how many nodes were
/// folded. Folded nodes are removed; constants that only fed folded nodes
/// (and are not graph outputs) are dropped. A node whose evaluation fails
/// (e.g. an integer division by zero) is left in place, so the error surfaces
/// when the graph is run. The graph stays verified.
pub fn fold_constants(g: &mut Graph) -> usize {
    let mut folded_inputs = Vec::new();
    let mut kept = Vec::with_capacity(g.nodes.len());
    let mut count = 0;
    for node in std::mem::take(&mut g.nodes) {
        match try_fold(g, &node) {
            Some(results) => {
                count += 1;
                folded_inputs.extend(node.inputs.iter().copied());
                g.constants
                    .extend(node.outputs.iter().copied().zip(results));
            }
            None => kept.push(node),
        }
    }
    g.nodes = kept;
    drop_dead_constants(g, &folded_inputs);
    count
}

/// The results of a node whose inputs are all constants, if they evaluate
/// without error to the declared types.
fn try_fold(g: &Graph, node: &Node) -> Option<Vec<Tensor>> {
    let args: Vec<&Tensor> = node
        .inputs
        .iter()
        .map(|v| g.constants.get(v))
        .collect::<Option<_>>()?;
    let outs = eval_node(&node.op, &args).ok()?;
    let fits = outs.len() == node.outputs.len()
        && outs
            .iter()
            .zip(&node.outputs)
            .all(|(t, v)| g.values.get(v.index()).is_some_and(|x| x.ty == t.ty));
    fits.then_some(outs)
}

/// Removes those of `candidates` that are constants used by no node and not
/// graph outputs.
fn drop_dead_constants(g: &mut Graph, candidates: &[ValueId]) {
    let used: std::collections::BTreeSet<_> = g
        .nodes
        .iter()
        .flat_map(|n| n.inputs.iter().copied())
        .chain(g.outputs.iter().copied())
        .collect();
    for v in candidates {
        if !used.contains(v) {
            g.constants.remove(v);
        }
    }
}
