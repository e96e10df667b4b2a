//! Element-granular moves on chip through a scalar register file: a scalar
//! load (`d = src[]` or `d = src[0]`) and a scalar store of the same type,
//! found by their semantics. They do what the machine's tile transfers cannot
//! when those need aligned addresses: shift a row by a few elements, or
//! transpose a tile on a machine without a transposing copy. Two
//! instructions per element: a fallback for correctness, not for speed.

use super::emit::{Base, Emitter, MemTile, Ref};
use isa_specs::Machine;
use isa_specs::model::{AssignOp, DType, InstId, MemId, OperandKind, RegFileId, SemExpr, Stmt};
use isa_specs::select::{TileAccess, TileExpr, TileOp, TilePlace, TileTensor};

/// A scalar load and store between a memory and a scalar register file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moves {
    /// `d = src`.
    pub load: InstId,
    /// `dst = a`.
    pub store: InstId,
    /// The scalar register file.
    pub file: RegFileId,
    /// The memory.
    pub mem: MemId,
    /// The element type moved.
    pub dtype: DType,
    /// Rank of the memory operand (0: `[]`, 1: `[1]`).
    pub rank: usize,
}

/// `(instruction, memory, dtype, mem rank, register file)` of every scalar
/// load (`load = true`) or store.
fn scalar_copies(m: &Machine, load: bool) -> Vec<(InstId, MemId, DType, usize, RegFileId)> {
    let mut out = Vec::new();
    for (i, def) in m.instructions.iter().enumerate() {
        let [
            Stmt::Assign {
                target,
                op: AssignOp::Set,
                value: SemExpr::Access(src),
            },
        ] = def.semantics.stmts.as_slice()
        else {
            continue;
        };
        let constant = |a: &isa_specs::model::Access| {
            a.indices
                .iter()
                .all(|x| x.terms.is_empty() && x.offsets.is_empty() && x.constant == 0)
        };
        if !constant(target) || !constant(src) {
            continue;
        }
        let (reg, mem) = if load { (target, src) } else { (src, target) };
        let (
            OperandKind::Reg { file, .. },
            OperandKind::Mem {
                mem: mid,
                dtype,
                shape,
                ..
            },
        ) = (
            &def.operands[reg.operand.index()].kind,
            &def.operands[mem.operand.index()].kind,
        )
        else {
            continue;
        };
        if !m.regfiles[file.index()].shape.is_empty() || m.regfiles[file.index()].dtype != *dtype {
            continue;
        }
        out.push((InstId(i as u32), *mid, *dtype, shape.len(), *file));
    }
    out
}

/// The scalar moves of elements of `dtype` in memory `mem`, if the machine
/// has them: of `dtype` itself, or of another type of the same size (a load
/// and a store move the bits unchanged).
pub fn moves(m: &Machine, mem: MemId, dtype: DType) -> Option<Moves> {
    let loads = scalar_copies(m, true);
    let stores = scalar_copies(m, false);
    let pair = |exact: bool| {
        loads.iter().find_map(|&(l, lm, ld, lr, lf)| {
            let fits = lm == mem
                && if exact {
                    ld == dtype
                } else {
                    ld.bytes() == dtype.bytes()
                };
            if !fits {
                return None;
            }
            let (s, ..) = *stores
                .iter()
                .find(|&&(_, sm, sd, sr, sf)| sm == lm && sd == ld && sr == lr && sf == lf)?;
            Some(Moves {
                load: l,
                store: s,
                file: lf,
                mem: lm,
                dtype: ld,
                rank: lr,
            })
        })
    };
    pair(true).or_else(|| pair(false))
}

/// Where elements of `dtype` can be moved one by one: `first` if it has
/// scalar moves, else any memory that does and that tiles of `dtype` can
/// reach from home and return from.
pub fn moves_near(
    info: &super::machine::Info,
    m: &Machine,
    first: MemId,
    dtype: DType,
) -> Option<Moves> {
    use super::machine::{Loc, Place};
    moves(m, first, dtype).or_else(|| {
        let home = Loc {
            place: Place::Mem(info.home),
            dtype,
        };
        (0..m.memories.len()).find_map(|i| {
            let mem = MemId(i as u32);
            let here = Loc {
                place: Place::Mem(mem),
                dtype,
            };
            let mv = moves(m, mem, dtype)?;
            (mem != info.home
                && info.path(&[home], here).is_some()
                && info.path(&[here], home).is_some())
            .then_some(mv)
        })
    })
}

/// The tensor of element `(r, c)` of `t`, seen as `dtype`.
fn element(t: &MemTile, r: i64, c: i64, rank: usize, dtype: DType) -> (TileTensor, Ref) {
    let v = t.view(r, c, 1, 1);
    let addr = match v.base {
        Base::Fixed(a) => a + v.offset,
        Base::Buf(_) => v.offset,
    };
    let re = match v.base {
        Base::Fixed(_) => Ref::Fixed,
        Base::Buf(b) => Ref::Buf(b),
    };
    (
        TileTensor {
            dtype,
            shape: vec![1; rank],
            place: TilePlace::Mem {
                mem: v.mem,
                addr,
                strides: vec![1; rank],
            },
        },
        re,
    )
}

fn access(tensor: usize, rank: usize) -> TileExpr {
    TileExpr::Access(TileAccess {
        tensor,
        indices: vec![isa_specs::model::Affine::default(); rank],
    })
}

/// Copies element `(r, c)` of `from` to `(r2, c2)` of `to` (both on chip, of `mv`'s memory and type).
#[allow(clippy::too_many_arguments)]
pub fn move_element(
    e: &mut Emitter,
    mv: &Moves,
    from: &MemTile,
    r: i64,
    c: i64,
    to: &MemTile,
    r2: i64,
    c2: i64,
) -> Result<(), String> {
    let s = e.vreg(mv.file);
    let (st, sr) = Emitter::reg_tensor(mv.file, mv.dtype, s, vec![]);
    let (src, srcr) = element(from, r, c, mv.rank, mv.dtype);
    let load = TileOp {
        tensors: vec![st, src],
        extents: vec![],
        target: TileAccess {
            tensor: 0,
            indices: vec![],
        },
        op: AssignOp::Set,
        value: access(1, mv.rank),
    };
    e.emit(&load, &[sr, srcr], Some(mv.load))?;
    store_element(e, mv, s, to, r2, c2)
}

/// Stores scalar register `s` (of `mv`'s file) into element `(r, c)` of `to`.
pub fn store_element(
    e: &mut Emitter,
    mv: &Moves,
    s: u32,
    to: &MemTile,
    r: i64,
    c: i64,
) -> Result<(), String> {
    let (st, sr) = Emitter::reg_tensor(mv.file, mv.dtype, s, vec![]);
    let (dst, dstr) = element(to, r, c, mv.rank, mv.dtype);
    let store = TileOp {
        tensors: vec![dst, st],
        extents: vec![],
        target: TileAccess {
            tensor: 0,
            indices: vec![isa_specs::model::Affine::default(); mv.rank],
        },
        op: AssignOp::Set,
        value: access(1, 0),
    };
    e.emit(&store, &[dstr, sr], Some(mv.store))?;
    Ok(())
}
