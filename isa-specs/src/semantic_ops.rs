//! The semantic-op vocabulary: what kinds of operation an instruction's
//! semantics perform, in the terms the compiler asks for (matmul, exp, max
//! reduction, cast, copy between memory levels, ...).
//!
//! The checker uses it for coverage warnings; the compiler uses it to know
//! what a target can do before matching patterns in detail.

use crate::model::*;
use serde::{Deserialize, Serialize};

/// One kind of operation an instruction performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SemOp {
    /// A contraction: `acc[i,j] += a[i,k] * b[k,j]` (also matrix-vector).
    MatMul {
        /// Element type of the first factor.
        a: DType,
        /// Element type of the second factor.
        b: DType,
        /// Element type of the accumulator.
        acc: DType,
    },
    /// An element-wise function.
    Func(Func),
    /// An element-wise arithmetic operator.
    Binary(BinOp),
    /// A reduction (explicit, or implied by `+=` / `max=` / `min=`).
    Reduce(ReduceOp),
    /// An element type conversion.
    Cast {
        /// From.
        from: DType,
        /// To.
        to: DType,
    },
    /// A copy between two memories.
    Copy {
        /// Source memory.
        from: MemId,
        /// Destination memory.
        to: MemId,
    },
    /// A copy from a memory into a register.
    Load(MemId),
    /// A copy from a register into a memory.
    Store(MemId),
    /// A copy that permutes indices.
    Transpose,
    /// Synchronisation or control.
    Control,
}

/// The element type of an operand's elements, if it has elements.
pub fn operand_dtype(op: &Operand, regfiles: &[RegFile]) -> Option<DType> {
    match &op.kind {
        OperandKind::Reg { file, .. } => regfiles.get(file.index()).map(|r| r.dtype),
        OperandKind::Mem { dtype, .. } | OperandKind::ImmReal { dtype } => Some(*dtype),
        OperandKind::Imm { .. } => Some(DType::I32),
        OperandKind::Sem { .. } => None,
    }
}

/// The element type of a semantics expression (`None` for constants, which adopt their context's).
pub fn expr_dtype(e: &SemExpr, inst: &Instruction, regfiles: &[RegFile]) -> Option<DType> {
    match e {
        SemExpr::Access(a) => inst
            .operands
            .get(a.operand.index())
            .and_then(|o| operand_dtype(o, regfiles)),
        SemExpr::Const(_) => None,
        SemExpr::Index(_) => Some(DType::I32),
        SemExpr::Cast(d, _) => Some(*d),
        SemExpr::Neg(a) | SemExpr::Reduce(_, _, a) => expr_dtype(a, inst, regfiles),
        SemExpr::Binary(_, a, b) => {
            expr_dtype(a, inst, regfiles).or_else(|| expr_dtype(b, inst, regfiles))
        }
        SemExpr::Call(Func::Select, args) => {
            args.get(1).and_then(|a| expr_dtype(a, inst, regfiles))
        }
        SemExpr::Call(_, args) => args.first().and_then(|a| expr_dtype(a, inst, regfiles)),
    }
}

fn strip_casts(e: &SemExpr) -> &SemExpr {
    match e {
        SemExpr::Cast(_, a) => strip_casts(a),
        other => other,
    }
}

fn indices_of(a: &Access) -> Vec<IndexId> {
    a.indices
        .iter()
        .flat_map(|x| x.terms.iter().map(|(i, _)| *i))
        .collect()
}

fn free_indices(e: &SemExpr, out: &mut Vec<IndexId>) {
    match e {
        SemExpr::Access(a) => out.extend(indices_of(a)),
        SemExpr::Index(i) => out.push(*i),
        SemExpr::Const(_) => {}
        SemExpr::Neg(a) | SemExpr::Cast(_, a) => free_indices(a, out),
        SemExpr::Binary(_, a, b) => {
            free_indices(a, out);
            free_indices(b, out);
        }
        SemExpr::Call(_, args) => args.iter().for_each(|a| free_indices(a, out)),
        SemExpr::Reduce(_, ids, body) => {
            let mut inner = Vec::new();
            free_indices(body, &mut inner);
            out.extend(inner.into_iter().filter(|i| !ids.contains(i)));
        }
    }
}

/// Whether `body` reduced over `reduced` is a contraction of two tensors.
fn contraction(
    body: &SemExpr,
    reduced: &[IndexId],
    inst: &Instruction,
    regfiles: &[RegFile],
) -> Option<(DType, DType)> {
    let SemExpr::Binary(BinOp::Mul, x, y) = strip_casts(body) else {
        return None;
    };
    let (SemExpr::Access(a), SemExpr::Access(b)) = (strip_casts(x), strip_casts(y)) else {
        return None;
    };
    let (ia, ib) = (indices_of(a), indices_of(b));
    let shared = reduced.iter().any(|k| ia.contains(k) && ib.contains(k));
    let kept = ia.iter().chain(&ib).any(|i| !reduced.contains(i));
    let dt = |acc: &Access| {
        inst.operands
            .get(acc.operand.index())
            .and_then(|o| operand_dtype(o, regfiles))
    };
    (shared && kept).then_some((dt(a)?, dt(b)?))
}

/// Every kind of operation an instruction performs.
pub fn classify(inst: &Instruction, regfiles: &[RegFile]) -> Vec<SemOp> {
    let mut out = Vec::new();
    for s in &inst.semantics.stmts {
        let Stmt::Assign { target, op, value } = s else {
            out.push(SemOp::Control);
            continue;
        };
        let target_dtype = inst
            .operands
            .get(target.operand.index())
            .and_then(|o| operand_dtype(o, regfiles));
        let lhs = indices_of(target);
        let mut rhs = Vec::new();
        free_indices(value, &mut rhs);
        let implicit: Vec<IndexId> = rhs.iter().filter(|i| !lhs.contains(i)).copied().collect();
        let mut matmul = false;
        if *op != AssignOp::Set && !implicit.is_empty() {
            let reduce = match op {
                AssignOp::Max => ReduceOp::Max,
                AssignOp::Min => ReduceOp::Min,
                _ => ReduceOp::Sum,
            };
            if reduce == ReduceOp::Sum
                && let (Some((a, b)), Some(acc)) =
                    (contraction(value, &implicit, inst, regfiles), target_dtype)
            {
                out.push(SemOp::MatMul { a, b, acc });
                matmul = true;
            } else {
                out.push(SemOp::Reduce(reduce));
            }
        }
        walk(value, inst, regfiles, &mut out, matmul, target_dtype);
        copy_kind(inst, target, value, &mut out);
    }
    out.sort_by_key(|o| format!("{o:?}"));
    out.dedup();
    out
}

fn walk(
    e: &SemExpr,
    inst: &Instruction,
    regfiles: &[RegFile],
    out: &mut Vec<SemOp>,
    in_matmul: bool,
    acc: Option<DType>,
) {
    match e {
        SemExpr::Access(_) | SemExpr::Const(_) | SemExpr::Index(_) => {}
        SemExpr::Neg(a) => walk(a, inst, regfiles, out, in_matmul, acc),
        SemExpr::Cast(to, a) => {
            if let Some(from) = expr_dtype(a, inst, regfiles)
                && from != *to
            {
                out.push(SemOp::Cast { from, to: *to });
            }
            walk(a, inst, regfiles, out, in_matmul, acc);
        }
        SemExpr::Binary(op, a, b) => {
            if !(in_matmul && *op == BinOp::Mul) {
                out.push(SemOp::Binary(*op));
            }
            walk(a, inst, regfiles, out, in_matmul, acc);
            walk(b, inst, regfiles, out, in_matmul, acc);
        }
        SemExpr::Call(f, args) => {
            out.push(SemOp::Func(*f));
            args.iter()
                .for_each(|a| walk(a, inst, regfiles, out, in_matmul, acc));
        }
        SemExpr::Reduce(op, ids, body) => {
            match (op, contraction(body, ids, inst, regfiles), acc) {
                (ReduceOp::Sum, Some((a, b)), Some(acc)) => out.push(SemOp::MatMul { a, b, acc }),
                _ => out.push(SemOp::Reduce(*op)),
            }
            walk(body, inst, regfiles, out, true, acc);
        }
    }
}

fn copy_kind(inst: &Instruction, target: &Access, value: &SemExpr, out: &mut Vec<SemOp>) {
    let SemExpr::Access(src) = strip_casts(value) else {
        return;
    };
    let place = |a: &Access| inst.operands.get(a.operand.index()).map(|o| &o.kind);
    match (place(src), place(target)) {
        (Some(OperandKind::Mem { mem: from, .. }), Some(OperandKind::Mem { mem: to, .. }))
            if from != to =>
        {
            out.push(SemOp::Copy {
                from: *from,
                to: *to,
            });
        }
        (Some(OperandKind::Mem { mem, .. }), Some(OperandKind::Reg { .. })) => {
            out.push(SemOp::Load(*mem));
        }
        (Some(OperandKind::Reg { .. }), Some(OperandKind::Mem { mem, .. })) => {
            out.push(SemOp::Store(*mem));
        }
        _ => {}
    }
    if indices_of(src) != indices_of(target)
        && indices_of(src).len() == indices_of(target).len()
        && indices_of(src).len() > 1
    {
        out.push(SemOp::Transpose);
    }
}
