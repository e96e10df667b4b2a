//! Products of one row by a matrix whose columns lie at home as the rows a
//! computing memory reads (`Options::in_place_rows` and
//! `Options::append_in_place`).
//!
//! A decode step's context is `p · V` per head: one row of probabilities
//! by the value cache, `[T, D]`. A memory that computes one dot product
//! per row it holds ([`Lowerer::rows_in_place`], pim-dram's `mac`: one
//! result per bank, from one DRAM row each) computes it where the cache
//! lies if the cache is stored transposed, each channel `j` a stored row
//! of `T` values. So a join (`Concat`) of a cache input with one new row
//! per batch, read only by such products, is laid out that way
//! ([`Lowerer::in_place_column_homes`]):
//!
//! - each batch's `D` stored rows start where the instruction's rows do
//!   (aligned), `pitch` apart;
//! - a stored row is cut into chunks of as many columns as one instruction
//!   reduces, a whole block of the instruction's rows apart, so one
//!   instruction per chunk takes all `D` channels of a batch;
//! - `skip` empty columns come first, so that the column the step appends
//!   starts a transfer: the append is one transfer of a column (`D` rows
//!   of one element) per batch ([`Lowerer::append_columns`]).
//!
//! The runner writes the cache input straight into its columns
//! (`program::Columns`). The product ([`Lowerer::dots_in_columns`]) stages
//! `p` per batch in the instruction's vector type with zeros in the empty
//! columns and past the last, and runs one instruction per chunk into the
//! same accumulators. Stored columns past the cache's are never written:
//! the memory is cleared when the program is loaded, and they meet zeros.

use super::emit::{MemTile, Pad, RegTile, Val};
use super::gemv::RowsInPlace;
use super::machine::{Place, cdiv, rup};
use super::ops::{self, Ew};
use super::{Home, LowerError, Lowerer, Operand, err};
use crate::ir::{Node, Op, ValueId};
use isa_specs::program::Columns;

/// The instruction form and chunking the columns layout uses
/// ([`Lowerer::column_form`]).
pub(super) struct ColumnForm {
    /// The in-place contraction, taking `chunk` columns.
    pub(super) ip: RowsInPlace,
    /// The reduction lengths it takes are multiples of this.
    pub(super) quantum: i64,
    /// Columns in a chunk: the longest reduction it takes within a row.
    pub(super) chunk: i64,
}

impl Lowerer<'_> {
    /// The contraction reading rows where they lie at home
    /// ([`Self::rows_in_place`]), the shortest reduction it takes (all it
    /// takes are multiples of it) and the longest within one row pitch.
    pub(super) fn column_form(&self) -> Option<ColumnForm> {
        use super::ops::Role;
        // Only a machine computing in its home memory has one.
        let home = Place::Mem(self.info.home);
        let candidate = self.fusion.contractions.iter().any(|c| {
            c.t_dims == [Role::N]
                && c.a_dims == [Role::K]
                && c.b_dims == [Role::N, Role::K]
                && c.locs(&self.e).is_some_and(|l| l[2].place == home)
        });
        if !candidate {
            return None;
        }
        // The pitch is the instruction's: probe lengths up to a row.
        let first = (1..=4096).find_map(|k| self.rows_in_place(k).map(|ip| ip.pitch))?;
        let quantum = (1..=first).find(|&k| self.rows_in_place(k).is_some())?;
        let chunk = (1..=first / quantum)
            .rev()
            .map(|m| m * quantum)
            .find(|&k| self.rows_in_place(k).is_some())?;
        let ip = self.rows_in_place(chunk)?;
        // Accumulated over chunks, so the instruction must add to its result.
        (!ip.form.set).then_some(ColumnForm { ip, quantum, chunk })
    }

    /// Homes stored transposed in chunks (see the module doc) for joins of
    /// a cache input and one new row per batch, read only by products of
    /// one row by the join: the join's, and the cache input's (its
    /// columns of the join's), which the runner writes in place.
    pub(super) fn in_place_column_homes(&mut self) {
        let g = self.g;
        // The layout appends in place: off with either option.
        if !self.opts.in_place_rows || !self.opts.append_in_place {
            return;
        }
        let mut form = None;
        for cn in &g.nodes {
            let v = cn.outputs[0];
            let s = &g.ty(v).shape;
            let r = s.len();
            if r < 2
                || cn.op != (Op::Concat { axis: r - 2 })
                || !g.ty(v).elem.is_float()
                || self.layout.homes.contains_key(&v)
                || cn.inputs.len() != 2
            {
                continue;
            }
            let (cache, new) = (cn.inputs[0], cn.inputs[1]);
            let readers: Vec<&Node> = g.nodes.iter().filter(|n| n.inputs.contains(&v)).collect();
            let one_row_by_v = |n: &&Node| {
                let sa = &g.ty(n.inputs[0]).shape;
                n.op == Op::MatMul
                    && n.inputs[1] == v
                    && n.inputs[0] != v
                    && !g.constants.contains_key(&n.inputs[0])
                    && sa.len() == r
                    && sa[r - 2] == 1
                    && sa[..r - 2] == s[..r - 2]
            };
            if readers.is_empty()
                || !readers.iter().all(one_row_by_v)
                || g.ty(new).shape[r - 2] != 1
                || g.constants.contains_key(&new)
                || !self.joined_inputs(cn).contains(&cache)
            {
                continue;
            }
            if form.is_none() {
                form = self.column_form();
            }
            let Some(cf) = &form else {
                return;
            };
            let (t, d) = (s[r - 2] as i64, s[r - 1] as i64);
            let batches = s[..r - 2].iter().product::<usize>() as i64;
            let ip = &cf.ip;
            let align = self.aligned_elems(ip.dtype);
            if cf.chunk % align != 0 || d > ip.rows {
                continue;
            }
            // The appended column (`t - 1`) starts a transfer.
            let skip = (align - (t - 1) % align) % align;
            let chunks = cdiv(t + skip, cf.chunk);
            let chunk_stride = rup(d, ip.rows) * ip.pitch;
            let batch_stride = chunks * chunk_stride;
            let addr =
                self.alloc_home((batches * batch_stride) as u64 * ip.dtype.bytes(), ip.align);
            let home = Home {
                mem: self.info.home,
                base: super::emit::Base::Fixed(addr),
                dtype: ip.dtype,
                rows: batches * d,
                cols: t,
                pitch: ip.pitch,
                batch: (batches > 1).then_some((d, batch_stride)),
                first: 0,
                columns: Some(Columns {
                    skip: skip as u64,
                    chunk: cf.chunk as u64,
                    stride: chunk_stride as u64,
                }),
            };
            self.layout.homes.insert(
                cache,
                Home {
                    cols: t - 1,
                    ..home.clone()
                },
            );
            self.layout.homes.insert(v, home);
        }
    }

    /// `Concat` into a home stored transposed ([`Self::in_place_column_homes`]):
    /// the cache input is in place already; the new row of each batch is
    /// brought on chip in the home's type and stored as one column.
    pub(super) fn append_columns(&mut self, n: &Node, dst: &Home) -> Result<(), LowerError> {
        let g = self.g;
        let new = n.inputs[1];
        let s = &g.ty(n.outputs[0]).shape;
        let r = s.len();
        let (t, d) = (s[r - 2] as i64, s[r - 1] as i64);
        let batches = s[..r - 2].iter().product::<usize>() as i64;
        let src = self.home_of(new)?;
        let land = self.landing_of(src.dtype)?;
        let into = self.landing_of(dst.dtype)?;
        let Place::Mem(lm) = land.place else {
            return Err(err("tiles from home land in no memory"));
        };
        for bi in 0..batches {
            let row = if src.mem == lm {
                src.tile(bi, 0, 1, d)
            } else {
                let buf = self.e.buffer_padded(lm, land.dtype, 1, d, Pad::Aligned);
                let (tile, pending) = self.stage_pieces(&src.tile(bi, 0, 1, d), land, &buf)?;
                for p in &pending {
                    self.e.ready(p).map_err(err)?;
                }
                tile
            };
            let Place::Mem(im) = into.place else {
                return Err(err("tiles from home land in no memory"));
            };
            let col = self.e.buffer_padded(im, into.dtype, 1, d, Pad::Registers);
            let col = col.view(0, 0, 1, d);
            if row.loc() != into || row != col {
                self.e
                    .to_loc(Val::Mem(row), into, Some(&col), Pad::Dense)
                    .map_err(err)?;
            }
            // The dense row is a column of `d` one-element rows.
            let as_col = MemTile {
                rows: d,
                cols: 1,
                pitch: 1,
                ..col
            };
            let to = dst.tile(bi * d, t - 1, d, 1);
            self.e
                .to_loc(Val::Mem(as_col), to.loc(), Some(&to), Pad::Dense)
                .map_err(|e| err(format!("appending a column to the values in place: {e}")))?;
        }
        Ok(())
    }

    /// `out = p · V` where `V`'s home is stored transposed in chunks
    /// ([`Self::in_place_column_homes`]): per batch, `p` staged in the
    /// instruction's vector type (zeros in the empty columns and past the
    /// last), one instruction per chunk into the same accumulators, read
    /// out into a row on chip that takes the region's epilogue.
    pub(super) fn dots_in_columns(
        &mut self,
        root: &Node,
        plan: &[(Ew, Option<Operand>, bool)],
        out: ValueId,
        out_home: &Home,
    ) -> Result<(), LowerError> {
        let g = self.g;
        self.cache.new_region();
        let (a, v) = (root.inputs[0], root.inputs[1]);
        let s = g.ty(v).shape.clone();
        let r = s.len();
        let (t, d) = (s[r - 2] as i64, s[r - 1] as i64);
        let batches = s[..r - 2].iter().product::<usize>() as i64;
        let vh = self.home_of(v)?;
        let xh = self.home_of(a)?;
        let cs = vh
            .columns
            .ok_or_else(|| err("the values are not stored transposed"))?;
        let cf = self
            .column_form()
            .filter(|cf| cf.chunk as u64 == cs.chunk && cf.ip.dtype == vh.dtype)
            .ok_or_else(|| err("no instruction reads the values where they lie"))?;
        let (ip, form) = (&cf.ip, &cf.ip.form);
        self.pool.read_in_place.insert(v);
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
        let into = self.landing_of(vh.dtype)?;
        let Place::Mem(im) = into.place else {
            return Err(err("tiles from home land in no memory"));
        };
        let (skip, chunk) = (cs.skip as i64, cs.chunk);
        let chunk = chunk as i64;
        let used = skip + t;
        let chunks = cdiv(used, chunk);
        // Zeros up to the last chunk's reduction, and a register's slack
        // past it for the stores that write whole registers.
        let (_, gc) = self.e.granule(
            self.dots_file()
                .ok_or_else(|| err("no register file for the epilogue"))?,
        );
        let tail = rup(used, cf.quantum) - used;
        let stage = self
            .e
            .buffer_padded(im, vh.dtype, 1, chunks * chunk + gc, Pad::Aligned);
        let ybuf = self
            .e
            .buffer_padded(lm, land.dtype, 1, rup(d, ip.rows), Pad::Registers);
        let zeros = |l: &mut Self, cols: i64, at: i64| -> Result<(), LowerError> {
            if cols == 0 {
                return Ok(());
            }
            let z = l.fill_block(0.0, 1, cols, vh.dtype);
            l.e.to_loc(
                Val::Mem(z),
                into,
                Some(&stage.view(0, at, 1, cols)),
                Pad::Dense,
            )
            .map_err(err)?;
            Ok(())
        };
        for bi in 0..batches {
            let xt = if xh.mem == lm {
                xh.tile(bi, 0, 1, t)
            } else {
                let buf = self.e.buffer_padded(lm, land.dtype, 1, t, Pad::Aligned);
                let (tile, pending) = self.stage_pieces(&xh.tile(bi, 0, 1, t), land, &buf)?;
                for p in &pending {
                    self.e.ready(p).map_err(err)?;
                }
                tile
            };
            zeros(self, skip, 0)?;
            self.e
                .to_loc(
                    Val::Mem(xt),
                    into,
                    Some(&stage.view(0, skip, 1, t)),
                    Pad::Dense,
                )
                .map_err(err)?;
            // After `p`: its last stores may write whole registers past it.
            zeros(self, tail, used)?;
            let acc = Val::Reg(RegTile {
                file: acc_file,
                dtype: locs[0].dtype,
                reg: self.e.vreg(acc_file),
                rows: 1,
                cols: ip.rows,
            });
            for c in 0..chunks {
                let k = rup((used - c * chunk).min(chunk), cf.quantum);
                let mnk = (1, ip.rows, k);
                let t_shape = ops::Contraction::shape(&form.t_dims, mnk);
                if c == 0 {
                    self.zero(&acc, &t_shape, locs[0])?;
                }
                let x = self
                    .e
                    .to_loc(
                        Val::Mem(stage.view(0, c * chunk, 1, k)),
                        locs[1],
                        None,
                        Pad::Dense,
                    )
                    .map_err(err)?;
                let w = Val::Mem(vh.chunk_tile(bi * d, c, ip.rows, k));
                let (ts, refs): (Vec<_>, Vec<_>) = [
                    acc.tensor(t_shape),
                    x.tensor(ops::Contraction::shape(&form.a_dims, mnk)),
                    w.tensor(ops::Contraction::shape(&form.b_dims, mnk)),
                ]
                .into_iter()
                .unzip();
                let op = form
                    .op(&self.e, ts, mnk)
                    .ok_or_else(|| err("contraction pattern"))?;
                self.e
                    .emit(&op, &refs, Some(form.inst))
                    .map_err(|e| err(format!("in-place columns: {e}")))?;
            }
            let run = ybuf.view(0, 0, 1, ip.rows);
            self.e
                .to_loc(acc, ybuf.loc(), Some(&run), Pad::Dense)
                .map_err(err)?;
            let mut c0 = 0;
            while c0 < d {
                let w = gc.min(d - c0);
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
}
