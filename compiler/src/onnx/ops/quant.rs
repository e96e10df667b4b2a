//! Quantisation: `QuantizeLinear`, `DequantizeLinear`,
//! `DynamicQuantizeLinear`, `MatMulInteger`, `ConvInteger` and
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

/// A scale or zero point as `elem` values broadcast along `axis` of a
/// `rank`-D tensor (a scalar stays a scalar; a 1-D one becomes
/// `[C, 1, ..., 1]`). A constant is converted when compiling; one computed
/// at run time (`DynamicQuantizeLinear`'s) is cast (a view: integers are
/// held in f32) and reshaped.
fn per_axis(
    imp: &mut Importer,
    cx: &NodeCx,
    v: ValueId,
    axis: usize,
    rank: usize,
    elem: ElemType,
    what: &str,
) -> Result<ValueId, ImportError> {
    let given = imp.g.ty(v).shape.clone();
    let shape = match given.as_slice() {
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
    let Some(t) = imp.g.constants.get(&v).cloned() else {
        let mut x = v;
        if imp.g.ty(x).elem != elem {
            x = add(
                imp,
                cx,
                &format!("{what}_{}", elem.name()),
                Op::Cast { to: elem },
                vec![x],
            )?;
        }
        if given != shape {
            x = add(
                imp,
                cx,
                &format!("{what}_shaped"),
                Op::Reshape { shape },
                vec![x],
            )?;
        }
        return Ok(x);
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
            // Per row of A: [M, 1]; per column of B: [N]; else a scalar.
            let rank = ty.shape.len();
            let axis = if is_a {
                rank.saturating_sub(2)
            } else {
                rank.saturating_sub(1)
            };
            let what = format!("{name}_zero_point");
            let zc = per_axis(imp, cx, z, axis, rank, ElemType::I32, &what)?;
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

/// `DynamicQuantizeLinear`: uint8 quantisation with a scale and zero point
/// computed from the data at run time, as ONNX defines them: the range
/// `[min(min(x), 0), max(max(x), 0)]` over 255 steps, the zero point
/// `saturate(round(-min / scale))`, and `y = saturate(round(x / scale) +
/// zero_point)`.
pub(super) fn dynamic_quantize(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let (ins, outs) = (cx.proto.input.len(), cx.proto.output.len());
    if ins != 1 {
        return Err(cx.arity_err(format!("takes 1 input, has {ins}")));
    }
    if outs != 3 {
        return Err(cx.arity_err(format!("has {outs} outputs, the op has 3")));
    }
    cx.check_attributes(&[])?;
    let x = input(imp, cx, 0)?;
    let ty = imp.g.ty(x).clone();
    if ty.elem != ElemType::F32 {
        return Err(cx.shape_err(format!("the input must be float, it is {ty}")));
    }
    let f = ElemType::F32;
    let c =
        |imp: &mut Importer, what: &str, v: f64| scalar(imp, format!("{}/{what}", cx.name), f, v);
    let all = |kind| Op::Reduce {
        kind,
        axes: (0..ty.shape.len()).collect(),
        keepdims: false,
    };
    let zero = c(imp, "zero", 0.0);
    let hi = add(imp, cx, "max", all(crate::ir::ReduceKind::Max), vec![x])?;
    let hi = add(imp, cx, "high", Op::Max, vec![hi, zero])?;
    let lo = add(imp, cx, "min", all(crate::ir::ReduceKind::Min), vec![x])?;
    let lo = add(imp, cx, "low", Op::Min, vec![lo, zero])?;
    let range = add(imp, cx, "range", Op::Sub, vec![hi, lo])?;
    let steps = c(imp, "steps", 255.0);
    let scale = add(imp, cx, "scale", Op::Div, vec![range, steps])?;
    let (q_lo, q_hi) = (c(imp, "q_low", 0.0), c(imp, "q_high", 255.0));
    let saturate = |imp: &mut Importer, what: &str, v: ValueId| {
        let v = add(imp, cx, &format!("{what}_at_least"), Op::Max, vec![v, q_lo])?;
        add(imp, cx, &format!("{what}_at_most"), Op::Min, vec![v, q_hi])
    };
    let below = add(imp, cx, "below_zero", Op::Sub, vec![zero, lo])?;
    let zp = add(imp, cx, "zero_point_exact", Op::Div, vec![below, scale])?;
    let zp = add(
        imp,
        cx,
        "zero_point_rounded",
        Op::Unary(Unary::Round),
        vec![zp],
    )?;
    let zp = saturate(imp, "zero_point", zp)?;
    let y = add(imp, cx, "scaled", Op::Div, vec![x, scale])?;
    let y = add(imp, cx, "rounded", Op::Unary(Unary::Round), vec![y])?;
    let y = add(imp, cx, "shifted", Op::Add, vec![y, zp])?;
    let y = saturate(imp, "y", y)?;
    let u8 = Op::Cast { to: ElemType::U8 };
    let y = add(imp, cx, "", u8.clone(), vec![y])?;
    let zp = add(imp, cx, "zero_point", u8, vec![zp])?;
    Ok(Lowered::Many(vec![Some(y), Some(scale), Some(zp)]))
}

/// `ConvInteger`: the convolution of `x - x_zero_point` (one for the
/// tensor) by `w - w_zero_point` (one, or one per output channel) in
/// int32, either zero point constant or computed at run time; the padding
/// is at the zero point, as ONNX's reference centres before padding.
pub(super) fn conv_integer(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 4)?;
    cx.check_attributes(super::conv::CONV_ATTRIBUTES)?;
    let mut centred = Vec::with_capacity(2);
    for (i, name) in [(0, "x"), (1, "w")] {
        let v = input(imp, cx, i)?;
        let ty = imp.g.ty(v).clone();
        if !matches!(ty.elem, ElemType::I8 | ElemType::U8) {
            return Err(cx.shape_err(format!(
                "the operands must be int8 or uint8, {name} is {ty}"
            )));
        }
        let wide = Op::Cast { to: ElemType::I32 };
        let mut c = add(imp, cx, &format!("{name}_wide"), wide, vec![v])?;
        if let Some(z) = optional_input(imp, cx, i + 2)? {
            if i == 0 && imp.g.ty(z).numel() != 1 {
                return Err(cx.shape_err("x_zero_point must be one value for the tensor"));
            }
            // The weights' zero point is per output channel, axis 0.
            let rank = ty.shape.len();
            let what = format!("{name}_zero_point");
            let zc = per_axis(imp, cx, z, 0, rank, ElemType::I32, &what)?;
            c = add(imp, cx, &format!("{name}_centered"), Op::Sub, vec![c, zc])?;
        }
        centred.push(c);
    }
    super::conv::conv_of(imp, cx, centred[0], centred[1], None)
}
