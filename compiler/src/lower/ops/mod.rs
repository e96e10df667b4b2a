//! Tile-level lowering of the compute operations: element-wise chains and
//! contractions (matrix products), each found among the machine's
//! instructions by its semantics.

use super::LowerError;
use super::emit::{Emitter, MemTile, Pad, Ref, RegTile, Val};
use super::machine::{Loc, Place, operand_loc};
pub use super::types::{Ew, EwForm};

mod broadcast;
mod contraction;
pub use broadcast::*;
pub use contraction::*;
use isa_specs::model::{
    Affine, AssignOp, BinOp, DType, Func, IndexId, InstId, OperandKind, ReduceOp, SemExpr,
};
use isa_specs::select::{TileAccess, TileExpr, TileOp, TilePlace, TileTensor};

fn ix(i: usize) -> Affine {
    Affine {
        terms: vec![(IndexId(i as u32), 1)],
        constant: 0,
        offsets: Vec::new(),
    }
}

fn access(tensor: usize, rank: usize) -> TileExpr {
    TileExpr::Access(TileAccess {
        tensor,
        indices: super::emit::identity_indices(rank),
    })
}

/// The tile operation of `ew` over tensors `[d, a, b]`.
fn ew_op(ew: Ew, tensors: Vec<TileTensor>, shape: &[i64]) -> TileOp {
    let r = shape.len();
    let (a, b) = (access(1, r), access(2, r));
    let value = match ew {
        Ew::Add => TileExpr::Binary(BinOp::Add, Box::new(a), Box::new(b)),
        Ew::Sub => TileExpr::Binary(BinOp::Sub, Box::new(a), Box::new(b)),
        Ew::Mul => TileExpr::Binary(BinOp::Mul, Box::new(a), Box::new(b)),
        Ew::Div => TileExpr::Binary(BinOp::Div, Box::new(a), Box::new(b)),
        Ew::Max => TileExpr::Call(Func::Max, vec![a, b]),
        Ew::Relu => TileExpr::Call(Func::Max, vec![a, TileExpr::Const(0.0)]),
        Ew::Recip => TileExpr::Call(Func::Recip, vec![a]),
        Ew::Min => TileExpr::Call(Func::Min, vec![a, b]),
        Ew::Neg => TileExpr::Neg(Box::new(a)),
        Ew::Call(f) => TileExpr::Call(f, vec![a]),
        Ew::MulAdd => TileExpr::Binary(
            BinOp::Add,
            Box::new(TileExpr::Binary(BinOp::Mul, Box::new(a), Box::new(b))),
            Box::new(access(3, r)),
        ),
    };
    TileOp {
        tensors,
        extents: shape.to_vec(),
        target: TileAccess {
            tensor: 0,
            indices: (0..r).map(ix).collect(),
        },
        op: AssignOp::Set,
        value,
    }
}

/// Every instruction form of `ew` on the machine.
pub fn ew_forms(e: &Emitter, ew: Ew) -> Vec<EwForm> {
    if let Some(hit) = e.ew_cache.borrow().get(&ew) {
        return hit.clone();
    }
    let out = search_forms(e, ew);
    e.ew_cache.borrow_mut().insert(ew, out.clone());
    out
}

/// The cycles `ew`'s cheapest instruction occupies its unit for one
/// register's tile (or one element, in memory), or `None` where no
/// instruction computes it: instruction selection's costs
/// ([`crate::passes::select::Costs`]).
pub fn ew_cost(e: &Emitter, ew: Ew) -> Option<f64> {
    let forms = ew_forms(e, ew);
    let occupancy = |f: &EwForm| {
        let shape = match f.locs[0].place {
            Place::Reg(file) => {
                let (r, c) = e.granule(file);
                if f.rank == 1 { vec![r * c] } else { vec![r, c] }
            }
            Place::Mem(_) => vec![1; f.rank],
        };
        let tensors = f
            .locs
            .iter()
            .map(|l| TileTensor {
                dtype: l.dtype,
                shape: shape.clone(),
                place: match l.place {
                    Place::Reg(file) => TilePlace::Reg { file, reg: 0 },
                    Place::Mem(mem) => TilePlace::Mem {
                        mem,
                        addr: 0,
                        strides: isa_specs::select::dense(&shape),
                    },
                },
            })
            .collect();
        let (mi, _) = e.choose(&ew_op(ew, tensors, &shape), Some(f.inst)).ok()?;
        Some(e.isa.occupancy(e.m, &mi).max(1) as f64)
    };
    let best = forms.iter().filter_map(occupancy).min_by(f64::total_cmp);
    // A form whose probe the instruction does not take still computes it.
    best.or_else(|| (!forms.is_empty()).then_some(1.0))
}

fn search_forms(e: &Emitter, ew: Ew) -> Vec<EwForm> {
    let mut out = Vec::new();
    for rank in [2, 1] {
        let n = ew.tensors();
        let shape = vec![1; rank];
        let tensors = (0..n)
            .map(|_| TileTensor {
                dtype: DType::F32,
                shape: shape.clone(),
                place: TilePlace::Imm(0),
            })
            .collect();
        let op = ew_op(ew, tensors, &shape);
        for (id, b) in e.isa.match_op(e.m, &op) {
            let locs: Option<Vec<Loc>> = (0..n)
                .map(|t| {
                    let oi = b.operand.iter().position(|x| *x == Some(t))?;
                    operand_loc(e.m, id, oi)
                })
                .collect();
            if let Some(locs) = locs
                && locs.iter().all(|l| l.dtype.is_float())
            {
                out.push(EwForm {
                    inst: id,
                    rank,
                    locs,
                });
            }
        }
    }
    out
}

/// One step of an element-wise chain: the running value `op` another tile.
#[derive(Clone, Debug)]
pub struct Step {
    /// The operation.
    pub ew: Ew,
    /// The second operand (same shape as the running value), if binary.
    pub other: Option<Val>,
    /// Whether the running value is the second operand (`other - x`).
    pub swapped: bool,
    /// The addend of a fused multiply-add.
    pub third: Option<Val>,
}

/// Merges a multiply followed by an add into one multiply-add step where some
/// register file has all three instructions (one instruction instead of two).
fn fuse_mul_add(e: &Emitter, steps: &[Step]) -> Vec<Step> {
    let places = |ew| {
        ew_forms(e, ew)
            .into_iter()
            .filter(|f| matches!(f.locs[0].place, Place::Reg(_)))
            .map(|f| f.locs[0])
            .collect::<Vec<_>>()
    };
    let fused = places(Ew::MulAdd);
    let worth = fused
        .iter()
        .any(|l| places(Ew::Mul).contains(l) && places(Ew::Add).contains(l));
    let mut out: Vec<Step> = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        if worth
            && steps[i].ew == Ew::Mul
            && steps
                .get(i + 1)
                .is_some_and(|n| n.ew == Ew::Add && n.other.is_some())
            && steps[i].other.is_some()
        {
            // x * y + z, and z + x * y (IEEE addition commutes exactly).
            out.push(Step {
                ew: Ew::MulAdd,
                other: steps[i].other.clone(),
                swapped: false,
                third: steps[i + 1].other.clone(),
            });
            i += 2;
            continue;
        }
        out.push(steps[i].clone());
        i += 1;
    }
    out
}

/// The memory a tile lands in on its way from `from` to register file `file`.
pub(super) fn landing(e: &Emitter, from: Loc, to: Loc) -> Option<Loc> {
    let (_, chain) = e.info.path(&[from], to)?;
    chain
        .iter()
        .rev()
        .map(|&c| e.info.copies[c].from)
        .find(|l| matches!(l.place, Place::Mem(_)))
        .or(Some(from).filter(|l| matches!(l.place, Place::Mem(_))))
}

/// Runs a chain of element-wise steps on `input`; the result is an on-chip memory tile.
pub fn chain(e: &mut Emitter, input: Val, steps: &[Step]) -> Result<Val, LowerError> {
    chain_into(e, input, steps, None)
}

/// [`chain`], its last run of register steps storing straight into `dst`
/// (an on-chip tile of the result's shape) where the registers' stores land
/// there and cannot write past it: no copy of the result afterwards.
pub fn chain_into(
    e: &mut Emitter,
    input: Val,
    steps: &[Step],
    dst: Option<&MemTile>,
) -> Result<Val, LowerError> {
    let steps = &fuse_mul_add(e, steps)[..];
    let mut cur = input;
    let mut i = 0;
    while i < steps.len() {
        // The longest run of steps that one register file computes.
        let forms: Vec<Vec<EwForm>> = steps[i..].iter().map(|s| ew_forms(e, s.ew)).collect();
        if forms[0].is_empty() {
            let semantics = steps[i].ew.text();
            return Err(LowerError::MissingOperation {
                message: format!(
                    "cannot compile: the target lacks `{semantics}` (no instruction has these semantics)"
                ),
                semantics,
            });
        }
        let mut group: Option<(Loc, usize, Vec<EwForm>)> = None;
        for f in &forms[0] {
            let Place::Reg(_) = f.locs[0].place else {
                continue;
            };
            if f.locs.iter().any(|l| *l != f.locs[0]) {
                continue;
            }
            let mut chosen = vec![f.clone()];
            for fs in &forms[1..] {
                match fs
                    .iter()
                    .find(|g| g.rank == f.rank && g.locs.iter().all(|l| *l == f.locs[0]))
                {
                    Some(g) => chosen.push(g.clone()),
                    None => break,
                }
            }
            if group.as_ref().is_none_or(|(_, n, _)| chosen.len() > *n) {
                group = Some((f.locs[0], chosen.len(), chosen));
            }
        }
        match group {
            Some((loc, n, chosen)) => {
                let into = if i + n == steps.len() { dst } else { None };
                cur = reg_chain(e, cur, &steps[i..i + n], &chosen, loc, into)?;
                i += n;
            }
            None => {
                let narrow = |v: &Option<Val>| {
                    v.as_ref().is_some_and(|v| {
                        (v.dims().1 == 1 && cur.dims().1 > 1)
                            || (v.dims().0 == 1 && cur.dims().0 > 1)
                    })
                };
                if narrow(&steps[i].other) || narrow(&steps[i].third) {
                    return Err(format!(
                        "cannot broadcast an operand along the lanes or rows for `{}`: no register file computes it",
                        steps[i].ew.text()
                    )
                    .into());
                }
                cur = mem_step(e, cur, &steps[i], &forms[0])?;
                i += 1;
            }
        }
    }
    Ok(cur)
}

/// Brings a tile to an on-chip memory tile at `loc` (as a whole).
fn to_mem(e: &mut Emitter, v: Val, loc: Loc, pad: Pad) -> Result<MemTile, String> {
    match e.to_loc(v, loc, None, pad)? {
        Val::Mem(t) => Ok(t),
        Val::Reg(_) | Val::Splat(_) => Err("a tile landed in a register".to_owned()),
    }
}

/// Steps computed in registers of one file, granule by granule.
fn reg_chain(
    e: &mut Emitter,
    input: Val,
    steps: &[Step],
    forms: &[EwForm],
    loc: Loc,
    dst: Option<&MemTile>,
) -> Result<Val, String> {
    let Place::Reg(file) = loc.place else {
        return Err("not a register file".to_owned());
    };
    let dims: Vec<i64> = e.m.regfiles[file.index()]
        .shape
        .iter()
        .map(|d| d.value)
        .collect();
    let (gr, gc) = match dims.as_slice() {
        [c] => (1, *c),
        [r, c] => (*r, *c),
        _ => return Err("register granule of rank other than 1 or 2".to_owned()),
    };
    let land = |e: &Emitter, v: &Val| {
        landing(e, v.loc(), loc).ok_or_else(|| {
            format!(
                "no instruction sequence moves {} data from {} to {}",
                v.loc().dtype.name(),
                e.place_name(v.loc().place),
                e.place_name(loc.place)
            )
        })
    };
    let (rows, cols) = input.dims();
    // Landing buffers are padded when the loads from them write whole registers.
    let pad_for = |e: &Emitter, l: Loc| {
        e.info
            .path(&[l], loc)
            .and_then(|(_, chain)| chain.first().map(|&c| e.info.copies[c].pad()))
            .unwrap_or(Pad::Dense)
    };
    // A value already in one register of the file is used where it is.
    let in_reg = matches!(&input, Val::Reg(r) if r.file == file && rows <= gr && cols <= gc);
    let input = if in_reg {
        input
    } else {
        let l0 = land(e, &input)?;
        let pad = pad_for(e, l0);
        Val::Mem(to_mem(e, input, l0, pad)?)
    };
    // A one-column operand of a wider tile is a row result broadcast along
    // the lanes; a one-row operand of a taller tile, a row (a bias or scale
    // vector) broadcast down the rows.
    let narrow = |v: &Val| v.dims().1 == 1 && cols > 1;
    let flat = |v: &Val| matches!(v, Val::Mem(_)) && v.dims().0 == 1 && rows > 1 && !narrow(v);
    let mut others: Vec<Option<Val>> = Vec::new();
    let mut thirds: Vec<Option<Val>> = Vec::new();
    for s in steps {
        for (src, dst) in [(&s.other, &mut others), (&s.third, &mut thirds)] {
            dst.push(match src {
                // A value already in one register of the file is used where it is.
                Some(v @ Val::Reg(r))
                    if r.file == file && rows <= gr && cols <= gc && !narrow(v) =>
                {
                    Some(Val::Reg(r.clone()))
                }
                // A uniform constant serves every granule.
                Some(Val::Splat(r)) if r.file == file => Some(Val::Splat(r.clone())),
                Some(o) => {
                    let l = land(e, o)?;
                    let pad = pad_for(e, l);
                    Some(Val::Mem(to_mem(e, o.clone(), l, pad)?))
                }
                None => None,
            });
        }
    }
    // Where results land: where `dst` is if a store writes there (a
    // conversion on the way, bf16 for the products reading it), else the
    // first memory on the way back from the registers.
    let stores = |c: &&super::machine::Copy| {
        c.from == loc && matches!(c.to.place, Place::Mem(_)) && c.sem.is_none()
    };
    let copies = &e.info.copies;
    let store = dst
        .and_then(|d| copies.iter().filter(stores).find(|c| c.to == d.loc()))
        .or_else(|| copies.iter().find(stores))
        .cloned()
        .ok_or_else(|| format!("nothing stores {} back to memory", e.place_name(loc.place)))?;
    let back = store.to;
    let Place::Mem(back_mem) = back.place else {
        unreachable!()
    };
    // Whole-register stores may write past a tile that is not whole registers.
    let exact = store.narrow || (rows % gr == 0 && cols % gc == 0);
    let out = match dst {
        Some(d) if d.loc() == back && (d.rows, d.cols) == (rows, cols) && exact => d.clone(),
        _ => e.buffer_padded(
            back_mem,
            back.dtype,
            rows,
            cols,
            if store.narrow {
                Pad::Dense
            } else {
                Pad::Registers
            },
        ),
    };
    // A row operand of a tile one register wide is loaded once, into
    // every row of a register that serves all the tile's blocks of rows
    // (instead of a load per block on the load slots the blocks share).
    let hoist = |e: &mut Emitter, m: &Option<Val>| -> Result<Option<RegTile>, String> {
        match m {
            Some(Val::Mem(t)) if cols <= gc && rows > gr && flat(&Val::Mem(t.clone())) => Ok(Some(
                load_row_broadcast(e, &t.view(0, 0, 1, cols), file, (gr, gc), gr, cols)?,
            )),
            _ => Ok(None),
        }
    };
    let rows_of_others = others
        .iter()
        .map(|o| hoist(e, o))
        .collect::<Result<Vec<_>, _>>()?;
    let rows_of_thirds = thirds
        .iter()
        .map(|o| hoist(e, o))
        .collect::<Result<Vec<_>, _>>()?;
    let mut r = 0;
    while r < rows {
        let h = gr.min(rows - r);
        // Row results broadcast along the lanes, once per block of rows.
        let wide = |e: &mut Emitter, m: &Option<Val>| -> Result<Option<Val>, String> {
            match m {
                Some(Val::Mem(t)) if narrow(&Val::Mem(t.clone())) => Ok(Some(Val::Reg(
                    broadcast_column(e, &t.view(r, 0, h, 1), loc, (gr, gc), h, gc.min(cols))?,
                ))),
                _ => Ok(None),
            }
        };
        let held = |x: &Option<RegTile>| {
            x.as_ref().map(|x| {
                Val::Reg(RegTile {
                    rows: h,
                    ..x.clone()
                })
            })
        };
        let wide_others = others
            .iter()
            .zip(&rows_of_others)
            .map(|(o, x)| held(x).map_or_else(|| wide(e, o), |x| Ok(Some(x))))
            .collect::<Result<Vec<_>, _>>()?;
        let wide_thirds = thirds
            .iter()
            .zip(&rows_of_thirds)
            .map(|(o, x)| held(x).map_or_else(|| wide(e, o), |x| Ok(Some(x))))
            .collect::<Result<Vec<_>, _>>()?;
        let mut c = 0;
        while c < cols {
            let w = gc.min(cols - c);
            let mut x = match &input {
                Val::Mem(t) => e.to_loc(Val::Mem(t.view(r, c, h, w)), loc, None, Pad::Dense)?,
                Val::Reg(_) | Val::Splat(_) => input.clone(),
            };
            for (k, (s, f)) in steps.iter().zip(forms).enumerate() {
                let mut load =
                    |m: &Option<Val>, wide: &Option<Val>| -> Result<Option<Val>, String> {
                        match (m, wide) {
                            (_, Some(b)) => Ok(Some(b.clone())),
                            (Some(Val::Mem(m)), None) if flat(&Val::Mem(m.clone())) => {
                                Ok(Some(Val::Reg(load_row_broadcast(
                                    e,
                                    &m.view(0, c, 1, w),
                                    file,
                                    (gr, gc),
                                    h,
                                    w,
                                )?)))
                            }
                            (Some(Val::Mem(m)), None) => Ok(Some(e.to_loc(
                                Val::Mem(m.view(r, c, h, w)),
                                loc,
                                None,
                                Pad::Dense,
                            )?)),
                            (Some(v), None) => Ok(Some(v.clone())),
                            (None, None) => Ok(None),
                        }
                    };
                let (y, z) = (
                    load(&others[k], &wide_others[k])?,
                    load(&thirds[k], &wide_thirds[k])?,
                );
                x = reg_op(e, f, s, x, y, z, h, w)?;
            }
            e.to_loc(x, back, Some(&out.view(r, c, h, w)), Pad::Dense)?;
            c += w;
        }
        r += h;
    }
    Ok(Val::Mem(out))
}

/// `a ew b` of two registers of one file (same tile shape), into a new register.
pub fn reg_binary(e: &mut Emitter, ew: Ew, a: &RegTile, b: &RegTile) -> Result<RegTile, String> {
    reg_apply(e, ew, a, b, None)
}

/// `ew(a)` of a register, into a new register of its file.
pub fn reg_unary(e: &mut Emitter, ew: Ew, a: &RegTile) -> Result<RegTile, String> {
    let here = Place::Reg(a.file);
    let f = ew_forms(e, ew)
        .into_iter()
        .find(|f| f.locs.iter().all(|l| l.place == here))
        .ok_or_else(|| format!("no `{}` in the register file of the operand", ew.text()))?;
    let s = Step {
        ew,
        other: None,
        swapped: false,
        third: None,
    };
    match reg_op(e, &f, &s, Val::Reg(a.clone()), None, None, a.rows, a.cols)? {
        Val::Reg(r) => Ok(r),
        Val::Mem(_) | Val::Splat(_) => Err("a register operation wrote memory".to_owned()),
    }
}

/// `a * b + c` of three registers of one file (same tile shape), into a new register.
pub fn reg_fma(e: &mut Emitter, a: &RegTile, b: &RegTile, c: &RegTile) -> Result<RegTile, String> {
    reg_apply(e, Ew::MulAdd, a, b, Some(c))
}

/// `ew` of registers of `a`'s file by the instruction that computes it there.
fn reg_apply(
    e: &mut Emitter,
    ew: Ew,
    a: &RegTile,
    b: &RegTile,
    c: Option<&RegTile>,
) -> Result<RegTile, String> {
    let here = Place::Reg(a.file);
    let f = ew_forms(e, ew)
        .into_iter()
        .find(|f| f.locs.iter().all(|l| l.place == here))
        .ok_or_else(|| format!("no `{}` in the register file of the operands", ew.text()))?;
    let s = Step {
        ew,
        other: None,
        swapped: false,
        third: None,
    };
    let (x, y, z) = (
        Val::Reg(a.clone()),
        Some(Val::Reg(b.clone())),
        c.map(|c| Val::Reg(c.clone())),
    );
    match reg_op(e, &f, &s, x, y, z, a.rows, a.cols)? {
        Val::Reg(r) => Ok(r),
        Val::Mem(_) | Val::Splat(_) => Err("a register operation wrote memory".to_owned()),
    }
}

#[allow(clippy::too_many_arguments)]
fn reg_op(
    e: &mut Emitter,
    f: &EwForm,
    s: &Step,
    x: Val,
    y: Option<Val>,
    z: Option<Val>,
    h: i64,
    w: i64,
) -> Result<Val, String> {
    let Place::Reg(file) = f.locs[0].place else {
        return Err("not a register form".to_owned());
    };
    let d = e.vreg(file);
    let full: Vec<i64> = e.m.regfiles[file.index()]
        .shape
        .iter()
        .map(|q| q.value)
        .collect();
    let exact = if f.rank == 2 { vec![h, w] } else { vec![w] };
    let mut last = String::new();
    for shape in [exact, full] {
        let tensor = |v: &Val| v.tensor(shape.clone());
        let mut ts = vec![Emitter::reg_tensor(file, f.locs[0].dtype, d, shape.clone())];
        let (a, b) = if s.swapped {
            (y.clone(), Some(x.clone()))
        } else {
            (Some(x.clone()), y.clone())
        };
        ts.extend(a.iter().chain(b.iter()).chain(z.iter()).map(tensor));
        let (tensors, refs): (Vec<TileTensor>, Vec<Ref>) = ts.into_iter().unzip();
        let op = ew_op(s.ew, tensors, &shape);
        match e.emit(&op, &refs, Some(f.inst)) {
            Ok(_) => {
                return Ok(Val::Reg(RegTile {
                    file,
                    dtype: f.locs[0].dtype,
                    reg: d,
                    rows: h,
                    cols: w,
                }));
            }
            Err(err) => last = err,
        }
    }
    Err(last)
}

/// One step computed by an instruction on memory tiles.
fn mem_step(e: &mut Emitter, x: Val, s: &Step, forms: &[EwForm]) -> Result<Val, String> {
    let mut last = String::new();
    for f in forms {
        if f.locs.iter().any(|l| !matches!(l.place, Place::Mem(_))) {
            continue;
        }
        match mem_form(e, x.clone(), s, f) {
            Ok(v) => return Ok(v),
            Err(err) => last = err,
        }
    }
    Err(format!(
        "cannot compute `{}` on this target: {last}",
        s.ew.text()
    ))
}

fn mem_form(e: &mut Emitter, x: Val, s: &Step, f: &EwForm) -> Result<Val, String> {
    let (rows, cols) = x.dims();
    let (a, b) = if s.swapped {
        (s.other.clone(), Some(x))
    } else {
        (Some(x), s.other.clone())
    };
    let mut args = Vec::new();
    for (v, loc) in a.into_iter().chain(b).zip(&f.locs[1..]) {
        args.push(to_mem(e, v, *loc, Pad::Dense)?);
    }
    let Place::Mem(dm) = f.locs[0].place else {
        unreachable!()
    };
    let out = e.buffer(dm, f.locs[0].dtype, rows, cols);
    let parts: Vec<(i64, i64)> = if f.rank == 2 {
        vec![(0, rows)]
    } else {
        (0..rows).map(|r| (r, 1)).collect()
    };
    for (r, h) in parts {
        let shape = if f.rank == 2 {
            vec![h, cols]
        } else {
            vec![cols]
        };
        let mut ts = vec![Emitter::mem_tensor(&out.view(r, 0, h, cols), shape.clone())];
        for t in &args {
            e.ready(t)?;
            ts.push(Emitter::mem_tensor(&t.view(r, 0, h, cols), shape.clone()));
        }
        let (tensors, refs): (Vec<TileTensor>, Vec<Ref>) = ts.into_iter().unzip();
        e.emit(&ew_op(s.ew, tensors, &shape), &refs, Some(f.inst))?;
    }
    Ok(Val::Mem(out))
}

/// An instruction that masks a register by element position, as a causal
/// mask does: `d[i, j] = select(le(j + c, i + r), a[i, j], fill)`, with
/// immediates `r`, `c` and a `fill` at most [`super::types::MASKED`]
/// (softmax gives it no weight). Found by its semantics ([`causal_form`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CausalForm {
    /// The instruction.
    pub inst: InstId,
    /// The value of a masked element, as its semantics write it.
    fill: TileExpr,
}

/// The tile operation `d[i, j] = select(le(j + c, i + r), a[i, j], fill)`
/// over registers `d` and `a` of `file` (shape `shape`).
fn causal_op(
    file: isa_specs::model::RegFileId,
    dtype: DType,
    (d, a): (u32, u32),
    shape: &[i64],
    (r, c): (i64, i64),
    fill: &TileExpr,
) -> (TileOp, [Ref; 4]) {
    let (td, rd) = Emitter::reg_tensor(file, dtype, d, shape.to_vec());
    let (ta, ra) = Emitter::reg_tensor(file, dtype, a, shape.to_vec());
    let imm = |v: i64| TileTensor {
        dtype: DType::I32,
        shape: Vec::new(),
        place: TilePlace::Imm(v),
    };
    let scalar = |t: usize| {
        TileExpr::Access(TileAccess {
            tensor: t,
            indices: Vec::new(),
        })
    };
    let plus = |i: usize, t: usize| {
        TileExpr::Binary(
            BinOp::Add,
            Box::new(TileExpr::Index(IndexId(i as u32))),
            Box::new(scalar(t)),
        )
    };
    let op = TileOp {
        tensors: vec![td, ta, imm(r), imm(c)],
        extents: shape.to_vec(),
        target: TileAccess {
            tensor: 0,
            indices: (0..2).map(ix).collect(),
        },
        op: AssignOp::Set,
        value: TileExpr::Call(
            Func::Select,
            vec![
                TileExpr::Call(Func::Le, vec![plus(1, 3), plus(0, 2)]),
                access(1, 2),
                fill.clone(),
            ],
        ),
    };
    (op, [rd, ra, Ref::Fixed, Ref::Fixed])
}

/// The instruction of register file `file` that masks by position with
/// immediates up to `(r, c)` ([`CausalForm`]), if the machine has one.
pub fn causal_form(
    e: &Emitter,
    file: isa_specs::model::RegFileId,
    most: (i64, i64),
) -> Option<CausalForm> {
    let f = &e.m.regfiles[file.index()];
    let shape: Vec<i64> = f.shape.iter().map(|d| d.value).collect();
    if shape.len() != 2 || !f.dtype.is_float() {
        return None;
    }
    let params: Vec<i64> = e.m.params.iter().map(|p| p.value).collect();
    let real = |x: &isa_specs::model::Expr| {
        isa_specs::eval::eval(x, &isa_specs::eval::Params(&params))
            .ok()
            .map(|v| v.as_f64())
    };
    e.m.instructions.iter().enumerate().find_map(|(id, inst)| {
        let [isa_specs::model::Stmt::Assign { value, .. }] = inst.semantics.stmts.as_slice() else {
            return None;
        };
        let SemExpr::Call(Func::Select, args) = value else {
            return None;
        };
        // The masked value: a constant, or a negated one.
        let (fill, v) = match args.get(2)? {
            SemExpr::Const(x) => (TileExpr::Const(real(x)?), real(x)?),
            SemExpr::Neg(x) => match &**x {
                SemExpr::Const(x) => (
                    TileExpr::Neg(Box::new(TileExpr::Const(real(x)?))),
                    -real(x)?,
                ),
                _ => return None,
            },
            _ => return None,
        };
        if v > super::types::MASKED {
            return None;
        }
        let inst = InstId(id as u32);
        let (op, _) = causal_op(file, f.dtype, (0, 0), &shape, most, &fill);
        e.choose(&op, Some(inst)).ok()?;
        Some(CausalForm { inst, fill })
    })
}

/// `a` masked by position by `form`: element `[i, j]` kept where
/// `j + c <= i + r`, else the form's fill.
pub fn reg_causal(
    e: &mut Emitter,
    form: &CausalForm,
    a: &RegTile,
    (r, c): (i64, i64),
) -> Result<RegTile, String> {
    let d = e.vreg(a.file);
    let full: Vec<i64> = e.m.regfiles[a.file.index()]
        .shape
        .iter()
        .map(|q| q.value)
        .collect();
    let mut last = String::new();
    for shape in [vec![a.rows, a.cols], full] {
        let (op, refs) = causal_op(a.file, a.dtype, (d, a.reg), &shape, (r, c), &form.fill);
        match e.emit(&op, &refs, Some(form.inst)) {
            Ok(_) => {
                return Ok(RegTile {
                    reg: d,
                    ..a.clone()
                });
            }
            Err(err) => last = err,
        }
    }
    Err(last)
}
