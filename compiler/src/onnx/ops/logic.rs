//! Comparisons and logic of data known only at run time. Truth values are
//! 1 and 0 of a floating-point type (the compared operands', integers cast
//! to `f32` first, exact below 2^24): `Less` and `LessOrEqual` compare
//! ([`Op::Less`]), `Greater` swaps the operands, `Equal` is `a <= b` times
//! `b <= a`; `And` is a product, `Or` a maximum, `Xor` the magnitude of a
//! difference, `Not` one minus the value, and a `Cast` to bool `0 < |x|`. Inputs all known when
//! compiling are evaluated then instead (`static_eval`), as booleans.

use super::static_eval::{self, Compare, Logic};
use super::{Lowered, add, arity, input, scalar};
use crate::ir::{ElemType, Op, Unary, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

/// Whether every input of the node is a constant.
fn all_known(imp: &Importer, cx: &NodeCx) -> Result<bool, ImportError> {
    for i in 0..cx.proto.input.len() {
        let v = input(imp, cx, i)?;
        if !imp.g.constants.contains_key(&v) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Input `i` as a floating-point value (integers and booleans cast to `f32`).
fn real(imp: &mut Importer, cx: &NodeCx, i: usize) -> Result<ValueId, ImportError> {
    let v = input(imp, cx, i)?;
    if imp.g.ty(v).elem.is_float() {
        return Ok(v);
    }
    let cast = Op::Cast { to: ElemType::F32 };
    add(imp, cx, &format!("real{i}"), cast, vec![v])
}

/// The two operands, one floating-point type.
fn operands(imp: &mut Importer, cx: &NodeCx) -> Result<(ValueId, ValueId), ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&[])?;
    let (a, b) = (real(imp, cx, 0)?, real(imp, cx, 1)?);
    let (ea, eb) = (imp.g.ty(a).elem, imp.g.ty(b).elem);
    if ea == eb {
        return Ok((a, b));
    }
    let to = Op::Cast { to: ElemType::F32 };
    let a = add(imp, cx, "real_a", to.clone(), vec![a])?;
    let b = add(imp, cx, "real_b", to, vec![b])?;
    Ok((a, b))
}

/// `Equal`, `Less`, `LessOrEqual`, `Greater`, `GreaterOrEqual`.
pub(super) fn compare(imp: &mut Importer, cx: &NodeCx, c: Compare) -> Result<Lowered, ImportError> {
    if all_known(imp, cx)? {
        return static_eval::compare(imp, cx, c);
    }
    let (a, b) = operands(imp, cx)?;
    let v = match c {
        Compare::Less => add(imp, cx, "", Op::Less, vec![a, b])?,
        Compare::LessOrEqual => add(imp, cx, "", Op::LessOrEqual, vec![a, b])?,
        Compare::Greater => add(imp, cx, "", Op::Less, vec![b, a])?,
        Compare::GreaterOrEqual => add(imp, cx, "", Op::LessOrEqual, vec![b, a])?,
        Compare::Equal => {
            let le = add(imp, cx, "at_most", Op::LessOrEqual, vec![a, b])?;
            let ge = add(imp, cx, "at_least", Op::LessOrEqual, vec![b, a])?;
            add(imp, cx, "", Op::Mul, vec![le, ge])?
        }
    };
    Ok(Lowered::Value(v))
}

/// `And`, `Or`, `Xor`.
pub(super) fn logic(imp: &mut Importer, cx: &NodeCx, l: Logic) -> Result<Lowered, ImportError> {
    if all_known(imp, cx)? {
        return static_eval::logic(imp, cx, l);
    }
    let (a, b) = operands(imp, cx)?;
    let v = match l {
        Logic::And => add(imp, cx, "", Op::Mul, vec![a, b])?,
        Logic::Or => add(imp, cx, "", Op::Max, vec![a, b])?,
        Logic::Xor => {
            let d = add(imp, cx, "difference", Op::Sub, vec![a, b])?;
            add(imp, cx, "", Op::Unary(Unary::Abs), vec![d])?
        }
    };
    Ok(Lowered::Value(v))
}

/// `x != 0` of a value known only at run time, as a truth value (a `Cast`
/// to bool): `0 < |x|`.
pub(super) fn truth(imp: &mut Importer, cx: &NodeCx, x: ValueId) -> Result<ValueId, ImportError> {
    let x = if imp.g.ty(x).elem.is_float() {
        x
    } else {
        add(imp, cx, "real", Op::Cast { to: ElemType::F32 }, vec![x])?
    };
    let elem = imp.g.ty(x).elem;
    let zero = scalar(imp, format!("{}/zero", cx.name), elem, 0.0);
    let size = add(imp, cx, "magnitude", Op::Unary(Unary::Abs), vec![x])?;
    add(imp, cx, "", Op::Less, vec![zero, size])
}

/// `Not`.
pub(super) fn not(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    if all_known(imp, cx)? {
        return static_eval::not(imp, cx);
    }
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = real(imp, cx, 0)?;
    let elem = imp.g.ty(x).elem;
    let one = scalar(imp, format!("{}/one", cx.name), elem, 1.0);
    Ok(Lowered::Value(add(imp, cx, "", Op::Sub, vec![one, x])?))
}
