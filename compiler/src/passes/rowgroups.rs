//! Row groups: the nodes a layer normalisation, a softmax or a GELU is made
//! of (element-wise nodes and reductions over the last dimension of one
//! shape), recognised on the graph so that the lowering computes each as one
//! region reading every row once (`lower::rows`).

use crate::ir::{Graph, Op, ReduceKind, ValueId};
use std::collections::HashSet;

/// One recognised group.
#[derive(Clone, Debug, PartialEq)]
pub struct RowGroup {
    /// Its nodes, in graph order (the first starts it).
    pub nodes: Vec<usize>,
    /// The one value it makes that is read outside it.
    pub output: ValueId,
    /// The node that started it; nodes before it came from its producer's
    /// epilogue (see [`row_groups_with`]).
    pub seed: usize,
}

impl RowGroup {
    /// Values made and read only inside the group (never in memory when it is fused).
    pub fn inner<'g>(&'g self, g: &'g Graph) -> impl Iterator<Item = ValueId> + 'g {
        self.nodes
            .iter()
            .map(|&k| g.nodes[k].outputs[0])
            .filter(|v| *v != self.output)
    }
}

/// The last dimension a reduction node reduces, with its dimensions kept.
pub fn row_reduce(g: &Graph, n: &crate::ir::Node) -> Option<ReduceKind> {
    let Op::Reduce {
        kind,
        axes,
        keepdims: true,
    } = &n.op
    else {
        return None;
    };
    let rank = g.ty(*n.inputs.first()?).shape.len();
    (rank >= 1 && axes.as_slice() == [rank - 1]).then_some(*kind)
}

pub fn elementwise(op: &Op) -> bool {
    crate::lower::types::Ew::of(op).is_some()
}

/// A constant a group can read: one value everywhere, one row, or the full shape.
pub fn constant_fits(g: &Graph, v: ValueId, full: &[usize]) -> bool {
    let Some(t) = g.constants.get(&v) else {
        return false;
    };
    if uniform(g, v).is_some() {
        return true;
    }
    let s = &t.ty.shape;
    s.as_slice() == full || const_row(s, full) || broadcast_rows(s, full)
}

/// A constant of shape `s` that is one row of `full` (`[C]`, `[1, C]`).
pub fn const_row(s: &[usize], full: &[usize]) -> bool {
    s.last() == full.last() && s.len() <= full.len() && s[..s.len() - 1].iter().all(|&d| d == 1)
}

/// A constant of shape `s` that `full` repeats along leading dimensions
/// only (a mask over every head): row `r` of `full` reads its row `r`
/// modulo its rows.
pub fn broadcast_rows(s: &[usize], full: &[usize]) -> bool {
    let own = &s[s.iter().take_while(|&&d| d == 1).count()..];
    own.len() >= 2 && own.len() <= full.len() && *own == full[full.len() - own.len()..]
}

/// The one value of rows `row0..row0 + h`, columns `c..c + w` of constant
/// `t` as a full shape repeating its rows reads it, if it has one.
pub fn chunk_uniform(t: &crate::ir::Tensor, row0: i64, h: i64, c: i64, w: i64) -> Option<f64> {
    let cols = *t.ty.shape.last()?;
    let own = t.data.len() / cols.max(1);
    let at = |r: i64| ((r as usize) % own.max(1)) * cols + c as usize;
    let first = *t.data.get(at(row0))?;
    (row0..row0 + h)
        .all(|r| {
            t.data
                .get(at(r)..at(r) + w as usize)
                .is_some_and(|xs| xs.iter().all(|x| x.to_bits() == first.to_bits()))
        })
        .then_some(first)
}

/// The value of a constant with one value in every element.
pub fn uniform(g: &Graph, v: ValueId) -> Option<f64> {
    let t = g.constants.get(&v)?;
    let k = *t.data.first()?;
    t.data
        .iter()
        .all(|x| x.to_bits() == k.to_bits())
        .then_some(k)
}

/// Every row group of `g` (see the module documentation).
pub fn row_groups(g: &Graph) -> Vec<RowGroup> {
    row_groups_with(g, &[], true)
}

/// [`row_groups`], where the groups started by the nodes `unfronted` do not
/// take their producers' element-wise nodes (the machine could not lower
/// them so: their producer keeps them in its epilogue), nor do groups
/// without reductions unless `rows_broadcast` (the machine loads a constant
/// row into every row of a register, so the group adds a bias as cheaply as
/// the producer's epilogue would).
pub fn row_groups_with(g: &Graph, unfronted: &[usize], rows_broadcast: bool) -> Vec<RowGroup> {
    let (consumers, producer) = super::fuse::uses(g);
    let float = |v: ValueId| g.ty(v).elem.is_float();
    let computed = |v: &ValueId| !g.constants.contains_key(v);
    let mut taken = vec![false; g.nodes.len()];
    let mut found = Vec::new();
    for si in 0..g.nodes.len() {
        let s = &g.nodes[si];
        if taken[si] || s.outputs.len() != 1 {
            continue;
        }
        // The seed's source: what a reduction reads, or an operand read by
        // several element-wise nodes.
        let x = if row_reduce(g, s).is_some() {
            s.inputs[0]
        } else if elementwise(&s.op) {
            let out_shape = &g.ty(s.outputs[0]).shape;
            let fans = |v: &ValueId| {
                consumers.get(v).is_some_and(|cs| {
                    cs.iter()
                        .filter(|&&c| elementwise(&g.nodes[c].op) && c >= si)
                        .count()
                        >= 2
                })
            };
            match s
                .inputs
                .iter()
                .find(|v| computed(v) && g.ty(**v).shape == *out_shape && fans(v))
            {
                Some(v) => *v,
                None => continue,
            }
        } else {
            continue;
        };
        if !computed(&x) || !float(x) {
            continue;
        }
        let full = g.ty(x).shape.clone();
        let Some(&c) = full.last() else { continue };
        if c == 0 {
            continue;
        }
        let mut row = full.clone();
        if let Some(l) = row.last_mut() {
            *l = 1;
        }
        let ready = |v: &ValueId| g.inputs.contains(v) || producer.get(v).is_some_and(|&p| p < si);
        let mut group: Vec<usize> = Vec::new();
        let mut made: HashSet<ValueId> = HashSet::new();
        for (nj, m) in g.nodes.iter().enumerate().skip(si) {
            if taken[nj] || m.outputs.len() != 1 || !float(m.outputs[0]) {
                continue;
            }
            let shape = &g.ty(m.outputs[0]).shape;
            let kind_fits = if elementwise(&m.op) {
                *shape == full || *shape == row
            } else if row_reduce(g, m).is_some() {
                g.ty(m.inputs[0]).shape == full
            } else {
                false
            };
            let inside = |v: &ValueId| made.contains(v) || *v == x;
            if !kind_fits || !m.inputs.iter().any(inside) {
                continue;
            }
            let operands_fit = m.inputs.iter().all(|v| {
                inside(v)
                    || constant_fits(g, *v, &full)
                    || (computed(v)
                        && ready(v)
                        && float(*v)
                        && (g.ty(*v).shape == full || g.ty(*v).shape == row))
            });
            if operands_fit {
                group.push(nj);
                made.insert(m.outputs[0]);
            }
        }
        // The output: the last node's result, and only what it needs.
        let Some(&last) = group.last() else { continue };
        let output = g.nodes[last].outputs[0];
        let mut need: HashSet<ValueId> = HashSet::from([output]);
        let mut keep: Vec<usize> = Vec::new();
        for &k in group.iter().rev() {
            if need.contains(&g.nodes[k].outputs[0]) {
                keep.push(k);
                need.extend(g.nodes[k].inputs.iter().copied());
            }
        }
        keep.reverse();
        let members: HashSet<usize> = keep.iter().copied().collect();
        let closed = keep.iter().all(|&k| {
            let o = g.nodes[k].outputs[0];
            o == output
                || (!g.outputs.contains(&o)
                    && consumers
                        .get(&o)
                        .is_some_and(|cs| cs.iter().all(|c| members.contains(c))))
        });
        let reduces = keep.iter().any(|&k| row_reduce(g, &g.nodes[k]).is_some());
        let fan_out = keep
            .iter()
            .filter(|&&k| g.nodes[k].inputs.contains(&x))
            .count()
            >= 2;
        if keep.len() < 2
            || keep[0] != si
            || !closed
            || g.ty(output).shape != full
            || !(reduces || fan_out)
        {
            continue;
        }
        // Element-wise producers of `x` read only by the group join it at
        // its front (a product's scaling and masking before a softmax, its
        // bias before a GELU): the group then reads the product's raw result
        // once, where the product's epilogue would write a value the group
        // reads again. Not for a group without reductions of a single row
        // (GELU in decode, whose one-row product adds its bias in
        // registers) or on a machine without row broadcasts (simd-dsp):
        // measured slower there.
        let rows: usize = full[..full.len() - 1].iter().product();
        let mut x = x;
        let front = (reduces || (rows > 1 && rows_broadcast)) && !unfronted.contains(&si);
        while let Some(&p) = producer.get(&x).filter(|_| front) {
            let pn = &g.nodes[p];
            let computed_in: Vec<ValueId> =
                pn.inputs.iter().copied().filter(|v| computed(v)).collect();
            let [y] = computed_in.as_slice() else { break };
            let read_here = consumers
                .get(&x)
                .is_some_and(|cs| cs.iter().all(|c| keep.contains(c)));
            // What the group reads from outside must be ready before `p`.
            let ready_before_p = |v: &ValueId| {
                !computed(v)
                    || g.inputs.contains(v)
                    || keep.iter().any(|&k| g.nodes[k].outputs.contains(v))
                    || *v == x
                    || producer.get(v).is_some_and(|&q| q < p)
            };
            let fits = !taken[p]
                && elementwise(&pn.op)
                && pn.outputs.len() == 1
                && !g.outputs.contains(&x)
                && read_here
                && g.ty(*y).shape == full
                && float(*y)
                && pn
                    .inputs
                    .iter()
                    .all(|v| v == y || constant_fits(g, *v, &full))
                && keep
                    .iter()
                    .all(|&k| g.nodes[k].inputs.iter().all(ready_before_p));
            if !fits {
                break;
            }
            keep.insert(0, p);
            x = *y;
        }
        for &k in &keep {
            taken[k] = true;
        }
        found.push(RowGroup {
            nodes: keep,
            output,
            seed: si,
        });
    }
    found
}
