//! The ops evaluated when compiling, as exporters' shape subgraphs use
//! them: `Shape` and `Size` (every shape is static once the inputs' are
//! fixed), `ConstantOfShape`, `Range`, the comparisons (`Equal`, `Less`,
//! `LessOrEqual`, `Greater`, `GreaterOrEqual`), the logical ops (`Not`,
//! `And`, `Or`, `Xor`), `Floor`, `Ceil`, `Mod`, `ReduceProd`, and `If` on a
//! condition known when compiling (the branch taken is inlined).
//!
//! Their results are constants. An input only known at run time is refused
//! ([`ImportError::NotStatic`]): the machines' programs do not compute them.
//! The ops with IR equivalents (`Gather`, `Concat`, `Cast`, arithmetic, ...)
//! need nothing here: `add` folds any node whose inputs are all constants.

use super::{Lowered, arity, axis_of, input, optional_input};
use crate::interp::{broadcast_strides, offsets};
use crate::ir::{ElemType, Tensor, TensorType, ValueId, broadcast};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;
use crate::onnx::tensor::{MAX_CONSTANT_ELEMENTS, checked_numel, tensor_from_proto};

/// A comparison.
#[derive(Clone, Copy, Debug)]
pub(super) enum Compare {
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

/// A binary logical op.
#[derive(Clone, Copy, Debug)]
pub(super) enum Logic {
    And,
    Or,
    Xor,
}

/// The value of input `i`, which must be known when compiling.
fn known(imp: &Importer, cx: &NodeCx, i: usize) -> Result<Tensor, ImportError> {
    let v = input(imp, cx, i)?;
    known_value(imp, cx, v)
}

fn known_value(imp: &Importer, cx: &NodeCx, v: ValueId) -> Result<Tensor, ImportError> {
    imp.g
        .constants
        .get(&v)
        .cloned()
        .ok_or_else(|| ImportError::NotStatic {
            node: cx.node.clone(),
            op_type: cx.op_type(),
            value: imp.g.values[v.index()].name.clone(),
        })
}

/// Adds a constant result named after the node.
fn result(
    imp: &mut Importer,
    cx: &NodeCx,
    elem: ElemType,
    shape: Vec<usize>,
    data: Vec<f64>,
) -> Lowered {
    let t = Tensor::new(TensorType { elem, shape }, data);
    Lowered::Value(imp.g.add_constant(cx.name.clone(), t))
}

/// `Shape(x)`, with `start` and `end` (opset 15) clamped as `Slice` clamps.
pub(super) fn shape(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["start", "end"])?;
    let x = input(imp, cx, 0)?;
    let dims = imp.g.ty(x).shape.clone();
    let rank = i64::try_from(dims.len()).unwrap_or(i64::MAX);
    let clamp = |a: i64| {
        let a = if a < 0 { a + rank } else { a };
        usize::try_from(a.clamp(0, rank)).unwrap_or(0)
    };
    let start = clamp(cx.int("start", 0)?);
    let end = clamp(cx.int("end", rank)?).max(start);
    let data: Vec<f64> = dims[start..end].iter().map(|d| *d as f64).collect();
    Ok(result(imp, cx, ElemType::I64, vec![data.len()], data))
}

/// `Size(x)`: its number of elements, an `int64` scalar.
pub(super) fn size(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = input(imp, cx, 0)?;
    let n = imp.g.ty(x).numel();
    Ok(result(imp, cx, ElemType::I64, vec![], vec![n as f64]))
}

/// `ConstantOfShape(shape)`: the one-element `value` (default `0.0f`) at
/// every position.
pub(super) fn constant_of_shape(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["value"])?;
    let spec = known(imp, cx, 0)?;
    if spec.ty.shape.len() != 1 || spec.ty.elem != ElemType::I64 {
        let ty = &spec.ty;
        return Err(cx.shape_err(format!("the shape must be a 1-D int64 tensor, it is {ty}")));
    }
    let shape = dims_of(cx, &spec.data)?;
    let (elem, x) = match cx.tensor("value")? {
        None => (ElemType::F32, 0.0),
        Some(t) => {
            let t = tensor_from_proto(t).map_err(|e| cx.attr_err("value", e.to_string()))?;
            if t.data.len() != 1 {
                let ty = &t.ty;
                return Err(cx.attr_err("value", format!("must hold one element, it is {ty}")));
            }
            (t.ty.elem, t.data[0])
        }
    };
    let n = sized(cx, &shape)?;
    Ok(result(imp, cx, elem, shape, vec![x; n]))
}

/// Sizes from a shape tensor's elements.
fn dims_of(cx: &NodeCx, data: &[f64]) -> Result<Vec<usize>, ImportError> {
    data.iter()
        .map(|d| {
            if *d >= 0.0 {
                Ok(*d as usize)
            } else {
                Err(cx.shape_err(format!("the shape {data:?} has a negative dimension")))
            }
        })
        .collect()
}

/// The number of elements of a result, refused when too large.
fn sized(cx: &NodeCx, shape: &[usize]) -> Result<usize, ImportError> {
    checked_numel(shape)
        .filter(|n| *n <= MAX_CONSTANT_ELEMENTS)
        .ok_or_else(|| {
            cx.shape_err(format!(
                "the result {shape:?} has more than {MAX_CONSTANT_ELEMENTS} elements"
            ))
        })
}

/// `Range(start, limit, delta)`: `max(ceil((limit - start) / delta), 0)`
/// elements `start + i·delta`, of the inputs' type.
pub(super) fn range(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 3, 3)?;
    cx.check_attributes(&[])?;
    let [start, limit, delta] = [known(imp, cx, 0)?, known(imp, cx, 1)?, known(imp, cx, 2)?];
    let elem = start.ty.elem;
    for t in [&start, &limit, &delta] {
        if t.data.len() != 1 || t.ty.elem != elem {
            return Err(cx.shape_err(format!(
                "start, limit and delta must be scalars of one type; they are {}, {} and {}",
                start.ty, limit.ty, delta.ty
            )));
        }
    }
    let (s, l, d) = (start.data[0], limit.data[0], delta.data[0]);
    if d == 0.0 {
        return Err(cx.shape_err("delta is 0"));
    }
    let count = ((l - s) / d).ceil().max(0.0);
    if !count.is_finite() || count > MAX_CONSTANT_ELEMENTS as f64 {
        return Err(cx.shape_err(format!("the range {s}..{l} by {d} is too long")));
    }
    let n = count as usize;
    let data = (0..n).map(|i| s + i as f64 * d).collect();
    Ok(result(imp, cx, elem, vec![n], data))
}

/// Element-wise `f(a, b)` of two known inputs with numpy broadcasting.
fn broadcast_known(
    imp: &mut Importer,
    cx: &NodeCx,
    attributes: &[&str],
    elem: impl FnOnce(ElemType) -> Result<ElemType, ImportError>,
    f: impl Fn(f64, f64) -> f64,
) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(attributes)?;
    let (a, b) = (known(imp, cx, 0)?, known(imp, cx, 1)?);
    if a.ty.elem != b.ty.elem {
        return Err(cx.shape_err(format!(
            "the operands are {} and {}: one type is needed",
            a.ty, b.ty
        )));
    }
    let out_elem = elem(a.ty.elem)?;
    let shape = broadcast(&a.ty.shape, &b.ty.shape).map_err(|e| cx.shape_err(e))?;
    let n = sized(cx, &shape)?;
    let ia = offsets(&shape, &broadcast_strides(&a.ty.shape, &shape));
    let ib = offsets(&shape, &broadcast_strides(&b.ty.shape, &shape));
    if ia.len() != n || ib.len() != n {
        return Err(cx.shape_err(format!("cannot broadcast {} with {}", a.ty, b.ty)));
    }
    let data = (0..n).map(|i| f(a.data[ia[i]], b.data[ib[i]])).collect();
    Ok(result(imp, cx, out_elem, shape, data))
}

fn truth(b: bool) -> f64 {
    f64::from(u8::from(b))
}

/// `Equal`, `Less`, ... of two known inputs: a boolean tensor.
pub(super) fn compare(imp: &mut Importer, cx: &NodeCx, c: Compare) -> Result<Lowered, ImportError> {
    broadcast_known(
        imp,
        cx,
        &[],
        |_| Ok(ElemType::Bool),
        |x, y| {
            truth(match c {
                Compare::Equal => x == y,
                Compare::Less => x < y,
                Compare::LessOrEqual => x <= y,
                Compare::Greater => x > y,
                Compare::GreaterOrEqual => x >= y,
            })
        },
    )
}

/// The element type must be boolean.
fn boolean(cx: &NodeCx, elem: ElemType) -> Result<ElemType, ImportError> {
    if elem == ElemType::Bool {
        Ok(elem)
    } else {
        Err(cx.shape_err(format!(
            "the operands must be bool, they are {}",
            elem.name()
        )))
    }
}

/// `And`, `Or`, `Xor` of two known boolean inputs.
pub(super) fn logic(imp: &mut Importer, cx: &NodeCx, l: Logic) -> Result<Lowered, ImportError> {
    broadcast_known(
        imp,
        cx,
        &[],
        |e| boolean(cx, e),
        |x, y| {
            let (x, y) = (x != 0.0, y != 0.0);
            truth(match l {
                Logic::And => x && y,
                Logic::Or => x || y,
                Logic::Xor => x != y,
            })
        },
    )
}

/// `Mod(a, b)`: the remainder with the divisor's sign (`fmod = 0`, integers
/// only) or the dividend's (`fmod = 1`). An integer division by zero is
/// refused; a float one gives NaN.
pub(super) fn modulo(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let fmod = cx.flag("fmod")?;
    let divisor = known(imp, cx, 1)?;
    if !divisor.ty.elem.is_float() && divisor.data.contains(&0.0) {
        return Err(cx.shape_err("integer division by zero"));
    }
    broadcast_known(
        imp,
        cx,
        &["fmod"],
        |e| {
            if fmod || !e.is_float() {
                Ok(e)
            } else {
                Err(cx.attr_err("fmod", "must be 1 for floating-point operands"))
            }
        },
        move |x, y| {
            let r = x % y;
            if !fmod && r != 0.0 && (r < 0.0) != (y < 0.0) {
                r + y
            } else {
                r
            }
        },
    )
}

/// `Not`, `Floor` and `Ceil` of a known input: `f` of each element, the
/// result of the element type `check` allows.
pub(super) fn unary_known(
    imp: &mut Importer,
    cx: &NodeCx,
    check: impl FnOnce(ElemType) -> Result<ElemType, String>,
    f: impl Fn(f64) -> f64,
) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = known(imp, cx, 0)?;
    let elem = check(x.ty.elem).map_err(|e| cx.shape_err(e))?;
    let data = x.data.iter().map(|v| f(*v)).collect();
    Ok(result(imp, cx, elem, x.ty.shape, data))
}

/// `Not` of a known boolean input.
pub(super) fn not(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let check = |e: ElemType| {
        if e == ElemType::Bool {
            Ok(e)
        } else {
            Err(format!("the operand must be bool, it is {}", e.name()))
        }
    };
    unary_known(imp, cx, check, |x| truth(x == 0.0))
}

/// `Floor` or `Ceil` of a known floating-point input.
pub(super) fn rounding(imp: &mut Importer, cx: &NodeCx, up: bool) -> Result<Lowered, ImportError> {
    let check = |e: ElemType| {
        if e.is_float() {
            Ok(e)
        } else {
            Err(format!(
                "the operand must be floating-point, it is {}",
                e.name()
            ))
        }
    };
    unary_known(
        imp,
        cx,
        check,
        move |x| if up { x.ceil() } else { x.floor() },
    )
}

/// `ReduceProd` of a known input (a shape's product): over `axes` (an
/// attribute before opset 18, an input from 18), or all of them.
pub(super) fn reduce_prod(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let from_input = imp.opset >= 18;
    if from_input {
        arity(cx, 1, 2)?;
        cx.check_attributes(&["keepdims", "noop_with_empty_axes"])?;
    } else {
        arity(cx, 1, 1)?;
        cx.check_attributes(&["keepdims", "axes"])?;
    }
    let x = known(imp, cx, 0)?;
    let keepdims = cx.int("keepdims", 1)? != 0;
    let listed: Option<Vec<i64>> = if from_input {
        match optional_input(imp, cx, 1)? {
            Some(a) => Some(
                known_value(imp, cx, a)?
                    .data
                    .iter()
                    .map(|v| *v as i64)
                    .collect(),
            ),
            None => None,
        }
    } else {
        cx.ints("axes")?.map(<[i64]>::to_vec)
    };
    let rank = x.ty.shape.len();
    let axes: Vec<usize> = match listed.filter(|a| !a.is_empty()) {
        Some(a) => a
            .iter()
            .map(|a| axis_of(cx, "axes", *a, rank))
            .collect::<Result<_, _>>()?,
        None if from_input && cx.flag("noop_with_empty_axes")? => vec![],
        None => (0..rank).collect(),
    };
    let mut shape = Vec::new();
    for (i, d) in x.ty.shape.iter().enumerate() {
        if !axes.contains(&i) {
            shape.push(*d);
        } else if keepdims {
            shape.push(1);
        }
    }
    let out_numel: usize = shape.iter().product();
    let mut data = vec![1.0; out_numel];
    let kept: Vec<usize> =
        x.ty.shape
            .iter()
            .enumerate()
            .map(|(i, d)| if axes.contains(&i) { 1 } else { *d })
            .collect();
    let strides = broadcast_strides(&kept, &x.ty.shape);
    for (i, o) in offsets(&x.ty.shape, &strides).into_iter().enumerate() {
        data[o] *= x.data[i];
    }
    Ok(result(imp, cx, x.ty.elem, shape, data))
}

/// `If` on a condition known when compiling: the branch taken, inlined (its
/// initializers become constants, its nodes are imported in order, and the
/// node's outputs are the branch's).
pub(super) fn if_(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity_many(cx, 1)?;
    cx.check_attributes(&["then_branch", "else_branch"])?;
    let c = input(imp, cx, 0)?;
    if imp.g.ty(c).numel() != 1 {
        let ty = imp.g.ty(c);
        return Err(cx.shape_err(format!("the condition must hold one element, it is {ty}")));
    }
    let Some(cond) = imp.g.constants.get(&c).cloned() else {
        return if_converted(imp, cx, c);
    };
    let attr = if cond.data[0] != 0.0 {
        "then_branch"
    } else {
        "else_branch"
    };
    Ok(Lowered::Aliases(branch(imp, cx, attr)?))
}

/// Branch `attr` of the node inlined: its outputs.
fn branch(
    imp: &mut Importer,
    cx: &NodeCx,
    attr: &str,
) -> Result<Vec<Option<ValueId>>, ImportError> {
    let branch = cx
        .graph(attr)?
        .ok_or_else(|| cx.attr_err(attr, "required, missing"))?;
    imp.inline(branch)?;
    let outs = branch
        .output
        .iter()
        .map(|o| imp.value(&o.name))
        .collect::<Vec<_>>();
    if outs.len() != cx.proto.output.len() {
        return Err(cx.attr_err(
            attr,
            format!(
                "has {} outputs, the node {}",
                outs.len(),
                cx.proto.output.len()
            ),
        ));
    }
    if let Some(i) = outs.iter().position(Option::is_none) {
        let name = &branch.output[i].name;
        return Err(cx.attr_err(attr, format!("its output `{name}` is never defined")));
    }
    Ok(outs)
}

/// An `If` whose condition is known only at run time, converted: both
/// branches computed, each output the one its condition selects (`Where`).
/// The branches' outputs must broadcast to one shape.
fn if_converted(imp: &mut Importer, cx: &NodeCx, c: ValueId) -> Result<Lowered, ImportError> {
    let then = branch(imp, cx, "then_branch")?;
    let other = branch(imp, cx, "else_branch")?;
    let mut outs = Vec::new();
    for (i, (t, e)) in then.into_iter().zip(other).enumerate() {
        let (Some(t), Some(e)) = (t, e) else {
            return Err(cx.attr_err("then_branch", "an output is never defined"));
        };
        let step = format!("selected{i}");
        outs.push(Some(super::add(
            imp,
            cx,
            &step,
            crate::ir::Op::Where,
            vec![c, t, e],
        )?));
    }
    Ok(Lowered::Many(outs))
}

/// Checks the node has exactly `n` inputs (its outputs are free).
fn arity_many(cx: &NodeCx, n: usize) -> Result<(), ImportError> {
    let k = cx.proto.input.len();
    if k == n {
        Ok(())
    } else {
        Err(cx.arity_err(format!("takes {n} input, has {k}")))
    }
}
