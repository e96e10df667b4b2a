//! `Resize` (opsets 10, 11, 13, 18 and 19) in modes `nearest` and `linear`,
//! one resized axis at a time, as ONNX's reference does. The output
//! coordinates are mapped back to the input's at import (every
//! `coordinate_transformation_mode` but `tf_crop_and_resize`); then, along
//! each axis, nearest is a `Gather` at constant indices, and linear two
//! `Gather`s (the neighbours at and above each coordinate, clamped into the
//! input) weighted by constants broadcast along the axis and summed. The
//! scales or sizes must be constants; `cubic`, `tf_crop_and_resize`,
//! antialiasing when a linear resize shrinks an axis, and
//! `exclude_outside` in nearest mode are refused.

use super::{
    Lowered, add, arity, axis_of, constant_of, constant_tensor, gather_at, input, optional_input,
};
use crate::ir::{Op, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

/// How an output coordinate maps to the input's (`coordinate_transformation_mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
}

/// How nearest mode rounds a coordinate (`nearest_mode`; `Simple` is opset
/// 10's, which has none: down when enlarging, up when shrinking, as
/// onnxruntime does).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rounding {
    PreferFloor,
    PreferCeil,
    Floor,
    Ceil,
    Simple,
}

/// Nearest or linear.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Nearest(Rounding),
    Linear,
}

/// One axis: its input and output lengths and the scale the coordinates use.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Axis {
    input: usize,
    output: usize,
    scale: f64,
}

impl Axis {
    /// Whether the axis is left as it is (ONNX's reference skips it).
    fn identity(&self) -> bool {
        self.output == self.input && (self.scale - 1.0).abs() <= 1e-9
    }

    /// The input coordinate of output position `y`.
    fn source(&self, coord: Coord, y: usize) -> f64 {
        let (y, len, s) = (y as f64, self.input as f64, self.scale);
        // The output length the scale gives, fractional where the scale is.
        let width = s * len;
        match coord {
            Coord::HalfPixel => (y + 0.5) / s - 0.5,
            Coord::HalfPixelSymmetric => {
                let offset = len / 2.0 * (1.0 - self.output as f64 / width);
                offset + (y + 0.5) / s - 0.5
            }
            Coord::PytorchHalfPixel if self.output <= 1 => 0.0,
            Coord::PytorchHalfPixel => (y + 0.5) / s - 0.5,
            Coord::AlignCorners if width == 1.0 => 0.0,
            Coord::AlignCorners => y * (len - 1.0) / (width - 1.0),
            Coord::Asymmetric => y / s,
            Coord::TfHalfPixelForNn => (y + 0.5) / s,
        }
    }

    /// The input index nearest to each output position.
    fn nearest(&self, coord: Coord, rounding: Rounding) -> Vec<i64> {
        let last = self.input as i64 - 1;
        (0..self.output)
            .map(|y| {
                let x = self.source(coord, y);
                let (lo, frac) = (x.floor(), x - x.floor());
                let up = match rounding {
                    _ if frac == 0.0 => false,
                    Rounding::PreferFloor => frac > 0.5,
                    Rounding::PreferCeil => frac >= 0.5,
                    Rounding::Floor => false,
                    Rounding::Ceil => true,
                    Rounding::Simple => self.scale < 1.0,
                };
                (lo as i64 + i64::from(up)).clamp(0, last)
            })
            .collect()
    }

    /// For each output position, the neighbours below and above (clamped
    /// into the input) and the weight of the one above.
    fn linear(&self, coord: Coord) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
        let last = self.input as i64 - 1;
        let (mut lo, mut hi, mut w) = (Vec::new(), Vec::new(), Vec::new());
        for y in 0..self.output {
            let x = self.source(coord, y);
            let i = x.floor();
            lo.push((i as i64).clamp(0, last));
            hi.push((i as i64 + 1).clamp(0, last));
            w.push(x - i);
        }
        (lo, hi, w)
    }
}

/// `Resize` (see the module doc).
pub(super) fn resize(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let x = input(imp, cx, 0)?;
    let (mode, coord) = modes(imp, cx)?;
    let axes = axes(imp, cx, x)?;
    if mode == Mode::Linear && !imp.g.ty(x).elem.is_float() {
        let ty = imp.g.ty(x);
        return Err(cx.shape_err(format!(
            "linear resizing is defined on floating-point tensors, the input is {ty}"
        )));
    }
    if cx.int("antialias", 0)? != 0
        && mode == Mode::Linear
        && axes.iter().any(|a| a.output < a.input)
    {
        return Err(cx.attr_err(
            "antialias",
            "antialiasing a linear resize that shrinks an axis is not supported",
        ));
    }
    let mut y = x;
    for (a, axis) in axes.iter().enumerate() {
        if axis.identity() {
            continue;
        }
        y = match mode {
            Mode::Nearest(r) => {
                gather_at(imp, cx, &format!("axis{a}"), y, a, &axis.nearest(coord, r))?
            }
            Mode::Linear => linear(imp, cx, y, a, axis, coord)?,
        };
    }
    if y == x {
        y = add(imp, cx, "", Op::Identity, vec![x])?;
    }
    Ok(Lowered::Value(y))
}

/// Linear interpolation along axis `a`: `lo · (1 - w) + hi · w`.
fn linear(
    imp: &mut Importer,
    cx: &NodeCx,
    y: ValueId,
    a: usize,
    axis: &Axis,
    coord: Coord,
) -> Result<ValueId, ImportError> {
    let (lo, hi, w) = axis.linear(coord);
    let below = gather_at(imp, cx, &format!("axis{a}_below"), y, a, &lo)?;
    if w.iter().all(|w| *w == 0.0) {
        return Ok(below);
    }
    let above = gather_at(imp, cx, &format!("axis{a}_above"), y, a, &hi)?;
    let ty = imp.g.ty(y).clone();
    let mut shape = vec![w.len()];
    shape.extend(std::iter::repeat_n(1, ty.shape.len() - a - 1));
    let w_lo = w.iter().map(|w| 1.0 - w).collect();
    let k_lo = constant_tensor(
        imp,
        cx,
        &format!("axis{a}_w_below"),
        ty.elem,
        shape.clone(),
        w_lo,
    );
    let k_hi = constant_tensor(imp, cx, &format!("axis{a}_w_above"), ty.elem, shape, w);
    let p = add(
        imp,
        cx,
        &format!("axis{a}_part_below"),
        Op::Mul,
        vec![below, k_lo],
    )?;
    let q = add(
        imp,
        cx,
        &format!("axis{a}_part_above"),
        Op::Mul,
        vec![above, k_hi],
    )?;
    add(imp, cx, &format!("axis{a}"), Op::Add, vec![p, q])
}

/// The mode and coordinate mapping, from the attributes (checked for what is refused).
fn modes(imp: &Importer, cx: &NodeCx) -> Result<(Mode, Coord), ImportError> {
    if imp.opset < 11 {
        arity(cx, 2, 2)?;
        cx.check_attributes(&["mode"])?;
    } else {
        arity(cx, 1, 4)?;
        cx.check_attributes(&[
            "antialias",
            "axes",
            "coordinate_transformation_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "keep_aspect_ratio_policy",
            "mode",
            "nearest_mode",
        ])?;
    }
    let coord = match cx
        .string("coordinate_transformation_mode", "half_pixel")?
        .as_str()
    {
        _ if imp.opset < 11 => Coord::Asymmetric,
        "half_pixel" => Coord::HalfPixel,
        "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
        "pytorch_half_pixel" => Coord::PytorchHalfPixel,
        "align_corners" => Coord::AlignCorners,
        "asymmetric" => Coord::Asymmetric,
        "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
        other => {
            return Err(cx.attr_err(
                "coordinate_transformation_mode",
                format!("\"{other}\" is not supported (half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric and tf_half_pixel_for_nn are)"),
            ));
        }
    };
    let mode = match cx.string("mode", "nearest")?.as_str() {
        "nearest" if imp.opset < 11 => Mode::Nearest(Rounding::Simple),
        "nearest" => Mode::Nearest(rounding(cx)?),
        "linear" => Mode::Linear,
        other => {
            return Err(cx.attr_err(
                "mode",
                format!("\"{other}\" is not supported (nearest and linear are)"),
            ));
        }
    };
    if matches!(mode, Mode::Nearest(_)) && cx.int("exclude_outside", 0)? != 0 {
        return Err(cx.attr_err(
            "exclude_outside",
            "1 is not supported in nearest mode (an index outside the input would read 0)",
        ));
    }
    Ok((mode, coord))
}

fn rounding(cx: &NodeCx) -> Result<Rounding, ImportError> {
    Ok(
        match cx.string("nearest_mode", "round_prefer_floor")?.as_str() {
            "round_prefer_floor" => Rounding::PreferFloor,
            "round_prefer_ceil" => Rounding::PreferCeil,
            "floor" => Rounding::Floor,
            "ceil" => Rounding::Ceil,
            other => {
                return Err(cx.attr_err(
                "nearest_mode",
                format!("\"{other}\" is not one of round_prefer_floor, round_prefer_ceil, floor, ceil"),
            ));
            }
        },
    )
}

/// The input of `Resize` at `i`, if given and not empty.
fn given<'a>(
    imp: &'a Importer,
    cx: &NodeCx,
    i: usize,
) -> Result<Option<&'a crate::ir::Tensor>, ImportError> {
    match optional_input(imp, cx, i)? {
        Some(v) => constant_of(imp, cx, v).map(|t| Some(t).filter(|t| !t.data.is_empty())),
        None => Ok(None),
    }
}

/// Every dimension of `x` as an [`Axis`], from the constant scales or sizes.
fn axes(imp: &Importer, cx: &NodeCx, x: ValueId) -> Result<Vec<Axis>, ImportError> {
    let shape = imp.g.ty(x).shape.clone();
    let rank = shape.len();
    let named: Vec<usize> = match cx.ints("axes")? {
        Some(a) => a
            .iter()
            .map(|a| axis_of(cx, "axes", *a, rank))
            .collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    if (1..named.len()).any(|i| named[..i].contains(&named[i])) {
        return Err(cx.attr_err("axes", format!("{named:?} repeats an axis")));
    }
    let policy = cx.string("keep_aspect_ratio_policy", "stretch")?;
    if !["stretch", "not_larger", "not_smaller"].contains(&policy.as_str()) {
        return Err(cx.attr_err(
            "keep_aspect_ratio_policy",
            format!("\"{policy}\" is not one of stretch, not_larger, not_smaller"),
        ));
    }
    let (scales, sizes) = if imp.opset < 11 {
        (given(imp, cx, 1)?, None)
    } else {
        (given(imp, cx, 2)?, given(imp, cx, 3)?)
    };
    let mut out: Vec<Axis> = shape
        .iter()
        .map(|&d| Axis {
            input: d,
            output: d,
            scale: 1.0,
        })
        .collect();
    let values = match (scales, sizes) {
        (Some(_), Some(_)) => return Err(cx.shape_err("both scales and sizes are given")),
        (None, None) => return Err(cx.shape_err("neither scales nor sizes is given")),
        (Some(t), None) | (None, Some(t)) => t,
    };
    if values.data.len() != named.len() {
        return Err(cx.shape_err(format!(
            "{} values of scales or sizes for {} axes",
            values.data.len(),
            named.len()
        )));
    }
    if scales.is_some() {
        for (&a, &s) in named.iter().zip(values.data.iter()) {
            if !(s > 0.0 && s.is_finite()) {
                return Err(cx.shape_err(format!("the scale {s} of axis {a} is not positive")));
            }
            out[a].scale = s;
            out[a].output = (s * shape[a] as f64).floor() as usize;
        }
    } else {
        sized(cx, &mut out, &named, &values.data, &policy)?;
    }
    Ok(out)
}

/// The axes' output sizes and scales from `sizes`, under `keep_aspect_ratio_policy`.
fn sized(
    cx: &NodeCx,
    out: &mut [Axis],
    named: &[usize],
    sizes: &[f64],
    policy: &str,
) -> Result<(), ImportError> {
    if sizes.iter().any(|s| *s < 0.0) {
        return Err(cx.shape_err(format!("sizes {sizes:?} has a negative size")));
    }
    for (&a, &s) in named.iter().zip(sizes) {
        if out[a].input == 0 {
            return Err(cx.shape_err(format!("axis {a} is empty: it cannot be resized")));
        }
        out[a].output = s as usize;
        out[a].scale = s / out[a].input as f64;
    }
    let ratios = named.iter().map(|a| out[*a].scale);
    let scale = match policy {
        "not_larger" => ratios.fold(f64::INFINITY, f64::min),
        "not_smaller" => ratios.fold(0.0, f64::max),
        _ => return Ok(()),
    };
    for &a in named {
        out[a].scale = scale;
        out[a].output = (scale * out[a].input as f64 + 0.5).floor() as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{close, import, run};
    use super::{Axis, Coord, Rounding};
    use crate::onnx::proto::{AttributeProto, NodeProto, TensorProto};

    fn axis(input: usize, output: usize) -> Axis {
        Axis {
            input,
            output,
            scale: output as f64 / input as f64,
        }
    }

    #[test]
    fn align_corners_maps_the_corners_onto_each_other() {
        let a = axis(3, 5);
        let xs: Vec<f64> = (0..5).map(|y| a.source(Coord::AlignCorners, y)).collect();
        assert_eq!(xs, [0.0, 0.5, 1.0, 1.5, 2.0]);
        let (lo, hi, w) = a.linear(Coord::AlignCorners);
        assert_eq!((lo, hi), (vec![0, 0, 1, 1, 2], vec![1, 1, 2, 2, 2]));
        assert_eq!(w, [0.0, 0.5, 0.0, 0.5, 0.0]);
        assert_eq!(axis(4, 1).source(Coord::AlignCorners, 0), 0.0);
    }

    #[test]
    fn half_pixel_clamps_at_the_edges() {
        // Doubling 2 elements: coordinates -0.25, 0.25, 0.75, 1.25.
        let a = axis(2, 4);
        let (lo, hi, w) = a.linear(Coord::HalfPixel);
        assert_eq!((lo, hi), (vec![0, 0, 0, 1], vec![0, 1, 1, 1]));
        assert_eq!(w, [0.75, 0.25, 0.75, 0.25]);
        assert_eq!(
            a.nearest(Coord::HalfPixel, Rounding::PreferFloor),
            [0, 0, 1, 1]
        );
    }

    #[test]
    fn nearest_rounding_modes_differ_at_halves() {
        // Asymmetric, 2 → 4 elements of scale 2: coordinates 0, 0.5, 1, 1.5.
        let a = axis(2, 4);
        let at = |r| a.nearest(Coord::Asymmetric, r);
        assert_eq!(at(Rounding::PreferFloor), [0, 0, 1, 1]);
        assert_eq!(at(Rounding::PreferCeil), [0, 1, 1, 1]);
        assert_eq!(at(Rounding::Floor), [0, 0, 1, 1]);
        assert_eq!(at(Rounding::Ceil), [0, 1, 1, 1]);
        // Opset 10 rounds down when enlarging and up when shrinking.
        assert_eq!(at(Rounding::Simple), [0, 0, 1, 1]);
        assert_eq!(
            axis(4, 3).nearest(Coord::Asymmetric, Rounding::Simple),
            [0, 2, 3]
        );
    }

    #[test]
    fn bilinear_align_corners_matches_a_direct_interpolation() {
        let node = NodeProto::new("Resize", "r", &["x", "", "", "sizes"], &["y"])
            .with(AttributeProto::string("mode", "linear"))
            .with(AttributeProto::string(
                "coordinate_transformation_mode",
                "align_corners",
            ));
        let x: Vec<f32> = (0..6).map(|i| (i * i) as f32).collect();
        let sizes = TensorProto::from_i64("sizes", &[4], &[1, 1, 3, 5]);
        let (shape, got) = run(node, 13, (&[1, 1, 2, 3], &x), vec![sizes]);
        assert_eq!(shape, [1, 1, 3, 5]);
        let at = |r: usize, c: usize| f64::from(x[r * 3 + c]);
        let mut want = Vec::new();
        for i in 0..3 {
            for j in 0..5 {
                let (sy, sx) = (i as f64 * 1.0 / 2.0, j as f64 * 2.0 / 4.0);
                let (y0, x0) = (sy.floor() as usize, sx.floor() as usize);
                let (y1, x1) = ((y0 + 1).min(1), (x0 + 1).min(2));
                let (fy, fx) = (sy - y0 as f64, sx - x0 as f64);
                let top = at(y0, x0) * (1.0 - fx) + at(y0, x1) * fx;
                let bottom = at(y1, x0) * (1.0 - fx) + at(y1, x1) * fx;
                want.push(top * (1.0 - fy) + bottom * fy);
            }
        }
        assert!(close(&got, &want, 1e-5), "{got:?}\n{want:?}");
    }

    #[test]
    fn opset_10_takes_scales_as_its_second_input() {
        let node = NodeProto::new("Resize", "r", &["x", "scales"], &["y"]);
        let scales = TensorProto::from_f32("scales", &[2], &[1.0, 2.0]);
        let (shape, got) = run(node, 10, (&[1, 3], &[1.0, 2.0, 3.0]), vec![scales]);
        assert_eq!(shape, [1, 6]);
        assert_eq!(got, [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    }

    #[test]
    fn unsupported_modes_are_refused_by_name() {
        let refused = |attr: AttributeProto| {
            let node = NodeProto::new("Resize", "r", &["x", "", "scales"], &["y"]).with(attr);
            let scales = TensorProto::from_f32("scales", &[1], &[0.5]);
            import(node, 13, &[4], vec![scales]).expect_err("refused")
        };
        let err = refused(AttributeProto::string("mode", "cubic"));
        assert!(err.contains("\"cubic\""), "{err}");
        let err = refused(AttributeProto::string(
            "coordinate_transformation_mode",
            "tf_crop_and_resize",
        ));
        assert!(err.contains("tf_crop_and_resize"), "{err}");
        let err = refused(AttributeProto::string("keep_aspect_ratio_policy", "fit"));
        assert!(err.contains("\"fit\""), "{err}");
    }
}
