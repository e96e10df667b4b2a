//! One output tile of a matrix product: its constant operands packed in
//! panels, its operands brought on chip (staged, sliced, converted), its
//! reduction steps, and the products of scaled rows.

use super::*;

impl Lowerer<'_> {
    /// A constant operand of a contraction packed at home for tile access:
    /// in dimension order `dims` (roles), element type `dt`, padded with zeros
    /// to whole tiles. `B` in its natural layout is cut into column panels one tile wide, each
    /// a dense matrix starting aligned, so every tile's rows start aligned:
    /// returns the panels and their width (0: one piece).
    pub(crate) fn packed_matrix(
        &mut self,
        v: ValueId,
        batch_row0: i64,
        dims: &[Role],
        dt: DType,
        p: &MatMulPlan,
    ) -> Result<(Vec<MemTile>, i64), LowerError> {
        let key = PanelKey {
            value: v,
            batch_row0,
            dims: dims.to_vec(),
            dtype: dt,
            tile: (p.tm, p.tn, p.tk),
        };
        if let Some(t) = self.pool.packed_panels.get(&key) {
            return Ok(t.clone());
        }
        self.note_packed(v, dt);
        let g = self.g;
        let t = &g.constants[&v];
        let cols_src = *t.ty.shape.last().unwrap_or(&1) as i64;
        let is_a = v == p.a;
        // Logical matrix [r, c] of this operand and its padded extents.
        let (r, c) = if is_a { (p.m, p.k) } else { (p.k, p.n) };
        let pad = |x: i64, role: Role| match role {
            Role::M => machine::rup(x, p.tm),
            Role::N => machine::rup(x, p.tn),
            Role::K => machine::rup(x, p.tk),
        };
        let (rr, cr) = if is_a {
            (Role::M, Role::K)
        } else {
            (Role::K, Role::N)
        };
        let (rp, cp) = (pad(r, rr), pad(c, cr));
        let transposed = dims.first() == Some(&cr) && dims.len() == 2;
        let (orows, ocols) = if transposed { (cp, rp) } else { (rp, cp) };
        // Stored columns `lo..lo + w` of the stored rows: read straight from
        // the constant's rows, or from its transpose gathered first.
        let mut gathered = Vec::new();
        if transposed {
            gathered = vec![0.0; (orows * ocols) as usize];
            let mut row = vec![0.0; c as usize];
            for i in 0..r {
                t.data
                    .read(((batch_row0 + i) * cols_src) as usize, &mut row);
                for (j, x) in row.iter().enumerate() {
                    gathered[j * ocols as usize + i as usize] = *x;
                }
            }
        }
        let (src_rows, src_cols) = (r as usize, c as usize);
        let el = dt.bytes() as usize;
        // Panels along the stored columns when they are not the reduction
        // (staged runs of the reduction never cross a panel): N of B, M of Aᵀ.
        let pw = if !is_a && !transposed && ocols > p.tn {
            p.tn
        } else if is_a && transposed && ocols > p.tm {
            p.tm
        } else {
            0
        };
        let (count, w) = if pw == 0 {
            (1, ocols)
        } else {
            ((ocols / pw) as usize, pw)
        };
        let homes = if transposed {
            self.padded_panels(orows, w, count, dt, |i, j, out| {
                let at = i * ocols as usize + j * w as usize;
                let n = out.len() / el;
                crate::lower::encode_into(dt, &gathered[at..at + n], out);
            })
        } else {
            self.padded_panels(orows, w, count, dt, |i, j, out| {
                let lo = j * w as usize;
                if i < src_rows && lo < src_cols {
                    let n = (out.len() / el).min(src_cols - lo);
                    let src = (batch_row0 as usize + i) * cols_src as usize + lo;
                    crate::lower::encode_elements(&t.data, src, dt, &mut out[..n * el]);
                }
            })
        };
        let panels: Vec<MemTile> = homes.iter().map(|h| h.tile(0, 0, orows, w)).collect();
        self.pool.packed_panels.insert(key, (panels.clone(), pw));
        Ok((panels, pw))
    }

    /// The tile `[r.., c..]` (`h` x `w`) of batch `b` of a matrix product, in the contraction's result place.
    pub(crate) fn matmul_tile(
        &mut self,
        p: &MatMulPlan,
        b: usize,
        r: i64,
        c: i64,
        h: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        let form = p
            .set
            .clone()
            .or_else(|| p.acc.clone())
            .ok_or_else(|| err("no contraction form"))?;
        let locs = form
            .locs(&self.e)
            .ok_or_else(|| err("contraction operands without places"))?;
        // Exact rows and columns if the instruction takes them, else whole (zero-padded) tiles.
        let exact = (
            if form.has(Role::M) { h } else { 1 },
            if form.has(Role::N) { w } else { 1 },
        );
        let fits = |e: &Emitter, f: &Contraction, mnk| {
            f.probe(e, mnk)
                .is_some_and(|op| e.check(&op, f.inst).is_ok())
        };
        let (mr, nr) = if !p.whole_tiles && fits(&self.e, &form, (exact.0, exact.1, p.tk)) {
            exact
        } else {
            (p.tm, p.tn)
        };
        let t_val = match locs[0].place {
            Place::Reg(file) => Val::Reg(emit::RegTile {
                file,
                dtype: locs[0].dtype,
                reg: self.e.vreg(file),
                rows: h,
                cols: w,
            }),
            Place::Mem(mem) => {
                let mut t = self.e.buffer(mem, locs[0].dtype, mr.max(h), nr.max(w));
                t.rows = h;
                t.cols = w;
                Val::Mem(t)
            }
        };
        if p.set.is_none() {
            let shape = Contraction::shape(&form.t_dims, (mr, nr, p.tk));
            self.zero(&t_val, &shape, locs[0])?;
        }
        // A run of A staged for an earlier tile of the same rows serves this
        // one too; so does a run of B staged for any earlier tile of the same
        // columns (the weights stay on chip across row blocks).
        let mut staged: [Option<Staged>; 2] = [
            self.cache
                .kept_a
                .take()
                .filter(|(at, _)| *at == (b, r, h))
                .map(|(_, s)| s),
            self.cache.kept_b.get(&(b, c, w)).cloned(),
        ];
        // Where `A` is a row group's result that is zero past some column
        // for all these rows ([`crate::lower::rows::masked`]), the reduction stops there.
        let k_end = self
            .fusion
            .skips
            .iter()
            .find(|s| s.output == p.a)
            .map_or(p.k, |s| {
                let need = s.need_rows(p.a_batch[b] + r, h);
                crate::lower::machine::rup(need.max(1), p.tk.max(1)).min(p.k)
            });
        let mut kk = 0;
        let mut first = true;
        // Reduction steps of the chosen size; a step whose operands cannot be
        // brought into place (alignment of a conversion through registers, say)
        // is retried without staging, then in halves.
        let mut kw = p.tk.min(p.k);
        let mut stage = true;
        let mut first_err: Option<LowerError> = None;
        while kk < k_end {
            kw = kw.min(k_end - kk);
            let cp = self.e.checkpoint();
            let staged_before = staged.clone();
            if !stage {
                staged = [None, None];
            }
            match self.contraction_step(
                p,
                &form,
                &locs,
                &t_val,
                first,
                b,
                (r, c),
                (mr, nr),
                (kk, kw),
                stage,
                &mut staged,
            ) {
                Ok(()) => {
                    first = false;
                    kk += kw;
                }
                Err(e) if stage || kw > 1 => {
                    // The first failure says most: keep it for the report.
                    first_err.get_or_insert(e);
                    self.e.rollback(cp);
                    staged = staged_before;
                    if stage {
                        stage = false;
                    } else {
                        stage = true;
                        // The largest power of two below: offsets stay aligned.
                        kw = 1i64 << (63 - (kw - 1).max(1).leading_zeros());
                    }
                }
                Err(e) => return Err(first_err.unwrap_or(e)),
            }
        }
        if self.opts.operand_reuse {
            let [a, bs] = staged;
            self.cache.kept_a = a.map(|a| ((b, r, h), a));
            // Column-first visits each column's tiles together: the runs of
            // earlier columns are not needed again.
            if p.order == Order::Cols {
                self.cache.kept_b.retain(|k, _| *k == (b, c, w));
            }
            if let Some(s) = bs {
                self.keep_b((b, c, w), s);
            }
        }
        Ok(t_val)
    }

    /// Keeps a staged run of `B` for later tiles of its columns, within a
    /// quarter of its memory for all the runs kept of a product.
    pub(crate) fn keep_b(&mut self, key: (usize, i64, i64), s: Staged) {
        let bytes = |s: &Staged| {
            s.bands
                .iter()
                .map(|(_, _, t)| (t.rows * t.pitch) as u64 * t.dtype.bytes())
                .sum::<u64>()
        };
        let Some((_, _, t)) = s.bands.first() else {
            return;
        };
        let room = self.e.m.memories[t.mem.index()].size.value.max(0) as u64 / 4;
        let held: u64 = self
            .cache
            .kept_b
            .iter()
            .filter(|(k, _)| **k != key)
            .map(|(_, x)| bytes(x))
            .sum();
        if held + bytes(&s) <= room {
            self.cache.kept_b.insert(key, s);
        } else {
            self.cache.kept_b.remove(&key);
        }
    }

    /// Whether a block of `h` rows of product `p` may be computed as two
    /// of half the rows at no cost: both halves are whole tiles the
    /// contraction takes (not only the edge tiles the aligned tiling
    /// forbids), and one reduction step of each occupies its unit for at
    /// most half as long as a step of all `h` rows (on vliw-systolic a
    /// step of 256 rows takes 256 cycles and one of 128 rows 128; one of
    /// 64 still takes 128, the weights' load).
    pub(crate) fn halves_cost_nothing(&self, p: &MatMulPlan, h: i64) -> bool {
        let Some(form) = p.set.as_ref().or(p.acc.as_ref()) else {
            return false;
        };
        if p.whole_tiles || h < 2 {
            return false;
        }
        let occupancy = |rows: i64| {
            let op = form.probe(&self.e, (rows, p.tn, p.tk))?;
            let (mi, _) = self.e.choose(&op, Some(form.inst)).ok()?;
            Some(self.e.isa.occupancy(self.e.m, &mi))
        };
        match (occupancy(h), occupancy(h - h / 2)) {
            (Some(all), Some(half)) => 2 * half <= all,
            _ => false,
        }
    }

    /// One reduction step `kk..kk + kw` of a contraction tile.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn contraction_step(
        &mut self,
        p: &MatMulPlan,
        form: &Contraction,
        locs: &[Loc; 3],
        t_val: &Val,
        first: bool,
        b: usize,
        (r, c): (i64, i64),
        (mr, nr): (i64, i64),
        (kk, kw): (i64, i64),
        stage: bool,
        staged: &mut [Option<Staged>; 2],
    ) -> Result<(), LowerError> {
        let fits = |e: &Emitter, f: &Contraction, mnk| {
            f.probe(e, mnk)
                .is_some_and(|op| e.check(&op, f.inst).is_ok())
        };
        let inst_form = if first {
            p.set.clone().unwrap_or_else(|| form.clone())
        } else {
            p.acc.clone().ok_or_else(|| err("no accumulating form"))?
        };
        let mnk = if fits(&self.e, &inst_form, (mr, nr, kw)) {
            (mr, nr, kw)
        } else {
            (mr, nr, p.tk)
        };
        let [sa, sb] = staged;
        let a_t = self.contraction_operand(
            p,
            &inst_form,
            true,
            b,
            (r, kk),
            mnk,
            locs[1],
            stage.then_some(sa),
        )?;
        let b_t = self.contraction_operand(
            p,
            &inst_form,
            false,
            b,
            (kk, c),
            mnk,
            locs[2],
            stage.then_some(sb),
        )?;
        let tens = |v: &Val, shape: Vec<i64>| v.tensor(shape);
        for v in [&a_t, &b_t, t_val] {
            if let Val::Mem(x) = v {
                self.e.ready(x).map_err(err)?;
            }
        }
        let (ts, refs): (Vec<TileTensor>, Vec<Ref>) = [
            tens(t_val, Contraction::shape(&inst_form.t_dims, mnk)),
            tens(&a_t, Contraction::shape(&inst_form.a_dims, mnk)),
            tens(&b_t, Contraction::shape(&inst_form.b_dims, mnk)),
        ]
        .into_iter()
        .unzip();
        let op = inst_form
            .op(&self.e, ts, mnk)
            .ok_or_else(|| err("contraction pattern"))?;
        self.e.emit(&op, &refs, Some(inst_form.inst)).map_err(|e| {
            err(format!(
                "`{}`: {e}",
                self.e.m.instructions[inst_form.inst.index()].name
            ))
        })?;
        Ok(())
    }

    /// Row `r`, columns `c..c + w` of a decomposed product: Σ_k A[r, k] · B[k, c..c + w].
    pub(crate) fn scaled_rows_tile(
        &mut self,
        p: &MatMulPlan,
        b: usize,
        r: i64,
        c: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        let sc = p.decomposed.clone().ok_or_else(|| err("not decomposed"))?;
        let (ha, hb) = (
            self.operand_home(p.a, p.a_batch[b], p.m, p.k)?,
            self.operand_home(p.b, p.b_batch[b], p.k, p.n)?,
        );
        // A's row where the scalar loads read, B's columns where vector loads read.
        let a_row = match self
            .e
            .to_loc(
                Val::Mem(ha.view(r, 0, 1, p.k)),
                sc.scalar_src,
                None,
                Pad::Dense,
            )
            .map_err(err)?
        {
            Val::Mem(t) => t,
            Val::Reg(_) | Val::Splat(_) => return Err(err("a row landed in a register")),
        };
        let land = self
            .info
            .path(&[hb.loc()], sc.vector)
            .and_then(|(_, ch)| {
                ch.iter()
                    .rev()
                    .map(|&ci| self.info.copies[ci].from)
                    .find(|l| matches!(l.place, Place::Mem(_)))
            })
            .ok_or_else(|| err("no way to bring B's rows to the vector registers"))?;
        let pad = self
            .info
            .path(&[land], sc.vector)
            .and_then(|(_, ch)| ch.first().map(|&ci| self.info.copies[ci].pad()))
            .unwrap_or(Pad::Dense);
        // B's columns come in blocks of rows that each take at most
        // `1 / tile_share` of the memory they land in (as a contraction's
        // tiles do, see `tile_cost`), so a long reduction (a context of
        // 1024 tokens against the cache) is not staged whole.
        let Place::Mem(lm) = land.place else {
            return Err(err("B lands in registers"));
        };
        let room = self.e.m.memories[lm.index()].size.value / self.trials.tile_share.max(1);
        let block = (room / (w * land.dtype.bytes() as i64).max(1)).clamp(1, p.k.max(1));
        let mut acc: Option<Val> = None;
        let mut k0 = 0;
        while k0 < p.k {
            let kh = block.min(p.k - k0);
            let b_cols = match self
                .e
                .to_loc(Val::Mem(hb.view(k0, c, kh, w)), land, None, pad)
                .map_err(err)?
            {
                Val::Mem(t) => t,
                Val::Reg(_) | Val::Splat(_) => return Err(err("B landed in a register")),
            };
            for k in 0..kh {
                self.e.ready(&a_row).map_err(err)?;
                let s = ops::scalar_load(&mut self.e, &sc, &a_row.view(0, k0 + k, 1, 1))
                    .map_err(err)?;
                let row = self
                    .e
                    .to_loc(
                        Val::Mem(b_cols.view(k, 0, 1, w)),
                        sc.vector,
                        None,
                        Pad::Dense,
                    )
                    .map_err(err)?;
                let t = ops::scale(&mut self.e, &sc, row, s, w).map_err(err)?;
                acc = Some(match acc {
                    None => t,
                    Some(a) => ops::add_vectors(&mut self.e, &sc, a, t, w).map_err(err)?,
                });
            }
            k0 += kh;
        }
        acc.ok_or_else(|| err("an empty reduction"))
    }

    /// The matrix `[rows, cols]` of a matrix-product operand at home (a constant packed as is).
    pub(crate) fn operand_home(
        &mut self,
        v: ValueId,
        row0: i64,
        rows: i64,
        cols: i64,
    ) -> Result<MemTile, LowerError> {
        if self.layout.windows.contains_key(&v) {
            return Err(err(
                "convolution windows read in place are not written at home",
            ));
        }
        if let Some(t) = self.g.constants.get(&v) {
            let cols_src = *t.ty.shape.last().unwrap_or(&1) as i64;
            let data: Vec<f64> = (0..rows)
                .flat_map(|i| (0..cols).map(move |j| (i, j)))
                .map(|(i, j)| t.data[((row0 + i) * cols_src + j) as usize])
                .collect();
            let key = PackKey::Rows {
                value: v,
                row0,
                rows,
                cols,
            };
            if let Some(t) = self.pool.packed.get(&key) {
                return Ok(t.clone());
            }
            let dt = self.layout.act;
            let tile = self.padded(&data, rows, cols, dt).tile(0, 0, rows, cols);
            self.pool.packed.insert(key, tile.clone());
            return Ok(tile);
        }
        let h = self
            .layout
            .homes
            .get(&v)
            .cloned()
            .ok_or_else(|| err("operand without a home"))?;
        Ok(h.tile(row0, 0, rows, cols))
    }

    /// Clears an accumulator with an instruction `d = 0`.
    pub(crate) fn zero(&mut self, t: &Val, shape: &[i64], loc: Loc) -> Result<(), LowerError> {
        let idx = emit::identity_indices(shape.len());
        let (tensor, r) = t.tensor(shape.to_vec());
        let op = TileOp {
            tensors: vec![tensor],
            extents: shape.to_vec(),
            target: TileAccess {
                tensor: 0,
                indices: idx,
            },
            op: isa_specs::model::AssignOp::Set,
            value: TileExpr::Const(0.0),
        };
        self.e.emit(&op, &[r], None).map(|_| ()).map_err(|e| {
            err(format!(
                "cannot clear the accumulator in {}: no instruction `d = 0.0` fits ({e})",
                self.e.place_name(loc.place)
            ))
        })
    }

    /// Operand `A` (rows `r0..`, reduction `k0..`) or `B` (reduction `r0..`,
    /// columns `k0..`) of one contraction step, at `loc`. Where the operand
    /// reaches `loc` through registers or a strided memory operand, a whole
    /// run of the reduction is first staged on chip (one transfer instead of
    /// one per step) and each step takes its slice from there.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn contraction_operand(
        &mut self,
        p: &MatMulPlan,
        form: &Contraction,
        is_a: bool,
        b: usize,
        (r0, c0): (i64, i64),
        mnk: (i64, i64, i64),
        loc: Loc,
        staged: Option<&mut Option<Staged>>,
    ) -> Result<Val, LowerError> {
        let (v, dims) = if is_a {
            (p.a, &form.a_dims)
        } else {
            (p.b, &form.b_dims)
        };
        let (rows, cols) = if is_a { (mnk.0, mnk.2) } else { (mnk.2, mnk.1) };
        let batch_row0 = if is_a { p.a_batch[b] } else { p.b_batch[b] };
        let shape = Contraction::shape(dims, mnk);
        let transposed = dims.len() == 2 && dims[0] == if is_a { Role::K } else { Role::N };
        if let Some(&wi) = self.layout.windows.get(&v) {
            // Convolution windows: the tile brought together from the image.
            let at = match (is_a, transposed) {
                (true, false) => (batch_row0 + r0, c0),
                (false, true) => (batch_row0 + c0, r0),
                _ => return Err(err("convolution windows read transposed as `A`")),
            };
            let hw = if is_a { (rows, cols) } else { (cols, rows) };
            let def = &self.e.m.instructions[form.inst.index()];
            let strided = matches!(
                &def.operands[if is_a { form.a } else { form.b }].kind,
                OperandKind::Mem {
                    stride: Some(_),
                    ..
                }
            );
            let pad = if strided { Pad::Aligned } else { Pad::Dense };
            let image = self.home_of(self.g.nodes[wi].inputs[0])?;
            let land = self.landing_of(image.dtype)?;
            // Straight into the operand's place where the types agree, or
            // where the image is on chip in a memory the machine cannot
            // copy within (so the runs cannot be brought together where
            // it lies) but can convert from into the operand's place.
            let lies = Loc {
                place: Place::Mem(image.mem),
                dtype: image.dtype,
            };
            let stuck = image.mem != self.info.home
                && self.info.round_trip(land).is_none()
                && self.info.path(&[lies], loc).is_some();
            let here = if matches!(loc.place, Place::Mem(_)) && (loc.dtype == image.dtype || stuck)
            {
                loc
            } else {
                land
            };
            let t = self.window_tile(wi, at, hw, here, pad)?;
            if here == loc {
                return Ok(Val::Mem(t));
            }
            return self.e.to_loc(Val::Mem(t), loc, None, pad).map_err(err);
        }
        let whole: MemTile = if self.g.constants.contains_key(&v) {
            // Pack in the type the operand wants if the home memory can hold it, else the activation type.
            let here = Loc {
                place: Place::Mem(self.home_mem()),
                dtype: loc.dtype,
            };
            let dt = if loc.place == Place::Mem(self.home_mem())
                || self.info.path(&[here], loc).is_some()
            {
                loc.dtype
            } else {
                self.layout.act
            };
            if loc.place == Place::Mem(self.home_mem()) {
                return self.resident_tile(v, batch_row0, dims, dt, p, r0, c0, mnk, form, is_a);
            }
            let (panels, pw) = self.packed_matrix(v, batch_row0, dims, dt, p)?;
            if pw > 0 {
                // Column `c0` of B is column `c0 % pw` of its panel; row `r0` of A, of Aᵀ's.
                let (at, off) = if is_a {
                    (r0, (r0 % pw, c0))
                } else {
                    (c0, (r0, c0 % pw))
                };
                let panel = panels
                    .get((at / pw) as usize)
                    .cloned()
                    .ok_or_else(|| err("panel out of range"))?;
                return self.contraction_slice(
                    p,
                    panel,
                    is_a,
                    off,
                    (rows, cols),
                    transposed,
                    loc,
                    form,
                    staged,
                );
            }
            panels[0].clone()
        } else {
            let home = self
                .layout
                .homes
                .get(&v)
                .cloned()
                .ok_or_else(|| err("operand without a home"))?;
            // A computed `B` read transposed is held as rows of `N`.
            let (hr, hc) = match (is_a, transposed) {
                (true, _) => (p.m, p.k),
                (false, false) => (p.k, p.n),
                (false, true) => (p.n, p.k),
            };
            home.tile(batch_row0, 0, hr, hc)
        };
        if shape.len() == 1 && rows != 1 && cols != 1 {
            return Err(err(
                "a one-dimensional contraction operand with two dimensions",
            ));
        }
        self.contraction_slice(
            p,
            whole,
            is_a,
            (r0, c0),
            (rows, cols),
            transposed,
            loc,
            form,
            staged,
        )
    }

    /// The `(r0, c0)` slice of `rows` x `cols` of operand matrix `whole` at `loc`, staged (see [`Self::contraction_operand`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn contraction_slice(
        &mut self,
        p: &MatMulPlan,
        whole: MemTile,
        is_a: bool,
        (r0, c0): (i64, i64),
        (rows, cols): (i64, i64),
        transposed: bool,
        loc: Loc,
        form: &Contraction,
        staged: Option<&mut Option<Staged>>,
    ) -> Result<Val, LowerError> {
        // Where the slices are taken from: the last memory on the way to `loc`, or `loc` itself if strided.
        let def = &self.e.m.instructions[form.inst.index()];
        let strided = matches!(
            &def.operands[if is_a { form.a } else { form.b }].kind,
            OperandKind::Mem {
                stride: Some(_),
                ..
            }
        );
        let stage_loc = match loc.place {
            _ if transposed => None,
            Place::Reg(_) => self.info.path(&[whole.loc()], loc).and_then(|(_, chain)| {
                chain
                    .iter()
                    .rev()
                    .map(|&ci| self.info.copies[ci].from)
                    .find(|l| matches!(l.place, Place::Mem(_)))
            }),
            Place::Mem(_) if strided => Some(loc),
            // One transfer of the whole run instead of one per step (and
            // one wait): the instruction reads its slices in place.
            Place::Mem(_) if self.opts.stage_runs => Some(loc),
            Place::Mem(_) => None,
        }
        .filter(|l| *l != whole.loc());
        let (Some(stage_loc), Some(staged)) = (stage_loc, staged) else {
            let src = if transposed {
                whole.view(c0, r0, cols, rows)
            } else {
                whole.view(r0, c0, rows, cols)
            };
            // A strided operand takes a buffer with aligned rows.
            return self
                .e
                .to_loc(
                    Val::Mem(src),
                    loc,
                    None,
                    if strided { Pad::Aligned } else { Pad::Dense },
                )
                .map_err(err);
        };
        // The reduction offset of this step and the extent of the other dimension.
        let (k0, other0, other) = if is_a { (c0, r0, rows) } else { (r0, c0, cols) };
        let kstep = if is_a { cols } else { rows };
        let fresh = staged
            .as_ref()
            .is_none_or(|s| s.other0 != other0 || s.other != other || s.band(k0, kstep).is_none());
        if fresh {
            let Place::Mem(sm) = stage_loc.place else {
                unreachable!()
            };
            // A run takes up to a quarter of the memory, counted in 4-byte
            // elements. A reduction longer than that comes in several runs,
            // which every column tile stages again (an eighth, until
            // 2026-12-04, cut 256 rows of K = 8192 in two).
            let esz = 4i64.max(stage_loc.dtype.bytes() as i64);
            let budget = self.e.m.memories[sm.index()].size.value / 4 / (other.max(1) * esz);
            let step = p.tk.max(1);
            let run = (budget / step).max(1) * step;
            let len = machine::rup(p.k - k0, step).min(run).max(kstep);
            // The buffer suits both the copy out of it and the one into it
            // (a conversion through registers stores whole register rows).
            let pad = if strided {
                Pad::Aligned
            } else {
                let out = self
                    .info
                    .path(&[stage_loc], loc)
                    .and_then(|(_, ch)| ch.first().map(|&ci| self.info.copies[ci].pad()));
                let into = self
                    .info
                    .path(&[whole.loc()], stage_loc)
                    .and_then(|(_, ch)| ch.last().map(|&ci| self.info.copies[ci].pad()));
                out.max(into).unwrap_or(Pad::Dense)
            };
            // In bands where each can be brought in alone (a band's start
            // may not meet a transfer's alignment), else whole.
            let mut bands = None;
            if self.opts.band_runs {
                // Bands of at least MIN_BAND bytes: smaller ones would
                // wait more for their transfers than they let start early.
                let per_index = other.max(1) * whole.dtype.bytes() as i64;
                let unit = step.max(kstep);
                let unit = unit * (MIN_BAND / (per_index * unit).max(1)).max(1);
                let widths = band_lengths(len, unit);
                if widths.len() > 1 {
                    let cp = self.e.checkpoint();
                    bands = self
                        .stage_bands(
                            &whole,
                            is_a,
                            (r0, c0),
                            (rows, cols),
                            k0,
                            &widths,
                            stage_loc,
                            pad,
                        )
                        .ok();
                    if bands.is_none() {
                        self.e.rollback(cp);
                    }
                }
            }
            let bands = match bands {
                Some(b) => b,
                None => self.stage_bands(
                    &whole,
                    is_a,
                    (r0, c0),
                    (rows, cols),
                    k0,
                    &[len],
                    stage_loc,
                    pad,
                )?,
            };
            *staged = Some(Staged {
                k0,
                other0,
                other,
                bands,
            });
        }
        let (band, at) = staged
            .as_ref()
            .and_then(|s| s.band(k0, kstep))
            .ok_or_else(|| err("staging"))?;
        let slice = if is_a {
            band.view(0, at, rows, cols)
        } else {
            band.view(at, 0, rows, cols)
        };
        if Place::Mem(slice.mem) == loc.place && slice.dtype == loc.dtype {
            return Ok(Val::Mem(slice));
        }
        self.e
            .to_loc(Val::Mem(slice), loc, None, Pad::Dense)
            .map_err(err)
    }

    /// Brings reduction indices `k0..` of operand `whole` to `at` in bands
    /// of `widths`: `(first index within the run, width, tile)` each.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stage_bands(
        &mut self,
        whole: &MemTile,
        is_a: bool,
        (r0, c0): (i64, i64),
        (rows, cols): (i64, i64),
        k0: i64,
        widths: &[i64],
        at: Loc,
        pad: Pad,
    ) -> Result<Vec<(i64, i64, MemTile)>, LowerError> {
        let mut bands = Vec::with_capacity(widths.len());
        let mut b0 = 0;
        for &w in widths {
            let src = if is_a {
                whole.view(r0, k0 + b0, rows, w)
            } else {
                whole.view(k0 + b0, c0, w, cols)
            };
            let landed = self.e.to_loc(Val::Mem(src), at, None, pad);
            match landed.map_err(err)? {
                Val::Mem(t) => bands.push((b0, w, t)),
                Val::Reg(_) | Val::Splat(_) => {
                    return Err(err("staged operand landed in a register"));
                }
            }
            b0 += w;
        }
        Ok(bands)
    }

    /// A tile of a constant operand kept resident at home in the exact layout
    /// (strides, alignment) the contraction instruction reads it in.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resident_tile(
        &mut self,
        v: ValueId,
        batch_row0: i64,
        dims: &[Role],
        dt: DType,
        p: &MatMulPlan,
        r0: i64,
        c0: i64,
        mnk: (i64, i64, i64),
        form: &Contraction,
        is_a: bool,
    ) -> Result<Val, LowerError> {
        let key = PackKey::Residue {
            value: v,
            batch_row0,
            at: (r0, c0),
            mnk,
            inst: form.inst,
        };
        if let Some(t) = self.pool.packed.get(&key) {
            return Ok(Val::Mem(t.clone()));
        }
        self.note_packed(v, dt);
        self.pool.read_in_place.insert(v);
        let m = self.e.m;
        let op = &m.instructions[form.inst.index()].operands[if is_a { form.a } else { form.b }];
        let OperandKind::Mem { align, stride, .. } = &op.kind else {
            return Err(err("resident operand is not in memory"));
        };
        let params: Vec<i64> = m.params.iter().map(|q| q.value).collect();
        let shape = Contraction::shape(dims, mnk);
        let strides: Vec<i64> = match stride {
            Some(s) => s
                .iter()
                .map(|e| isa_specs::eval::eval_int(e, &isa_specs::eval::Params(&params)))
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    err(format!(
                        "stride of a resident operand depends on immediates: {e}"
                    ))
                })?,
            None => isa_specs::select::dense(&shape),
        };
        let t = &self.g.constants[&v];
        let cols_src = *t.ty.shape.last().unwrap_or(&1) as i64;
        let (lr, lc) = if is_a { (p.m, p.k) } else { (p.k, p.n) };
        let extent: i64 = shape
            .iter()
            .zip(&strides)
            .map(|(n, s)| (n - 1) * s)
            .sum::<i64>()
            + 1;
        let mut data = vec![0.0f64; extent as usize];
        let rows_role = if is_a { Role::M } else { Role::K };
        for flat in 0..shape.iter().product::<i64>() {
            // Multi-index over the operand's dims.
            let mut rest = flat;
            let mut idx = vec![0i64; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = rest % shape[d];
                rest /= shape[d];
            }
            let (mut i, mut j) = (0, 0);
            for (d, role) in dims.iter().enumerate() {
                if *role == rows_role {
                    i = idx[d];
                } else {
                    j = idx[d];
                }
            }
            let (gi, gj) = (r0 + i, c0 + j);
            if gi < lr && gj < lc {
                let off: i64 = idx.iter().zip(&strides).map(|(x, s)| x * s).sum();
                data[off as usize] = t.data[((batch_row0 + gi) * cols_src + gj) as usize];
            }
        }
        let addr = self.alloc_home(extent as u64 * dt.bytes(), *align);
        self.pool.data.push(DataSegment {
            memory: m.memories[self.home_mem().index()].name.clone(),
            addr,
            bytes: encode(dt, data),
        });
        let pitch = if strides.len() == 2 {
            strides[0]
        } else {
            shape.last().copied().unwrap_or(1)
        };
        let (rows, cols) = if shape.len() == 2 {
            (shape[0], shape[1])
        } else {
            (1, shape[0])
        };
        let tile = MemTile {
            mem: self.home_mem(),
            dtype: dt,
            base: Base::Fixed(addr),
            offset: 0,
            rows,
            cols,
            pitch,
            ready: None,
        };
        self.pool.packed.insert(key, tile.clone());
        Ok(Val::Mem(tile))
    }
}
