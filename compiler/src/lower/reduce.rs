//! Reductions over the last dimensions (`ReduceSum`, `ReduceMean`,
//! `ReduceMax`, `ReduceMin`, and the reductions inside softmax and layer
//! normalisation), by the machine's reduction instructions found by their
//! semantics:
//!
//! - rows of a memory tile into a column (`d[i] = r(k) a[i, k]`);
//! - rows of a register, broadcast (`d[i, j] = r(k) a[i, k]`);
//! - a one-dimensional register, broadcast (`d[i] = r(j) a[j]`) or into a
//!   scalar (`d = r(i) a[i]`).
//!
//! A row is cut into chunks the instruction accepts; each chunk is reduced and
//! the partial results are combined element-wise. An instruction that reduces
//! a whole register reads a chunk narrower than the register from a buffer
//! whose other lanes hold the reduction's identity (0, or ∓max), so stale
//! lanes never count.

use super::emit::{MemTile, Pad, RegTile, Val};
use super::machine::{Loc, Place, operand_loc};
use super::ops::{self, Ew, Step};
use super::{LowerError, Lowerer, PackKey, err};
use crate::ir::{Node, ReduceKind};
use isa_specs::model::{AssignOp, DType, IndexId, InstId, ReduceOp};
use isa_specs::select::{TileAccess, TileExpr, TileOp, TilePlace, TileTensor};

/// How a reduction instruction lays out its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `d[i] = r(k) a[i, k]` on memory tiles.
    MemRows,
    /// `d[i, j] = r(k) a[i, k]` in registers (the result broadcast along `j`).
    Rows,
    /// `d[i] = r(j) a[j]` in registers (broadcast).
    Lanes,
    /// `d = r(i) a[i]`: a register into a scalar register.
    Scalar,
}

/// A reduction instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct Form {
    /// The instruction.
    pub inst: InstId,
    /// Its layout.
    pub shape: Shape,
    /// Where the result is.
    pub dst: Loc,
    /// Where the operand must be.
    pub src: Loc,
}

fn ix(i: u32) -> isa_specs::model::Affine {
    isa_specs::model::Affine {
        terms: vec![(IndexId(i), 1)],
        constant: 0,
        offsets: Vec::new(),
    }
}

/// The tile operation of a reduction: `(result shape, operand shape, index extents)`.
fn red_op(op: ReduceOp, shape: Shape, d: TileTensor, a: TileTensor, extents: Vec<i64>) -> TileOp {
    // Indices: Rows (i, j, k), MemRows (i, k), Lanes (i, j), Scalar (i).
    let (target, access, over) = match shape {
        Shape::Rows => (vec![ix(0), ix(1)], vec![ix(0), ix(2)], 2),
        Shape::MemRows => (vec![ix(0)], vec![ix(0), ix(1)], 1),
        Shape::Lanes => (vec![ix(0)], vec![ix(1)], 1),
        Shape::Scalar => (vec![], vec![ix(0)], 0),
    };
    TileOp {
        tensors: vec![d, a],
        extents,
        target: TileAccess {
            tensor: 0,
            indices: target,
        },
        op: AssignOp::Set,
        value: TileExpr::Reduce(
            op,
            vec![IndexId(over)],
            Box::new(TileExpr::Access(TileAccess {
                tensor: 1,
                indices: access,
            })),
        ),
    }
}

fn reduce_op(kind: ReduceKind) -> ReduceOp {
    match kind {
        ReduceKind::Sum | ReduceKind::Mean => ReduceOp::Sum,
        ReduceKind::Max => ReduceOp::Max,
        ReduceKind::Min => ReduceOp::Min,
    }
}

/// Every reduction instruction of `kind` on the machine.
pub fn forms(e: &super::emit::Emitter, kind: ReduceKind) -> Vec<Form> {
    let mut out = Vec::new();
    for shape in [Shape::MemRows, Shape::Rows, Shape::Lanes, Shape::Scalar] {
        let (dr, ar, n) = match shape {
            Shape::Rows => (2, 2, 3),
            Shape::MemRows => (1, 2, 2),
            Shape::Lanes => (1, 1, 2),
            Shape::Scalar => (0, 1, 1),
        };
        let t = |r: usize| TileTensor {
            dtype: DType::F32,
            shape: vec![1; r],
            place: TilePlace::Imm(0),
        };
        let op = red_op(reduce_op(kind), shape, t(dr), t(ar), vec![1; n]);
        for (id, b) in e.isa.match_op(e.m, &op) {
            let loc = |t: usize| {
                let oi = b.operand.iter().position(|x| *x == Some(t))?;
                operand_loc(e.m, id, oi)
            };
            let (Some(dst), Some(src)) = (loc(0), loc(1)) else {
                continue;
            };
            let in_mem = matches!(dst.place, Place::Mem(_)) && matches!(src.place, Place::Mem(_));
            let in_regs = matches!(dst.place, Place::Reg(_)) && matches!(src.place, Place::Reg(_));
            let fits = if shape == Shape::MemRows {
                in_mem
            } else {
                in_regs
            };
            if fits && dst.dtype.is_float() && src.dtype.is_float() {
                out.push(Form {
                    inst: id,
                    shape,
                    dst,
                    src,
                });
            }
        }
    }
    out
}

/// Shapes of one attempt: result, operand, index extents, and whether the
/// operand is padded to whole registers.
type Try = (Vec<i64>, Vec<i64>, Vec<i64>, bool);

/// The identity of a reduction.
fn identity(kind: ReduceKind) -> f64 {
    match kind {
        ReduceKind::Sum | ReduceKind::Mean => 0.0,
        // The largest finite values: every type in use can hold them after rounding.
        ReduceKind::Max => -3.0e38,
        ReduceKind::Min => 3.0e38,
    }
}

impl Lowerer<'_> {
    /// Lowers a reduction node (its reduced dimensions kept, see `canon`).
    pub(super) fn reduce(
        &mut self,
        n: &Node,
        kind: ReduceKind,
        axes: &[usize],
    ) -> Result<(), LowerError> {
        let g = self.g;
        let (x, out) = (n.inputs[0], n.outputs[0]);
        let shape = g.ty(x).shape.clone();
        let rank = shape.len();
        let first = axes.first().copied().unwrap_or(rank);
        if axes.iter().copied().ne(first..rank) {
            return Err(Self::node_err(
                n,
                format!(
                    "reducing dimensions {axes:?} of {shape:?} is not supported yet: only the last dimensions"
                ),
            ));
        }
        let xh = self
            .layout
            .homes
            .get(&x)
            .cloned()
            .ok_or_else(|| err("operand without a home"))?;
        let oh = self
            .layout
            .homes
            .get(&out)
            .cloned()
            .ok_or_else(|| err("output without a home"))?;
        let rows: i64 = shape[..first].iter().product::<usize>() as i64;
        let cols: i64 = shape[first..].iter().product::<usize>() as i64;
        if first + 1 < rank && xh.pitch != xh.cols {
            return Err(Self::node_err(
                n,
                "reducing several dimensions of a tensor whose rows are padded is not supported yet",
            ));
        }
        if g.constants.contains_key(&x) {
            return Err(Self::node_err(
                n,
                "a reduction of a constant was not folded",
            ));
        }
        if rows == 0 {
            return Ok(());
        }
        // Sources: rows of `cols` elements, `pitch` apart.
        let pitch = if first + 1 < rank { cols } else { xh.pitch };
        let src = super::Home {
            rows,
            cols,
            pitch,
            ..xh
        };
        let dst = super::Home {
            rows,
            cols: 1,
            ..oh
        };
        let fs = forms(&self.e, kind);
        if fs.is_empty() {
            let op = match reduce_op(kind) {
                ReduceOp::Sum => "sum",
                ReduceOp::Max => "max",
                _ => "min",
            };
            return Err(Self::node_err(
                n,
                LowerError::MissingOperation {
                    semantics: format!("d[i] = {op}(k) a[i, k]"),
                    message: format!(
                        "cannot compile: the target lacks a {} reduction (`d[i] = {op}(k) a[i, k]` or a register form)",
                        kind.name(),
                    ),
                },
            ));
        }
        if cols == 0 {
            // The reduction of nothing: ONNX's identities (a mean of nothing is 0/0).
            let v = match kind {
                ReduceKind::Sum => 0.0,
                ReduceKind::Mean => f64::NAN,
                ReduceKind::Max => f64::NEG_INFINITY,
                ReduceKind::Min => f64::INFINITY,
            };
            let bytes = super::encode(
                dst.dtype,
                std::iter::repeat_n(v, (rows * dst.pitch) as usize),
            );
            self.pool.data.push(isa_specs::program::DataSegment {
                memory: self.e.m.memories[self.home_mem().index()].name.clone(),
                addr: dst.addr()?,
                bytes,
            });
            return Ok(());
        }
        let mut last = String::new();
        for f in &fs {
            let cp = self.e.checkpoint();
            match self.reduce_with(f, kind, &src, &dst) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    self.e.rollback(cp);
                    last = format!(
                        "`{}`: {}",
                        self.e.m.instructions[f.inst.index()].name,
                        e.message()
                    );
                }
            }
        }
        Err(Self::node_err(
            n,
            format!("no reduction instruction fits: {last}"),
        ))
    }

    fn reduce_with(
        &mut self,
        f: &Form,
        kind: ReduceKind,
        src: &super::Home,
        dst: &super::Home,
    ) -> Result<(), LowerError> {
        // Staged on chip first, in one transfer; else in bands of rows,
        // each transfer overlapping the reduction of the band before; else
        // (rows wider than one transfer takes) whole, in pieces of
        // columns. Where the chunks cannot be read from there (a machine
        // without a copy between on-chip tiles), from home.
        let cp = self.e.checkpoint();
        if let Some(staged) = self.stage_whole(src, false)? {
            match self.reduce_rows(f, kind, &staged, dst, 0, Some(src)) {
                Ok(()) => return Ok(()),
                Err(_) => self.e.rollback(cp),
            }
        }
        if self.opts.stage_runs && src.mem == self.info.home {
            let cp = self.e.checkpoint();
            match self.reduce_bands(f, kind, src, dst) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(_) => self.e.rollback(cp),
            }
        }
        let cp = self.e.checkpoint();
        if let Some(staged) = self.stage_whole(src, true)? {
            match self.reduce_rows(f, kind, &staged, dst, 0, Some(src)) {
                Ok(()) => return Ok(()),
                Err(_) => self.e.rollback(cp),
            }
        }
        self.reduce_rows(f, kind, src, dst, 0, None)
    }

    /// [`Self::reduce_rows`] over bands of rows of `src` (at home, too
    /// large to stage whole), each brought on chip in one transfer issued
    /// before the band ahead of it is reduced, so transfers overlap the
    /// reductions. False when no band fits.
    fn reduce_bands(
        &mut self,
        f: &Form,
        kind: ReduceKind,
        src: &super::Home,
        dst: &super::Home,
    ) -> Result<bool, LowerError> {
        let land = self.landing_of(src.dtype)?;
        let Place::Mem(lm) = land.place else {
            return Ok(false);
        };
        let block = match f.src.place {
            Place::Reg(file) => self.e.granule(file).0,
            Place::Mem(_) => 1,
        };
        let cap = self.e.m.memories[lm.index()].size.value.max(0) as u64;
        let row_bytes = src.pitch.max(1) as u64 * land.dtype.bytes();
        // Two bands in flight within an eighth of the memory.
        let band = ((cap / 16 / row_bytes) as i64 / block * block).min(src.rows);
        if band < block.max(1) {
            return Ok(false);
        }
        let stage = |l: &mut Self, r: i64| -> Result<(super::Home, MemTile), LowerError> {
            let h = band.min(src.rows - r);
            let buf = l.e.buffer_padded(lm, land.dtype, h, src.cols, Pad::Aligned);
            let moved =
                l.e.to_loc(
                    Val::Mem(src.tile(r, 0, h, src.cols)),
                    land,
                    Some(&buf),
                    Pad::Dense,
                )
                .map_err(err)?;
            let Val::Mem(t) = moved else {
                return Err(err("a band landed in a register"));
            };
            let home = super::Home {
                mem: lm,
                base: buf.base,
                dtype: land.dtype,
                rows: h,
                cols: src.cols,
                pitch: buf.pitch,
                batch: None,
                first: 0,
                columns: None,
            };
            Ok((home, t))
        };
        let mut next = Some(stage(self, 0)?);
        let mut r = 0;
        while let Some((home, t)) = next.take() {
            if r + band < src.rows {
                next = Some(stage(self, r + band)?);
            }
            self.e.ready(&t).map_err(err)?;
            self.reduce_rows(f, kind, &home, dst, r, Some(src))?;
            r += band;
        }
        Ok(true)
    }

    /// The row-block loop of [`Self::reduce_with`], reading `src` where it
    /// is, writing its row `i` to row `at + i` of `dst`. Where `src` is a
    /// copy on chip of `home` (from its row `at`), a chunk that cannot be
    /// reduced from there (short of a whole register, it lands over the
    /// reduction's identity, which a machine without a copy within the chip
    /// cannot do) is read from `home`.
    fn reduce_rows(
        &mut self,
        f: &Form,
        kind: ReduceKind,
        src: &super::Home,
        dst: &super::Home,
        at: i64,
        home: Option<&super::Home>,
    ) -> Result<(), LowerError> {
        let dst_mem = dst.mem;
        let (gr, gc) = match f.src.place {
            Place::Reg(file) => self.e.granule(file),
            Place::Mem(_) => (256, 512),
        };
        let block = match f.shape {
            Shape::Lanes | Shape::Scalar => 1,
            _ => gr,
        };
        let mean = (kind == ReduceKind::Mean).then(|| 1.0 / src.cols as f64);
        let combine = match kind {
            ReduceKind::Sum | ReduceKind::Mean => Ew::Add,
            ReduceKind::Max => Ew::Max,
            ReduceKind::Min => Ew::Min,
        };
        let mut r = 0;
        while r < src.rows {
            let h = block.min(src.rows - r);
            // Whole-register chunks are combined element-wise first (a
            // tree), then reduced across the lanes once.
            let mut acc: Option<Val> =
                self.reduce_whole_chunks(f, kind, src, r, h, combine, (gr, gc))?;
            let mut c = match acc {
                Some(_) => src.cols / gc * gc,
                None => 0,
            };
            while c < src.cols {
                let w = gc.min(src.cols - c);
                let part = match (
                    self.reduce_chunk(f, kind, src.tile(r, c, h, w), gr, gc),
                    home,
                ) {
                    (Ok(p), _) => p,
                    (Err(_), Some(x)) => self
                        .reduce_chunk(f, kind, x.tile(at + r, c, h, w), gr, gc)
                        .map_err(err)?,
                    (Err(e), None) => return Err(err(e)),
                };
                acc = Some(match acc {
                    None => part,
                    Some(a) => ops::chain(
                        &mut self.e,
                        a,
                        &[Step {
                            ew: combine,
                            other: Some(part),
                            swapped: false,
                            third: None,
                        }],
                    )
                    .map_err(err)?,
                });
                c += w;
            }
            let mut v = acc.ok_or_else(|| err("a reduction of no columns"))?;
            if let Some(k) = mean {
                // 1/n splatted into a register where the machine can, else
                // a column of it read from home.
                let scale = match ops::splat_file(&self.e, Ew::Mul) {
                    Some(file) => ops::splat(&mut self.e, file, k).map_err(err)?,
                    None => Val::Mem(self.constant_column(k, h)?),
                };
                v = ops::chain(
                    &mut self.e,
                    v,
                    &[Step {
                        ew: Ew::Mul,
                        other: Some(scale),
                        swapped: false,
                        third: None,
                    }],
                )
                .map_err(err)?;
            }
            let to = Loc {
                place: Place::Mem(dst_mem),
                dtype: dst.dtype,
            };
            let d = dst.tile(at + r, 0, h, 1);
            self.e.to_loc(v, to, Some(&d), Pad::Dense).map_err(err)?;
            r += h;
        }
        Ok(())
    }

    /// The reduction of the whole-register chunks of rows `r..r + h` of
    /// `src` (at least two, on chip, with a register form): loaded, combined
    /// by `combine` in registers into a few partial results, those combined
    /// pairwise, and reduced across the lanes by one instruction. None when
    /// that does not apply.
    #[allow(clippy::too_many_arguments)]
    fn reduce_whole_chunks(
        &mut self,
        f: &Form,
        kind: ReduceKind,
        src: &super::Home,
        r: i64,
        h: i64,
        combine: Ew,
        (gr, gc): (i64, i64),
    ) -> Result<Option<Val>, LowerError> {
        let full = src.cols / gc;
        if full < 2 || src.mem == self.info.home || !matches!(f.src.place, Place::Reg(_)) {
            return Ok(None);
        }
        let Place::Reg(file) = f.src.place else {
            return Ok(None);
        };
        // At most a quarter of the file's registers hold partial results
        // (chunk k goes into partial k mod that), so a row of any width
        // is reduced within the file; they are combined as a tree at the end.
        let count = self.e.m.regfiles[file.index()].count.value;
        let partials = (count / 4).clamp(2, 8) as usize;
        let cp = self.e.checkpoint();
        let attempt = (|| -> Result<Val, String> {
            let mut regs: Vec<RegTile> = Vec::with_capacity(partials);
            for k in 0..full {
                let x = match self.e.to_loc(
                    Val::Mem(src.tile(r, k * gc, h, gc)),
                    f.src,
                    None,
                    Pad::Dense,
                )? {
                    Val::Reg(x) => x,
                    Val::Mem(_) | Val::Splat(_) => {
                        return Err("a chunk did not land in a register".to_owned());
                    }
                };
                let slot = k as usize % partials;
                if slot < regs.len() {
                    regs[slot] = ops::reg_binary(&mut self.e, combine, &regs[slot], &x)?;
                } else {
                    regs.push(x);
                }
            }
            while regs.len() > 1 {
                let mut next = Vec::with_capacity(regs.len().div_ceil(2));
                let mut it = regs.into_iter();
                while let Some(a) = it.next() {
                    next.push(match it.next() {
                        Some(b) => ops::reg_binary(&mut self.e, combine, &a, &b)?,
                        None => a,
                    });
                }
                regs = next;
            }
            let x = regs.pop().ok_or("no chunk")?;
            let v = self.reduce_reg(f, kind, &x, h, gc, (gr, gc))?;
            match v {
                // Scalars do not move like tiles: broadcast into the operand's file.
                Val::Reg(s) if f.shape == Shape::Scalar => self.splat(s, file, gc),
                v => Ok(v),
            }
        })();
        match attempt {
            Ok(v) => Ok(Some(v)),
            Err(_) => {
                self.e.rollback(cp);
                Ok(None)
            }
        }
    }

    /// Register `x` (`h` x `w`) reduced across its lanes by form `f`, the
    /// result in every lane of a register (`h` x `wb` used): written so by
    /// the instruction where it can, else reduced to a column and broadcast.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce_reg_broadcast(
        &mut self,
        f: &Form,
        kind: ReduceKind,
        x: &RegTile,
        h: i64,
        w: i64,
        (gr, gc): (i64, i64),
        wb: i64,
    ) -> Result<RegTile, LowerError> {
        if let Ok(r) = self.reduce_into(f, kind, x, (h, w), gr, &[wb, gc]) {
            return Ok(RegTile { cols: wb, ..r });
        }
        let Val::Reg(col) = self.reduce_reg(f, kind, x, h, w, (gr, gc)).map_err(err)? else {
            return Err(err("a row reduction left no register"));
        };
        // Into a scalar register (pim-dram's `vredsum`): broadcast from there.
        if col.file != x.file && self.e.m.regfiles[col.file.index()].shape.is_empty() {
            let (_, gc) = self.e.granule(x.file);
            return ops::broadcast_scalar(&mut self.e, &col, x.file, &[gc, wb]).map_err(err);
        }
        ops::broadcast_lanes(&mut self.e, &col, (gr, gc), h, wb).map_err(err)
    }

    /// Register `x` (`h` x `w`) reduced across its lanes by form `f`.
    pub(super) fn reduce_reg(
        &mut self,
        f: &Form,
        kind: ReduceKind,
        x: &RegTile,
        h: i64,
        w: i64,
        (gr, gc): (i64, i64),
    ) -> Result<Val, String> {
        let r = self.reduce_into(f, kind, x, (h, w), gr, &[1, w, gc])?;
        Ok(Val::Reg(RegTile { cols: 1, ..r }))
    }

    /// Register `x` (`h` x `w`) reduced across its lanes by form `f` into a
    /// new register, its result as wide as the first of `cols` the
    /// instruction takes (one column, or broadcast along the lanes).
    fn reduce_into(
        &mut self,
        f: &Form,
        kind: ReduceKind,
        x: &RegTile,
        (h, w): (i64, i64),
        gr: i64,
        cols: &[i64],
    ) -> Result<RegTile, String> {
        let Place::Reg(dfile) = f.dst.place else {
            return Err("not a register form".to_owned());
        };
        let tries: Vec<Try> = match f.shape {
            Shape::Rows => [h, gr]
                .into_iter()
                .flat_map(|rows| {
                    cols.iter()
                        .map(move |&dc| (vec![rows, dc], vec![rows, w], vec![rows, dc, w], false))
                })
                .collect(),
            Shape::Lanes => cols
                .iter()
                .filter(|&&dc| dc != 1 || w == 1)
                .map(|&dc| (vec![dc], vec![w], vec![dc, w], false))
                .collect(),
            // One row into a scalar register.
            Shape::Scalar if h == 1 => vec![(Vec::new(), vec![w], vec![w], false)],
            _ => return Err("not a register row reduction".to_owned()),
        };
        let d = self.e.vreg(dfile);
        let mut last = "no shape fits".to_owned();
        for (ds, as_, ext, _) in tries {
            let (dt, dr) = super::emit::Emitter::reg_tensor(dfile, f.dst.dtype, d, ds);
            let (at, ar) = Val::Reg(x.clone()).tensor(as_);
            match self.e.emit(
                &red_op(reduce_op(kind), f.shape, dt, at, ext),
                &[dr, ar],
                Some(f.inst),
            ) {
                Ok(_) => {
                    return Ok(RegTile {
                        file: dfile,
                        dtype: f.dst.dtype,
                        reg: d,
                        rows: h,
                        cols: w,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The whole of `src` (at home) brought on chip in one transfer (or,
    /// with `pieces`, in pieces of columns where one transfer does not take
    /// a whole row: 1025 scores against pim-dram's 1024-element transfers)
    /// and waited for, when run staging is on and it takes at most a
    /// quarter of the memory tiles land in: the row blocks then read it
    /// there instead of each waiting for its own transfer from home.
    fn stage_whole(
        &mut self,
        src: &super::Home,
        pieces: bool,
    ) -> Result<Option<super::Home>, LowerError> {
        if !self.opts.stage_runs || src.mem != self.info.home || src.rows == 0 || src.cols == 0 {
            return Ok(None);
        }
        let land = self.landing_of(src.dtype)?;
        let Place::Mem(lm) = land.place else {
            return Ok(None);
        };
        let cap = self.e.m.memories[lm.index()].size.value.max(0) as u64;
        let bytes = (src.rows * src.pitch) as u64 * land.dtype.bytes();
        if bytes > cap / 4 {
            return Ok(None);
        }
        let cp = self.e.checkpoint();
        let buf = self
            .e
            .buffer_padded(lm, land.dtype, src.rows, src.cols, Pad::Aligned);
        let whole = src.tile(0, 0, src.rows, src.cols);
        let moved = if pieces {
            self.stage_pieces(&whole, land, &buf)
                .map(|(_, pending)| pending)
        } else {
            match self.e.to_loc(Val::Mem(whole), land, Some(&buf), Pad::Dense) {
                Ok(Val::Mem(t)) => Ok(vec![t]),
                _ => Err(err("not in one transfer")),
            }
        };
        match moved {
            Ok(pending) => {
                for t in &pending {
                    self.e.ready(t).map_err(err)?;
                }
                Ok(Some(super::Home {
                    mem: lm,
                    base: buf.base,
                    dtype: land.dtype,
                    rows: src.rows,
                    cols: src.cols,
                    pitch: buf.pitch,
                    batch: None,
                    first: 0,
                    columns: None,
                }))
            }
            Err(_) => {
                // Not even in pieces: read from home as before.
                self.e.rollback(cp);
                Ok(None)
            }
        }
    }

    /// Scalar register `s` broadcast into a register of `file` (`d[i] = s`).
    fn splat(
        &mut self,
        s: RegTile,
        file: isa_specs::model::RegFileId,
        gc: i64,
    ) -> Result<Val, String> {
        let r = ops::broadcast_scalar(&mut self.e, &s, file, &[1, gc])?;
        Ok(Val::Reg(RegTile { cols: 1, ..r }))
    }

    /// A `rows` x 1 column of `k` at home (constant data, cached).
    fn constant_column(&mut self, k: f64, rows: i64) -> Result<MemTile, LowerError> {
        let key = PackKey::Column {
            bits: k.to_bits(),
            rows,
        };
        if let Some(t) = self.pool.packed.get(&key) {
            return Ok(t.clone());
        }
        let dt = self.layout.act;
        let h = self.padded(&vec![k; rows as usize], rows, 1, dt);
        let t = h.tile(0, 0, rows, 1);
        self.pool.packed.insert(key, t.clone());
        Ok(t)
    }

    /// A `rows` x `cols` block of the reduction's identity at home (cached).
    fn identity_block(&mut self, kind: ReduceKind, rows: i64, cols: i64) -> MemTile {
        let key = PackKey::Identity { kind, rows, cols };
        if let Some(t) = self.pool.packed.get(&key) {
            return t.clone();
        }
        let dt = self.layout.act;
        let h = self.padded(
            &vec![identity(kind); (rows * cols) as usize],
            rows,
            cols,
            dt,
        );
        let t = h.tile(0, 0, rows, cols);
        self.pool.packed.insert(key, t.clone());
        t
    }

    /// The reduction of each row of `tile` (`h` x `w` at home), as an `h` x 1 value.
    fn reduce_chunk(
        &mut self,
        f: &Form,
        kind: ReduceKind,
        tile: MemTile,
        gr: i64,
        gc: i64,
    ) -> Result<Val, String> {
        let (h, w) = (tile.rows, tile.cols);
        // Shapes to try: (result, operand, extents, operand padded to whole registers).
        let tries: Vec<Try> = match f.shape {
            Shape::MemRows => vec![(vec![h], vec![h, w], vec![h, w], false)],
            Shape::Rows => {
                let mut v = Vec::new();
                for rows in [h, gr] {
                    for dc in [1, w, gc] {
                        v.push((vec![rows, dc], vec![rows, w], vec![rows, dc, w], false));
                    }
                }
                v.push((vec![gr, gc], vec![gr, gc], vec![gr, gc, gc], w < gc));
                v
            }
            Shape::Lanes => vec![
                (vec![w], vec![w], vec![w, w], false),
                (vec![gc], vec![w], vec![gc, w], false),
                (vec![gc], vec![gc], vec![gc, gc], w < gc),
            ],
            Shape::Scalar => vec![
                (vec![], vec![w], vec![w], false),
                (vec![], vec![gc], vec![gc], w < gc),
            ],
        };
        let mut last = "no shape fits".to_owned();
        for (ds, as_, ext, padded) in tries {
            let cp = self.e.checkpoint();
            match self.emit_chunk(f, kind, &tile, &ds, &as_, ext, padded, gc) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    self.e.rollback(cp);
                    last = e;
                }
            }
        }
        Err(last)
    }

    #[allow(clippy::too_many_arguments)]
    fn emit_chunk(
        &mut self,
        f: &Form,
        kind: ReduceKind,
        tile: &MemTile,
        ds: &[i64],
        as_: &[i64],
        ext: Vec<i64>,
        padded: bool,
        gc: i64,
    ) -> Result<Val, String> {
        let (h, w) = (tile.rows, tile.cols);
        let op = reduce_op(kind);
        match f.src.place {
            Place::Mem(_) => {
                let a = match self
                    .e
                    .to_loc(Val::Mem(tile.clone()), f.src, None, Pad::Dense)?
                {
                    Val::Mem(t) => t,
                    Val::Reg(_) | Val::Splat(_) => {
                        return Err("a tile landed in a register".to_owned());
                    }
                };
                self.e.ready(&a)?;
                let Place::Mem(dm) = f.dst.place else {
                    return Err("not a memory form".to_owned());
                };
                let d = self.e.buffer(dm, f.dst.dtype, h, 1);
                let (dt, dr) = super::emit::Emitter::mem_tensor(&d, ds.to_vec());
                let (at, ar) = super::emit::Emitter::mem_tensor(&a, as_.to_vec());
                self.e
                    .emit(&red_op(op, f.shape, dt, at, ext), &[dr, ar], Some(f.inst))?;
                Ok(Val::Mem(d))
            }
            Place::Reg(file) => {
                let land = ops::landing(&self.e, tile.loc(), f.src)
                    .ok_or_else(|| "no path from the home memory to the registers".to_owned())?;
                let Place::Mem(lm) = land.place else {
                    return Err("no landing memory".to_owned());
                };
                let staged = self.e.buffer_padded(lm, land.dtype, h, w, Pad::Registers);
                if padded {
                    // The identity in every lane first, then the chunk over it.
                    let full = staged.view(0, 0, h, gc.min(staged.pitch));
                    let id = self.identity_block(kind, h, full.cols);
                    let filled = self.e.to_loc(Val::Mem(id), land, Some(&full), Pad::Dense)?;
                    if let Val::Mem(t) = &filled {
                        self.e.ready(t)?;
                    }
                }
                let data = self.e.to_loc(
                    Val::Mem(tile.clone()),
                    land,
                    Some(&staged.view(0, 0, h, w)),
                    Pad::Dense,
                )?;
                if let Val::Mem(t) = &data {
                    self.e.ready(t)?;
                }
                let cols = if padded { gc.min(staged.pitch) } else { w };
                let x = self.e.to_loc(
                    Val::Mem(staged.view(0, 0, h, cols)),
                    f.src,
                    None,
                    Pad::Dense,
                )?;
                let d = self.e.vreg(file);
                let dfile = match f.dst.place {
                    Place::Reg(df) => df,
                    Place::Mem(_) => return Err("not a register form".to_owned()),
                };
                let d = if dfile == file { d } else { self.e.vreg(dfile) };
                let (dt, dr) = super::emit::Emitter::reg_tensor(dfile, f.dst.dtype, d, ds.to_vec());
                let (at, ar) = x.tensor(as_.to_vec());
                self.e
                    .emit(&red_op(op, f.shape, dt, at, ext), &[dr, ar], Some(f.inst))?;
                let v = RegTile {
                    file: dfile,
                    dtype: f.dst.dtype,
                    reg: d,
                    rows: h,
                    cols: 1,
                };
                if f.shape == Shape::Scalar {
                    // Scalars do not move like tiles: broadcast into the operand's file.
                    return self.splat(v, file, gc);
                }
                Ok(Val::Reg(v))
            }
        }
    }
}
