//! Fusion beyond epilogues: scaled-dot-product attention recognised as one
//! region whose intermediates stay on chip.
//!
//! The pattern, on the graph after the rewrites before lowering (`canon`):
//!
//! ```text
//! scores  = MatMul(q, kᵀ)            (kᵀ: a Transpose used only here, or any computed B)
//!   ... element-wise steps           (scale, mask: products and sums, with constants or
//!                                     computed operands from outside, e.g. a padding mask)
//!   ... softmax                      (ReduceMax, Sub, Exp, ReduceSum, Div, and the
//!                                     depth-1 products with ones that widen the row results)
//! context = MatMul(p, v)
//! ```
//!
//! Every value between `scores` and `context` (and `kᵀ`) must be used only
//! inside the pattern, and the softmax must be there (a maximum, an
//! exponential and a sum). The region's values other than `context`'s result
//! are then *kept on chip*: they get buffers in the memory where tiles from
//! the home memory land, live from their first write to their last read,
//! instead of a round trip through the home memory between the steps. What
//! does not fit (9/16 of that memory, beside the tiles of the steps) stays at
//! home, and the region is reported as not kept on chip.

use crate::ir::{Graph, Op, ReduceKind, Unary, ValueId};
use std::collections::{BTreeSet, HashMap};

/// One recognised attention.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    /// The nodes of the region (indices into the graph), in graph order.
    pub nodes: Vec<usize>,
    /// Values produced and consumed only inside the region.
    pub inner: Vec<ValueId>,
    /// `q · kᵀ`.
    pub scores: usize,
    /// `p · v`.
    pub context: usize,
}

/// Whether a node may sit between the two products of an attention.
fn between(g: &Graph, op: &Op, inputs: &[ValueId]) -> bool {
    match op {
        Op::Add
        | Op::Sub
        | Op::Mul
        | Op::Div
        | Op::Max
        | Op::Min
        | Op::Relu
        | Op::Unary(_)
        | Op::Reduce { .. }
        | Op::Reshape { .. }
        | Op::Identity => true,
        // A row result widened by a product with a constant row of ones.
        Op::MatMul => inputs.len() == 2 && g.constants.contains_key(&inputs[1]),
        _ => false,
    }
}

/// The nodes reading each value, and the node making each.
pub(super) type Uses = (HashMap<ValueId, Vec<usize>>, HashMap<ValueId, usize>);

/// [`Uses`] of graph `g`.
pub(super) fn uses(g: &Graph) -> Uses {
    let mut consumers: HashMap<ValueId, Vec<usize>> = HashMap::new();
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    for (ni, n) in g.nodes.iter().enumerate() {
        for &i in &n.inputs {
            consumers.entry(i).or_default().push(ni);
        }
        for &o in &n.outputs {
            producer.insert(o, ni);
        }
    }
    (consumers, producer)
}

/// Every attention in `g`.
pub fn attention(g: &Graph) -> Vec<Attention> {
    let (consumers, producer) = uses(g);
    let computed = |v: &ValueId| !g.constants.contains_key(v);
    let mut found = Vec::new();
    for (si, s) in g.nodes.iter().enumerate() {
        if !matches!(s.op, Op::MatMul) || !s.inputs.iter().all(computed) {
            continue;
        }
        // Forward from the scores to the one product that consumes the probabilities.
        let mut inside: BTreeSet<usize> = BTreeSet::from([si]);
        let mut context: Option<usize> = None;
        let mut stack = vec![s.outputs[0]];
        let mut ok = true;
        while let Some(v) = stack.pop() {
            if g.outputs.contains(&v) {
                ok = false;
                break;
            }
            for &ci in consumers.get(&v).map(Vec::as_slice).unwrap_or(&[]) {
                let c = &g.nodes[ci];
                if inside.contains(&ci) || context == Some(ci) {
                    continue;
                }
                if between(g, &c.op, &c.inputs) {
                    inside.insert(ci);
                    stack.extend(c.outputs.iter().copied());
                } else if matches!(c.op, Op::MatMul) && c.inputs[0] == v && computed(&c.inputs[1]) {
                    if context.is_some() {
                        ok = false;
                    }
                    context = Some(ci);
                } else {
                    ok = false;
                }
            }
            if !ok {
                break;
            }
        }
        let Some(ci) = context else { continue };
        if !ok {
            continue;
        }
        // The softmax's signature.
        let has = |f: &dyn Fn(&Op) -> bool| inside.iter().any(|&k| f(&g.nodes[k].op));
        if !has(&|op| {
            matches!(
                op,
                Op::Reduce {
                    kind: ReduceKind::Max,
                    ..
                }
            )
        }) || !has(&|op| matches!(op, Op::Unary(Unary::Exp)))
            || !has(&|op| {
                matches!(
                    op,
                    Op::Reduce {
                        kind: ReduceKind::Sum,
                        ..
                    }
                )
            })
        {
            continue;
        }
        // Every value made inside is used only inside (or by the context product).
        let within = |k: &usize| inside.contains(k) || *k == ci;
        let closed = inside.iter().all(|&k| {
            g.nodes[k].outputs.iter().all(|o| {
                !g.outputs.contains(o)
                    && consumers
                        .get(o)
                        .is_some_and(|cs| !cs.is_empty() && cs.iter().all(within))
            })
        });
        if !closed {
            continue;
        }
        // kᵀ, when a transpose makes it for these scores alone.
        if let Some(&ti) = producer.get(&s.inputs[1])
            && matches!(g.nodes[ti].op, Op::Transpose { .. })
            && consumers.get(&s.inputs[1]).is_some_and(|cs| cs == &[si])
            && !g.outputs.contains(&s.inputs[1])
        {
            inside.insert(ti);
        }
        inside.insert(ci);
        let nodes: Vec<usize> = inside.into_iter().collect();
        let inner = nodes
            .iter()
            .filter(|&&k| k != ci)
            .flat_map(|&k| g.nodes[k].outputs.iter().copied())
            .collect();
        found.push(Attention {
            nodes,
            inner,
            scores: si,
            context: ci,
        });
    }
    found
}
