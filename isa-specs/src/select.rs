//! Instruction selection by semantics: the compiler describes a tile
//! operation in index notation ([`TileOp`]); generated matchers (one per
//! instruction, from `codegen-gen`'s `gen_select`) compare it structurally
//! with each instruction's semantics, binding pattern indices to the
//! operation's indices (renaming) and pattern operands to its tensors; then
//! [`finish`] derives the operand values (registers, addresses, immediates
//! from shapes and strides) and checks them against the machine in force.
//!
//! Matching is exact up to index renaming: operand order in commutative
//! operators and explicit casts must agree (the compiler canonicalises before
//! selecting). Instructions with several assignments are not matchable yet.

use crate::eval::{self, WithOperands};
use crate::model::*;
use crate::target::{self, Isa, MInst, OpValue};

/// Where a tensor of a tile operation lives.
#[derive(Clone, Debug, PartialEq)]
pub enum TilePlace {
    /// A register.
    Reg {
        /// Register file.
        file: RegFileId,
        /// Register index.
        reg: u32,
    },
    /// A region of a memory.
    Mem {
        /// The memory.
        mem: MemId,
        /// Byte address of element 0.
        addr: u64,
        /// Element strides per dimension.
        strides: Vec<i64>,
    },
    /// An integer scalar known at compile time.
    Imm(i64),
    /// A real scalar known at compile time.
    Real(f32),
}

/// A tensor of a tile operation.
#[derive(Clone, Debug, PartialEq)]
pub struct TileTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape (`[]` for scalars).
    pub shape: Vec<i64>,
    /// Where it lives.
    pub place: TilePlace,
}

/// An element access of a tile operation: `tensor[affine indices]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TileAccess {
    /// Index into [`TileOp::tensors`].
    pub tensor: usize,
    /// One affine index per dimension, over the operation's index variables.
    pub indices: Vec<Affine>,
}

/// A tile operation's expression, mirroring [`SemExpr`].
#[derive(Clone, Debug, PartialEq)]
pub enum TileExpr {
    /// An element.
    Access(TileAccess),
    /// A constant.
    Const(f64),
    /// `-e`
    Neg(Box<TileExpr>),
    /// `a op b`
    Binary(BinOp, Box<TileExpr>, Box<TileExpr>),
    /// `f(args)`
    Call(Func, Vec<TileExpr>),
    /// `dtype(e)`
    Cast(DType, Box<TileExpr>),
    /// `op(indices) body`
    Reduce(ReduceOp, Vec<IndexId>, Box<TileExpr>),
    /// The value of an index variable.
    Index(IndexId),
}

/// `target op value` over index variables with the given extents.
#[derive(Clone, Debug, PartialEq)]
pub struct TileOp {
    /// The tensors it reads and writes.
    pub tensors: Vec<TileTensor>,
    /// Extent of each index variable.
    pub extents: Vec<i64>,
    /// What is written.
    pub target: TileAccess,
    /// How.
    pub op: AssignOp,
    /// The value.
    pub value: TileExpr,
}

/// A pattern's index for one dimension: `(index terms, immediate-offset terms, constant)`.
pub type PatternDim<'a> = (&'a [(usize, i64)], &'a [(usize, i64)], i64);

/// What a structural match found: pattern indices and operands bound to the operation's.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Binder {
    /// Pattern index -> operation index.
    pub index: Vec<Option<IndexId>>,
    /// Pattern operand -> operation tensor.
    pub operand: Vec<Option<usize>>,
    /// Equations `Σ coeff · immediate = value` from immediate offsets in indices.
    pub offsets: Vec<(Vec<(usize, i64)>, i64)>,
}

impl Binder {
    /// An empty binding for an instruction.
    pub fn new(inst: &Instruction) -> Binder {
        Binder {
            index: vec![None; inst.semantics.indices.len()],
            operand: vec![None; inst.operands.len()],
            offsets: Vec::new(),
        }
    }

    /// Binds pattern index `p` to operation index `o`, keeping the binding one-to-one.
    pub fn bind_index(&mut self, p: usize, o: IndexId) -> bool {
        match self.index.get(p).copied().flatten() {
            Some(x) => x == o,
            None if self.index.contains(&Some(o)) => false,
            None => self.index.get_mut(p).map(|slot| *slot = Some(o)).is_some(),
        }
    }

    /// Binds pattern operand `p` to tensor `t`, consistently.
    pub fn bind_operand(&mut self, p: usize, t: usize) -> bool {
        match self.operand.get(p).copied().flatten() {
            Some(x) => x == t,
            None => self
                .operand
                .get_mut(p)
                .map(|slot| *slot = Some(t))
                .is_some(),
        }
    }

    /// Matches a pattern access (operand `p`, per dimension: index terms, immediate-offset
    /// terms, constant) against an operation access. Where the pattern has immediate
    /// offsets, the operation's constant minus the pattern's is what they must add up to.
    pub fn access(&mut self, p: usize, dims: &[PatternDim<'_>], a: &TileAccess) -> bool {
        if dims.len() != a.indices.len() || !self.bind_operand(p, a.tensor) {
            return false;
        }
        dims.iter()
            .zip(&a.indices)
            .all(|((terms, offsets, c), ix)| {
                let indices_match = terms.len() == ix.terms.len()
                    && terms
                        .iter()
                        .zip(&ix.terms)
                        .all(|((pi, pk), (oi, ok))| pk == ok && self.bind_index(*pi, *oi));
                if offsets.is_empty() {
                    return indices_match && *c == ix.constant && ix.offsets.is_empty();
                }
                self.offsets.push((offsets.to_vec(), ix.constant - c));
                indices_match && ix.offsets.is_empty()
            })
    }

    /// Binds reduction indices pairwise.
    pub fn reduce(&mut self, p: &[usize], o: &[IndexId]) -> bool {
        p.len() == o.len() && p.iter().zip(o).all(|(pi, oi)| self.bind_index(*pi, *oi))
    }
}

/// Whether a constant of the operation equals the pattern's.
pub fn same_constant(op: f64, pattern: f64) -> bool {
    op == pattern || (op - pattern).abs() <= 1e-12 * pattern.abs().max(1.0)
}

/// Derives the operand values of a matched instruction and checks them against the machine in force.
/// Semaphore operands are set to 0: the caller allocates them.
pub fn finish(m: &Machine, inst: InstId, b: &Binder, op: &TileOp) -> Result<MInst, String> {
    let imms = solve(m, inst, b, op)?;
    assemble(m, inst, b, op, &imms)
}

/// The immediates of a matched instruction (`None` for other operands),
/// after checking every operand's place, shape and strides: everything
/// [`finish`] derives that depends only on what [`FinishCache`] keys on.
fn solve(m: &Machine, inst: InstId, b: &Binder, op: &TileOp) -> Result<Vec<Option<i64>>, String> {
    let def = &m.instructions[inst.index()];
    let mut imms: Vec<Option<i64>> = vec![None; def.operands.len()];
    let params: Vec<i64> = m.params.iter().map(|p| p.value).collect();
    // Immediates follow from the tensors' dimensions and strides: solve every
    // `dim expression = value` that is linear in one still unknown immediate.
    let mut equations: Vec<(&Expr, i64)> = Vec::new();
    for (oi, o) in def.operands.iter().enumerate() {
        let Some(t) = b.operand[oi].and_then(|t| op.tensors.get(t)) else {
            continue;
        };
        let (dims, strides): (&[Expr], Option<&Vec<Expr>>) = match &o.kind {
            OperandKind::Reg { shape, .. } => (shape, None),
            OperandKind::Mem { shape, stride, .. } => (shape, stride.as_ref()),
            _ => continue,
        };
        equations.extend(dims.iter().zip(t.shape.iter().copied()));
        if let (Some(st), TilePlace::Mem { strides: ts, .. }) = (strides, &t.place) {
            // The stride of a dimension of extent 1 is never used: it determines nothing.
            equations.extend(
                st.iter()
                    .zip(ts.iter().copied())
                    .zip(&t.shape)
                    .filter(|(_, n)| **n > 1)
                    .map(|(e, _)| e),
            );
        }
    }
    for (terms, value) in &b.offsets {
        if let [(imm, k)] = terms.as_slice()
            && *k != 0
            && value % k == 0
        {
            imms[*imm] = Some(value / k);
        }
    }
    for _ in 0..def.operands.len() {
        let mut progress = false;
        for (e, value) in &equations {
            if let Some((imm, v)) = solve_linear(e, *value, &params, &imms) {
                imms[imm] = Some(v);
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    // An immediate nothing determines only sets strides of unit dimensions
    // (or nothing at all): any value the constraints accept will do.
    for (oi, o) in def.operands.iter().enumerate() {
        if let (OperandKind::Imm { lo, hi }, None, None) = (&o.kind, imms[oi], b.operand[oi]) {
            imms[oi] = free_immediate(def, &params, &imms, oi, *lo, *hi);
        }
    }
    let env = WithOperands {
        params: &params,
        operands: &imms,
    };
    let eval_i = |e: &Expr| eval::eval_int(e, &env).map_err(|err| err.to_string());
    for (oi, o) in def.operands.iter().enumerate() {
        let tensor = b.operand[oi].and_then(|t| op.tensors.get(t));
        match (&o.kind, tensor) {
            (OperandKind::Reg { file, shape }, Some(t)) => {
                let TilePlace::Reg { file: tf, .. } = &t.place else {
                    return Err(format!(
                        "`{}` must be in register file `{}`",
                        o.name,
                        m.regfiles[file.index()].name
                    ));
                };
                if tf != file || t.dtype != m.regfiles[file.index()].dtype {
                    return Err(format!(
                        "`{}` must be in register file `{}`",
                        o.name,
                        m.regfiles[file.index()].name
                    ));
                }
                check_shape(&o.name, shape, &t.shape, &eval_i)?;
            }
            (
                OperandKind::Mem {
                    mem,
                    shape,
                    dtype,
                    stride,
                    ..
                },
                Some(t),
            ) => {
                let TilePlace::Mem {
                    mem: tm, strides, ..
                } = &t.place
                else {
                    return Err(format!(
                        "`{}` must be in memory `{}`",
                        o.name,
                        m.memories[mem.index()].name
                    ));
                };
                if tm != mem || t.dtype != *dtype {
                    return Err(format!(
                        "`{}` must be a {} tensor in memory `{}`",
                        o.name,
                        dtype.name(),
                        m.memories[mem.index()].name
                    ));
                }
                check_shape(&o.name, shape, &t.shape, &eval_i)?;
                let want: Vec<i64> = match stride {
                    Some(s) => s.iter().map(&eval_i).collect::<Result<_, _>>()?,
                    None => dense(&t.shape),
                };
                // Unit dimensions have no meaningful stride.
                let differs = want
                    .iter()
                    .zip(strides)
                    .zip(&t.shape)
                    .any(|((w, s), n)| *n > 1 && w != s);
                if differs {
                    return Err(format!(
                        "`{}` needs strides {want:?}, the tensor has {strides:?}",
                        o.name
                    ));
                }
            }
            (OperandKind::Imm { .. }, Some(t)) if !matches!(t.place, TilePlace::Imm(_)) => {
                return Err(format!("`{}` must be an integer constant", o.name));
            }
            (OperandKind::ImmReal { .. }, Some(t)) if !matches!(t.place, TilePlace::Real(_)) => {
                return Err(format!("`{}` must be a real constant", o.name));
            }
            (OperandKind::Imm { .. }, None) if imms[oi].is_none() => {
                return Err(format!(
                    "nothing in the operation determines immediate `{}`",
                    o.name
                ));
            }
            (
                OperandKind::Reg { .. } | OperandKind::Mem { .. } | OperandKind::ImmReal { .. },
                None,
            ) => {
                return Err(format!("operand `{}` is not bound", o.name));
            }
            _ => {}
        }
    }
    Ok(imms)
}

/// The instruction instance from solved immediates and the tensors' registers,
/// addresses and constants, checked against the encoding's fields and the
/// instruction's constraints (which may read registers and addresses).
fn assemble(
    m: &Machine,
    inst: InstId,
    b: &Binder,
    op: &TileOp,
    imms: &[Option<i64>],
) -> Result<MInst, String> {
    let def = &m.instructions[inst.index()];
    let operands = (0..def.operands.len())
        .map(|oi| {
            let tensor = b.operand[oi].and_then(|t| op.tensors.get(t));
            match (&def.operands[oi].kind, tensor) {
                (OperandKind::Sem { .. }, _) => OpValue::Sem(0),
                (_, Some(t)) => match t.place {
                    TilePlace::Reg { reg, .. } => OpValue::Reg(reg),
                    TilePlace::Mem { addr, .. } => OpValue::Addr(addr),
                    TilePlace::Imm(v) => OpValue::Imm(v),
                    TilePlace::Real(x) => OpValue::Real(x),
                },
                (_, None) => OpValue::Imm(imms[oi].unwrap_or(0)),
            }
        })
        .collect();
    let minst = MInst { inst, operands };
    for i in 0..def.operands.len() {
        target::operand_to_field(m, def, i, minst.operands[i]).map_err(|e| e.to_string())?;
    }
    target::check_constraints(m, &minst).map_err(|e| e.to_string())?;
    Ok(minst)
}

/// [`finish`] with memory: what it derives from an operation's shapes,
/// strides, element types and places (the immediates, and whether they fit)
/// is kept per instruction and kept for the next operation that has the same,
/// so that only registers, addresses and constants are checked again.
/// Lowering selects the same few instructions on the same tile shapes
/// hundreds of thousands of times. One cache serves one machine.
#[derive(Debug, Default)]
pub struct FinishCache {
    solved: rustc_hash::FxHashMap<Vec<i64>, Result<Vec<Option<i64>>, String>>,
    key: Vec<i64>,
}

impl FinishCache {
    /// The same as [`finish`]`(m, inst, b, op)`.
    pub fn finish(
        &mut self,
        m: &Machine,
        inst: InstId,
        b: &Binder,
        op: &TileOp,
    ) -> Result<MInst, String> {
        self.key_of(inst, b, op);
        let imms = match self.solved.get(self.key.as_slice()) {
            Some(solved) => solved.as_ref().map_err(Clone::clone)?,
            None => {
                let solved = solve(m, inst, b, op);
                self.solved
                    .entry(self.key.clone())
                    .or_insert(solved)
                    .as_ref()
                    .map_err(Clone::clone)?
            }
        };
        assemble(m, inst, b, op, imms)
    }

    /// Everything [`solve`] reads, as numbers: the instruction, the offset
    /// equations, and per operand whether it is bound and to a tensor of
    /// what type, place, shape and strides (registers, addresses and constant
    /// values left out).
    fn key_of(&mut self, inst: InstId, b: &Binder, op: &TileOp) {
        let k = &mut self.key;
        k.clear();
        k.push(inst.index() as i64);
        for (terms, value) in &b.offsets {
            k.push(terms.len() as i64);
            k.extend(terms.iter().flat_map(|&(i, c)| [i as i64, c]));
            k.push(*value);
        }
        for t in &b.operand {
            let Some(t) = t.and_then(|t| op.tensors.get(t)) else {
                k.push(-1);
                continue;
            };
            k.push(t.dtype as i64);
            k.push(t.shape.len() as i64);
            k.extend_from_slice(&t.shape);
            match &t.place {
                TilePlace::Reg { file, .. } => k.extend([0, file.index() as i64]),
                TilePlace::Mem { mem, strides, .. } => {
                    k.extend([1, mem.index() as i64, strides.len() as i64]);
                    k.extend_from_slice(strides);
                }
                TilePlace::Imm(_) => k.push(2),
                TilePlace::Real(_) => k.push(3),
            }
        }
    }
}

/// The smallest value of a free immediate in `lo..=hi` (at most 65536 tried)
/// under which the instruction's constraints hold, with the other immediates
/// as derived.
fn free_immediate(
    def: &Instruction,
    params: &[i64],
    imms: &[Option<i64>],
    oi: usize,
    lo: i64,
    hi: i64,
) -> Option<i64> {
    let mut trial = imms.to_vec();
    (lo..=hi.min(lo.saturating_add(65535))).find(|&v| {
        trial[oi] = Some(v);
        let env = WithOperands {
            params,
            operands: &trial,
        };
        def.constraints.iter().all(
            |c| match (eval::eval(&c.lhs, &env), eval::eval(&c.rhs, &env)) {
                (Ok(a), Ok(b)) => c.op.holds(a.as_f64(), b.as_f64()),
                _ => true,
            },
        )
    })
}

/// Operands an expression reads.
fn unknowns(e: &Expr, known: &[Option<i64>], out: &mut Vec<usize>) {
    match e {
        Expr::Operand(o)
            if known.get(o.index()).copied().flatten().is_none() && !out.contains(&o.index()) =>
        {
            out.push(o.index());
        }
        Expr::Neg(a) => unknowns(a, known, out),
        Expr::Binary(_, a, b) => {
            unknowns(a, known, out);
            unknowns(b, known, out);
        }
        Expr::Call(_, args) => args.iter().for_each(|a| unknowns(a, known, out)),
        _ => {}
    }
}

/// If `e = value` has exactly one unknown immediate and `e` is linear in it, its value.
fn solve_linear(
    e: &Expr,
    value: i64,
    params: &[i64],
    known: &[Option<i64>],
) -> Option<(usize, i64)> {
    let mut unknown = Vec::new();
    unknowns(e, known, &mut unknown);
    let [x] = unknown.as_slice() else { return None };
    let at = |v: i64| {
        let mut ops = known.to_vec();
        ops[*x] = Some(v);
        eval::eval_int(
            e,
            &WithOperands {
                params,
                operands: &ops,
            },
        )
        .ok()
    };
    let (f0, f1, f2) = (at(0)?, at(1)?, at(2)?);
    let slope = f1 - f0;
    if slope == 0 || f2 - f1 != slope || (value - f0) % slope != 0 {
        return None;
    }
    let v = (value - f0) / slope;
    (at(v)? == value).then_some((*x, v))
}

fn check_shape(
    name: &str,
    dims: &[Expr],
    shape: &[i64],
    eval_i: &dyn Fn(&Expr) -> Result<i64, String>,
) -> Result<(), String> {
    if dims.len() != shape.len() {
        return Err(format!(
            "`{name}` has rank {}, the tensor rank {}",
            dims.len(),
            shape.len()
        ));
    }
    for (d, (e, n)) in dims.iter().zip(shape).enumerate() {
        let v = eval_i(e)?;
        if v != *n {
            return Err(format!(
                "dimension {d} of `{name}` is {v}, the tensor's is {n}"
            ));
        }
    }
    Ok(())
}

/// Row-major strides of a shape.
pub fn dense(shape: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// A matched, checked instruction and its cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Selected {
    /// The instruction instance.
    pub inst: MInst,
    /// Its latency in cycles.
    pub latency: i64,
    /// Its occupancy in cycles (the cost a selector minimises).
    pub occupancy: i64,
}

/// Every instruction that computes `op` on this machine, cheapest (lowest occupancy, then latency) first.
pub fn select(isa: &dyn Isa, m: &Machine, op: &TileOp) -> Vec<Selected> {
    let mut out: Vec<Selected> = isa
        .match_op(m, op)
        .into_iter()
        .filter_map(|(id, b)| finish(m, id, &b, op).ok())
        .map(|inst| Selected {
            latency: isa.latency(m, &inst),
            occupancy: isa.occupancy(m, &inst),
            inst,
        })
        .collect();
    out.sort_by_key(|s| (s.occupancy, s.latency, s.inst.inst));
    out
}
