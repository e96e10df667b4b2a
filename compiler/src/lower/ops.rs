//! Tile-level lowering of the compute operations: element-wise chains and
//! contractions (matrix products), each found among the machine's
//! instructions by its semantics.

use super::emit::{Emitter, MemTile, Pad, Ref, RegTile, Val};
use super::machine::{Loc, Place, operand_loc};
use isa_specs::model::{
    Affine, AssignOp, BinOp, DType, Func, IndexId, InstId, OperandKind, ReduceOp, SemExpr,
};
use isa_specs::select::{TileAccess, TileExpr, TileOp, TilePlace, TileTensor};

/// An element-wise operation of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ew {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
    /// `max(a, b)`
    Max,
    /// `max(a, 0)`
    Relu,
    /// `1 / a`
    Recip,
    /// `a * b + c` (a multiply and an add fused into one instruction where the machine has one)
    MulAdd,
    /// `min(a, b)`
    Min,
    /// `-a`
    Neg,
    /// `f(a)` for a function of the description language.
    Call(Func),
}

impl Ew {
    /// Whether it takes a second operand.
    pub fn binary(self) -> bool {
        !matches!(self, Ew::Relu | Ew::Recip | Ew::Neg | Ew::Call(_))
    }

    /// Tensors of its tile operation: the result and the operands.
    fn tensors(self) -> usize {
        match self {
            Ew::Relu | Ew::Recip | Ew::Neg | Ew::Call(_) => 2,
            Ew::MulAdd => 4,
            _ => 3,
        }
    }

    /// The semantics it stands for, as written in a description.
    pub fn text(self) -> String {
        let s = match self {
            Ew::Call(f) => return format!("d = {}(a)", f.name()),
            Ew::Add => "d = a + b",
            Ew::Sub => "d = a - b",
            Ew::Mul => "d = a * b",
            Ew::Div => "d = a / b",
            Ew::Max => "d = max(a, b)",
            Ew::Relu => "d = max(a, 0.0)",
            Ew::Recip => "d = recip(a)",
            Ew::MulAdd => "d = a * b + c",
            Ew::Min => "d = min(a, b)",
            Ew::Neg => "d = -a",
        };
        s.to_owned()
    }
}

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

/// An instruction form of an element-wise operation: where its `[d, a, b]` must be.
#[derive(Clone, Debug, PartialEq)]
pub struct EwForm {
    /// The instruction.
    pub inst: InstId,
    /// Rank of its tiles.
    pub rank: usize,
    /// Where `d`, `a` (and `b`) must be.
    pub locs: Vec<Loc>,
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
pub fn chain(e: &mut Emitter, input: Val, steps: &[Step]) -> Result<Val, String> {
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
) -> Result<Val, String> {
    let steps = &fuse_mul_add(e, steps)[..];
    let mut cur = input;
    let mut i = 0;
    while i < steps.len() {
        // The longest run of steps that one register file computes.
        let forms: Vec<Vec<EwForm>> = steps[i..].iter().map(|s| ew_forms(e, s.ew)).collect();
        if forms[0].is_empty() {
            return Err(format!(
                "cannot compile: the target lacks `{}` (no instruction has these semantics)",
                steps[i].ew.text()
            ));
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
                    ));
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
                Some(Val::Mem(t)) if narrow(&Val::Mem(t.clone())) => {
                    let Val::Reg(a) =
                        e.to_loc(Val::Mem(t.view(r, 0, h, 1)), loc, None, Pad::Dense)?
                    else {
                        return Err("a row result did not land in a register".to_owned());
                    };
                    Ok(Some(Val::Reg(broadcast_lanes(
                        e,
                        &a,
                        (gr, gc),
                        h,
                        gc.min(cols),
                    )?)))
                }
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
/// immediates `r`, `c` and a `fill` at most [`super::masked::MASKED`]
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
        if v > super::masked::MASKED {
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

/// What an index of a contraction instruction stands for in `C[m, n] = Σ_k A[m, k] B[k, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A row of the result.
    M,
    /// A column of the result.
    N,
    /// The reduction.
    K,
}

/// A contraction instruction: `T (=|+=) [sum(k)] cast(X) * cast(Y)` with its roles.
#[derive(Clone, Debug, PartialEq)]
pub struct Contraction {
    /// The instruction.
    pub inst: InstId,
    /// Whether it overwrites the result (`=`) or accumulates (`+=`).
    pub set: bool,
    /// Operands of the result, `A` and `B`.
    pub t: usize,
    /// Operand playing `A`.
    pub a: usize,
    /// Operand playing `B`.
    pub b: usize,
    /// The role of each pattern index.
    pub roles: Vec<Role>,
    /// Dimension roles of the result, `A` and `B`, in access order.
    pub t_dims: Vec<Role>,
    /// `A`'s.
    pub a_dims: Vec<Role>,
    /// `B`'s.
    pub b_dims: Vec<Role>,
}

fn cast_access(e: &SemExpr) -> Option<&isa_specs::model::Access> {
    match e {
        SemExpr::Access(a) => Some(a),
        SemExpr::Cast(_, inner) => cast_access(inner),
        _ => None,
    }
}

fn plain(a: &isa_specs::model::Access) -> Option<Vec<usize>> {
    a.indices
        .iter()
        .map(
            |x| match (x.terms.as_slice(), x.constant, x.offsets.is_empty()) {
                ([(i, 1)], 0, true) => Some(i.index()),
                _ => None,
            },
        )
        .collect()
}

/// Strides a memory operand requires when they depend on parameters only.
pub fn fixed_strides(e: &Emitter, stride: Option<&[isa_specs::model::Expr]>) -> Option<Vec<i64>> {
    let params: Vec<i64> = e.m.params.iter().map(|q| q.value).collect();
    stride?
        .iter()
        .map(|x| isa_specs::eval::eval_int(x, &isa_specs::eval::Params(&params)).ok())
        .collect()
}

/// Every floating-point contraction instruction of the machine, with its roles.
pub fn contractions(e: &Emitter) -> Vec<Contraction> {
    let mut out = Vec::new();
    for (ii, def) in e.m.instructions.iter().enumerate() {
        let id = InstId(ii as u32);
        let Some((target, op, value)) = super::emit::single_assign(e.m, id) else {
            continue;
        };
        let float = [target.operand.index()]
            .iter()
            .chain(
                def.operands
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| {
                        matches!(o.kind, OperandKind::Reg { .. } | OperandKind::Mem { .. })
                    })
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>()
                    .iter(),
            )
            .all(|&oi| operand_loc(e.m, id, oi).is_none_or(|l| l.dtype.is_float()));
        if !float {
            continue;
        }
        let (body, reduced) = match value {
            SemExpr::Reduce(ReduceOp::Sum, ks, body) => {
                (body.as_ref(), ks.iter().map(|k| k.index()).collect())
            }
            other => (other, Vec::new()),
        };
        let set = match op {
            AssignOp::Set if !reduced.is_empty() => true,
            AssignOp::Add => false,
            _ => continue,
        };
        let SemExpr::Binary(BinOp::Mul, x, y) = body else {
            continue;
        };
        let (Some(xa), Some(ya)) = (cast_access(x), cast_access(y)) else {
            continue;
        };
        let (Some(tl), Some(xl), Some(yl)) = (plain(target), plain(xa), plain(ya)) else {
            continue;
        };
        let ks: Vec<usize> = xl
            .iter()
            .copied()
            .filter(|i| yl.contains(i) && !tl.contains(i))
            .collect();
        let [k] = ks.as_slice() else { continue };
        if !reduced.is_empty() && reduced != vec![*k] {
            continue;
        }
        for (a_op, al, b_op, bl) in [(xa, &xl, ya, &yl), (ya, &yl, xa, &xl)] {
            let n_idx = def.semantics.indices.len();
            let mut roles = vec![None; n_idx];
            roles[*k] = Some(Role::K);
            let mut ok = true;
            for &i in al.iter().filter(|i| **i != *k) {
                ok &= roles[i].is_none() && tl.contains(&i);
                roles[i] = Some(Role::M);
            }
            for &i in bl.iter().filter(|i| **i != *k) {
                ok &= roles[i].is_none() && tl.contains(&i);
                roles[i] = Some(Role::N);
            }
            ok &= tl.iter().all(|i| roles[*i].is_some())
                && al.len() <= 2
                && bl.len() <= 2
                && tl.len() <= 2;
            let Some(roles) = roles
                .into_iter()
                .collect::<Option<Vec<Role>>>()
                .filter(|_| ok)
            else {
                continue;
            };
            let dims = |l: &[usize]| l.iter().map(|i| roles[*i]).collect::<Vec<_>>();
            let t_dims = dims(&tl);
            if t_dims == [Role::N, Role::M] {
                continue;
            }
            out.push(Contraction {
                inst: id,
                set,
                t: target.operand.index(),
                a: a_op.operand.index(),
                b: b_op.operand.index(),
                t_dims,
                a_dims: dims(al),
                b_dims: dims(bl),
                roles,
            });
        }
    }
    out
}

impl Contraction {
    /// Extent of a role in a tile of `(m, n, k)`.
    fn extent(r: Role, (m, n, k): (i64, i64, i64)) -> i64 {
        match r {
            Role::M => m,
            Role::N => n,
            Role::K => k,
        }
    }

    /// Shape of an operand with dimension roles `dims`.
    pub fn shape(dims: &[Role], mnk: (i64, i64, i64)) -> Vec<i64> {
        dims.iter().map(|r| Self::extent(*r, mnk)).collect()
    }

    /// Whether the instruction has an M (resp. N) index: otherwise its tile has one row (column).
    pub fn has(&self, r: Role) -> bool {
        self.roles.contains(&r)
    }

    /// The tile operation for tensors `[T, A, B]` of tile size `mnk`.
    pub fn op(
        &self,
        e: &Emitter,
        tensors: Vec<TileTensor>,
        mnk: (i64, i64, i64),
    ) -> Option<TileOp> {
        let (target, op, value) = super::emit::single_assign(e.m, self.inst)?;
        let map = |o: usize| {
            if o == self.t {
                Some(0)
            } else if o == self.a {
                Some(1)
            } else if o == self.b {
                Some(2)
            } else {
                None
            }
        };
        let acc = |a: &isa_specs::model::Access| -> Option<TileAccess> {
            Some(TileAccess {
                tensor: map(a.operand.index())?,
                indices: a.indices.clone(),
            })
        };
        let params: Vec<i64> = e.m.params.iter().map(|p| p.value).collect();
        fn tr(
            e: &SemExpr,
            acc: &dyn Fn(&isa_specs::model::Access) -> Option<TileAccess>,
            params: &[i64],
        ) -> Option<TileExpr> {
            Some(match e {
                SemExpr::Access(a) => TileExpr::Access(acc(a)?),
                SemExpr::Const(c) => TileExpr::Const(
                    isa_specs::eval::eval(c, &isa_specs::eval::Params(params))
                        .ok()?
                        .as_f64(),
                ),
                SemExpr::Cast(dt, x) => TileExpr::Cast(*dt, Box::new(tr(x, acc, params)?)),
                SemExpr::Binary(o, a, b) => TileExpr::Binary(
                    *o,
                    Box::new(tr(a, acc, params)?),
                    Box::new(tr(b, acc, params)?),
                ),
                SemExpr::Reduce(r, ks, b) => {
                    TileExpr::Reduce(*r, ks.clone(), Box::new(tr(b, acc, params)?))
                }
                _ => return None,
            })
        }
        Some(TileOp {
            tensors,
            extents: self.roles.iter().map(|r| Self::extent(*r, mnk)).collect(),
            target: acc(target)?,
            op,
            value: tr(value, &acc, &params)?,
        })
    }

    /// Where the result, `A` and `B` must be.
    pub fn locs(&self, e: &Emitter) -> Option<[Loc; 3]> {
        Some([
            operand_loc(e.m, self.inst, self.t)?,
            operand_loc(e.m, self.inst, self.a)?,
            operand_loc(e.m, self.inst, self.b)?,
        ])
    }

    /// Placeholder tensors at the operands' places, for trying tile sizes.
    pub fn probe(&self, e: &Emitter, mnk: (i64, i64, i64)) -> Option<TileOp> {
        let locs = self.locs(e)?;
        let dims = [&self.t_dims, &self.a_dims, &self.b_dims];
        let ops = [self.t, self.a, self.b];
        let tensors = (0..3)
            .map(|i| {
                let shape = Self::shape(dims[i], mnk);
                let place = match (
                    &e.m.instructions[self.inst.index()].operands[ops[i]].kind,
                    locs[i].place,
                ) {
                    (OperandKind::Mem { stride, .. }, Place::Mem(mem)) => TilePlace::Mem {
                        mem,
                        addr: 0,
                        strides: fixed_strides(e, stride.as_deref())
                            .unwrap_or_else(|| isa_specs::select::dense(&shape)),
                    },
                    (_, Place::Reg(file)) => TilePlace::Reg { file, reg: 0 },
                    _ => TilePlace::Imm(0),
                };
                TileTensor {
                    dtype: locs[i].dtype,
                    shape,
                    place,
                }
            })
            .collect();
        self.op(e, tensors, mnk)
    }
}

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

fn scalar_tensor(file: isa_specs::model::RegFileId, dtype: DType) -> TileTensor {
    TileTensor {
        dtype,
        shape: Vec::new(),
        place: TilePlace::Reg { file, reg: 0 },
    }
}

/// `d[i] = a[i] * s` over `w` lanes.
fn scale_op(tensors: Vec<TileTensor>, w: i64) -> TileOp {
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
fn lane_ops(d: TileTensor, a: TileTensor, rank: usize, rows: i64, cols: i64) -> Vec<TileOp> {
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
fn row_load_ops(d: TileTensor, a: &MemTile, rows: i64, cols: i64) -> Vec<(TileOp, Ref)> {
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
                base: super::emit::Base::Fixed(0),
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
pub(super) fn load_row_broadcast(
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
fn splat_op(
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
pub(super) fn load_op(tensors: Vec<TileTensor>) -> TileOp {
    let zero = Affine {
        terms: Vec::new(),
        constant: 0,
        offsets: Vec::new(),
    };
    scalar_op(tensors, vec![zero])
}

/// `s = src[indices]` into a scalar (`s = src` with no indices).
pub(super) fn scalar_op(tensors: Vec<TileTensor>, indices: Vec<Affine>) -> TileOp {
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
