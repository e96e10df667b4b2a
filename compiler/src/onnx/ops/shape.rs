//! The shape and layout ops: `Reshape`, `Expand`, `Squeeze` / `Unsqueeze`,
//! `Flatten`, `Transpose`, `Slice`, `Split`, `Concat` and `Gather`.

use super::{Lowered, add, arity, axis_of, constant_ints, input, optional_input};
use crate::ir::{Op, Tensor, TensorType, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;
use crate::onnx::tensor::{MAX_CONSTANT_ELEMENTS, checked_numel};

/// `Reshape` with a constant shape: `0` copies the input dimension (unless
/// `allowzero`), `-1` is inferred.
pub(super) fn reshape(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&["allowzero"])?;
    let allowzero = cx.flag("allowzero")?;
    let (x, s) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let spec = constant_ints(imp, cx, s)?;
    let shape = reshape_shape(&imp.g.ty(x).shape, &spec, allowzero).map_err(|e| cx.shape_err(e))?;
    add(imp, cx, "", Op::Reshape { shape }, vec![x]).map(Lowered::Value)
}

/// The output shape of `Reshape`: ONNX's rules for `0` and `-1`.
pub(super) fn reshape_shape(
    input: &[usize],
    spec: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, String> {
    if allowzero && spec.contains(&0) && spec.contains(&-1) {
        return Err(format!("shape {spec:?} has both 0 and -1 with allowzero"));
    }
    let mut out = Vec::with_capacity(spec.len());
    let mut inferred = None;
    for (i, &d) in spec.iter().enumerate() {
        out.push(match d {
            -1 if inferred.is_some() => return Err(format!("shape {spec:?} has more than one -1")),
            -1 => {
                inferred = Some(i);
                1
            }
            0 if !allowzero => *input.get(i).ok_or_else(|| {
                format!("shape {spec:?}: the 0 at position {i} copies a dimension the input {input:?} does not have")
            })?,
            d => usize::try_from(d).map_err(|_| format!("shape {spec:?} has the invalid dimension {d}"))?,
        });
    }
    let numel: usize = input.iter().product();
    let known = checked_numel(&out).ok_or_else(|| format!("shape {spec:?} is too large"))?;
    if let Some(i) = inferred {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(format!(
                "cannot infer the -1 of {spec:?}: {numel} elements {input:?} do not divide into it"
            ));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(format!(
            "cannot reshape {numel} elements {input:?} into {out:?}"
        ));
    }
    Ok(out)
}

/// `Expand(x, shape)`: `x` broadcast with `shape` (numpy rules, either side
/// may broadcast), canonicalised as `x + zeros(shape)`.
pub(super) fn expand(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&[])?;
    let (x, s) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let spec = constant_ints(imp, cx, s)?;
    let dims: Vec<usize> = spec
        .iter()
        .map(|d| {
            usize::try_from(*d)
                .map_err(|_| cx.shape_err(format!("shape {spec:?} has a negative dimension")))
        })
        .collect::<Result<_, _>>()?;
    let elem = imp.g.ty(x).elem;
    let n = checked_numel(&dims)
        .filter(|n| *n <= MAX_CONSTANT_ELEMENTS)
        .ok_or_else(|| cx.shape_err(format!("shape {spec:?} is too large")))?;
    let zeros = imp.g.add_constant(
        format!("{}/zeros", cx.name),
        Tensor::new(TensorType { elem, shape: dims }, vec![0.0; n]),
    );
    add(imp, cx, "", Op::Add, vec![x, zeros]).map(Lowered::Value)
}

/// `Unsqueeze` (insert size-1 dimensions at `axes` of the result) and
/// `Squeeze` (remove the size-1 dimensions at `axes`, or all of them), as a
/// `Reshape`. Axes are an attribute before opset 13 and an input from 13 on.
pub(super) fn squeeze(
    imp: &mut Importer,
    cx: &NodeCx,
    insert: bool,
) -> Result<Lowered, ImportError> {
    let x = input(imp, cx, 0)?;
    let axes: Option<Vec<i64>> = if imp.opset >= 13 {
        arity(cx, 1, 2)?;
        cx.check_attributes(&[])?;
        match cx.proto.input.get(1).filter(|n| !n.is_empty()) {
            Some(_) => {
                let a = input(imp, cx, 1)?;
                Some(constant_ints(imp, cx, a)?)
            }
            None => None,
        }
    } else {
        arity(cx, 1, 1)?;
        cx.check_attributes(&["axes"])?;
        cx.ints("axes")?.map(<[i64]>::to_vec)
    };
    let shape = imp.g.ty(x).shape.clone();
    let out_rank = if insert {
        shape.len() + axes.as_ref().map_or(0, Vec::len)
    } else {
        shape.len()
    };
    let rank = i64::try_from(out_rank).unwrap_or(i64::MAX);
    let resolve = |a: i64| -> Result<usize, ImportError> {
        let r = if a < 0 { a + rank } else { a };
        usize::try_from(r)
            .ok()
            .filter(|r| *r < out_rank)
            .ok_or_else(|| cx.attr_err("axes", format!("{a} is out of range for rank {rank}")))
    };
    let new_shape: Vec<usize> = if insert {
        let Some(axes) = axes else {
            return Err(cx.attr_err("axes", "required, missing"));
        };
        let mut at: Vec<usize> = axes.iter().map(|a| resolve(*a)).collect::<Result<_, _>>()?;
        at.sort_unstable();
        if at.windows(2).any(|w| w[0] == w[1]) {
            return Err(cx.attr_err("axes", "repeats an axis"));
        }
        let mut it = shape.iter();
        (0..out_rank)
            .map(|i| {
                if at.contains(&i) {
                    1
                } else {
                    *it.next().unwrap_or(&1)
                }
            })
            .collect()
    } else {
        let at: Vec<usize> = match &axes {
            Some(axes) => axes.iter().map(|a| resolve(*a)).collect::<Result<_, _>>()?,
            None => (0..shape.len()).filter(|&i| shape[i] == 1).collect(),
        };
        if let Some(&bad) = at.iter().find(|&&i| shape[i] != 1) {
            return Err(cx.shape_err(format!(
                "cannot squeeze dimension {bad} of size {}",
                shape[bad]
            )));
        }
        shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !at.contains(i))
            .map(|(_, d)| *d)
            .collect()
    };
    add(imp, cx, "", Op::Reshape { shape: new_shape }, vec![x]).map(Lowered::Value)
}

/// `Flatten` as a 2-D `Reshape` around `axis`.
pub(super) fn flatten(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["axis"])?;
    let x = input(imp, cx, 0)?;
    let shape = imp.g.ty(x).shape.clone();
    let axis = cx.int("axis", 1)?;
    let rank = i64::try_from(shape.len()).unwrap_or(i64::MAX);
    let resolved = if axis < 0 { axis + rank } else { axis };
    let split = usize::try_from(resolved)
        .ok()
        .and_then(|a| shape.split_at_checked(a))
        .ok_or_else(|| {
            cx.attr_err(
                "axis",
                format!("{axis} is out of range for a {rank}-D input"),
            )
        })?;
    let (outer, inner) = (split.0.iter().product(), split.1.iter().product());
    add(
        imp,
        cx,
        "",
        Op::Reshape {
            shape: vec![outer, inner],
        },
        vec![x],
    )
    .map(Lowered::Value)
}

/// `Transpose`; without `perm`, the dimensions reversed.
pub(super) fn transpose(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 1, 1)?;
    cx.check_attributes(&["perm"])?;
    let x = input(imp, cx, 0)?;
    let rank = imp.g.ty(x).shape.len();
    let perm = match cx.ints("perm")? {
        None => (0..rank).rev().collect(),
        Some(p) => p
            .iter()
            .map(|d| usize::try_from(*d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| cx.attr_err("perm", format!("{p:?} has a negative entry")))?,
    };
    add(imp, cx, "", Op::Transpose { perm }, vec![x]).map(Lowered::Value)
}

/// ONNX `Slice` bounds for one dimension of size `d`, normalised as
/// [`Op::Slice`] wants them.
fn slice_bounds(d: i64, start: i64, end: i64, step: i64) -> (i64, i64) {
    let wrap = |x: i64| if x < 0 { x.saturating_add(d) } else { x };
    let (s, e) = (wrap(start), wrap(end));
    if step > 0 {
        (s.clamp(0, d), e.clamp(0, d))
    } else {
        (s.clamp(0, (d - 1).max(0)), e.clamp(-1, d - 1))
    }
}

/// `Slice`: constant starts, ends, axes and steps (inputs from opset 10,
/// attributes before).
pub(super) fn slice(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let x = input(imp, cx, 0)?;
    let shape = imp.g.ty(x).shape.clone();
    let rank = shape.len();
    let (starts, ends, axes, steps) = if imp.opset >= 10 {
        arity(cx, 3, 5)?;
        cx.check_attributes(&[])?;
        let get = |imp: &Importer, i: usize| -> Result<Option<Vec<i64>>, ImportError> {
            match optional_input(imp, cx, i)? {
                Some(v) => constant_ints(imp, cx, v).map(Some),
                None => Ok(None),
            }
        };
        (
            get(imp, 1)?.unwrap_or_default(),
            get(imp, 2)?.unwrap_or_default(),
            get(imp, 3)?,
            get(imp, 4)?,
        )
    } else {
        arity(cx, 1, 1)?;
        cx.check_attributes(&["starts", "ends", "axes"])?;
        let need = |n: &str| -> Result<Vec<i64>, ImportError> {
            cx.ints(n)?
                .map(<[i64]>::to_vec)
                .ok_or_else(|| cx.attr_err(n, "required, missing"))
        };
        (
            need("starts")?,
            need("ends")?,
            cx.ints("axes")?.map(<[i64]>::to_vec),
            None,
        )
    };
    let k = starts.len();
    let axes = axes.unwrap_or_else(|| (0..k as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; k]);
    if ends.len() != k || axes.len() != k || steps.len() != k {
        return Err(cx.shape_err(format!(
            "starts, ends, axes and steps have different lengths ({k}, {}, {}, {})",
            ends.len(),
            axes.len(),
            steps.len()
        )));
    }
    let mut st = vec![0i64; rank];
    let mut en: Vec<i64> = shape.iter().map(|d| *d as i64).collect();
    let mut sp = vec![1i64; rank];
    let mut seen = vec![false; rank];
    for i in 0..k {
        let a = axis_of(cx, "axes", axes[i], rank)?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(cx.attr_err("axes", format!("{axes:?} repeats an axis")));
        }
        if steps[i] == 0 {
            return Err(cx.shape_err("a step is 0"));
        }
        let (s, e) = slice_bounds(shape[a] as i64, starts[i], ends[i], steps[i]);
        (st[a], en[a], sp[a]) = (s, e, steps[i]);
    }
    let op = Op::Slice {
        starts: st,
        ends: en,
        steps: sp,
    };
    add(imp, cx, "", op, vec![x]).map(Lowered::Value)
}

/// `Split` into slices along `axis`: sizes from the `split` input (opset 13
/// on) or attribute, else equal parts (the last smaller, opset 18's
/// `num_outputs`).
pub(super) fn split(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let x = input(imp, cx, 0)?;
    let shape = imp.g.ty(x).shape.clone();
    let rank = shape.len();
    let sizes = if imp.opset >= 13 {
        let n = cx.proto.input.len();
        if !(1..=2).contains(&n) {
            return Err(cx.arity_err(format!("takes 1 to 2 inputs, has {n}")));
        }
        cx.check_attributes(&["axis", "num_outputs"])?;
        match optional_input(imp, cx, 1)? {
            Some(v) => Some(constant_ints(imp, cx, v)?),
            None => None,
        }
    } else {
        if cx.proto.input.len() != 1 {
            return Err(cx.arity_err("takes 1 input"));
        }
        cx.check_attributes(&["axis", "split"])?;
        cx.ints("split")?.map(<[i64]>::to_vec)
    };
    let axis = axis_of(cx, "axis", cx.int("axis", 0)?, rank)?;
    let d = shape[axis] as i64;
    let outs = cx.proto.output.len() as i64;
    let sizes = match sizes {
        Some(s) => s,
        None => {
            let parts = cx.int("num_outputs", outs)?;
            if parts <= 0 {
                return Err(cx.attr_err("num_outputs", "must be positive"));
            }
            let each = (d + parts - 1) / parts;
            (0..parts).map(|i| each.min(d - i * each).max(0)).collect()
        }
    };
    if sizes.len() as i64 != outs || sizes.iter().any(|s| *s < 0) || sizes.iter().sum::<i64>() != d
    {
        return Err(cx.shape_err(format!(
            "split sizes {sizes:?} do not cut dimension {axis} of size {d} into {outs} parts"
        )));
    }
    let mut at = 0;
    let mut vs = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        let mut st = vec![0i64; rank];
        let mut en: Vec<i64> = shape.iter().map(|d| *d as i64).collect();
        (st[axis], en[axis]) = (at, at + size);
        at += size;
        let op = Op::Slice {
            starts: st,
            ends: en,
            steps: vec![1; rank],
        };
        vs.push(Some(add(imp, cx, &format!("part{i}"), op, vec![x])?));
    }
    Ok(Lowered::Many(vs))
}

/// `Concat` along `axis`.
pub(super) fn concat(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    if cx.proto.input.is_empty() || cx.proto.output.len() != 1 {
        return Err(cx.arity_err("takes at least 1 input and has 1 output"));
    }
    cx.check_attributes(&["axis"])?;
    let xs: Vec<ValueId> = (0..cx.proto.input.len())
        .map(|i| input(imp, cx, i))
        .collect::<Result<_, _>>()?;
    let rank = imp.g.ty(xs[0]).shape.len();
    let axis = axis_of(cx, "axis", cx.required_int("axis")?, rank)?;
    add(imp, cx, "", Op::Concat { axis }, xs).map(Lowered::Value)
}

/// `Gather` along `axis` (negative counts from the end).
pub(super) fn gather(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 2)?;
    cx.check_attributes(&["axis"])?;
    let data = input(imp, cx, 0)?;
    let indices = input(imp, cx, 1)?;
    let rank = imp.g.ty(data).shape.len() as i64;
    let axis = cx.int("axis", 0)?;
    let a = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&a) {
        return Err(cx.attr_err("axis", format!("{axis} is out of range for rank {rank}")));
    }
    add(
        imp,
        cx,
        "",
        Op::Gather { axis: a as usize },
        vec![data, indices],
    )
    .map(Lowered::Value)
}

#[cfg(test)]
mod tests {
    use super::reshape_shape;

    #[test]
    fn reshape_copies_zeros_and_infers_minus_one() {
        assert_eq!(reshape_shape(&[2, 3, 4], &[0, -1], false), Ok(vec![2, 12]));
        assert_eq!(reshape_shape(&[2, 3, 4], &[-1], false), Ok(vec![24]));
        assert_eq!(
            reshape_shape(&[2, 3, 4], &[4, 0, 2], false),
            Ok(vec![4, 3, 2])
        );
        assert_eq!(reshape_shape(&[0, 3], &[3, 0], true), Ok(vec![3, 0]));
        assert_eq!(reshape_shape(&[6], &[], false).map_err(|_| ()), Err(()));
        assert_eq!(reshape_shape(&[1], &[], false), Ok(vec![]));
    }

    #[test]
    fn reshape_refuses_what_onnx_refuses() {
        let err = |input: &[usize], spec: &[i64], allowzero| {
            reshape_shape(input, spec, allowzero).expect_err("refused")
        };
        assert!(err(&[6], &[-1, -1], false).contains("more than one -1"));
        assert!(err(&[6], &[4, -1], false).contains("do not divide"));
        assert!(err(&[6], &[0, 0], false).contains("does not have"));
        assert!(err(&[6], &[-2, 3], false).contains("invalid dimension -2"));
        assert!(err(&[0], &[0, -1], true).contains("both 0 and -1"));
        assert!(err(&[6], &[i64::MAX, i64::MAX], false).contains("too large"));
        assert!(err(&[6], &[5], false).contains("cannot reshape"));
    }
}
