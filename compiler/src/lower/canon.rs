//! Graph rewrites before lowering, into forms the tile lowering handles:
//!
//! - a computed operand broadcast along its last dimension (`x[.., c] op
//!   s[.., 1]`, as softmax and layer normalisation do) is first expanded to
//!   the full width by a product with a row of ones (`s · 1[1, C]`, a
//!   contraction of depth 1, which every machine with a matrix product has);
//! - a reduction that drops its dimensions (`keepdims = 0`) keeps them and is
//!   followed by a `Reshape`; one over several trailing dimensions reduces a
//!   `Reshape` that merges them;
//! - on a machine without a minimum reduction, `min(x)` is `-max(-x)`;
//! - a transpose that moves the last dimension and others is a permutation of
//!   the rows (the last dimension kept), a swap of the last two dimensions,
//!   and another permutation of the rows;
//! - `Where` with a constant condition (a mask) is a product with the mask
//!   plus the other operand's selected values: `x · m + where(c, 0, y)` when
//!   `y` is constant (exact, also for `y = -inf`, as long as `x` is finite),
//!   `x · m + y · (1 - m)` when both are computed. A computed condition is
//!   refused.

use super::LowerError;
use crate::ir::{Graph, Node, Op, ReduceKind, Tensor, TensorType, Unary, ValueId};

/// The graph with the rewrites applied (unchanged when none applies).
pub fn prepare(g: &Graph, has_min_reduction: bool) -> Result<Graph, LowerError> {
    let mut out = Graph {
        values: g.values.clone(),
        nodes: Vec::with_capacity(g.nodes.len()),
        inputs: g.inputs.clone(),
        outputs: g.outputs.clone(),
        constants: g.constants.clone(),
    };
    for n in &g.nodes {
        rewrite(g, &mut out, n, has_min_reduction).map_err(|message| LowerError {
            node: Some(n.name.clone()),
            op: Some(n.op.name().to_owned()),
            message,
        })?;
    }
    Ok(out)
}

/// Adds node `n` of `g` to `out`, rewritten if a rule applies.
fn rewrite(g: &Graph, out: &mut Graph, n: &Node, has_min_reduction: bool) -> Result<(), String> {
    match &n.op {
        Op::MatMul if g.ty(n.inputs[0]).shape.len() == 1 || g.ty(n.inputs[1]).shape.len() == 1 => {
            // numpy's promotion made explicit: [k] is [1, k] on the left, [k, 1] on the right.
            let mut ins = Vec::new();
            for (i, &x) in n.inputs.iter().enumerate() {
                let s = g.ty(x).shape.clone();
                if s.len() != 1 {
                    ins.push(x);
                    continue;
                }
                let shape = if i == 0 { vec![1, s[0]] } else { vec![s[0], 1] };
                let name = format!("{}/promote{i}", n.name);
                if let Some(t) = g.constants.get(&x) {
                    let ty = TensorType {
                        elem: t.ty.elem,
                        shape,
                    };
                    ins.push(out.add_constant(name, Tensor::new(ty, t.data.clone())));
                } else {
                    let op = Op::Reshape { shape };
                    ins.push(out.add_node(name, op, vec![x])?[0]);
                }
            }
            let y = out.add_node(format!("{}/product", n.name), Op::MatMul, ins)?;
            let shape = g.ty(n.outputs[0]).shape.clone();
            out.nodes.push(Node {
                name: n.name.clone(),
                op: Op::Reshape { shape },
                inputs: y,
                outputs: n.outputs.clone(),
            });
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Max | Op::Min => {
            let shape = g.ty(n.outputs[0]).shape.clone();
            let mut inputs = n.inputs.clone();
            for x in inputs.iter_mut() {
                if let Some(wide) = widen(out, *x, &shape, &n.name)? {
                    *x = wide;
                }
            }
            out.nodes.push(Node {
                inputs,
                ..n.clone()
            });
        }
        Op::Reduce {
            kind,
            axes,
            keepdims,
        } => {
            let name = |step: &str| format!("{}/{step}", n.name);
            let mut x = n.inputs[0];
            let mut kind = *kind;
            let mut axes = axes.clone();
            // min(x) as -max(-x) without a minimum reduction.
            let negate = kind == ReduceKind::Min && !has_min_reduction;
            if negate {
                x = out.add_node(name("negated"), Op::Unary(Unary::Neg), vec![x])?[0];
                kind = ReduceKind::Max;
            }
            // Several trailing dimensions as one: the rows of a matrix view.
            let shape = out.ty(x).shape.clone();
            let first = axes.first().copied().unwrap_or(shape.len());
            if axes.len() > 1 && axes.iter().copied().eq(first..shape.len()) {
                let mut flat = shape[..first].to_vec();
                flat.push(shape[first..].iter().product());
                x = out.add_node(name("flat"), Op::Reshape { shape: flat }, vec![x])?[0];
                axes = vec![first];
            }
            if !negate && *keepdims && x == n.inputs[0] {
                out.nodes.push(n.clone()); // nothing to rewrite
                return Ok(());
            }
            let op = Op::Reduce {
                kind,
                axes,
                keepdims: true,
            };
            let mut r = out.add_node(name("kept"), op, vec![x])?;
            if negate {
                r = out.add_node(name("min"), Op::Unary(Unary::Neg), r)?;
            }
            let want = g.ty(n.outputs[0]).shape.clone();
            let op = if out.ty(r[0]).shape == want {
                Op::Identity
            } else {
                Op::Reshape { shape: want }
            };
            out.nodes.push(Node {
                name: n.name.clone(),
                op,
                inputs: r,
                outputs: n.outputs.clone(),
            });
        }
        Op::Transpose { perm }
            if perm.len() > 2
                && perm[perm.len() - 1] != perm.len() - 1
                && !swaps_last_two(perm) =>
        {
            let r = perm.len();
            let j = perm[r - 1];
            // First: every other leading dimension in order, then j, the last kept.
            let mut q: Vec<usize> = (0..r - 1).filter(|d| *d != j).collect();
            q.push(j);
            q.push(r - 1);
            let mut swap: Vec<usize> = (0..r).collect();
            swap.swap(r - 2, r - 1);
            // After both, position k holds input dimension `order[k]`.
            let mut order = q.clone();
            order.swap(r - 2, r - 1);
            let last: Vec<usize> = perm
                .iter()
                .map(|p| order.iter().position(|o| o == p).unwrap_or(0))
                .collect();
            let mut x = n.inputs[0];
            for (k, p) in [q, swap].into_iter().enumerate() {
                let op = Op::Transpose { perm: p };
                x = out.add_node(format!("{}/step{k}", n.name), op, vec![x])?[0];
            }
            out.nodes.push(Node {
                name: n.name.clone(),
                op: Op::Transpose { perm: last },
                inputs: vec![x],
                outputs: n.outputs.clone(),
            });
        }
        Op::Where => {
            let shape = g.ty(n.outputs[0]).shape.clone();
            select(out, n, &shape)?;
            // The last node computes the result: it takes over the output value.
            if let Some(last) = out.nodes.last_mut() {
                last.outputs = n.outputs.clone();
            }
        }
        _ => out.nodes.push(n.clone()),
    }
    Ok(())
}

/// `x` (computed, last dimension 1) expanded to the last dimension of
/// `shape`, if it needs to be.
fn widen(
    g: &mut Graph,
    x: ValueId,
    shape: &[usize],
    node: &str,
) -> Result<Option<ValueId>, String> {
    let xs = g.ty(x).shape.clone();
    let (Some(&last), Some(&want)) = (xs.last(), shape.last()) else {
        return Ok(None);
    };
    if g.constants.contains_key(&x) || last != 1 || want == 1 {
        return Ok(None);
    }
    let elem = g.ty(x).elem;
    let ones = g.add_constant(
        format!("{node}/ones"),
        Tensor::new(
            TensorType {
                elem,
                shape: vec![1, want],
            },
            vec![1.0; want],
        ),
    );
    // A 1-D operand is a row: `[1] x [1, C]` is `[C]`... keep it 2-D.
    let a = if xs.len() == 1 {
        g.add_node(
            format!("{node}/as_row"),
            Op::Reshape { shape: vec![1, 1] },
            vec![x],
        )?[0]
    } else {
        x
    };
    let wide = g.add_node(format!("{node}/widen"), Op::MatMul, vec![a, ones])?;
    Ok(Some(wide[0]))
}

/// `Where(c, x, y)` as products and a sum (see the module doc); adds the
/// nodes, the last of which computes the result.
fn select(g: &mut Graph, n: &Node, shape: &[usize]) -> Result<(), String> {
    let (c, x, y) = (n.inputs[0], n.inputs[1], n.inputs[2]);
    let Some(cond) = g.constants.get(&c).cloned() else {
        return Err("a computed condition is not supported yet (only constant masks)".to_owned());
    };
    let elem = g.ty(x).elem;
    let mask = |g: &mut Graph, name: &str, on: f64, off: f64| {
        let data = cond
            .data
            .iter()
            .map(|b| if *b != 0.0 { on } else { off })
            .collect();
        let ty = TensorType {
            elem,
            shape: cond.ty.shape.clone(),
        };
        g.add_constant(format!("{}/{name}", n.name), Tensor::new(ty, data))
    };
    let (xc, yc) = (g.constants.get(&x).cloned(), g.constants.get(&y).cloned());
    // Which operand is computed (`a`, selected where the mask is `on`) and what the other adds.
    let (a, on) = match (&xc, &yc) {
        (None, _) => (x, 1.0),
        (Some(_), None) => (y, 0.0),
        (Some(_), Some(_)) => {
            return Err("both operands are constants; the node should have been folded".to_owned());
        }
    };
    let m = mask(g, "mask", on, 1.0 - on);
    let kept = g.add_node(format!("{}/kept", n.name), Op::Mul, vec![a, m])?;
    let other = match xc.as_ref().or(yc.as_ref()) {
        None => {
            let inv = mask(g, "inverse_mask", 0.0, 1.0);
            g.add_node(format!("{}/other", n.name), Op::Mul, vec![y, inv])?[0]
        }
        Some(k) => {
            // The constant where it is selected, 0 elsewhere, at the result's shape.
            let selected_when = if xc.is_some() { 1.0 } else { 0.0 };
            let cs = crate::lower::broadcast_offsets(&cond.ty.shape, shape);
            let ks = crate::lower::broadcast_offsets(&k.ty.shape, shape);
            let data = cs
                .iter()
                .zip(&ks)
                .map(|(&ci, &ki)| {
                    let on_x = cond.data[ci] != 0.0;
                    if f64::from(u8::from(on_x)) == selected_when {
                        k.data[ki]
                    } else {
                        0.0
                    }
                })
                .collect();
            let ty = TensorType {
                elem,
                shape: shape.to_vec(),
            };
            g.add_constant(format!("{}/selected", n.name), Tensor::new(ty, data))
        }
    };
    g.add_node(n.name.clone(), Op::Add, vec![kept[0], other])?;
    Ok(())
}

/// Whether a permutation swaps the last two dimensions and keeps the others.
fn swaps_last_two(perm: &[usize]) -> bool {
    let r = perm.len();
    r >= 2
        && perm[..r - 2].iter().enumerate().all(|(i, p)| i == *p)
        && perm[r - 2] == r - 1
        && perm[r - 1] == r - 2
}
