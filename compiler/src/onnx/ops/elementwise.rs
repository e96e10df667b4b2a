//! The element-wise ops: the binary arithmetic ops (and `MatMul`, which
//! takes the same shape of node), `Max` / `Min` of any number of inputs,
//! `Pow`, `Gelu`, the unary ops, `Relu`, `LeakyRelu`, `PRelu`,
//! `HardSigmoid`, `HardSwish`, `Softplus`, `Softsign`, `Mish`, `Swish`,
//! `Elu`, `Selu`, `Celu`, `Identity`, `Cast` and `Where`. The activations
//! are decomposed into relu, min, exp, log, tanh, sigmoid, products and sums.

use super::{Lowered, add, arity, input, scalar};
use crate::ir::{Op, Unary, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;
use crate::onnx::tensor::{data_type_name, elem_type};

/// `MatMul`, `Add`, `Sub`, `Mul`, `Div`: two inputs, numpy broadcasting.
pub(super) fn binary(imp: &mut Importer, cx: &NodeCx, op: Op) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&[])?;
    let (a, b) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    add(imp, cx, "", op, vec![a, b]).map(Lowered::Value)
}

/// `Max` / `Min` of one or more inputs (numpy broadcasting), as a chain of
/// binary ops; of one input, the input.
pub(super) fn variadic(imp: &mut Importer, cx: &NodeCx, op: Op) -> Result<Lowered, ImportError> {
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
pub(super) fn pow(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
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
pub(super) fn gelu(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["approximate"])?;
    let x = float_input(imp, cx)?;
    let elem = imp.g.ty(x).elem;
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

pub(super) fn unary(imp: &mut Importer, cx: &NodeCx, u: Unary) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = input(imp, cx, 0)?;
    add(imp, cx, "", Op::Unary(u), vec![x]).map(Lowered::Value)
}

pub(super) fn relu(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = input(imp, cx, 0)?;
    add(imp, cx, "", Op::Relu, vec![x]).map(Lowered::Value)
}

/// The input, which must be floating-point, for an activation defined only there.
fn float_input(imp: &Importer, cx: &NodeCx) -> Result<ValueId, ImportError> {
    let x = input(imp, cx, 0)?;
    if !imp.g.ty(x).elem.is_float() {
        let ty = imp.g.ty(x);
        return Err(cx.shape_err(format!(
            "{} is defined on floating-point tensors, the input is {ty}",
            cx.op_type()
        )));
    }
    Ok(x)
}

/// `LeakyRelu(x) = x` where `x >= 0`, else `alpha · x`: as
/// `relu(x) + alpha · min(x, 0)` (exact: one of the two terms is zero).
pub(super) fn leaky_relu(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["alpha"])?;
    let alpha = f64::from(cx.float("alpha", 0.01)?);
    let x = float_input(imp, cx)?;
    let elem = imp.g.ty(x).elem;
    let pos = add(imp, cx, "pos", Op::Relu, vec![x])?;
    let zero = scalar(imp, format!("{}/zero", cx.name), elem, 0.0);
    let neg = add(imp, cx, "neg", Op::Min, vec![x, zero])?;
    let a = scalar(imp, format!("{}/alpha", cx.name), elem, alpha);
    let scaled = add(imp, cx, "scaled", Op::Mul, vec![neg, a])?;
    add(imp, cx, "", Op::Add, vec![pos, scaled]).map(Lowered::Value)
}

/// `Clip(x, min, max) = min(max(x, min), max)`, each bound optional: from
/// opset 11 constant scalar inputs, before it the attributes `min` and `max`.
pub(super) fn clip(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let x = float_input(imp, cx)?;
    let elem = imp.g.ty(x).elem;
    let (lo, hi) = if imp.opset >= 11 {
        arity(cx, 1, 3)?;
        cx.check_attributes(&[])?;
        // A bound is a scalar input: a constant, or a value computed at run
        // time (a `max(x, m)` against a computed floor).
        let bound = |i: usize| -> Result<Option<Bound>, ImportError> {
            let Some(v) = super::optional_input(imp, cx, i)? else {
                return Ok(None);
            };
            let ty = imp.g.ty(v);
            if ty.numel() != 1 || ty.elem != elem {
                return Err(cx.shape_err(format!(
                    "a bound must be a scalar of the input's type, it is {ty}"
                )));
            }
            Ok(Some(match imp.g.constants.get(&v) {
                Some(t) => Bound::Known(t.data[0]),
                None => Bound::Computed(v),
            }))
        };
        (bound(1)?, bound(2)?)
    } else {
        arity(cx, 1, 1)?;
        cx.check_attributes(&["min", "max"])?;
        let attr = |name: &str| -> Result<Option<Bound>, ImportError> {
            let has = cx.proto.attribute.iter().any(|a| a.name == name);
            Ok(has
                .then(|| cx.float(name, 0.0))
                .transpose()?
                .map(|b| Bound::Known(f64::from(b))))
        };
        (attr("min")?, attr("max")?)
    };
    let mut y = x;
    let parts = [("at_least_min", Op::Max, lo), ("at_most_max", Op::Min, hi)];
    let last = parts.iter().rposition(|(_, _, b)| b.is_some());
    for (k, (step, op, b)) in parts.into_iter().enumerate() {
        let c = match b {
            None => continue,
            Some(Bound::Known(b)) => scalar(imp, format!("{}/{step}_bound", cx.name), elem, b),
            Some(Bound::Computed(v)) => v,
        };
        let name = if Some(k) == last { "" } else { step };
        y = add(imp, cx, name, op, vec![y, c])?;
    }
    if last.is_none() {
        y = add(imp, cx, "", Op::Identity, vec![x])?;
    }
    Ok(Lowered::Value(y))
}

/// A bound of `Clip`.
enum Bound {
    Known(f64),
    Computed(ValueId),
}

/// `max(0, min(1, alpha · x + beta))`, the piecewise-linear sigmoid.
fn hard_sigmoid_of(
    imp: &mut Importer,
    cx: &NodeCx,
    x: ValueId,
    alpha: f64,
    beta: f64,
    step: &str,
) -> Result<ValueId, ImportError> {
    let elem = imp.g.ty(x).elem;
    let k = |imp: &mut Importer, what: &str, v: f64| {
        scalar(imp, format!("{}/{what}", cx.name), elem, v)
    };
    let a = k(imp, "alpha", alpha);
    let ax = add(imp, cx, "scaled", Op::Mul, vec![x, a])?;
    let b = k(imp, "beta", beta);
    let s = add(imp, cx, "shifted", Op::Add, vec![ax, b])?;
    let one = k(imp, "one", 1.0);
    let lo = add(imp, cx, "below_one", Op::Min, vec![s, one])?;
    add(imp, cx, step, Op::Relu, vec![lo])
}

/// `HardSigmoid(x) = max(0, min(1, alpha · x + beta))` (alpha 0.2, beta 0.5 by default).
pub(super) fn hard_sigmoid(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["alpha", "beta"])?;
    let alpha = f64::from(cx.float("alpha", 0.2)?);
    let beta = f64::from(cx.float("beta", 0.5)?);
    let x = float_input(imp, cx)?;
    hard_sigmoid_of(imp, cx, x, alpha, beta, "").map(Lowered::Value)
}

/// `HardSwish(x) = x · HardSigmoid(x)` with alpha 1/6 and beta 0.5.
pub(super) fn hard_swish(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = float_input(imp, cx)?;
    let alpha = f64::from(1.0f32 / 6.0);
    let gate = hard_sigmoid_of(imp, cx, x, alpha, 0.5, "gate")?;
    add(imp, cx, "", Op::Mul, vec![x, gate]).map(Lowered::Value)
}

/// `PRelu(x, slope) = relu(x) + slope · min(x, 0)` (exact: one of the two
/// terms is zero), `slope` broadcast to `x` (never the other way).
pub(super) fn prelu(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&[])?;
    let x = float_input(imp, cx)?;
    let slope = input(imp, cx, 1)?;
    let ty = imp.g.ty(x).clone();
    let pos = add(imp, cx, "pos", Op::Relu, vec![x])?;
    let zero = scalar(imp, format!("{}/zero", cx.name), ty.elem, 0.0);
    let neg = add(imp, cx, "neg", Op::Min, vec![x, zero])?;
    let scaled = add(imp, cx, "scaled", Op::Mul, vec![neg, slope])?;
    if imp.g.ty(scaled).shape != ty.shape {
        let st = imp.g.ty(slope);
        return Err(cx.shape_err(format!(
            "the slope ({st}) does not broadcast to the input's shape {:?}",
            ty.shape
        )));
    }
    add(imp, cx, "", Op::Add, vec![pos, scaled]).map(Lowered::Value)
}

/// A scalar constant of type `x`'s, named after the node and `what`.
fn constant_like(imp: &mut Importer, cx: &NodeCx, x: ValueId, what: &str, v: f64) -> ValueId {
    let elem = imp.g.ty(x).elem;
    scalar(imp, format!("{}/{what}", cx.name), elem, v)
}

/// `relu(x)` and `-|x|`, the latter as `(x - relu(x)) - relu(x)` (exact,
/// and made of ops every target has, where not all have `Abs`).
fn relu_and_neg_abs(
    imp: &mut Importer,
    cx: &NodeCx,
    x: ValueId,
) -> Result<(ValueId, ValueId), ImportError> {
    let r = add(imp, cx, "relu", Op::Relu, vec![x])?;
    let m = add(imp, cx, "min0", Op::Sub, vec![x, r])?;
    let na = add(imp, cx, "neg_abs", Op::Sub, vec![m, r])?;
    Ok((r, na))
}

/// `softplus(x) = log(1 + exp(x))`, as `relu(x) + log(1 + exp(-|x|))` so
/// that the exponential never overflows.
fn softplus_of(
    imp: &mut Importer,
    cx: &NodeCx,
    x: ValueId,
    step: &str,
) -> Result<ValueId, ImportError> {
    let (r, na) = relu_and_neg_abs(imp, cx, x)?;
    let e = add(imp, cx, "exp", Op::Unary(Unary::Exp), vec![na])?;
    let one = constant_like(imp, cx, x, "one", 1.0);
    let onep = add(imp, cx, "one_plus", Op::Add, vec![e, one])?;
    let l = add(imp, cx, "log", Op::Unary(Unary::Log), vec![onep])?;
    add(imp, cx, step, Op::Add, vec![r, l])
}

/// `Softplus(x) = log(1 + exp(x))` (see [`softplus_of`]).
pub(super) fn softplus(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = float_input(imp, cx)?;
    softplus_of(imp, cx, x, "").map(Lowered::Value)
}

/// `Mish(x) = x · tanh(softplus(x))`.
pub(super) fn mish(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = float_input(imp, cx)?;
    let sp = softplus_of(imp, cx, x, "softplus")?;
    let t = add(imp, cx, "tanh", Op::Unary(Unary::Tanh), vec![sp])?;
    add(imp, cx, "", Op::Mul, vec![x, t]).map(Lowered::Value)
}

/// `Softsign(x) = x / (1 + |x|)` (`|x|` as in [`relu_and_neg_abs`]).
pub(super) fn softsign(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = float_input(imp, cx)?;
    let (_, na) = relu_and_neg_abs(imp, cx, x)?;
    let one = constant_like(imp, cx, x, "one", 1.0);
    let d = add(imp, cx, "one_minus", Op::Sub, vec![one, na])?;
    add(imp, cx, "", Op::Div, vec![x, d]).map(Lowered::Value)
}

/// `Swish(x) = x · sigmoid(alpha · x)` (opset 24; alpha 1 by default).
pub(super) fn swish(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["alpha"])?;
    let alpha = f64::from(cx.float("alpha", 1.0)?);
    let x = float_input(imp, cx)?;
    let ax = if alpha == 1.0 {
        x
    } else {
        let a = constant_like(imp, cx, x, "alpha", alpha);
        add(imp, cx, "scaled", Op::Mul, vec![x, a])?
    };
    let s = add(imp, cx, "sigmoid", Op::Unary(Unary::Sigmoid), vec![ax])?;
    add(imp, cx, "", Op::Mul, vec![x, s]).map(Lowered::Value)
}

/// The exponential linear units, `relu(x) + alpha · (exp(min(x, 0) / k) -
/// 1)` (exact where `x > 0`, where the second term is zero): `Elu` (k = 1),
/// `Celu` (k = alpha), and `Selu` (k = 1, all times gamma).
#[derive(Clone, Copy, PartialEq)]
pub(super) enum ExpUnit {
    Elu,
    Selu,
    Celu,
}

pub(super) fn exp_unit(
    imp: &mut Importer,
    cx: &NodeCx,
    kind: ExpUnit,
) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    let x = float_input(imp, cx)?;
    let (alpha, gamma) = match kind {
        ExpUnit::Elu | ExpUnit::Celu => {
            cx.check_attributes(&["alpha"])?;
            (cx.float("alpha", 1.0)?, None)
        }
        ExpUnit::Selu => {
            cx.check_attributes(&["alpha", "gamma"])?;
            let alpha = cx.float("alpha", 1.673_263_2)?;
            (alpha, Some(cx.float("gamma", 1.050_701)?))
        }
    };
    if kind == ExpUnit::Celu && alpha == 0.0 {
        return Err(cx.attr_err("alpha", "must not be 0"));
    }
    let k = |imp: &mut Importer, what: &str, v: f32| constant_like(imp, cx, x, what, f64::from(v));
    let pos = add(imp, cx, "pos", Op::Relu, vec![x])?;
    let zero = k(imp, "zero", 0.0);
    let mut neg = add(imp, cx, "neg", Op::Min, vec![x, zero])?;
    if kind == ExpUnit::Celu && alpha != 1.0 {
        let a = k(imp, "alpha_divisor", alpha);
        neg = add(imp, cx, "neg_scaled", Op::Div, vec![neg, a])?;
    }
    let e = add(imp, cx, "exp", Op::Unary(Unary::Exp), vec![neg])?;
    let one = k(imp, "one", 1.0);
    let em1 = add(imp, cx, "exp_minus_one", Op::Sub, vec![e, one])?;
    let a = k(imp, "alpha", alpha);
    let scaled = add(imp, cx, "scaled", Op::Mul, vec![em1, a])?;
    let Some(gamma) = gamma else {
        return add(imp, cx, "", Op::Add, vec![pos, scaled]).map(Lowered::Value);
    };
    let sum = add(imp, cx, "sum", Op::Add, vec![pos, scaled])?;
    let g = k(imp, "gamma", gamma);
    add(imp, cx, "", Op::Mul, vec![sum, g]).map(Lowered::Value)
}

/// An alias of its input, except for a graph output, which keeps its own value.
pub(super) fn identity(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
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

/// `Cast` to the element type `to` (`saturate` only concerns 8-bit floats, which the IR lacks).
pub(super) fn cast(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
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
    if to == crate::ir::ElemType::Bool && !imp.g.constants.contains_key(&x) {
        return super::logic::truth(imp, cx, x).map(Lowered::Value);
    }
    add(imp, cx, "", Op::Cast { to }, vec![x]).map(Lowered::Value)
}

/// `Where(cond, x, y)`.
pub(super) fn where_(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 3, 3)?;
    cx.check_attributes(&[])?;
    let xs: Vec<ValueId> = (0..3)
        .map(|i| input(imp, cx, i))
        .collect::<Result<_, _>>()?;
    add(imp, cx, "", Op::Where, xs).map(Lowered::Value)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{close, run};
    use crate::onnx::proto::{AttributeProto, NodeProto, TensorProto};

    const X: [f32; 7] = [-100.0, -3.0, -0.5, 0.0, 0.25, 2.0, 100.0];

    fn activation(node: NodeProto, inits: Vec<TensorProto>) -> Vec<f64> {
        run(node, 18, (&[7], &X), inits).1
    }

    fn each(f: impl Fn(f64) -> f64) -> Vec<f64> {
        X.iter().map(|x| f(f64::from(*x))).collect()
    }

    fn softplus(x: f64) -> f64 {
        x.max(0.0) + (-x.abs()).exp().ln_1p()
    }

    #[test]
    fn softplus_and_mish_do_not_overflow() {
        let got = activation(NodeProto::new("Softplus", "s", &["x"], &["y"]), vec![]);
        assert!(close(&got, &each(softplus), 1e-5), "{got:?}");
        let got = activation(NodeProto::new("Mish", "m", &["x"], &["y"]), vec![]);
        let want = each(|x| x * softplus(x).tanh());
        assert!(close(&got, &want, 1e-5), "{got:?}");
    }

    #[test]
    fn exponential_units_follow_their_definitions() {
        let celu =
            NodeProto::new("Celu", "c", &["x"], &["y"]).with(AttributeProto::float("alpha", 2.0));
        let want = each(|x| x.max(0.0) + (2.0 * ((x / 2.0).exp() - 1.0)).min(0.0));
        assert!(close(&activation(celu, vec![]), &want, 1e-5));
        let selu = NodeProto::new("Selu", "s", &["x"], &["y"]);
        let (a, g) = (1.673_263_192_176_818_8, 1.050_701_022_148_132_3);
        let want = each(|x| {
            if x > 0.0 {
                g * x
            } else {
                g * a * (x.exp() - 1.0)
            }
        });
        assert!(close(&activation(selu, vec![]), &want, 1e-5));
        let elu =
            NodeProto::new("Elu", "e", &["x"], &["y"]).with(AttributeProto::float("alpha", 0.5));
        let want = each(|x| if x > 0.0 { x } else { 0.5 * (x.exp() - 1.0) });
        assert!(close(&activation(elu, vec![]), &want, 1e-5));
    }

    #[test]
    fn prelu_softsign_and_swish() {
        let slope = TensorProto::from_f32("slope", &[1], &[0.25]);
        let prelu = NodeProto::new("PRelu", "p", &["x", "slope"], &["y"]);
        let want = each(|x| if x < 0.0 { 0.25 * x } else { x });
        assert_eq!(activation(prelu, vec![slope]), want);
        let softsign = NodeProto::new("Softsign", "s", &["x"], &["y"]);
        let want = each(|x| x / (1.0 + x.abs()));
        assert!(close(&activation(softsign, vec![]), &want, 1e-6));
        let swish =
            NodeProto::new("Swish", "s", &["x"], &["y"]).with(AttributeProto::float("alpha", 0.5));
        let want = each(|x| x / (1.0 + (-0.5 * x).exp()));
        assert!(close(&activation(swish, vec![]), &want, 1e-5));
    }
}
