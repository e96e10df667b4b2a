//! Matrix products: choosing a contraction instruction and its tile sizes,
//! packing constant operands, staging runs of the reduction on chip, the
//! reduction loop of a tile, and the decomposed product for machines without
//! a usable contraction.

mod tile;

use super::emit::{self, Base, Emitter, MemTile, Pad, Ref, Val};
use super::machine::{self, Loc, Place};
use super::mapping::{Axes, Mapping, Order, RANKED, Ranked, SpaceEntry};
use super::ops::{self, Contraction, Role};
use super::rows::masked::Work;
use super::{LowerError, Lowerer, PackKey, PanelKey, broadcast_offsets, encode, err};
use crate::ir::ValueId;
use isa_specs::model::{DType, MemId, OperandKind};
use isa_specs::program::DataSegment;
use isa_specs::select::{TileAccess, TileExpr, TileOp, TileTensor};

/// A run of a contraction operand staged on chip.
#[derive(Clone, Debug)]
pub(super) struct Staged {
    /// First reduction index it holds.
    k0: i64,
    /// First index and extent of the other dimension.
    other0: i64,
    other: i64,
    /// Where, in bands of the reduction: `(first index within the run,
    /// length, tile)`.
    bands: Vec<(i64, i64, MemTile)>,
}

impl Staged {
    /// The band holding reduction indices `k..k + n` of the run, and the
    /// offset of `k` in it.
    fn band(&self, k: i64, n: i64) -> Option<(&MemTile, i64)> {
        let at = k - self.k0;
        self.bands
            .iter()
            .find(|(b0, w, _)| *b0 <= at && at + n <= b0 + w)
            .map(|(b0, _, t)| (t, at - b0))
    }
}

/// Bytes of the smallest band of a staged run ([`band_lengths`]).
const MIN_BAND: i64 = 16 << 10;

/// The lengths of the bands a staged run of `len` reduction indices comes on
/// chip in, `step` a reduction step: one step, one, two, four… (the last
/// takes the rest), so the first steps wait for little of the run.
fn band_lengths(len: i64, step: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let (mut at, mut next) = (0, step.max(1));
    while at < len {
        let w = if len - at < 2 * next { len - at } else { next };
        out.push(w);
        at += w;
        if out.len() > 1 {
            next *= 2;
        }
    }
    out
}

/// How a matrix product is computed.
#[derive(Clone, Debug)]
pub(super) struct MatMulPlan {
    /// Overwriting form, if any.
    pub(super) set: Option<Contraction>,
    /// Accumulating form, if any.
    pub(super) acc: Option<Contraction>,
    /// Tile sizes.
    pub(super) tm: i64,
    pub(super) tn: i64,
    pub(super) tk: i64,
    /// Rows (per batch), columns, reduction.
    pub(super) m: i64,
    pub(super) k: i64,
    pub(super) n: i64,
    pub(super) a: ValueId,
    pub(super) b: ValueId,
    /// Batches of `a` and `b` for each output batch: row offsets.
    pub(super) a_batch: Vec<i64>,
    pub(super) b_batch: Vec<i64>,
    /// When no contraction instruction fits: the product as a sum of rows of
    /// `B` scaled by elements of `A`, on vector registers.
    pub(super) decomposed: Option<ops::Scaled>,
    /// Whole tiles even at the matrix's edge (zero-padded operands).
    pub(super) whole_tiles: bool,
    /// The order output tiles are visited in.
    pub(super) order: Order,
    /// The product's tuning space and what was chosen from it.
    pub(super) space: Option<SpaceEntry>,
}

/// What the tile estimate knows of a product's operands beyond their shapes.
pub(super) struct Sources<'w> {
    /// Bytes per element of `A` and of `B` as they come from home.
    a: i64,
    b: i64,
    /// Whether `A`, `B` and the result are kept on chip by residency.
    a_kept: bool,
    b_kept: bool,
    out_kept: bool,
    /// The share of the work a mask leaves, if it makes any dead.
    work: Option<&'w Work>,
    /// A reduction step this many wide is tried whatever the column
    /// granule: the channels of one window position, where an operand is
    /// convolution windows brought together on chip (a tile of them is
    /// then one run of pixels' channels per row block, moved in whole
    /// registers; wider steps put two positions side by side in each row).
    k_run: Option<i64>,
}

/// Tile sizes a contraction accepts, with the estimated cycles of the whole
/// product in each visiting order.
#[derive(Clone, Copy, Debug)]
pub(super) struct Estimate {
    mnk: (i64, i64, i64),
    rows: i64,
    cols: i64,
}

/// How hard the tiling tries: each is a retry when the one before fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tiling {
    /// The best tile sizes; edge tiles of the exact size.
    Exact,
    /// Sizes that are multiples of the column granule, and whole tiles at the edge.
    Aligned,
    /// The decomposed product, if the machine has its pieces.
    Decomposed,
}

impl Lowerer<'_> {
    /// The plan of a matrix product, tiled as `tiling` says.
    /// `force` is a mapping to take instead of the best by estimate (or of
    /// one given for the node).
    pub(super) fn plan_matmul(
        &mut self,
        n: &crate::ir::Node,
        tiling: Tiling,
        force: Option<&Mapping>,
    ) -> Result<MatMulPlan, LowerError> {
        let aligned = tiling == Tiling::Aligned;
        let g = self.g;
        let (a, b) = (n.inputs[0], n.inputs[1]);
        let (sa, sb, so) = (&g.ty(a).shape, &g.ty(b).shape, &g.ty(n.outputs[0]).shape);
        // `B` made by a transpose that was not lowered: its input holds `B`
        // as rows of `N`, for a form that reads `B` transposed.
        let b_rows_n = self.b_transpose_of(b);
        let b_data = b_rows_n.map_or(b, |t| g.nodes[t].inputs[0]);
        if sa.len() < 2 || sb.len() < 2 {
            return Err(Self::node_err(
                n,
                "one-dimensional MatMul operands are not supported yet",
            ));
        }
        let (m, k) = (sa[sa.len() - 2] as i64, sa[sa.len() - 1] as i64);
        let nn = sb[sb.len() - 1] as i64;
        // Batch offsets (numpy broadcasting of leading dimensions).
        let lead = &so[..so.len() - 2];
        let offsets = |s: &[usize], rows: i64| -> Vec<i64> {
            broadcast_offsets(&s[..s.len() - 2], lead)
                .into_iter()
                .map(|x| x as i64 * rows)
                .collect()
        };
        let a_batch = offsets(sa, m);
        let b_batch = offsets(sb, if b_rows_n.is_some() { nn } else { k });
        let work = Work::of(&self.fusion.skips, n.outputs[0], a, m, &a_batch);
        let a_const = g.constants.contains_key(&a);
        let b_const = g.constants.contains_key(&b);
        // Column-first streams `A` from home once per column block to keep
        // `B`'s runs; an `A` kept on chip has no home traffic to save, and
        // staging it again per column block costs on-chip copies the
        // estimate does not price: rows first only.
        let kept = |v: ValueId| {
            self.layout
                .homes
                .get(&v)
                .is_some_and(|h| matches!(h.base, super::emit::Base::Buf(_)))
        };
        let a_kept = kept(a);
        let from_rows = self.fusion.row_groups.iter().any(|r| r.output == a);
        // What the region stores: the product's result, or the end of the
        // element-wise chain its epilogue computes in registers.
        let mut stored = n.outputs[0];
        while !kept(stored) && !g.outputs.contains(&stored) {
            let readers: Vec<&crate::ir::Node> = g
                .nodes
                .iter()
                .filter(|r| r.inputs.contains(&stored))
                .collect();
            match readers.as_slice() {
                [r] if super::types::Ew::of(&r.op).is_some() => stored = r.outputs[0],
                _ => break,
            }
        }
        let order_search = self.opts.order_search && !a_kept;
        let given = force.or_else(|| self.mappings.mappings.get(&n.name));
        let mut best: Option<(i64, MatMulPlan)> = None;
        let mut why = Vec::new();
        let mut axes = Vec::new();
        let mut ranked: Vec<Ranked> = Vec::new();
        let mut refused = Vec::new();
        let cs = self.fusion.contractions.clone();
        for c in &cs {
            let name = self.e.m.instructions[c.inst.index()].name.clone();
            // Activations are row-major at home: they cannot be read transposed.
            if !a_const && c.a_dims.first() == Some(&Role::K) && c.a_dims.len() == 2 {
                why.push(format!("`{name}` reads A transposed"));
                continue;
            }
            let reads_bt = c.b_dims.first() == Some(&Role::N) && c.b_dims.len() == 2;
            if !b_const && reads_bt && b_rows_n.is_none() {
                why.push(format!("`{name}` reads B transposed and B is computed"));
                continue;
            }
            if b_rows_n.is_some() && !reads_bt {
                why.push(format!(
                    "`{name}` reads B as rows of K, and B is held as rows of N"
                ));
                continue;
            }
            let Some(locs) = c.locs(&self.e) else {
                continue;
            };
            if !a_const && locs[1].place == Place::Mem(self.info.home) {
                why.push(format!(
                    "`{name}` needs A resident in memory and A is computed"
                ));
                continue;
            }
            if !b_const && locs[2].place == Place::Mem(self.info.home) {
                why.push(format!(
                    "`{name}` needs B resident in memory and B is computed"
                ));
                continue;
            }
            let partner = cs.iter().find(|d| {
                d.set != c.set
                    && d.locs(&self.e) == Some(locs)
                    && d.t_dims == c.t_dims
                    && d.a_dims == c.a_dims
                    && d.b_dims == c.b_dims
            });
            if !c.set && partner.is_some() {
                continue; // considered from the overwriting form
            }
            let (set, acc) = if c.set {
                (Some(c.clone()), partner.cloned())
            } else {
                (None, Some(c.clone()))
            };
            // Bytes per element each operand comes from home in: a
            // constant is packed as the instruction reads it, a computed
            // value is held in its home type (converted on the way).
            let src = |v: ValueId, l: Loc| {
                if g.constants.contains_key(&v) {
                    l.dtype.bytes() as i64
                } else {
                    self.layout
                        .homes
                        .get(&v)
                        .map_or(self.layout.act, |h| h.dtype)
                        .bytes() as i64
                }
            };
            let src = Sources {
                a: src(a, locs[1]),
                b: src(b_data, locs[2]),
                a_kept,
                b_kept: kept(b_data),
                out_kept: kept(stored),
                work: work.as_ref(),
                k_run: [a, b_data]
                    .iter()
                    .filter_map(|v| self.layout.windows.get(v))
                    .map(|&wi| *g.ty(g.nodes[wi].inputs[0]).shape.last().unwrap_or(&1) as i64)
                    .next(),
            };
            let mut found = self.tile_search(c, (m, nn, k), aligned, &src);
            if set.is_some() && acc.is_none() {
                let before = found.len();
                found.retain(|e| e.mnk.2 >= k);
                if found.is_empty() && before > 0 {
                    why.push(format!("`{name}` cannot accumulate a reduction of {k}"));
                    continue;
                }
            }
            if found.is_empty() {
                why.push(format!("`{name}` accepts no tile size"));
                continue;
            }
            let axis = |f: fn(&Estimate) -> i64| {
                let mut v: Vec<i64> = found.iter().map(f).collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            axes.push(Axes {
                inst: name.clone(),
                tm: axis(|e| e.mnk.0),
                tn: axis(|e| e.mnk.1),
                tk: axis(|e| e.mnk.2),
                valid: found.len(),
            });
            let point = |e: &Estimate, order: Order| Mapping {
                inst: name.clone(),
                tm: e.mnk.0,
                tn: e.mnk.1,
                tk: e.mnk.2,
                order,
            };
            let orders = |e: &Estimate| {
                let mut v = vec![(Order::Rows, e.rows)];
                if order_search {
                    v.push((Order::Cols, e.cols));
                }
                v
            };
            for e in &found {
                for (order, estimate) in orders(e) {
                    ranked.push(Ranked {
                        mapping: point(e, order),
                        estimate,
                    });
                }
            }
            // The mapping given for this node, if it names this instruction
            // (checked again here: a size outside the searched ones is fine
            // if the instruction takes it).
            let (cost, e, order) = match given {
                Some(g) if g.inst != name => continue,
                // The instruction may serve in several forms (operand
                // roles): the first that takes the tile sizes.
                // The share of a memory a tile may take bounds the search,
                // not a mapping given: its buffers are checked when placed.
                Some(g) => match self.tile_cost(c, (m, nn, k), (g.tm, g.tn, g.tk), &src, 1) {
                    Ok(_) if set.is_some() && acc.is_none() && g.tk < k => {
                        refused.push(format!(
                            "`{name}` cannot accumulate, so tk must cover the reduction of {k}"
                        ));
                        continue;
                    }
                    Ok(e) if best.is_none() => (i64::MIN, e, g.order),
                    Ok(_) => continue,
                    Err(e) => {
                        refused.push(e);
                        continue;
                    }
                },
                None => found
                    .iter()
                    .flat_map(|e| orders(e).into_iter().map(move |(o, cost)| (cost, *e, o)))
                    .min_by_key(|(cost, e, order)| {
                        // Of tilings estimated alike, rows made a block at a
                        // time (a row group's) take the fewest rows per
                        // tile, so the product starts after fewer of them;
                        // others the most, so fewer tiles.
                        let rows = if from_rows { e.mnk.0 } else { -e.mnk.0 };
                        (*cost, *order, rows, e.mnk)
                    })
                    .expect("found is not empty"),
            };
            if best.as_ref().is_none_or(|(bc, _)| cost < *bc) {
                best = Some((
                    cost,
                    MatMulPlan {
                        set,
                        acc,
                        tm: e.mnk.0,
                        tn: e.mnk.1,
                        tk: e.mnk.2,
                        m,
                        k,
                        n: nn,
                        a,
                        b: b_data,
                        a_batch: a_batch.clone(),
                        b_batch: b_batch.clone(),
                        decomposed: None,
                        whole_tiles: aligned,
                        order,
                        space: Some(SpaceEntry {
                            node: n.name.clone(),
                            m,
                            n: nn,
                            k,
                            batches: a_batch.len(),
                            axes: Vec::new(),
                            orders: Vec::new(),
                            ranked: Vec::new(),
                            chosen: point(&e, order),
                            given: given.is_some(),
                        }),
                    },
                ));
            }
        }
        if let Some(g) = given
            && best.is_none()
            && !refused.is_empty()
        {
            return Err(Self::node_err(
                n,
                format!(
                    "the mapping given ({g}) cannot be used: {}",
                    refused.join("; ")
                ),
            ));
        }
        if let Some(g) = given
            && best.is_none()
        {
            return Err(Self::node_err(
                n,
                format!(
                    "the mapping given ({g}) cannot be used: `{}` is not a contraction instruction usable for this product{}",
                    g.inst,
                    if axes.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (usable: {})",
                            axes.iter()
                                .map(|a| format!("`{}`", a.inst))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                ),
            ));
        }
        ranked.sort_by(|x, y| {
            let key = |r: &Ranked| {
                let p = &r.mapping;
                (r.estimate, p.inst.clone(), p.order, p.tm, p.tn, p.tk)
            };
            key(x).cmp(&key(y))
        });
        ranked.truncate(RANKED);
        if let Some((_, p)) = &mut best
            && let Some(s) = &mut p.space
        {
            s.axes = axes;
            s.ranked = ranked;
            s.orders = if order_search {
                vec![Order::Rows, Order::Cols]
            } else {
                vec![Order::Rows]
            };
        }
        if let Some(g) = given
            && tiling == Tiling::Decomposed
        {
            return Err(Self::node_err(
                n,
                format!("the mapping given ({g}) does not compile"),
            ));
        }
        if let Some((_, p)) = best.filter(|_| tiling != Tiling::Decomposed) {
            return Ok(p);
        }
        if b_rows_n.is_some() {
            return Err(Self::node_err(
                n,
                "no contraction reads B transposed for this product",
            ));
        }
        // Decomposition: C[m, :] = Σ_k A[m, k] · B[k, :] with a vector times a
        // scalar and a vector add, where the machine has them.
        if let Some(sc) = ops::scaled_rows(&self.e) {
            let tn = sc.width.min(nn).max(1);
            return Ok(MatMulPlan {
                set: None,
                acc: None,
                tm: 1,
                tn,
                tk: k,
                m,
                k,
                n: nn,
                a,
                b,
                a_batch,
                b_batch,
                decomposed: Some(sc),
                whole_tiles: false,
                order: Order::Rows,
                space: None,
            });
        }
        Err(Self::node_err(
            n,
            LowerError::MissingOperation {
                semantics: "d[i, j] = sum(k) a[i, k] * b[k, j]".to_owned(),
                message: if why.is_empty() {
                    "cannot compile: the target lacks a matrix product (`d[i, j] = sum(k) a[i, k] * b[k, j]`, or a `+=` form) and a vector-times-scalar `d[i] = a[i] * s` with a scalar load to decompose it".to_owned()
                } else {
                    format!(
                        "no contraction instruction fits ({}), and the target lacks a vector-times-scalar `d[i] = a[i] * s` with a scalar load to decompose the product",
                        why.join("; ")
                    )
                },
            },
        ))
    }

    /// Every tile size `(m, n, k)` the contraction accepts for this product,
    /// with the estimated time of each visiting order (see [`Self::tile_cost`]).
    /// Sizes up to the (rounded) dimension are tried first; whole registers
    /// past the matrix's edge only if nothing smaller fits.
    fn tile_search(
        &self,
        c: &Contraction,
        (m, n, k): (i64, i64, i64),
        aligned: bool,
        src: &Sources,
    ) -> Vec<Estimate> {
        let gran = self.info.col_granule;
        // Register shapes (an instruction may need whole registers, even past the
        // matrix's edge), and powers of two up to the dimension.
        let fixed: Vec<i64> = self
            .e
            .m
            .regfiles
            .iter()
            .flat_map(|r| r.shape.iter().map(|d| d.value))
            .collect();
        // A size smaller than the dimension is a multiple of the column granule
        // (operand tiles at column offsets start aligned for transfers).
        let first = self.tile_search_in(c, (m, n, k), src, &|dim| {
            let top = machine::rup(dim, gran).max(1);
            let mut v: Vec<i64> = (0..13).map(|p| 1i64 << p).filter(|x| *x <= top).collect();
            v.extend(fixed.iter().copied().filter(|x| *x <= top));
            v.push(dim);
            v.push(top);
            // Even splits: a dimension in two to eight steps of nearly one
            // size (576 as 3 × 192, not 2 × 256 + 64): the steps a power
            // of two leaves short at the edge cost a fold's fill and
            // drain all the same.
            v.extend((2..=8).map(|j| machine::rup(machine::cdiv(dim, j), gran)));
            v.retain(|x| (*x >= dim && !aligned) || x % gran == 0);
            v.extend(src.k_run.filter(|&r| r < dim && dim == k));
            v.sort_unstable();
            v.dedup();
            v
        });
        if !first.is_empty() {
            return first;
        }
        let cands = |dim: i64| -> Vec<i64> {
            let top = machine::rup(dim, gran).max(1);
            let mut v: Vec<i64> = (0..13).map(|p| 1i64 << p).filter(|x| *x <= top).collect();
            v.extend(fixed.iter().copied());
            v.push(dim);
            v.push(machine::rup(dim, gran));
            v.sort_unstable();
            v.dedup();
            v.retain(|x| *x >= 1 && *x <= 4096);
            v
        };
        self.tile_search_in(c, (m, n, k), src, &cands)
    }

    /// The tile sizes among `cands(dimension)` for each role that the
    /// contraction accepts, with their estimates.
    fn tile_search_in(
        &self,
        c: &Contraction,
        (m, n, k): (i64, i64, i64),
        src: &Sources,
        cands: &dyn Fn(i64) -> Vec<i64>,
    ) -> Vec<Estimate> {
        let ms = if c.has(Role::M) { cands(m) } else { vec![1] };
        let ns = if c.has(Role::N) { cands(n) } else { vec![1] };
        let ks = cands(k);
        let mut all = Vec::new();
        for &tm in &ms {
            for &tn in &ns {
                for &tk in &ks {
                    if let Ok(e) =
                        self.tile_cost(c, (m, n, k), (tm, tn, tk), src, self.trials.tile_share)
                    {
                        all.push(e);
                    }
                }
            }
        }
        all
    }

    /// Whether the contraction takes tiles of `mnk` for a product of
    /// `(m, n, k)`, and if so the estimated time of the product in each
    /// visiting order: per step the instruction's occupancy (from the
    /// generated timing tables), plus bringing its operands from home
    /// (the home memory's latency once per tile when runs are staged, else
    /// once per step, none when both are kept on chip; the bytes, in the
    /// type each operand comes from home in (`src`, bytes per element of
    /// `A` and `B`), over its bandwidth; operands resident at home are read
    /// by the instruction itself); each output tile goes back home, unless
    /// the result is kept on chip. An operand staged on chip for one tile
    /// serves the next tiles of the same rows (`A`, rows first) or columns
    /// (`B`, columns first) when operand reuse is on and its run holds the
    /// whole reduction. Where a mask makes some tiles or reduction steps
    /// dead (`work`), only the share that runs is counted. Each operand
    /// tile on chip takes at most `1 / share` of its memory (the search's
    /// [`Lowerer::tile_share`]; 1 for a mapping given, whose buffers are
    /// checked when placed).
    fn tile_cost(
        &self,
        c: &Contraction,
        (m, n, k): (i64, i64, i64),
        mnk: (i64, i64, i64),
        src: &Sources,
        share: i64,
    ) -> Result<Estimate, String> {
        let (a_src, b_src) = (src.a, src.b);
        let (tm, tn, tk) = mnk;
        let name = &self.e.m.instructions[c.inst.index()].name;
        let locs = c
            .locs(&self.e)
            .ok_or_else(|| format!("`{name}` has operands the machine cannot bring into place"))?;
        let budget = |mem: MemId| self.e.m.memories[mem.index()].size.value / share;
        for (d, l) in [
            (&c.t_dims, locs[0]),
            (&c.a_dims, locs[1]),
            (&c.b_dims, locs[2]),
        ] {
            if let Place::Mem(mem) = l.place
                && mem != self.info.home
            {
                let bytes =
                    Contraction::shape(d, mnk).iter().product::<i64>() * l.dtype.bytes() as i64;
                if bytes > budget(mem) {
                    return Err(format!(
                        "a {tm}x{tn}x{tk} tile of `{name}` takes {bytes} bytes of `{}`, more than 1/{share} of it",
                        self.e.m.memories[mem.index()].name
                    ));
                }
            }
        }
        let op = c
            .probe(&self.e, mnk)
            .ok_or_else(|| format!("`{name}` cannot take a {tm}x{tn}x{tk} tile"))?;
        let (mi, _) = self
            .e
            .choose(&op, Some(c.inst))
            .map_err(|e| format!("`{name}` with a {tm}x{tn}x{tk} tile: {e}"))?;
        let home = &self.e.m.memories[self.info.home.index()];
        let (home_lat, home_bw) = (home.latency.value.max(0), home.bandwidth.value.max(1));
        let occ = self.e.isa.occupancy(self.e.m, &mi).max(1);
        let (mt, nt, kt) = (
            machine::cdiv(m, tm),
            machine::cdiv(n, tn),
            machine::cdiv(k, tk),
        );
        let moved = |dims: &[Role], l: Loc, src: i64| match l.place {
            Place::Mem(x) if x == self.info.home => 0,
            _ => Contraction::shape(dims, mnk).iter().product::<i64>() * src,
        };
        let (a_step, b_step) = (
            moved(&c.a_dims, locs[1], a_src),
            moved(&c.b_dims, locs[2], b_src),
        );
        let reuse = self.opts.operand_reuse;
        let out_bytes = tm * tn * 4;
        // A staged run waits for the home memory's latency once, a step
        // brought in alone once per step.
        let waits = if self.opts.stage_runs { 1 } else { kt };
        let (tiles_run, steps_run) = src.work.map_or((1.0, 1.0), |w| w.share((m, n, k), mnk));
        let share = |x: i64, f: f64| (x as f64 * f).ceil() as i64;
        // Operands and results kept on chip wait for no home latency.
        let in_lat = if src.a_kept && src.b_kept {
            0
        } else {
            home_lat
        };
        let out = if src.out_kept {
            0
        } else {
            home_lat + out_bytes / home_bw
        };
        // B's runs stay on chip across row blocks when they all fit.
        let b_fits = match locs[2].place {
            Place::Mem(x) if x != self.info.home => {
                mt > 1
                    && k * n * locs[2].dtype.bytes() as i64
                        <= self.e.m.memories[x.index()].size.value / 4
            }
            _ => false,
        };
        // With `A` on chip and `B`'s runs kept across row blocks, only the
        // first row block waits for the home memory.
        let waiting = if src.a_kept && reuse && b_fits {
            nt
        } else {
            mt * nt
        };
        let base = share(mt * nt * kt, steps_run) * occ
            + share(waiting, tiles_run) * waits * in_lat
            + share(mt * nt, tiles_run) * out;
        // Bytes of A and B brought in over the whole product, in each order.
        let a_all = share(mt * nt * kt * a_step, steps_run);
        let b_all = share(mt * nt * kt * b_step, steps_run);
        let b_rows = if reuse && b_fits {
            share(nt * kt * b_step, steps_run)
        } else {
            b_all
        };
        // An operand's staged run serves the next tiles only if it holds
        // the whole reduction (a quarter of the memory, as staging takes):
        // else each tile stages its runs again.
        let whole_run = |l: Loc, other: i64| match l.place {
            Place::Mem(x) if x != self.info.home => {
                other * k * 4.max(l.dtype.bytes() as i64)
                    <= self.e.m.memories[x.index()].size.value / 4
            }
            _ => true,
        };
        let a_rows = if reuse && whole_run(locs[1], tm) {
            share(mt * kt * a_step, steps_run)
        } else {
            a_all
        };
        let b_cols = if reuse && whole_run(locs[2], tn) {
            share(nt * kt * b_step, steps_run)
        } else {
            b_all
        };
        let rows = base + (a_rows + b_rows) / home_bw;
        let cols = base + (a_all + b_cols) / home_bw;
        Ok(Estimate { mnk, rows, cols })
    }
}
