//! Shape and element-type inference: the rules of every op.

use super::{ElemType, Op, TensorType};

/// The numpy broadcast of two shapes.
pub fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let n = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() >= n {
            s[i + s.len() - n]
        } else {
            1
        }
    };
    (0..n)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            (x, y) => Err(format!(
                "shapes {a:?} and {b:?} do not broadcast (dimension {i}: {x} vs {y})"
            )),
        })
        .collect()
}

fn same_elem(tys: &[TensorType]) -> Result<ElemType, String> {
    let e = tys[0].elem;
    match tys.iter().find(|t| t.elem != e) {
        Some(t) => Err(format!(
            "element types differ: {} and {}",
            e.name(),
            t.elem.name()
        )),
        None => Ok(e),
    }
}

fn arity(tys: &[TensorType], n: usize) -> Result<(), String> {
    if tys.len() == n {
        Ok(())
    } else {
        Err(format!("takes {n} inputs, got {}", tys.len()))
    }
}

/// The output types of an op applied to inputs of these types.
pub fn infer(op: &Op, tys: &[TensorType]) -> Result<Vec<TensorType>, String> {
    let out = match op {
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Max | Op::Min => {
            arity(tys, 2)?;
            TensorType {
                elem: same_elem(tys)?,
                shape: broadcast(&tys[0].shape, &tys[1].shape)?,
            }
        }
        Op::Less | Op::LessOrEqual => {
            arity(tys, 2)?;
            let elem = same_elem(tys)?;
            if !elem.is_float() {
                return Err(format!(
                    "{} compares floating-point tensors only (integers are cast first)",
                    op.name()
                ));
            }
            TensorType {
                elem,
                shape: broadcast(&tys[0].shape, &tys[1].shape)?,
            }
        }
        Op::Unary(_) => {
            arity(tys, 1)?;
            if !tys[0].elem.is_float()
                && !matches!(op, Op::Unary(super::Unary::Neg | super::Unary::Abs))
            {
                return Err(format!(
                    "{} is defined on floating-point tensors only",
                    op.name()
                ));
            }
            tys[0].clone()
        }
        Op::Relu | Op::Identity => {
            arity(tys, 1)?;
            tys[0].clone()
        }
        Op::Cast { to } => {
            arity(tys, 1)?;
            TensorType {
                elem: *to,
                shape: tys[0].shape.clone(),
            }
        }
        Op::Reshape { shape } => {
            arity(tys, 1)?;
            let n = shape.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
            if n != Some(tys[0].numel()) {
                return Err(format!(
                    "cannot reshape {} elements {:?} into {shape:?}",
                    tys[0].numel(),
                    tys[0].shape
                ));
            }
            TensorType {
                elem: tys[0].elem,
                shape: shape.clone(),
            }
        }
        Op::Transpose { perm } => {
            arity(tys, 1)?;
            let rank = tys[0].shape.len();
            let mut sorted = perm.clone();
            sorted.sort_unstable();
            if sorted != (0..rank).collect::<Vec<_>>() {
                return Err(format!(
                    "perm {perm:?} is not a permutation of the {rank} dimensions"
                ));
            }
            TensorType {
                elem: tys[0].elem,
                shape: perm.iter().map(|p| tys[0].shape[*p]).collect(),
            }
        }
        Op::Reduce {
            kind,
            axes,
            keepdims,
        } => {
            arity(tys, 1)?;
            let shape = &tys[0].shape;
            if axes.windows(2).any(|w| w[0] >= w[1]) || axes.iter().any(|a| *a >= shape.len()) {
                return Err(format!(
                    "axes {axes:?} are not sorted distinct dimensions of {shape:?}"
                ));
            }
            if !tys[0].elem.is_float() && *kind == super::ReduceKind::Mean {
                return Err("ReduceMean is defined on floating-point tensors only".to_owned());
            }
            let shape = shape
                .iter()
                .enumerate()
                .filter_map(|(i, d)| match (axes.contains(&i), keepdims) {
                    (false, _) => Some(*d),
                    (true, true) => Some(1),
                    (true, false) => None,
                })
                .collect();
            TensorType {
                elem: tys[0].elem,
                shape,
            }
        }
        Op::Slice {
            starts,
            ends,
            steps,
        } => {
            arity(tys, 1)?;
            let shape = &tys[0].shape;
            let r = shape.len();
            if starts.len() != r || ends.len() != r || steps.len() != r {
                return Err(format!(
                    "a slice of a {r}-D tensor needs {r} starts, ends and steps"
                ));
            }
            let mut out = Vec::with_capacity(r);
            for (i, d) in shape.iter().enumerate() {
                let (s, e, st) = (starts[i], ends[i], steps[i]);
                let d = i64::try_from(*d).unwrap_or(i64::MAX);
                let ok = st != 0
                    && if st > 0 {
                        (0..=d).contains(&s) && (0..=d).contains(&e)
                    } else {
                        (0..d).contains(&s) || d == 0 && s == -1
                    }
                    && (st > 0 || (-1..d).contains(&e));
                if !ok {
                    return Err(format!(
                        "dimension {i} of size {d}: {s}..{e} step {st} is not a normalised range"
                    ));
                }
                out.push(super::slice_len(s, e, st));
            }
            TensorType {
                elem: tys[0].elem,
                shape: out,
            }
        }
        Op::Concat { axis } => {
            if tys.is_empty() {
                return Err("takes at least one input".to_owned());
            }
            let elem = same_elem(tys)?;
            let first = &tys[0].shape;
            if *axis >= first.len() {
                return Err(format!("axis {axis} is not a dimension of {first:?}"));
            }
            let mut shape = first.clone();
            shape[*axis] = 0;
            for t in tys {
                let ok = t.shape.len() == first.len()
                    && t.shape
                        .iter()
                        .zip(first)
                        .enumerate()
                        .all(|(i, (a, b))| i == *axis || a == b);
                if !ok {
                    return Err(format!(
                        "shapes {first:?} and {:?} differ off axis {axis}",
                        t.shape
                    ));
                }
                shape[*axis] += t.shape[*axis];
            }
            TensorType { elem, shape }
        }
        Op::Gather { axis } => {
            arity(tys, 2)?;
            let (data, idx) = (&tys[0], &tys[1]);
            if idx.elem.is_float() || idx.elem == ElemType::Bool {
                return Err(format!(
                    "the indices must be integers, they are {}",
                    idx.elem.name()
                ));
            }
            if *axis >= data.shape.len() {
                return Err(format!(
                    "axis {axis} is out of range for data of rank {}",
                    data.shape.len()
                ));
            }
            let mut shape = data.shape[..*axis].to_vec();
            shape.extend_from_slice(&idx.shape);
            shape.extend_from_slice(&data.shape[axis + 1..]);
            TensorType {
                elem: data.elem,
                shape,
            }
        }
        Op::Where => {
            arity(tys, 3)?;
            // Bool, or truth values (1 and 0) of a float type, as run-time
            // comparisons make them.
            if tys[0].elem != ElemType::Bool && !tys[0].elem.is_float() {
                return Err(format!(
                    "the condition must be bool (or 1 and 0 of a float type), it is {}",
                    tys[0].elem.name()
                ));
            }
            let elem = same_elem(&tys[1..])?;
            let shape = broadcast(&broadcast(&tys[0].shape, &tys[1].shape)?, &tys[2].shape)?;
            TensorType { elem, shape }
        }
        Op::Conv { window, groups } => {
            if !(2..=3).contains(&tys.len()) {
                return Err(format!("takes 2 or 3 inputs, got {}", tys.len()));
            }
            let elem = same_elem(tys)?;
            let (x, w) = (&tys[0].shape, &tys[1].shape);
            if x.len() != 4 || w.len() != 4 {
                return Err(format!("only 2-D convolutions: x {x:?}, w {w:?}"));
            }
            let g = (*groups).max(1);
            if x[1] % g != 0 || w[0] % g != 0 || w[1] * g != x[1] {
                return Err(format!(
                    "channels do not split into {g} groups: x {x:?}, w {w:?}"
                ));
            }
            if [w[2], w[3]] != window.kernel {
                return Err(format!(
                    "the kernel {:?} is not the weights' {w:?}",
                    window.kernel
                ));
            }
            if let Some(b) = tys.get(2)
                && b.shape != [w[0]]
            {
                return Err(format!("the bias is {:?}, not [{}]", b.shape, w[0]));
            }
            let [oh, ow] = window_output(window, x)?;
            TensorType {
                elem,
                shape: vec![x[0], w[0], oh, ow],
            }
        }
        Op::Pool { window, .. } => {
            arity(tys, 1)?;
            let x = &tys[0].shape;
            if x.len() != 4 {
                return Err(format!("only 2-D pooling: x {x:?}"));
            }
            let [oh, ow] = window_output(window, x)?;
            TensorType {
                elem: tys[0].elem,
                shape: vec![x[0], x[1], oh, ow],
            }
        }
        Op::Im2Col { window, .. } => {
            arity(tys, 1)?;
            let x = &tys[0].shape;
            if x.len() != 4 {
                return Err(format!("only 2-D windows: x {x:?}"));
            }
            let [oh, ow] = window_output(window, x)?;
            TensorType {
                elem: tys[0].elem,
                shape: vec![x[0], x[1], window.kernel[0] * window.kernel[1], oh * ow],
            }
        }
        Op::Im2Row { window, .. } => {
            arity(tys, 1)?;
            let x = &tys[0].shape;
            if x.len() != 4 {
                return Err(format!("only 2-D windows: x {x:?}"));
            }
            // Channels last: the window's sizes are those of `[N, C, H, W]`.
            let [oh, ow] = window_output(window, &[x[0], x[3], x[1], x[2]])?;
            TensorType {
                elem: tys[0].elem,
                shape: vec![x[0], oh * ow, window.kernel[0] * window.kernel[1] * x[3]],
            }
        }
        Op::WindowSum { window } => {
            arity(tys, 2)?;
            let (x, w) = (&tys[0].shape, &tys[1].shape);
            let kk = window.kernel[0] * window.kernel[1];
            if x.len() != 4 || w != &[kk, x[3]] {
                return Err(format!("a depthwise window sum of x {x:?} by w {w:?}"));
            }
            let [oh, ow] = window_output(window, &[x[0], x[3], x[1], x[2]])?;
            TensorType {
                elem: same_elem(tys)?,
                shape: vec![x[0], oh * ow, x[3]],
            }
        }
        Op::MatMul => {
            arity(tys, 2)?;
            let elem = same_elem(tys)?;
            matmul_shape(&tys[0].shape, &tys[1].shape).map(|shape| TensorType { elem, shape })?
        }
    };
    Ok(vec![out])
}

/// The output size of a 2-D window over `[N, C, H, W]`.
fn window_output(window: &super::Window, x: &[usize]) -> Result<[usize; 2], String> {
    window.output([x[2], x[3]]).ok_or_else(|| {
        format!("the window (zero sizes, or larger than the padded input) does not fit {x:?}")
    })
}

/// numpy `matmul` shapes: 1-D operands are promoted and the added dimension removed again.
fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    if a.is_empty() || b.is_empty() {
        return Err("MatMul of a scalar".to_owned());
    }
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(format!("inner dimensions differ: {a:?} x {b:?}"));
    }
    let mut shape = broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2])?;
    if a.len() > 1 {
        shape.push(m);
    }
    if b.len() > 1 {
        shape.push(n);
    }
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize]) -> TensorType {
        TensorType {
            elem: ElemType::F32,
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(
            broadcast(&[4, 1, 3], &[5, 1]).expect("broadcasts"),
            vec![4, 5, 3]
        );
        assert_eq!(broadcast(&[], &[2, 2]).expect("scalar"), vec![2, 2]);
        assert!(broadcast(&[3], &[4]).is_err());
    }

    #[test]
    fn matmul_shapes_follow_numpy() {
        let out = |a: &[usize], b: &[usize]| {
            infer(&Op::MatMul, &[t(a), t(b)]).map(|v| v[0].shape.clone())
        };
        assert_eq!(out(&[2, 3], &[3, 4]).expect("2-D"), vec![2, 4]);
        assert_eq!(out(&[5, 2, 3], &[3, 4]).expect("batched"), vec![5, 2, 4]);
        assert_eq!(out(&[3], &[3, 4]).expect("vector"), vec![4]);
        assert_eq!(out(&[2, 3], &[3]).expect("vector"), vec![2]);
        assert!(out(&[2, 3], &[4, 5]).is_err());
    }

    #[test]
    fn windows_give_numpy_sizes_and_refuse_zero_strides() {
        let w = |strides: [usize; 2], ceil: bool| super::super::Window {
            kernel: [3, 3],
            strides,
            pads: [1, 1, 1, 1],
            dilations: [1, 1],
            ceil,
        };
        let pool = |window| Op::Pool {
            kind: super::super::PoolKind::Max,
            window,
        };
        let out = |op: Op| infer(&op, &[t(&[1, 2, 6, 6])]).map(|v| v[0].shape.clone());
        assert_eq!(out(pool(w([1, 1], false))).expect("same"), vec![1, 2, 6, 6]);
        assert_eq!(
            out(pool(w([2, 2], false))).expect("floor"),
            vec![1, 2, 3, 3]
        );
        // ceil((6 + 2 - 3) / 4) + 1 = 3, but the last window would start in the padding.
        assert_eq!(out(pool(w([4, 4], true))).expect("ceil"), vec![1, 2, 2, 2]);
        assert!(
            out(pool(w([0, 1], false))).is_err(),
            "a zero stride is refused"
        );
    }

    #[test]
    fn reshape_and_transpose_check_their_arguments() {
        assert!(infer(&Op::Reshape { shape: vec![6] }, &[t(&[2, 3])]).is_ok());
        assert!(infer(&Op::Reshape { shape: vec![5] }, &[t(&[2, 3])]).is_err());
        assert_eq!(
            infer(&Op::Transpose { perm: vec![1, 0] }, &[t(&[2, 3])]).expect("ok")[0].shape,
            vec![3, 2]
        );
        assert!(infer(&Op::Transpose { perm: vec![0, 0] }, &[t(&[2, 3])]).is_err());
    }
}
