//! Row-wise fusion: a layer normalisation, a softmax, a GELU, any graph of
//! element-wise operations and reductions over the last dimension of one
//! shape, lowered as one region that reads each row from memory once, keeps
//! everything in between in registers, and writes one result.
//!
//! **Recognition** ([`crate::passes::rowgroups::row_groups`], on the graph after `canon`). A group
//! starts at a reduction over the last dimension (dimensions kept), or at an
//! element-wise node whose computed operand `x` is read by several
//! element-wise nodes (a fan-out, as GELU's `x`). It takes, in graph order,
//! every later element-wise node or last-dimension reduction that reads a
//! value of the group (or `x`) and whose other operands are ready before the
//! group starts: computed values of the full shape or of the row shape
//! (`[.., 1]`), and constants that are uniform, one row (`[C]`, a scale or a
//! shift) or of the full shape (or repeated to it along leading
//! dimensions, as a causal mask over every head). A group that reduces
//! (with row broadcasts, any group of several rows) then takes, at its
//! front, the element-wise nodes that make its source and are read only by
//! it (attention's scale and mask, GELU's bias), so the product before it
//! writes its raw result once and the group reads it once
//! ([`crate::passes::rowgroups::row_groups_with`]). The last node's result is the group's
//! output; nodes it does not need are dropped. Every other value of the
//! group must be read only inside it, and the output must have the full
//! shape.
//!
//! **Lowering** (`Lowerer::row_group`). Rows come on chip in bands (the
//! next band's transfer is issued before the current band is computed).
//! Each block of rows one register holds is loaded once, chunk by chunk of
//! the register's width; element-wise nodes run chunk by chunk; a reduction
//! combines the whole chunks element-wise in a tree, reduces across the lanes
//! once (the partial chunk apart), and its result stays broadcast along a
//! register, so the nodes after it read it where it is. Uniform constants
//! are splatted once per region, constant rows loaded into every row of a
//! register. A division by a row result or a uniform constant is a
//! multiplication by its reciprocal (computed once per block of rows), a
//! reciprocal of a square root one `rsqrt`, a product feeding a sum one
//! multiply-add, where the machine has them. A group without reductions is
//! computed one chunk at a time. The group is lowered only where its
//! registers fit the file (its live values, chunk by chunk, counted in graph
//! order); otherwise, or where an operation is missing, its nodes are
//! lowered one region at a time as before.

pub mod masked;
mod plan;

use super::emit::{MemTile, Pad, RegTile, Val};
use super::machine::{Loc, Place};
use super::ops::{self, Ew};
use super::{LowerError, Lowerer, PackKey, err, view};
use crate::ir::{Op, ReduceKind, Unary, ValueId};
use crate::passes::rowgroups::{RowGroup, chunk_uniform, const_row, row_reduce, uniform};
use crate::regalloc;
use isa_specs::model::{Func, RegFileId};
pub(super) use plan::{Arg, Calc, MaskByPosition, Plan, PlanStep, causal_offset};
use std::collections::{HashMap, HashSet};

/// A value of the current block of rows in registers.
#[derive(Clone, Debug)]
enum Held {
    /// Chunks of the full row (those being computed).
    Full(Vec<RegTile>),
    /// A row result, broadcast along a register.
    Row(RegTile),
}

impl Lowerer<'_> {
    /// The plan of group `grp` computed in `file`, or None where an
    /// operation it needs has no form there.
    fn row_plan(&self, grp: &RowGroup, file: RegFileId) -> Option<Plan> {
        let g = self.g;
        let here = Place::Reg(file);
        let has = |ew: Ew| {
            ops::ew_forms(&self.e, ew)
                .iter()
                .any(|f| f.locs.iter().all(|l| l.place == here))
        };
        let full = g.ty(grp.output).shape.clone();
        let members: HashSet<usize> = grp.nodes.iter().copied().collect();
        // Reads of `v` inside the group (a node reading it twice counts twice).
        let uses = |v: ValueId| {
            g.nodes
                .iter()
                .enumerate()
                .filter(|(k, _)| members.contains(k))
                .map(|(_, n)| n.inputs.iter().filter(|i| **i == v).count())
                .sum::<usize>()
        };
        let mut slot_of: HashMap<ValueId, usize> = HashMap::new();
        let mut sources = Vec::new();
        let mut slots = 0;
        let mut steps: Vec<PlanStep> = Vec::new();
        // Nodes folded into their one reader: a square root into a
        // reciprocal (rsqrt), a product into a sum (multiply-add).
        let mut folded: HashMap<ValueId, usize> = HashMap::new();
        for &k in &grp.nodes {
            let n = &g.nodes[k];
            let o = n.outputs[0];
            let reader = || {
                grp.nodes
                    .iter()
                    .find(|&&j| g.nodes[j].inputs.contains(&o))
                    .map(|&j| &g.nodes[j].op)
            };
            let single = o != grp.output && uses(o) == 1;
            if single
                && matches!(n.op, Op::Unary(Unary::Sqrt))
                && matches!(reader(), Some(Op::Unary(Unary::Reciprocal)))
                && has(Ew::Call(Func::Rsqrt))
            {
                folded.insert(o, k);
                continue;
            }
            if single
                && matches!(n.op, Op::Mul)
                && matches!(reader(), Some(Op::Add))
                && has(Ew::MulAdd)
                && has(Ew::Mul)
                && has(Ew::Add)
            {
                folded.insert(o, k);
                continue;
            }
        }
        let slot_arg = |v: ValueId,
                        slot_of: &mut HashMap<ValueId, usize>,
                        sources: &mut Vec<(ValueId, usize)>,
                        slots: &mut usize|
         -> Arg {
            if let Some(&s) = slot_of.get(&v) {
                return Arg::Slot(s);
            }
            if let Some(k) = uniform(g, v) {
                return Arg::Uniform(k);
            }
            if g.constants.contains_key(&v) {
                return if const_row(&g.ty(v).shape, &full) {
                    Arg::ConstRow(v)
                } else {
                    Arg::Const(v)
                };
            }
            if g.ty(v).shape != full {
                return Arg::OuterRow(v);
            }
            let s = *slots;
            *slots += 1;
            slot_of.insert(v, s);
            sources.push((v, s));
            Arg::Slot(s)
        };
        let is_row = |a: &Arg, steps: &[PlanStep]| match a {
            Arg::Slot(s) => steps.iter().any(|p| p.slot == *s && p.row),
            Arg::Uniform(_) | Arg::OuterRow(_) => true,
            Arg::ConstRow(_) | Arg::Const(_) => false,
        };
        for &k in &grp.nodes {
            let n = &g.nodes[k];
            let o = n.outputs[0];
            if folded.contains_key(&o) {
                continue;
            }
            let row = g.ty(o).shape != full;
            let mut arg = |v: ValueId| slot_arg(v, &mut slot_of, &mut sources, &mut slots);
            let calc = if let Some(kind) = row_reduce(g, n) {
                match arg(n.inputs[0]) {
                    Arg::Slot(s) => Calc::Reduce(kind, s),
                    _ => return None,
                }
            } else {
                let ew = Ew::of(&n.op)?;
                // Operands, with a folded producer expanded.
                let mut args = Vec::new();
                let mut fma: Option<(Arg, Arg)> = None;
                let mut rsqrt: Option<Arg> = None;
                for &v in &n.inputs {
                    match folded.get(&v).map(|&p| &g.nodes[p]) {
                        Some(p) if matches!(p.op, Op::Mul) => {
                            fma = Some((arg(p.inputs[0]), arg(p.inputs[1])));
                        }
                        Some(p) => rsqrt = Some(arg(p.inputs[0])),
                        None => args.push(arg(v)),
                    }
                }
                match (ew, fma, rsqrt) {
                    (Ew::Add, Some((a, b)), None) if args.len() == 1 => {
                        Calc::Ew(Ew::MulAdd, vec![a, b, args[0]])
                    }
                    (Ew::Recip, None, Some(a)) => Calc::Ew(Ew::Call(Func::Rsqrt), vec![a]),
                    (_, None, None) => Calc::Ew(ew, args),
                    _ => return None,
                }
            };
            // Rewrites where an instruction is missing, or a cheaper one serves.
            let calc = match calc {
                Calc::Ew(Ew::Div, args) => {
                    let (a, b) = (args[0], args[1]);
                    match b {
                        Arg::Uniform(k) => Calc::Ew(Ew::Mul, vec![a, Arg::Uniform(1.0 / k)]),
                        b if is_row(&b, &steps) || !has(Ew::Div) => {
                            // 1 / b once (per block of rows, for a row result), then products.
                            if !has(Ew::Recip) {
                                return None;
                            }
                            let t = slots;
                            slots += 1;
                            steps.push(PlanStep {
                                slot: t,
                                row: is_row(&b, &steps),
                                calc: Calc::Ew(Ew::Recip, vec![b]),
                            });
                            Calc::Ew(Ew::Mul, vec![a, Arg::Slot(t)])
                        }
                        b => Calc::Ew(Ew::Div, vec![a, b]),
                    }
                }
                Calc::Ew(Ew::Relu, args) if !has(Ew::Relu) => {
                    Calc::Ew(Ew::Max, vec![args[0], Arg::Uniform(0.0)])
                }
                Calc::Ew(Ew::Neg, args) if !has(Ew::Neg) => {
                    Calc::Ew(Ew::Sub, vec![Arg::Uniform(0.0), args[0]])
                }
                Calc::Ew(Ew::MulAdd, args) => match self.mask_by_position(&args, file, &full) {
                    Some(mask) => Calc::Causal(args, mask),
                    None => Calc::Ew(Ew::MulAdd, args),
                },
                c => c,
            };
            if let Calc::Ew(ew, _) = &calc
                && !has(*ew)
            {
                return None;
            }
            let s = slots;
            slots += 1;
            slot_of.insert(o, s);
            steps.push(PlanStep { slot: s, row, calc });
        }
        let mut consts = Vec::new();
        for st in &steps {
            if let Calc::Ew(_, args) = &st.calc {
                for a in args {
                    if let Arg::Const(v) = a
                        && !consts.contains(v)
                    {
                        consts.push(*v);
                    }
                }
            }
        }
        Some(Plan {
            sources,
            consts,
            output: *slot_of.get(&grp.output)?,
            steps,
            slots,
        })
    }

    /// The most registers of `file` the plan holds at once over one block
    /// of rows (`chunks` registers per full-row value), a little over.
    fn row_pressure(plan: &Plan, chunks: usize) -> usize {
        let n = plan.steps.len();
        // Last step reading each slot (sources are read from step 0 on).
        let mut last = vec![0usize; plan.slots];
        let mut made = vec![0usize; plan.slots];
        let mut row = vec![false; plan.slots];
        for (i, st) in plan.steps.iter().enumerate() {
            made[st.slot] = i;
            row[st.slot] = st.row;
            let reads: Vec<usize> = match &st.calc {
                Calc::Ew(_, args) | Calc::Causal(args, _) => args
                    .iter()
                    .filter_map(|a| match a {
                        Arg::Slot(s) => Some(*s),
                        _ => None,
                    })
                    .collect(),
                Calc::Reduce(_, s) => vec![*s],
            };
            for s in reads {
                last[s] = i;
            }
        }
        last[plan.output] = n;
        let uniforms: HashSet<u64> = plan
            .steps
            .iter()
            .flat_map(|st| match &st.calc {
                Calc::Ew(_, args) => args.clone(),
                Calc::Causal(..) | Calc::Reduce(..) => Vec::new(),
            })
            .filter_map(|a| match a {
                Arg::Uniform(k) => Some(k.to_bits()),
                _ => None,
            })
            .collect();
        let mut peak = 0;
        for i in 0..n {
            let live: usize = (0..plan.slots)
                .filter(|&s| made[s] <= i && last[s] >= i)
                .map(|s| if row[s] { 1 } else { chunks })
                .sum();
            // A reduction's tree holds half its chunks more.
            let extra = match plan.steps[i].calc {
                Calc::Reduce(..) => chunks / 2 + 2,
                Calc::Ew(..) | Calc::Causal(..) => 2,
            };
            peak = peak.max(live + extra);
        }
        // Chunks of full-shape constants may be uniform registers (one
        // per constant), and skipped columns store a register of zeros.
        let consts = if plan.consts.is_empty() {
            0
        } else {
            plan.consts.len() + 1
        };
        peak + uniforms.len() + 1 + consts
    }

    /// The register files that can compute group `grp` with its registers
    /// fitting, and the plan for each (none: the group is not fused).
    pub(super) fn row_candidates(&self, grp: &RowGroup) -> Vec<(RegFileId, Plan)> {
        let g = self.g;
        let cols = view(&g.ty(grp.output).shape).1;
        let reduces = grp
            .nodes
            .iter()
            .any(|&k| row_reduce(g, &g.nodes[k]).is_some());
        let mut out = Vec::new();
        for file in ops::row_broadcast_files(&self.e) {
            let Some(plan) = self.row_plan(grp, file) else {
                continue;
            };
            let gc = self.e.granule(file).1.max(1);
            let chunks = if reduces {
                ((cols + gc - 1) / gc) as usize
            } else {
                1
            };
            let count = self.e.m.regfiles[file.index()].count.value.max(0) as usize;
            if Self::row_pressure(&plan, chunks) <= count {
                out.push((file, plan));
            }
        }
        out
    }

    /// Lowers row group `grp` as one region; false (nothing emitted) where
    /// the machine cannot (then its nodes are lowered one by one).
    pub(super) fn row_group(&mut self, grp: &RowGroup) -> Result<bool, LowerError> {
        let g = self.g;
        let Some(out_home) = self.layout.homes.get(&grp.output).cloned() else {
            return Ok(false);
        };
        let (rows, cols) = view(&g.ty(grp.output).shape);
        if rows == 0 || cols == 0 {
            return Ok(false);
        }
        let reduces = grp
            .nodes
            .iter()
            .any(|&k| row_reduce(g, &g.nodes[k]).is_some());
        // A group skipping masked work lowers in the file its skips were
        // planned for, or the compile starts again without them (its
        // producer skipped tiles only this group's plan leaves unread).
        let skip = self.skip_of(grp.seed);
        for (file, plan) in self.row_candidates(grp) {
            if skip.as_ref().is_some_and(|s| s.file != file) {
                continue;
            }
            let (gr, gc) = self.e.granule(file);
            // Repeated constants on chip whole if they fit, else by bands.
            for whole in [true, false] {
                let attempt = self.attempt();
                let bufs = self.e.bufs.len();
                let side = self.e.side;
                let done = self.row_region(grp, &plan, file, (gr, gc), reduces, &out_home, whole);
                self.e.side = side;
                match done.and_then(|()| self.fits_on_chip(bufs)) {
                    Ok(()) => return Ok(true),
                    Err(_) => self.undo(attempt),
                }
            }
        }
        if skip.is_some() {
            self.trials.unskip = Some(grp.seed);
            return Err(err("a row group skipping masked work does not lower"));
        }
        Ok(false)
    }

    /// The band and block loops of [`Self::row_group`]. With `whole`, a
    /// constant the full shape repeats along leading dimensions (a mask
    /// over every head) comes on chip whole, once, instead of by bands
    /// with the sources (once per head).
    #[allow(clippy::too_many_arguments)]
    fn row_region(
        &mut self,
        grp: &RowGroup,
        plan: &Plan,
        file: RegFileId,
        (gr, gc): (i64, i64),
        reduces: bool,
        out_home: &super::Home,
        whole: bool,
    ) -> Result<(), LowerError> {
        let g = self.g;
        self.cache.kept_a = None;
        self.cache.kept_b.clear();
        self.cache.new_region();
        let (rows, cols) = (out_home.rows, out_home.cols);
        let skip = self.skip_of(grp.seed).filter(|s| s.file == file);
        let reg = Loc {
            place: Place::Reg(file),
            dtype: self.e.m.regfiles[file.index()].dtype,
        };
        let land = self.landing_of(self.layout.act)?;
        let Place::Mem(lm) = land.place else {
            return Err(err("tiles from home land in no memory"));
        };
        // Where results go from the registers: the first memory on the way back.
        let back = self
            .info
            .copies
            .iter()
            .find(|c| c.from == reg && matches!(c.to.place, Place::Mem(_)) && c.sem.is_none())
            .map(|c| c.to)
            .ok_or_else(|| err("nothing stores the registers back to memory"))?;
        let Place::Mem(back_mem) = back.place else {
            unreachable!()
        };
        let homes: Vec<super::Home> = plan
            .sources
            .iter()
            .map(|(v, _)| {
                self.layout
                    .homes
                    .get(v)
                    .cloned()
                    .ok_or_else(|| err("operand without a home"))
            })
            .collect::<Result<_, _>>()?;
        let home_mem = self.info.home;
        let at_home = |h: &super::Home| h.mem == home_mem;
        // Bands: two in flight within an eighth of the smallest on-chip memory.
        let staged = homes.iter().filter(|h| at_home(h)).count() as i64
            + plan.consts.len() as i64
            + i64::from(at_home(out_home));
        let row_bytes = super::machine::rup(cols, gc) * 4 * staged.max(1);
        let band = ((self.tile_budget() / 16 / row_bytes.max(1)) / gr * gr).clamp(gr, 256.max(gr));
        let uniforms: &mut HashMap<u64, RegTile> = &mut HashMap::new();
        // Repeated constants on chip whole: each with its rows.
        let mut repeated: HashMap<ValueId, (MemTile, i64)> = HashMap::new();
        if whole {
            let mut waits = Vec::new();
            for &v in &plan.consts {
                let Some(own) = g
                    .constants
                    .get(&v)
                    .map(|t| t.data.len() as i64 / cols.max(1))
                else {
                    continue;
                };
                let Val::Mem(t) = self.operand_tile(v, grp.output, 0, 0, own, cols)? else {
                    continue;
                };
                let cland = self.landing_of(t.dtype)?;
                let Place::Mem(cm) = cland.place else {
                    continue;
                };
                if own >= rows || t.mem != self.info.home {
                    continue;
                }
                let buf = self
                    .e
                    .buffer_padded(cm, cland.dtype, own, cols, Pad::Registers);
                let (s, pieces) = self.stage_pieces(&t, cland, &buf)?;
                waits.extend(pieces);
                repeated.insert(v, (s, own));
            }
            for p in &waits {
                self.e.ready(p).map_err(err)?;
            }
        }
        // Bands within one repeat of those constants (a divisor of their rows).
        let band = (1..=band / gr)
            .rev()
            .map(|k| k * gr)
            .find(|b| repeated.values().all(|(_, own)| own % b == 0))
            .unwrap_or(band);
        // Bands grow from an eighth to the full band (each aligned to its
        // size), so the first block waits for a short transfer only.
        let sizes = band_sizes(band, gr, self.opts.band_runs);
        let stage = |l: &mut Self, r: i64| -> Result<Vec<MemTile>, LowerError> {
            let h = band_at(&sizes, band, r).min(rows - r);
            let mut tiles = Vec::new();
            for home in &homes {
                if !at_home(home) {
                    tiles.push(home.tile(r, 0, h, cols));
                    continue;
                }
                let buf = l.e.buffer_padded(lm, land.dtype, h, cols, Pad::Registers);
                match l
                    .e
                    .to_loc(
                        Val::Mem(home.tile(r, 0, h, cols)),
                        land,
                        Some(&buf),
                        Pad::Dense,
                    )
                    .map_err(err)?
                {
                    Val::Mem(t) => tiles.push(t),
                    _ => return Err(err("a band landed in a register")),
                }
            }
            // Constants at the full shape: the band's rows of them, from
            // their own rows where a band repeats consecutive ones.
            for &v in &plan.consts {
                if let Some((s, own)) = repeated.get(&v)
                    && r % own + h <= *own
                {
                    tiles.push(s.view(r % own, 0, h, cols));
                    continue;
                }
                let Val::Mem(t) = l.operand_tile(v, grp.output, r, 0, h, cols)? else {
                    return Err(err("a constant's band is not in memory"));
                };
                let cland = l.landing_of(t.dtype)?;
                let Place::Mem(cm) = cland.place else {
                    return Err(err("tiles from home land in no memory"));
                };
                if t.mem != l.info.home {
                    tiles.push(t);
                    continue;
                }
                let buf = l.e.buffer_padded(cm, cland.dtype, h, cols, Pad::Registers);
                match l
                    .e
                    .to_loc(Val::Mem(t), cland, Some(&buf), Pad::Dense)
                    .map_err(err)?
                {
                    Val::Mem(t) => tiles.push(t),
                    _ => return Err(err("a band landed in a register")),
                }
            }
            Ok(tiles)
        };
        // Blocks start on the half the region prefers.
        let base = self.e.side.map_or(0, usize::from);
        let quarter = (self.e.m.regfiles[file.index()].count.value / 4) as usize;
        let mut next = Some(stage(self, 0)?);
        self.stage_const_rows(plan)?;
        let mut r0 = 0;
        while let Some(tiles) = next.take() {
            let band = band_at(&sizes, band, r0);
            let hb = band.min(rows - r0);
            if r0 + band < rows {
                next = Some(stage(self, r0 + band)?);
            }
            for t in &tiles {
                self.e.ready(t).map_err(err)?;
            }
            let (dst, to_home) = if at_home(out_home) {
                let buf = self
                    .e
                    .buffer_padded(back_mem, back.dtype, hb, cols, Pad::Registers);
                (buf, true)
            } else {
                (out_home.tile(r0, 0, hb, cols), false)
            };
            let dst_loc = if to_home {
                back
            } else {
                Loc {
                    place: Place::Mem(out_home.mem),
                    dtype: out_home.dtype,
                }
            };
            // Blocks of rows by pieces of columns: whole rows where the
            // group reduces them; otherwise a column chunk at a time, down
            // all the band's rows before the next chunk, so a product
            // reading the result by columns (a reduction step of its `A`)
            // may start on the first chunks while the others are computed,
            // as its producer's column tiles may feed the first chunks.
            let blocks: Vec<(i64, i64)> = (0..hb)
                .step_by(gr as usize)
                .map(|r| (r, gr.min(hb - r)))
                .collect();
            let pieces: Vec<(i64, i64)> = if reduces {
                vec![(0, cols)]
            } else {
                (0..cols)
                    .step_by(gc as usize)
                    .map(|c| (c, gc.min(cols - c)))
                    .collect()
            };
            let order: Vec<((i64, i64), (i64, i64))> = if self.opts.column_chunks {
                pieces
                    .iter()
                    .flat_map(|&p| blocks.iter().map(move |&b| (b, p)))
                    .collect()
            } else {
                blocks
                    .iter()
                    .flat_map(|&b| pieces.iter().map(move |&p| (b, p)))
                    .collect()
            };
            for (i, ((r, h), (c0, w0))) in order.into_iter().enumerate() {
                // Columns past those the block needs are zeros ([`masked`]).
                let need = skip.as_ref().map_or(cols, |s| s.need_rows(r0 + r, h));
                let wn = w0.min(need - c0).max(0);
                // Consecutive blocks prefer alternate halves of the file.
                // Blocks fitting in a half (by estimate) start from a
                // quarter of it, alternate quarters within the half, so
                // blocks two apart do not take the same registers first
                // either (a larger file of 32 or more).
                if self.opts.pipeline_tiles {
                    let half = ((i + base) % 2) as u8;
                    let chunks = ((wn + gc - 1) / gc).max(1) as usize;
                    self.e.side = Some(
                        if quarter >= 8 && Self::row_pressure(plan, chunks) <= 2 * quarter {
                            regalloc::QUARTERS + 2 * half + ((i / 2) % 2) as u8
                        } else {
                            half
                        },
                    );
                }
                if wn > 0 {
                    let block = RowBlock {
                        tiles: &tiles,
                        r,
                        row0: r0 + r,
                        h,
                        c0,
                        w0: wn,
                        gr,
                        gc,
                        reg,
                    };
                    let out = self.row_block(plan, &block, uniforms).map_err(|e| {
                        let name = &g.nodes[grp.nodes[0]].name;
                        e.into_cause().reworded(|m| format!("{name}: {m}"))
                    })?;
                    for (k, x) in out.iter().enumerate() {
                        let c = c0 + k as i64 * gc;
                        let w = gc.min(c0 + wn - c);
                        self.e
                            .to_loc(
                                Val::Reg(x.clone()),
                                dst_loc,
                                Some(&dst.view(r, c, h, w)),
                                Pad::Dense,
                            )
                            .map_err(err)?;
                    }
                }
                if wn < w0 {
                    let zero = self.uniform_reg(file, 0.0, uniforms)?;
                    for c in (c0 + wn..c0 + w0).step_by(gc as usize) {
                        let w = gc.min(c0 + w0 - c);
                        let z = RegTile {
                            rows: h,
                            cols: w,
                            ..zero.clone()
                        };
                        self.e
                            .to_loc(
                                Val::Reg(z),
                                dst_loc,
                                Some(&dst.view(r, c, h, w)),
                                Pad::Dense,
                            )
                            .map_err(err)?;
                    }
                }
            }
            if to_home {
                let to = Loc {
                    place: Place::Mem(out_home.mem),
                    dtype: out_home.dtype,
                };
                self.e
                    .to_loc(
                        Val::Mem(dst),
                        to,
                        Some(&out_home.tile(r0, 0, hb, cols)),
                        Pad::Dense,
                    )
                    .map_err(err)?;
            }
            r0 += band;
        }
        Ok(())
    }

    /// The plan on one block of rows (columns `c0..c0 + w0`): the output's chunks.
    fn row_block(
        &mut self,
        plan: &Plan,
        b: &RowBlock<'_>,
        uniforms: &mut HashMap<u64, RegTile>,
    ) -> Result<Vec<RegTile>, LowerError> {
        let (h, gc) = (b.h, b.gc);
        let widths: Vec<i64> = (0..b.w0)
            .step_by(gc as usize)
            .map(|c| gc.min(b.w0 - c))
            .collect();
        let wb = gc.min(b.w0);
        let file = match b.reg.place {
            Place::Reg(f) => f,
            Place::Mem(_) => return Err(err("not a register file")),
        };
        let mut held: Vec<Option<Held>> = vec![None; plan.slots];
        // Sources: every chunk loaded once.
        for (&(_, s), t) in plan.sources.iter().zip(b.tiles) {
            let mut regs = Vec::with_capacity(widths.len());
            for (k, &w) in widths.iter().enumerate() {
                let c = b.c0 + k as i64 * gc;
                match self
                    .e
                    .to_loc(Val::Mem(t.view(b.r, c, h, w)), b.reg, None, Pad::Dense)
                    .map_err(err)?
                {
                    Val::Reg(x) => regs.push(x),
                    _ => return Err(err("a chunk did not land in a register")),
                }
            }
            held[s] = Some(Held::Full(regs));
        }
        let shaped = |x: &RegTile, w: i64| RegTile {
            rows: h,
            cols: w,
            ..x.clone()
        };
        for st in &plan.steps {
            let value = match &st.calc {
                Calc::Reduce(kind, s) => {
                    let Some(Held::Full(xs)) = held[*s].clone() else {
                        return Err(err("a reduction of a row result"));
                    };
                    Held::Row(self.row_reduce_regs(*kind, &xs, &widths, b, uniforms)?)
                }
                Calc::Causal(args, mask) => {
                    let Some(Held::Full(xs)) = args.iter().find_map(|a| match a {
                        Arg::Slot(s) => held[*s].clone(),
                        _ => None,
                    }) else {
                        return Err(err("a mask by position of no full row"));
                    };
                    let mut outs = Vec::with_capacity(widths.len());
                    for (k, &w) in widths.iter().enumerate() {
                        // Element [i, j] is kept where j <= reach + i.
                        let reach = b.row0 % mask.own + mask.off - (b.c0 + k as i64 * gc);
                        let x = shaped(&xs[k], w);
                        outs.push(if w - 1 <= reach {
                            x
                        } else {
                            let imm = if reach >= 0 { (reach, 0) } else { (0, -reach) };
                            ops::reg_causal(&mut self.e, &mask.form, &x, imm).map_err(err)?
                        });
                    }
                    Held::Full(outs)
                }
                Calc::Ew(ew, args) => {
                    // Each operand, per chunk (a row result or a uniform the same for all).
                    let mut per: Vec<Vec<RegTile>> = Vec::with_capacity(args.len());
                    for a in args {
                        per.push(match a {
                            Arg::Slot(s) => match held[*s].as_ref() {
                                Some(Held::Full(xs)) => xs.clone(),
                                Some(Held::Row(x)) => vec![x.clone()],
                                None => return Err(err("a value read before it is computed")),
                            },
                            Arg::Uniform(k) => vec![self.uniform_reg(file, *k, uniforms)?],
                            Arg::OuterRow(v) => {
                                let home = self
                                    .layout
                                    .homes
                                    .get(v)
                                    .cloned()
                                    .ok_or_else(|| err("operand without a home"))?;
                                vec![
                                    ops::broadcast_column(
                                        &mut self.e,
                                        &home.tile(b.row0, 0, h, 1),
                                        b.reg,
                                        (b.gr, gc),
                                        h,
                                        wb,
                                    )
                                    .map_err(err)?,
                                ]
                            }
                            // Loaded chunk by chunk where they are used, below.
                            Arg::ConstRow(_) | Arg::Const(_) => Vec::new(),
                        });
                    }
                    let n = if st.row { 1 } else { widths.len() };
                    let mut outs = Vec::with_capacity(n);
                    for k in 0..n {
                        let w = if st.row { wb } else { widths[k] };
                        let pick =
                            |xs: &Vec<RegTile>| shaped(&xs[if xs.len() == 1 { 0 } else { k }], w);
                        // An operation that leaves its operand as it is on
                        // this chunk (`x · 1`, `x + 0`, `x · 1 + 0`: a mask's
                        // kept part) is no operation.
                        let c = b.c0 + k as i64 * gc;
                        let known = |a: &Arg| match a {
                            Arg::Uniform(x) => Some(*x),
                            Arg::Const(v) => self
                                .g
                                .constants
                                .get(v)
                                .and_then(|t| chunk_uniform(t, b.row0, h, c, w)),
                            _ => None,
                        };
                        let is = |a: &Arg, x: f64| known(a) == Some(x);
                        let same = match (ew, args.as_slice()) {
                            (Ew::Mul, [x, one]) | (Ew::Mul, [one, x]) if is(one, 1.0) => Some(x),
                            (Ew::Add, [x, zero]) | (Ew::Add, [zero, x]) if is(zero, 0.0) => Some(x),
                            (Ew::MulAdd, [x, one, zero]) | (Ew::MulAdd, [one, x, zero])
                                if is(one, 1.0) && is(zero, 0.0) =>
                            {
                                Some(x)
                            }
                            _ => None,
                        };
                        if let Some(x) = same
                            && let Some(i) = args.iter().position(|a| std::ptr::eq(a, x))
                            && matches!(x, Arg::Slot(_))
                        {
                            outs.push(pick(&per[i]));
                            continue;
                        }
                        let mut ops_k: Vec<RegTile> = Vec::with_capacity(args.len());
                        for (a, xs) in args.iter().zip(&per) {
                            let x = match a {
                                // A chunk of a full-shape constant, loaded just
                                // before its one use: its register is free
                                // again at once.
                                Arg::Const(v) => self.const_chunk(plan, b, *v, k, uniforms)?,
                                Arg::ConstRow(v) => shaped(&self.const_row_chunk(*v, b, k)?, w),
                                _ => pick(xs),
                            };
                            ops_k.push(x);
                        }
                        let x = match ops_k.as_slice() {
                            [a] => ops::reg_unary(&mut self.e, *ew, a),
                            [a, b2] => ops::reg_binary(&mut self.e, *ew, a, b2),
                            [a, b2, c] => ops::reg_fma(&mut self.e, a, b2, c),
                            _ => Err("an operation of no operands".to_owned()),
                        }
                        .map_err(err)?;
                        outs.push(x);
                    }
                    if st.row {
                        Held::Row(outs.remove(0))
                    } else {
                        Held::Full(outs)
                    }
                }
            };
            held[st.slot] = Some(value);
        }
        match held[plan.output].take() {
            Some(Held::Full(xs)) => Ok(xs),
            _ => Err(err("the output is not a full row")),
        }
    }

    /// The mask by position that computes multiply-add `args` (`x · m + b`
    /// over a result of shape `full`) in `file`, if `m` and `b` are a
    /// causal mask ([`causal_offset`]), the mask's rows repeat in whole
    /// blocks of rows, and the file has an instruction masking by position
    /// that takes every offset the blocks need.
    fn mask_by_position(
        &self,
        args: &[Arg],
        file: RegFileId,
        full: &[usize],
    ) -> Option<MaskByPosition> {
        if !self.opts.mask_by_position {
            return None;
        }
        let ([Arg::Slot(_), Arg::Const(m), Arg::Const(b)]
        | [Arg::Const(m), Arg::Slot(_), Arg::Const(b)]) = args
        else {
            return None;
        };
        let cols = *full.last()?;
        let (m, b) = (self.g.constants.get(m)?, self.g.constants.get(b)?);
        let off = causal_offset(m, b, cols)?;
        let own = (m.data.len() / cols) as i64;
        let gr = self.e.granule(file).0;
        if gr <= 0 || own % gr != 0 {
            return None;
        }
        let form = ops::causal_form(&self.e, file, (own - 1 + off, cols as i64 - 1))?;
        Some(MaskByPosition { off, own, form })
    }

    /// Chunk `k` of full-shape constant `v` over block `b`, in a register:
    /// a uniform register where the chunk holds one value (a causal mask
    /// below its diagonal), else loaded from its band.
    fn const_chunk(
        &mut self,
        plan: &Plan,
        b: &RowBlock<'_>,
        v: ValueId,
        k: usize,
        uniforms: &mut HashMap<u64, RegTile>,
    ) -> Result<RegTile, LowerError> {
        let c = b.c0 + k as i64 * b.gc;
        let w = b.gc.min(b.c0 + b.w0 - c);
        if let (Place::Reg(file), Some(x)) = (
            b.reg.place,
            self.g
                .constants
                .get(&v)
                .and_then(|t| chunk_uniform(t, b.row0, b.h, c, w)),
        ) {
            let r = self.uniform_reg(file, x, uniforms)?;
            return Ok(RegTile {
                rows: b.h,
                cols: w,
                ..r
            });
        }
        let at = plan.sources.len()
            + plan
                .consts
                .iter()
                .position(|c| *c == v)
                .ok_or_else(|| err("a constant the plan does not stage"))?;
        let band = b
            .tiles
            .get(at)
            .ok_or_else(|| err("a constant's band is missing"))?;
        let t = Val::Mem(band.view(b.r, c, b.h, w));
        match self.e.to_loc(t, b.reg, None, Pad::Dense).map_err(err)? {
            Val::Reg(x) => Ok(x),
            _ => Err(err("a constant did not land in a register")),
        }
    }

    /// `k` in every element of a register of `file`, once per region:
    /// splatted where the machine has an immediate splat, else a block of
    /// it packed at home, brought on chip and loaded.
    fn uniform_reg(
        &mut self,
        file: RegFileId,
        k: f64,
        uniforms: &mut HashMap<u64, RegTile>,
    ) -> Result<RegTile, LowerError> {
        if let Some(x) = uniforms.get(&k.to_bits()) {
            return Ok(x.clone());
        }
        let cp = self.e.checkpoint();
        let x = match ops::splat(&mut self.e, file, k) {
            Ok(Val::Splat(x)) => x,
            _ => {
                self.e.rollback(cp);
                let (gr, gc) = self.e.granule(file);
                let key = PackKey::Uniform {
                    bits: k.to_bits(),
                    granule: (gr, gc),
                };
                let t = match self.pool.packed.get(&key) {
                    Some(t) => t.clone(),
                    None => {
                        let t = self
                            .padded(&vec![k; (gr * gc) as usize], gr, gc, self.layout.act)
                            .tile(0, 0, gr, gc);
                        self.pool.packed.insert(key, t.clone());
                        t
                    }
                };
                let land = self.landing_of(t.dtype)?;
                let Place::Mem(lm) = land.place else {
                    return Err(err("tiles from home land in no memory"));
                };
                let buf = self.e.buffer_padded(lm, land.dtype, gr, gc, Pad::Registers);
                let (s, pending) = self.stage_pieces(&t, land, &buf)?;
                for p in &pending {
                    self.e.ready(p).map_err(err)?;
                }
                let reg = Loc {
                    place: Place::Reg(file),
                    dtype: self.e.m.regfiles[file.index()].dtype,
                };
                match self
                    .e
                    .to_loc(Val::Mem(s), reg, None, Pad::Dense)
                    .map_err(err)?
                {
                    Val::Reg(x) => x,
                    _ => return Err(err("a constant did not land in a register")),
                }
            }
        };
        uniforms.insert(k.to_bits(), x.clone());
        Ok(x)
    }

    /// Constant row `v` packed at home (once per compile).
    fn const_row_home(&mut self, v: ValueId) -> Result<MemTile, LowerError> {
        let g = self.g;
        let key = PackKey::Own(v);
        if let Some(t) = self.pool.packed.get(&key) {
            return Ok(t.clone());
        }
        let data = &g
            .constants
            .get(&v)
            .ok_or_else(|| err("not a constant"))?
            .data;
        let (r, c) = view(&g.ty(v).shape);
        let t = self.padded(data, r, c, self.layout.act).tile(0, 0, r, c);
        self.pool.packed.insert(key, t.clone());
        Ok(t)
    }

    /// Constant row `v` on chip, whole: staged once per region.
    fn const_row_staged(&mut self, v: ValueId) -> Result<MemTile, LowerError> {
        let t = self.const_row_home(v)?;
        match self.staged_row(v, &t, 0, 0, t.cols)? {
            Val::Mem(s) => Ok(s),
            _ => Err(err("a constant row landed in a register")),
        }
    }

    /// Every constant row of the plan brought on chip, all transfers issued
    /// before the first is waited for (they are in the staged rows after).
    fn stage_const_rows(&mut self, plan: &Plan) -> Result<(), LowerError> {
        let mut rows: Vec<ValueId> = Vec::new();
        for st in &plan.steps {
            if let Calc::Ew(_, args) = &st.calc {
                for a in args {
                    if let Arg::ConstRow(v) = a
                        && !rows.contains(v)
                    {
                        rows.push(*v);
                    }
                }
            }
        }
        let mut pending = Vec::new();
        let mut waits = Vec::new();
        for v in rows {
            let t = self.const_row_home(v)?;
            let land = self.landing_of(t.dtype)?;
            let Place::Mem(lm) = land.place else {
                return Ok(());
            };
            let buf = self
                .e
                .buffer_padded(lm, land.dtype, 1, t.cols, Pad::Aligned);
            let (s, pieces) = self.stage_pieces(&t.view(0, 0, 1, t.cols), land, &buf)?;
            waits.extend(pieces);
            pending.push((v, s));
        }
        for p in &waits {
            self.e.ready(p).map_err(err)?;
        }
        for (v, s) in pending {
            self.cache.staged_rows.insert((v, 0), s);
        }
        Ok(())
    }

    /// Chunk `k` of constant row `v` over block `b`, in every row of a register.
    fn const_row_chunk(
        &mut self,
        v: ValueId,
        b: &RowBlock<'_>,
        k: usize,
    ) -> Result<RegTile, LowerError> {
        let row = self.const_row_staged(v)?;
        let Place::Reg(file) = b.reg.place else {
            return Err(err("not a register file"));
        };
        let c = b.c0 + k as i64 * b.gc;
        let w = b.gc.min(b.c0 + b.w0 - c);
        let s = row.view(0, c, 1, w);
        if b.h > 1 {
            return ops::load_row_broadcast(&mut self.e, &s, file, (b.gr, b.gc), b.h, w)
                .map_err(err);
        }
        match self
            .e
            .to_loc(Val::Mem(s), b.reg, None, Pad::Dense)
            .map_err(err)?
        {
            Val::Reg(x) => Ok(x),
            _ => Err(err("a constant row did not land in a register")),
        }
    }

    /// The chunks `xs` of a block of rows reduced along the row: whole
    /// chunks combined element-wise in a tree, then across the lanes once;
    /// a partial chunk reduced apart and combined. Broadcast along a register.
    fn row_reduce_regs(
        &mut self,
        kind: ReduceKind,
        xs: &[RegTile],
        widths: &[i64],
        b: &RowBlock<'_>,
        uniforms: &mut HashMap<u64, RegTile>,
    ) -> Result<RegTile, LowerError> {
        let Place::Reg(file) = b.reg.place else {
            return Err(err("not a register file"));
        };
        let (h, gc) = (b.h, b.gc);
        let wb = gc.min(b.w0);
        let combine = match kind {
            ReduceKind::Sum | ReduceKind::Mean => Ew::Add,
            ReduceKind::Max => Ew::Max,
            ReduceKind::Min => Ew::Min,
        };
        let forms: Vec<super::reduce::Form> = super::reduce::forms(&self.e, kind)
            .into_iter()
            .filter(|f| f.src.place == Place::Reg(file) && f.dst.place == Place::Reg(file))
            .collect();
        let f = forms
            .first()
            .ok_or_else(|| err("no reduction in the register file"))?
            .clone();
        let mut whole: Vec<RegTile> = Vec::new();
        let mut parts: Vec<(RegTile, i64)> = Vec::new();
        for (x, &w) in xs.iter().zip(widths) {
            if w == gc {
                whole.push(x.clone());
            } else {
                parts.push((x.clone(), w));
            }
        }
        while whole.len() > 1 {
            let mut next = Vec::with_capacity(whole.len().div_ceil(2));
            let mut it = std::mem::take(&mut whole).into_iter();
            while let Some(a) = it.next() {
                next.push(match it.next() {
                    Some(c) => ops::reg_binary(&mut self.e, combine, &a, &c).map_err(err)?,
                    None => a,
                });
            }
            whole = next;
        }
        let mut acc: Option<RegTile> = None;
        for (x, w) in whole.into_iter().map(|x| (x, gc)).chain(parts) {
            let r = self.reduce_reg_broadcast(&f, kind, &x, h, w, (b.gr, gc), wb)?;
            acc = Some(match acc {
                None => r,
                Some(a) => ops::reg_binary(&mut self.e, combine, &a, &r).map_err(err)?,
            });
        }
        let mut r = acc.ok_or_else(|| err("a reduction of no columns"))?;
        if kind == ReduceKind::Mean {
            let k = self.uniform_reg(file, 1.0 / b.w0 as f64, uniforms)?;
            let k = RegTile {
                rows: h,
                cols: wb,
                ..k
            };
            r = ops::reg_binary(&mut self.e, Ew::Mul, &r, &k).map_err(err)?;
        }
        Ok(r)
    }
}

/// The sizes of the first bands, growing to `band`: `f, f, 2f, 4f, ..`
/// with `f` the smallest multiple of `gr` at least an eighth of `band` that
/// halves it a whole number of times, so every band starts at a multiple
/// of its size (and stays within one period of a repeated constant that
/// `band` divides). Just `band` when `grow` is off or nothing is gained.
fn band_sizes(band: i64, gr: i64, grow: bool) -> Vec<i64> {
    let mut f = band;
    while grow && f % 2 == 0 && (f / 2) % gr == 0 && f / 2 >= band / 8 {
        f /= 2;
    }
    let mut sizes = vec![f];
    let mut s = f;
    while s < band {
        sizes.push(s);
        s *= 2;
    }
    sizes
}

/// The size of the band starting at row `r`: of [`band_sizes`], then
/// `band`.
fn band_at(sizes: &[i64], band: i64, r: i64) -> i64 {
    let mut at = 0;
    for &s in sizes {
        if r < at + s {
            return s;
        }
        at += s;
    }
    band
}

/// One block of rows of a band: where its sources are and which columns.
struct RowBlock<'t> {
    /// The sources' band tiles, by slot.
    tiles: &'t [MemTile],
    /// The block's first row within the band.
    r: i64,
    /// Its first row in the tensor.
    row0: i64,
    /// Rows.
    h: i64,
    /// Columns `c0..c0 + w0`.
    c0: i64,
    w0: i64,
    /// The register granule.
    gr: i64,
    gc: i64,
    /// The register file, as a place.
    reg: Loc,
}

#[cfg(test)]
mod tests {
    use super::{band_at, band_sizes, causal_offset, chunk_uniform};
    use crate::ir::{ElemType, Tensor, TensorType};

    /// The constants `m` and `b` of a mask `x · m + b` of `rows` x `cols`
    /// whose element `[i, j]` is `(m, b)(i, j)`.
    fn tensors(
        rows: usize,
        cols: usize,
        f: impl Fn(usize, usize) -> (f64, f64),
    ) -> (Tensor, Tensor) {
        let ty = TensorType {
            elem: ElemType::F32,
            shape: vec![rows, cols],
        };
        let (m, b) = (0..rows * cols).map(|i| f(i / cols, i % cols)).unzip();
        (Tensor::new(ty.clone(), m), Tensor::new(ty, b))
    }

    /// The mask whose row `i` keeps its first `keep(i)` columns.
    fn mask(rows: usize, cols: usize, keep: impl Fn(usize) -> usize) -> (Tensor, Tensor) {
        tensors(rows, cols, |i, j| {
            if j < keep(i) { (1.0, 0.0) } else { (0.0, -1e9) }
        })
    }

    #[test]
    fn a_causal_mask_is_known_by_its_diagonal() {
        // The plain lower triangle, and one after 3 cached keys.
        let (m, b) = mask(4, 4, |i| i + 1);
        assert_eq!(causal_offset(&m, &b, 4), Some(0));
        let (m, b) = mask(4, 7, |i| i + 4);
        assert_eq!(causal_offset(&m, &b, 7), Some(3));
        // Rows keeping everything once the diagonal leaves the row.
        let (m, b) = mask(6, 4, |i| (i + 2).min(4));
        assert_eq!(causal_offset(&m, &b, 4), Some(1));
        // Not causal: a row keeping nothing, a step of two, the upper triangle.
        let (m, b) = mask(4, 4, |i| i);
        assert_eq!(causal_offset(&m, &b, 4), None);
        let (m, b) = mask(4, 8, |i| 2 * i + 1);
        assert_eq!(causal_offset(&m, &b, 8), None);
        let (m, b) = tensors(4, 4, |i, j| if j >= i { (1.0, 0.0) } else { (0.0, -1e9) });
        assert_eq!(causal_offset(&m, &b, 4), None);
        // A kept element scaled, or a masked one not masked enough.
        let causal = |i: usize, j: usize| if j <= i { (1.0, 0.0) } else { (0.0, -1e9) };
        let (m, b) = tensors(4, 4, |i, j| {
            if (i, j) == (0, 0) {
                (0.5, 0.0)
            } else {
                causal(i, j)
            }
        });
        assert_eq!(causal_offset(&m, &b, 4), None);
        let (m, b) = tensors(4, 4, |i, j| {
            if (i, j) == (0, 3) {
                (0.0, -5.0)
            } else {
                causal(i, j)
            }
        });
        assert_eq!(causal_offset(&m, &b, 4), None);
    }

    #[test]
    fn a_chunk_of_a_causal_mask_is_uniform_off_its_diagonal() {
        // A 4x4 lower triangle of ones, read by a full shape of 8 rows
        // (two heads).
        let s = 4;
        let data = (0..s * s)
            .map(|i| f64::from(u8::from(i % s <= i / s)))
            .collect();
        let t = Tensor::new(
            TensorType {
                elem: ElemType::F32,
                shape: vec![s, s],
            },
            data,
        );
        // Rows 2..4, columns 0..2: below the diagonal, all ones.
        assert_eq!(chunk_uniform(&t, 2, 2, 0, 2), Some(1.0));
        // The same rows of the second head (rows 6..8).
        assert_eq!(chunk_uniform(&t, 6, 2, 0, 2), Some(1.0));
        // Rows 0..2, columns 2..4: above it, all zeros.
        assert_eq!(chunk_uniform(&t, 4, 2, 2, 2), Some(0.0));
        // Across the diagonal: no one value.
        assert_eq!(chunk_uniform(&t, 0, 2, 0, 2), None);
        assert_eq!(chunk_uniform(&t, 1, 4, 0, 2), None);
    }

    #[test]
    fn first_bands_grow_to_the_band_each_aligned_to_its_size() {
        let sizes = band_sizes(256, 8, true);
        assert_eq!(sizes, [32, 32, 64, 128]);
        let mut r = 0;
        let mut seen = Vec::new();
        while r < 1024 {
            let h = band_at(&sizes, 256, r);
            assert_eq!(r % h, 0, "the band at {r} of {h} rows");
            seen.push(h);
            r += h;
        }
        assert_eq!(seen, [32, 32, 64, 128, 256, 256, 256]);
        // Off, or no halving keeps whole granules: one size.
        assert_eq!(band_sizes(256, 8, false), [256]);
        assert_eq!(band_sizes(24, 8, true), [24]);
        assert_eq!(band_at(&[24], 24, 48), 24);
        // Never below the granule, nor below an eighth.
        assert_eq!(band_sizes(32, 8, true), [8, 8, 16]);
        assert_eq!(band_sizes(64, 32, true), [32, 32]);
    }
}
