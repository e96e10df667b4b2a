//! Layout changes that undo each other across element-wise operations.
//!
//! The rewrites before lowering move tensors between layouts one node at
//! a time: a convolution takes its image channels last and gives its
//! result back channels first ([`super::canon`]), so in a chain of
//! convolutions each result is transposed back and, after an activation,
//! transposed forth again for the next. [`cancel_transposes`] finds every
//! input read through a chain of views (reshapes and transposes) and
//! carries that chain back through the element-wise operations before it
//! (activations, clamps, scalings, sums of same-shaped values) to where it
//! meets the views that made their operands: where the two compose to no
//! move at all, the operations are computed in the reader's layout
//! straight from the earlier value, and the transposes on both sides are
//! left unread (and removed). Nothing is computed twice: the operations
//! carried back may be read by nothing else.

use std::collections::{HashMap, HashSet};

use crate::ir::{Graph, Node, Op, ValueId};

use super::fuse::uses;

/// A transpose or reshape: the same elements, moved or renamed.
fn is_view(op: &Op) -> bool {
    matches!(op, Op::Reshape { .. } | Op::Transpose { .. } | Op::Identity)
}

/// Element-wise operations a layout change passes through unchanged.
fn is_elementwise(op: &Op) -> bool {
    matches!(
        op,
        Op::Relu
            | Op::Unary(_)
            | Op::Cast { .. }
            | Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Max
            | Op::Min
    )
}

/// The largest tensor whose layout chain is checked element by element.
const MAX_CHECKED: usize = 1 << 24;

/// Whether `views`, applied in order to a tensor of shape `from`, leave
/// every element where it was (a reshape at most), ending in shape `to`.
fn moves_nothing(g: &Graph, views: &[usize], from: &[usize], to: &[usize]) -> bool {
    let n: usize = from.iter().product();
    if n != to.iter().product::<usize>() || n > MAX_CHECKED {
        return false;
    }
    if views
        .iter()
        .all(|&v| !matches!(g.nodes[v].op, Op::Transpose { .. }))
    {
        return true;
    }
    let mut shape = from.to_vec();
    let mut at: Vec<u32> = (0..n as u32).collect();
    for &v in views {
        match &g.nodes[v].op {
            Op::Reshape { shape: s } => shape = s.clone(),
            Op::Transpose { perm } => {
                at = transposed(&at, &shape, perm);
                shape = perm.iter().map(|&p| shape[p]).collect();
            }
            _ => {}
        }
    }
    at.iter().enumerate().all(|(i, &x)| i as u32 == x)
}

/// `data` of `shape` with its dimensions permuted by `perm`.
fn transposed(data: &[u32], shape: &[usize], perm: &[usize]) -> Vec<u32> {
    let mut strides = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let out_strides: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    crate::interp::offsets(&out_shape, &out_strides)
        .into_iter()
        .map(|i| data[i])
        .collect()
}

/// What the reader's views carried back to value `v` meet.
enum Meets {
    /// A value that, seen through `v`'s own views and the reader's, is
    /// the reader's input as it lies (reshaped at most).
    Source(ValueId),
    /// A constant of one element, broadcast either way.
    Scalar,
    /// An element-wise node, carried through.
    Node(usize),
}

/// Carries the reader's `views` (applied to `v`, in order) back from `v`.
struct Carry<'a> {
    g: &'a Graph,
    views: &'a [usize],
    to: &'a [usize],
    producer: &'a HashMap<ValueId, usize>,
    met: HashMap<ValueId, Meets>,
}

impl Carry<'_> {
    /// Whether the views carried back from `v` end, on every path, at a
    /// value they undo or at a scalar; records what each value meets.
    fn reach(&mut self, v: ValueId, depth: usize) -> bool {
        if self.met.contains_key(&v) {
            return true;
        }
        let g = self.g;
        let shape = &g.ty(v).shape;
        if g.constants.get(&v).is_some_and(|t| t.data.len() == 1) {
            self.met.insert(v, Meets::Scalar);
            return true;
        }
        // `v`'s own views, walked back one at a time: the furthest value
        // they undo, so that the operations read it as it was made.
        let mut back: Vec<usize> = Vec::new();
        let mut u = v;
        let mut source = None;
        loop {
            let mut all: Vec<usize> = back.iter().rev().copied().collect();
            all.extend_from_slice(self.views);
            if moves_nothing(g, &all, &g.ty(u).shape, self.to) {
                source = Some(u);
            }
            match self.producer.get(&u) {
                Some(&p) if is_view(&g.nodes[p].op) && back.len() < 8 => {
                    back.push(p);
                    u = g.nodes[p].inputs[0];
                }
                _ => break,
            }
        }
        if let Some(u) = source {
            self.met.insert(v, Meets::Source(u));
            return true;
        }
        let Some(&p) = self.producer.get(&v) else {
            return false;
        };
        let n = &g.nodes[p];
        if depth == 0 || !is_elementwise(&n.op) || n.outputs.len() != 1 {
            return false;
        }
        let ok = n.inputs.iter().all(|&i| {
            let scalar = g.constants.get(&i).is_some_and(|t| t.data.len() == 1);
            scalar || (&g.ty(i).shape == shape && self.reach(i, depth - 1))
        });
        if ok {
            self.met.insert(v, Meets::Node(p));
        }
        ok
    }
}

/// Rewrites `g` so that no element-wise chain is read through views that
/// undo the views before it (see the module's documentation).
pub fn cancel_transposes(g: Graph) -> Graph {
    let mut g = g;
    for _ in 0..256 {
        if !cancel_one(&mut g) {
            break;
        }
    }
    g
}

/// One rewrite, if any applies.
fn cancel_one(g: &mut Graph) -> bool {
    let (consumers, producer) = uses(g);
    for ri in 0..g.nodes.len() {
        if is_view(&g.nodes[ri].op) {
            continue;
        }
        for slot in 0..g.nodes[ri].inputs.len() {
            let r = g.nodes[ri].inputs[slot];
            // The reader's views, from the value before them to `r`.
            let mut views = Vec::new();
            let mut v = r;
            while let Some(&p) = producer.get(&v) {
                if !is_view(&g.nodes[p].op) || views.len() >= 8 {
                    break;
                }
                views.push(p);
                v = g.nodes[p].inputs[0];
            }
            views.reverse();
            let transposes = views
                .iter()
                .any(|&p| matches!(g.nodes[p].op, Op::Transpose { .. }));
            if !transposes {
                continue;
            }
            let to = g.ty(r).shape.clone();
            let mut carry = Carry {
                g,
                views: &views,
                to: &to,
                producer: &producer,
                met: HashMap::new(),
            };
            if !carry.reach(v, 16) {
                continue;
            }
            let met = carry.met;
            // The nodes carried through, read by nothing else.
            let carried: HashSet<usize> = met
                .values()
                .filter_map(|m| match m {
                    Meets::Node(p) => Some(*p),
                    _ => None,
                })
                .collect();
            let first_view = views[0];
            let private = carried.iter().all(|&p| {
                let out = g.nodes[p].outputs[0];
                !g.outputs.contains(&out)
                    && consumers.get(&out).is_some_and(|cs| {
                        cs.iter()
                            .all(|c| carried.contains(c) || (out == v && *c == first_view))
                    })
            });
            if !private {
                continue;
            }
            // A node the new layout's types refuse leaves the graph as it was.
            let (nodes, values) = (g.nodes.len(), g.values.len());
            if rebuild(g, ri, slot, v, &met, &to).is_ok() {
                drop_unread(g);
                return true;
            }
            g.nodes.truncate(nodes);
            g.values.truncate(values);
        }
    }
    false
}

/// Computes `v` in the reader's layout before node `ri` and makes input
/// `slot` of it read that. On an error only nodes and values past the
/// graph's ends have been added.
fn rebuild(
    g: &mut Graph,
    ri: usize,
    slot: usize,
    v: ValueId,
    met: &HashMap<ValueId, Meets>,
    to: &[usize],
) -> Result<(), String> {
    let end = g.nodes.len();
    let mut made: HashMap<ValueId, ValueId> = HashMap::new();
    let mut order: Vec<usize> = met
        .values()
        .filter_map(|m| match m {
            Meets::Node(p) => Some(*p),
            _ => None,
        })
        .collect();
    order.sort_unstable();
    // The operations run in their sources' shape where they all have one
    // (so they may fuse with what makes them), else in the reader's.
    let shapes: HashSet<&Vec<usize>> = met
        .values()
        .filter_map(|m| match m {
            Meets::Source(u) => Some(&g.ty(*u).shape),
            _ => None,
        })
        .collect();
    let within = match shapes.iter().next() {
        Some(s) if shapes.len() == 1 => s.to_vec(),
        _ => to.to_vec(),
    };
    let reshaped = |g: &mut Graph, u: ValueId, shape: &[usize]| {
        if g.ty(u).shape == shape {
            return Ok(u);
        }
        let name = format!("{}/relaid", g.values[u.index()].name);
        let op = Op::Reshape {
            shape: shape.to_vec(),
        };
        g.add_node(name, op, vec![u]).map(|v| v[0])
    };
    let value_of = |g: &mut Graph, made: &HashMap<ValueId, ValueId>, x: ValueId| match met.get(&x) {
        Some(Meets::Source(u)) => reshaped(g, *u, &within),
        Some(Meets::Node(_)) => Ok(made[&x]),
        Some(Meets::Scalar) | None => Ok(x),
    };
    for p in order {
        let n = g.nodes[p].clone();
        let inputs = n
            .inputs
            .iter()
            .map(|&i| value_of(g, &made, i))
            .collect::<Result<Vec<_>, _>>()?;
        let y = g.add_node(format!("{}/relaid", n.name), n.op.clone(), inputs)?[0];
        made.insert(n.outputs[0], y);
    }
    let y = value_of(g, &made, v)?;
    let y = reshaped(g, y, to)?;
    // The new nodes go just before the reader.
    let new: Vec<Node> = g.nodes.drain(end..).collect();
    g.nodes[ri].inputs[slot] = y;
    let tail: Vec<Node> = g.nodes.drain(ri..).collect();
    g.nodes.extend(new);
    g.nodes.extend(tail);
    Ok(())
}

/// Removes the nodes whose results nothing reads and that are no outputs.
fn drop_unread(g: &mut Graph) {
    loop {
        let read: HashSet<ValueId> = g
            .nodes
            .iter()
            .flat_map(|n| n.inputs.iter().copied())
            .chain(g.outputs.iter().copied())
            .collect();
        let before = g.nodes.len();
        g.nodes
            .retain(|n| n.outputs.iter().any(|o| read.contains(o)));
        if g.nodes.len() == before {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{ElemType, Tensor, TensorType, Unary};

    fn f32s(shape: &[usize]) -> TensorType {
        TensorType {
            elem: ElemType::F32,
            shape: shape.to_vec(),
        }
    }

    /// `x [1, 2, 3, 4]` moved channels last, activated, scaled, added to
    /// itself, moved back and negated; `also` is read besides, as given.
    fn chain(back: &[usize], also: Option<&str>) -> Graph {
        let mut g = Graph::default();
        let x = g.add_value("x", f32s(&[1, 2, 3, 4]));
        g.inputs.push(x);
        let two = g.add_constant("two", Tensor::new(f32s(&[]), vec![2.0]));
        let add = |g: &mut Graph, name: &str, op: Op, ins: Vec<ValueId>| {
            g.add_node(name, op, ins).expect("typed")[0]
        };
        let p = add(
            &mut g,
            "planes",
            Op::Reshape {
                shape: vec![1, 2, 12],
            },
            vec![x],
        );
        let t = add(
            &mut g,
            "last",
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            vec![p],
        );
        let t = add(
            &mut g,
            "pixels",
            Op::Reshape {
                shape: vec![1, 3, 4, 2],
            },
            vec![t],
        );
        let r = add(&mut g, "relu", Op::Relu, vec![t]);
        let s = add(&mut g, "scale", Op::Mul, vec![r, two]);
        let d = add(&mut g, "sum", Op::Add, vec![s, r]);
        let b = add(
            &mut g,
            "first",
            Op::Transpose {
                perm: back.to_vec(),
            },
            vec![d],
        );
        let y = add(&mut g, "neg", Op::Unary(Unary::Neg), vec![b]);
        g.outputs.push(y);
        if let Some(name) = also {
            let v = g
                .nodes
                .iter()
                .find(|n| n.name == name)
                .expect("node")
                .outputs[0];
            g.outputs.push(v);
        }
        g
    }

    fn transposes(g: &Graph) -> usize {
        g.nodes
            .iter()
            .filter(|n| matches!(n.op, Op::Transpose { .. }))
            .count()
    }

    fn same_results(a: &Graph, b: &Graph) {
        let x: Vec<f64> = (0..24).map(|i| f64::from(i) * 0.37 - 4.0).collect();
        let x = Tensor::new(f32s(&[1, 2, 3, 4]), x);
        let ra = crate::interp::run(a, std::slice::from_ref(&x)).expect("runs");
        let rb = crate::interp::run(b, &[x]).expect("runs");
        assert_eq!(ra.len(), rb.len());
        for (p, q) in ra.iter().zip(&rb) {
            assert_eq!(p.ty, q.ty);
            assert_eq!(p.data.to_vec(), q.data.to_vec());
        }
    }

    /// The transposes undo each other across the activation, the scaling
    /// and the sum: both go, and the results are the same.
    #[test]
    fn transposes_that_undo_each_other_across_element_wise_nodes_go() {
        let g = chain(&[0, 3, 1, 2], None);
        assert_eq!(transposes(&g), 2);
        let h = cancel_transposes(g.clone());
        assert_eq!(transposes(&h), 0, "{:#?}", h.nodes);
        same_results(&g, &h);
    }

    /// A transpose back that is not the inverse, or an operation another
    /// node (here the graph's outputs) also reads, leaves the graph as it
    /// is: nothing is computed twice.
    #[test]
    fn other_moves_and_shared_operations_stay() {
        for (back, also) in [
            (&[0, 3, 2, 1][..], None),
            (&[0, 3, 1, 2][..], Some("relu")),
            (&[0, 3, 1, 2][..], Some("scale")),
        ] {
            let g = chain(back, also);
            let h = cancel_transposes(g.clone());
            assert_eq!(h, g, "{back:?} {also:?}");
        }
    }

    /// The index map of a transpose, checked against the direct formula.
    #[test]
    fn transposing_indices() {
        let shape = [2, 3, 4];
        let data: Vec<u32> = (0..24).collect();
        let t = transposed(&data, &shape, &[2, 0, 1]);
        for a in 0..4 {
            for b in 0..2 {
                for c in 0..3 {
                    assert_eq!(t[(a * 2 + b) * 3 + c], (b * 12 + c * 4 + a) as u32);
                }
            }
        }
    }
}
