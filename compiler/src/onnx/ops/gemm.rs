//! `Gemm`, canonicalised as `Transpose`, `MatMul`, `Mul` by a constant and
//! `Add`.

use super::{Lowered, add, arity, input, optional_input, scalar};
use crate::ir::{Op, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

/// `alpha * A' * B' + beta * C` as `Transpose`, `MatMul`, `Mul` by a constant, `Add`.
pub(super) fn gemm(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
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
