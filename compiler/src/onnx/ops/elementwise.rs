//! The element-wise ops: the binary arithmetic ops (and `MatMul`, which
//! takes the same shape of node), `Max` / `Min` of any number of inputs,
//! `Pow`, `Gelu`, the unary ops, `Relu`, `LeakyRelu`, `HardSigmoid`,
//! `HardSwish`, `Identity`, `Cast` and `Where`.

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
        let bound = |i: usize| -> Result<Option<f64>, ImportError> {
            let Some(v) = super::optional_input(imp, cx, i)? else {
                return Ok(None);
            };
            let Some(t) = imp.g.constants.get(&v) else {
                return Err(ImportError::NotConstant {
                    node: cx.node.clone(),
                    op_type: cx.op_type(),
                    value: imp.g.values[v.index()].name.clone(),
                });
            };
            if t.data.len() != 1 {
                let ty = &t.ty;
                return Err(cx.shape_err(format!("a bound must be a scalar, it is {ty}")));
            }
            Ok(Some(t.data[0]))
        };
        (bound(1)?, bound(2)?)
    } else {
        arity(cx, 1, 1)?;
        cx.check_attributes(&["min", "max"])?;
        let has = |name: &str| cx.proto.attribute.iter().any(|a| a.name == name);
        (
            has("min")
                .then(|| cx.float("min", 0.0))
                .transpose()?
                .map(f64::from),
            has("max")
                .then(|| cx.float("max", 0.0))
                .transpose()?
                .map(f64::from),
        )
    };
    let mut y = x;
    let parts = [("at_least_min", Op::Max, lo), ("at_most_max", Op::Min, hi)];
    let last = parts.iter().rposition(|(_, _, b)| b.is_some());
    for (k, (step, op, b)) in parts.into_iter().enumerate() {
        let Some(b) = b else { continue };
        let c = scalar(imp, format!("{}/{step}_bound", cx.name), elem, b);
        let name = if Some(k) == last { "" } else { step };
        y = add(imp, cx, name, op, vec![y, c])?;
    }
    if last.is_none() {
        y = add(imp, cx, "", Op::Identity, vec![x])?;
    }
    Ok(Lowered::Value(y))
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
