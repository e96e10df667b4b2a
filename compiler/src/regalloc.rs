//! Register allocation by linear scan, and its independent checker.
//!
//! Instructions are written with virtual registers ([`VOperand::Virtual`]);
//! the allocator maps each virtual register of a register file to a physical
//! one of that file, reusing a physical register once its virtual register is
//! dead. Which operands an instruction reads and writes comes from its
//! semantics in the machine model (an operand assigned with `=` is written; one
//! read, or assigned with `+=`, `max=`, `min=`, is read). A source whose value
//! dies at an instruction gives its register to that instruction's result when
//! the instruction is element-wise in it ([`in_place`]), as `vadd v0, v0, v1`
//! is; otherwise sources and results get distinct registers. Running out of
//! registers is an error naming the file (spilling is the memory planner's
//! job, one level up). Values live into the code are not virtual: they are
//! given as fixed physical registers, which the allocator then leaves alone.
//!
//! [`check`] replays the allocated code, tracking which virtual register each
//! physical register holds, and reports any read of a register that holds
//! another value.

use isa_specs::Machine;
use isa_specs::model::{Access, AssignOp, InstId, OperandKind, RegFileId, SemExpr, Stmt};
use isa_specs::target::{MInst, OpValue};

/// An operand before allocation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VOperand {
    /// A virtual register of a register file (numbered per file).
    Virtual(RegFileId, u32),
    /// A value already final (address, immediate, semaphore, or a physical register).
    Fixed(OpValue),
}

/// An instruction before allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct VInst {
    /// The instruction.
    pub inst: InstId,
    /// Operands, in declaration order.
    pub operands: Vec<VOperand>,
}

/// The allocation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfRegisters {
    /// The register file.
    pub file: String,
    /// Registers live at once at the worst point.
    pub needed: usize,
    /// Registers the file has.
    pub available: usize,
    /// Index of the instruction where it ran out.
    pub at: usize,
}

impl std::fmt::Display for OutOfRegisters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "instruction {} needs more than the {} registers of `{}` ({} live)",
            self.at, self.available, self.file, self.needed
        )
    }
}

impl std::error::Error for OutOfRegisters {}

/// Every operand access in `e`, with whether it is under a reduction (read at
/// many elements for each one written).
fn accesses<'a>(e: &'a SemExpr, reduced: bool, out: &mut Vec<(&'a Access, bool)>) {
    match e {
        SemExpr::Access(a) => out.push((a, reduced)),
        SemExpr::Const(_) | SemExpr::Index(_) => {}
        SemExpr::Reduce(_, _, a) => accesses(a, true, out),
        SemExpr::Neg(a) | SemExpr::Cast(_, a) => accesses(a, reduced, out),
        SemExpr::Binary(_, a, b) => {
            accesses(a, reduced, out);
            accesses(b, reduced, out);
        }
        SemExpr::Call(_, args) => args.iter().for_each(|a| accesses(a, reduced, out)),
    }
}

/// Which operands an instruction reads and writes: `(reads, writes)` by operand index.
pub fn roles(m: &Machine, inst: InstId) -> (Vec<bool>, Vec<bool>) {
    let def = &m.instructions[inst.index()];
    let n = def.operands.len();
    let (mut reads, mut writes) = (vec![false; n], vec![false; n]);
    for s in &def.semantics.stmts {
        if let Stmt::Assign { target, op, value } = s {
            writes[target.operand.index()] = true;
            if *op != AssignOp::Set {
                reads[target.operand.index()] = true;
            }
            let mut read = Vec::new();
            accesses(value, false, &mut read);
            read.iter()
                .for_each(|(a, _)| reads[a.operand.index()] = true);
        }
    }
    (reads, writes)
}

/// Whether operand `dst` may share a register with operand `src`: the
/// semantics is a single `=` to `dst` whose every read of `src` is at the same
/// element it writes, so each element is read before it is overwritten.
pub fn in_place(m: &Machine, inst: InstId, src: usize, dst: usize) -> bool {
    let def = &m.instructions[inst.index()];
    let mut assigns = def
        .semantics
        .stmts
        .iter()
        .filter(|s| matches!(s, Stmt::Assign { .. }));
    let (Some(Stmt::Assign { target, op, value }), None) = (assigns.next(), assigns.next()) else {
        return false;
    };
    let mut read = Vec::new();
    accesses(value, false, &mut read);
    *op == AssignOp::Set
        && target.operand.index() == dst
        && read.iter().all(|(a, reduced)| {
            a.operand.index() != src || (!reduced && a.indices == target.indices)
        })
}

/// Per register file and virtual register, the last instruction index at
/// which it is used (virtual registers are numbered densely per file).
fn last_uses(m: &Machine, code: &[VInst]) -> Vec<Vec<usize>> {
    let mut last: Vec<Vec<usize>> = vec![Vec::new(); m.regfiles.len()];
    for (i, vi) in code.iter().enumerate() {
        for op in &vi.operands {
            if let VOperand::Virtual(f, v) = *op {
                let l = &mut last[f.index()];
                if l.len() <= v as usize {
                    l.resize(v as usize + 1, usize::MAX);
                }
                l[v as usize] = i;
            }
        }
    }
    last
}

/// [`roles`] of every instruction of the machine, by instruction index.
fn all_roles(m: &Machine) -> Vec<(Vec<bool>, Vec<bool>)> {
    (0..m.instructions.len())
        .map(|i| roles(m, InstId::from_index(i)))
        .collect()
}

/// Marks a physical register named directly by the code.
const RESERVED: u32 = u32::MAX;

/// Allocates physical registers. Physical registers the code names directly
/// (fixed operands) are never given to a virtual register.
pub fn allocate(m: &Machine, code: &[VInst]) -> Result<Vec<MInst>, OutOfRegisters> {
    allocate_sided(m, code, |_, _| None)
}

/// Sides from `QUARTERS` on name a quarter of a file of 32 registers or
/// more (`QUARTERS + q`), preferred before the half holding it.
pub const QUARTERS: u8 = 4;

/// [`allocate`], where `side(file, virtual)` may name the half (0 or 1) of
/// a file of 16 registers or more that a virtual register prefers, or a
/// quarter ([`QUARTERS`]): a free register of that part is chosen if there
/// is one (else of its half, else any). Consecutive
/// blocks of rows of a row group prefer alternate halves, so a block's
/// registers were last read by the block before the one before it, not by
/// the final stores of the one just before (which the scheduler could not
/// move it above).
pub fn allocate_sided(
    m: &Machine,
    code: &[VInst],
    side: impl Fn(usize, u32) -> Option<u8>,
) -> Result<Vec<MInst>, OutOfRegisters> {
    let last = last_uses(m, code);
    let roles = all_roles(m);
    // Per file: which virtual register each physical register holds.
    let mut holds: Vec<Vec<Option<u32>>> = m
        .regfiles
        .iter()
        .map(|r| vec![None; r.count.value.max(0) as usize])
        .collect();
    // Registers the code names directly are reserved throughout.
    for vi in code {
        let def = &m.instructions[vi.inst.index()];
        for (o, op) in def.operands.iter().zip(&vi.operands) {
            if let (OperandKind::Reg { file, .. }, VOperand::Fixed(OpValue::Reg(p))) = (&o.kind, op)
                && let Some(slot) = holds[file.index()].get_mut(*p as usize)
            {
                *slot = Some(RESERVED);
            }
        }
    }
    // Per file and register: after which instruction it was last freed.
    let mut freed: Vec<Vec<usize>> = holds.iter().map(|h| vec![0; h.len()]).collect();
    // Per file and virtual register: its physical register (`u32::MAX`: none yet).
    let mut assigned: Vec<Vec<u32>> = last.iter().map(|l| vec![u32::MAX; l.len()]).collect();
    let mut out = Vec::with_capacity(code.len());
    for (i, vi) in code.iter().enumerate() {
        let (reads, writes) = &roles[vi.inst.index()];
        // Sources whose value dies here: their registers may take a result.
        let mut donors: Vec<(usize, RegFileId, u32)> = vi
            .operands
            .iter()
            .enumerate()
            .filter_map(|(k, op)| match *op {
                VOperand::Virtual(f, v)
                    if reads[k]
                        && !writes[k]
                        && last[f.index()][v as usize] == i
                        && assigned[f.index()][v as usize] != u32::MAX =>
                {
                    Some((k, f, assigned[f.index()][v as usize]))
                }
                _ => None,
            })
            .collect();
        let mut operands = Vec::with_capacity(vi.operands.len());
        for (k, op) in vi.operands.iter().enumerate() {
            let v = match *op {
                VOperand::Fixed(v) => v,
                VOperand::Virtual(f, v) => {
                    let phys = if assigned[f.index()][v as usize] != u32::MAX {
                        assigned[f.index()][v as usize]
                    } else {
                        let donor = (writes[k] && !reads[k])
                            .then(|| {
                                donors.iter().position(|&(src, df, _)| {
                                    df == f && in_place(m, vi.inst, src, k)
                                })
                            })
                            .flatten();
                        let file = &mut holds[f.index()];
                        let (half, quarter) = (file.len() / 2, file.len() / 4);
                        // The part preferred, then the half holding it, then any.
                        let wanted = |p: usize, level: u8| match side(f.index(), v) {
                            Some(s @ 0..=1) if half >= 8 && level < 2 => (p >= half) == (s == 1),
                            Some(s) if (QUARTERS..QUARTERS + 4).contains(&s) && quarter >= 8 => {
                                let q = usize::from(s - QUARTERS);
                                match level {
                                    0 => p / quarter == q,
                                    1 => p / half == q / 2,
                                    _ => true,
                                }
                            }
                            _ => true,
                        };
                        let free_in = |level: u8| {
                            (0..file.len())
                                .filter(|&p| file[p].is_none() && wanted(p, level))
                                .min_by_key(|&p| freed[f.index()][p])
                        };
                        let p = if let Some(d) = donor {
                            donors.remove(d).2 as usize
                        } else if let Some(p) =
                            free_in(0).or_else(|| free_in(1)).or_else(|| free_in(2))
                        {
                            // The register free the longest: the fewest false
                            // (write-after-read) dependences for the scheduler.
                            p
                        } else {
                            let live = file.iter().filter(|x| x.is_some()).count() + 1;
                            return Err(OutOfRegisters {
                                file: m.regfiles[f.index()].name.clone(),
                                needed: live,
                                available: file.len(),
                                at: i,
                            });
                        };
                        file[p] = Some(v);
                        let p = u32::try_from(p).unwrap_or(u32::MAX);
                        assigned[f.index()][v as usize] = p;
                        p
                    };
                    OpValue::Reg(phys)
                }
            };
            operands.push(v);
        }
        // Registers whose virtual register is not used again become free after
        // this instruction (unless a result has taken them over).
        for op in &vi.operands {
            if let VOperand::Virtual(f, v) = *op
                && last[f.index()][v as usize] == i
                && let p = assigned[f.index()][v as usize] as usize
                && holds[f.index()].get(p) == Some(&Some(v))
            {
                holds[f.index()][p] = None;
                freed[f.index()][p] = i + 1;
            }
        }
        out.push(MInst {
            inst: vi.inst,
            operands,
        });
    }
    Ok(out)
}

/// Replays allocated code: every register an instruction reads must hold the
/// virtual register the unallocated code read there. Returns every violation.
pub fn check(m: &Machine, code: &[VInst], allocated: &[MInst]) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    if code.len() != allocated.len() {
        return Err(vec![format!(
            "{} instructions allocated for {}",
            allocated.len(),
            code.len()
        )]);
    }
    // Per file and physical register: the virtual register it holds (`None`
    // inside: a fixed value; outside: nothing written yet).
    let mut holds: Vec<Vec<Option<Option<u32>>>> = m
        .regfiles
        .iter()
        .map(|r| vec![None; r.count.value.max(0) as usize])
        .collect();
    let held = |holds: &Vec<Vec<Option<Option<u32>>>>, f: RegFileId, p: u32| {
        holds[f.index()].get(p as usize).copied().flatten()
    };
    let roles = all_roles(m);
    for (i, (vi, ai)) in code.iter().zip(allocated).enumerate() {
        let def = &m.instructions[vi.inst.index()];
        if vi.inst != ai.inst || vi.operands.len() != ai.operands.len() {
            errors.push(format!("instruction {i}: not the same instruction"));
            continue;
        }
        let (reads, writes) = &roles[vi.inst.index()];
        for (k, (vo, ao)) in vi.operands.iter().zip(&ai.operands).enumerate() {
            match (vo, ao) {
                (VOperand::Fixed(a), b) if a != b => {
                    errors.push(format!("instruction {i}: operand {k} changed"));
                }
                (VOperand::Virtual(f, v), OpValue::Reg(p)) => {
                    if !matches!(def.operands[k].kind, OperandKind::Reg { file, .. } if file == *f)
                    {
                        errors.push(format!(
                            "instruction {i}: operand {k} is not a register of that file"
                        ));
                    }
                    if i64::from(*p) >= m.regfiles[f.index()].count.value {
                        errors.push(format!("instruction {i}: register {p} does not exist"));
                    }
                    if reads[k] && held(&holds, *f, *p) != Some(Some(*v)) {
                        errors.push(format!("instruction {i}: reads virtual register {v} from {}{p}, which holds {:?}", m.regfiles[f.index()].name, held(&holds, *f, *p)));
                    }
                }
                (VOperand::Fixed(_), OpValue::Reg(p)) if reads[k] => {
                    if let OperandKind::Reg { file, .. } = def.operands[k].kind
                        && let Some(Some(v)) = held(&holds, file, *p)
                    {
                        errors.push(format!("instruction {i}: fixed register {}{p} was overwritten by virtual register {v}", m.regfiles[file.index()].name));
                    }
                }
                (VOperand::Virtual(..), _) => errors.push(format!(
                    "instruction {i}: operand {k} was not given a register"
                )),
                _ => {}
            }
        }
        // A result may share a register with a source only where the instruction is element-wise.
        let regs: Vec<Option<(RegFileId, u32)>> = vi
            .operands
            .iter()
            .zip(&ai.operands)
            .enumerate()
            .map(|(k, (vo, ao))| match (vo, ao, &def.operands[k].kind) {
                (VOperand::Virtual(f, _), OpValue::Reg(p), _) => Some((*f, *p)),
                (VOperand::Fixed(_), OpValue::Reg(p), OperandKind::Reg { file, .. }) => {
                    Some((*file, *p))
                }
                _ => None,
            })
            .collect();
        for (j, k) in (0..regs.len()).flat_map(|j| (0..regs.len()).map(move |k| (j, k))) {
            if j != k
                && writes[j]
                && reads[k]
                && regs[j].is_some()
                && regs[j] == regs[k]
                && !in_place(m, vi.inst, k, j)
            {
                errors.push(format!("instruction {i}: operand {j} overwrites the register of operand {k}, which it does not read element-wise"));
            }
        }
        for (k, (vo, reg)) in vi.operands.iter().zip(&regs).enumerate() {
            if let Some((f, p)) = reg
                && writes[k]
                && let Some(slot) = holds[f.index()].get_mut(*p as usize)
            {
                *slot = Some(if let VOperand::Virtual(_, v) = vo {
                    Some(*v)
                } else {
                    None
                });
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}
