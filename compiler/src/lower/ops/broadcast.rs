//! Operands broadcast and scaled: scalars splat into registers, rows loaded
//! into every row of a register, lanes broadcast, rows scaled by a scalar.

use super::*;

/// What a decomposed matrix product uses: a vector register file, a
/// vector-times-scalar instruction, and a scalar load.
#[derive(Clone, Debug, PartialEq)]
pub struct Scaled {
    /// Where vectors are: a one-dimensional register file.
    pub vector: Loc,
    /// Lanes of one register.
    pub width: i64,
    /// Where scalars are.
    pub scalar: Loc,
    /// The memory scalars are loaded from.
    pub scalar_src: Loc,
    /// `d[i] = a[i] * s`.
    pub mul: InstId,
    /// `s = src[0]`.
    pub load: InstId,
}

pub fn scalar_tensor(file: isa_specs::model::RegFileId, dtype: DType) -> TileTensor {
    TileTensor {
        dtype,
        shape: Vec::new(),
        place: TilePlace::Reg { file, reg: 0 },
    }
}

/// `d[i] = a[i] * s` over `w` lanes.
pub fn scale_op(tensors: Vec<TileTensor>, w: i64) -> TileOp {
    TileOp {
        tensors,
        extents: vec![w],
        target: TileAccess {
            tensor: 0,
            indices: vec![ix(0)],
        },
        op: AssignOp::Set,
        value: TileExpr::Binary(
            BinOp::Mul,
            Box::new(TileExpr::Access(TileAccess {
                tensor: 1,
                indices: vec![ix(0)],
            })),
            Box::new(TileExpr::Access(TileAccess {
                tensor: 2,
                indices: Vec::new(),
            })),
        ),
    }
}

/// The tile operations of a lane broadcast into `d` (`rows` x `cols`, or
/// `cols` lanes at rank 1) from the first lane of each row of `a`: a read of
/// lane 0 (`d[i, j] = a[i, 0]`, `d[i] = a[0]`) or a row reduction over one
/// lane (`d[i, j] = sum(k) a[i, k]`, `d[i] = sum(j) a[j]`, `k < 1`).
pub fn lane_ops(d: TileTensor, a: TileTensor, rank: usize, rows: i64, cols: i64) -> Vec<TileOp> {
    let zero = Affine {
        terms: Vec::new(),
        constant: 0,
        offsets: Vec::new(),
    };
    let op = |extents: Vec<i64>, target: Vec<Affine>, value: TileExpr| TileOp {
        tensors: vec![d.clone(), a.clone()],
        extents,
        target: TileAccess {
            tensor: 0,
            indices: target,
        },
        op: AssignOp::Set,
        value,
    };
    let read = |indices: Vec<Affine>| TileExpr::Access(TileAccess { tensor: 1, indices });
    let sum = |over: usize, indices: Vec<Affine>| {
        TileExpr::Reduce(
            ReduceOp::Sum,
            vec![IndexId(over as u32)],
            Box::new(read(indices)),
        )
    };
    if rank == 2 {
        vec![
            op(
                vec![rows, cols],
                vec![ix(0), ix(1)],
                read(vec![ix(0), zero]),
            ),
            op(
                vec![rows, cols, 1],
                vec![ix(0), ix(1)],
                sum(2, vec![ix(0), ix(2)]),
            ),
        ]
    } else {
        vec![
            op(vec![cols], vec![ix(0)], read(vec![zero])),
            op(vec![cols, 1], vec![ix(0)], sum(1, vec![ix(1)])),
        ]
    }
}

/// The tile operations of a load of one row of memory tile `a` into every
/// row of register `d` (`rows` x `cols`): `d[i, j] = a[j]` or
/// `d[i, j] = a[0, j]` (a bias or scale vector broadcast down the rows).
pub fn row_load_ops(d: TileTensor, a: &MemTile, rows: i64, cols: i64) -> Vec<(TileOp, Ref)> {
    let zero = Affine {
        terms: Vec::new(),
        constant: 0,
        offsets: Vec::new(),
    };
    [vec![ix(1)], vec![zero, ix(1)]]
        .into_iter()
        .map(|indices| {
            let shape = if indices.len() == 1 {
                vec![cols]
            } else {
                vec![1, cols]
            };
            let (at, ar) = Emitter::mem_tensor(a, shape);
            let op = TileOp {
                tensors: vec![d.clone(), at],
                extents: vec![rows, cols],
                target: TileAccess {
                    tensor: 0,
                    indices: vec![ix(0), ix(1)],
                },
                op: AssignOp::Set,
                value: TileExpr::Access(TileAccess { tensor: 1, indices }),
            };
            (op, ar)
        })
        .collect()
}

/// Whether some register file of a float type loads one row of memory into
/// every row of a register (`load_row_broadcast`).
pub fn can_broadcast_rows(e: &Emitter) -> bool {
    e.m.regfiles.iter().enumerate().any(|(fi, f)| {
        let file = isa_specs::model::RegFileId(fi as u32);
        if !f.dtype.is_float() || f.shape.len() != 2 {
            return false;
        }
        let d = TileTensor {
            dtype: f.dtype,
            shape: vec![1, 1],
            place: TilePlace::Reg { file, reg: 0 },
        };
        e.m.memories.iter().enumerate().any(|(mi, _)| {
            let a = MemTile {
                mem: isa_specs::model::MemId(mi as u32),
                dtype: f.dtype,
                base: crate::lower::emit::Base::Fixed(0),
                offset: 0,
                rows: 1,
                cols: 1,
                pitch: 1,
                ready: None,
            };
            row_load_ops(d.clone(), &a, 1, 1)
                .iter()
                .any(|(op, _)| !e.isa.match_op(e.m, op).is_empty())
        })
    })
}

/// Row 0 of memory tile `a` (`w` columns, on chip) in every one of the `h`
/// rows of a new register of `file` (a constant row broadcast down a tile).
pub fn load_row_broadcast(
    e: &mut Emitter,
    a: &MemTile,
    file: isa_specs::model::RegFileId,
    (gr, gc): (i64, i64),
    h: i64,
    w: i64,
) -> Result<RegTile, String> {
    let dtype = e.m.regfiles[file.index()].dtype;
    let d = e.vreg(file);
    let mut last = "no instruction loads a row into every row of a register".to_owned();
    for rows in [h, gr] {
        for cols in [w, gc.min(a.cols.max(w))] {
            let (dt, dr) = Emitter::reg_tensor(file, dtype, d, vec![rows, cols]);
            for (op, ar) in row_load_ops(dt, &a.view(0, 0, 1, cols), rows, cols) {
                match e.emit(&op, &[dr, ar], None) {
                    Ok(_) => {
                        return Ok(RegTile {
                            file,
                            dtype,
                            reg: d,
                            rows: h,
                            cols: w,
                        });
                    }
                    Err(err) => last = err,
                }
            }
        }
    }
    Err(format!(
        "cannot broadcast a row down the rows of `{}`: {last}",
        e.m.regfiles[file.index()].name
    ))
}

/// The register file of a float type where an instruction writes one
/// immediate into every element (`d[i, j] = v`) and `ew` is computed, if any.
pub fn splat_file(e: &Emitter, ew: Ew) -> Option<isa_specs::model::RegFileId> {
    let forms = ew_forms(e, ew);
    e.m.regfiles.iter().enumerate().find_map(|(fi, f)| {
        let file = isa_specs::model::RegFileId(fi as u32);
        let here = Place::Reg(file);
        if !f.dtype.is_float() || !forms.iter().any(|x| x.locs.iter().all(|l| l.place == here)) {
            return None;
        }
        let op = splat_op(file, f.dtype, 0, &vec![1; f.shape.len()], 1.0).0;
        e.isa
            .match_op(e.m, &op)
            .iter()
            .any(|(id, b)| {
                let operand = |t: usize| b.operand.iter().position(|x| *x == Some(t));
                let imm = operand(1).is_some_and(|oi| {
                    !matches!(
                        e.m.instructions[id.index()].operands[oi].kind,
                        OperandKind::Reg { .. } | OperandKind::Mem { .. }
                    )
                });
                imm && operand(0)
                    .and_then(|oi| operand_loc(e.m, *id, oi))
                    .is_some_and(|l| l.place == here)
            })
            .then_some(file)
    })
}

/// `d = v` in every element of register `reg` of `file` (shape `shape`),
/// `v` an immediate operand.
pub fn splat_op(
    file: isa_specs::model::RegFileId,
    dtype: DType,
    reg: u32,
    shape: &[i64],
    v: f64,
) -> (TileOp, [Ref; 2]) {
    let (d, r) = Emitter::reg_tensor(file, dtype, reg, shape.to_vec());
    let k = TileTensor {
        dtype,
        shape: Vec::new(),
        place: TilePlace::Real(v as f32),
    };
    let op = TileOp {
        tensors: vec![d, k],
        extents: shape.to_vec(),
        target: TileAccess {
            tensor: 0,
            indices: (0..shape.len()).map(ix).collect(),
        },
        op: AssignOp::Set,
        value: TileExpr::Access(TileAccess {
            tensor: 1,
            indices: Vec::new(),
        }),
    };
    (op, [r, Ref::Fixed])
}

/// A register of `file` holding `v` in every element ([`Val::Splat`]).
pub fn splat(e: &mut Emitter, file: isa_specs::model::RegFileId, v: f64) -> Result<Val, String> {
    let f = &e.m.regfiles[file.index()];
    let (dtype, shape): (DType, Vec<i64>) = (f.dtype, f.shape.iter().map(|d| d.value).collect());
    let reg = e.vreg(file);
    let (op, refs) = splat_op(file, dtype, reg, &shape, v);
    e.emit(&op, &refs, None)?;
    let (rows, cols) = match shape.as_slice() {
        [c] => (1, *c),
        [r, c] => (*r, *c),
        _ => return Err("a register of rank other than 1 or 2".to_owned()),
    };
    Ok(Val::Splat(RegTile {
        file,
        dtype,
        reg,
        rows,
        cols,
    }))
}

/// The scalar register file a one-dimensional float file `file` broadcasts
/// from (`d[i] = s`, pim-dram's `vbcast`), of the same type: a row result
/// in memory reaches every lane through it (a scalar load, a broadcast)
/// where the file has no broadcast of its own lanes.
pub fn scalar_broadcast_file(
    e: &Emitter,
    file: isa_specs::model::RegFileId,
) -> Option<isa_specs::model::RegFileId> {
    let f = &e.m.regfiles[file.index()];
    if f.shape.len() != 1 || !f.dtype.is_float() {
        return None;
    }
    let gc = f.shape[0].value;
    (0..e.m.regfiles.len())
        .map(|i| isa_specs::model::RegFileId(i as u32))
        .find(|&sf| {
            let s = &e.m.regfiles[sf.index()];
            if !s.shape.is_empty() || s.dtype != f.dtype {
                return false;
            }
            let (op, _) = scalar_broadcast_op(file, sf, f.dtype, (0, 0), gc);
            !e.isa.match_op(e.m, &op).is_empty()
        })
}

/// `d[i] = s` over `w` lanes of register `d` of `file` from register `s` of
/// scalar file `sf`.
fn scalar_broadcast_op(
    file: isa_specs::model::RegFileId,
    sf: isa_specs::model::RegFileId,
    dtype: DType,
    (d, s): (u32, u32),
    w: i64,
) -> (TileOp, [Ref; 2]) {
    let (dt, dr) = Emitter::reg_tensor(file, dtype, d, vec![w]);
    let (st, sr) = Emitter::reg_tensor(sf, dtype, s, Vec::new());
    let op = TileOp {
        tensors: vec![dt, st],
        extents: vec![w],
        target: TileAccess {
            tensor: 0,
            indices: vec![ix(0)],
        },
        op: AssignOp::Set,
        value: TileExpr::Access(TileAccess {
            tensor: 1,
            indices: Vec::new(),
        }),
    };
    (op, [dr, sr])
}

/// Scalar register `s` (of a scalar file) in the first lanes of a new
/// register of one-dimensional `file` ([`scalar_broadcast_file`]), by the
/// first of the `widths` an instruction takes (the result says the last).
pub fn broadcast_scalar(
    e: &mut Emitter,
    s: &RegTile,
    file: isa_specs::model::RegFileId,
    widths: &[i64],
) -> Result<RegTile, String> {
    let dtype = e.m.regfiles[file.index()].dtype;
    let w = widths.last().copied().unwrap_or(1);
    let d = e.vreg(file);
    let mut last = String::new();
    for &width in widths {
        let (op, refs) = scalar_broadcast_op(file, s.file, dtype, (d, s.reg), width);
        match e.emit(&op, &refs, None) {
            Ok(_) => {
                return Ok(RegTile {
                    file,
                    dtype,
                    reg: d,
                    rows: 1,
                    cols: w,
                });
            }
            Err(err) => last = err,
        }
    }
    Err(format!(
        "cannot broadcast a scalar register into `{}`: {last}",
        e.m.regfiles[file.index()].name
    ))
}

/// Row result `t` (`h` x 1, in memory) in every lane of a register of the
/// file at `loc` (`h` x `w` used): loaded and broadcast along the lanes
/// ([`broadcast_lanes`]), or, for one row in a file without that, loaded
/// into a scalar register and broadcast from there ([`broadcast_scalar`]).
pub fn broadcast_column(
    e: &mut Emitter,
    t: &MemTile,
    loc: Loc,
    (gr, gc): (i64, i64),
    h: i64,
    w: i64,
) -> Result<RegTile, String> {
    let Place::Reg(file) = loc.place else {
        return Err("a row result broadcast outside the registers".to_owned());
    };
    if !lane_broadcast_files(e).contains(&file)
        && h == 1
        && let Some(sf) = scalar_broadcast_file(e, file)
    {
        let s = load_scalar(e, sf, &t.view(0, 0, 1, 1))?;
        let gc = e.m.regfiles[file.index()].shape[0].value;
        return broadcast_scalar(e, &s, file, &[gc, w]);
    }
    let Val::Reg(a) = e.to_loc(Val::Mem(t.view(0, 0, h, 1)), loc, None, Pad::Dense)? else {
        return Err("a row result did not land in a register".to_owned());
    };
    broadcast_lanes(e, &a, (gr, gc), h, w)
}

/// Element `t` (one element in memory) in a new register of scalar file
/// `sf`: a scalar load, from the memory that load reads (the element is
/// first brought there if it is elsewhere).
pub fn load_scalar(
    e: &mut Emitter,
    sf: isa_specs::model::RegFileId,
    t: &MemTile,
) -> Result<RegTile, String> {
    let dtype = e.m.regfiles[sf.index()].dtype;
    let probe = load_op(vec![
        scalar_tensor(sf, dtype),
        TileTensor {
            dtype,
            shape: vec![1],
            place: TilePlace::Imm(0),
        },
    ]);
    let src = e
        .isa
        .match_op(e.m, &probe)
        .into_iter()
        .find_map(|(id, b)| {
            let oi = b.operand.iter().position(|x| *x == Some(1))?;
            operand_loc(e.m, id, oi)
                .filter(|l| l.dtype == dtype && matches!(l.place, Place::Mem(_)))
        })
        .ok_or_else(|| {
            format!(
                "no load of one {} into `{}`",
                dtype.name(),
                e.m.regfiles[sf.index()].name
            )
        })?;
    let at = if t.loc() == src {
        t.clone()
    } else {
        match e.to_loc(Val::Mem(t.clone()), src, None, Pad::Dense)? {
            Val::Mem(m) => m,
            _ => return Err("an element staged outside memory".to_owned()),
        }
    };
    // Read only once its transfer has landed.
    e.ready(&at)?;
    let s = e.vreg(sf);
    let (st, sr) = Emitter::reg_tensor(sf, dtype, s, Vec::new());
    let (xt, xr) = Emitter::mem_tensor(&at, vec![1]);
    e.emit(&load_op(vec![st, xt]), &[sr, xr], None)?;
    Ok(RegTile {
        file: sf,
        dtype,
        reg: s,
        rows: 1,
        cols: 1,
    })
}

/// Register files a row result can be broadcast along the lanes of:
/// [`lane_broadcast_files`], and one-dimensional files with a broadcast
/// from a scalar file ([`broadcast_column`]).
pub fn row_broadcast_files(e: &Emitter) -> Vec<isa_specs::model::RegFileId> {
    let mut files = lane_broadcast_files(e);
    for i in 0..e.m.regfiles.len() {
        let f = isa_specs::model::RegFileId(i as u32);
        if !files.contains(&f) && scalar_broadcast_file(e, f).is_some() {
            files.push(f);
        }
    }
    files
}

/// Register files of the machine that can broadcast the first lane of a row
/// to every lane ([`broadcast_lanes`]).
pub fn lane_broadcast_files(e: &Emitter) -> Vec<isa_specs::model::RegFileId> {
    let mut files = Vec::new();
    for (fi, f) in e.m.regfiles.iter().enumerate() {
        let file = isa_specs::model::RegFileId(fi as u32);
        let rank = f.shape.len();
        if !f.dtype.is_float() || !(1..=2).contains(&rank) {
            continue;
        }
        let t = |shape: Vec<i64>| TileTensor {
            dtype: f.dtype,
            shape,
            place: TilePlace::Reg { file, reg: 0 },
        };
        let ones = vec![1; rank];
        let found = lane_ops(t(ones.clone()), t(ones), rank, 1, 1)
            .iter()
            .any(|op| {
                e.isa.match_op(e.m, op).iter().any(|(id, b)| {
                    (0..2).all(|t| {
                        b.operand
                            .iter()
                            .position(|x| *x == Some(t))
                            .and_then(|oi| operand_loc(e.m, *id, oi))
                            .is_some_and(|l| l.place == Place::Reg(file))
                    })
                })
            });
        if found {
            files.push(file);
        }
    }
    files
}

/// Lane 0 of each of the `h` rows of register `a` in every lane of a new
/// register of the same file (`h` x `w` used; the instruction may write the
/// whole `gr` x `gc` register): a row result (a maximum, a sum) broadcast
/// along the row without a product with a row of ones.
pub fn broadcast_lanes(
    e: &mut Emitter,
    a: &RegTile,
    (gr, gc): (i64, i64),
    h: i64,
    w: i64,
) -> Result<RegTile, String> {
    let rank = e.m.regfiles[a.file.index()].shape.len();
    let d = e.vreg(a.file);
    let mut last = "no instruction broadcasts a lane along a row".to_owned();
    let rows_tries = if rank == 2 { vec![h, gr] } else { vec![1] };
    for rows in rows_tries {
        for (cols, a_cols) in [(w, 1), (gc, 1), (w, gc), (gc, gc)] {
            let shape = |c: i64| if rank == 2 { vec![rows, c] } else { vec![c] };
            let (dt, dr) = Emitter::reg_tensor(a.file, a.dtype, d, shape(cols));
            let (at, ar) = Emitter::reg_tensor(a.file, a.dtype, a.reg, shape(a_cols));
            for op in lane_ops(dt, at, rank, rows, cols) {
                match e.emit(&op, &[dr, ar], None) {
                    Ok(_) => {
                        return Ok(RegTile {
                            file: a.file,
                            dtype: a.dtype,
                            reg: d,
                            rows: h,
                            cols: w,
                        });
                    }
                    Err(err) => last = err,
                }
            }
        }
    }
    Err(format!(
        "cannot broadcast a row result along the lanes of `{}`: {last}",
        e.m.regfiles[a.file.index()].name
    ))
}

/// `s = src[0]`.
pub fn load_op(tensors: Vec<TileTensor>) -> TileOp {
    let zero = Affine {
        terms: Vec::new(),
        constant: 0,
        offsets: Vec::new(),
    };
    scalar_op(tensors, vec![zero])
}

/// `s = src[indices]` into a scalar (`s = src` with no indices).
pub fn scalar_op(tensors: Vec<TileTensor>, indices: Vec<Affine>) -> TileOp {
    TileOp {
        tensors,
        extents: Vec::new(),
        target: TileAccess {
            tensor: 0,
            indices: Vec::new(),
        },
        op: AssignOp::Set,
        value: TileExpr::Access(TileAccess { tensor: 1, indices }),
    }
}

/// The machine's way to scale a vector by a loaded scalar, if it has one (and vector adds).
pub fn scaled_rows(e: &Emitter) -> Option<Scaled> {
    let adds = ew_forms(e, Ew::Add);
    for (fi, f) in e.m.regfiles.iter().enumerate() {
        let file = isa_specs::model::RegFileId(fi as u32);
        let [w] = f.shape.as_slice() else { continue };
        if !f.dtype.is_float() {
            continue;
        }
        let vector = Loc {
            place: Place::Reg(file),
            dtype: f.dtype,
        };
        if !adds
            .iter()
            .any(|a| a.rank == 1 && a.locs.iter().all(|l| *l == vector))
        {
            continue;
        }
        for (si, sf) in e.m.regfiles.iter().enumerate() {
            let sfile = isa_specs::model::RegFileId(si as u32);
            if !sf.shape.is_empty() || sf.dtype != f.dtype {
                continue;
            }
            let v = |t| Emitter::reg_tensor(file, f.dtype, t, vec![w.value]).0;
            let op = scale_op(vec![v(0), v(0), scalar_tensor(sfile, sf.dtype)], w.value);
            let Some((mul, _)) = e
                .isa
                .match_op(e.m, &op)
                .into_iter()
                .find(|(id, b)| isa_specs::select::finish(e.m, *id, b, &op).is_ok())
            else {
                continue;
            };
            // A scalar load, from any memory.
            let probe = load_op(vec![
                scalar_tensor(sfile, sf.dtype),
                TileTensor {
                    dtype: sf.dtype,
                    shape: vec![1],
                    place: TilePlace::Imm(0),
                },
            ]);
            for (id, b) in e.isa.match_op(e.m, &probe) {
                let Some(oi) = b.operand.iter().position(|x| *x == Some(1)) else {
                    continue;
                };
                let Some(src) = operand_loc(e.m, id, oi) else {
                    continue;
                };
                if src.dtype == sf.dtype && matches!(src.place, Place::Mem(_)) {
                    return Some(Scaled {
                        vector,
                        width: w.value,
                        scalar: Loc {
                            place: Place::Reg(sfile),
                            dtype: sf.dtype,
                        },
                        scalar_src: src,
                        mul,
                        load: id,
                    });
                }
            }
        }
    }
    None
}

/// Loads one element of a memory tile into a fresh scalar register.
pub fn scalar_load(e: &mut Emitter, sc: &Scaled, at: &MemTile) -> Result<Val, String> {
    let Place::Reg(file) = sc.scalar.place else {
        return Err("scalars not in registers".to_owned());
    };
    let s = e.vreg(file);
    let (src, sr) = Emitter::mem_tensor(at, vec![1]);
    let op = load_op(vec![scalar_tensor(file, sc.scalar.dtype), src]);
    e.emit(&op, &[Ref::VReg(file, s), sr], Some(sc.load))?;
    Ok(Val::Reg(RegTile {
        file,
        dtype: sc.scalar.dtype,
        reg: s,
        rows: 1,
        cols: 1,
    }))
}

/// `row * s` over `w` lanes, into a fresh vector register.
pub fn scale(e: &mut Emitter, sc: &Scaled, row: Val, s: Val, w: i64) -> Result<Val, String> {
    let (Val::Reg(row), Val::Reg(s)) = (row, s) else {
        return Err("scaling operands not in registers".to_owned());
    };
    let d = e.vreg(row.file);
    let mut last = String::new();
    for width in [w, sc.width] {
        let op = scale_op(
            vec![
                Emitter::reg_tensor(row.file, row.dtype, d, vec![width]).0,
                Emitter::reg_tensor(row.file, row.dtype, row.reg, vec![width]).0,
                scalar_tensor(s.file, s.dtype),
            ],
            width,
        );
        match e.emit(
            &op,
            &[
                Ref::VReg(row.file, d),
                Ref::VReg(row.file, row.reg),
                Ref::VReg(s.file, s.reg),
            ],
            Some(sc.mul),
        ) {
            Ok(_) => {
                return Ok(Val::Reg(RegTile {
                    file: row.file,
                    dtype: row.dtype,
                    reg: d,
                    rows: 1,
                    cols: w,
                }));
            }
            Err(err) => last = err,
        }
    }
    Err(last)
}

/// `a + b` of two vectors of `w` lanes already in registers of `sc.vector`, into a fresh register.
pub fn add_vectors(e: &mut Emitter, sc: &Scaled, a: Val, b: Val, w: i64) -> Result<Val, String> {
    let form = ew_forms(e, Ew::Add)
        .into_iter()
        .find(|f| f.rank == 1 && f.locs.iter().all(|l| *l == sc.vector))
        .ok_or_else(|| "no vector add in the vector registers".to_owned())?;
    let step = Step {
        ew: Ew::Add,
        other: None,
        swapped: false,
        third: None,
    };
    reg_op(e, &form, &step, a, Some(b), None, 1, w)
}
