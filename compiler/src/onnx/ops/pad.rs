//! `Pad`, in modes `constant`, `reflect`, `edge` and `wrap`: the pads are an
//! attribute before opset 11 and a constant input from 11 on (with the
//! constant value an input too, and `axes` from 18). Each padded axis is one
//! `Gather` at constant indices (the canonicalisation turns those into
//! slices joined along the axis; a crop alone is a `Slice`); negative pads
//! crop first. In `constant` mode the indices repeat the edge and a `Where`
//! on a constant mask puts the value in the padding, so that no constant
//! block has to be joined.

use super::{
    Lowered, add, arity, axis_of, constant_ints, constant_of, constant_tensor, gather_at, input,
    optional_input, scalar,
};
use crate::ir::{ElemType, Op, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

/// What fills the padding.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

impl Mode {
    fn parse(cx: &NodeCx) -> Result<Mode, ImportError> {
        Ok(match cx.string("mode", "constant")?.as_str() {
            "constant" => Mode::Constant,
            "reflect" => Mode::Reflect,
            "edge" => Mode::Edge,
            "wrap" => Mode::Wrap,
            other => {
                return Err(cx.attr_err(
                    "mode",
                    format!("\"{other}\" is not one of constant, reflect, edge, wrap"),
                ));
            }
        })
    }

    /// The index of `0..d` that position `j` (relative to the original
    /// start, maybe outside `0..d`) takes its value from.
    fn source(self, j: i64, d: i64) -> i64 {
        match self {
            Mode::Constant | Mode::Edge => j.clamp(0, d - 1),
            Mode::Wrap => j.rem_euclid(d),
            Mode::Reflect if d == 1 => 0,
            Mode::Reflect => {
                let period = 2 * (d - 1);
                let r = j.rem_euclid(period);
                if r < d { r } else { period - r }
            }
        }
    }
}

/// The pads per dimension (`(begin, end)`, zero for dimensions not named),
/// the constant value and the mode.
struct Spec {
    pads: Vec<(i64, i64)>,
    value: f64,
    mode: Mode,
}

/// `Pad` (see the module doc).
pub(super) fn pad(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let x = input(imp, cx, 0)?;
    let spec = if imp.opset >= 11 {
        spec_from_inputs(imp, cx, x)?
    } else {
        spec_from_attributes(imp, cx, x)?
    };
    let shape = imp.g.ty(x).shape.clone();
    let mut y = x;
    let mut masked: Vec<(usize, Vec<bool>)> = Vec::new();
    for (a, &(b, e)) in spec.pads.iter().enumerate() {
        if (b, e) == (0, 0) {
            continue;
        }
        // What is left after the crops, and where it starts.
        let (first, kept) = ((-b).max(0), shape[a] as i64 + b.min(0) + e.min(0));
        if kept < 0 {
            return Err(cx.shape_err(format!(
                "pads ({b}, {e}) crop more than the {} elements of dimension {a}",
                shape[a]
            )));
        }
        let (b, n) = (b.max(0), kept + b.max(0) + e.max(0));
        if kept == 0 && n > 0 {
            return Err(cx.shape_err(format!("dimension {a} is empty: nothing to pad it with")));
        }
        let indices: Vec<i64> = (0..n)
            .map(|i| first + spec.mode.source(i - b, kept))
            .collect();
        y = gather_at(imp, cx, &format!("axis{a}"), y, a, &indices)?;
        let inside: Vec<bool> = (0..n).map(|i| (0..kept).contains(&(i - b))).collect();
        if spec.mode == Mode::Constant && inside.contains(&false) {
            masked.push((a, inside));
        }
    }
    if !masked.is_empty() {
        y = fill(imp, cx, y, &masked, spec.value)?;
    } else if y == x {
        y = add(imp, cx, "", Op::Identity, vec![x])?;
    }
    Ok(Lowered::Value(y))
}

/// `Where(inside, y, value)`, the mask true inside the original extent of
/// every padded axis.
fn fill(
    imp: &mut Importer,
    cx: &NodeCx,
    y: ValueId,
    masked: &[(usize, Vec<bool>)],
    value: f64,
) -> Result<ValueId, ImportError> {
    let ty = imp.g.ty(y).clone();
    let mut shape = vec![1; ty.shape.len()];
    for (a, inside) in masked {
        shape[*a] = inside.len();
    }
    let n: usize = shape.iter().product();
    let strides: Vec<usize> = (0..shape.len())
        .map(|d| shape[d + 1..].iter().product())
        .collect();
    let data = (0..n)
        .map(|k| {
            let on = masked
                .iter()
                .all(|(a, inside)| inside[(k / strides[*a]) % shape[*a]]);
            f64::from(u8::from(on))
        })
        .collect();
    let mask = constant_tensor(imp, cx, "inside", ElemType::Bool, shape, data);
    let c = scalar(imp, format!("{}/value", cx.name), ty.elem, value);
    add(imp, cx, "", Op::Where, vec![mask, y, c])
}

/// Opset 11 on: `pads` (and `axes`, opset 18) constant inputs, the value an
/// optional constant input.
fn spec_from_inputs(imp: &Importer, cx: &NodeCx, x: ValueId) -> Result<Spec, ImportError> {
    arity(cx, 2, 4)?;
    cx.check_attributes(&["mode"])?;
    let rank = imp.g.ty(x).shape.len();
    let p = input(imp, cx, 1)?;
    let raw = constant_ints(imp, cx, p)?;
    let axes = match optional_input(imp, cx, 3)? {
        Some(a) => Some(constant_ints(imp, cx, a)?),
        None => None,
    };
    let value = match optional_input(imp, cx, 2)? {
        None => 0.0,
        Some(v) => {
            let t = constant_of(imp, cx, v)?;
            if t.data.len() != 1 || t.ty.elem != imp.g.ty(x).elem {
                let (ty, xt) = (&t.ty, imp.g.ty(x));
                return Err(cx.shape_err(format!(
                    "the constant value must be one element of the input's type ({xt}), it is {ty}"
                )));
            }
            t.data[0]
        }
    };
    let pads = per_axis(cx, &raw, axes.as_deref(), rank)?;
    Ok(Spec {
        pads,
        value,
        mode: Mode::parse(cx)?,
    })
}

/// Before opset 11: the attributes `pads`, `value` and `mode`.
fn spec_from_attributes(imp: &Importer, cx: &NodeCx, x: ValueId) -> Result<Spec, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["mode", "pads", "value"])?;
    let rank = imp.g.ty(x).shape.len();
    let raw = cx
        .ints("pads")?
        .ok_or_else(|| cx.attr_err("pads", "required, missing"))?;
    Ok(Spec {
        pads: per_axis(cx, raw, None, rank)?,
        value: f64::from(cx.float("value", 0.0)?),
        mode: Mode::parse(cx)?,
    })
}

/// `[begin..., end...]` over `axes` (all dimensions by default) as
/// `(begin, end)` per dimension.
fn per_axis(
    cx: &NodeCx,
    raw: &[i64],
    axes: Option<&[i64]>,
    rank: usize,
) -> Result<Vec<(i64, i64)>, ImportError> {
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|a| axis_of(cx, "axes", *a, rank))
            .collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    let k = axes.len();
    if raw.len() != 2 * k {
        return Err(cx.shape_err(format!(
            "pads {raw:?} must have 2 values per padded axis ({k} axes)"
        )));
    }
    let mut pads = vec![(0, 0); rank];
    let mut seen = vec![false; rank];
    for (i, &a) in axes.iter().enumerate() {
        if std::mem::replace(&mut seen[a], true) {
            return Err(cx.attr_err("axes", format!("{axes:?} repeats an axis")));
        }
        pads[a] = (raw[i], raw[k + i]);
    }
    Ok(pads)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{import, run};
    use super::Mode;
    use crate::onnx::proto::{AttributeProto, NodeProto, TensorProto};

    #[test]
    fn sources_follow_numpy_pad() {
        let src = |m: Mode, d| (-4..d + 4).map(|j| m.source(j, d)).collect::<Vec<_>>();
        // numpy.pad(range(3), 4, mode=...)
        assert_eq!(src(Mode::Reflect, 3), [0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2]);
        assert_eq!(src(Mode::Edge, 3), [0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2]);
        assert_eq!(src(Mode::Wrap, 3), [2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(src(Mode::Reflect, 1), [0; 9]);
    }

    #[test]
    fn attribute_form_crops_first_then_pads() {
        // Opset 2: pads and value are attributes. Rows 0..3 of [[0, 1, 2], [3, 4, 5]]
        // reflected one row up; columns: the first cropped, then two reflected at the end.
        let node = NodeProto::new("Pad", "p", &["x"], &["y"])
            .with(AttributeProto::string("mode", "reflect"))
            .with(AttributeProto::ints("pads", &[1, -1, 0, 2]));
        let x = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        let (shape, y) = run(node, 7, (&[2, 3], &x), vec![]);
        assert_eq!(shape, [3, 4]);
        assert_eq!(
            y,
            [4.0, 5.0, 4.0, 5.0, 1.0, 2.0, 1.0, 2.0, 4.0, 5.0, 4.0, 5.0]
        );
    }

    #[test]
    fn constant_mode_fills_with_the_value() {
        let node = NodeProto::new("Pad", "p", &["x", "pads", "v", "axes"], &["y"]);
        let inits = vec![
            TensorProto::from_i64("pads", &[2], &[1, 2]),
            TensorProto::from_f32("v", &[], &[-7.5]),
            TensorProto::from_i64("axes", &[1], &[-1]),
        ];
        let (shape, y) = run(node, 18, (&[1, 2], &[1.0, 2.0]), inits);
        assert_eq!(shape, [1, 5]);
        assert_eq!(y, [-7.5, 1.0, 2.0, -7.5, -7.5]);
    }

    #[test]
    fn refusals_name_the_reason() {
        let node = NodeProto::new("Pad", "p", &["x"], &["y"])
            .with(AttributeProto::string("mode", "mirror"))
            .with(AttributeProto::ints("pads", &[0, 0]));
        let err = import(node, 7, &[3], vec![]).expect_err("refused");
        assert!(err.contains("\"mirror\""), "{err}");
        let node = NodeProto::new("Pad", "p", &["x"], &["y"])
            .with(AttributeProto::ints("pads", &[-2, -2]));
        let err = import(node, 7, &[3], vec![]).expect_err("refused");
        assert!(err.contains("crop more than"), "{err}");
    }
}
