//! The checked machine model: plain data, serde, typed ids, no spans.
//!
//! This is what generators and the compiler read. Everything a parameter can
//! change is kept as an [`Expr`] beside its value at the current parameter
//! values, so a variant with other values is re-evaluated, not re-parsed.

pub use crate::ast::{AssignOp, BinOp, CmpOp, ReduceOp};
use serde::{Deserialize, Serialize};

macro_rules! typed_id {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub struct $name(pub u32);

        impl $name {
            /// The id as an index into its table.
            pub fn index(self) -> usize {
                self.0 as usize
            }

            /// The id of the `i`th entry of its table.
            pub fn from_index(i: usize) -> Self {
                Self(u32::try_from(i).unwrap_or(u32::MAX))
            }
        }
    )*};
}

typed_id! {
    /// A parameter of [`Machine::params`].
    ParamId;
    /// A memory of [`Machine::memories`].
    MemId;
    /// A register file of [`Machine::regfiles`].
    RegFileId;
    /// A functional unit of [`Machine::units`].
    UnitId;
    /// An issue slot of [`Machine::slots`].
    SlotId;
    /// A semaphore bank of [`Machine::semaphores`].
    SemId;
    /// An encoding format of [`Machine::formats`].
    FormatId;
    /// An instruction of [`Machine::instructions`].
    InstId;
    /// An operand of one instruction.
    OperandId;
    /// An index variable of one instruction's semantics.
    IndexId;
}

/// Element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// 8-bit float, 4 exponent and 3 mantissa bits (OCP FP8 E4M3).
    Fp8E4M3,
    /// 8-bit float, 5 exponent and 2 mantissa bits (OCP FP8 E5M2).
    Fp8E5M2,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    F16,
    /// IEEE single precision.
    F32,
}

impl DType {
    /// Every element type.
    pub const ALL: [DType; 9] = [
        DType::I8,
        DType::U8,
        DType::I16,
        DType::I32,
        DType::Fp8E4M3,
        DType::Fp8E5M2,
        DType::Bf16,
        DType::F16,
        DType::F32,
    ];

    /// The name as written in descriptions.
    pub fn name(self) -> &'static str {
        match self {
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::Fp8E4M3 => "fp8e4m3",
            DType::Fp8E5M2 => "fp8e5m2",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
        }
    }

    /// Parses a name as written in descriptions.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Size of one element in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            DType::I8 | DType::U8 | DType::Fp8E4M3 | DType::Fp8E5M2 => 1,
            DType::I16 | DType::Bf16 | DType::F16 => 2,
            DType::I32 | DType::F32 => 4,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        !matches!(self, DType::I8 | DType::U8 | DType::I16 | DType::I32)
    }
}

/// An expression over parameters and (inside instructions) operands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    /// An integer.
    Int(i64),
    /// A real.
    Real(f64),
    /// A parameter's current value.
    Param(ParamId),
    /// An operand's value: an immediate's value, or a register's index.
    Operand(OperandId),
    /// `-e`
    Neg(Box<Expr>),
    /// `a op b`
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `f(args)`
    Call(Builtin, Vec<Expr>),
}

/// Functions usable in parameter and timing expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Builtin {
    /// `ceil_div(a, b)`: `a / b` rounded up.
    CeilDiv,
    /// `min(a, b, ...)`
    Min,
    /// `max(a, b, ...)`
    Max,
    /// `log2(a)`: floor of the base-2 logarithm.
    Log2,
    /// `pow2(a)`: two to the power `a`.
    Pow2,
    /// `align_up(a, b)`: `a` rounded up to a multiple of `b`.
    AlignUp,
    /// `pick(i, v0, v1, ...)`: the `i`th value (selects by a mode parameter such as a dataflow).
    Pick,
}

impl Builtin {
    /// Every builtin.
    pub const ALL: [Builtin; 7] = [
        Builtin::CeilDiv,
        Builtin::Min,
        Builtin::Max,
        Builtin::Log2,
        Builtin::Pow2,
        Builtin::AlignUp,
        Builtin::Pick,
    ];

    /// The name as written.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::CeilDiv => "ceil_div",
            Builtin::Min => "min",
            Builtin::Max => "max",
            Builtin::Log2 => "log2",
            Builtin::Pow2 => "pow2",
            Builtin::AlignUp => "align_up",
            Builtin::Pick => "pick",
        }
    }

    /// How many arguments it takes: `(min, max)`.
    pub fn arity(self) -> (usize, usize) {
        match self {
            Builtin::CeilDiv | Builtin::AlignUp => (2, 2),
            Builtin::Min | Builtin::Max | Builtin::Pick => (2, usize::MAX),
            Builtin::Log2 | Builtin::Pow2 => (1, 1),
        }
    }
}

/// An integer that parameters may change: its value now and how it was written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntQ {
    /// The value at the current parameter values.
    pub value: i64,
    /// The expression it was computed from.
    pub expr: Expr,
}

/// A real quantity (energy, area, power) that parameters may change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealQ {
    /// The value at the current parameter values.
    pub value: f64,
    /// The expression it was computed from.
    pub expr: Expr,
}

/// The whole checked machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Target name, e.g. `vliw-systolic`.
    pub name: String,
    /// One-line summary.
    pub description: String,
    /// Clock frequency in MHz.
    pub clock_mhz: IntQ,
    /// Width of one microcode word (a whole VLIW bundle) in bits.
    pub word_bits: u32,
    /// Whether the hardware interlocks on hazards or the compiler must avoid them.
    pub hazards: Hazards,
    /// Parameters, in definition order.
    pub params: Vec<Param>,
    /// Memories.
    pub memories: Vec<Memory>,
    /// Register files.
    pub regfiles: Vec<RegFile>,
    /// Functional units.
    pub units: Vec<Unit>,
    /// VLIW issue slots (one slot covering the word for single-issue machines).
    pub slots: Vec<Slot>,
    /// Semaphore banks.
    pub semaphores: Vec<SemaphoreBank>,
    /// Encoding formats.
    pub formats: Vec<Format>,
    /// Instructions.
    pub instructions: Vec<Instruction>,
}

/// Hazard model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hazards {
    /// The hardware stalls until operands are ready.
    Interlocked,
    /// The compiler must schedule around latencies; the simulator reports violations.
    Exposed,
}

/// A parameter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Param {
    /// Its name.
    pub name: String,
    /// Its default, as written.
    pub default: Expr,
    /// Its value (the default, or an override).
    pub value: i64,
}

/// Kinds of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemKind {
    /// Off-chip DRAM.
    Dram,
    /// High-bandwidth memory stacks.
    Hbm,
    /// On-chip SRAM / scratchpad.
    Sram,
}

impl MemKind {
    /// The name as written.
    pub fn name(self) -> &'static str {
        match self {
            MemKind::Dram => "dram",
            MemKind::Hbm => "hbm",
            MemKind::Sram => "sram",
        }
    }

    /// Whether the memory is off chip.
    pub fn off_chip(self) -> bool {
        !matches!(self, MemKind::Sram)
    }
}

/// An addressable memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Its name.
    pub name: String,
    /// What kind.
    pub kind: MemKind,
    /// Capacity in bytes.
    pub size: IntQ,
    /// Number of banks.
    pub banks: IntQ,
    /// Peak bandwidth in bytes per cycle (all ports together).
    pub bandwidth: IntQ,
    /// Access latency in cycles.
    pub latency: IntQ,
    /// Number of independent ports.
    pub ports: IntQ,
    /// Energy per byte read, pJ.
    pub read_energy: RealQ,
    /// Energy per byte written, pJ.
    pub write_energy: RealQ,
    /// Area in mm² (0 for off-chip memory).
    pub area: RealQ,
    /// Static (leakage and refresh) power in mW.
    pub static_power: RealQ,
    /// Units that compute inside this memory (processing in memory).
    pub compute: Vec<UnitId>,
}

/// A register file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegFile {
    /// Its name.
    pub name: String,
    /// Number of registers.
    pub count: IntQ,
    /// Element type.
    pub dtype: DType,
    /// Shape of one register (`[]` scalar, `[n]` vector, `[r, c]` tile).
    pub shape: Vec<IntQ>,
    /// Area in mm².
    pub area: RealQ,
    /// Energy per byte read or written, pJ.
    pub energy: RealQ,
}

/// A functional unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unit {
    /// Its name.
    pub name: String,
    /// How many identical copies.
    pub count: IntQ,
    /// Whether a copy accepts a new operation before the last one finished.
    pub pipelined: bool,
    /// Whether it runs asynchronously from the issue stream (DMA), completing through semaphores.
    pub asynchronous: bool,
    /// Peak multiply-accumulates per cycle per copy (for roofline bounds; 0 if it does none).
    pub macs_per_cycle: IntQ,
    /// Area in mm² per copy.
    pub area: RealQ,
    /// Static (leakage) power in mW per copy.
    pub static_power: RealQ,
}

/// A VLIW issue slot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slot {
    /// Its name.
    pub name: String,
    /// Highest bit in the bundle word.
    pub hi: u32,
    /// Lowest bit in the bundle word.
    pub lo: u32,
    /// Units that instructions in this slot may use.
    pub units: Vec<UnitId>,
}

impl Slot {
    /// Width in bits.
    pub fn width(&self) -> u32 {
        self.hi - self.lo + 1
    }
}

/// A bank of semaphores (completion tokens).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SemaphoreBank {
    /// Its name.
    pub name: String,
    /// Number of semaphores.
    pub count: IntQ,
    /// Largest count one semaphore holds.
    pub max: IntQ,
}

/// A named bit layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Format {
    /// Its name.
    pub name: String,
    /// Width in bits.
    pub width: u32,
    /// Fields, in written order.
    pub fields: Vec<FieldDef>,
}

/// A field of a format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FieldDef {
    /// Its name.
    pub name: String,
    /// Highest bit.
    pub hi: u32,
    /// Lowest bit.
    pub lo: u32,
}

impl FieldDef {
    /// Width in bits.
    pub fn width(&self) -> u32 {
        self.hi - self.lo + 1
    }
}

/// An instruction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Instruction {
    /// Mnemonic.
    pub name: String,
    /// Free text for the manual.
    pub doc: String,
    /// Operands, in assembly order.
    pub operands: Vec<Operand>,
    /// What it computes.
    pub semantics: Semantics,
    /// When and where it runs.
    pub timing: Timing,
    /// How it is encoded.
    pub encoding: Encoding,
    /// Dynamic energy per execution in pJ (an expression over operands and parameters).
    pub energy: Expr,
    /// Conditions on operand values beyond their declared ranges.
    pub constraints: Vec<Constraint>,
}

/// An operand.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Operand {
    /// Its name.
    pub name: String,
    /// What it is.
    pub kind: OperandKind,
}

/// What an operand is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum OperandKind {
    /// A register.
    Reg {
        /// The register file.
        file: RegFileId,
        /// The shape accessed (the register's shape unless narrowed).
        shape: Vec<Expr>,
    },
    /// An address into a memory with a shape.
    Mem {
        /// The memory.
        mem: MemId,
        /// Shape of the accessed tensor.
        shape: Vec<Expr>,
        /// Element type.
        dtype: DType,
        /// Required alignment in bytes.
        align: u64,
        /// Element strides per dimension, `None` for dense row-major.
        stride: Option<Vec<Expr>>,
    },
    /// An integer immediate.
    Imm {
        /// Smallest value.
        lo: i64,
        /// Largest value.
        hi: i64,
    },
    /// A real immediate stored as the raw bits of `dtype`.
    ImmReal {
        /// Its element type.
        dtype: DType,
    },
    /// A semaphore.
    Sem {
        /// The bank.
        bank: SemId,
    },
}

/// An instruction's semantics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Semantics {
    /// Index variables, with their extents (from the operand shapes).
    pub indices: Vec<IndexVar>,
    /// Statements, executed in order.
    pub stmts: Vec<Stmt>,
}

/// An index variable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexVar {
    /// Its name.
    pub name: String,
    /// How many values it ranges over.
    pub extent: Expr,
}

/// A statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Stmt {
    /// `target op value` for every value of the target's indices.
    Assign {
        /// What is written.
        target: Access,
        /// How.
        op: AssignOp,
        /// The value.
        value: SemExpr,
    },
    /// An effect.
    Action(Action),
}

/// Effects other than assignment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Action {
    /// Does nothing.
    Nop,
    /// Stops the program.
    Halt,
    /// Waits until every earlier asynchronous operation completed.
    Fence,
    /// Increments a semaphore (for an asynchronous unit: on completion).
    Signal(OperandId),
    /// Waits until a semaphore is positive, then decrements it.
    Wait(OperandId),
}

/// An operand element: `x[i, k + 1]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Access {
    /// The operand.
    pub operand: OperandId,
    /// One affine index per dimension.
    pub indices: Vec<Affine>,
}

/// `c + Σ coeff·index + Σ coeff·immediate`
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Affine {
    /// Index terms, sorted by index.
    pub terms: Vec<(IndexId, i64)>,
    /// Constant.
    pub constant: i64,
    /// Immediate-operand terms (a run-time offset such as a row number), sorted by operand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offsets: Vec<(OperandId, i64)>,
}

/// Element-wise functions in semantics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Func {
    /// e^x
    Exp,
    /// natural logarithm
    Log,
    /// hyperbolic tangent
    Tanh,
    /// error function
    Erf,
    /// square root
    Sqrt,
    /// 1/sqrt(x)
    Rsqrt,
    /// 1/x
    Recip,
    /// |x|
    Abs,
    /// 1/(1+e^-x)
    Sigmoid,
    /// larger of two
    Max,
    /// smaller of two
    Min,
    /// round half to even
    Round,
    /// `select(c, a, b)`: `a` where `c` is non-zero, else `b`
    Select,
    /// `lt(a, b)`: 1 where `a < b`, else 0
    Lt,
    /// `le(a, b)`: 1 where `a <= b`, else 0
    Le,
    /// `eq(a, b)`: 1 where `a == b`, else 0
    Eq,
}

impl Func {
    /// Every function.
    pub const ALL: [Func; 16] = [
        Func::Exp,
        Func::Log,
        Func::Tanh,
        Func::Erf,
        Func::Sqrt,
        Func::Rsqrt,
        Func::Recip,
        Func::Abs,
        Func::Sigmoid,
        Func::Max,
        Func::Min,
        Func::Round,
        Func::Select,
        Func::Lt,
        Func::Le,
        Func::Eq,
    ];

    /// The name as written.
    pub fn name(self) -> &'static str {
        match self {
            Func::Exp => "exp",
            Func::Log => "log",
            Func::Tanh => "tanh",
            Func::Erf => "erf",
            Func::Sqrt => "sqrt",
            Func::Rsqrt => "rsqrt",
            Func::Recip => "recip",
            Func::Abs => "abs",
            Func::Sigmoid => "sigmoid",
            Func::Max => "max",
            Func::Min => "min",
            Func::Round => "round",
            Func::Select => "select",
            Func::Lt => "lt",
            Func::Le => "le",
            Func::Eq => "eq",
        }
    }

    /// Number of arguments.
    pub fn arity(self) -> usize {
        match self {
            Func::Max | Func::Min | Func::Lt | Func::Le | Func::Eq => 2,
            Func::Select => 3,
            _ => 1,
        }
    }
}

/// A semantics expression.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SemExpr {
    /// An operand element (or a scalar register / immediate operand).
    Access(Access),
    /// A constant (integer or real), with the parameters it was computed from.
    Const(Expr),
    /// `-e`
    Neg(Box<SemExpr>),
    /// `a op b`
    Binary(BinOp, Box<SemExpr>, Box<SemExpr>),
    /// `f(args)`
    Call(Func, Vec<SemExpr>),
    /// `dtype(e)`: conversion with round-to-nearest-even and saturation to integers.
    Cast(DType, Box<SemExpr>),
    /// `op(indices) body`
    Reduce(ReduceOp, Vec<IndexId>, Box<SemExpr>),
    /// The value of an index variable (an `i32`), e.g. for masks: `select(le(j, i), x[i, j], 0.0)`.
    Index(IndexId),
}

/// Where and how long an instruction runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// The unit it occupies.
    pub unit: UnitId,
    /// Slots it may issue from.
    pub slots: Vec<SlotId>,
    /// Cycles the unit is busy before it accepts the next operation.
    pub occupancy: Expr,
    /// Cycles from issue until results are visible.
    pub latency: Expr,
    /// In-place accumulation forwarding: cycles from issue after which the
    /// next instruction that also has `accumulate` may read and write the
    /// register this one writes (a systolic array adds the next pass's
    /// partial sums as they drain, without waiting for this one's latency).
    /// Other readers still wait for `latency`. `None`: no forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accumulate: Option<Expr>,
}

/// How an instruction is encoded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Encoding {
    /// The format.
    pub format: FormatId,
    /// Field values, one per assigned field.
    pub fields: Vec<FieldValue>,
}

/// What goes into one field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FieldValue {
    /// Index of the field in its format.
    pub field: usize,
    /// The value.
    pub source: FieldSource,
}

/// A field's contents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FieldSource {
    /// A fixed value (opcode bits).
    Const(u64),
    /// An operand: the register index, the immediate (two's complement if signed), the address divided by its alignment, or the raw bits of a real immediate.
    Operand(OperandId),
}

/// `lhs op rhs` over operands and parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Constraint {
    /// Left side.
    pub lhs: Expr,
    /// Comparison.
    pub op: CmpOp,
    /// Right side.
    pub rhs: Expr,
}

impl Machine {
    /// The parameter with this name.
    pub fn param(&self, name: &str) -> Option<ParamId> {
        self.params
            .iter()
            .position(|p| p.name == name)
            .map(ParamId::from_index)
    }

    /// The instruction with this name.
    pub fn instruction(&self, name: &str) -> Option<InstId> {
        self.instructions
            .iter()
            .position(|i| i.name == name)
            .map(InstId::from_index)
    }

    /// Peak multiply-accumulates per cycle of the whole machine.
    pub fn peak_macs_per_cycle(&self) -> i64 {
        self.units
            .iter()
            .map(|u| u.macs_per_cycle.value.saturating_mul(u.count.value))
            .sum()
    }

    /// Total on-chip memory in bytes.
    pub fn on_chip_bytes(&self) -> i64 {
        self.memories
            .iter()
            .filter(|m| !m.kind.off_chip())
            .map(|m| m.size.value)
            .sum()
    }

    /// Bandwidth of off-chip memories in bytes per cycle.
    pub fn off_chip_bandwidth(&self) -> i64 {
        self.memories
            .iter()
            .filter(|m| m.kind.off_chip())
            .map(|m| m.bandwidth.value)
            .sum()
    }
}
