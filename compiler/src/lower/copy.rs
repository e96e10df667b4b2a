//! Data movement between tensors at home: `Slice` (and `Split`, which is
//! slices) gathers rows of its input, `Concat` places each input's rows in
//! its result. Rows are moved through on-chip memory by the machine's copy
//! instructions, a whole block at a time where the rows are evenly spaced,
//! else row by row.

use super::emit::{MemTile, Pad, Val};
use super::machine::{Loc, Place};
use super::window::Windows;
use super::{Home, LowerError, Lowerer, err};
use crate::ir::{Node, Op};

/// Row-major strides of the leading dimensions of a shape (the rows of its matrix view).
fn row_strides(shape: &[usize]) -> Vec<i64> {
    let lead = &shape[..shape.len().saturating_sub(1)];
    let mut s = vec![1i64; lead.len()];
    for d in (0..lead.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * lead[d + 1] as i64;
    }
    s
}

/// Every multi-index of the leading dimensions of `shape`, in row order.
fn row_indices(shape: &[usize]) -> Vec<Vec<i64>> {
    let lead = &shape[..shape.len().saturating_sub(1)];
    let n: usize = lead.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0i64; lead.len()];
    for _ in 0..n {
        out.push(idx.clone());
        for d in (0..lead.len()).rev() {
            idx[d] += 1;
            if idx[d] < lead[d] as i64 {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Instructions beyond which a block of rows from home is not transferred
/// straight into its destination ([`Lowerer::load_rows_into`]).
const DIRECT_MOST: usize = 8;

/// The step of an evenly spaced, increasing run (a single row counts as step 1).
fn even_step(rows: &[i64]) -> Option<i64> {
    match rows {
        [] | [_] => Some(1),
        [a, b, ..] => {
            let s = b - a;
            (s > 0 && rows.windows(2).all(|w| w[1] - w[0] == s)).then_some(s)
        }
    }
}

/// `pairs` `(from, to)` cut into blocks of at most `most`: runs whose
/// sources and destinations are evenly spaced (one transfer each way) are
/// kept whole and never straddle a break in the spacing; rows between runs
/// go together (a transfer per row, one wait per block).
fn runs(pairs: &[(i64, i64)], most: usize) -> Vec<&[(i64, i64)]> {
    // The length of the evenly spaced run from `i`.
    let run = |i: usize| {
        let mut j = i + 1;
        if j < pairs.len() {
            let (sf, st) = (pairs[j].0 - pairs[i].0, pairs[j].1 - pairs[i].1);
            if sf > 0 && st > 0 {
                while j < pairs.len()
                    && j - i < most
                    && pairs[j].0 - pairs[j - 1].0 == sf
                    && pairs[j].1 - pairs[j - 1].1 == st
                {
                    j += 1;
                }
            }
        }
        j - i
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < pairs.len() {
        let mut j = i + run(i);
        if j - i < 3 {
            while j < pairs.len() && j - i < most && run(j) < 3 {
                j += 1;
            }
        }
        out.push(&pairs[i..j]);
        i = j;
    }
    out
}

impl Lowerer<'_> {
    /// `Slice`: output row `i` is input row `f(i)`, from column `starts[last]`.
    pub(super) fn slice(
        &mut self,
        n: &Node,
        starts: &[i64],
        steps: &[i64],
    ) -> Result<(), LowerError> {
        let g = self.g;
        let (x, out) = (n.inputs[0], n.outputs[0]);
        let (xs, os) = (g.ty(x).shape.clone(), g.ty(out).shape.clone());
        if os.iter().product::<usize>() == 0 {
            return Ok(());
        }
        let r = xs.len();
        if r == 0 || steps[r - 1] != 1 {
            return Err(Self::node_err(
                n,
                "a slice with a step along the last dimension is not supported yet",
            ));
        }
        let st = row_strides(&xs);
        let pairs: Vec<(i64, i64)> = row_indices(&os)
            .into_iter()
            .enumerate()
            .map(|(i, idx)| {
                let src = idx
                    .iter()
                    .enumerate()
                    .map(|(d, k)| (starts[d] + k * steps[d]) * st[d])
                    .sum();
                (src, i as i64)
            })
            .collect();
        let (src, dst) = (self.home_of(x)?, self.home_of(out)?);
        self.copy_rows(
            &src,
            &dst,
            &pairs,
            starts[r - 1],
            0,
            *os.last().unwrap_or(&1) as i64,
        )
    }

    /// A transpose that keeps the last dimension: output row `i` is the input
    /// row at the permuted index.
    pub(super) fn permute_rows(&mut self, n: &Node, perm: &[usize]) -> Result<(), LowerError> {
        let g = self.g;
        let (x, out) = (n.inputs[0], n.outputs[0]);
        let (xs, os) = (g.ty(x).shape.clone(), g.ty(out).shape.clone());
        if os.iter().product::<usize>() == 0 {
            return Ok(());
        }
        let st = row_strides(&xs);
        let pairs: Vec<(i64, i64)> = row_indices(&os)
            .into_iter()
            .enumerate()
            .map(|(i, idx)| {
                // Output dimension d is input dimension perm[d].
                let src = idx.iter().enumerate().map(|(d, k)| k * st[perm[d]]).sum();
                (src, i as i64)
            })
            .collect();
        let dst = self.home_of(out)?;
        let w = *os.last().unwrap_or(&1) as i64;
        if let Some(sl) = self.layout.sliced.get(&x).cloned() {
            // A slice of columns not lowered: its input as rows of `w`
            // where its rows are dense; else the slice is copied now.
            let whole = self.home_of(sl.input)?;
            if whole.pitch == whole.cols && whole.batch.is_none() {
                let src = Home {
                    rows: whole.rows * sl.per_row,
                    cols: w,
                    pitch: w,
                    ..whole
                };
                let pairs: Vec<(i64, i64)> = pairs
                    .iter()
                    .map(|&(f, t)| ((f / sl.pieces) * sl.per_row + sl.first + f % sl.pieces, t))
                    .collect();
                return self.copy_rows(&src, &dst, &pairs, 0, 0, w);
            }
            let slice = &g.nodes[sl.nodes[0]];
            let Op::Slice { starts, steps, .. } = &slice.op else {
                return Err(err("a sliced transpose without its slice"));
            };
            self.slice(slice, starts, steps)?;
        }
        let src = self.home_of(x)?;
        self.copy_rows(&src, &dst, &pairs, 0, 0, w)
    }

    /// A view whose rows differ from its input's padded ones: the elements
    /// copied to their place in the view's own layout, in runs of
    /// `gcd(cols, cols')` columns (a run never crosses a row of either).
    pub(super) fn relayout(&mut self, n: &Node) -> Result<(), LowerError> {
        let (x, out) = (n.inputs[0], n.outputs[0]);
        // The input's root holds the bytes (views of views share it).
        let (src, dst) = (self.home_of(x)?, self.home_of(out)?);
        let (c, c2) = (src.cols, dst.cols);
        if src.rows * c == 0 {
            return Ok(());
        }
        // A column (one element per row, as a pooling leaves `[C, 1]`) into
        // rows: each row of the result is a transpose of a run of the
        // column, through the machine's transposing copy where it has one,
        // instead of every element shifted alone (PP-LCNet's flatten of
        // 1280 pooled channels took 389 k cycles on vliw-systolic).
        if c == 1 && c2 > 1 && src.rows == dst.rows * c2 {
            let attempt = self.attempt();
            match self.transpose_tiles(n, &src, &dst, dst.rows, c2, 1) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(_) => self.undo(attempt),
            }
        }
        let run = super::machine::gcd(c, c2).max(1);
        let mut groups: std::collections::BTreeMap<(i64, i64), Vec<(i64, i64)>> =
            Default::default();
        for r in 0..src.rows {
            for q in 0..c / run {
                let e = r * c + q * run;
                groups
                    .entry((q * run, e % c2))
                    .or_default()
                    .push((r, e / c2));
            }
        }
        for ((from_col, to_col), pairs) in groups {
            self.copy_rows(&src, &dst, &pairs, from_col, to_col, run)?;
        }
        Ok(())
    }

    /// `Im2Col`: the result starts as `fill` (constant data at its home); each
    /// kernel position and output row then copies the input row's elements
    /// the windows read, for all images and channels at once.
    pub(super) fn im2col(
        &mut self,
        n: &Node,
        w: &crate::ir::Window,
        fill: f64,
    ) -> Result<(), LowerError> {
        let g = self.g;
        let (x, out) = (n.inputs[0], n.outputs[0]);
        let xs = g.ty(x).shape.clone();
        let (nc, h, wd) = ((xs[0] * xs[1]) as i64, xs[2] as i64, xs[3] as i64);
        let [oh, ow] = w
            .output([xs[2], xs[3]])
            .ok_or_else(|| Self::node_err(n, "the window does not fit"))?;
        let (oh, ow) = (oh as i64, ow as i64);
        let (src, dst) = (self.home_of(x)?, self.home_of(out)?);
        let bytes = super::encode(
            dst.dtype,
            std::iter::repeat_n(fill, (dst.rows * dst.pitch) as usize),
        );
        self.pool.data.push(isa_specs::program::DataSegment {
            memory: self.e.m.memories[self.home_mem().index()].name.clone(),
            addr: dst.addr()?,
            bytes,
        });
        let (kh, kw) = (w.kernel[0] as i64, w.kernel[1] as i64);
        let (sh, sw) = (w.strides[0] as i64, w.strides[1] as i64);
        let (dh, dw) = (w.dilations[0] as i64, w.dilations[1] as i64);
        let (pt, pl) = (w.pads[0] as i64, w.pads[1] as i64);
        for a in 0..kh {
            for b in 0..kw {
                // Output columns whose input column is inside: iw = ow·sw + b·dw - pl.
                let off = b * dw - pl;
                let lo = if off >= 0 { 0 } else { (-off + sw - 1) / sw };
                let hi = ((wd - 1 - off).div_euclid(sw)).min(ow - 1);
                if lo > hi {
                    continue;
                }
                for i in 0..oh {
                    let ih = i * sh + a * dh - pt;
                    if ih < 0 || ih >= h {
                        continue;
                    }
                    let pairs: Vec<(i64, i64)> = (0..nc)
                        .map(|p| (p * h + ih, p * kh * kw + a * kw + b))
                        .collect();
                    self.copy_rows_strided(
                        &src,
                        &dst,
                        &pairs,
                        lo * sw + off,
                        sw,
                        i * ow + lo,
                        hi - lo + 1,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// `Im2Row`: each window position of each image copies, as blocks of
    /// whole rows of the channels-last input, the pixels its windows read
    /// into its run of columns; the positions outside the input are `fill`
    /// (constant data at the result's home, written only there).
    pub(super) fn im2row(
        &mut self,
        n: &Node,
        w: &crate::ir::Window,
        fill: f64,
    ) -> Result<(), LowerError> {
        let g = self.g;
        let (x, out) = (n.inputs[0], n.outputs[0]);
        let geo = Windows::new(&g.ty(x).shape, w)
            .ok_or_else(|| Self::node_err(n, "the window does not fit"))?;
        let (src, dst) = (self.home_of(x)?, self.home_of(out)?);
        let c = geo.c;
        // The fill: per output row, each run of window positions outside.
        let memory = self.e.m.memories[self.home_mem().index()].name.clone();
        let base = dst.addr()?;
        for r in 0..geo.rows() {
            let mut p = 0;
            while p < geo.positions() {
                if geo.source(r, p).is_some() {
                    p += 1;
                    continue;
                }
                let first = p;
                while p < geo.positions() && geo.source(r, p).is_none() {
                    p += 1;
                }
                let t = dst.tile(r, first * c, 1, (p - first) * c);
                let n = ((p - first) * c) as usize;
                self.pool.data.push(isa_specs::program::DataSegment {
                    memory: memory.clone(),
                    addr: base + t.offset,
                    bytes: super::encode(dst.dtype, std::iter::repeat_n(fill, n)),
                });
            }
        }
        // Each window position: the pixels inside, in evenly spaced runs.
        for p in 0..geo.positions() {
            let pairs: Vec<(i64, i64)> = (0..geo.rows())
                .filter_map(|r| geo.source(r, p).map(|f| (f, r)))
                .collect();
            if !pairs.is_empty() {
                self.copy_rows(&src, &dst, &pairs, 0, p * c, c)?;
            }
        }
        Ok(())
    }

    /// `Concat`: each input's rows go to their place in the result.
    pub(super) fn concat(&mut self, n: &Node, axis: usize) -> Result<(), LowerError> {
        let g = self.g;
        let out = n.outputs[0];
        let os = g.ty(out).shape.clone();
        let r = os.len();
        let ost = row_strides(&os);
        let dst = self.home_of(out)?;
        if dst.columns.is_some() {
            return self.append_columns(n, &dst);
        }
        let base = (dst.mem, dst.base);
        // Rows in batches a whole number of rows apart (a layout a product
        // reads in place, `Lowerer::in_place_dot_homes`): row `t` of the
        // result is row `t % rows + (t / rows) * gap` of a plain matrix.
        let (dst, phys) = match dst.batch {
            Some((rows, stride)) if stride % dst.pitch == 0 && dst.first == 0 => {
                let gap = stride / dst.pitch;
                let all = super::machine::cdiv(dst.rows, rows.max(1)) * gap;
                (
                    Home {
                        rows: all,
                        batch: None,
                        ..dst
                    },
                    Some((rows.max(1), gap)),
                )
            }
            Some(_) => return Err(Self::node_err(n, "joining into rows in uneven batches")),
            None => (dst, None),
        };
        let phys = |t: i64| phys.map_or(t, |(rows, gap)| t % rows + (t / rows) * gap);
        let mut offset = 0i64;
        for &x in &n.inputs {
            let xs = g.ty(x).shape.clone();
            let extent = xs[axis] as i64;
            if xs.iter().product::<usize>() == 0 {
                offset += extent;
                continue;
            }
            if g.constants.contains_key(&x) {
                return Err(Self::node_err(n, "joining a constant is not supported yet"));
            }
            // Written in place by the runner (`Lowerer::in_place_dot_homes`).
            if self.home_of(x).is_ok_and(|h| (h.mem, h.base) == base) {
                offset += extent;
                continue;
            }
            let pairs: Vec<(i64, i64)> = row_indices(&xs)
                .into_iter()
                .enumerate()
                .map(|(j, idx)| {
                    let at = idx
                        .iter()
                        .enumerate()
                        .map(|(d, k)| (k + if d == axis { offset } else { 0 }) * ost[d])
                        .sum();
                    (j as i64, phys(at))
                })
                .collect();
            let col = if axis + 1 == r { offset } else { 0 };
            let src = self.home_of(x)?;
            self.copy_rows(&src, &dst, &pairs, 0, col, *xs.last().unwrap_or(&1) as i64)?;
            offset += extent;
        }
        Ok(())
    }

    pub(super) fn home_of(&self, v: crate::ir::ValueId) -> Result<Home, LowerError> {
        self.layout.homes.get(&v).cloned().ok_or_else(|| {
            err(format!(
                "`{}` has no place at home",
                self.g.values[v.index()].name
            ))
        })
    }

    /// A home tile of `h` rows from row `row`, `step` rows apart.
    pub(super) fn rows_tile(
        &self,
        home: &Home,
        row: i64,
        step: i64,
        c: i64,
        h: i64,
        w: i64,
    ) -> MemTile {
        MemTile {
            offset: ((row * home.pitch + c) as u64) * home.dtype.bytes(),
            rows: h,
            cols: w,
            pitch: home.pitch * step,
            ..home.tile(0, 0, 0, 0)
        }
    }

    /// Copies `cols` columns of rows `(from, to)` of `src` (from column `c0`)
    /// to `dst` (from column `d0`). A column offset off the home memory's
    /// transfer alignment moves an aligned superset and shifts it on chip
    /// element by element (see [`super::scalar`]); the destination's
    /// superset is read first, so the columns around the result survive.
    pub(super) fn copy_rows(
        &mut self,
        src: &Home,
        dst: &Home,
        pairs: &[(i64, i64)],
        c0: i64,
        d0: i64,
        cols: i64,
    ) -> Result<(), LowerError> {
        self.copy_rows_strided(src, dst, pairs, c0, 1, d0, cols)
    }

    /// As [`Self::copy_rows`], reading every `step`-th source column from
    /// `c0` (a step other than 1 always goes through the on-chip shift).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy_rows_strided(
        &mut self,
        src: &Home,
        dst: &Home,
        pairs: &[(i64, i64)],
        c0: i64,
        step: i64,
        d0: i64,
        cols: i64,
    ) -> Result<(), LowerError> {
        let land = self.landing_of(src.dtype)?;
        let Place::Mem(lm) = land.place else {
            return Err(err("no landing memory"));
        };
        let (per, per_d) = (self.aligned_elems(src.dtype), self.aligned_elems(dst.dtype));
        // Every `step`-th element of a row, aligned at both ends: one transfer
        // of `cols` one-element rows `step` apart lands as a contiguous run.
        if step != 1 && c0 % per == 0 && d0 % per_d == 0 {
            for &(f, t) in pairs {
                let from = MemTile {
                    pitch: step,
                    ..self.rows_tile(src, f, 1, c0, cols, 1)
                };
                let buf = self.e.buffer_padded(lm, land.dtype, cols, 1, Pad::Dense);
                let cp = self.e.checkpoint();
                let Ok(v) = self.e.to_loc(Val::Mem(from), land, Some(&buf), Pad::Dense) else {
                    self.e.rollback(cp);
                    return self.copy_rows_shifted(src, dst, pairs, c0, step, d0, cols, land);
                };
                if let Val::Mem(t) = &v {
                    self.e.ready(t).map_err(err)?;
                }
                // The run as one row.
                let row = MemTile {
                    rows: 1,
                    cols,
                    pitch: cols,
                    ..buf
                };
                self.store_rows(&row, dst, &[t], d0, cols)?;
            }
            return Ok(());
        }
        self.copy_rows_shifted(src, dst, pairs, c0, step, d0, cols, land)
    }

    /// [`Self::copy_rows_strided`] through aligned supersets and, where
    /// offsets or the step need it, element moves on chip.
    #[allow(clippy::too_many_arguments)]
    fn copy_rows_shifted(
        &mut self,
        src: &Home,
        dst: &Home,
        pairs: &[(i64, i64)],
        c0: i64,
        step: i64,
        d0: i64,
        cols: i64,
        land: Loc,
    ) -> Result<(), LowerError> {
        let Place::Mem(lm) = land.place else {
            return Err(err("no landing memory"));
        };
        let (per, per_d) = (self.aligned_elems(src.dtype), self.aligned_elems(dst.dtype));
        let shifted = (c0 % per != 0) || (d0 % per_d != 0) || step != 1;
        let mut land = land;
        let moves = if shifted {
            let mv = super::scalar::moves_near(self.info, self.e.m, lm, land.dtype).ok_or_else(|| {
                err(format!(
                    "a column offset ({c0} or {d0}) or step ({step}) the machine's {}-byte-aligned transfers cannot take, and it has no scalar load and store of {} in `{}` to shift the data on chip",
                    self.info.home_align,
                    land.dtype.name(),
                    self.e.m.memories[lm.index()].name
                ))
            })?;
            if self.landing_of(dst.dtype)? != land {
                return Err(err(
                    "source and destination land in different places; cannot shift",
                ));
            }
            // The rows are shifted where the scalar moves are.
            land.place = Place::Mem(mv.mem);
            Some(mv)
        } else {
            None
        };
        let w_max = cols.min((512 / step).max(1));
        let span_max = (w_max - 1) * step + 1 + per;
        // Rows per block: element moves go a few rows at a time; whole rows
        // go in runs as long as a transfer at each end takes them.
        let (most, pad) = if shifted {
            (64, Pad::Aligned)
        } else {
            (1024, Pad::Dense)
        };
        let budget = (self.tile_budget() / 16 / (span_max * land.dtype.bytes() as i64).max(1))
            .clamp(1, most);
        // Rows kept on chip where tiles from home land, in their type: each
        // block is brought straight into them where one transfer takes it
        // (no copy on chip after the transfer). From on chip, also into
        // another type (a copy through the registers converting on the way,
        // as into a value kept in bf16 for the products reading it).
        let direct = !shifted
            && Place::Mem(dst.mem) == land.place
            && (dst.dtype == land.dtype || src.mem == dst.mem);
        let into = Loc {
            dtype: dst.dtype,
            ..land
        };
        for block in runs(pairs, budget as usize) {
            let froms: Vec<i64> = block.iter().map(|p| p.0).collect();
            let tos: Vec<i64> = block.iter().map(|p| p.1).collect();
            if direct && self.load_rows_into(src, dst, (&froms, &tos), (c0, d0), cols, into)? {
                continue;
            }
            // Dense rows on chip go in one transfer each way where the rows
            // are evenly spaced; where a transfer does not take them so, row
            // by row from rows that start aligned.
            let cp = self.e.checkpoint();
            match self.copy_block(
                src,
                dst,
                (&froms, &tos),
                (c0, step, d0, cols),
                land,
                pad,
                moves.as_ref(),
            ) {
                Err(_) if pad == Pad::Dense => {
                    self.e.rollback(cp);
                    self.copy_block(
                        src,
                        dst,
                        (&froms, &tos),
                        (c0, step, d0, cols),
                        land,
                        Pad::Aligned,
                        moves.as_ref(),
                    )?;
                }
                r => r?,
            }
        }
        Ok(())
    }

    /// One block of rows of [`Self::copy_rows_shifted`]: loaded in pieces
    /// of columns into buffers at `land` laid out as `pad` says, shifted
    /// element by element where `moves` are given, and stored.
    #[allow(clippy::too_many_arguments)]
    fn copy_block(
        &mut self,
        src: &Home,
        dst: &Home,
        (froms, tos): (&[i64], &[i64]),
        (c0, step, d0, cols): (i64, i64, i64, i64),
        land: Loc,
        pad: Pad,
        moves: Option<&super::scalar::Moves>,
    ) -> Result<(), LowerError> {
        let (per, per_d) = (self.aligned_elems(src.dtype), self.aligned_elems(dst.dtype));
        let w_max = cols.min((512 / step).max(1));
        let h = froms.len() as i64;
        let mut c = 0;
        while c < cols {
            let w = w_max.min(cols - c);
            // Source: from an aligned column, `ds` elements before the data.
            let start = c0 + c * step;
            let ds = start % per;
            let span = (w - 1) * step + 1;
            let a = self.load_rows(src, froms, start - ds, span + ds, land, pad)?;
            let dd = (d0 + c) % per_d;
            let out = if ds == 0 && dd == 0 && step == 1 {
                a
            } else {
                let mv = moves.ok_or_else(|| err("no scalar moves"))?;
                // The destination's aligned superset, read so its other columns survive.
                let b = if dd == 0 {
                    self.e.buffer_padded(mv.mem, land.dtype, h, w, Pad::Aligned)
                } else {
                    self.load_rows(dst, tos, d0 + c - dd, w + dd, land, pad)?
                };
                for i in 0..h {
                    for j in 0..w {
                        super::scalar::move_element(
                            &mut self.e,
                            mv,
                            &a,
                            i,
                            ds + j * step,
                            &b,
                            i,
                            dd + j,
                        )
                        .map_err(err)?;
                    }
                }
                b
            };
            self.store_rows(&out, dst, tos, d0 + c - dd, w + dd)?;
            c += w;
        }
        Ok(())
    }

    /// Rows `froms` of `src` (columns `c0..c0 + cols`) transferred straight
    /// into rows `tos` of `dst` (from column `d0`), each evenly spaced, in
    /// one transfer and its wait; false (nothing emitted) where no transfer
    /// takes that shape.
    fn load_rows_into(
        &mut self,
        src: &Home,
        dst: &Home,
        (froms, tos): (&[i64], &[i64]),
        (c0, d0): (i64, i64),
        cols: i64,
        land: Loc,
    ) -> Result<bool, LowerError> {
        let (Some(sf), Some(st), Some(&f0), Some(&t0)) =
            (even_step(froms), even_step(tos), froms.first(), tos.first())
        else {
            return Ok(false);
        };
        let h = froms.len() as i64;
        let from = self.rows_tile(src, f0, sf, c0, h, cols);
        let into = self.rows_tile(dst, t0, st, d0, h, cols);
        let on_chip = src.mem == dst.mem;
        let cp = self.e.checkpoint();
        let before = self.e.code.len();
        match self.e.to_loc(Val::Mem(from), land, Some(&into), Pad::Dense) {
            // From on chip: one copy instead of two (into a landing
            // buffer, then out of it). From home: a few transfers (one per
            // engine, say), not one per row where the rows are not dense on
            // chip: those would cost more issue slots than the copy through
            // registers after them.
            Ok(Val::Mem(t)) if on_chip || self.e.code.len() - before <= DIRECT_MOST => {
                self.e.ready(&t).map_err(err)?;
                Ok(true)
            }
            _ => {
                self.e.rollback(cp);
                Ok(false)
            }
        }
    }

    /// Elements of `dt` per aligned step of transfers at home.
    pub(super) fn aligned_elems(&self, dt: isa_specs::model::DType) -> i64 {
        (self.info.home_align / dt.bytes().max(1)).max(1) as i64
    }

    /// Where tiles of `dt` at home land on chip (the first copy out of home).
    pub(super) fn landing_of(&self, dt: isa_specs::model::DType) -> Result<Loc, LowerError> {
        let home = Loc {
            place: Place::Mem(self.home_mem()),
            dtype: dt,
        };
        self.info
            .copies
            .iter()
            .find(|cp| cp.from == home && matches!(cp.to.place, Place::Mem(_)))
            .map(|cp| cp.to)
            .ok_or_else(|| err("nothing loads from the home memory"))
    }

    /// Rows `rows` of `home`, columns `c..c + w`, in a fresh on-chip buffer
    /// at `land` laid out as `pad` says.
    pub(super) fn load_rows(
        &mut self,
        home: &Home,
        rows: &[i64],
        c: i64,
        w: i64,
        land: Loc,
        pad: Pad,
    ) -> Result<MemTile, LowerError> {
        let Place::Mem(lm) = land.place else {
            return Err(err("no landing memory"));
        };
        let h = rows.len() as i64;
        // Rows not evenly spaced (a reversed slice) come one transfer each:
        // each lands at a row that starts aligned.
        let pad = match even_step(rows) {
            Some(_) => pad,
            None => pad.max(Pad::Aligned),
        };
        let buf = self.e.buffer_padded(lm, land.dtype, h, w, pad);
        let mut loaded = Vec::new();
        // Evenly spaced rows in one transfer, if one takes that spacing.
        let cp = self.e.checkpoint();
        let one = even_step(rows).and_then(|s| {
            let t = self.rows_tile(home, rows[0], s, c, h, w);
            let v = self.e.to_loc(Val::Mem(t), land, Some(&buf), Pad::Dense);
            if v.is_err() {
                self.e.rollback(cp);
            }
            v.ok()
        });
        match one {
            Some(v) => loaded.push(v),
            None => {
                for (i, &f) in rows.iter().enumerate() {
                    let t = self.rows_tile(home, f, 1, c, 1, w);
                    let v = self.e.to_loc(
                        Val::Mem(t),
                        land,
                        Some(&buf.view(i as i64, 0, 1, w)),
                        Pad::Dense,
                    );
                    loaded.push(v.map_err(err)?);
                }
            }
        }
        for v in &loaded {
            if let Val::Mem(t) = v {
                self.e.ready(t).map_err(err)?;
            }
        }
        Ok(buf)
    }

    /// Stores `buf` (`rows.len()` x `w`) to rows `rows` of `home` from column `c`.
    pub(super) fn store_rows(
        &mut self,
        buf: &MemTile,
        home: &Home,
        rows: &[i64],
        c: i64,
        w: i64,
    ) -> Result<(), LowerError> {
        let to = Loc {
            place: Place::Mem(home.mem),
            dtype: home.dtype,
        };
        let h = rows.len() as i64;
        let cp = self.e.checkpoint();
        let one = even_step(rows).is_some_and(|s| {
            let d = self.rows_tile(home, rows[0], s, c, h, w);
            let v = self
                .e
                .to_loc(Val::Mem(buf.view(0, 0, h, w)), to, Some(&d), Pad::Dense);
            if v.is_err() {
                self.e.rollback(cp);
            }
            v.is_ok()
        });
        match one {
            true => {}
            false => {
                for (i, &t) in rows.iter().enumerate() {
                    let d = self.rows_tile(home, t, 1, c, 1, w);
                    self.e
                        .to_loc(
                            Val::Mem(buf.view(i as i64, 0, 1, w)),
                            to,
                            Some(&d),
                            Pad::Dense,
                        )
                        .map_err(err)?;
                }
            }
        }
        Ok(())
    }
}
