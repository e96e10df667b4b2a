//! Tiles of a region: the tile search and tilings of matrix products,
//! element-wise regions tile by tile, operands brought on chip, and the
//! check that a region's buffers fit the on-chip memories.

use super::emit::{BufInfo, MemTile, Pad, Val};
use super::error::{LowerError, err, overflow};
use super::layout::{Home, view};
use super::machine::{self, Loc, Place};
use super::mapping::{self, Order};
use super::matmul;
use super::ops::{self, Ew, Step};
use super::pool::{PackKey, broadcast_offsets};
use super::{FALLBACK_MAPPINGS, Lowerer};
use crate::ir::ValueId;
use crate::memplan;
use crate::passes::canon;
use std::collections::HashMap;

/// Operands staged on chip that later tiles of the same region read again.
pub(super) struct TileCache {
    /// The run of a product's `A` staged for the last tile, by `(batch, row, rows)`:
    /// the next tile of the same rows reads it again instead of loading it.
    pub(super) kept_a: Option<((usize, i64, i64), matmul::Staged)>,
    /// The runs of its `B` staged for earlier tiles, by `(batch, column, columns)`.
    pub(super) kept_b: HashMap<(usize, i64, i64), matmul::Staged>,
    /// Constant rows broadcast down the tiles of the current region, staged
    /// on chip once for all its tiles.
    pub(super) staged_rows: HashMap<(ValueId, i64), MemTile>,
    /// Blocks of a convolution's fill value (its padding) brought on chip
    /// once for the current region, where windows land
    /// ([`Lowerer::windows_of`]), by the fill's bits, shape and place.
    pub(super) fills: HashMap<(u64, i64, i64, Loc), MemTile>,
}

impl TileCache {
    /// Forgets what was staged on chip for the region before.
    pub(super) fn new_region(&mut self) {
        self.staged_rows.clear();
        self.fills.clear();
    }
}

/// Instructions of slack around each buffer's lifetime when buffers are
/// spread ([`Options::spread_buffers`]), widest first: the widest that
/// fits the memory is used, then widened by bisection (four steps) towards
/// the next wider one while it still fits (decode's weights need about
/// 15 k: its products are thousands of instructions long).
pub(super) const SPREAD: [usize; 6] = [65536, 16384, 4096, 1024, 256, 64];

/// The plan with the widest slack that fits: the widest of [`SPREAD`]
/// whose plan `plan_at` finds, widened by four bisection steps towards the
/// next wider one while a plan is found.
pub(super) fn widest_spread<P>(plan_at: impl Fn(usize) -> Option<P>) -> Option<P> {
    let mut wider = None;
    let (mut lo, mut best) = SPREAD.iter().find_map(|&slack| {
        let p = plan_at(slack).map(|p| (slack, p));
        if p.is_none() {
            wider = Some(slack);
        }
        p
    })?;
    if let Some(mut hi) = wider {
        for _ in 0..4 {
            let mid = lo + (hi - lo) / 2;
            match plan_at(mid) {
                Some(p) => (lo, best) = (mid, p),
                None => hi = mid,
            }
        }
    }
    Some(best)
}

/// An operand of an element-wise step.
#[derive(Clone, Debug)]
pub(super) enum Operand {
    /// A value of the graph.
    Value(ValueId),
    /// A constant with one value in every element, splatted into a register
    /// of the file ([`ops::splat`]).
    Uniform(f64, isa_specs::model::RegFileId),
    /// The reciprocal of an operand (division as multiplication).
    Recip(Box<Operand>),
}

impl Lowerer<'_> {
    /// The tile loop of a product's region, trying tilings and mappings (see
    /// [`Self::region`]). Where every one lowered but its buffers overflowed
    /// an on-chip memory (a tile's share of a memory leaves no room for the
    /// staging and the tiles in flight beside it), all are tried again with
    /// operand tiles of half the share, down to a sixteenth.
    pub(super) fn matmul_tiles(
        &mut self,
        root: &crate::ir::Node,
        plan: &[(Ew, Option<Operand>, bool)],
        root_input: Option<ValueId>,
        out: ValueId,
        out_home: &Home,
    ) -> Result<(), LowerError> {
        let share = self.trials.tile_share;
        let mut first = None;
        let done = loop {
            match self.matmul_tilings(root, plan, root_input, out, out_home) {
                Ok(()) => break Ok(()),
                Err((e, overflowed)) => {
                    let e = first.get_or_insert(e).clone();
                    if !overflowed || self.trials.tile_share >= 16 {
                        break Err(e);
                    }
                    self.trials.tile_share *= 2;
                }
            }
        };
        self.trials.tile_share = share;
        done
    }

    /// One pass of [`Self::matmul_tiles`]: the error, and whether a tiling
    /// lowered whose buffers then overflowed a memory.
    pub(super) fn matmul_tilings(
        &mut self,
        root: &crate::ir::Node,
        plan: &[(Ew, Option<Operand>, bool)],
        root_input: Option<ValueId>,
        out: ValueId,
        out_home: &Home,
    ) -> Result<(), (LowerError, bool)> {
        // Tiles of the exact matrix size may leave operand rows the machine's
        // copies cannot align; whole aligned tiles (zero-padded) can; failing
        // that, the decomposed product. Where the best mapping by estimate
        // fails, the next few of the tuning space are tried before giving up
        // on a tiling (unless the mapping was given).
        let mut first: Option<LowerError> = None;
        let mut overflowed = false;
        let mut tried: Vec<(i64, i64, i64, bool, Order)> = Vec::new();
        for tiling in [
            matmul::Tiling::Exact,
            matmul::Tiling::Aligned,
            matmul::Tiling::Decomposed,
        ] {
            let Ok(best) = self.plan_matmul(root, tiling, None) else {
                continue;
            };
            let alternatives: Vec<mapping::Mapping> = match &best.space {
                Some(s) if !s.given => s
                    .ranked
                    .iter()
                    .map(|r| r.mapping.clone())
                    .filter(|x| *x != s.chosen)
                    .take(FALLBACK_MAPPINGS)
                    .collect(),
                _ => Vec::new(),
            };
            let mut next = Some(best);
            let mut alternatives = alternatives.into_iter();
            while let Some(p) = next.take().or_else(|| {
                alternatives.find_map(|x| {
                    self.plan_matmul(root, tiling, Some(&x)).ok().map(|mut p| {
                        if let Some(s) = &mut p.space {
                            s.given = false;
                        }
                        p
                    })
                })
            }) {
                let key = (p.tm, p.tn, p.tk, p.decomposed.is_some(), p.order);
                if tried.contains(&key) && !p.whole_tiles {
                    continue;
                }
                tried.push(key);
                let attempt = self.attempt();
                let bufs = self.e.bufs.len();
                let space = p.space.clone();
                // Products summed in a register file the halves apply to
                // take registers anywhere in it.
                let side = self.e.side;
                if self.in_sided_file(&p) {
                    self.e.side = None;
                }
                let result = self
                    .region_tiles(&Some(p), plan, root_input, out, out_home, i64::MAX)
                    .and_then(|()| self.fits_on_chip(bufs).inspect_err(|_| overflowed = true));
                match result {
                    Ok(()) => {
                        self.plan.space.extend(space);
                        return Ok(());
                    }
                    Err(e) => {
                        self.undo(attempt);
                        self.e.side = side;
                        first.get_or_insert(e);
                    }
                }
            }
        }
        match first {
            Some(e) => Err((e, overflowed)),
            None => self
                .plan_matmul(root, matmul::Tiling::Exact, None)
                .map(|_| ())
                .map_err(|e| (e, false)),
        }
    }

    /// Whether a product is summed in registers of a file of 16 or more
    /// (where [`regalloc::allocate_sided`]'s halves apply): a decomposed
    /// product, or a contraction whose result is such a register.
    pub(super) fn in_sided_file(&self, p: &matmul::MatMulPlan) -> bool {
        let m = self.e.m;
        p.decomposed.is_some()
            || p.set.iter().chain(&p.acc).any(|c| {
                matches!(
                    machine::operand_loc(m, c.inst, c.t),
                    Some(Loc { place: Place::Reg(f), .. })
                        if m.regfiles[f.index()].count.value >= 16
                )
            })
    }

    /// The tile loop of a region (see [`Self::region`]).
    pub(super) fn region_tiles(
        &mut self,
        mm: &Option<matmul::MatMulPlan>,
        plan: &[(Ew, Option<Operand>, bool)],
        root_input: Option<ValueId>,
        out: ValueId,
        out_home: &Home,
        rows_most: i64,
    ) -> Result<(), LowerError> {
        let (rows, cols) = (out_home.rows, out_home.cols);
        self.cache.kept_a = None;
        self.cache.kept_b.clear();
        self.cache.new_region();
        // Tile sizes: the contraction's, or a budget of the smallest on-chip memory.
        let (th, tw) = match &mm {
            Some(p) => (p.tm, p.tn),
            None => {
                let (th, tw) = self.ew_tile(out_home, plan.len());
                (th.min(rows_most).max(1), tw)
            }
        };
        let batch_rows = match &mm {
            Some(p) => p.m,
            None => rows,
        };
        let batches = rows / batch_rows.max(1);
        // Products of later tiles are emitted before the epilogues of earlier
        // ones (software pipelining of the tile loop): the epilogue's
        // transfers are barriers to the scheduler, so this is what lets
        // independent products overlap on the unit's copies.
        // Without pipelining each tile is finished before the next begins
        // (the one register of a file like pim-dram's `macc` then suffices).
        let lag = match &mm {
            Some(p) if p.decomposed.is_none() && self.opts.pipeline_tiles => self.tile_lag(p),
            Some(p) if p.decomposed.is_none() => 0,
            _ => 1,
        };
        let mut pending: std::collections::VecDeque<(Val, i64, i64, i64, i64)> = Default::default();
        // Output tiles `(row, rows, column, columns)` of one batch, in the
        // product's visiting order.
        let blocks = |total: i64, size: i64| -> Vec<(i64, i64)> {
            (0..total)
                .step_by(size.max(1) as usize)
                .map(|x| (x, size.min(total - x)))
                .collect()
        };
        let (mut row_blocks, mut col_blocks) = (blocks(batch_rows, th), blocks(cols, tw));
        if mm.is_some() && self.opts.reader_order {
            let needs = self.column_needs(out, cols);
            let first = |&(c, w): &(i64, i64)| {
                needs
                    .iter()
                    .filter(|(s, e, _)| *s < c + w && c < *e)
                    .map(|(_, _, at)| *at)
                    .min()
                    .unwrap_or(usize::MAX)
            };
            col_blocks.sort_by_key(first);
        }
        // The last block of rows in two halves where that costs the
        // contraction no time: the results the end waits for (their drain
        // and store) are half as many. Not in batched products (attention's
        // heads), where the halves were measured slower (the last head's
        // scores: GPT-2 block at seq 128 +31 cycles, at seq 512 +104).
        if let Some(p) = mm.as_ref().filter(|p| {
            self.opts.split_last_rows
                && p.order == Order::Rows
                && p.decomposed.is_none()
                && batches == 1
        }) && let Some(&(r, h)) = row_blocks.last()
            && self.halves_cost_nothing(p, h)
        {
            row_blocks.pop();
            row_blocks.extend([(r, h / 2), (r + h / 2, h - h / 2)]);
        }
        let tiles: Vec<(i64, i64, i64, i64)> = match mm.as_ref().map(|p| p.order) {
            Some(Order::Cols) => col_blocks
                .iter()
                .flat_map(|&(c, w)| row_blocks.iter().map(move |&(r, h)| (r, h, c, w)))
                .collect(),
            _ => row_blocks
                .iter()
                .flat_map(|&(r, h)| col_blocks.iter().map(move |&(c, w)| (r, h, c, w)))
                .collect(),
        };
        for b in 0..batches {
            for &(r, h, c, w) in &tiles {
                let row0 = b * batch_rows + r;
                // Columns its one reader, a row group, does not read ([`masked`]).
                if self
                    .fusion
                    .skips
                    .iter()
                    .any(|s| s.sources.contains(&out) && c >= s.need_rows(row0, h))
                {
                    continue;
                }
                let input = match (&mm, root_input) {
                    (Some(p), _) if p.decomposed.is_some() => {
                        self.scaled_rows_tile(p, b as usize, r, c, w)?
                    }
                    (Some(p), _) => self.matmul_tile(p, b as usize, r, c, h, w)?,
                    (None, Some(v)) => self.operand_tile(v, out, row0, c, h, w)?,
                    (None, None) => return Err(err("region without input")),
                };
                pending.push_back((input, row0, c, h, w));
                while pending.len() > lag {
                    if let Some(t) = pending.pop_front() {
                        self.tile_epilogue(plan, out, out_home, t)?;
                    }
                }
            }
        }
        while let Some(t) = pending.pop_front() {
            self.tile_epilogue(plan, out, out_home, t)?;
        }
        Ok(())
    }

    /// The tile of an element-wise region of `steps` steps writing
    /// `out_home`: rows of up to 512 columns, as many as a budget of the
    /// smallest on-chip memory takes.
    pub(super) fn ew_tile(&self, out_home: &Home, steps: usize) -> (i64, i64) {
        let budget = self.tile_budget();
        let tw = out_home.cols.min(512);
        // Buffers of fixed-width registers are padded to whole registers.
        let pitch = machine::rup(tw, self.info.pitch_granule.max(1));
        let th = (budget / (pitch * 4 * (steps as i64 + 2) * 2))
            .clamp(1, 256)
            .min(out_home.rows);
        (th, tw)
    }

    /// The columns of a product's result `out` (`cols` wide) each reader
    /// needs, and where in the program that need arises: `(first column,
    /// end, node)`. A slice of the last dimension needs its columns where
    /// they are first read: at the transpose copying them into heads, or,
    /// for heads read in place ([`Self::head_views`]), at the first product
    /// reading them; any other reader needs every column where it is.
    pub(super) fn column_needs(&self, out: ValueId, cols: i64) -> Vec<(i64, i64, usize)> {
        let g = self.g;
        let readers_of =
            |v: ValueId| (0..g.nodes.len()).filter(move |&k| g.nodes[k].inputs.contains(&v));
        let mut needs = Vec::new();
        for k in readers_of(out) {
            let Some((c0, c1)) = canon::slice_columns(g, &g.nodes[k]) else {
                needs.push((0, cols, k));
                continue;
            };
            let at = self
                .layout
                .sliced
                .iter()
                .find(|(_, sl)| sl.nodes.first() == Some(&k))
                .and_then(|(w, _)| readers_of(*w).next())
                .map_or(k, |t| {
                    let y = g.nodes[t].outputs[0];
                    if self.layout.head_views.contains_key(&y) {
                        readers_of(y).next().unwrap_or(t)
                    } else {
                        t
                    }
                });
            needs.push((c0 as i64, c1 as i64, at));
        }
        needs
    }

    /// How many tiles' products may wait for their epilogues: one per copy
    /// of the contraction's unit, as long as its result registers last
    /// (half of them: the epilogue needs some of its own). With one per
    /// extra copy, the tile after a full round started behind the oldest
    /// tile's epilogue, which waits for the unit's whole latency, and the
    /// registers that tile's operands pass through were the epilogue's
    /// (allocated before scheduling): a convolution's chains ran four at a
    /// time, then none while the oldest drained (vliw-systolic, 3×3 64→64
    /// at 56×56: 8,146 cycles, now 6,783). A single copy keeps none
    /// waiting: on simd-dsp one measured mixed (an MLP 4.7% faster, another
    /// 1.8% slower).
    pub(super) fn tile_lag(&self, p: &matmul::MatMulPlan) -> usize {
        let Some(form) = p.set.as_ref().or(p.acc.as_ref()) else {
            return 0;
        };
        let m = self.e.m;
        let unit = &m.units[m.instructions[form.inst.index()].timing.unit.index()];
        let copies = unit.count.value.max(1) as usize;
        let regs = match form.locs(&self.e).map(|l| l[0].place) {
            Some(Place::Reg(file)) => m.regfiles[file.index()].count.value.max(1) as usize,
            _ => copies,
        };
        if copies > 1 { copies.min(regs / 2) } else { 0 }
    }

    /// The element-wise steps of a region on one computed tile, and the store.
    pub(super) fn tile_epilogue(
        &mut self,
        plan: &[(Ew, Option<Operand>, bool)],
        out: ValueId,
        out_home: &Home,
        (input, row0, c, h, w): (Val, i64, i64, i64, i64),
    ) -> Result<(), LowerError> {
        let mut chain = Vec::new();
        for (ew, other, swapped) in plan {
            let other = match other {
                Some(o) => Some(self.operand(o, out, row0, c, h, w)?),
                None => None,
            };
            chain.push(Step {
                ew: *ew,
                other,
                swapped: *swapped,
                third: None,
            });
        }
        let dst = out_home.tile(row0, c, h, w);
        let v = ops::chain_into(&mut self.e, input, &chain, Some(&dst)).map_err(err)?;
        let to = Loc {
            place: Place::Mem(out_home.mem),
            dtype: out_home.dtype,
        };
        self.e.to_loc(v, to, Some(&dst), Pad::Dense).map_err(err)?;
        Ok(())
    }

    /// Whether the on-chip buffers from `first` on fit their memories (placed
    /// by liveness, as the back end will).
    pub(super) fn fits_on_chip(&self, first: usize) -> Result<(), LowerError> {
        let now = self.e.code.len();
        // A transfer still in flight keeps its buffers until its wait, which
        // comes later: live until now at least (their last touch so far
        // would let the check place later buffers in their bytes, where the
        // back end, seeing the wait, cannot).
        let flying = self.e.in_flight_buffers();
        let until_now = |b: &BufInfo| BufInfo {
            live: (b.live.0.min(now), b.live.1.max(now)),
            ..b.clone()
        };
        // Where this region's buffers start: earlier ones live past it (a
        // store of an earlier region waited for in this one) share its time.
        let start = self.e.bufs[first..]
            .iter()
            .filter(|b| b.used())
            .map(|b| b.live.0)
            .min()
            .unwrap_or(now);
        for (mi, mem) in self.e.m.memories.iter().enumerate() {
            // Values kept on chip from earlier regions and read by this one
            // or later ones are live throughout.
            let held = self.e.bufs[..first]
                .iter()
                .enumerate()
                .filter(|(k, b)| b.used() && (b.shared || flying.contains(k) || b.live.1 >= start))
                .map(|(k, b)| {
                    let read_later = flying.contains(&k)
                        || (b.shared
                            && self
                                .kept
                                .kept_until
                                .get(&k)
                                .is_none_or(|&u| u >= self.lowering_node));
                    if read_later { until_now(b) } else { b.clone() }
                });
            let fresh = self.e.bufs[first..]
                .iter()
                .enumerate()
                .filter(|(_, b)| b.used())
                .map(|(k, b)| {
                    if flying.contains(&(first + k)) {
                        until_now(b)
                    } else {
                        b.clone()
                    }
                });
            let bs: Vec<memplan::Buffer> = held
                .chain(fresh)
                .filter(|b| b.mem.index() == mi)
                .map(|b| memplan::Buffer {
                    size: b.size,
                    align: b.align,
                    live: b.live,
                })
                .collect();
            if !bs.is_empty() {
                memplan::plan(&bs, mem.size.value as u64).map_err(|e| overflow(&mem.name, &e))?;
            }
        }
        Ok(())
    }

    pub(super) fn tile_budget(&self) -> i64 {
        let m = self.e.m;
        m.memories
            .iter()
            .filter(|x| !x.kind.off_chip())
            .map(|x| x.size.value)
            .min()
            .unwrap_or(1 << 20)
    }

    /// A tile of an operand of the region's element-wise steps.
    pub(super) fn operand(
        &mut self,
        o: &Operand,
        out: ValueId,
        r: i64,
        c: i64,
        h: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        match o {
            Operand::Value(v) => self.operand_tile(*v, out, r, c, h, w),
            Operand::Uniform(k, file) => ops::splat(&mut self.e, *file, *k).map_err(err),
            Operand::Recip(inner) => {
                let x = self.operand(inner, out, r, c, h, w)?;
                ops::chain(
                    &mut self.e,
                    x,
                    &[Step {
                        ew: Ew::Recip,
                        other: None,
                        swapped: false,
                        third: None,
                    }],
                )
                .map_err(err)
            }
        }
    }

    /// The `[r.., c..]` tile of value `v` broadcast to the shape of `out`.
    pub(super) fn operand_tile(
        &mut self,
        v: ValueId,
        out: ValueId,
        r: i64,
        c: i64,
        h: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        let g = self.g;
        let (vs, os) = (&g.ty(v).shape, &g.ty(out).shape);
        if let Some(k) = g.constants.get(&v) {
            // Broadcast along leading dimensions only (a mask over heads):
            // the constant's own rows, where the tile's rows are consecutive
            // rows of it; otherwise expanded to the output's shape.
            if vs.len() <= os.len() && vs.last() == os.last() && !vs.is_empty() {
                let rows_of = broadcast_offsets(&vs[..vs.len() - 1], &os[..os.len() - 1]);
                let src = |i: i64| rows_of[i as usize] as i64;
                let consecutive = (0..h).all(|i| src(r + i) == src(r) + i);
                // One row for the whole tile (a bias or scale vector): loaded
                // into every row of a register where the machine can.
                let one_row = h > 1
                    && (0..h).all(|i| src(r + i) == src(r))
                    && ops::can_broadcast_rows(&self.e);
                if consecutive || one_row {
                    let key = PackKey::Own(v);
                    let t = match self.pool.packed.get(&key) {
                        Some(t) => t.clone(),
                        None => {
                            let (rows, cols) = view(vs);
                            let t = self
                                .padded(&k.data, rows, cols, self.layout.act)
                                .tile(0, 0, rows, cols);
                            self.pool.packed.insert(key, t.clone());
                            t
                        }
                    };
                    if one_row {
                        return self.staged_row(v, &t, src(r), c, w);
                    }
                    return Ok(Val::Mem(t.view(src(r), c, h, w)));
                }
            }
            let t = self.packed_const(v, out)?;
            return Ok(Val::Mem(t.view(r, c, h, w)));
        }
        let home = self
            .layout
            .homes
            .get(&v)
            .cloned()
            .ok_or_else(|| err("operand without a home"))?;
        if vs == os {
            return Ok(Val::Mem(home.tile(r, c, h, w)));
        }
        // A scalar is one row of one element.
        let scalar = [1];
        let vs: &[usize] = if vs.is_empty() { &scalar } else { vs };
        // Broadcast: output row i reads input row f(i). A last dimension of
        // 1 is a row result, read as one column and broadcast along the
        // lanes in registers (`ops::broadcast_lanes`).
        let lanes = vs.last() == Some(&1) && os.last() > Some(&1);
        if vs.last() != os.last() && !lanes {
            return Err(err(format!(
                "broadcasting computed tensor `{}` along its last dimension is not supported yet",
                g.values[v.index()].name
            )));
        }
        let (c, w) = if lanes { (0, 1) } else { (c, w) };
        let rows_of = broadcast_offsets(&vs[..vs.len() - 1], &os[..os.len() - 1]);
        let src_row = |i: i64| rows_of[i as usize] as i64;
        if (0..h).all(|i| src_row(r + i) == src_row(r) + i) {
            return Ok(Val::Mem(home.tile(src_row(r), c, h, w)));
        }
        let land = self.landing_of(home.dtype)?;
        let Place::Mem(lm) = land.place else {
            unreachable!()
        };
        let buf = self.e.buffer_padded(lm, land.dtype, h, w, Pad::Registers);
        // One transfer per row (all issued, then all waited for: the tile is
        // used as a whole, and each row's transfer has its own semaphore).
        let mut rows = Vec::with_capacity(h as usize);
        for i in 0..h {
            let src = home.tile(src_row(r + i), c, 1, w);
            rows.push(
                self.e
                    .to_loc(Val::Mem(src), land, Some(&buf.view(i, 0, 1, w)), Pad::Dense)
                    .map_err(err)?,
            );
        }
        for row in &rows {
            if let Val::Mem(t) = row {
                self.e.ready(t).map_err(err)?;
            }
        }
        Ok(Val::Mem(buf))
    }

    /// Columns `c..c + w` of row `row` of constant `v` (packed at home as
    /// `t`), on chip: the whole row is brought on chip once per region (one
    /// transfer and one wait), since every row of tiles of the region reads
    /// the same row.
    pub(super) fn staged_row(
        &mut self,
        v: ValueId,
        t: &MemTile,
        row: i64,
        c: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        let key = (v, row);
        if let Some(s) = self.cache.staged_rows.get(&key) {
            return Ok(Val::Mem(s.view(0, c, 1, w)));
        }
        let land = self.landing_of(t.dtype)?;
        let Place::Mem(lm) = land.place else {
            return Ok(Val::Mem(t.view(row, c, 1, w)));
        };
        let buf = self
            .e
            .buffer_padded(lm, land.dtype, 1, t.cols, Pad::Aligned);
        let (s, pending) = self.stage_pieces(&t.view(row, 0, 1, t.cols), land, &buf)?;
        for p in &pending {
            self.e.ready(p).map_err(err)?;
        }
        self.cache.staged_rows.insert(key, s.clone());
        Ok(Val::Mem(s.view(0, c, 1, w)))
    }

    /// Tile `src` (at home) copied into on-chip buffer `buf` at `land`: in
    /// one transfer, or pieces of columns as wide as the transfer
    /// instruction takes. The tile, and the pieces to wait for before it is read.
    pub(super) fn stage_pieces(
        &mut self,
        src: &MemTile,
        land: Loc,
        buf: &MemTile,
    ) -> Result<(MemTile, Vec<MemTile>), LowerError> {
        let mut last = None;
        let mut width = src.cols;
        while width >= 1 {
            let cp = self.e.checkpoint();
            let mut moved = Vec::new();
            let mut c = 0;
            let attempt = loop {
                if c >= src.cols {
                    break Ok(());
                }
                let w = width.min(src.cols - c);
                let to = buf.view(0, c, src.rows, w);
                match self.e.to_loc(
                    Val::Mem(src.view(0, c, src.rows, w)),
                    land,
                    Some(&to),
                    Pad::Dense,
                ) {
                    Ok(Val::Mem(t)) => moved.push(t),
                    Ok(_) => break Err("a tile landed in a register".to_owned()),
                    Err(e) => break Err(e),
                }
                c += w;
            };
            match attempt {
                Ok(()) => return Ok((buf.view(0, 0, src.rows, src.cols), moved)),
                Err(e) => {
                    self.e.rollback(cp);
                    last = Some(e);
                    width = if width > 1024 { 1024 } else { width / 2 };
                }
            }
        }
        Err(err(last.unwrap_or_else(|| "nothing to stage".to_owned())))
    }
}
