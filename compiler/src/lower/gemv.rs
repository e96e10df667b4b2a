//! Matrix-vector products on the vector unit (`Options::vector_gemv`).
//!
//! A product of one row by a matrix (`y = x · W`, a decode step's
//! projections and attention) keeps a matrix unit busy for a whole weight tile per row it
//! streams: one useful row of a 128 × 128 array is 128 multiply-adds a
//! cycle. A vector register file of `r` × `c` lanes does `r · c` a cycle
//! instead, this way:
//!
//! - `r` consecutive elements of `x` are loaded as a column and broadcast
//!   along the lanes (`X[i, j] = x[k + i]`, [`ops::broadcast_lanes`]);
//! - `r` rows of `W` (`c` columns) are loaded (widened from the weights'
//!   type) and accumulated as `acc = X · W + acc`, one register per `c`
//!   columns, so each sublane `i` sums the terms of `x[k + i]`;
//! - the sublanes are summed at the end (`d[i, j] = sum(k) a[k, j]`), and row
//!   0 is the product's row, handed to the region's epilogue;
//! - rows of `W` short of a whole block go one at a time: `x[k]` by a scalar
//!   load and a broadcast (`d[i, j] = s`), accumulated in row 0 of registers
//!   of their own and added at the end.
//!
//! `W` comes on chip in bands of rows, each transfer issued before the band
//! ahead is used. It applies where one register file of a float type has
//! the lane broadcast, the multiply-add, the product and the sublane sum,
//! `x` is one row (per batch) and `W` a constant matrix, or a computed one
//! per batch already on chip (attention's one-token scores and context,
//! kept there by residency), read where it is.

use super::emit::{Emitter, MemTile, Pad, RegTile, Val};
use super::machine::{Loc, Place};
use super::ops::{self, Ew};
use super::{Home, LowerError, Lowerer, Operand, err};
use crate::ir::{Node, ValueId};
use isa_specs::model::{AssignOp, DType, IndexId, ReduceOp, RegFileId};
use isa_specs::select::{TileAccess, TileExpr, TileOp};

/// A contraction reading the rows of `B` where they lie at home, one
/// result per row, with one row of `A` as a vector
/// ([`Lowerer::rows_in_place`]).
#[derive(Clone, Debug)]
pub(super) struct RowsInPlace {
    /// The instruction's form.
    pub(super) form: super::ops::Contraction,
    /// Rows of `B` one instruction reads.
    pub(super) rows: i64,
    /// Elements from one row of `B` to the next.
    pub(super) pitch: i64,
    /// Alignment of a block's first row, in bytes.
    pub(super) align: u64,
    /// The type `B` is read in.
    pub(super) dtype: DType,
}

/// `d[i, j] = sum(k) a[k, j]` over the `rows` sublanes of `a`.
fn sublane_sum(
    e: &mut Emitter,
    a: &RegTile,
    rows: i64,
    w: i64,
    gc: i64,
) -> Result<RegTile, String> {
    let ix = |i: u32| isa_specs::model::Affine {
        terms: vec![(IndexId(i), 1)],
        constant: 0,
        offsets: Vec::new(),
    };
    let d = e.vreg(a.file);
    let mut last = "no instruction sums the sublanes of a register".to_owned();
    for cols in [w, gc] {
        let (dt, dr) = Emitter::reg_tensor(a.file, a.dtype, d, vec![rows, cols]);
        let (at, ar) = Emitter::reg_tensor(a.file, a.dtype, a.reg, vec![rows, cols]);
        let op = TileOp {
            tensors: vec![dt, at],
            extents: vec![rows, cols, rows],
            target: TileAccess {
                tensor: 0,
                indices: vec![ix(0), ix(1)],
            },
            op: AssignOp::Set,
            value: TileExpr::Reduce(
                ReduceOp::Sum,
                vec![IndexId(2)],
                Box::new(TileExpr::Access(TileAccess {
                    tensor: 1,
                    indices: vec![ix(2), ix(1)],
                })),
            ),
        };
        match e.emit(&op, &[dr, ar], None) {
            Ok(_) => {
                return Ok(RegTile {
                    rows: 1,
                    cols: w,
                    reg: d,
                    ..a.clone()
                });
            }
            Err(x) => last = x,
        }
    }
    Err(last)
}

/// `x * w + acc`, or `x * w` for the first term.
fn mul_add(
    e: &mut Emitter,
    x: &RegTile,
    w: &RegTile,
    acc: Option<RegTile>,
) -> Result<RegTile, String> {
    match acc {
        None => ops::reg_binary(e, Ew::Mul, x, w),
        Some(s) => ops::reg_fma(e, x, w, &s),
    }
}

/// Element `x` (one element on chip) in every element of a new register of
/// `file`: a scalar load (`s = src[0]`) and a broadcast (`d[i, j] = s`).
fn scalar_broadcast(
    e: &mut Emitter,
    file: RegFileId,
    x: &MemTile,
    (gr, gc): (i64, i64),
) -> Result<RegTile, String> {
    let dtype = e.m.regfiles[file.index()].dtype;
    let sfile =
        e.m.regfiles
            .iter()
            .position(|f| f.shape.is_empty() && f.dtype == dtype)
            .map(|i| RegFileId(i as u32))
            .ok_or("no scalar register file")?;
    let s = e.vreg(sfile);
    let (st, sr) = Emitter::reg_tensor(sfile, dtype, s, Vec::new());
    // `s = src` from a scalar in memory, or `s = src[0]` from a vector.
    let scalar = {
        let (xt, xr) = Emitter::mem_tensor(x, Vec::new());
        (ops::scalar_op(vec![st.clone(), xt], Vec::new()), xr)
    };
    let vector = {
        let (xt, xr) = Emitter::mem_tensor(x, vec![1]);
        (ops::load_op(vec![st.clone(), xt]), xr)
    };
    let mut loaded = Err("no scalar load".to_owned());
    for (op, xr) in [scalar, vector] {
        loaded = e.emit(&op, &[sr, xr], None);
        if loaded.is_ok() {
            break;
        }
    }
    loaded?;
    let d = e.vreg(file);
    let (dt, dr) = Emitter::reg_tensor(file, dtype, d, vec![gr, gc]);
    let ix = |i: u32| isa_specs::model::Affine {
        terms: vec![(IndexId(i), 1)],
        constant: 0,
        offsets: Vec::new(),
    };
    let op = TileOp {
        tensors: vec![dt, st],
        extents: vec![gr, gc],
        target: TileAccess {
            tensor: 0,
            indices: vec![ix(0), ix(1)],
        },
        op: AssignOp::Set,
        value: TileExpr::Access(TileAccess {
            tensor: 1,
            indices: Vec::new(),
        }),
    };
    e.emit(&op, &[dr, sr], None)?;
    Ok(RegTile {
        file,
        dtype,
        reg: d,
        rows: gr,
        cols: gc,
    })
}

impl Lowerer<'_> {
    /// `out = a · b` followed by the region's element-wise `plan`, on the
    /// vector unit (see the module doc). False when it does not apply.
    pub(super) fn vector_gemv(
        &mut self,
        root: &Node,
        plan: &[(Ew, Option<Operand>, bool)],
        out: ValueId,
        out_home: &Home,
    ) -> Result<bool, LowerError> {
        let g = self.g;
        // The epilogue's constant rows are staged anew for this region.
        self.cache.new_region();
        let (a, b) = (root.inputs[0], root.inputs[1]);
        // Windows read in place come only through the contraction's operands.
        if self.layout.windows.contains_key(&a) || self.layout.windows.contains_key(&b) {
            return Ok(false);
        }
        let (sa, sb) = (g.ty(a).shape.clone(), g.ty(b).shape.clone());
        let constant = g.constants.contains_key(&b);
        let r = sa.len();
        // One row of `a` per batch; `b` a constant matrix, or computed with
        // the same batch dimensions.
        let batched = r >= 2 && sb.len() == r && sa[..r - 2] == sb[..r - 2];
        if !self.opts.vector_gemv
            || g.constants.contains_key(&a)
            || r < 2
            || sa[r - 2] != 1
            || !(constant && sb.len() == 2 || !constant && batched)
        {
            return Ok(false);
        }
        let batches = if constant {
            super::view(&sa).0
        } else {
            sa[..r - 2].iter().product::<usize>() as i64
        };
        if batches == 0 || (constant && batches != 1) {
            return Ok(false);
        }
        let (k, n) = (sb[sb.len() - 2] as i64, sb[sb.len() - 1] as i64);
        let Some(file) = self.gemv_file() else {
            return Ok(false);
        };
        let (gr, gc) = self.e.granule(file);
        if gr < 2 || n == 0 {
            return Ok(false);
        }
        let reg = Loc {
            place: Place::Reg(file),
            dtype: self.e.m.regfiles[file.index()].dtype,
        };
        // Constant weights in bf16 where they load into the registers
        // widened, else in the activation type; a computed `b` as it is.
        let wdt = if constant {
            [DType::Bf16, self.layout.act]
                .into_iter()
                .find(|&dt| {
                    self.landing_of(dt)
                        .is_ok_and(|l| self.info.path(&[l], reg).is_some())
                })
                .ok_or_else(|| err("the weights cannot reach the vector registers"))?
        } else {
            self.layout.act
        };
        let xland = self.landing_of(self.layout.act)?;
        let wland = self.landing_of(wdt)?;
        let (Place::Mem(xm), Place::Mem(wm)) = (xland.place, wland.place) else {
            return Ok(false);
        };
        let home_of = |l: &Self, v: ValueId| {
            l.layout
                .homes
                .get(&v)
                .cloned()
                .ok_or_else(|| err("operand without a home"))
        };
        let xh = home_of(self, a)?;
        // `b`'s rows: at home (packed, or a computed value) or already on chip.
        let wh = match g.constants.get(&b) {
            Some(t) => {
                self.note_packed(b, wdt);
                self.padded(&t.data, k, n, wdt)
            }
            None => home_of(self, b)?,
        };
        let w_on_chip = wh.mem == wm && wh.dtype == wland.dtype;
        // A computed matrix at home would come in small transfers per band
        // (its rows are as long as the output): the matrix unit's staging
        // does better there (the one-token context, 13576 against 6858
        // cycles for 12 heads of 1025 x 64).
        if !constant && !w_on_chip {
            return Ok(false);
        }
        // Column groups one transfer wide, bands of rows within a
        // thirty-second of the memory (two in flight).
        let group = (1024 / gc).max(1) * gc;
        let cap = self.e.m.memories[wm.index()].size.value.max(0) as u64;
        let row_bytes = group.min(n) as u64 * wdt.bytes();
        let band = ((cap / 32 / row_bytes.max(1)) as i64 / gr * gr)
            .max(gr)
            .min(k);
        // (batch, c0, cw, k0, kh)
        let mut blocks: Vec<(i64, i64, i64, i64, i64)> = Vec::new();
        for bi in 0..batches {
            let mut c0 = 0;
            while c0 < n {
                let cw = group.min(n - c0);
                let mut k0 = 0;
                while k0 < k {
                    blocks.push((bi, c0, cw, k0, band.min(k - k0)));
                    k0 += band;
                }
                c0 += cw;
            }
        }
        let stage = |l: &mut Self,
                     (bi, c0, cw, k0, kh): (i64, i64, i64, i64, i64)|
         -> Result<MemTile, LowerError> {
            let src = wh.tile(bi * k + k0, c0, kh, cw);
            if w_on_chip {
                return Ok(src);
            }
            let buf = l.e.buffer_padded(wm, wland.dtype, kh, cw, Pad::Aligned);
            match l
                .e
                .to_loc(Val::Mem(src), wland, Some(&buf), Pad::Dense)
                .map_err(err)?
            {
                Val::Mem(t) => Ok(t),
                _ => Err(err("weights landed in a register")),
            }
        };
        // `x` (the batch's row) on chip as one dense row.
        let mut x: Option<(i64, MemTile)> = None;
        let mut next = Some(stage(self, blocks[0])?);
        let mut accs: Vec<Option<RegTile>> = Vec::new();
        let mut tails: Vec<Option<RegTile>> = Vec::new();
        for (bi_, &(bi, c0, cw, k0, kh)) in blocks.iter().enumerate() {
            let Some(wt) = next.take() else {
                return Err(err("a band of weights was not staged"));
            };
            if let Some(&nb) = blocks.get(bi_ + 1) {
                next = Some(stage(self, nb)?);
            }
            self.e.ready(&wt).map_err(err)?;
            let xt = match &x {
                Some((b0, t)) if *b0 == bi => t.clone(),
                _ => {
                    let t = if xh.mem == xm {
                        xh.tile(bi, 0, 1, k)
                    } else {
                        // In pieces a transfer takes (at most 1024 columns).
                        let buf = self.e.buffer_padded(xm, xland.dtype, 1, k, Pad::Dense);
                        let mut c = 0;
                        while c < k {
                            let w = 1024.min(k - c);
                            let Val::Mem(t) = self
                                .e
                                .to_loc(
                                    Val::Mem(xh.tile(bi, c, 1, w)),
                                    xland,
                                    Some(&buf.view(0, c, 1, w)),
                                    Pad::Dense,
                                )
                                .map_err(err)?
                            else {
                                return Err(err("x landed in a register"));
                            };
                            self.e.ready(&t).map_err(err)?;
                            c += w;
                        }
                        buf
                    };
                    x = Some((bi, t.clone()));
                    t
                }
            };
            // `x[k0 .. k0 + gr]` as a column of `gr` rows.
            let column = |k0: i64| MemTile {
                rows: gr,
                cols: 1,
                pitch: 1,
                offset: xt.offset + (k0 * xt.dtype.bytes() as i64) as u64,
                ..xt.clone()
            };
            if k0 == 0 {
                accs = vec![None; ((cw + gc - 1) / gc) as usize];
                tails = vec![None; accs.len()];
            }
            let mut kb = 0;
            while kb + gr <= kh {
                let Val::Reg(xr) = self
                    .e
                    .to_loc(Val::Mem(column(k0 + kb)), reg, None, Pad::Dense)
                    .map_err(err)?
                else {
                    return Err(err("x did not land in a register"));
                };
                let xb = ops::broadcast_lanes(&mut self.e, &xr, (gr, gc), gr, gc).map_err(err)?;
                for (j, acc) in accs.iter_mut().enumerate() {
                    let c = j as i64 * gc;
                    let w = gc.min(cw - c);
                    let Val::Reg(wr) = self
                        .e
                        .to_loc(Val::Mem(wt.view(kb, c, gr, w)), reg, None, Pad::Dense)
                        .map_err(err)?
                    else {
                        return Err(err("weights did not land in a register"));
                    };
                    let xbw = RegTile {
                        cols: w,
                        ..xb.clone()
                    };
                    *acc = Some(mul_add(&mut self.e, &xbw, &wr, acc.take()).map_err(err)?);
                }
                kb += gr;
            }
            // Rows short of a whole block (a contraction not a multiple of
            // the sublanes): one at a time, in row 0 of their own
            // accumulators (the other rows are never read).
            for t in kb..kh {
                let one = MemTile {
                    rows: 1,
                    cols: 1,
                    pitch: 1,
                    offset: xt.offset + ((k0 + t) * xt.dtype.bytes() as i64) as u64,
                    ..xt.clone()
                };
                let xs = scalar_broadcast(&mut self.e, file, &one, (gr, gc)).map_err(err)?;
                for (j, tail) in tails.iter_mut().enumerate() {
                    let c = j as i64 * gc;
                    let w = gc.min(cw - c);
                    let Val::Reg(wr) = self
                        .e
                        .to_loc(Val::Mem(wt.view(t, c, 1, w)), reg, None, Pad::Dense)
                        .map_err(err)?
                    else {
                        return Err(err("weights did not land in a register"));
                    };
                    let xsw = RegTile {
                        rows: 1,
                        cols: w,
                        ..xs.clone()
                    };
                    *tail = Some(mul_add(&mut self.e, &xsw, &wr, tail.take()).map_err(err)?);
                }
            }
            // The group's last band: sum the sublanes, then the epilogue.
            if k0 + kh == k {
                for (j, (acc, tail)) in accs.iter_mut().zip(tails.iter_mut()).enumerate() {
                    let c = j as i64 * gc;
                    let w = gc.min(cw - c);
                    let y = match (acc.take(), tail.take()) {
                        (Some(s), t) => {
                            let y = sublane_sum(&mut self.e, &s, gr, w, gc).map_err(err)?;
                            match t {
                                Some(t) => {
                                    ops::reg_binary(&mut self.e, Ew::Add, &y, &t).map_err(err)?
                                }
                                None => y,
                            }
                        }
                        (None, Some(t)) => t,
                        (None, None) => return Err(err("an empty accumulator")),
                    };
                    self.tile_epilogue(plan, out, out_home, (Val::Reg(y), bi, c0 + c, 1, w))?;
                }
            }
        }
        Ok(true)
    }

    /// The transposes whose only readers are one-row products that can
    /// take the untransposed matrix instead ([`Self::vector_dots`]): they
    /// are not lowered.
    pub(super) fn dot_transposes(&self) -> std::collections::HashSet<usize> {
        let g = self.g;
        let mut out = std::collections::HashSet::new();
        if !self.opts.vector_gemv || self.dots_file().is_none() {
            return out;
        }
        for (ti, t) in g.nodes.iter().enumerate() {
            let crate::ir::Op::Transpose { perm } = &t.op else {
                continue;
            };
            let r = perm.len();
            let swaps_last_two = crate::ir::swaps_last_two(perm);
            let kt = t.outputs[0];
            if !swaps_last_two || g.constants.contains_key(&t.inputs[0]) || g.outputs.contains(&kt)
            {
                continue;
            }
            let readers: Vec<&Node> = g.nodes.iter().filter(|n| n.inputs.contains(&kt)).collect();
            let one_row = |n: &&Node| {
                let sa = &g.ty(n.inputs[0]).shape;
                matches!(n.op, crate::ir::Op::MatMul)
                    && n.inputs[1] == kt
                    && n.inputs[0] != kt
                    && !g.constants.contains_key(&n.inputs[0])
                    && sa.len() == r
                    && sa[r - 2] == 1
                    && sa[..r - 2] == g.ty(kt).shape[..r - 2]
            };
            if !readers.is_empty() && readers.iter().all(one_row) {
                out.insert(ti);
            }
        }
        out
    }

    /// `out = x · kᵀ` for one row `x` per batch, where `kᵀ` is a transpose
    /// that was not lowered ([`Self::dot_transposes`]): each output element
    /// is the dot product of `x` with a row of `k`. `x` is loaded into every
    /// row of a register; blocks of rows of `k` are multiplied by it and
    /// reduced across the lanes, giving a column of results stored as
    /// consecutive elements of the output row; the row then takes the
    /// region's epilogue. No transpose of `k` (on vliw-systolic 12 heads of
    /// 1025 x 64 kept the transpose unit busy for 12 k cycles).
    pub(super) fn vector_dots(
        &mut self,
        root: &Node,
        plan: &[(Ew, Option<Operand>, bool)],
        out: ValueId,
        out_home: &Home,
        k_value: ValueId,
    ) -> Result<(), LowerError> {
        let g = self.g;
        self.cache.new_region();
        let a = root.inputs[0];
        let sa = g.ty(a).shape.clone();
        let sk = g.ty(k_value).shape.clone();
        let r = sa.len();
        let batches = sa[..r - 2].iter().product::<usize>() as i64;
        let (n, d) = (sk[r - 2] as i64, sk[r - 1] as i64);
        let file = self
            .dots_file()
            .ok_or_else(|| err("no register file for products of one row"))?;
        // A one-dimensional file (pim-dram's controller) takes one row of
        // `k` at a time and sums its lanes into a scalar register.
        let flat = self.e.m.regfiles[file.index()].shape.len() == 1;
        let (gr, gc) = self.e.granule(file);
        let reg = Loc {
            place: Place::Reg(file),
            dtype: self.e.m.regfiles[file.index()].dtype,
        };
        let f = super::reduce::forms(&self.e, crate::ir::ReduceKind::Sum)
            .into_iter()
            .find(|f| {
                f.src.place == Place::Reg(file)
                    && (f.dst.place == Place::Reg(file)
                        || flat && matches!(f.dst.place, Place::Reg(_)))
            })
            .ok_or_else(|| err("no row sum in the register file"))?;
        let land = self.landing_of(self.layout.act)?;
        let Place::Mem(lm) = land.place else {
            return Err(err("tiles from home land in no memory"));
        };
        let home_of = |l: &Self, v: ValueId| {
            l.layout
                .homes
                .get(&v)
                .cloned()
                .ok_or_else(|| err("operand without a home"))
        };
        let (xh, kh) = (home_of(self, a)?, home_of(self, k_value)?);
        if let Some(ip) = self.rows_in_place(d)
            && kh.mem == self.info.home
            && kh.dtype == ip.dtype
            && kh.pitch == ip.pitch
        {
            self.pool.read_in_place.insert(k_value);
            return self.dots_in_place(&ip, plan, out, out_home, (&xh, &kh), (batches, n, d));
        }
        // A batch's operand on chip: where it is, or staged whole.
        let on_chip =
            |l: &mut Self, h: &Home, row: i64, rows: i64| -> Result<MemTile, LowerError> {
                if h.mem == lm {
                    return Ok(h.tile(row, 0, rows, h.cols));
                }
                let buf =
                    l.e.buffer_padded(lm, land.dtype, rows, h.cols, Pad::Aligned);
                let (t, pending) = l.stage_pieces(&h.tile(row, 0, rows, h.cols), land, &buf)?;
                for p in &pending {
                    l.e.ready(p).map_err(err)?;
                }
                Ok(t)
            };
        let chunks: Vec<(i64, i64)> = (0..d)
            .step_by(gc as usize)
            .map(|c| (c, gc.min(d - c)))
            .collect();
        // `k` comes on chip in blocks of rows of at most `1 / tile_share`
        // of the memory (a cache of 1025 keys does not fit pim-dram's
        // buffer whole).
        let room = self.e.m.memories[lm.index()].size.value / self.trials.tile_share.max(1);
        let block = (room / (kh.pitch * land.dtype.bytes() as i64).max(1)).clamp(1, n.max(1));
        for bi in 0..batches {
            let xt = on_chip(self, &xh, bi, 1)?;
            // `x` in every row of a register, chunk by chunk.
            let xs: Vec<RegTile> = chunks
                .iter()
                .map(|&(c, w)| {
                    if flat {
                        return match self
                            .e
                            .to_loc(Val::Mem(xt.view(0, c, 1, w)), reg, None, Pad::Dense)
                            .map_err(err)?
                        {
                            Val::Reg(x) => Ok(x),
                            _ => Err(err("a chunk of x did not land in a register")),
                        };
                    }
                    ops::load_row_broadcast(
                        &mut self.e,
                        &xt.view(0, c, 1, w),
                        file,
                        (gr, gc),
                        gr,
                        w,
                    )
                    .map_err(err)
                })
                .collect::<Result<_, _>>()?;
            let ybuf = self.e.buffer_padded(lm, land.dtype, 1, n, Pad::Registers);
            let mut j0 = 0;
            let (mut kt, mut kb) = (None, 0);
            while j0 < n {
                if kt.is_none() || j0 >= kb + block {
                    kb = j0 - j0 % block;
                    kt = Some(on_chip(self, &kh, bi * n + kb, block.min(n - kb))?);
                }
                let kt = kt.as_ref().ok_or_else(|| err("no block of k"))?;
                let h = gr.min(n - j0).min(kb + block - j0);
                let mut acc: Option<RegTile> = None;
                for (&(c, w), x) in chunks.iter().zip(&xs) {
                    let Val::Reg(kr) = self
                        .e
                        .to_loc(Val::Mem(kt.view(j0 - kb, c, h, w)), reg, None, Pad::Dense)
                        .map_err(err)?
                    else {
                        return Err(err("rows of k did not land in a register"));
                    };
                    let xw = RegTile {
                        rows: h,
                        cols: w,
                        ..x.clone()
                    };
                    acc = Some(mul_add(&mut self.e, &xw, &kr, acc.take()).map_err(err)?);
                }
                let acc = acc.ok_or_else(|| err("a dot product of nothing"))?;
                let Val::Reg(col) = self
                    .reduce_reg(&f, crate::ir::ReduceKind::Sum, &acc, h, gc.min(d), (gr, gc))
                    .map_err(err)?
                else {
                    return Err(err("a row sum left no register"));
                };
                if flat {
                    // One result in a scalar register: stored as element `j0`.
                    let mv = super::scalar::moves(self.e.m, lm, col.dtype)
                        .filter(|mv| mv.file == col.file)
                        .ok_or_else(|| err("no scalar store of a row sum"))?;
                    super::scalar::store_element(&mut self.e, &mv, col.reg, &ybuf, 0, j0)
                        .map_err(err)?;
                    j0 += h;
                    continue;
                }
                // The column of `h` results as `h` consecutive elements.
                let run = MemTile {
                    rows: h,
                    cols: 1,
                    pitch: 1,
                    offset: ybuf.offset + (j0 as u64) * ybuf.dtype.bytes(),
                    ..ybuf.clone()
                };
                self.e
                    .to_loc(Val::Reg(col), ybuf.loc(), Some(&run), Pad::Dense)
                    .map_err(err)?;
                j0 += h;
            }
            let mut c0 = 0;
            while c0 < n {
                let w = gc.min(n - c0);
                self.tile_epilogue(
                    plan,
                    out,
                    out_home,
                    (Val::Mem(ybuf.view(0, c0, 1, w)), bi, c0, 1, w),
                )?;
                c0 += w;
            }
        }
        Ok(())
    }

    /// The contraction that takes one row of `A` as a vector and reads
    /// the rows of `B` where they lie at home (a machine computing in its
    /// home memory: pim-dram's `mac`, one result per bank from one DRAM
    /// row each), if it takes `d` elements of each row: the form and the
    /// layout at home it reads.
    pub(super) fn rows_in_place(&self, d: i64) -> Option<RowsInPlace> {
        use super::ops::Role;
        use isa_specs::model::OperandKind;
        let params: Vec<i64> = self.e.m.params.iter().map(|q| q.value).collect();
        self.fusion.contractions.iter().find_map(|c| {
            if c.t_dims != [Role::N] || c.a_dims != [Role::K] || c.b_dims != [Role::N, Role::K] {
                return None;
            }
            let locs = c.locs(&self.e)?;
            if locs[2].place != Place::Mem(self.info.home) {
                return None;
            }
            let OperandKind::Mem {
                shape,
                align,
                stride,
                ..
            } = &self.e.m.instructions[c.inst.index()].operands[c.b].kind
            else {
                return None;
            };
            let strides = ops::fixed_strides(&self.e, stride.as_deref())?;
            let rows = isa_specs::eval::eval_int(shape.first()?, &isa_specs::eval::Params(&params))
                .ok()?;
            let (&[pitch, 1], true) = (strides.as_slice(), rows > 0) else {
                return None;
            };
            let dtype = locs[2].dtype;
            // Every block of `rows` rows starts aligned.
            let fits = pitch >= d
                && (rows * pitch * dtype.bytes() as i64) % (*align).max(1) as i64 == 0
                && c.probe(&self.e, (1, rows, d))
                    .is_some_and(|op| self.e.check(&op, c.inst).is_ok());
            fits.then(|| RowsInPlace {
                form: c.clone(),
                rows,
                pitch,
                align: *align,
                dtype,
            })
        })
    }

    /// Homes in the layout [`Self::rows_in_place`] reads, for the matrices
    /// whose rows only products of one row read ([`Self::dot_transposes`])
    /// and that a `Concat` makes (a decode step's key cache with the new
    /// key appended): each batch's rows `pitch` apart from an aligned
    /// start, batches a whole number of instruction blocks apart. The
    /// `Concat` writes it in that layout; the products read it where it is
    /// ([`Self::vector_dots`]).
    pub(super) fn in_place_dot_homes(&mut self) {
        let g = self.g;
        if !self.opts.in_place_rows {
            return;
        }
        let mut ts: Vec<usize> = self.layout.dot_transposes.iter().copied().collect();
        ts.sort_unstable();
        for ti in ts {
            let k = g.nodes[ti].inputs[0];
            let made_by_concat = g
                .nodes
                .iter()
                .any(|n| n.outputs.contains(&k) && matches!(n.op, crate::ir::Op::Concat { .. }));
            let only_dots = g
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.inputs.contains(&k))
                .all(|(j, _)| self.layout.dot_transposes.contains(&j));
            if !made_by_concat || !only_dots || self.layout.homes.contains_key(&k) {
                continue;
            }
            let s = &g.ty(k).shape;
            let r = s.len();
            let (n, d) = (s[r - 2] as i64, s[r - 1] as i64);
            let batches = s[..r - 2].iter().product::<usize>() as i64;
            let Some(ip) = self.rows_in_place(d) else {
                continue;
            };
            let stride = super::machine::rup(n, ip.rows) * ip.pitch;
            let addr = self.alloc_home((batches * stride) as u64 * ip.dtype.bytes(), ip.align);
            let home = Home {
                mem: self.info.home,
                base: super::emit::Base::Fixed(addr),
                dtype: ip.dtype,
                rows: batches * n,
                cols: d,
                pitch: ip.pitch,
                batch: (batches > 1).then_some((n, stride)),
                first: 0,
                columns: None,
            };
            // The cache input is written by the runner straight into its
            // rows (the cache lives there): the step only appends.
            if let Some(cn) = g.nodes.iter().find(|n| n.outputs.contains(&k)) {
                let lone = self.joined_inputs(cn);
                self.place_joined_inputs(cn, &lone, &home);
            }
            self.layout.homes.insert(k, home);
        }
    }

    /// [`Self::vector_dots`] where the rows of `k` lie at home in the
    /// layout `ip` reads: per batch, `x` goes into the instruction's
    /// vector operand once, and each block of `ip.rows` rows of `k` gives
    /// `ip.rows` results with one instruction, read out into a row on chip
    /// that then takes the region's epilogue.
    #[allow(clippy::too_many_arguments)]
    fn dots_in_place(
        &mut self,
        ip: &RowsInPlace,
        plan: &[(Ew, Option<Operand>, bool)],
        out: ValueId,
        out_home: &Home,
        (xh, kh): (&Home, &Home),
        (batches, n, d): (i64, i64, i64),
    ) -> Result<(), LowerError> {
        let form = &ip.form;
        let locs = form
            .locs(&self.e)
            .ok_or_else(|| err("contraction operands without places"))?;
        let land = self.landing_of(self.layout.act)?;
        let Place::Mem(lm) = land.place else {
            return Err(err("tiles from home land in no memory"));
        };
        let Place::Reg(acc_file) = locs[0].place else {
            return Err(err("the in-place contraction's result is not a register"));
        };
        let ybuf = self.e.buffer_padded(
            lm,
            land.dtype,
            1,
            super::machine::rup(n, ip.rows),
            Pad::Registers,
        );
        let mnk = (1, ip.rows, d);
        for bi in 0..batches {
            let xt = if xh.mem == lm {
                xh.tile(bi, 0, 1, d)
            } else {
                let buf = self.e.buffer_padded(lm, land.dtype, 1, d, Pad::Aligned);
                let (t, pending) = self.stage_pieces(&xh.tile(bi, 0, 1, d), land, &buf)?;
                for p in &pending {
                    self.e.ready(p).map_err(err)?;
                }
                t
            };
            let x = self
                .e
                .to_loc(Val::Mem(xt), locs[1], None, Pad::Dense)
                .map_err(err)?;
            for j0 in (0..n).step_by(ip.rows as usize) {
                let t = Val::Reg(RegTile {
                    file: acc_file,
                    dtype: locs[0].dtype,
                    reg: self.e.vreg(acc_file),
                    rows: 1,
                    cols: ip.rows,
                });
                let t_shape = super::ops::Contraction::shape(&form.t_dims, mnk);
                if !form.set {
                    self.zero(&t, &t_shape, locs[0])?;
                }
                // A whole block of rows: those past the batch's last are
                // its padding, read and not stored.
                let b = Val::Mem(kh.tile(bi * n + j0, 0, ip.rows, d));
                let (ts, refs): (Vec<_>, Vec<_>) = [
                    t.tensor(t_shape),
                    x.tensor(super::ops::Contraction::shape(&form.a_dims, mnk)),
                    b.tensor(super::ops::Contraction::shape(&form.b_dims, mnk)),
                ]
                .into_iter()
                .unzip();
                let op = form
                    .op(&self.e, ts, mnk)
                    .ok_or_else(|| err("contraction pattern"))?;
                self.e
                    .emit(&op, &refs, Some(form.inst))
                    .map_err(|e| err(format!("in-place rows: {e}")))?;
                let run = ybuf.view(0, j0, 1, ip.rows);
                self.e
                    .to_loc(t, ybuf.loc(), Some(&run), Pad::Dense)
                    .map_err(err)?;
            }
            let mut c0 = 0;
            let (_, gc) = self.e.granule(
                self.dots_file()
                    .ok_or_else(|| err("no register file for the epilogue"))?,
            );
            while c0 < n {
                let w = gc.min(n - c0);
                self.tile_epilogue(
                    plan,
                    out,
                    out_home,
                    (Val::Mem(ybuf.view(0, c0, 1, w)), bi, c0, 1, w),
                )?;
                c0 += w;
            }
        }
        Ok(())
    }

    /// The register file dot products of one row with the rows of a
    /// matrix run in ([`Self::vector_dots`]): the file of products of one
    /// row ([`Self::gemv_file`]), else a one-dimensional file of a float
    /// type with the product, the multiply-add and a sum of its lanes.
    pub(super) fn dots_file(&self) -> Option<RegFileId> {
        self.gemv_file().or_else(|| {
            let here = |f: RegFileId, ew: Ew| {
                ops::ew_forms(&self.e, ew)
                    .iter()
                    .any(|x| x.locs.iter().all(|l| l.place == Place::Reg(f)))
            };
            let sums = super::reduce::forms(&self.e, crate::ir::ReduceKind::Sum);
            (0..self.e.m.regfiles.len())
                .map(|i| RegFileId(i as u32))
                .find(|&f| {
                    let rf = &self.e.m.regfiles[f.index()];
                    rf.shape.len() == 1
                        && rf.dtype.is_float()
                        && here(f, Ew::Mul)
                        && here(f, Ew::MulAdd)
                        && sums.iter().any(|s| s.src.place == Place::Reg(f))
                })
        })
    }

    /// The register file matrix-vector products run in: two-dimensional, of
    /// a float type, with the lane broadcast, the product and the
    /// multiply-add.
    fn gemv_file(&self) -> Option<RegFileId> {
        let here = |f: RegFileId, ew: Ew| {
            ops::ew_forms(&self.e, ew)
                .iter()
                .any(|x| x.rank == 2 && x.locs.iter().all(|l| l.place == Place::Reg(f)))
        };
        ops::lane_broadcast_files(&self.e).into_iter().find(|&f| {
            self.e.m.regfiles[f.index()].shape.len() == 2 && here(f, Ew::Mul) && here(f, Ew::MulAdd)
        })
    }
}
