//! Data movement between tensors at home: `Slice` (and `Split`, which is
//! slices) gathers rows of its input, `Concat` places each input's rows in
//! its result. Rows are moved through on-chip memory by the machine's copy
//! instructions, a whole block at a time where the rows are evenly spaced,
//! else row by row.

use super::emit::{Base, MemTile, Pad, Val};
use super::machine::{Loc, Place};
use super::{Home, LowerError, Lowerer, err};
use crate::ir::Node;

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

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a.max(1) } else { gcd(b, a % b) }
}

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
        let (src, dst) = (self.home_of(x)?, self.home_of(out)?);
        self.copy_rows(&src, &dst, &pairs, 0, 0, *os.last().unwrap_or(&1) as i64)
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
        let run = gcd(c, c2);
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

    /// `Concat`: each input's rows go to their place in the result.
    pub(super) fn concat(&mut self, n: &Node, axis: usize) -> Result<(), LowerError> {
        let g = self.g;
        let out = n.outputs[0];
        let os = g.ty(out).shape.clone();
        let r = os.len();
        let ost = row_strides(&os);
        let dst = self.home_of(out)?;
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
            let pairs: Vec<(i64, i64)> = row_indices(&xs)
                .into_iter()
                .enumerate()
                .map(|(j, idx)| {
                    let at = idx
                        .iter()
                        .enumerate()
                        .map(|(d, k)| (k + if d == axis { offset } else { 0 }) * ost[d])
                        .sum();
                    (j as i64, at)
                })
                .collect();
            let col = if axis + 1 == r { offset } else { 0 };
            let src = self.home_of(x)?;
            self.copy_rows(&src, &dst, &pairs, 0, col, *xs.last().unwrap_or(&1) as i64)?;
            offset += extent;
        }
        Ok(())
    }

    fn home_of(&self, v: crate::ir::ValueId) -> Result<Home, LowerError> {
        self.homes.get(&v).cloned().ok_or_else(|| {
            err(format!(
                "`{}` has no place at home",
                self.g.values[v.index()].name
            ))
        })
    }

    /// A home tile of `h` rows from row `row`, `step` rows apart.
    fn rows_tile(&self, home: &Home, row: i64, step: i64, c: i64, h: i64, w: i64) -> MemTile {
        MemTile {
            mem: self.home_mem(),
            dtype: home.dtype,
            base: Base::Fixed(home.addr),
            offset: ((row * home.pitch + c) as u64) * home.dtype.bytes(),
            rows: h,
            cols: w,
            pitch: home.pitch * step,
            ready: None,
        }
    }

    /// Copies `cols` columns of rows `(from, to)` of `src` (from column `c0`)
    /// to `dst` (from column `d0`). A column offset off the home memory's
    /// transfer alignment moves an aligned superset and shifts it on chip
    /// element by element (see [`super::scalar`]); the destination's
    /// superset is read first, so the columns around the result survive.
    #[allow(clippy::too_many_arguments)]
    fn copy_rows(
        &mut self,
        src: &Home,
        dst: &Home,
        pairs: &[(i64, i64)],
        c0: i64,
        d0: i64,
        cols: i64,
    ) -> Result<(), LowerError> {
        let home = self.home_mem();
        let land_of = |l: &Self, dt| {
            l.info
                .copies
                .iter()
                .find(|cp| {
                    cp.from
                        == Loc {
                            place: Place::Mem(home),
                            dtype: dt,
                        }
                        && matches!(cp.to.place, Place::Mem(_))
                })
                .map(|cp| cp.to)
                .ok_or_else(|| err("nothing loads from the home memory"))
        };
        let land = land_of(self, src.dtype)?;
        let Place::Mem(lm) = land.place else {
            return Err(err("no landing memory"));
        };
        let per = (self.info.home_align / src.dtype.bytes().max(1)).max(1) as i64;
        let per_d = (self.info.home_align / dst.dtype.bytes().max(1)).max(1) as i64;
        let shifted = (c0 % per != 0) || (d0 % per_d != 0);
        let moves = if shifted {
            let mv = super::scalar::moves(self.e.m, lm, land.dtype).ok_or_else(|| {
                err(format!(
                    "a column offset ({c0} or {d0}) is not on a {}-byte boundary the machine's transfers need, and it has no scalar load and store of {} in `{}` to shift the data on chip",
                    self.info.home_align,
                    land.dtype.name(),
                    self.e.m.memories[lm.index()].name
                ))
            })?;
            if land_of(self, dst.dtype)? != land {
                return Err(err(
                    "source and destination land in different places; cannot shift",
                ));
            }
            Some(mv)
        } else {
            None
        };
        let w_max = cols.min(512);
        let budget = (self.tile_budget() / 4 / ((w_max + per) * land.dtype.bytes() as i64).max(1))
            .clamp(1, 64);
        for block in pairs.chunks(budget as usize) {
            let h = block.len() as i64;
            let froms: Vec<i64> = block.iter().map(|p| p.0).collect();
            let tos: Vec<i64> = block.iter().map(|p| p.1).collect();
            let mut c = 0;
            while c < cols {
                let w = w_max.min(cols - c);
                // Source: from an aligned column, `ds` elements before the data.
                let ds = (c0 + c) % per;
                let a = self.load_rows(src, &froms, c0 + c - ds, w + ds, land)?;
                let dd = (d0 + c) % per_d;
                let out = if ds == 0 && dd == 0 {
                    a
                } else {
                    let mv = moves.as_ref().ok_or_else(|| err("no scalar moves"))?;
                    // The destination's aligned superset, read so its other columns survive.
                    let b = if dd == 0 {
                        self.e.buffer_padded(lm, land.dtype, h, w, Pad::Aligned)
                    } else {
                        self.load_rows(dst, &tos, d0 + c - dd, w + dd, land)?
                    };
                    for i in 0..h {
                        for j in 0..w {
                            super::scalar::move_element(
                                &mut self.e,
                                mv,
                                &a,
                                i,
                                ds + j,
                                &b,
                                i,
                                dd + j,
                            )
                            .map_err(err)?;
                        }
                    }
                    b
                };
                self.store_rows(&out, dst, &tos, d0 + c - dd, w + dd)?;
                c += w;
            }
        }
        Ok(())
    }

    /// Rows `rows` of `home`, columns `c..c + w`, in a fresh on-chip buffer at `land`.
    pub(super) fn load_rows(
        &mut self,
        home: &Home,
        rows: &[i64],
        c: i64,
        w: i64,
        land: Loc,
    ) -> Result<MemTile, LowerError> {
        let Place::Mem(lm) = land.place else {
            return Err(err("no landing memory"));
        };
        let h = rows.len() as i64;
        let buf = self.e.buffer_padded(lm, land.dtype, h, w, Pad::Aligned);
        let mut loaded = Vec::new();
        match even_step(rows) {
            Some(s) => {
                let t = self.rows_tile(home, rows[0], s, c, h, w);
                loaded.push(
                    self.e
                        .to_loc(Val::Mem(t), land, Some(&buf), Pad::Dense)
                        .map_err(err)?,
                );
            }
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
            place: Place::Mem(self.home_mem()),
            dtype: home.dtype,
        };
        let h = rows.len() as i64;
        match even_step(rows) {
            Some(s) => {
                let d = self.rows_tile(home, rows[0], s, c, h, w);
                self.e
                    .to_loc(Val::Mem(buf.view(0, 0, h, w)), to, Some(&d), Pad::Dense)
                    .map_err(err)?;
            }
            None => {
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
