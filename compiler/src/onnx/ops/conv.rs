//! Convolution and pooling: `Conv`, `MaxPool` / `AveragePool` and their
//! window attributes (2-D, and 1-D as 2-D over a height of 1),
//! `ConvTranspose` (2-D, as a `Conv`), `GlobalAveragePool` /
//! `GlobalMaxPool`.

use super::{
    Lowered, add, arity, constant_of, constant_tensor, gather_at, input, optional_input, scalar,
};
use crate::ir::{ElemType, Op, PoolKind, ReduceKind, ValueId, Window};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

/// The window of a `Conv` / `MaxPool` / `AveragePool` over `x` (`[N, C, H,
/// W]`, or `[N, C, 1, L]` for a 1-D one lifted to 2-D), from its attributes
/// (`auto_pad` resolved). `nd` is the node's spatial rank: a 1-D node's
/// attributes have one value per axis (two pads), which become the width's.
fn window(cx: &NodeCx, x: &[usize], kernel: [usize; 2], nd: usize) -> Result<Window, ImportError> {
    let per_axis = |name: &str, default: usize| match (nd, cx.ints(name)?) {
        (1, Some([a])) if *a > 0 => Ok([1, *a as usize]),
        (1, Some(v)) => Err(cx.attr_err(name, format!("{v:?}: one positive value expected (1-D)"))),
        _ => pair(cx, name, default),
    };
    let strides = per_axis("strides", 1)?;
    let dilations = per_axis("dilations", 1)?;
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

/// A 2-D attribute of two positive values, or `default` twice.
fn pair(cx: &NodeCx, name: &str, default: usize) -> Result<[usize; 2], ImportError> {
    match cx.ints(name)? {
        None => Ok([default; 2]),
        Some([a, b]) if *a > 0 && *b > 0 => Ok([*a as usize, *b as usize]),
        Some(v) => Err(cx.attr_err(
            name,
            format!("{v:?}: two positive values expected (2-D only)"),
        )),
    }
}

/// The shape of a 3-D or 4-D floating-point input, and its spatial rank.
fn spatial(
    imp: &Importer,
    cx: &NodeCx,
    v: ValueId,
    what: &str,
) -> Result<(Vec<usize>, usize), ImportError> {
    let ty = imp.g.ty(v);
    // int32: `ConvInteger`'s centred operands.
    let numeric = ty.elem.is_float() || ty.elem == ElemType::I32;
    if !(3..=4).contains(&ty.shape.len()) || !numeric {
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
    let shape = lifted.clone();
    let v = add(imp, cx, step, Op::Reshape { shape }, vec![v])?;
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
    let shape = vec![s[0], s[1], s[3]];
    add(imp, cx, "", Op::Reshape { shape }, vec![y]).map(Lowered::Value)
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

/// The attributes of `Conv` and `ConvInteger`.
pub(super) const CONV_ATTRIBUTES: &[&str] = &[
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "pads",
    "strides",
];

/// `Conv` (1-D, lifted to 2-D, and 2-D): strides, padding (or `auto_pad`),
/// dilations, groups.
pub(super) fn conv(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 3)?;
    cx.check_attributes(CONV_ATTRIBUTES)?;
    let (x, w) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let bias = optional_input(imp, cx, 2)?;
    conv_of(imp, cx, x, w, bias)
}

/// The convolution of `x` by `w` (plus `bias`) as the node's attributes
/// say: `Conv`'s, and `ConvInteger`'s on its centred operands.
pub(super) fn conv_of(
    imp: &mut Importer,
    cx: &NodeCx,
    x: ValueId,
    w: ValueId,
    bias: Option<ValueId>,
) -> Result<Lowered, ImportError> {
    let (_, nd) = spatial(imp, cx, x, "the input")?;
    let (ws, wd) = spatial(imp, cx, w, "the weight")?;
    if wd != nd {
        return Err(cx.shape_err(format!("the input is {nd}-D, the weight {wd}-D")));
    }
    let groups = kernel_and_groups(cx, &ws)?;
    let (x, xs) = lift(imp, cx, x, "x_2d")?;
    let (w, ws) = lift(imp, cx, w, "w_2d")?;
    let window = window(cx, &xs, [ws[2], ws[3]], nd)?;
    let mut ins = vec![x, w];
    ins.extend(bias);
    let step = if nd == 1 { "conv_2d" } else { "" };
    let y = add(imp, cx, step, Op::Conv { window, groups }, ins)?;
    lower_back(imp, cx, y, nd)
}

/// Checks `kernel_shape` (if given) against the weights' `[.., .., KH, KW]`;
/// returns `group`.
fn kernel_and_groups(cx: &NodeCx, ws: &[usize]) -> Result<usize, ImportError> {
    if let Some(k) = cx.ints("kernel_shape")?
        && k.iter().map(|d| *d as usize).ne(ws[2..].iter().copied())
    {
        return Err(cx.attr_err(
            "kernel_shape",
            format!("{k:?} is not the weights' {:?}", &ws[2..]),
        ));
    }
    usize::try_from(cx.int("group", 1)?)
        .ok()
        .filter(|g| *g > 0)
        .ok_or_else(|| cx.attr_err("group", "must be positive"))
}

/// `ConvTranspose` (2-D) as a `Conv` of stride 1 over the input with
/// `stride - 1` zeros between its elements, padded by `dilation · (k - 1) -
/// pad` at each end (and `output_padding` more at the end; a negative amount
/// crops the result), with the kernel flipped and its input and output
/// channels swapped per group, computed at import (the weights must be
/// constants). The zeros are put in as a `Gather` repeating each element
/// `stride` times and a `Where` on a constant mask keeping the first of each.
pub(super) fn conv_transpose(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 2, 3)?;
    cx.check_attributes(&[
        "auto_pad",
        "dilations",
        "group",
        "kernel_shape",
        "output_padding",
        "output_shape",
        "pads",
        "strides",
    ])?;
    let (x, w) = (input(imp, cx, 0)?, input(imp, cx, 1)?);
    let xs = four_d(imp, cx, x, "the input")?;
    let ws = four_d(imp, cx, w, "the weight")?;
    let groups = kernel_and_groups(cx, &ws)?;
    if ws[0] != xs[1] || xs[1] % groups != 0 {
        return Err(cx.shape_err(format!(
            "the weight {ws:?} does not take the input's {} channels in {groups} groups",
            xs[1]
        )));
    }
    let geo = transposed_geometry(cx, &xs, &ws)?;
    let kernel = flipped_kernel(imp, cx, w, groups)?;
    let u = spread(imp, cx, x, geo.strides)?;
    let [(b0, e0), (b1, e1)] = geo.pads;
    let pads = [b0, b1, e0, e1].map(|p| p.max(0) as usize);
    let window = Window {
        kernel: [ws[2], ws[3]],
        strides: [1, 1],
        pads,
        dilations: geo.dilations,
        ceil: false,
    };
    let mut ins = vec![u, kernel];
    if let Some(b) = optional_input(imp, cx, 2)? {
        ins.push(b);
    }
    let cropped = [b0, b1, e0, e1].iter().any(|p| *p < 0);
    let step = if cropped { "conv" } else { "" };
    let y = add(imp, cx, step, Op::Conv { window, groups }, ins)?;
    if !cropped {
        return Ok(Lowered::Value(y));
    }
    let ys = imp.g.ty(y).shape.clone();
    let starts = vec![0, 0, (-b0).max(0), (-b1).max(0)];
    let ends = vec![
        ys[0] as i64,
        ys[1] as i64,
        ys[2] as i64 - (-e0).max(0),
        ys[3] as i64 - (-e1).max(0),
    ];
    if ends[2] < starts[2] || ends[3] < starts[3] {
        return Err(cx.shape_err("the pads leave no output"));
    }
    let steps = vec![1; 4];
    let op = Op::Slice {
        starts,
        ends,
        steps,
    };
    add(imp, cx, "", op, vec![y]).map(Lowered::Value)
}

/// What a transposed convolution's attributes give per spatial axis: its
/// stride, its dilation and the padding of the equivalent stride-1
/// convolution at each end (negative: cropped).
struct Transposed {
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [(i64, i64); 2],
}

fn transposed_geometry(cx: &NodeCx, xs: &[usize], ws: &[usize]) -> Result<Transposed, ImportError> {
    let strides = pair(cx, "strides", 1)?;
    let dilations = pair(cx, "dilations", 1)?;
    let pairs = |name: &str, n: usize| -> Result<Option<Vec<i64>>, ImportError> {
        match cx.ints(name)? {
            None => Ok(None),
            Some(v) if v.len() == n && v.iter().all(|p| *p >= 0) => Ok(Some(v.to_vec())),
            Some(v) => Err(cx.attr_err(
                name,
                format!("{v:?}: {n} non-negative values expected (2-D only)"),
            )),
        }
    };
    let extra = pairs("output_padding", 2)?.unwrap_or(vec![0, 0]);
    let wanted = match cx.ints("output_shape")? {
        None => None,
        Some(v) if (v.len() == 2 || v.len() == 4) && v.iter().all(|d| *d > 0) => {
            Some(v[v.len() - 2..].to_vec())
        }
        Some(v) => {
            return Err(cx.attr_err(
                "output_shape",
                format!("{v:?}: two positive sizes expected (2-D only)"),
            ));
        }
    };
    let auto_pad = cx.string("auto_pad", "NOTSET")?;
    let mut pads = [(0i64, 0i64); 2];
    for i in 0..2 {
        let (s, d) = (strides[i] as i64, dilations[i] as i64);
        let span = (ws[2 + i] as i64 - 1) * d + 1;
        let full = s * (xs[2 + i] as i64 - 1) + extra[i] + span;
        let out = match (&wanted, auto_pad.as_str()) {
            (Some(o), _) => Some(o[i]),
            (None, "SAME_UPPER" | "SAME_LOWER") => Some(xs[2 + i] as i64 * s),
            (None, "NOTSET" | "VALID") => None,
            (None, other) => {
                return Err(cx.attr_err("auto_pad", format!("unknown value \"{other}\"")));
            }
        };
        let (b, e) = match out {
            Some(o) => {
                let total = full - o;
                let half = total.div_euclid(2);
                if auto_pad == "SAME_UPPER" {
                    (half, total - half)
                } else {
                    (total - half, half)
                }
            }
            None if auto_pad == "VALID" => (0, 0),
            None => match pairs("pads", 4)? {
                Some(p) => (p[i], p[i + 2]),
                None => (0, 0),
            },
        };
        pads[i] = (span - 1 - b, span - 1 - e + extra[i]);
    }
    Ok(Transposed {
        strides,
        dilations,
        pads,
    })
}

/// The constant weights `[C, M / g, KH, KW]` of a transposed convolution
/// as a convolution's `[M, C / g, KH, KW]`, flipped in space.
fn flipped_kernel(
    imp: &mut Importer,
    cx: &NodeCx,
    w: ValueId,
    groups: usize,
) -> Result<ValueId, ImportError> {
    let t = constant_of(imp, cx, w)?;
    let [c, mg, kh, kw] = [0, 1, 2, 3].map(|i| t.ty.shape[i]);
    let cg = c / groups;
    let mut data = vec![0.0; t.data.len()];
    for (o, slot) in data.iter_mut().enumerate() {
        // Output element `[g·mg + m, ci, a, b]`.
        let (b, a) = (o % kw, (o / kw) % kh);
        let ci = (o / (kw * kh)) % cg;
        let om = o / (kw * kh * cg);
        let (g, m) = (om / mg, om % mg);
        let src = (((g * cg + ci) * mg + m) * kh + (kh - 1 - a)) * kw + (kw - 1 - b);
        *slot = t.data.at(src);
    }
    let (elem, shape) = (t.ty.elem, vec![mg * groups, cg, kh, kw]);
    Ok(constant_tensor(imp, cx, "kernel", elem, shape, data))
}

/// `x [N, C, H, W]` with `stride - 1` zeros between the elements along H and W.
fn spread(
    imp: &mut Importer,
    cx: &NodeCx,
    x: ValueId,
    strides: [usize; 2],
) -> Result<ValueId, ImportError> {
    if strides == [1, 1] {
        return Ok(x);
    }
    let xs = imp.g.ty(x).shape.clone();
    let mut y = x;
    let mut keep: Vec<Vec<bool>> = Vec::new();
    for i in 0..2 {
        let (n, s) = (xs[2 + i], strides[i]);
        let len = (n - 1) * s + 1;
        if s > 1 {
            let at: Vec<i64> = (0..len).map(|j| (j / s) as i64).collect();
            y = gather_at(imp, cx, &format!("repeat{i}"), y, 2 + i, &at)?;
        }
        keep.push((0..len).map(|j| j % s == 0).collect());
    }
    let shape = vec![keep[0].len(), keep[1].len()];
    let data = (0..shape[0] * shape[1])
        .map(|k| f64::from(u8::from(keep[0][k / shape[1]] && keep[1][k % shape[1]])))
        .collect();
    let mask = constant_tensor(imp, cx, "spread_mask", ElemType::Bool, shape, data);
    let elem = imp.g.ty(x).elem;
    let zero = scalar(imp, format!("{}/zero", cx.name), elem, 0.0);
    add(imp, cx, "spread", Op::Where, vec![mask, y, zero])
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

#[cfg(test)]
mod tests {
    use super::super::testing::{close, import, run};
    use crate::onnx::proto::{AttributeProto, NodeProto, TensorProto};

    /// A transposed convolution's attributes, for the reference.
    struct Geometry {
        strides: [usize; 2],
        dilations: [usize; 2],
        pads: [usize; 4],
        extra: [usize; 2],
        groups: usize,
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 + seed) % 11) as f32 / 4.0 - 1.25)
            .collect()
    }

    /// Every input element scattered through the kernel into the output,
    /// as the definition of a transposed convolution says.
    fn reference(
        x: &[f32],
        xs: [usize; 4],
        w: &[f32],
        ws: [usize; 4],
        geo: &Geometry,
    ) -> (Vec<usize>, Vec<f64>) {
        let [n, c, h, wd] = xs;
        let [_, mg, kh, kw] = ws;
        let (cg, m) = (c / geo.groups, mg * geo.groups);
        let size = |i: usize, len: usize, k: usize| {
            geo.strides[i] * (len - 1) + geo.extra[i] + (k - 1) * geo.dilations[i] + 1
                - geo.pads[i]
                - geo.pads[i + 2]
        };
        let (oh, ow) = (size(0, h, kh), size(1, wd, kw));
        let mut y = vec![0.0f64; n * m * oh * ow];
        for (xi, xv) in x.iter().enumerate() {
            let (j, i) = (xi % wd, (xi / wd) % h);
            let (ci, b) = ((xi / (wd * h)) % c, xi / (wd * h * c));
            for (wi, wv) in w[ci * mg * kh * kw..(ci + 1) * mg * kh * kw]
                .iter()
                .enumerate()
            {
                let (e, a, mm) = (wi % kw, (wi / kw) % kh, wi / (kw * kh));
                let r = (i * geo.strides[0] + a * geo.dilations[0]).checked_sub(geo.pads[0]);
                let q = (j * geo.strides[1] + e * geo.dilations[1]).checked_sub(geo.pads[1]);
                let (Some(r), Some(q)) = (r.filter(|r| *r < oh), q.filter(|q| *q < ow)) else {
                    continue;
                };
                let o = (ci / cg) * mg + mm;
                y[((b * m + o) * oh + r) * ow + q] += f64::from(*xv) * f64::from(*wv);
            }
        }
        (vec![n, m, oh, ow], y)
    }

    fn check(xs: [usize; 4], ws: [usize; 4], geo: &Geometry) {
        let dims = |s: [usize; 4]| s.map(|d| d as i64);
        let x = values(xs.iter().product(), 3);
        let w = values(ws.iter().product(), 5);
        let to_i64 = |v: &[usize]| v.iter().map(|d| *d as i64).collect::<Vec<_>>();
        let node = NodeProto::new("ConvTranspose", "ct", &["x", "w"], &["y"])
            .with(AttributeProto::ints("strides", &to_i64(&geo.strides)))
            .with(AttributeProto::ints("dilations", &to_i64(&geo.dilations)))
            .with(AttributeProto::ints("pads", &to_i64(&geo.pads)))
            .with(AttributeProto::ints("output_padding", &to_i64(&geo.extra)))
            .with(AttributeProto::int("group", geo.groups as i64));
        let inits = vec![TensorProto::from_f32("w", &dims(ws), &w)];
        let (shape, got) = run(node, 17, (&dims(xs), &x), inits);
        let (want_shape, want) = reference(&x, xs, &w, ws, geo);
        assert_eq!(shape, want_shape);
        assert!(close(&got, &want, 1e-4), "{got:?}\n{want:?}");
    }

    #[test]
    fn conv_transpose_matches_the_scatter_definition() {
        // Stride 2 with output_padding, groups, dilations and uneven pads.
        let geo = Geometry {
            strides: [2, 3],
            dilations: [1, 2],
            pads: [1, 0, 0, 2],
            extra: [1, 2],
            groups: 2,
        };
        check([2, 4, 3, 2], [4, 3, 3, 2], &geo);
        // Pads larger than the kernel's reach: the result is cropped.
        let geo = Geometry {
            strides: [2, 2],
            dilations: [1, 1],
            pads: [2, 0, 1, 3],
            extra: [0, 1],
            groups: 1,
        };
        check([1, 2, 4, 5], [2, 3, 2, 2], &geo);
    }

    #[test]
    fn conv_transpose_needs_constant_weights() {
        let node = NodeProto::new("ConvTranspose", "ct", &["x", "x"], &["y"]);
        let err = import(node, 17, &[1, 1, 2, 2], vec![]).expect_err("refused");
        assert!(err.contains("constant"), "{err}");
    }
}
