//! What the lowering needs to know about a machine, derived from its
//! description alone: where tensors live, which instructions move data
//! between places (and convert it on the way), how to wait for an
//! asynchronous transfer, and the column granule tiles are aligned to.

use isa_specs::Machine;
use isa_specs::model::{
    Access, Action, AssignOp, DType, InstId, MemId, OperandKind, SemExpr, Stmt,
};
use std::collections::{BTreeSet, BinaryHeap};

pub use super::types::{Loc, Place};

/// An instruction that copies a tile from one place to another, element for
/// element, possibly converting the element type: `d[i, j] = src[i, j]` or
/// `d[i] = bf16(src[i])`, optionally signalling a semaphore when done.
#[derive(Clone, Debug, PartialEq)]
pub struct Copy {
    /// The instruction.
    pub inst: InstId,
    /// Its destination operand.
    pub dst: usize,
    /// Its source operand.
    pub src: usize,
    /// Where the data comes from.
    pub from: Loc,
    /// Where it goes.
    pub to: Loc,
    /// Rank of the copied tile (1 or 2).
    pub rank: usize,
    /// The semaphore operand it signals (asynchronous transfers).
    pub sem: Option<usize>,
    /// The element type it converts to, if it converts.
    pub cast: Option<DType>,
    /// Whether its register operand (if any) can be narrowed to part of a register.
    pub narrow: bool,
}

impl Copy {
    /// Whether a buffer this copy loads registers from must be padded to whole registers.
    pub fn needs_padding(&self) -> bool {
        matches!(self.to.place, Place::Reg(_)) && !self.narrow
    }

    /// How a buffer this copy reads from must be laid out.
    pub fn pad(&self) -> super::types::Pad {
        if self.needs_padding() {
            super::types::Pad::Registers
        } else {
            super::types::Pad::Dense
        }
    }
}

/// A chain of copies (indices into [`Info::copies`]) and the place it starts from.
pub type Chain = (Loc, Vec<usize>);

/// Chains found, by sources and destination.
type PathCache = rustc_hash::FxHashMap<(Vec<Loc>, Loc), Option<Chain>>;

/// The machine as the lowering sees it.
#[derive(Clone, Debug)]
pub struct Info {
    /// The memory tensors live in between operations (the largest off-chip memory).
    pub home: MemId,
    /// Every copy instruction.
    pub copies: Vec<Copy>,
    /// Every transposing copy (`d[j, i] = src[i, j]`, possibly converting).
    pub transposes: Vec<Copy>,
    /// `wait(s)` instructions: `(instruction, semaphore operand, bank)`.
    pub waits: Vec<(InstId, usize, usize)>,
    /// `halt`.
    pub halt: Option<InstId>,
    /// Alignment of buffers in each memory: the largest any operand there asks for.
    pub mem_align: Vec<u64>,
    /// The largest alignment (at most 256 bytes) copies ask of tiles in the home memory:
    /// rows of tensors at home start at multiples of it.
    pub home_align: u64,
    /// Tiles' columns are multiples of this (when the tensor allows): DMA
    /// alignment and fixed register widths.
    pub col_granule: i64,
    /// Paths already searched.
    path_cache: std::cell::RefCell<PathCache>,
    /// On-chip buffers have a multiple of this many rows: fixed register heights.
    pub row_granule: i64,
    /// Rows of on-chip buffers are a multiple of this many elements apart: fixed register widths.
    pub pitch_granule: i64,
}

/// The single access an expression is, possibly under one cast.
fn plain_access(e: &SemExpr) -> Option<(&Access, Option<DType>)> {
    match e {
        SemExpr::Access(a) => Some((a, None)),
        SemExpr::Cast(dt, inner) => match inner.as_ref() {
            SemExpr::Access(a) => Some((a, Some(*dt))),
            _ => None,
        },
        _ => None,
    }
}

/// Whether an access is `x[i0, i1, ...]` with plain, distinct indices.
fn plain_indices(a: &Access) -> Option<Vec<usize>> {
    a.indices
        .iter()
        .map(
            |ix| match (ix.terms.as_slice(), ix.constant, ix.offsets.is_empty()) {
                ([(i, 1)], 0, true) => Some(i.index()),
                _ => None,
            },
        )
        .collect()
}

/// Where an operand of an instruction lives.
pub fn operand_loc(m: &Machine, inst: InstId, operand: usize) -> Option<Loc> {
    let def = &m.instructions[inst.index()];
    match &def.operands.get(operand)?.kind {
        OperandKind::Reg { file, .. } => Some(Loc {
            place: Place::Reg(*file),
            dtype: m.regfiles[file.index()].dtype,
        }),
        OperandKind::Mem { mem, dtype, .. } => Some(Loc {
            place: Place::Mem(*mem),
            dtype: *dtype,
        }),
        _ => None,
    }
}

pub fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a.abs() } else { gcd(b, a % b) }
}

/// `a / b` rounded up (positive `b`).
pub fn cdiv(a: i64, b: i64) -> i64 {
    (a + b.max(1) - 1) / b.max(1)
}

/// `a` rounded up to a multiple of `b`.
pub fn rup(a: i64, b: i64) -> i64 {
    cdiv(a, b) * b.max(1)
}

/// Least common multiple (of positive numbers).
pub fn lcm(a: i64, b: i64) -> i64 {
    a / gcd(a, b) * b
}

impl Info {
    /// Analyses a machine. Fails when it has no off-chip memory.
    pub fn new(m: &Machine) -> Result<Info, String> {
        let home = m
            .memories
            .iter()
            .enumerate()
            .filter(|(_, x)| x.kind.off_chip())
            .max_by_key(|(_, x)| x.size.value)
            .map(|(i, _)| MemId(i as u32))
            .ok_or_else(|| {
                format!(
                    "machine `{}` has no off-chip memory to hold tensors",
                    m.name
                )
            })?;
        let mut copies = Vec::new();
        let mut transposes = Vec::new();
        let mut waits = Vec::new();
        let mut halt = None;
        let mut mem_align = vec![1u64; m.memories.len()];
        let mut granule = 1i64;
        let mut home_align = 1u64;
        let mut row_granule = 1i64;
        let mut pitch_granule = 1i64;
        for (ii, def) in m.instructions.iter().enumerate() {
            let id = InstId(ii as u32);
            for o in &def.operands {
                if let OperandKind::Mem { mem, align, .. } = &o.kind
                    && *mem != home
                {
                    let a = &mut mem_align[mem.index()];
                    *a = (*a).max(*align);
                }
            }
            let mut assigns = Vec::new();
            let mut signal = None;
            let mut other_action = false;
            for s in &def.semantics.stmts {
                match s {
                    Stmt::Assign { target, op, value } => assigns.push((target, *op, value)),
                    Stmt::Action(Action::Signal(s)) => signal = Some(s.index()),
                    Stmt::Action(Action::Wait(s)) => {
                        if let OperandKind::Sem { bank } = &def.operands[s.index()].kind {
                            waits.push((id, s.index(), bank.index()));
                        }
                        other_action = true;
                    }
                    Stmt::Action(Action::Halt) => {
                        halt = Some(id);
                        other_action = true;
                    }
                    Stmt::Action(_) => other_action = true,
                }
            }
            let [(target, AssignOp::Set, value)] = assigns.as_slice() else {
                continue;
            };
            if other_action {
                continue;
            }
            let Some((src, cast)) = plain_access(value) else {
                continue;
            };
            let (Some(ti), Some(si)) = (plain_indices(target), plain_indices(src)) else {
                continue;
            };
            let transposed = ti.len() == 2
                && si.len() == 2
                && ti[0] == si[1]
                && ti[1] == si[0]
                && ti[0] != ti[1];
            if (ti != si && !transposed) || ti.is_empty() || ti.len() > 2 {
                continue;
            }
            let (dst, srco) = (target.operand.index(), src.operand.index());
            let (Some(to), Some(from)) = (operand_loc(m, id, dst), operand_loc(m, id, srco)) else {
                continue;
            };
            // Scalar register files cannot hold tiles.
            let scalar =
                |l: Loc| matches!(l.place, Place::Reg(f) if m.regfiles[f.index()].shape.is_empty());
            if scalar(to) || scalar(from) {
                continue;
            }
            for (oi, loc) in [(dst, to), (srco, from)] {
                match (&def.operands[oi].kind, loc.place) {
                    (
                        OperandKind::Mem {
                            align, dtype, mem, ..
                        },
                        _,
                    ) if *align <= 256 => {
                        if *mem == home {
                            home_align = home_align.max(*align);
                        }
                        let elems = (*align / dtype.bytes()).max(1) as i64;
                        granule = lcm(granule, elems);
                    }
                    (OperandKind::Reg { file, shape }, _) => {
                        // A register operand whose width no immediate narrows fixes the granule.
                        if let Some(last) = shape.last()
                            && !mentions_operand(last)
                            && let Some(w) = m.regfiles[file.index()].shape.last()
                            && w.value <= 256
                        {
                            granule = lcm(granule, w.value.max(1));
                            pitch_granule = lcm(pitch_granule, w.value.max(1));
                        }
                        let dims = &m.regfiles[file.index()].shape;
                        if dims.len() == 2
                            && shape.first().is_some_and(|d| !mentions_operand(d))
                            && dims[0].value <= 64
                        {
                            row_granule = lcm(row_granule, dims[0].value.max(1));
                        }
                    }
                    _ => {}
                }
            }
            let narrow = [dst, srco].iter().all(|&oi| match &def.operands[oi].kind {
                OperandKind::Reg { shape, .. } => shape.iter().any(mentions_operand),
                _ => true,
            });
            let copy = Copy {
                narrow,
                inst: id,
                dst,
                src: srco,
                from,
                to,
                rank: ti.len(),
                sem: signal,
                cast,
            };
            match (transposed, signal) {
                (false, _) => copies.push(copy),
                (true, None) => transposes.push(copy),
                (true, Some(_)) => {} // a transposing transfer: not used yet
            }
        }
        Ok(Info {
            home,
            copies,
            transposes,
            waits,
            halt,
            mem_align,
            home_align,
            col_granule: granule.min(256),
            row_granule,
            pitch_granule,
            path_cache: Default::default(),
        })
    }

    /// The cheapest chain of copies taking a tile from any of `from` to `to`
    /// (Dijkstra; every copy costs one, a conversion a little more), and the
    /// source it starts from. `None` when `to` cannot be reached.
    pub fn path(&self, from: &[Loc], to: Loc) -> Option<(Loc, Vec<usize>)> {
        let key = (from.to_vec(), to);
        if let Some(hit) = self.path_cache.borrow().get(&key) {
            return hit.clone();
        }
        let found = self.search(from, to);
        self.path_cache.borrow_mut().insert(key, found.clone());
        found
    }

    /// The cheapest chain of at least one copy from `at` back to `at` whose
    /// stores write exactly the tile (no whole registers past its edge: the
    /// rest of the destination holds data), and that passes through no
    /// buffer in the home memory (buffers are only planned on chip).
    pub fn round_trip(&self, at: Loc) -> Option<(Loc, Vec<usize>)> {
        let exact = |ci: &usize| {
            let c = &self.copies[*ci];
            !(matches!(c.from.place, Place::Reg(_)) && matches!(c.to.place, Place::Mem(_)))
                || c.narrow
        };
        self.copies
            .iter()
            .enumerate()
            .filter(|(_, c)| c.from == at)
            .filter_map(|(ci, c)| {
                let (_, rest) = if c.to == at {
                    (at, Vec::new())
                } else {
                    self.path(&[c.to], at)?
                };
                Some(std::iter::once(ci).chain(rest).collect::<Vec<usize>>())
            })
            .filter(|chain| {
                chain.iter().all(exact)
                    && chain[..chain.len() - 1]
                        .iter()
                        .all(|ci| match self.copies[*ci].to.place {
                            Place::Mem(m) => m != self.home,
                            Place::Reg(_) => true,
                        })
            })
            .min_by_key(|chain| chain.len())
            .map(|chain| (at, chain))
    }

    fn search(&self, from: &[Loc], to: Loc) -> Option<(Loc, Vec<usize>)> {
        #[derive(PartialEq, Eq, PartialOrd, Ord)]
        struct Entry(std::cmp::Reverse<u32>, Loc);
        let mut best: std::collections::HashMap<Loc, (u32, Option<(Loc, usize)>)> =
            std::collections::HashMap::new();
        let mut heap = BinaryHeap::new();
        for l in from {
            best.insert(*l, (0, None));
            heap.push(Entry(std::cmp::Reverse(0), *l));
        }
        let mut done = BTreeSet::new();
        while let Some(Entry(std::cmp::Reverse(d), l)) = heap.pop() {
            if !done.insert(l) {
                continue;
            }
            if l == to {
                let mut chain = Vec::new();
                let mut at = l;
                while let Some((_, Some((prev, c)))) = best.get(&at) {
                    chain.push(*c);
                    at = *prev;
                }
                chain.reverse();
                return Some((at, chain));
            }
            for (ci, c) in self.copies.iter().enumerate() {
                if c.from != l {
                    continue;
                }
                let nd = d + 10 + u32::from(c.cast.is_some());
                if best.get(&c.to).is_none_or(|(bd, _)| nd < *bd) {
                    best.insert(c.to, (nd, Some((l, ci))));
                    heap.push(Entry(std::cmp::Reverse(nd), c.to));
                }
            }
        }
        None
    }

    /// The `wait` instruction for a semaphore bank.
    pub fn wait_for(&self, bank: usize) -> Option<(InstId, usize)> {
        self.waits
            .iter()
            .find(|(_, _, b)| *b == bank)
            .map(|(i, o, _)| (*i, *o))
    }
}

/// Whether an expression reads an operand (an immediate that narrows a shape).
fn mentions_operand(e: &isa_specs::model::Expr) -> bool {
    use isa_specs::model::Expr;
    match e {
        Expr::Operand(_) => true,
        Expr::Neg(a) => mentions_operand(a),
        Expr::Binary(_, a, b) => mentions_operand(a) || mentions_operand(b),
        Expr::Call(_, args) => args.iter().any(mentions_operand),
        _ => false,
    }
}
