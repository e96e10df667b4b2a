//! Small types the tile lowerers share, with no dependence on any of them:
//! the leaf of `lower/`'s module graph (`machine` and `emit` build on it,
//! the lowerers on those).

use isa_specs::model::{DType, Func, InstId, MemId, RegFileId};

/// Where a tile can be: a memory or a register file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    /// A memory.
    Mem(MemId),
    /// A register file.
    Reg(RegFileId),
}

/// A place and the element type held there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Loc {
    /// Where.
    pub place: Place,
    /// In which element type.
    pub dtype: DType,
}

/// How a fresh on-chip buffer lays out its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pad {
    /// Rows back to back (what dense operands and the on-chip side of DMA need).
    Dense,
    /// Rows and pitch rounded up to whole registers (fixed-width loads and stores).
    Registers,
    /// As `Registers`, and every row starting aligned (strided operands written block by block).
    Aligned,
}

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
    /// The element-wise operation a graph op is, if it is one.
    pub fn of(op: &crate::ir::Op) -> Option<Ew> {
        use crate::ir::Op;
        use crate::ir::Unary;
        use isa_specs::model::Func;
        Some(match op {
            Op::Add => Ew::Add,
            Op::Sub => Ew::Sub,
            Op::Mul => Ew::Mul,
            Op::Div => Ew::Div,
            Op::Max => Ew::Max,
            Op::Min => Ew::Min,
            Op::Relu => Ew::Relu,
            Op::Unary(u) => match u {
                Unary::Exp => Ew::Call(Func::Exp),
                Unary::Log => Ew::Call(Func::Log),
                Unary::Tanh => Ew::Call(Func::Tanh),
                Unary::Erf => Ew::Call(Func::Erf),
                Unary::Sqrt => Ew::Call(Func::Sqrt),
                Unary::Reciprocal => Ew::Recip,
                Unary::Neg => Ew::Neg,
                Unary::Abs => Ew::Call(Func::Abs),
                Unary::Sigmoid => Ew::Call(Func::Sigmoid),
                Unary::Round => Ew::Call(Func::Round),
                Unary::Rsqrt => Ew::Call(Func::Rsqrt),
            },
            _ => return None,
        })
    }

    /// Whether it takes a second operand.
    pub fn binary(self) -> bool {
        !matches!(self, Ew::Relu | Ew::Recip | Ew::Neg | Ew::Call(_))
    }

    /// Tensors of its tile operation: the result and the operands.
    pub(super) fn tensors(self) -> usize {
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

/// A masked value: at most this (`-1e9`, the value GPT-2's masks use, or
/// lower, down to `-inf`).
pub const MASKED: f64 = -1e9;
