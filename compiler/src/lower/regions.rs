//! The region plan: the nodes of the graph grouped into regions (a product
//! with its epilogue, a row group, an attention, a copy), lowered in order,
//! and each region's instructions and register-file side recorded.

use super::Lowerer;
use super::error::{LowerError, err};
use super::layout::cast_is_view;
use super::mapping::SpaceEntry;
use super::ops::{self, Contraction, Ew};
use super::pool::encode;
use super::rows;
use super::tiles::Operand;
use crate::ir::{Op, ValueId};
use crate::passes::{fuse, rowgroups};
use crate::regalloc;
use isa_specs::model::Func;
use isa_specs::program::DataSegment;
use std::collections::HashMap;

/// A row group's form, for [`Trials::group_trials`]: each node's op and
/// the shapes of its inputs and outputs.
pub(super) type GroupForm = Vec<(&'static str, Vec<Vec<usize>>)>;

/// What failed attempts have taught this compile: forms tried, groups to form differently, the tile share.
pub(super) struct Trials {
    /// Set when a row group that took its producer's nodes does not lower:
    /// the node that started it ([`rows::row_groups_with`]).
    pub(super) unfront: Option<usize>,
    /// Set when a row group with skips does not lower: the node that
    /// started it (the compile starts again without its skips).
    pub(super) unskip: Option<usize>,
    /// Row group forms tried ([`Lowerer::group_lowers`]).
    pub(super) group_trials: HashMap<GroupForm, bool>,
    /// The share of an on-chip memory one operand tile of a product may
    /// take: `1 / tile_share` (a quarter; less while a product's region is
    /// tried again after its buffers overflowed a memory).
    pub(super) tile_share: i64,
}

/// The fusion decisions this compile lowers: attentions, row groups, masked work skipped, and the contraction instructions found.
pub(super) struct Fusion {
    /// The attentions recognised, and how many of their intermediates are
    /// kept on chip, of how many.
    pub(super) attentions: Vec<(fuse::Attention, (usize, usize))>,
    /// The row groups recognised ([`rows`]), by their first node.
    pub(super) row_groups: Vec<rowgroups::RowGroup>,
    /// What row groups skip where a constant mask makes work dead ([`masked`]).
    pub(super) skips: Vec<rows::masked::Skip>,
    pub(super) contractions: Vec<Contraction>,
}

/// The region plan: the regions lowered, their nodes, instructions and register-file sides, and the products' tuning spaces.
pub(super) struct RegionPlan {
    pub(super) regions: Vec<(String, usize)>,
    /// The nodes of each region and its instructions `[start, end)`.
    pub(super) region_parts: Vec<(Vec<usize>, (usize, usize))>,
    /// The half each region preferred, if any, in the order of `regions`.
    pub(super) region_side: Vec<Option<u8>>,
    /// The parts (indices into `region_parts`) of each region after merging.
    pub(super) region_groups: Vec<Vec<usize>>,
    /// The region producing each value and the half of the register files
    /// it preferred ([`Options::pipeline_tiles`]).
    pub(super) value_sides: HashMap<ValueId, (usize, u8)>,
    /// The tuning space of each product compiled, in program order.
    pub(super) space: Vec<SpaceEntry>,
}

impl Lowerer<'_> {
    /// Records a region of nodes `members` (the first started it) and its
    /// instruction count; values it wrote on chip are complete before the
    /// next region reads them.
    pub(super) fn push_region(
        &mut self,
        members: &[usize],
        region: (String, usize),
    ) -> Result<(), LowerError> {
        let end = self.e.code.len();
        self.plan
            .region_parts
            .push((members.to_vec(), (end - region.1, end)));
        if let Some(side) = self.e.side {
            for &k in members {
                for &v in &self.g.nodes[k].outputs {
                    self.plan
                        .value_sides
                        .insert(v, (self.plan.regions.len(), side));
                }
            }
        }
        self.plan.region_side.push(self.e.side);
        self.plan.regions.push(region);
        let shared: Vec<usize> = (0..self.e.bufs.len())
            .filter(|&b| self.e.bufs[b].shared && self.e.bufs[b].used())
            .collect();
        for b in shared {
            self.e.settle_buffer(b).map_err(err)?;
        }
        Ok(())
    }

    /// Merges the regions of each attention into one, named after it.
    pub(super) fn merge_attention_regions(&mut self) {
        let g = self.g;
        let mut merged: Vec<(String, usize)> = Vec::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut at: HashMap<usize, usize> = HashMap::new();
        for (k, (name, n)) in std::mem::take(&mut self.plan.regions)
            .into_iter()
            .enumerate()
        {
            let root = self
                .plan
                .region_parts
                .get(k)
                .and_then(|(ms, _)| ms.first().copied());
            let which = root.and_then(|r| {
                self.fusion
                    .attentions
                    .iter()
                    .position(|(a, _)| a.nodes.contains(&r))
            });
            match which.map(|w| (w, at.get(&w).copied())) {
                Some((_, Some(i))) => {
                    merged[i].0.push_str(&format!(" | {name}"));
                    merged[i].1 += n;
                    groups[i].push(k);
                }
                Some((w, None)) => {
                    let (a, (kept, of)) = &self.fusion.attentions[w];
                    let head = format!(
                        "Attention({} .. {}, {}): {name}",
                        g.nodes[a.scores].name,
                        g.nodes[a.context].name,
                        if let Some(why) = &self.kept.residency_blocked {
                            format!("intermediates at home: {why}")
                        } else if kept == of {
                            "intermediates on chip".to_owned()
                        } else if *kept == 0 {
                            "intermediates at home: they do not fit on chip".to_owned()
                        } else {
                            format!(
                                "{kept} of {of} intermediates on chip, the others at home: they do not fit on chip together"
                            )
                        }
                    );
                    at.insert(w, merged.len());
                    merged.push((head, n));
                    groups.push(vec![k]);
                }
                None => {
                    merged.push((name, n));
                    groups.push(vec![k]);
                }
            }
        }
        self.plan.regions = merged;
        self.plan.region_groups = groups;
    }

    /// `e`, naming node `n` unless it names one already.
    pub(super) fn at_node(n: &crate::ir::Node, e: LowerError) -> LowerError {
        e.at(n)
    }

    pub(super) fn node_err(n: &crate::ir::Node, e: impl Into<LowerError>) -> LowerError {
        e.into().at(n)
    }

    /// Lowers node `ni` alone by `lower` as a region labelled `label(name)`;
    /// an error is blamed on the node.
    fn node_region(
        &mut self,
        ni: usize,
        label: &str,
        lower: impl FnOnce(&mut Self, &crate::ir::Node) -> Result<(), LowerError>,
    ) -> Result<(), LowerError> {
        let g = self.g;
        let n = &g.nodes[ni];
        let before = self.e.code.len();
        lower(self, n).map_err(|e| Self::at_node(n, e))?;
        self.push_region(
            &[ni],
            (format!("{label}({})", n.name), self.e.code.len() - before),
        )
    }

    /// Node `ni` and the element-wise nodes that follow it as its epilogue
    /// (each consuming only the result before it), marked `done`. Fails,
    /// setting `Trials::unfront`, where a row group that took such a node
    /// from its producer does not lower as one region.
    fn epilogue_members(
        &mut self,
        ni: usize,
        done: &mut [bool],
        uses: &HashMap<ValueId, usize>,
    ) -> Result<Vec<usize>, LowerError> {
        let g = self.g;
        let n = &g.nodes[ni];
        let mut members = vec![ni];
        let mut last = n.outputs[0];
        let out_shape = g.ty(last).shape.clone();
        for (nj, m) in g.nodes.iter().enumerate().skip(ni + 1) {
            if done[nj] || Ew::of(&m.op).is_none() {
                continue;
            }
            if !m.inputs.contains(&last) {
                continue;
            }
            let ready = |i: &ValueId| {
                g.constants.contains_key(i)
                    || g.inputs.contains(i)
                    || g.nodes[..ni].iter().any(|p| p.outputs.contains(i))
            };
            let read = uses.get(&last).copied().unwrap_or(0);
            // A row group that took this node from its producer computes
            // it (see `rows`), if the group lowers as one region (else
            // the compile starts again without the group taking it).
            if let Some(gi) = self
                .fusion
                .row_groups
                .iter()
                .position(|r| r.nodes[0] != r.seed && r.nodes.contains(&nj))
            {
                if !self.group_lowers(gi)? {
                    self.trials.unfront = Some(self.fusion.row_groups[gi].seed);
                    return Err(err("a row group does not lower with its producer's nodes"));
                }
                break;
            }
            if !Self::extends_epilogue(g, m, last, read, &out_shape, ready) {
                break;
            }
            members.push(nj);
            done[nj] = true;
            last = m.outputs[0];
        }
        Ok(members)
    }

    pub(super) fn lower_nodes(&mut self) -> Result<(), LowerError> {
        let g = self.g;
        let mut uses: HashMap<ValueId, usize> = HashMap::new();
        for n in &g.nodes {
            for i in &n.inputs {
                *uses.entry(*i).or_default() += 1;
            }
        }
        let mut done = vec![false; g.nodes.len()];
        let producers: HashMap<ValueId, usize> = g
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(k, n)| n.outputs.iter().map(move |&v| (v, k)))
            .collect();
        for ni in 0..g.nodes.len() {
            if done[ni] {
                continue;
            }
            let n = &g.nodes[ni];
            done[ni] = true;
            self.lowering_node = ni;
            if self.opts.pipeline_tiles {
                self.e.side = self.side_for(ni, &producers);
            }
            if g.constants.contains_key(&n.outputs[0]) {
                continue;
            }
            if let Some(grp) = self
                .fusion
                .row_groups
                .iter()
                .find(|r| r.nodes[0] == ni)
                .cloned()
            {
                let before = self.e.code.len();
                if self.row_group(&grp)? {
                    for &k in &grp.nodes {
                        done[k] = true;
                    }
                    let names: Vec<String> = grp
                        .nodes
                        .iter()
                        .map(|&k| format!("{}({})", g.nodes[k].op.name(), g.nodes[k].name))
                        .collect();
                    self.push_region(
                        &grp.nodes,
                        (
                            format!("Rows: {}", names.join(" -> ")),
                            self.e.code.len() - before,
                        ),
                    )?;
                    continue;
                }
            }
            match &n.op {
                // A slice's reshape its transpose reads through.
                Op::Reshape { .. }
                    if self.layout.sliced.values().any(|s| s.nodes.contains(&ni)) =>
                {
                    continue;
                }
                Op::Reshape { .. } | Op::Identity => {
                    if g.constants.contains_key(&n.inputs[0]) {
                        return Err(Self::node_err(n, "a view of a constant was not folded"));
                    }
                    if self.layout.relayouts.contains(&n.outputs[0]) {
                        self.node_region(ni, "Relayout", |l, n| l.relayout(n))?;
                    }
                    continue;
                }
                // A cast that changes no bits is a view, like a reshape:
                // where its rows differ from its root's it has bytes of its
                // own, copied here.
                Op::Cast { .. } if cast_is_view(g, n) => {
                    if self.layout.relayouts.contains(&n.outputs[0]) {
                        self.node_region(ni, "Relayout", |l, n| l.relayout(n))?;
                    }
                    continue;
                }
                Op::Cast { to } => {
                    let from = g.ty(n.inputs[0]).elem;
                    return Err(Self::node_err(
                        n,
                        format!(
                            "Cast from {} to {} is not supported by the lowering yet (integers are held in f32: casts that keep the values compile)",
                            from.name(),
                            to.name()
                        ),
                    ));
                }
                Op::Div if !g.ty(n.outputs[0]).elem.is_float() => {
                    return Err(Self::node_err(n, "integer division is not supported yet"));
                }
                Op::Transpose { perm } if perm.iter().enumerate().all(|(i, p)| i == *p) => continue,
                // Its transpose reads its input.
                Op::Slice { .. } if self.layout.sliced.values().any(|s| s.nodes.contains(&ni)) => {
                    continue;
                }
                Op::Slice { starts, steps, .. } => {
                    self.node_region(ni, "Slice", |l, n| l.slice(n, starts, steps))?;
                    continue;
                }
                Op::Im2Col { window, fill } => {
                    self.node_region(ni, "Im2Col", |l, n| l.im2col(n, window, *fill))?;
                    continue;
                }
                // Its products read the windows from the image.
                Op::Im2Row { .. } if self.layout.windows.values().any(|&w| w == ni) => continue,
                Op::Im2Row { window, fill } => {
                    self.node_region(ni, "Im2Row", |l, n| l.im2row(n, window, *fill))?;
                    continue;
                }
                Op::WindowSum { window } => {
                    self.node_region(ni, "WindowSum", |l, n| l.window_sum(n, window))?;
                    continue;
                }
                Op::Concat { axis } => {
                    self.node_region(ni, "Concat", |l, n| l.concat(n, *axis))?;
                    continue;
                }
                Op::Reduce { kind, axes, .. } => {
                    self.node_region(ni, n.op.name(), |l, n| l.reduce(n, *kind, axes))?;
                    continue;
                }
                // Read untransposed by its one-row products (or lowered there).
                Op::Transpose { .. } if self.layout.dot_transposes.contains(&ni) => continue,
                Op::Transpose { .. } if self.layout.b_transposes.contains(&ni) => continue,
                // Its product wrote its result in place.
                Op::Transpose { .. } if self.layout.transposed.iter().any(|&(t, _)| t == ni) => {
                    continue;
                }
                // Its readers read its input's heads in place.
                Op::Transpose { .. } if self.layout.head_views.contains_key(&n.outputs[0]) => {
                    continue;
                }
                Op::Transpose { perm } => {
                    self.node_region(ni, "Transpose", |l, n| l.transpose(n, perm))?;
                    continue;
                }
                _ => {}
            }
            // The region: this node, then element-wise nodes consuming only its result.
            let members = self.epilogue_members(ni, &mut done, &uses)?;
            let before = self.e.code.len();
            // Element-wise regions read their producer's result chunk by
            // chunk: a half would only turn their registers over faster.
            if !matches!(n.op, Op::MatMul) {
                self.e.side = None;
            }
            self.region(&members).map_err(|e| {
                if e.node().is_some() {
                    return e;
                }
                // A missing operation is blamed on the node that needs it.
                let needs =
                    |k: &usize| Ew::of(&g.nodes[*k].op).is_some_and(|ew| e.lacks(&ew.text()));
                let k = members.iter().find(|k| needs(k)).unwrap_or(&members[0]);
                Self::node_err(&g.nodes[*k], e)
            })?;
            let names: Vec<String> = members
                .iter()
                .map(|&k| format!("{}({})", g.nodes[k].op.name(), g.nodes[k].name))
                .collect();
            self.push_region(&members, (names.join(" -> "), self.e.code.len() - before))?;
        }
        Ok(())
    }

    /// The half of the register files a region starting at node `n`
    /// prefers: the other half than the latest region producing its inputs
    /// (through views), so its first instructions need not wait for the
    /// registers that region's last ones read, and the scheduler may move
    /// it up beside that region (a transpose beside the product before it).
    /// A quarter of that half when the region just before is a sibling
    /// reading the same producer and already took the half or a quarter of
    /// it (the other quarter): the two would otherwise run one after the
    /// other through the registers they share.
    pub(super) fn side_for(&self, ni: usize, producers: &HashMap<ValueId, usize>) -> Option<u8> {
        let g = self.g;
        let n = &g.nodes[ni];
        // The region that made `v` and its side, through views (and nodes
        // lowered with their readers).
        let made = |v: ValueId| {
            let mut v = v;
            for _ in 0..8 {
                if let Some(&rs) = self.plan.value_sides.get(&v) {
                    return Some(rs);
                }
                v = *producers.get(&v).and_then(|&p| g.nodes[p].inputs.first())?;
            }
            None
        };
        let latest = n
            .inputs
            .iter()
            .filter_map(|&v| made(v))
            .max_by_key(|(r, _)| *r);
        let Some((r, side)) = latest else {
            return Some((self.plan.regions.len() % 2) as u8);
        };
        // A quarter stands for the half holding it.
        let half_of = |x: u8| {
            if x >= regalloc::QUARTERS {
                (x - regalloc::QUARTERS) / 2
            } else {
                x
            }
        };
        let half = 1 - half_of(side);
        let last = self.plan.region_side.last().copied().flatten();
        let sibling = r + 1 < self.plan.regions.len() && last.is_some_and(|x| half_of(x) == half);
        if !sibling {
            // The first of siblings to come (transposes copying the same
            // result, lowered each as a region) takes a quarter already.
            let copies = |k: usize| {
                matches!(g.nodes[k].op, Op::Transpose { .. })
                    && !self.layout.head_views.contains_key(&g.nodes[k].outputs[0])
                    && !self.layout.b_transposes.contains(&k)
                    && !self.layout.dot_transposes.contains(&k)
                    && !self.layout.transposed.iter().any(|&(t, _)| t == k)
            };
            let first_of_siblings = copies(ni)
                && (ni + 1..g.nodes.len())
                    .any(|k| copies(k) && made(g.nodes[k].inputs[0]).is_some_and(|(q, _)| q == r));
            return Some(if first_of_siblings {
                regalloc::QUARTERS + 2 * half
            } else {
                half
            });
        }
        // A sibling after one that took the half (or a quarter of it) takes
        // the other quarter of it, so siblings (the head splits of `q`, `k`
        // and `v`) overlap rather than run one after the other.
        let quarter = match last {
            Some(x) if x >= regalloc::QUARTERS => 1 - (x - regalloc::QUARTERS) % 2,
            _ => 1,
        };
        Some(regalloc::QUARTERS + 2 * half + quarter)
    }

    /// The skips of the row group started by node `seed` ([`masked`]).
    pub(super) fn skip_of(&self, seed: usize) -> Option<rows::masked::Skip> {
        self.fusion.skips.iter().find(|s| s.seed == seed).cloned()
    }

    /// Whether row group `gi` lowers as one region on this machine: tried,
    /// then undone, once per form (its operations and shapes: the layers of
    /// a model repeat theirs). A group that then fails after all is lowered
    /// node by node, as any.
    pub(super) fn group_lowers(&mut self, gi: usize) -> Result<bool, LowerError> {
        let g = self.g;
        let grp = self.fusion.row_groups[gi].clone();
        let form: GroupForm = grp
            .nodes
            .iter()
            .map(|&k| {
                let n = &g.nodes[k];
                let shapes = n
                    .inputs
                    .iter()
                    .chain(&n.outputs)
                    .map(|v| g.ty(*v).shape.clone());
                (n.op.name(), shapes.collect())
            })
            .collect();
        let key = form;
        if let Some(&ok) = self.trials.group_trials.get(&key) {
            return Ok(ok);
        }
        let attempt = self.attempt();
        let ok = self.row_group(&grp)?;
        self.undo(attempt);
        self.trials.group_trials.insert(key, ok);
        Ok(ok)
    }

    /// Lowers one region: a root node and its element-wise epilogue.
    pub(super) fn region(&mut self, members: &[usize]) -> Result<(), LowerError> {
        let g = self.g;
        let root = &g.nodes[members[0]];
        let out = g.nodes[*members.last().unwrap_or(&0)].outputs[0];
        let out_home = self
            .layout
            .homes
            .get(&out)
            .cloned()
            .ok_or_else(|| err("output without a home"))?;
        let (rows, cols) = (out_home.rows, out_home.cols);
        if rows == 0 || cols == 0 {
            return Ok(()); // an empty result: nothing to compute
        }
        if matches!(root.op, Op::MatMul) && g.ty(root.inputs[0]).shape.last() == Some(&0) {
            // An empty reduction: the product is zeros, placed as data.
            if members.len() > 1 {
                return Err(err(
                    "an empty reduction followed by element-wise ops is not supported yet",
                ));
            }
            let bytes = encode(
                out_home.dtype,
                std::iter::repeat_n(0.0, (rows * out_home.pitch) as usize),
            );
            self.pool.data.push(DataSegment {
                memory: self.e.m.memories[self.home_mem().index()].name.clone(),
                addr: out_home.addr()?,
                bytes,
            });
            return Ok(());
        }
        // Steps: (op, other operand, running value is the second operand).
        let mut steps: Vec<(Ew, Option<ValueId>, bool)> = Vec::new();
        let mut running = root.outputs[0];
        let root_input: Option<ValueId>;
        if let Op::MatMul = root.op {
            root_input = None;
        } else {
            let ew =
                Ew::of(&root.op).ok_or_else(|| Self::node_err(root, "not an element-wise op"))?;
            if ew.binary() {
                let (a, b) = (root.inputs[0], root.inputs[1]);
                let full = |v: ValueId| {
                    g.ty(v).shape == g.ty(root.outputs[0]).shape && !g.constants.contains_key(&v)
                };
                let computed = |v: ValueId| !g.constants.contains_key(&v);
                // The running value: a computed operand of the output's shape, else
                // a computed operand to broadcast (rows repeat as the tile is loaded).
                if full(a) || (!full(b) && computed(a)) {
                    root_input = Some(a);
                    steps.push((ew, Some(b), false));
                } else if full(b) || computed(b) {
                    root_input = Some(b);
                    steps.push((ew, Some(a), true));
                } else {
                    return Err(Self::node_err(
                        root,
                        "both operands are constants; the op should have been folded",
                    ));
                }
            } else {
                root_input = Some(root.inputs[0]);
                steps.push((ew, None, false));
            }
        }
        for &k in &members[1..] {
            let m = &g.nodes[k];
            let ew = Ew::of(&m.op).ok_or_else(|| Self::node_err(m, "not element-wise"))?;
            let swapped = m.inputs.len() == 2 && m.inputs[1] == running;
            let other = m.inputs.iter().copied().find(|i| *i != running);
            steps.push((ew, other, swapped));
            running = m.outputs[0];
        }
        // A constant with one value in every element is a register written
        // once per tile where the machine has an immediate splat, instead of
        // a tile of the output's shape read from home.
        let uniform = |v: ValueId, ew: Ew| -> Option<Operand> {
            let t = g.constants.get(&v)?;
            let k = *t.data.first()?;
            if !t.data.iter().all(|x| x.to_bits() == k.to_bits()) {
                return None;
            }
            ops::splat_file(&self.e, ew).map(|f| Operand::Uniform(k, f))
        };
        // Division without a division instruction: a reciprocal times (of a
        // constant at compile time). Other missing operations were rewritten
        // by instruction selection (`passes::select`).
        let mut plan: Vec<(Ew, Option<Operand>, bool)> = Vec::new();
        for (ew, other, swapped) in steps {
            let as_operand = |ew: Ew| other.map(|v| uniform(v, ew).unwrap_or(Operand::Value(v)));
            let other = as_operand(ew);
            match ew {
                Ew::Div if ops::ew_forms(&self.e, Ew::Div).is_empty() => {
                    if ops::ew_forms(&self.e, Ew::Recip).is_empty() {
                        return Err(LowerError::MissingOperation {
                            semantics: Ew::Div.text(),
                            message:
                                "cannot compile: the target lacks `d = a / b` and `d = recip(a)`"
                                    .to_owned(),
                        });
                    }
                    let other = as_operand(Ew::Mul);
                    if swapped {
                        // b / x as recip(x) * b.
                        plan.push((Ew::Recip, None, false));
                        plan.push((Ew::Mul, other, false));
                    } else {
                        plan.push((
                            Ew::Mul,
                            other.map(|o| match o {
                                // 1/k once, at compile time.
                                Operand::Uniform(k, f) => Operand::Uniform(1.0 / k, f),
                                o => Operand::Recip(Box::new(o)),
                            }),
                            false,
                        ));
                    }
                }
                // recip(sqrt(x)) as rsqrt(x), one instruction (and the only way without sqrt).
                Ew::Recip
                    if matches!(plan.last(), Some((Ew::Call(Func::Sqrt), None, _)))
                        && !ops::ew_forms(&self.e, Ew::Call(Func::Rsqrt)).is_empty() =>
                {
                    plan.pop();
                    plan.push((Ew::Call(Func::Rsqrt), None, false));
                }
                _ => plan.push((ew, other, swapped)),
            }
        }
        if !matches!(root.op, Op::MatMul) {
            // Tiles of half the rows while the buffers overflow a memory.
            let mut most = self.ew_tile(&out_home, plan.len()).0;
            loop {
                let attempt = self.attempt();
                let bufs = self.e.bufs.len();
                match self
                    .region_tiles(&None, &plan, root_input, out, &out_home, most)
                    .and_then(|()| self.fits_on_chip(bufs))
                {
                    Err(e) if e.is_overflow() && most > 1 => {
                        self.undo(attempt);
                        most /= 2;
                    }
                    done => return done,
                }
            }
        }
        // One row (per batch) by a transposed matrix that was not
        // transposed: dot products with its rows; failing that, the
        // transpose is lowered here and the product goes on as any.
        if let Some(ti) = g
            .nodes
            .iter()
            .position(|n| n.outputs.contains(&root.inputs[1]))
            .filter(|t| self.layout.dot_transposes.contains(t))
        {
            let attempt = self.attempt();
            let bufs = self.e.bufs.len();
            let k = g.nodes[ti].inputs[0];
            // Dot products stream through the whole register file.
            let side = self.e.side.take();
            match self
                .vector_dots(root, &plan, out, &out_home, k)
                .and_then(|()| self.fits_on_chip(bufs))
            {
                Ok(()) => return Ok(()),
                Err(_) => {
                    self.undo(attempt);
                    self.e.side = side;
                    let t = &g.nodes[ti];
                    let Op::Transpose { perm } = &t.op else {
                        return Err(err("not a transpose"));
                    };
                    self.transpose(t, perm).map_err(|e| Self::at_node(t, e))?;
                }
            }
        }
        // One row (per batch) by values stored transposed where a
        // memory computes (`Lowerer::in_place_column_homes`): no other way
        // reads them.
        if self
            .layout
            .homes
            .get(&root.inputs[1])
            .is_some_and(|h| h.columns.is_some())
        {
            return self.dots_in_columns(root, &plan, out, &out_home);
        }
        // One row (per batch) by a matrix: on the vector unit where it can.
        {
            let attempt = self.attempt();
            let bufs = self.e.bufs.len();
            let side = self.e.side.take();
            match self
                .vector_gemv(root, &plan, out, &out_home)
                .and_then(|done| self.fits_on_chip(bufs).map(|()| done))
            {
                Ok(true) => return Ok(()),
                Ok(false) => self.e.side = side,
                Err(_) => {
                    self.undo(attempt);
                    self.e.side = side;
                }
            }
        }
        // B made by a transpose that was not lowered: read as its rows of `N`
        // by a form taking B transposed; failing that, the transpose is
        // lowered here and the product goes on as any.
        if let Some(ti) = self.b_transpose_of(root.inputs[1]) {
            let attempt = self.attempt();
            let space = self.plan.space.len();
            match self.matmul_tiles(root, &plan, root_input, out, &out_home) {
                Ok(()) => return Ok(()),
                Err(_) => {
                    self.undo(attempt);
                    self.plan.space.truncate(space);
                    self.layout.lowered_transposes.insert(ti);
                    let t = &g.nodes[ti];
                    let Op::Transpose { perm } = &t.op else {
                        return Err(err("not a transpose"));
                    };
                    self.transpose(t, perm).map_err(|e| Self::at_node(t, e))?;
                }
            }
        }
        self.matmul_tiles(root, &plan, root_input, out, &out_home)
    }
}
