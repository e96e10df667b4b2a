//! Residency: which values passed between regions stay in on-chip memory
//! from their producer to their last reader, and which are evicted home.

use super::Lowerer;
use super::emit::Base;
use super::error::LowerError;
use super::layout::view;
use super::machine::{self, Place};
use super::ops::Ew;
use crate::ir::{Graph, Op, ValueId};
use isa_specs::model::MemId;
use std::collections::HashMap;

/// Residency: the buffers kept on chip across regions, and the values evicted home.
pub(super) struct Kept<'a> {
    /// Buffers holding values kept on chip across regions, and the last
    /// node reading each.
    pub(super) kept_until: HashMap<usize, usize>,
    /// Why the machine cannot keep values on chip, if it cannot.
    pub(super) residency_blocked: Option<String>,
    /// Nodes whose values are kept at home (a first attempt failed there).
    pub(super) evicted: &'a [String],
}

impl Lowerer<'_> {
    /// The values kept on chip, where, and the last node reading each
    /// (through its views).
    ///
    /// Candidates are the values made by one node and read by later ones
    /// that are neither graph outputs nor views: with
    /// [`Options::residency`], every value passed between regions; without
    /// it, only the intermediates of each recognised attention (fused
    /// regions), in program order. Each lives from its producer to its last reader; a candidate is kept
    /// when, at every node it is live across, the values kept come to at
    /// most 9/16 of the memory tiles from home land in (the rest is the
    /// tiles'; measured in `docs/compiler.md`). Among the others, values with the shortest lives and
    /// the most readers per byte go first: those save the most home
    /// traffic per byte of on-chip memory held. The rest live at home
    /// (evicted for their whole life, not spilled part-way).
    pub(super) fn residency(
        &mut self,
        alias: &HashMap<ValueId, ValueId>,
    ) -> Result<HashMap<ValueId, (MemId, usize)>, LowerError> {
        let mut kept = HashMap::new();
        if self.fusion.attentions.is_empty() && !self.opts.residency {
            return Ok(kept);
        }
        let land = self.landing_of(self.layout.act)?;
        // Results are written into a kept value's buffer from that memory:
        // through registers and back, writing just the tile.
        let (mem, cap) = match land.place {
            Place::Mem(mem) if self.info.round_trip(land).is_some() => {
                (mem, self.e.m.memories[mem.index()].size.value.max(0) as u64)
            }
            _ => {
                self.kept.residency_blocked = Some(format!(
                    "no instruction sequence writes a tile of {} into a buffer of {} (through registers and back)",
                    land.dtype.name(),
                    self.e.place_name(land.place)
                ));
                (self.home_mem(), 0)
            }
        };
        let g = self.g;
        // As `Pad::Aligned` lays them out.
        let per = (self.info.mem_align[mem.index()] / self.layout.act.bytes()).max(1) as i64;
        let granule = machine::lcm(self.info.pitch_granule.max(1), per);
        let row_granule = self.info.row_granule.max(1);
        let act = self.layout.act;
        // In the type it is kept in where products read it so.
        let bytes = |v: ValueId| {
            let (r, c) = view(&g.ty(v).shape);
            let dt = self.product_operand_dtype(v, mem).unwrap_or(act);
            (machine::rup(r, row_granule) * machine::rup(c, granule)) as u64 * dt.bytes()
        };
        // Lifetimes over node positions, views reading for their roots.
        let mut made: HashMap<ValueId, usize> = HashMap::new();
        let mut last: HashMap<ValueId, usize> = HashMap::new();
        let mut readers: HashMap<ValueId, usize> = HashMap::new();
        for (k, n) in g.nodes.iter().enumerate() {
            // Im2Col's and Im2Row's padding is written as data at load
            // time: at home. Windows read in place are read where their
            // products are.
            if self.layout.windows.values().any(|&w| w == k) {
                continue;
            }
            if !matches!(n.op, Op::Im2Col { .. } | Op::Im2Row { .. }) {
                for &o in &n.outputs {
                    made.insert(o, k);
                }
            }
            for i in &n.inputs {
                // A slice its transpose reads through is read as its input;
                // windows read in place, as their image.
                let i = self.layout.sliced.get(i).map_or(i, |s| &s.input);
                let i = self
                    .layout
                    .windows
                    .get(i)
                    .map_or(i, |&w| &g.nodes[w].inputs[0]);
                let root = *alias.get(i).unwrap_or(i);
                last.insert(root, k);
                *readers.entry(root).or_default() += 1;
            }
        }
        let out_root = |v: ValueId| {
            g.outputs.contains(&v) || alias.iter().any(|(a, r)| *r == v && g.outputs.contains(a))
        };
        // A view with other columns than a padded root would need a copy;
        // but a transpose's result written by its product in place is laid
        // out as its rows of tokens ([`Self::token_rows`]), and a head view
        // reads its matrix's rows as they are.
        let mut excluded: std::collections::HashSet<ValueId> = alias
            .iter()
            .filter(|(a, r)| {
                let c = view(&g.ty(**r).shape).1;
                !self.layout.head_views.contains_key(*a)
                    && view(&g.ty(**a).shape).1 != c
                    && machine::rup(c, granule) != c
                    && self.token_rows(**r, granule).is_none()
            })
            .map(|(_, r)| *r)
            .collect();
        for n in g
            .nodes
            .iter()
            .filter(|n| self.kept.evicted.contains(&n.name))
        {
            for v in n.inputs.iter().chain(&n.outputs) {
                excluded.insert(*alias.get(v).unwrap_or(v));
            }
        }
        // Values inside a row group live in registers.
        let in_rows: std::collections::HashSet<ValueId> = self
            .fusion
            .row_groups
            .iter()
            .flat_map(|r| r.inner(g))
            .chain(
                self.layout
                    .dot_transposes
                    .iter()
                    .map(|&t| g.nodes[t].outputs[0]),
            )
            .chain(
                self.layout
                    .b_transposes
                    .iter()
                    .map(|&t| g.nodes[t].outputs[0]),
            )
            .chain(
                self.layout
                    .sliced
                    .values()
                    .map(|s| g.nodes[s.nodes[0]].outputs[0]),
            )
            .collect();
        let in_epilogue = self.fused_into_epilogues(alias);
        let candidate = |v: ValueId| {
            !excluded.contains(&v)
                && !in_rows.contains(&v)
                && !in_epilogue.contains(&v)
                && made.contains_key(&v)
                && last.contains_key(&v)
                && !alias.contains_key(&v)
                && !g.constants.contains_key(&v)
                && !out_root(v)
                && g.ty(v).elem.is_float()
        };
        let budget = cap * 9 / 16;
        let mut load = vec![0u64; g.nodes.len() + 1];
        let mut try_keep = |v: ValueId, kept: &mut HashMap<ValueId, (MemId, usize)>| -> bool {
            if kept.contains_key(&v) {
                return true;
            }
            let (a, b) = (made[&v], last[&v]);
            let size = bytes(v);
            if budget == 0 || load[a..=b].iter().any(|&x| x + size > budget) {
                return false;
            }
            for x in &mut load[a..=b] {
                *x += size;
            }
            kept.insert(v, (mem, b));
            true
        };
        // Without residency, attention's intermediates are the only
        // candidates; with it, they compete with the others on the same
        // terms (first-come kept the large scores of a long sequence and
        // left no room for values that save more traffic per byte).
        if !self.opts.residency {
            for (a, _) in &self.fusion.attentions {
                for v in a.inner.iter().copied().filter(|v| candidate(*v)) {
                    try_keep(v, &mut kept);
                }
            }
        }
        if self.opts.residency {
            let mut rest: Vec<ValueId> = made
                .keys()
                .copied()
                .filter(|v| candidate(*v) && !kept.contains_key(v))
                .collect();
            // Most readers per byte-node held first; then program order.
            let score = |v: &ValueId| {
                let span = (last[v] - made[v] + 1) as f64;
                readers[v] as f64 / (span * bytes(*v).max(1) as f64)
            };
            rest.sort_by(|x, y| {
                score(y)
                    .total_cmp(&score(x))
                    .then(made[x].cmp(&made[y]))
                    .then(x.index().cmp(&y.index()))
            });
            for v in rest {
                try_keep(v, &mut kept);
            }
        }
        for (a, keep) in &mut self.fusion.attentions {
            let own = a.inner.iter().filter(|v| candidate(**v));
            let n = own.clone().filter(|v| kept.contains_key(*v)).count();
            *keep = (n, own.count());
        }
        Ok(kept)
    }

    /// Whether element-wise node `m`, reading `last` (read `uses` times in
    /// the graph), joins the epilogue that makes `last`: `last` is read
    /// there alone, once, and is no graph output; `m` keeps the region's
    /// `shape`; its other operands are `ready` before the region starts.
    pub(super) fn extends_epilogue(
        g: &Graph,
        m: &crate::ir::Node,
        last: ValueId,
        uses: usize,
        shape: &[usize],
        ready: impl Fn(&ValueId) -> bool,
    ) -> bool {
        Ew::of(&m.op).is_some()
            && uses == 1
            && !g.outputs.contains(&last)
            && g.ty(m.outputs[0]).shape == shape
            && m.inputs.iter().filter(|i| **i == last).count() == 1
            && m.inputs.iter().all(|i| *i == last || ready(i))
    }

    /// Values that never reach memory because the region lowering makes
    /// (`lower_nodes`) computes them in a product's or an element-wise
    /// node's epilogue, in registers: made by a product or an element-wise
    /// node, read once, by an element-wise node of the same shape outside
    /// any row group whose other operands are constants or graph inputs.
    /// (The lowering also fuses nodes whose other operands were computed
    /// earlier; those are left out here, so the values it keeps for them
    /// are at worst kept in vain, as before.) Keeping them on chip would
    /// hold memory for nothing.
    pub(super) fn fused_into_epilogues(
        &self,
        alias: &HashMap<ValueId, ValueId>,
    ) -> std::collections::HashSet<ValueId> {
        let g = self.g;
        let mut readers: HashMap<ValueId, Vec<usize>> = HashMap::new();
        for (k, n) in g.nodes.iter().enumerate() {
            for &i in &n.inputs {
                readers.entry(i).or_default().push(k);
            }
        }
        let in_rows: std::collections::HashSet<usize> = self
            .fusion
            .row_groups
            .iter()
            .flat_map(|r| r.nodes.iter().copied())
            .collect();
        let aliased: std::collections::HashSet<ValueId> = alias.values().copied().collect();
        g.nodes
            .iter()
            .enumerate()
            .filter(|(k, n)| {
                !in_rows.contains(k) && (matches!(n.op, Op::MatMul) || Ew::of(&n.op).is_some())
            })
            .filter_map(|(_, n)| {
                let v = *n.outputs.first()?;
                let [c] = readers.get(&v)?.as_slice() else {
                    return None;
                };
                let ready = |i: &ValueId| g.constants.contains_key(i) || g.inputs.contains(i);
                let fused = !in_rows.contains(c)
                    && !aliased.contains(&v)
                    && !alias.contains_key(&v)
                    && Self::extends_epilogue(g, &g.nodes[*c], v, 1, &g.ty(v).shape, ready);
                fused.then_some(v)
            })
            .collect()
    }

    /// Whether the node being lowered, or the one error `e` names, reads or
    /// writes a value kept on chip.
    pub(super) fn touches_kept(&self, e: &LowerError) -> bool {
        let g = self.g;
        let named = e
            .node()
            .and_then(|name| g.nodes.iter().find(|n| n.name == name));
        let on_chip = |v: &ValueId| {
            self.layout
                .homes
                .get(v)
                .is_some_and(|h| matches!(h.base, Base::Buf(_)))
        };
        g.nodes
            .get(self.lowering_node)
            .into_iter()
            .chain(named)
            .any(|n| n.inputs.iter().chain(&n.outputs).any(on_chip))
    }
}
