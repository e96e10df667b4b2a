//! Quantisation: `QuantizeLinear`, `DequantizeLinear`, `MatMulInteger` and
//! `QLinearMatMul`, as exact integer and float arithmetic.

use super::{Lowered, add, arity, axis_of, input, optional_input, scalar};
use crate::ir::{ElemType, Op, Tensor, TensorType, Unary, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

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

/// The axis of a per-axis scale: the `axis` attribute (default 1), checked
/// against the rank only when the scale has more than one element (ONNX
/// ignores it for a per-tensor scale, and exporters leave it at 1 on 1-D
/// tensors).
fn quant_axis(
    imp: &Importer,
    cx: &NodeCx,
    scale: ValueId,
    rank: usize,
) -> Result<usize, ImportError> {
    if imp.g.ty(scale).numel() <= 1 {
        return Ok(0);
    }
    axis_of(cx, "axis", cx.int("axis", 1)?, rank.max(1))
}

/// `QuantizeLinear`: `saturate(round(x / scale) + zero_point)` in the zero
/// point's type (uint8 without one), per tensor or along `axis`.
pub(super) fn quantize(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
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
    let axis = quant_axis(imp, cx, s, rank)?;
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
pub(super) fn dequantize(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
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
    let axis = quant_axis(imp, cx, s, rank)?;
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
pub(super) fn matmul_integer(imp: &mut Importer, cx: &NodeCx) -> Result<ValueId, ImportError> {
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
pub(super) fn qlinear_matmul(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
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
