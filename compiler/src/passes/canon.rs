//! Graph rewrites before lowering, into forms the tile lowering handles:
//!
//! - a computed operand broadcast along its last dimension (`x[.., c] op
//!   s[.., 1]`, as softmax and layer normalisation do) is left to the
//!   lowering where the machine broadcasts lanes in registers and the other
//!   operand is computed at the full shape; otherwise it is first expanded
//!   to the full width by a product with a row of ones (`s · 1[1, C]`, a
//!   contraction of depth 1, which every machine with a matrix product has);
//! - a reduction that drops its dimensions (`keepdims = 0`) keeps them and is
//!   followed by a `Reshape`; one over several trailing dimensions reduces a
//!   `Reshape` that merges them;
//! - on a machine without a minimum reduction, `min(x)` is `-max(-x)`;
//!   without rounding, `round(x)` is `(x + 1.5·2^23) - 1.5·2^23` in f32
//!   (halves to even, for |x| < 2^22);
//! - a transpose that moves the last dimension and others is a permutation of
//!   the rows (the last dimension kept), a swap of the last two dimensions,
//!   and another permutation of the rows;
//! - a per-channel scale and shift after a convolution with constant weights
//!   (an inference-mode BatchNormalization) is folded into its weights and
//!   bias;
//! - a 2-D convolution over a channel count that is a multiple of the
//!   transfer alignment's elements (where those are more than one, see
//!   [`Caps::conv_rows`]) moves its image channels last and takes its
//!   windows as rows of it (`Im2Row`, `[N, OH·OW, KH·KW·C]`), then one
//!   product with the reordered weights (a 1×1 window with stride 1 and no
//!   padding reads the image itself); a depthwise one is a window sum over
//!   that image (`WindowSum`). Any other is a product of its weights
//!   `[M, C·KH·KW]` with the windows laid out as rows (`Im2Col`,
//!   `[N, C·KH·KW, OH·OW]`), per group, plus the bias; pooling combines
//!   the `KH·KW` rows of each window element-wise (maximum, or a sum times
//!   `1/count`);
//! - `Where` with a constant condition (a mask) is a product with the mask
//!   plus the other operand's selected values: `x · m + where(c, 0, y)` when
//!   `y` is constant (exact, also for `y = -inf`, as long as `x` is finite),
//!   `x · m + y · (1 - m)` when both are computed. A computed condition is
//!   refused;
//! - `Gather` with constant indices is slices of the data (runs of
//!   consecutive indices one slice each) joined along the axis; with
//!   computed indices into a constant table along its first dimension (an
//!   embedding lookup) it is a one-hot product: `hot[v, j] = relu(1 - (i_j -
//!   v)²) + relu(1 - (i_j + V - v)²)` (exact on integers held in f32; the
//!   second term takes negative indices), `hotᵀ · table`. Other Gathers
//!   are refused.

use super::PassError;
use crate::ir::{
    Graph, Node, Op, PoolKind, ReduceKind, Tensor, TensorType, Unary, ValueId, Window,
};

/// What the machine has that the rewrites depend on.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// A minimum reduction.
    pub min_reduction: bool,
    /// A row result is broadcast along the lanes in registers (a lane
    /// broadcast, [`crate::lower::ops::broadcast_lanes`]) where it meets a computed
    /// operand of the full width, instead of widened by a product first.
    pub lane_broadcast: bool,
    /// The columns of one register of the file row groups compute in, if
    /// any (a row wider than this has chunks a mask keeps whole).
    pub row_chunk: Option<usize>,
    /// That file masks by element position (a causal mask costs no load,
    /// `lower::rows::MaskByPosition`), so a mask of 0 and 1 saves its
    /// loads even where a row is one register wide.
    pub mask_by_position: bool,
    /// The elements of the home memory's transfer alignment: convolutions
    /// over a multiple of this many channels, where it is more than one,
    /// take their windows as rows of the channels-last image (`Im2Row`),
    /// moved in blocks; depthwise ones are window sums over that image
    /// (`WindowSum`). `None` keeps every convolution in `Im2Col`'s form.
    pub conv_rows: Option<usize>,
    /// A product reads a computed `B` laid out as rows of `N` (its
    /// transpose) as it lies: a convolution's product then reads its
    /// windows so and writes its result channels first.
    pub b_as_rows: bool,
    /// Products read a convolution's windows (`Im2Row`) in place, from
    /// the rows of the image (`lower`'s window operands).
    pub windows_in_place: bool,
    /// Every product of this machine reads its operands in a type narrower
    /// than f32 (bf16): a row result a comparison broadcasts, widened by a
    /// product with ones, is first split into parts that type holds
    /// exactly (see [`widen_compared`]).
    pub narrow_products: bool,
}

/// The graph with the rewrites applied (unchanged when none applies).
pub fn prepare(g: &Graph, caps: Caps) -> Result<Graph, PassError> {
    let folded = fold_scale_shift(g);
    let g = &folded;
    let mut out = Graph {
        values: g.values.clone(),
        nodes: Vec::with_capacity(g.nodes.len()),
        inputs: g.inputs.clone(),
        outputs: g.outputs.clone(),
        constants: g.constants.clone(),
    };
    for n in &g.nodes {
        rewrite(g, &mut out, n, caps).map_err(|message| PassError {
            node: n.name.clone(),
            op: n.op.name().to_owned(),
            message,
        })?;
    }
    let out = match caps.row_chunk {
        Some(chunk) => fold_scales_into_projections(out, chunk, caps.mask_by_position),
        None => out,
    };
    Ok(fold_power_of_two_scales(out))
}

/// `(A · B) · 2^k`, where `A` is a block of columns of `x · W + b` seen
/// through views (attention's queries, split from one projection into
/// heads), as `A' · B` with `A'` from `x · W · s + b · s`, `s` a constant
/// row holding `2^k` over that block of columns and 1 elsewhere: attention's
/// scale goes into the projection's epilogue (a multiply-add instead of an
/// add), so the mask a `Where` becomes holds 0 and 1 and the scores below
/// the diagonal need no operation at all (`rows`). The weights are not
/// copied. Exact: a power of two only moves the exponent (barring overflow
/// and subnormal results). Only where a product with a constant (the mask)
/// reads the scaled scores, their rows are wider than one register of the
/// row groups' file (`chunk`) or that file masks by position (`by_position`:
/// a mask of 0 and 1 is then computed, not loaded), and the other blocks
/// of columns are read by slices that do not overlap this one.
fn fold_scales_into_projections(g: Graph, chunk: usize, by_position: bool) -> Graph {
    let mut g = g;
    let (consumers, producer) = super::fuse::uses(&g);
    let used_once = |g: &Graph, v: ValueId| {
        !g.outputs.contains(&v) && consumers.get(&v).is_some_and(|c| c.len() == 1)
    };
    let power_of_two = |g: &Graph, v: ValueId| -> Option<f64> {
        let t = g.constants.get(&v)?;
        let c = *t.data.first()?;
        let pow2 = c.is_normal() && c.to_bits() & ((1 << 52) - 1) == 0;
        (t.data.iter().all(|x| x.to_bits() == c.to_bits()) && pow2).then_some(c)
    };
    let mut dropped: Vec<usize> = Vec::new();
    let mut inserted: Vec<(usize, Node)> = Vec::new();
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        if !matches!(n.op, Op::Mul) || n.inputs.len() != 2 {
            continue;
        }
        let Some((scores, c)) = [(0, 1), (1, 0)]
            .into_iter()
            .find_map(|(si, ci)| power_of_two(&g, n.inputs[ci]).map(|c| (n.inputs[si], c)))
        else {
            continue;
        };
        let Some(&mi) = producer.get(&scores) else {
            continue;
        };
        let wide = by_position || g.ty(scores).shape.last().is_some_and(|&w| w > chunk);
        if !matches!(g.nodes[mi].op, Op::MatMul) || !used_once(&g, scores) || !wide {
            continue;
        }
        // Only where a product with a constant (a mask) reads the scaled
        // scores: the scale would go into it otherwise, and the mask of 0
        // and 1 is what saves the operations.
        let masked = consumers.get(&n.outputs[0]).is_some_and(|cs| {
            cs.len() == 1
                && matches!(g.nodes[cs[0]].op, Op::Mul)
                && g.nodes[cs[0]]
                    .inputs
                    .iter()
                    .any(|x| g.constants.contains_key(x))
        });
        if !masked {
            continue;
        }
        // Up from `A` through views read once.
        let mut v = g.nodes[mi].inputs[0];
        let slice = loop {
            let Some(&p) = producer.get(&v) else {
                break None;
            };
            if !used_once(&g, v) {
                break None;
            }
            match g.nodes[p].op {
                Op::Transpose { .. } | Op::Reshape { .. } | Op::Identity => {
                    v = g.nodes[p].inputs[0];
                }
                Op::Slice { .. } => break Some(p),
                _ => break None,
            }
        };
        let Some(si) = slice else { continue };
        let Some((c0, c1)) = slice_columns(&g, &g.nodes[si]) else {
            continue;
        };
        // `x · W + b`, its other readers slices of other columns.
        let sum = g.nodes[si].inputs[0];
        let Some(&ai) = producer.get(&sum) else {
            continue;
        };
        let others_apart = consumers.get(&sum).is_some_and(|cs| {
            cs.iter().all(|&k| {
                k == si || slice_columns(&g, &g.nodes[k]).is_some_and(|(a, b)| b <= c0 || a >= c1)
            })
        });
        if !matches!(g.nodes[ai].op, Op::Add) || !others_apart || g.outputs.contains(&sum) {
            continue;
        }
        let Some((prod, b)) = [(0, 1), (1, 0)].into_iter().find_map(|(pi, bi)| {
            let (p, b) = (g.nodes[ai].inputs[pi], g.nodes[ai].inputs[bi]);
            g.constants.contains_key(&b).then_some((p, b))
        }) else {
            continue;
        };
        let cols = g.ty(sum).shape.last().copied().unwrap_or(0);
        let made_by_product = producer
            .get(&prod)
            .is_some_and(|&k| matches!(g.nodes[k].op, Op::MatMul));
        let Some(bt) = g.constants.get(&b).filter(|t| {
            t.ty.shape.last() == Some(&cols) && t.ty.numel() == cols && used_once(&g, b)
        }) else {
            continue;
        };
        if !made_by_product || !used_once(&g, prod) || g.ty(prod).shape != g.ty(sum).shape {
            continue;
        }
        let row: Vec<f64> = (0..cols)
            .map(|j| if (c0..c1).contains(&j) { c } else { 1.0 })
            .collect();
        let scaled: Vec<f64> = bt.data.iter().zip(&row).map(|(x, s)| x * s).collect();
        let exact = scaled.iter().all(|&y| {
            let f = y as f32;
            (f == 0.0 || f.is_normal()) && f64::from(f) == y
        });
        if !exact {
            continue;
        }
        let (bty, pty) = (bt.ty.clone(), g.ty(prod).clone());
        let name = g.nodes[ai].name.clone();
        let srow = g.add_constant(
            format!("{name}/scale"),
            Tensor::new(
                TensorType {
                    elem: bty.elem,
                    shape: vec![cols],
                },
                row,
            ),
        );
        let b2 = g.add_constant(format!("{name}/scaled_bias"), Tensor::new(bty, scaled));
        let m = g.add_value(format!("{name}/scaled_product"), pty);
        inserted.push((
            ai,
            Node {
                name: format!("{name}/scale"),
                op: Op::Mul,
                inputs: vec![prod, srow],
                outputs: vec![m],
            },
        ));
        for x in &mut g.nodes[ai].inputs {
            if *x == prod {
                *x = m;
            } else if *x == b {
                *x = b2;
            }
        }
        // The scale's readers read the product.
        let out = g.nodes[i].outputs[0];
        for k in &mut g.nodes {
            for x in &mut k.inputs {
                if *x == out {
                    *x = scores;
                }
            }
        }
        for x in &mut g.outputs {
            if *x == out {
                *x = scores;
            }
        }
        dropped.push(i);
    }
    // Each new scale before the sum it feeds; the scales of the scores gone.
    let mut nodes = Vec::with_capacity(g.nodes.len() + inserted.len());
    for (k, n) in std::mem::take(&mut g.nodes).into_iter().enumerate() {
        if let Some(at) = inserted.iter().position(|(ai, _)| *ai == k) {
            nodes.push(inserted.swap_remove(at).1);
        }
        if !dropped.contains(&k) {
            nodes.push(n);
        }
    }
    g.nodes = nodes;
    g
}

/// `(x · 2^k) · K` (the product used once, `K` constant) as `x · (K · 2^k)`:
/// attention's scale folded into the mask a `Where` became, one
/// multiplication fewer per element. Exact: a power of two only moves the
/// exponent, so both forms round the same real product once (barring
/// overflow and subnormal intermediates). Only where every `K · 2^k` is an
/// f32 exactly.
fn fold_power_of_two_scales(g: Graph) -> Graph {
    let mut g = g;
    let mut uses: std::collections::HashMap<ValueId, usize> = Default::default();
    for n in &g.nodes {
        for i in &n.inputs {
            *uses.entry(*i).or_default() += 1;
        }
    }
    let power_of_two = |g: &Graph, v: ValueId| -> Option<f64> {
        let t = g.constants.get(&v)?;
        let c = *t.data.first()?;
        let uniform = t.data.iter().all(|x| x.to_bits() == c.to_bits());
        // A normal power of two: no mantissa bits.
        let pow2 = c.is_normal() && c.to_bits() & ((1 << 52) - 1) == 0;
        (uniform && pow2).then_some(c)
    };
    let mut dropped = vec![false; g.nodes.len()];
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        if !matches!(n.op, Op::Mul) || n.inputs.len() != 2 {
            continue;
        }
        // `n` = a · K, `a` made by an earlier node `p` = x · c.
        let Some((a, k)) = [(0, 1), (1, 0)].into_iter().find_map(|(ai, ki)| {
            let (a, k) = (n.inputs[ai], n.inputs[ki]);
            (g.constants.contains_key(&k) && !g.constants.contains_key(&a)).then_some((a, k))
        }) else {
            continue;
        };
        let Some(p) = g.nodes[..i].iter().position(|q| {
            q.outputs.first() == Some(&a) && matches!(q.op, Op::Mul) && q.inputs.len() == 2
        }) else {
            continue;
        };
        if dropped[p] || uses.get(&a) != Some(&1) || g.outputs.contains(&a) {
            continue;
        }
        let pn = &g.nodes[p];
        let Some((x, c)) = [(0, 1), (1, 0)]
            .into_iter()
            .find_map(|(xi, ci)| power_of_two(&g, pn.inputs[ci]).map(|c| (pn.inputs[xi], c)))
        else {
            continue;
        };
        let kt = &g.constants[&k];
        let scaled: Vec<f64> = kt.data.iter().map(|v| v * c).collect();
        let exact = scaled
            .iter()
            .zip(kt.data.iter())
            .all(|(s, v)| s.is_finite() && f64::from(*s as f32) == *s && s / c == *v);
        // The product keeps its shape only if `x` broadcasts no wider than `a`.
        if !exact || g.ty(x).shape != g.ty(a).shape {
            continue;
        }
        let ty = kt.ty.clone();
        let name = format!("{}/scaled", g.nodes[i].name);
        let folded = g.add_constant(name, Tensor::new(ty, scaled));
        let n = &mut g.nodes[i];
        n.inputs = vec![x, folded];
        dropped[p] = true;
    }
    let mut k = 0;
    g.nodes.retain(|_| {
        k += 1;
        !dropped[k - 1]
    });
    g
}

/// Adds node `n` of `g` to `out`, rewritten if a rule applies.
fn rewrite(g: &Graph, out: &mut Graph, n: &Node, caps: Caps) -> Result<(), String> {
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
                    ins.push(out.add_constant(name, Tensor::new(ty, t.data.to_vec())));
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
            // The lowering broadcasts a one-column operand along a computed
            // running value of the full shape (not a constant: those are
            // expanded at home and never run in registers first).
            let full = n
                .inputs
                .iter()
                .any(|v| !g.constants.contains_key(v) && g.ty(*v).shape == shape);
            if caps.lane_broadcast && full {
                out.nodes.push(n.clone());
                return Ok(());
            }
            for x in inputs.iter_mut() {
                if let Some(wide) = widen(out, *x, &shape, &n.name, false)? {
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
            let negate = kind == ReduceKind::Min && !caps.min_reduction;
            if negate {
                x = out.add_node(name("negated"), Op::Unary(Unary::Neg), vec![x])?[0];
                kind = ReduceKind::Max;
            }
            // Reduced dimensions that are not the last ones moved last (the
            // others keep their order, so the result reshapes to the node's).
            let rank = out.ty(x).shape.len();
            let mut sorted = axes.clone();
            sorted.sort_unstable();
            if !sorted.iter().copied().eq(rank - sorted.len()..rank) {
                let perm: Vec<usize> = (0..rank)
                    .filter(|a| !sorted.contains(a))
                    .chain(sorted.iter().copied())
                    .collect();
                x = transpose(out, &name("reduced_last"), x, &perm)?;
                axes = (rank - sorted.len()..rank).collect();
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
            finish(out, n, r[0]);
        }
        Op::Transpose { perm }
            if perm.len() > 2
                && perm[perm.len() - 1] != perm.len() - 1
                && !crate::ir::swaps_last_two(perm) =>
        {
            let (x, last) = transpose_steps(out, &n.name, n.inputs[0], perm)?;
            out.nodes.push(Node {
                name: n.name.clone(),
                op: Op::Transpose { perm: last },
                inputs: vec![x],
                outputs: n.outputs.clone(),
            });
        }
        Op::Conv { window, groups } => {
            let c = g.ty(n.inputs[0]).shape[1];
            let m = g.ty(n.inputs[1]).shape[0];
            let depthwise = *groups == c && m == c && g.constants.contains_key(&n.inputs[1]);
            match caps.conv_rows {
                // Where a transfer cannot start at any element, or where
                // the products read the windows in place (not written at
                // home `KH·KW` times over, as `Im2Col`'s are); a pointwise
                // window elsewhere is the image itself either way, and
                // `Im2Col`'s needs no transposes.
                Some(per)
                    if *groups <= 1
                        && (per > 1 || (caps.windows_in_place && !window.is_pointwise()))
                        && c.is_multiple_of(per) =>
                {
                    conv_rows(g, out, n, window, (per, caps.b_as_rows))?;
                }
                Some(per) if depthwise && c.is_multiple_of(per.max(1)) => {
                    conv_depthwise(g, out, n, window, per)?;
                }
                _ => conv(g, out, n, window, *groups)?,
            }
        }
        Op::Pool { kind, window } => pool(g, out, n, *kind, window)?,
        Op::Gather { axis } => {
            let y = gather(out, n, *axis)?;
            finish(out, n, y);
        }
        Op::Where => {
            select(out, n)?;
            // The last node computes the result: it takes over the output value.
            if let Some(last) = out.nodes.last_mut() {
                last.outputs = n.outputs.clone();
            }
        }
        _ => out.nodes.push(n.clone()),
    }
    Ok(())
}

/// The graph with each computed row result that a comparison broadcasts
/// against a full operand widened exactly (see [`widen`]), where the
/// machine's products read f32 in a narrower type and it has no lane
/// broadcast to compare them as they are. Runs before instruction
/// selection, which rewrites comparisons into arithmetic where the row
/// result's use as a comparison's operand is no longer seen; every other
/// widening is the plain product (`prepare`).
pub fn widen_compared(g: &Graph, caps: Caps) -> Result<Graph, PassError> {
    let mut out = g.clone();
    if !caps.narrow_products {
        return Ok(out);
    }
    out.nodes.clear();
    for n in &g.nodes {
        if !matches!(n.op, Op::Less | Op::LessOrEqual) {
            out.nodes.push(n.clone());
            continue;
        }
        let shape = g.ty(n.outputs[0]).shape.clone();
        let full = n
            .inputs
            .iter()
            .any(|v| !g.constants.contains_key(v) && g.ty(*v).shape == shape);
        let mut inputs = n.inputs.clone();
        if !(caps.lane_broadcast && full) {
            for x in inputs.iter_mut() {
                let wide =
                    widen(&mut out, *x, &shape, &n.name, true).map_err(|message| PassError {
                        node: n.name.clone(),
                        op: n.op.name().to_owned(),
                        message,
                    })?;
                if let Some(wide) = wide {
                    *x = wide;
                }
            }
        }
        out.nodes.push(Node {
            inputs,
            ..n.clone()
        });
    }
    Ok(out)
}

/// `x` (computed, last dimension 1) expanded to the last dimension of
/// `shape`, if it needs to be: a product with a row of ones.
///
/// A product reading f32 in a narrower type (bf16) rounds `x` to it: a
/// precision loss like any such product's, except before a comparison (a
/// row's maximum compared with the row, `max(x) <= x`, would be false).
/// There (`exact`, see [`widen_compared`]) an f32 `x` is split into three
/// parts the product reads exactly:
/// `hi` (what the product makes of `x`, a product with one), `mid` (the
/// same of `x - hi`) and `lo = x - hi - mid`, each within the narrow
/// type's precision of the last; `[hi, mid, lo] · 1[3, C]` sums them back
/// to `x` exactly in the f32 accumulator.
fn widen(
    g: &mut Graph,
    x: ValueId,
    shape: &[usize],
    node: &str,
    exact: bool,
) -> Result<Option<ValueId>, String> {
    let xs = g.ty(x).shape.clone();
    // A scalar widens as one row of one element.
    let (&last, Some(&want)) = (xs.last().unwrap_or(&1), shape.last()) else {
        return Ok(None);
    };
    if g.constants.contains_key(&x) || last != 1 || want == 1 {
        return Ok(None);
    }
    let elem = g.ty(x).elem;
    let ones = |g: &mut Graph, name: &str, shape: Vec<usize>| {
        let n = shape.iter().product();
        let ty = TensorType { elem, shape };
        g.add_constant(format!("{node}/{name}"), Tensor::new(ty, vec![1.0; n]))
    };
    let split = exact && elem == crate::ir::ElemType::F32;
    let depth = if split { 3 } else { 1 };
    let ones_wide = ones(g, "ones", vec![depth, want]);
    // A 1-D operand is a row: `[1] x [1, C]` is `[C]`... keep it 2-D.
    let a = if xs.len() <= 1 {
        g.add_node(
            format!("{node}/as_row"),
            Op::Reshape { shape: vec![1, 1] },
            vec![x],
        )?[0]
    } else {
        x
    };
    let a = if split {
        let one = ones(g, "one", vec![1, 1]);
        let hi = g.add_node(format!("{node}/hi"), Op::MatMul, vec![a, one])?[0];
        let rest = g.add_node(format!("{node}/rest"), Op::Sub, vec![a, hi])?[0];
        let mid = g.add_node(format!("{node}/mid"), Op::MatMul, vec![rest, one])?[0];
        let lo = g.add_node(format!("{node}/lo"), Op::Sub, vec![rest, mid])?[0];
        let axis = g.ty(a).shape.len() - 1;
        let concat = Op::Concat { axis };
        g.add_node(format!("{node}/parts"), concat, vec![hi, mid, lo])?[0]
    } else {
        a
    };
    let wide = g.add_node(format!("{node}/widen"), Op::MatMul, vec![a, ones_wide])?;
    Ok(Some(wide[0]))
}

/// `Where(c, x, y)` as products and a sum (see the module doc); adds the
/// nodes, the last of which computes the result.
fn select(g: &mut Graph, n: &Node) -> Result<(), String> {
    let (c, x, y) = (n.inputs[0], n.inputs[1], n.inputs[2]);
    let elem = g.ty(x).elem;
    let Some(cond) = g.constants.get(&c).cloned() else {
        return select_computed(g, n, elem);
    };
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
            // The constant where it is selected, 0 elsewhere, at the shape
            // the condition and the constant broadcast to (not the result's:
            // a causal mask over every head would be one copy per head).
            let selected_when = if xc.is_some() { 1.0 } else { 0.0 };
            let shape = &crate::ir::broadcast(&cond.ty.shape, &k.ty.shape)?;
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

/// `Where(c, x, y)` with a condition computed at run time (1 or 0, as
/// comparisons make it): `c · x + (1 - c) · y`, exact where `x` and `y`
/// are finite.
fn select_computed(g: &mut Graph, n: &Node, elem: crate::ir::ElemType) -> Result<(), String> {
    let (c, x, y) = (n.inputs[0], n.inputs[1], n.inputs[2]);
    let c = if g.ty(c).elem == elem {
        c
    } else {
        let cast = Op::Cast { to: elem };
        g.add_node(format!("{}/truth", n.name), cast, vec![c])?[0]
    };
    // A condition narrower than the result (a scalar, a column) widened
    // first, so each product has a computed operand of the full width.
    let shape = g.ty(n.outputs[0]).shape.clone();
    let narrow = g.ty(c).shape.len() <= 1;
    let c = match widen(g, c, &shape, &format!("{}/truth", n.name), false)? {
        // A scalar or one element widens to `[1, C]`: as a row of the result's rank.
        Some(wide) if narrow => {
            let mut row = vec![1; shape.len().max(1) - 1];
            row.extend(g.ty(wide).shape.last().copied());
            let op = Op::Reshape { shape: row };
            g.add_node(format!("{}/truth/row", n.name), op, vec![wide])?[0]
        }
        Some(wide) => wide,
        None => c,
    };
    let ty = TensorType {
        elem,
        shape: vec![],
    };
    let one = g.add_constant(format!("{}/one", n.name), Tensor::new(ty, vec![1.0]));
    let not = g.add_node(format!("{}/otherwise", n.name), Op::Sub, vec![one, c])?[0];
    let kept = g.add_node(format!("{}/kept", n.name), Op::Mul, vec![x, c])?[0];
    let other = g.add_node(format!("{}/other", n.name), Op::Mul, vec![y, not])?[0];
    g.add_node(n.name.clone(), Op::Add, vec![kept, other])?;
    Ok(())
}

/// `Gather` in ops the lowering has (see the module doc); returns the value
/// holding the result (in some shape of the same elements).
fn gather(g: &mut Graph, n: &Node, axis: usize) -> Result<ValueId, String> {
    let (data, indices) = (n.inputs[0], n.inputs[1]);
    let ds = g.ty(data).shape.clone();
    let dim = ds[axis];
    if let Some(idx) = g.constants.get(&indices).cloned() {
        // Constant indices: runs of consecutive ones are slices, joined along the axis.
        let mut runs: Vec<(i64, i64)> = Vec::new();
        for &raw in idx.data.iter() {
            let i = if raw < 0.0 { raw + dim as f64 } else { raw };
            if !(0.0..dim as f64).contains(&i) {
                return Err(format!(
                    "index {raw} is out of range for a dimension of {dim}"
                ));
            }
            let i = i as i64;
            match runs.last_mut() {
                Some((_, end)) if *end == i => *end += 1,
                _ => runs.push((i, i + 1)),
            }
        }
        if runs.is_empty() {
            return Err("a Gather of no indices".to_owned());
        }
        let mut parts = Vec::new();
        for (k, (start, end)) in runs.iter().enumerate() {
            let starts = (0..ds.len())
                .map(|d| if d == axis { *start } else { 0 })
                .collect();
            let ends = ds
                .iter()
                .enumerate()
                .map(|(d, &e)| if d == axis { *end } else { e as i64 })
                .collect();
            let steps = vec![1; ds.len()];
            let op = Op::Slice {
                starts,
                ends,
                steps,
            };
            parts.push(g.add_node(format!("{}/run{k}", n.name), op, vec![data])?[0]);
        }
        return Ok(if parts.len() == 1 {
            parts[0]
        } else {
            g.add_node(format!("{}/join", n.name), Op::Concat { axis }, parts)?[0]
        });
    }
    // Computed indices into a constant table along its first dimension (an
    // embedding lookup): a one-hot product. With `d = index - v` (exact:
    // integers are held in f32), `relu(1 - d·d)` is 1 where `d = 0` and 0
    // elsewhere; a second term with `index + V` takes negative indices.
    let Some(table) = g.constants.get(&data).cloned() else {
        return Err(
            "Gather of a computed tensor by computed indices is not supported yet (a constant table, as in an embedding lookup, is)"
                .to_owned(),
        );
    };
    if axis != 0 || !table.ty.elem.is_float() {
        return Err(format!(
            "Gather by computed indices is supported along the first dimension of a floating-point table (an embedding lookup), not axis {axis} of {}",
            table.ty.elem.name()
        ));
    }
    let t: usize = g.ty(indices).shape.iter().product();
    let rest: usize = ds[1..].iter().product();
    let elem = table.ty.elem;
    let ty = |shape: Vec<usize>| TensorType { elem, shape };
    let name = |s: &str| format!("{}/{s}", n.name);
    let as_float = g.add_node(name("index"), Op::Cast { to: elem }, vec![indices])?[0];
    let row = g.add_node(
        name("row"),
        Op::Reshape { shape: vec![1, t] },
        vec![as_float],
    )?[0];
    let mut hot: Option<ValueId> = None;
    for (k, shift) in [0.0, dim as f64].into_iter().enumerate() {
        // d[v, j] = index[j] + shift - v
        let at = g.add_constant(
            name(&format!("position{k}")),
            Tensor::new(
                ty(vec![dim, 1]),
                (0..dim).map(|v| v as f64 - shift).collect(),
            ),
        );
        let d = g.add_node(name(&format!("offset{k}")), Op::Sub, vec![row, at])?[0];
        let sq = g.add_node(name(&format!("square{k}")), Op::Mul, vec![d, d])?[0];
        let one = g.add_constant(
            name(&format!("one{k}")),
            Tensor::new(ty(vec![1]), vec![1.0]),
        );
        let close = g.add_node(name(&format!("close{k}")), Op::Sub, vec![one, sq])?[0];
        let h = g.add_node(name(&format!("hit{k}")), Op::Relu, vec![close])?[0];
        hot = Some(match hot {
            None => h,
            Some(p) => g.add_node(name("one_hot"), Op::Add, vec![p, h])?[0],
        });
    }
    let hot = hot.ok_or("no one-hot")?;
    // one-hotᵀ [T, V] · table [V, rest] = result [T, rest].
    let rows = g.add_node(
        name("one_hot_rows"),
        Op::Transpose { perm: vec![1, 0] },
        vec![hot],
    )?[0];
    let flat = Tensor::new(ty(vec![dim, rest]), table.data.to_vec());
    let flat = g.add_constant(name("table"), flat);
    Ok(g.add_node(name("lookup"), Op::MatMul, vec![rows, flat])?[0])
}

/// A transpose that moves the last dimension and others as the steps the
/// tile lowering has: a permutation of the rows (the last dimension kept)
/// and a swap of the last two dimensions, added to `out`; returns their
/// result and the permutation of rows that remains.
fn transpose_steps(
    out: &mut Graph,
    name: &str,
    x: ValueId,
    perm: &[usize],
) -> Result<(ValueId, Vec<usize>), String> {
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
    let mut x = x;
    for (k, p) in [q, swap].into_iter().enumerate() {
        let op = Op::Transpose { perm: p };
        x = out.add_node(format!("{name}/step{k}"), op, vec![x])?[0];
    }
    Ok((x, last))
}

/// A transpose of any permutation added to `out` in the steps the tile
/// lowering has (see [`transpose_steps`]).
fn transpose(out: &mut Graph, name: &str, x: ValueId, perm: &[usize]) -> Result<ValueId, String> {
    let r = perm.len();
    if r <= 2 || perm[r - 1] == r - 1 || crate::ir::swaps_last_two(perm) {
        let op = Op::Transpose {
            perm: perm.to_vec(),
        };
        return Ok(out.add_node(name.to_owned(), op, vec![x])?[0]);
    }
    let (x, last) = transpose_steps(out, name, x, perm)?;
    if last.iter().enumerate().all(|(i, p)| i == *p) {
        return Ok(x);
    }
    Ok(out.add_node(name.to_owned(), Op::Transpose { perm: last }, vec![x])?[0])
}

/// The last node of `out` takes over `n`'s outputs, reshaped to them if needed.
fn finish(out: &mut Graph, n: &Node, y: ValueId) {
    let want = out.ty(n.outputs[0]).shape.clone();
    let op = if out.ty(y).shape == want {
        Op::Identity
    } else {
        Op::Reshape { shape: want }
    };
    out.nodes.push(Node {
        name: n.name.clone(),
        op,
        inputs: vec![y],
        outputs: n.outputs.clone(),
    });
}

/// `Conv` (one group) as its windows in rows of the channels-last image
/// (`Im2Row`, `[N, OH·OW, KH·KW·C]`) and one product with the weights
/// reordered to `[M, KH·KW·C]`, which reads the rows transposed (as rows of
/// `N`): the result comes out channels first, `[N, M, OH·OW]`.
fn conv_rows(
    g: &Graph,
    out: &mut Graph,
    n: &Node,
    window: &Window,
    (per, b_as_rows): (usize, bool),
) -> Result<(), String> {
    let name = |step: &str| format!("{}/{step}", n.name);
    let (x, w) = (n.inputs[0], n.inputs[1]);
    let (xs, ws) = (g.ty(x).shape.clone(), g.ty(w).shape.clone());
    let (c, m, kk) = (xs[1], ws[0], ws[2] * ws[3]);
    let elem = g.ty(x).elem;
    let (nb, h, wd) = (xs[0], xs[2], xs[3]);
    let [oh, ow] = window
        .output([h, wd])
        .ok_or("the window does not fit the input")?;
    let dense = |cols: usize| cols.is_multiple_of(per.max(1));
    let last = channels_last(out, &n.name, x, &xs, per)?;
    // A pointwise window (1×1, stride 1, no padding) is the image itself.
    let pointwise = window.is_pointwise();
    let rows = if pointwise {
        let op = Op::Reshape {
            shape: vec![nb, h * wd, c],
        };
        out.add_node(name("pixels_in"), op, vec![last])?[0]
    } else {
        let im2row = Op::Im2Row {
            window: window.clone(),
            fill: 0.0,
        };
        out.add_node(name("im2row"), im2row, vec![last])?[0]
    };
    let bias = |out: &mut Graph, shape: Vec<usize>| -> Result<Option<ValueId>, String> {
        let Some(&b) = n.inputs.get(2) else {
            return Ok(None);
        };
        Ok(Some(match g.constants.get(&b) {
            Some(t) => {
                let ty = TensorType { elem, shape };
                out.add_constant(name("bias"), Tensor::new(ty, t.data.to_vec()))
            }
            None => out.add_node(name("bias"), Op::Reshape { shape }, vec![b])?[0],
        }))
    };
    // [M, C, KH, KW] to [M, KH·KW·C] (position-major, channels inside),
    // or its transpose.
    let weights = |out: &mut Graph, transposed: bool| -> Result<ValueId, String> {
        Ok(match g.constants.get(&w) {
            Some(t) => {
                let at = |o: usize, q: usize| t.data[(o * c + q % c) * kk + q / c];
                let (data, shape) = if transposed {
                    let d = (0..kk * c).flat_map(|q| (0..m).map(move |o| at(o, q)));
                    (d.collect(), vec![kk * c, m])
                } else {
                    let d = (0..m).flat_map(|o| (0..kk * c).map(move |q| at(o, q)));
                    (d.collect(), vec![m, kk * c])
                };
                out.add_constant(
                    name("weights"),
                    Tensor::new(TensorType { elem, shape }, data),
                )
            }
            None => {
                let op = Op::Reshape {
                    shape: vec![m, c, kk],
                };
                let t = out.add_node(name("weights_planes"), op, vec![w])?[0];
                let t = transpose(out, &name("weights_last"), t, &[0, 2, 1])?;
                let op = Op::Reshape {
                    shape: vec![m, kk * c],
                };
                let t = out.add_node(name("weights"), op, vec![t])?[0];
                match transposed {
                    true => transpose(out, &name("weights_t"), t, &[1, 0])?,
                    false => t,
                }
            }
        })
    };
    let y = if dense(ow) && b_as_rows {
        // Channels first straight from the product: its rows of `OH·OW`
        // are the output planes as they lie.
        let cols = transpose(out, &name("windows"), rows, &[0, 2, 1])?;
        let wm = weights(out, false)?;
        let mut y = out.add_node(name("product"), Op::MatMul, vec![wm, cols])?[0];
        if let Some(b) = bias(out, vec![m, 1])? {
            y = out.add_node(name("biased"), Op::Add, vec![y, b])?[0];
        }
        y
    } else {
        // Channels last, then each output row moved whole into its plane.
        let wt = weights(out, true)?;
        let mut y = out.add_node(name("product"), Op::MatMul, vec![rows, wt])?[0];
        if let Some(b) = bias(out, vec![m])? {
            y = out.add_node(name("biased"), Op::Add, vec![y, b])?[0];
        }
        let op = Op::Reshape {
            shape: vec![nb, oh, ow, m],
        };
        let y = out.add_node(name("pixels_out"), op, vec![y])?[0];
        transpose(out, &name("channels_first"), y, &[0, 3, 1, 2])?
    };
    finish(out, n, y);
    Ok(())
}

/// `x [N, C, H, W]` as `[N, H, W, C]`: where rows of `W` meet the transfer
/// alignment (`per` elements), `[N, C, H·W]` with its last two swapped, as
/// the planes lie; else the transpose's steps.
fn channels_last(
    out: &mut Graph,
    node: &str,
    x: ValueId,
    xs: &[usize],
    per: usize,
) -> Result<ValueId, String> {
    let name = |step: &str| format!("{node}/{step}");
    let (nb, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    if !wd.is_multiple_of(per.max(1)) {
        return transpose(out, &name("channels_last"), x, &[0, 2, 3, 1]);
    }
    let op = Op::Reshape {
        shape: vec![nb, c, h * wd],
    };
    let planes = out.add_node(name("planes"), op, vec![x])?[0];
    let pixels = transpose(out, &name("pixels"), planes, &[0, 2, 1])?;
    let op = Op::Reshape {
        shape: vec![nb, h, wd, c],
    };
    Ok(out.add_node(name("channels_last"), op, vec![pixels])?[0])
}

/// A depthwise `Conv` (one channel per group, constant weights) as a
/// window sum over the channels-last image (`WindowSum`, each channel
/// weighted by its own window on the vector units, `[N, OH·OW, C]`), plus
/// the bias, moved back channels first.
fn conv_depthwise(
    g: &Graph,
    out: &mut Graph,
    n: &Node,
    window: &Window,
    per: usize,
) -> Result<(), String> {
    let name = |step: &str| format!("{}/{step}", n.name);
    let (x, w) = (n.inputs[0], n.inputs[1]);
    let xs = g.ty(x).shape.clone();
    let (nb, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let kk = window.kernel[0] * window.kernel[1];
    let [oh, ow] = window
        .output([h, wd])
        .ok_or("the window does not fit the input")?;
    let elem = g.ty(x).elem;
    let t = g
        .constants
        .get(&w)
        .ok_or("depthwise weights are not constant")?;
    // [C, 1, KH, KW] to [KH·KW, C].
    let data = (0..kk)
        .flat_map(|p| (0..c).map(move |ch| (p, ch)))
        .map(|(p, ch)| t.data[ch * kk + p])
        .collect();
    let ty = TensorType {
        elem,
        shape: vec![kk, c],
    };
    let weights = out.add_constant(name("weights"), Tensor::new(ty, data));
    let last = channels_last(out, &n.name, x, &xs, per)?;
    let op = Op::WindowSum {
        window: window.clone(),
    };
    let mut y = out.add_node(name("window_sum"), op, vec![last, weights])?[0];
    if let Some(&b) = n.inputs.get(2) {
        let bias = match g.constants.get(&b) {
            Some(t) => {
                let ty = TensorType {
                    elem,
                    shape: vec![c],
                };
                out.add_constant(name("bias"), Tensor::new(ty, t.data.to_vec()))
            }
            None => b,
        };
        y = out.add_node(name("biased"), Op::Add, vec![y, bias])?[0];
    }
    let op = Op::Reshape {
        shape: vec![nb, oh, ow, c],
    };
    let y = out.add_node(name("pixels_out"), op, vec![y])?[0];
    let y = transpose(out, &name("channels_first"), y, &[0, 3, 1, 2])?;
    finish(out, n, y);
    Ok(())
}

/// `Conv` as `Im2Col` and matrix products (see the module doc).
fn conv(
    g: &Graph,
    out: &mut Graph,
    n: &Node,
    window: &Window,
    groups: usize,
) -> Result<(), String> {
    let name = |step: &str| format!("{}/{step}", n.name);
    let (x, w) = (n.inputs[0], n.inputs[1]);
    let (xs, ws) = (g.ty(x).shape.clone(), g.ty(w).shape.clone());
    let (nb, c, m, kk) = (xs[0], xs[1], ws[0], ws[2] * ws[3]);
    let gs = groups.max(1);
    let (cg, mg) = (c / gs, m / gs);
    let im2col = Op::Im2Col {
        window: window.clone(),
        fill: 0.0,
    };
    let cols = out.add_node(name("im2col"), im2col, vec![x])?[0];
    let ohw = out.ty(cols).shape[3];
    let elem = g.ty(x).elem;
    let mut parts = Vec::new();
    for gi in 0..gs {
        // This group's channels: rows [gi·cg·kk, (gi + 1)·cg·kk) of the windows.
        let mut rows = out.add_node(
            name(&format!("windows{gi}")),
            Op::Reshape {
                shape: vec![nb, c * kk, ohw],
            },
            vec![cols],
        )?[0];
        if gs > 1 {
            let op = Op::Slice {
                starts: vec![0, (gi * cg * kk) as i64, 0],
                ends: vec![nb as i64, ((gi + 1) * cg * kk) as i64, ohw as i64],
                steps: vec![1, 1, 1],
            };
            rows = out.add_node(name(&format!("group{gi}")), op, vec![rows])?[0];
        }
        let wm = match g.constants.get(&w) {
            Some(t) => {
                let per = cg * kk;
                let data = t.data[gi * mg * per..(gi + 1) * mg * per].to_vec();
                let ty = TensorType {
                    elem,
                    shape: vec![mg, per],
                };
                out.add_constant(name(&format!("weights{gi}")), Tensor::new(ty, data))
            }
            None if gs == 1 => {
                let op = Op::Reshape {
                    shape: vec![m, cg * kk],
                };
                out.add_node(name("weights"), op, vec![w])?[0]
            }
            None => {
                return Err(
                    "a grouped convolution with computed weights is not supported yet".to_owned(),
                );
            }
        };
        parts.push(out.add_node(name(&format!("product{gi}")), Op::MatMul, vec![wm, rows])?[0]);
    }
    let mut y = if parts.len() == 1 {
        parts[0]
    } else {
        out.add_node(name("join"), Op::Concat { axis: 1 }, parts)?[0]
    };
    if let Some(&b) = n.inputs.get(2) {
        let bias = match g.constants.get(&b) {
            Some(t) => {
                let ty = TensorType {
                    elem,
                    shape: vec![m, 1],
                };
                out.add_constant(name("bias"), Tensor::new(ty, t.data.to_vec()))
            }
            None => out.add_node(name("bias"), Op::Reshape { shape: vec![m, 1] }, vec![b])?[0],
        };
        y = out.add_node(name("biased"), Op::Add, vec![y, bias])?[0];
    }
    finish(out, n, y);
    Ok(())
}

/// `MaxPool` / `AveragePool` as `Im2Col` and element-wise ops over its rows.
fn pool(
    g: &Graph,
    out: &mut Graph,
    n: &Node,
    kind: PoolKind,
    window: &Window,
) -> Result<(), String> {
    let name = |step: &str| format!("{}/{step}", n.name);
    let x = n.inputs[0];
    let xs = g.ty(x).shape.clone();
    let fill = match kind {
        PoolKind::Max => f64::NEG_INFINITY,
        PoolKind::Average { .. } => 0.0,
    };
    let im2col = Op::Im2Col {
        window: window.clone(),
        fill,
    };
    let cols = out.add_node(name("im2col"), im2col, vec![x])?[0];
    let s = out.ty(cols).shape.clone();
    let kk = s[2];
    let mut acc: Option<ValueId> = None;
    for k in 0..kk {
        let op = Op::Slice {
            starts: vec![0, 0, k as i64, 0],
            ends: vec![s[0] as i64, s[1] as i64, k as i64 + 1, s[3] as i64],
            steps: vec![1; 4],
        };
        let row = out.add_node(name(&format!("tap{k}")), op, vec![cols])?[0];
        acc = Some(match acc {
            None => row,
            Some(a) => {
                let op = if kind == PoolKind::Max {
                    Op::Max
                } else {
                    Op::Add
                };
                out.add_node(name(&format!("acc{k}")), op, vec![a, row])?[0]
            }
        });
    }
    let mut y = acc.ok_or("an empty window")?;
    if let PoolKind::Average { count_include_pad } = kind {
        // 1 / (elements each window averages), per output position.
        let [oh, ow] = window
            .output([xs[2], xs[3]])
            .ok_or("the window does not fit")?;
        let count = |o: usize, i: usize, size: usize| {
            (0..window.kernel[i])
                .filter(|k| {
                    let q = (o * window.strides[i] + k * window.dilations[i]) as i64
                        - window.pads[i] as i64;
                    if count_include_pad {
                        q < (size + window.pads[i + 2]) as i64
                    } else {
                        q >= 0 && q < size as i64
                    }
                })
                .count()
        };
        let data = (0..oh * ow)
            .map(|p| 1.0 / (count(p / ow, 0, xs[2]) * count(p % ow, 1, xs[3])).max(1) as f64)
            .collect();
        let ty = TensorType {
            elem: g.ty(x).elem,
            shape: vec![oh * ow],
        };
        let k = out.add_constant(name("inverse_count"), Tensor::new(ty, data));
        y = out.add_node(name("mean"), Op::Mul, vec![y, k])?[0];
    }
    finish(out, n, y);
    Ok(())
}

/// The per-output-channel values of a constant broadcast over `[N, M, H, W]`
/// (shape `[M, 1, 1]` or `[1, M, 1, 1]`), if it is one.
fn per_channel(g: &Graph, v: ValueId, m: usize) -> Option<Vec<f64>> {
    let t = g.constants.get(&v)?;
    let s = &t.ty.shape;
    let ok = matches!(s.as_slice(), [c, 1, 1] | [1, c, 1, 1] if *c == m);
    ok.then(|| t.data.to_vec())
}

/// `Conv(x, W, b) · a + c` (each used once, `a` and `c` per channel, `W`
/// constant) as `Conv(x, W · a, b · a + c)`.
fn fold_scale_shift(g: &Graph) -> Graph {
    let mut uses: std::collections::HashMap<ValueId, usize> = Default::default();
    for n in &g.nodes {
        for i in &n.inputs {
            *uses.entry(*i).or_default() += 1;
        }
    }
    let once = |v: ValueId| uses.get(&v) == Some(&1) && !g.outputs.contains(&v);
    let consumer = |v: ValueId| g.nodes.iter().position(|n| n.inputs.contains(&v));
    let mut out = g.clone();
    let mut dropped = vec![false; g.nodes.len()];
    let mut replaced: Vec<(usize, Node)> = Vec::new();
    for (ci, n) in g.nodes.iter().enumerate() {
        let Op::Conv { .. } = n.op else { continue };
        let Some(w) = g.constants.get(&n.inputs[1]) else {
            continue;
        };
        let m = w.ty.shape[0];
        let y = n.outputs[0];
        let Some(mi) = consumer(y).filter(|_| once(y)) else {
            continue;
        };
        let mul = &g.nodes[mi];
        let other = |k: &Node, v: ValueId| k.inputs.iter().copied().find(|i| *i != v);
        let Some(a) = (matches!(mul.op, Op::Mul) && mul.inputs.len() == 2)
            .then(|| other(mul, y))
            .flatten()
            .and_then(|a| per_channel(g, a, m))
        else {
            continue;
        };
        let z = mul.outputs[0];
        let add = consumer(z).filter(|_| once(z)).map(|ai| (ai, &g.nodes[ai]));
        let shift = add.and_then(|(ai, k)| {
            (matches!(k.op, Op::Add) && k.inputs.len() == 2)
                .then(|| other(k, z))
                .flatten()
                .and_then(|c| per_channel(g, c, m))
                .map(|c| (ai, c))
        });
        let per = w.data.len() / m.max(1);
        let weights: Vec<f64> = w
            .data
            .iter()
            .enumerate()
            .map(|(i, x)| x * a[i / per])
            .collect();
        let old_b: Vec<f64> = match n.inputs.get(2).and_then(|b| g.constants.get(b)) {
            Some(b) => b.data.to_vec(),
            None if n.inputs.len() > 2 => continue, // a computed bias
            None => vec![0.0; m],
        };
        let bias: Vec<f64> = (0..m)
            .map(|i| old_b[i] * a[i] + shift.as_ref().map_or(0.0, |(_, c)| c[i]))
            .collect();
        let elem = w.ty.elem;
        let wv = out.add_constant(
            format!("{}/folded_weights", n.name),
            Tensor::new(w.ty.clone(), weights),
        );
        let bty = TensorType {
            elem,
            shape: vec![m],
        };
        let bv = out.add_constant(format!("{}/folded_bias", n.name), Tensor::new(bty, bias));
        // The folded convolution takes the place (and result) of the last folded node.
        let (last, result) = match &shift {
            Some((ai, _)) => (*ai, g.nodes[*ai].outputs.clone()),
            None => (mi, mul.outputs.clone()),
        };
        dropped[ci] = true;
        dropped[mi] = true;
        replaced.push((
            last,
            Node {
                name: n.name.clone(),
                op: n.op.clone(),
                inputs: vec![n.inputs[0], wv, bv],
                outputs: result,
            },
        ));
    }
    out.nodes = g
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, k)| match replaced.iter().find(|(at, _)| *at == i) {
            Some((_, conv)) => Some(conv.clone()),
            None if dropped[i] => None,
            None => Some(k.clone()),
        })
        .collect();
    out
}

/// The columns `[c0, c1)` a slice takes of the last dimension, if it takes
/// only those (every other dimension whole, step 1).
pub fn slice_columns(g: &Graph, n: &Node) -> Option<(usize, usize)> {
    let Op::Slice {
        starts,
        ends,
        steps,
    } = &n.op
    else {
        return None;
    };
    let shape = &g.ty(n.inputs[0]).shape;
    let last = shape.len().checked_sub(1)?;
    let whole = (0..last).all(|d| starts[d] == 0 && ends[d] as usize == shape[d] && steps[d] == 1);
    (whole && steps[last] == 1 && starts[last] >= 0 && ends[last] > starts[last]).then(|| {
        (
            starts[last] as usize,
            (ends[last] as usize).min(shape[last]),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{ElemType, Tensor, TensorType};

    fn f32s(shape: &[usize]) -> TensorType {
        TensorType {
            elem: ElemType::F32,
            shape: shape.to_vec(),
        }
    }

    /// `(x · 2^k) · K` becomes `x · (K · 2^k)`, exactly; not for a scale
    /// that is no power of two (the products would round differently), nor
    /// where the scaled value is read again.
    #[test]
    fn a_power_of_two_scale_folds_into_the_next_constant_product() {
        let caps = Caps {
            min_reduction: true,
            lane_broadcast: true,
            row_chunk: Some(2),
            mask_by_position: false,
            conv_rows: None,
            b_as_rows: false,
            windows_in_place: false,
            narrow_products: false,
        };
        let build = |c: f64, twice: bool| {
            let mut g = Graph::default();
            let x = g.add_value("x", f32s(&[2, 4]));
            g.inputs.push(x);
            let c = g.add_constant("c", Tensor::new(f32s(&[]), vec![c]));
            let k = g.add_constant("k", Tensor::new(f32s(&[4]), vec![1.0, 0.0, 3.0, -1.5]));
            let a = g.add_node("scale", Op::Mul, vec![x, c]).expect("typed")[0];
            let y = g.add_node("mask", Op::Mul, vec![a, k]).expect("typed")[0];
            g.outputs.push(y);
            if twice {
                g.outputs.push(a);
            }
            prepare(&g, caps).expect("prepares")
        };
        let g = build(0.125, false);
        assert_eq!(g.nodes.len(), 1, "{:?}", g.nodes);
        let k = g.constants.get(&g.nodes[0].inputs[1]).expect("a constant");
        assert_eq!(k.data.to_vec(), vec![0.125, 0.0, 0.375, -0.1875]);
        assert_eq!(g.nodes[0].inputs[0], g.inputs[0]);
        assert_eq!(build(0.3, false).nodes.len(), 2);
        assert_eq!(build(0.125, true).nodes.len(), 2);
    }

    /// Attention's scale, before a mask, moves into the epilogue of the
    /// projection its queries are sliced from (a row of scales over their
    /// columns, the bias scaled), exactly, and the mask keeps its 0 and 1;
    /// not for a scale that is no power of two, nor where another slice
    /// reads those columns.
    #[test]
    fn a_power_of_two_scale_of_masked_scores_moves_into_the_query_columns_of_the_projection() {
        let build_in = |c: f64, k_from: i64, chunk: usize| {
            let caps = Caps {
                min_reduction: true,
                lane_broadcast: true,
                row_chunk: Some(chunk),
                mask_by_position: false,
                conv_rows: None,
                b_as_rows: false,
                windows_in_place: false,
                narrow_products: false,
            };
            let mut g = Graph::default();
            let x = g.add_value("x", f32s(&[4, 3]));
            g.inputs.push(x);
            let w: Vec<f64> = (0..18).map(|i| f64::from(i) - 4.0).collect();
            let w = g.add_constant("w", Tensor::new(f32s(&[3, 6]), w));
            let b = g.add_constant(
                "b",
                Tensor::new(f32s(&[6]), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            );
            let mm = g
                .add_node("proj.mm", Op::MatMul, vec![x, w])
                .expect("typed")[0];
            let qkv = g.add_node("proj", Op::Add, vec![mm, b]).expect("typed")[0];
            let cols = |from: i64| Op::Slice {
                starts: vec![0, from],
                ends: vec![4, from + 2],
                steps: vec![1, 1],
            };
            let q = g.add_node("q", cols(0), vec![qkv]).expect("typed")[0];
            let k = g.add_node("k", cols(k_from), vec![qkv]).expect("typed")[0];
            let kt = g
                .add_node("k.t", Op::Transpose { perm: vec![1, 0] }, vec![k])
                .expect("typed")[0];
            let scores = g
                .add_node("scores", Op::MatMul, vec![q, kt])
                .expect("typed")[0];
            let c = g.add_constant("scale", Tensor::new(f32s(&[]), vec![c]));
            let y = g
                .add_node("scaled", Op::Mul, vec![scores, c])
                .expect("typed")[0];
            let tril = (0..16)
                .map(|i| f64::from(u8::from(i % 4 <= i / 4)))
                .collect();
            let m = g.add_constant("mask", Tensor::new(f32s(&[4, 4]), tril));
            let y = g.add_node("masked", Op::Mul, vec![y, m]).expect("typed")[0];
            g.outputs.push(y);
            prepare(&g, caps).expect("prepares")
        };
        let build = |c: f64, k_from: i64| build_in(c, k_from, 2);
        let node = |g: &Graph, name: &str| g.nodes.iter().find(|n| n.name == name).cloned();
        let g = build(0.5, 2);
        assert!(node(&g, "scaled").is_none(), "{:?}", g.nodes);
        let scale = node(&g, "proj/scale").expect("a scale in the epilogue");
        assert_eq!(
            scale.inputs[0],
            node(&g, "proj.mm").expect("kept").outputs[0]
        );
        assert_eq!(
            g.constants[&scale.inputs[1]].data.to_vec(),
            vec![0.5, 0.5, 1.0, 1.0, 1.0, 1.0]
        );
        let sum = node(&g, "proj").expect("kept");
        assert_eq!(sum.inputs[0], scale.outputs[0]);
        assert_eq!(
            g.constants[&sum.inputs[1]].data.to_vec(),
            vec![0.5, 1.0, 3.0, 4.0, 5.0, 6.0]
        );
        let masked = node(&g, "masked").expect("kept");
        assert_eq!(
            masked.inputs[0],
            node(&g, "scores").expect("kept").outputs[0]
        );
        let mask = &g.constants[&masked.inputs[1]];
        assert!(mask.data.iter().all(|&x| x == 0.0 || x == 1.0), "{mask:?}");
        // The scale stays with the scores (folded into the mask where it can).
        assert!(node(&build(0.3, 2), "proj/scale").is_none());
        assert!(node(&build(0.5, 1), "proj/scale").is_none());
        // Nor where a row of scores is one register chunk: no chunk is kept whole.
        assert!(node(&build_in(0.5, 2, 4), "proj/scale").is_none());
    }

    /// A causal mask over every head: the constant `Where` selects is made
    /// once, at the shape the mask and the constant broadcast to, not once
    /// per head (the result's shape).
    #[test]
    fn a_selected_constant_keeps_the_shape_it_broadcasts_from() {
        let mut g = Graph::default();
        let x = g.add_value("x", f32s(&[3, 4, 4]));
        g.inputs.push(x);
        let mask = (0..16)
            .map(|i| f64::from(u8::from(i % 4 <= i / 4)))
            .collect();
        let bools = TensorType {
            elem: ElemType::Bool,
            shape: vec![4, 4],
        };
        let m = g.add_constant("m", Tensor::new(bools, mask));
        let lo = g.add_constant("lo", Tensor::new(f32s(&[]), vec![-1e9]));
        let y = g.add_node("w", Op::Where, vec![m, x, lo]).expect("typed");
        g.outputs.push(y[0]);
        let caps = Caps {
            min_reduction: true,
            lane_broadcast: true,
            row_chunk: Some(2),
            mask_by_position: false,
            conv_rows: None,
            b_as_rows: false,
            windows_in_place: false,
            narrow_products: false,
        };
        let out = prepare(&g, caps).expect("prepares");
        let (_, t) = out
            .constants
            .iter()
            .find(|(v, _)| out.values[v.index()].name == "w/selected")
            .expect("a selected constant");
        assert_eq!(t.ty.shape, vec![4, 4]);
        // Where the mask is off (above the diagonal), the constant; elsewhere 0.
        assert_eq!(t.data[1], -1e9);
        assert_eq!(t.data[0], 0.0);
    }
}
