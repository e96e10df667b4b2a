//! The reductions and normalisations: `ReduceSum` / `ReduceMean` /
//! `ReduceMax` / `ReduceMin`, `Softmax`, `LogSoftmax`,
//! `LayerNormalization`, `InstanceNormalization`, `GroupNormalization` and
//! `BatchNormalization`, all but the reductions decomposed into reductions,
//! reshapes and element-wise ops.

use super::{Lowered, add, arity, axis_of, constant_ints, input, optional_input, scalar};
use crate::ir::{ElemType, Op, ReduceKind, Tensor, TensorType, Unary, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

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
pub(super) fn reduce(
    imp: &mut Importer,
    cx: &NodeCx,
    kind: ReduceKind,
) -> Result<Lowered, ImportError> {
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
pub(super) fn softmax(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let (_, e, s) = shifted_exp_sum(imp, cx)?;
    add(imp, cx, "", Op::Div, vec![e, s]).map(Lowered::Value)
}

/// `LogSoftmax` as `x - max - log(sum(exp(x - max)))` over `axis` (opset 13
/// on), or over `axis` and every later dimension (before 13), as [`softmax`].
pub(super) fn log_softmax(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let (d, _, s) = shifted_exp_sum(imp, cx)?;
    let l = add(imp, cx, "log_sum", Op::Unary(Unary::Log), vec![s])?;
    add(imp, cx, "", Op::Sub, vec![d, l]).map(Lowered::Value)
}

/// What `Softmax` and `LogSoftmax` share, over their axes (kept as size 1):
/// `d = x - max(x)`, `e = exp(d)` and `s = sum(e)`. Large and masked logits
/// never overflow.
fn shifted_exp_sum(
    imp: &mut Importer,
    cx: &NodeCx,
) -> Result<(ValueId, ValueId, ValueId), ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["axis"])?;
    let x = input(imp, cx, 0)?;
    let ty = imp.g.ty(x).clone();
    if !ty.elem.is_float() {
        let op = cx.op_type();
        return Err(cx.shape_err(format!(
            "{op} is defined on floating-point tensors, the input is {ty}"
        )));
    }
    let rank = ty.shape.len();
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
    Ok((d, e, s))
}

/// `(x - mean) / sqrt(var + eps)` over `axes` of `x` (kept as size 1), the
/// steps named as `LayerNormalization`'s.
fn normalized(
    imp: &mut Importer,
    cx: &NodeCx,
    x: ValueId,
    axes: Vec<usize>,
    eps: f64,
) -> Result<ValueId, ImportError> {
    let elem = imp.g.ty(x).elem;
    let eps = scalar(imp, format!("{}/epsilon", cx.name), elem, eps);
    let mean_op = Op::Reduce {
        kind: ReduceKind::Mean,
        axes,
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
    add(imp, cx, "normalized", Op::Mul, vec![d, inv])
}

/// `y · scale + bias` (the sum named `step`), scale and bias (`[n]`)
/// reshaped to `[n, 1, ...]` so that they broadcast along dimension `rank -
/// 1 - trailing` of `y`.
fn scale_and_shift(
    imp: &mut Importer,
    cx: &NodeCx,
    y: ValueId,
    (scale, bias): (ValueId, ValueId),
    (n, trailing): (usize, usize),
    step: &str,
) -> Result<ValueId, ImportError> {
    let mut shape = vec![n];
    shape.extend(std::iter::repeat_n(1, trailing));
    for (v, what) in [(scale, "scale"), (bias, "bias")] {
        let ty = imp.g.ty(v);
        if ty.shape != [n] {
            return Err(cx.shape_err(format!("the {what} must have shape [{n}], it is {ty}")));
        }
    }
    let reshape = Op::Reshape { shape };
    let s = add(imp, cx, "scale_shape", reshape.clone(), vec![scale])?;
    let b = add(imp, cx, "bias_shape", reshape, vec![bias])?;
    let scaled = add(imp, cx, "scaled", Op::Mul, vec![y, s])?;
    add(imp, cx, step, Op::Add, vec![scaled, b])
}

/// The floating-point input `[N, C, ...]` of a normalisation.
fn channels_input(imp: &Importer, cx: &NodeCx) -> Result<(ValueId, Vec<usize>), ImportError> {
    let x = input(imp, cx, 0)?;
    let ty = imp.g.ty(x);
    if ty.shape.len() < 2 || !ty.elem.is_float() {
        return Err(cx.shape_err(format!(
            "the input must be a floating-point [N, C, ...] tensor, it is {ty}"
        )));
    }
    Ok((x, ty.shape.clone()))
}

/// `InstanceNormalization`: each `[n, c]` normalised over the spatial
/// dimensions, then `· scale[c] + bias[c]`.
pub(super) fn instance_norm(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 3, 3)?;
    cx.check_attributes(&["epsilon"])?;
    let (x, shape) = channels_input(imp, cx)?;
    let (scale, bias) = (input(imp, cx, 1)?, input(imp, cx, 2)?);
    let rank = shape.len();
    let eps = f64::from(cx.float("epsilon", 1e-5)?);
    let y = normalized(imp, cx, x, (2..rank).collect(), eps)?;
    let y = scale_and_shift(imp, cx, y, (scale, bias), (shape[1], rank - 2), "")?;
    Ok(Lowered::Value(y))
}

/// `GroupNormalization`: each `[n]` split into `num_groups` groups of
/// channels, normalised over each group's channels and spatial dimensions,
/// then scaled and shifted per group (opset 18) or per channel (21).
pub(super) fn group_norm(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 3, 3)?;
    cx.check_attributes(&["epsilon", "num_groups", "stash_type"])?;
    if cx.int("stash_type", 1)? != 1 {
        return Err(cx.attr_err("stash_type", "only 1 (float32 statistics) is supported"));
    }
    let (x, shape) = channels_input(imp, cx)?;
    let (scale, bias) = (input(imp, cx, 1)?, input(imp, cx, 2)?);
    let (n, c) = (shape[0], shape[1]);
    let g = usize::try_from(cx.required_int("num_groups")?)
        .ok()
        .filter(|g| *g > 0 && c % g == 0)
        .ok_or_else(|| cx.attr_err("num_groups", format!("must divide the {c} channels")))?;
    let rest = shape.iter().product::<usize>() / (n * g).max(1);
    let grouped = Op::Reshape {
        shape: vec![n, g, rest],
    };
    let xg = add(imp, cx, "grouped", grouped, vec![x])?;
    let eps = f64::from(cx.float("epsilon", 1e-5)?);
    let mut y = normalized(imp, cx, xg, vec![2], eps)?;
    if imp.opset < 21 {
        y = scale_and_shift(imp, cx, y, (scale, bias), (g, 1), "shifted")?;
    }
    let back = Op::Reshape {
        shape: shape.clone(),
    };
    let step = if imp.opset < 21 { "" } else { "ungrouped" };
    y = add(imp, cx, step, back, vec![y])?;
    if imp.opset >= 21 {
        y = scale_and_shift(imp, cx, y, (scale, bias), (c, shape.len() - 2), "")?;
    }
    Ok(Lowered::Value(y))
}

/// `LayerNormalization` (opset 17) over `axis` and every later dimension:
/// `(x - mean) / sqrt(var + epsilon) * scale + bias`, decomposed into the
/// reductions and element-wise ops a model exporter writes out by hand.
/// The optional `Mean` and `InvStdDev` outputs are bound too.
pub(super) fn layer_norm(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
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

/// `BatchNormalization` in inference mode: `x · a + b` per channel, with
/// `a = scale / sqrt(var + eps)` and `b = bias - mean · a` (computed at import
/// when the statistics are constants, else as ops).
pub(super) fn batch_norm(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
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

/// Which extreme an index search looks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Extreme {
    Max,
    Min,
}

/// Where `x` reaches its extreme along `axis` (kept as size 1), as an f32
/// index, with the extreme itself. Exact arithmetic on 0/1 truth values:
/// `hit = m <= x` (or `x <= m`) marks the elements at the extreme `m`; the
/// first index is `min(i + (1 - hit) · n)` over the axis, the last
/// `max(hit · (i + 1)) - 1`. `step` prefixes the nodes' names.
fn extreme_index(
    imp: &mut Importer,
    cx: &NodeCx,
    step: &str,
    x: ValueId,
    axis: usize,
    which: Extreme,
    last: bool,
) -> Result<(ValueId, ValueId), ImportError> {
    let ty = imp.g.ty(x).clone();
    let n = ty.shape[axis];
    let name = |s: &str| format!("{step}{s}");
    let red = |kind, axes: &[usize]| Op::Reduce {
        kind,
        axes: axes.to_vec(),
        keepdims: true,
    };
    let kind = match which {
        Extreme::Max => ReduceKind::Max,
        Extreme::Min => ReduceKind::Min,
    };
    let m = add(imp, cx, &name("extreme"), red(kind, &[axis]), vec![x])?;
    let pair = match which {
        Extreme::Max => vec![m, x],
        Extreme::Min => vec![x, m],
    };
    let hit = add(imp, cx, &name("hit"), Op::LessOrEqual, pair)?;
    let hit = add(
        imp,
        cx,
        &name("hit_f32"),
        Op::Cast { to: ElemType::F32 },
        vec![hit],
    )?;
    // The indices along the axis, shaped to broadcast against `x`.
    let mut shape = vec![1; ty.shape.len()];
    shape[axis] = n;
    let iota = |imp: &mut Importer, what: &str, from: f64| {
        let data = (0..n).map(|i| from + i as f64).collect();
        let ty = TensorType {
            elem: ElemType::F32,
            shape: shape.clone(),
        };
        imp.g
            .add_constant(format!("{}/{step}{what}", cx.name), Tensor::new(ty, data))
    };
    let index = if last {
        // max(hit · (i + 1)) - 1: 0 where nothing else is, so the last hit wins.
        let from_one = iota(imp, "index_plus_one", 1.0);
        let at = add(imp, cx, &name("hit_index"), Op::Mul, vec![hit, from_one])?;
        let top = add(
            imp,
            cx,
            &name("last"),
            red(ReduceKind::Max, &[axis]),
            vec![at],
        )?;
        let one = scalar(imp, format!("{}/{step}one", cx.name), ElemType::F32, 1.0);
        add(imp, cx, &name("index"), Op::Sub, vec![top, one])?
    } else {
        // min(i + (1 - hit) · n): past every index where it is not a hit.
        let index = iota(imp, "index", 0.0);
        let big = scalar(
            imp,
            format!("{}/{step}past", cx.name),
            ElemType::F32,
            n as f64,
        );
        let one = scalar(imp, format!("{}/{step}one", cx.name), ElemType::F32, 1.0);
        let miss = add(imp, cx, &name("miss"), Op::Sub, vec![one, hit])?;
        let away = add(imp, cx, &name("away"), Op::Mul, vec![miss, big])?;
        let at = add(imp, cx, &name("candidate"), Op::Add, vec![index, away])?;
        add(
            imp,
            cx,
            &name("index"),
            red(ReduceKind::Min, &[axis]),
            vec![at],
        )?
    };
    Ok((index, m))
}

/// The input as f32 (integers are held so, exact below 2^24).
fn as_f32(imp: &mut Importer, cx: &NodeCx, x: ValueId) -> Result<ValueId, ImportError> {
    let elem = imp.g.ty(x).elem;
    if elem == ElemType::F32 {
        return Ok(x);
    }
    if elem == ElemType::Bool {
        let ty = imp.g.ty(x).clone();
        return Err(cx.shape_err(format!(
            "{} is taken on numbers, the input is {ty}",
            cx.op_type()
        )));
    }
    add(imp, cx, "as_f32", Op::Cast { to: ElemType::F32 }, vec![x])
}

/// `ArgMax` / `ArgMin` over one axis (`keepdims`, `select_last_index`), an
/// int64 result.
pub(super) fn arg_extreme(
    imp: &mut Importer,
    cx: &NodeCx,
    which: Extreme,
) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["axis", "keepdims", "select_last_index"])?;
    let x = input(imp, cx, 0)?;
    let x = as_f32(imp, cx, x)?;
    let rank = imp.g.ty(x).shape.len();
    if rank == 0 {
        return Err(cx.shape_err("the input is a scalar: there is no axis to search"));
    }
    let axis = axis_of(cx, "axis", cx.int("axis", 0)?, rank)?;
    let last = cx.int("select_last_index", 0)? != 0;
    let (index, _) = extreme_index(imp, cx, "", x, axis, which, last)?;
    let index = if cx.int("keepdims", 1)? != 0 {
        index
    } else {
        let mut shape = imp.g.ty(index).shape.clone();
        shape.remove(axis);
        add(imp, cx, "dropped", Op::Reshape { shape }, vec![index])?
    };
    add(imp, cx, "", Op::Cast { to: ElemType::I64 }, vec![index]).map(Lowered::Value)
}

/// The most elements `TopK` takes: each is a search over the whole axis.
const MAX_TOP_K: usize = 256;

/// `TopK` with a constant `k` over any axis: `k` searches for the extreme
/// and its first index ([`extreme_index`]), each taking the element found
/// out of the next (replaced by the far end of f32's range, so that ties
/// come out lowest index first, as ONNX orders them). The values and
/// int64 indices are the searches' results joined along the axis, sorted
/// (which `sorted = 0` allows too).
pub(super) fn top_k(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let (ins, outs) = (cx.proto.input.len(), cx.proto.output.len());
    if ins != 2 {
        return Err(cx.arity_err(format!("takes 2 inputs, has {ins}")));
    }
    if outs != 2 {
        return Err(cx.arity_err(format!("has {outs} outputs, the op has 2")));
    }
    cx.check_attributes(&["axis", "largest", "sorted"])?;
    let x = input(imp, cx, 0)?;
    let elem = imp.g.ty(x).elem;
    let x = as_f32(imp, cx, x)?;
    let k_in = input(imp, cx, 1)?;
    let k = match constant_ints(imp, cx, k_in)?[..] {
        [k] => k,
        ref ks => return Err(cx.shape_err(format!("K must hold one value, it holds {ks:?}"))),
    };
    let rank = imp.g.ty(x).shape.len();
    if rank == 0 {
        return Err(cx.shape_err("the input is a scalar: there is no axis to search"));
    }
    let axis = axis_of(cx, "axis", cx.int("axis", -1)?, rank)?;
    let n = imp.g.ty(x).shape[axis];
    let k = usize::try_from(k)
        .ok()
        .filter(|k| *k <= n)
        .ok_or_else(|| cx.attr_err("K", format!("{k} is not in 0..={n}, the axis' size")))?;
    if k > MAX_TOP_K {
        return Err(cx.attr_err(
            "K",
            format!("{k} is more than the {MAX_TOP_K} elements TopK takes (one search each)"),
        ));
    }
    let which = if cx.int("largest", 1)? != 0 {
        Extreme::Max
    } else {
        Extreme::Min
    };
    let far = match which {
        Extreme::Max => f64::from(f32::MIN),
        Extreme::Min => f64::from(f32::MAX),
    };
    let mut shape = imp.g.ty(x).shape.clone();
    shape[axis] = 0;
    if k == 0 {
        let empty = |imp: &mut Importer, what: &str, elem| {
            let ty = TensorType {
                elem,
                shape: shape.clone(),
            };
            imp.g
                .add_constant(format!("{}/{what}", cx.name), Tensor::new(ty, vec![]))
        };
        let v = empty(imp, "values", elem);
        let i = empty(imp, "indices", ElemType::I64);
        return Ok(Lowered::Many(vec![Some(v), Some(i)]));
    }
    let (mut values, mut indices) = (Vec::with_capacity(k), Vec::with_capacity(k));
    let position = {
        let mut s = vec![1; rank];
        s[axis] = n;
        let ty = TensorType {
            elem: ElemType::F32,
            shape: s,
        };
        let data = (0..n).map(|i| i as f64).collect();
        imp.g
            .add_constant(format!("{}/position", cx.name), Tensor::new(ty, data))
    };
    let mut rest = x;
    for step in 0..k {
        let prefix = format!("top{step}/");
        let (index, m) = extreme_index(imp, cx, &prefix, rest, axis, which, false)?;
        values.push(m);
        indices.push(index);
        if step + 1 == k {
            break;
        }
        // rest · (1 - found) + far · found, `found` 1 at the index taken.
        let p = |s: &str| format!("{prefix}{s}");
        let at_most = add(
            imp,
            cx,
            &p("at_most"),
            Op::LessOrEqual,
            vec![position, index],
        )?;
        let at_least = add(
            imp,
            cx,
            &p("at_least"),
            Op::LessOrEqual,
            vec![index, position],
        )?;
        let found = add(imp, cx, &p("found"), Op::Mul, vec![at_most, at_least])?;
        let found = add(
            imp,
            cx,
            &p("found_f32"),
            Op::Cast { to: ElemType::F32 },
            vec![found],
        )?;
        let one = scalar(imp, format!("{}/{prefix}one", cx.name), ElemType::F32, 1.0);
        let far = scalar(imp, format!("{}/{prefix}far", cx.name), ElemType::F32, far);
        let kept = add(imp, cx, &p("kept_mask"), Op::Sub, vec![one, found])?;
        let kept = add(imp, cx, &p("kept"), Op::Mul, vec![rest, kept])?;
        let away = add(imp, cx, &p("away"), Op::Mul, vec![found, far])?;
        rest = add(imp, cx, &p("rest"), Op::Add, vec![kept, away])?;
    }
    let join = |imp: &mut Importer, what: &str, parts: Vec<ValueId>| {
        if parts.len() == 1 {
            Ok(parts[0])
        } else {
            add(imp, cx, what, Op::Concat { axis }, parts)
        }
    };
    let v = join(imp, "values", values)?;
    let v = if elem == ElemType::F32 {
        v
    } else {
        add(imp, cx, "values_typed", Op::Cast { to: elem }, vec![v])?
    };
    let i = join(imp, "indices_f32", indices)?;
    let i = add(imp, cx, "indices", Op::Cast { to: ElemType::I64 }, vec![i])?;
    Ok(Lowered::Many(vec![Some(v), Some(i)]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{close, run};
    use crate::onnx::proto::{AttributeProto, NodeProto, TensorProto};

    /// `x` normalised in groups of `size` consecutive elements, each group
    /// then scaled and shifted by its own `scale[k]` and `bias[k]`
    /// (`per` elements sharing one).
    fn normalised(x: &[f32], size: usize, per: usize, scale: &[f32], bias: &[f32]) -> Vec<f64> {
        let mut out = Vec::new();
        for group in x.chunks(size) {
            let n = group.len() as f64;
            let mean = group.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
            let var = group
                .iter()
                .map(|v| (f64::from(*v) - mean).powi(2))
                .sum::<f64>()
                / n;
            for v in group {
                out.push((f64::from(*v) - mean) / (var + 1e-5).sqrt());
            }
        }
        for (i, y) in out.iter_mut().enumerate() {
            let k = (i / per) % scale.len();
            *y = *y * f64::from(scale[k]) + f64::from(bias[k]);
        }
        out
    }

    fn x() -> Vec<f32> {
        (0..24).map(|i| ((i * 7) % 10) as f32 - 4.5).collect()
    }

    #[test]
    fn group_normalization_scales_per_group_at_18_and_per_channel_at_21() {
        let node = || {
            NodeProto::new("GroupNormalization", "g", &["x", "s", "b"], &["y"])
                .with(AttributeProto::int("num_groups", 2))
        };
        let params = |n: usize| {
            let s: Vec<f32> = (0..n).map(|i| 0.5 + i as f32).collect();
            let b: Vec<f32> = (0..n).map(|i| i as f32 - 1.0).collect();
            (s, b)
        };
        // [2, 4, 3]: groups of two channels, six elements each.
        let (s, b) = params(2);
        let inits = vec![
            TensorProto::from_f32("s", &[2], &s),
            TensorProto::from_f32("b", &[2], &b),
        ];
        let (_, got) = run(node(), 18, (&[2, 4, 3], &x()), inits);
        assert!(close(&got, &normalised(&x(), 6, 6, &s, &b), 1e-5));
        let (s, b) = params(4);
        let inits = vec![
            TensorProto::from_f32("s", &[4], &s),
            TensorProto::from_f32("b", &[4], &b),
        ];
        let (_, got) = run(node(), 21, (&[2, 4, 3], &x()), inits);
        assert!(close(&got, &normalised(&x(), 6, 3, &s, &b), 1e-5));
    }

    #[test]
    fn instance_normalization_normalises_each_channel() {
        let node = NodeProto::new("InstanceNormalization", "i", &["x", "s", "b"], &["y"]);
        let (s, b) = ([2.0, -1.0, 0.5], [0.0, 1.0, 3.0]);
        let inits = vec![
            TensorProto::from_f32("s", &[3], &s),
            TensorProto::from_f32("b", &[3], &b),
        ];
        let (_, got) = run(node, 17, (&[2, 3, 2, 2], &x()), inits);
        assert!(close(&got, &normalised(&x(), 4, 4, &s, &b), 1e-5));
    }

    #[test]
    fn log_softmax_before_13_spans_every_later_dimension() {
        let node = NodeProto::new("LogSoftmax", "l", &["x"], &["y"]);
        let x = x();
        let (_, got) = run(node, 11, (&[2, 3, 4], &x), vec![]);
        let mut want = Vec::new();
        for row in x.chunks(12) {
            let lse = row.iter().map(|v| f64::from(*v).exp()).sum::<f64>().ln();
            want.extend(row.iter().map(|v| f64::from(*v) - lse));
        }
        assert!(close(&got, &want, 1e-5));
    }
}
