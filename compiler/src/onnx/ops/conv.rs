//! Convolution and pooling (2-D): `Conv`, `MaxPool` / `AveragePool` and
//! their window attributes, `GlobalAveragePool` / `GlobalMaxPool`.

use super::{Lowered, add, arity, input, optional_input};
use crate::ir::{Op, PoolKind, ReduceKind, ValueId, Window};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

/// The window of a 2-D `Conv` / `MaxPool` / `AveragePool` over `x`, from its
/// attributes (`auto_pad` resolved).
fn window(cx: &NodeCx, x: &[usize], kernel: [usize; 2]) -> Result<Window, ImportError> {
    let two = |name: &str, default: usize| -> Result<[usize; 2], ImportError> {
        match cx.ints(name)? {
            None => Ok([default; 2]),
            Some([a, b]) if *a > 0 && *b > 0 => Ok([*a as usize, *b as usize]),
            Some(v) => Err(cx.attr_err(
                name,
                format!("{v:?}: two positive values expected (2-D only)"),
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
            Some(p) if p.len() == 4 && p.iter().all(|v| *v >= 0) => {
                [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize]
            }
            Some(p) => {
                return Err(
                    cx.attr_err("pads", format!("{p:?}: four non-negative values expected"))
                );
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

fn four_d(imp: &Importer, cx: &NodeCx, v: ValueId, what: &str) -> Result<Vec<usize>, ImportError> {
    let ty = imp.g.ty(v);
    if ty.shape.len() != 4 || !ty.elem.is_float() {
        return Err(cx.shape_err(format!(
            "{what} must be a 4-D floating-point tensor (2-D only), it is {ty}"
        )));
    }
    Ok(ty.shape.clone())
}

/// `Conv` (2-D): strides, padding (or `auto_pad`), dilations, groups.
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
    let xs = four_d(imp, cx, x, "the input")?;
    let ws = four_d(imp, cx, w, "the weight")?;
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
    let window = window(cx, &xs, [ws[2], ws[3]])?;
    let mut ins = vec![x, w];
    if let Some(b) = optional_input(imp, cx, 2)? {
        ins.push(b);
    }
    add(imp, cx, "", Op::Conv { window, groups }, ins).map(Lowered::Value)
}

/// `MaxPool` / `AveragePool` (2-D). MaxPool's optional `Indices` output is not supported.
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
    let xs = four_d(imp, cx, x, "the input")?;
    let k = cx
        .ints("kernel_shape")?
        .ok_or_else(|| cx.attr_err("kernel_shape", "required, missing"))?;
    let [a, b] = k else {
        return Err(cx.attr_err("kernel_shape", format!("{k:?}: 2-D only")));
    };
    if *a <= 0 || *b <= 0 {
        return Err(cx.attr_err("kernel_shape", format!("{k:?} must be positive")));
    }
    let window = window(cx, &xs, [*a as usize, *b as usize])?;
    let kind = if max {
        PoolKind::Max
    } else {
        PoolKind::Average {
            count_include_pad: cx.int("count_include_pad", 0)? != 0,
        }
    };
    add(imp, cx, "", Op::Pool { kind, window }, vec![x]).map(Lowered::Value)
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
