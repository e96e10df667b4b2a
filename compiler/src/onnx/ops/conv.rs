//! Convolution and pooling: `Conv`, `MaxPool` / `AveragePool` and their
//! window attributes (2-D, and 1-D as 2-D over a height of 1),
//! `GlobalAveragePool` / `GlobalMaxPool`.

use super::{Lowered, add, arity, input, optional_input};
use crate::ir::{Op, PoolKind, ReduceKind, ValueId, Window};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

/// The window of a `Conv` / `MaxPool` / `AveragePool` over `x` (`[N, C, H,
/// W]`, or `[N, C, 1, L]` for a 1-D one lifted to 2-D), from its attributes
/// (`auto_pad` resolved). `nd` is the node's spatial rank: a 1-D node's
/// attributes have one value per axis (two pads), which become the width's.
fn window(cx: &NodeCx, x: &[usize], kernel: [usize; 2], nd: usize) -> Result<Window, ImportError> {
    let two = |name: &str, default: usize| -> Result<[usize; 2], ImportError> {
        match (cx.ints(name)?, nd) {
            (None, _) => Ok([default; 2]),
            (Some([a, b]), 2) if *a > 0 && *b > 0 => Ok([*a as usize, *b as usize]),
            (Some([a]), 1) if *a > 0 => Ok([1, *a as usize]),
            (Some(v), _) => Err(cx.attr_err(
                name,
                format!("{v:?}: {nd} positive value(s) expected (1-D and 2-D only)"),
            )),
        }
    };
    let strides = two("strides", 1)?;
    let dilations = two("dilations", 1)?;
    let ceil = cx.int("ceil_mode", 0)? != 0;
    let auto_pad = cx.string("auto_pad", "NOTSET")?;
    let pads = match auto_pad.as_str() {
        "NOTSET" => match cx.ints("pads")? {
            None => [0; 4],
            Some(p) if p.len() == 2 * nd && p.iter().all(|v| *v >= 0) => {
                let p: Vec<usize> = p.iter().map(|v| *v as usize).collect();
                if nd == 1 {
                    [0, p[0], 0, p[1]]
                } else {
                    [p[0], p[1], p[2], p[3]]
                }
            }
            Some(p) => {
                return Err(cx.attr_err(
                    "pads",
                    format!("{p:?}: {} non-negative values expected", 2 * nd),
                ));
            }
        },
        "VALID" => [0; 4],
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut p = [0; 4];
            for i in 0..2 {
                let out = x[2 + i].div_ceil(strides[i]);
                let span = (kernel[i] - 1) * dilations[i] + 1;
                let total = ((out - 1) * strides[i] + span).saturating_sub(x[2 + i]);
                let (lo, hi) = if auto_pad == "SAME_UPPER" {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                };
                (p[i], p[i + 2]) = (lo, hi);
            }
            p
        }
        other => return Err(cx.attr_err("auto_pad", format!("unknown value \"{other}\""))),
    };
    Ok(Window {
        kernel,
        strides,
        pads,
        dilations,
        ceil,
    })
}

/// The shape of a 3-D or 4-D floating-point input, and its spatial rank.
fn spatial(
    imp: &Importer,
    cx: &NodeCx,
    v: ValueId,
    what: &str,
) -> Result<(Vec<usize>, usize), ImportError> {
    let ty = imp.g.ty(v);
    if !(3..=4).contains(&ty.shape.len()) || !ty.elem.is_float() {
        return Err(cx.shape_err(format!(
            "{what} must be a 3-D or 4-D floating-point tensor (1-D and 2-D only), it is {ty}"
        )));
    }
    Ok((ty.shape.clone(), ty.shape.len() - 2))
}

/// A 1-D operand `[A, B, L]` as the 2-D `[A, B, 1, L]` (a 2-D one as it is).
fn lift(
    imp: &mut Importer,
    cx: &NodeCx,
    v: ValueId,
    step: &str,
) -> Result<(ValueId, Vec<usize>), ImportError> {
    let shape = imp.g.ty(v).shape.clone();
    if shape.len() == 4 {
        return Ok((v, shape));
    }
    let lifted = vec![shape[0], shape[1], 1, shape[2]];
    let v = add(
        imp,
        cx,
        step,
        Op::Reshape {
            shape: lifted.clone(),
        },
        vec![v],
    )?;
    Ok((v, lifted))
}

/// A lifted 1-D result `[A, B, 1, L]` back to `[A, B, L]`.
fn lower_back(
    imp: &mut Importer,
    cx: &NodeCx,
    y: ValueId,
    nd: usize,
) -> Result<Lowered, ImportError> {
    if nd == 2 {
        return Ok(Lowered::Value(y));
    }
    let s = imp.g.ty(y).shape.clone();
    add(
        imp,
        cx,
        "",
        Op::Reshape {
            shape: vec![s[0], s[1], s[3]],
        },
        vec![y],
    )
    .map(Lowered::Value)
}

/// `Conv` (1-D, lifted to 2-D, and 2-D): strides, padding (or `auto_pad`),
/// dilations, groups.
pub(super) fn conv(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 3)?;
    cx.check_attributes(&[
        "auto_pad",
        "dilations",
        "group",
        "kernel_shape",
        "pads",
        "strides",
    ])?;
    let (x, w) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let (_, nd) = spatial(imp, cx, x, "the input")?;
    let (_, wd) = spatial(imp, cx, w, "the weight")?;
    if wd != nd {
        return Err(cx.shape_err(format!("the input is {nd}-D, the weight {wd}-D")));
    }
    let ws = imp.g.ty(w).shape.clone();
    if let Some(k) = cx.ints("kernel_shape")?
        && k.iter().map(|d| *d as usize).ne(ws[2..].iter().copied())
    {
        return Err(cx.attr_err(
            "kernel_shape",
            format!("{k:?} is not the weights' {:?}", &ws[2..]),
        ));
    }
    let groups = usize::try_from(cx.int("group", 1)?)
        .ok()
        .filter(|g| *g > 0)
        .ok_or_else(|| cx.attr_err("group", "must be positive"))?;
    let (x, xs) = lift(imp, cx, x, "x_2d")?;
    let (w, ws) = lift(imp, cx, w, "w_2d")?;
    let window = window(cx, &xs, [ws[2], ws[3]], nd)?;
    let mut ins = vec![x, w];
    if let Some(b) = optional_input(imp, cx, 2)? {
        ins.push(b);
    }
    let step = if nd == 1 { "conv_2d" } else { "" };
    let y = add(imp, cx, step, Op::Conv { window, groups }, ins)?;
    lower_back(imp, cx, y, nd)
}

/// `MaxPool` / `AveragePool` (1-D and 2-D). MaxPool's optional `Indices` output is not supported.
pub(super) fn pool(imp: &mut Importer, cx: &NodeCx, max: bool) -> Result<Lowered, ImportError> {
    if cx.proto.input.len() != 1 {
        return Err(cx.arity_err("takes 1 input"));
    }
    if cx.proto.output.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(cx.arity_err("the Indices output is not supported"));
    }
    let mut known = vec![
        "auto_pad",
        "ceil_mode",
        "dilations",
        "kernel_shape",
        "pads",
        "strides",
    ];
    known.push(if max {
        "storage_order"
    } else {
        "count_include_pad"
    });
    cx.check_attributes(&known)?;
    let x = input(imp, cx, 0)?;
    let (_, nd) = spatial(imp, cx, x, "the input")?;
    let k = cx
        .ints("kernel_shape")?
        .ok_or_else(|| cx.attr_err("kernel_shape", "required, missing"))?;
    let kernel = match (k, nd) {
        ([a, b], 2) if *a > 0 && *b > 0 => [*a as usize, *b as usize],
        ([a], 1) if *a > 0 => [1, *a as usize],
        _ => {
            return Err(cx.attr_err(
                "kernel_shape",
                format!("{k:?}: {nd} positive value(s) expected (1-D and 2-D only)"),
            ));
        }
    };
    let (x, xs) = lift(imp, cx, x, "x_2d")?;
    let window = window(cx, &xs, kernel, nd)?;
    let kind = if max {
        PoolKind::Max
    } else {
        PoolKind::Average {
            count_include_pad: cx.int("count_include_pad", 0)? != 0,
        }
    };
    let step = if nd == 1 { "pool_2d" } else { "" };
    let y = add(imp, cx, step, Op::Pool { kind, window }, vec![x])?;
    lower_back(imp, cx, y, nd)
}

/// `GlobalAveragePool` / `GlobalMaxPool`: a reduction over the spatial dimensions.
pub(super) fn global_pool(
    imp: &mut Importer,
    cx: &NodeCx,
    kind: ReduceKind,
) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&[])?;
    let x = input(imp, cx, 0)?;
    let rank = imp.g.ty(x).shape.len();
    if rank < 3 || !imp.g.ty(x).elem.is_float() {
        let ty = imp.g.ty(x);
        return Err(cx.shape_err(format!(
            "the input must be a floating-point [N, C, ...] tensor, it is {ty}"
        )));
    }
    let op = Op::Reduce {
        kind,
        axes: (2..rank).collect(),
        keepdims: true,
    };
    add(imp, cx, "", op, vec![x]).map(Lowered::Value)
}
