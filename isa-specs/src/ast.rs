//! The syntax tree: what the file says, with a span on every node.
//!
//! Nothing here is checked yet; `check` turns it into a [`crate::Machine`].

use crate::source::Span;

/// A name and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where.
    pub span: Span,
}

/// One top-level item.
#[derive(Clone, Debug)]
pub enum Item {
    /// `include "file";`
    Include {
        /// The path as written.
        path: String,
        /// Where.
        span: Span,
    },
    /// `param NAME = expr;`
    Param {
        /// The parameter.
        name: Ident,
        /// Its default.
        value: Expr,
    },
    /// `machine`, `memory`, `regfile`, `unit`, `slot`, `semaphore` blocks.
    Block(Block),
    /// `format NAME [W] { ... }`
    Format(Format),
    /// `inst NAME { ... }`
    Inst(Inst),
}

/// The kinds of property block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// `machine "name" { ... }`
    Machine,
    /// `memory NAME { ... }`
    Memory,
    /// `regfile NAME { ... }`
    RegFile,
    /// `unit NAME { ... }`
    Unit,
    /// `slot NAME { ... }`
    Slot,
    /// `semaphore NAME { ... }`
    Semaphore,
}

impl BlockKind {
    /// The keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            BlockKind::Machine => "machine",
            BlockKind::Memory => "memory",
            BlockKind::RegFile => "regfile",
            BlockKind::Unit => "unit",
            BlockKind::Slot => "slot",
            BlockKind::Semaphore => "semaphore",
        }
    }
}

/// A keyword, a name and properties.
#[derive(Clone, Debug)]
pub struct Block {
    /// What kind of item.
    pub kind: BlockKind,
    /// Its name (for `machine`, the string).
    pub name: Ident,
    /// Its properties.
    pub props: Vec<Prop>,
    /// The whole item.
    pub span: Span,
}

/// `key = value;`
#[derive(Clone, Debug)]
pub struct Prop {
    /// The key.
    pub key: Ident,
    /// The value.
    pub value: Value,
    /// The whole property.
    pub span: Span,
}

/// A property value.
#[derive(Clone, Debug)]
pub enum Value {
    /// An expression (numbers, names, arithmetic).
    Expr(Expr),
    /// A string.
    Str(String, Span),
    /// A list.
    List(Vec<Value>, Span),
}

impl Value {
    /// Where the value was written.
    pub fn span(&self) -> Span {
        match self {
            Value::Expr(e) => e.span,
            Value::Str(_, s) | Value::List(_, s) => *s,
        }
    }
}

/// An expression with its span.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where.
    pub span: Span,
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integer division truncates toward zero for integers)
    Div,
    /// `%`
    Rem,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
        }
    }
}

/// Reduction operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ReduceOp {
    /// `sum(k) e`
    Sum,
    /// `max(k) e`
    Max,
    /// `min(k) e`
    Min,
}

impl ReduceOp {
    /// The operator as written.
    pub fn word(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

/// The forms of expression.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// An integer literal.
    Int(i64),
    /// A real literal.
    Real(f64),
    /// A bare name.
    Name(String),
    /// `name.property`
    Member(Ident, Ident),
    /// `name[i, j]`
    Index(Ident, Vec<Expr>),
    /// `-e`
    Neg(Box<Expr>),
    /// `a op b`
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `f(args)`
    Call(Ident, Vec<Expr>),
    /// `sum(k, l) e`
    Reduce(ReduceOp, Vec<Ident>, Box<Expr>),
}

/// `format NAME [WIDTH] { fields }`
#[derive(Clone, Debug)]
pub struct Format {
    /// Its name.
    pub name: Ident,
    /// Width in bits.
    pub width: Expr,
    /// Its fields.
    pub fields: Vec<Field>,
    /// The whole item.
    pub span: Span,
}

/// `name [hi:lo];`
#[derive(Clone, Debug)]
pub struct Field {
    /// Its name.
    pub name: Ident,
    /// Highest bit.
    pub hi: Expr,
    /// Lowest bit (`None` for a one-bit field).
    pub lo: Option<Expr>,
    /// The whole field.
    pub span: Span,
}

/// `inst NAME { ... }`
#[derive(Clone, Debug)]
pub struct Inst {
    /// Its name (the assembly mnemonic).
    pub name: Ident,
    /// Operand sections (normally one).
    pub operands: Vec<(Vec<OperandDecl>, Span)>,
    /// Semantics sections (normally one).
    pub semantics: Vec<(Vec<Stmt>, Span)>,
    /// Timing sections (normally one).
    pub timing: Vec<(Vec<Prop>, Span)>,
    /// Encoding sections (normally one).
    pub encodings: Vec<Encoding>,
    /// Constraints sections.
    pub constraints: Vec<Constraint>,
    /// Loose properties: `energy`, `doc`.
    pub props: Vec<Prop>,
    /// The whole item.
    pub span: Span,
}

/// `name : kind;`
#[derive(Clone, Debug)]
pub struct OperandDecl {
    /// The operand's name.
    pub name: Ident,
    /// What it is.
    pub kind: OperandKindAst,
    /// The whole declaration.
    pub span: Span,
}

/// The written forms of operand.
#[derive(Clone, Debug)]
pub enum OperandKindAst {
    /// `reg CLASS [shape]?`
    Reg {
        /// Register file.
        class: Ident,
        /// A sub-shape of the register, if given.
        shape: Option<(Vec<Expr>, Span)>,
    },
    /// `mem MEMORY [shape] DTYPE options`
    Mem {
        /// Memory.
        mem: Ident,
        /// Shape.
        shape: (Vec<Expr>, Span),
        /// Element type.
        dtype: Ident,
        /// `align N`.
        align: Option<Expr>,
        /// `stride [...]`.
        stride: Option<(Vec<Expr>, Span)>,
    },
    /// `imm LO..=HI`
    ImmRange {
        /// Low bound.
        lo: Expr,
        /// High bound.
        hi: Expr,
    },
    /// `imm f32`
    ImmTyped(Ident),
    /// `sem BANK`
    Sem(Ident),
}

/// Assignment operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum AssignOp {
    /// `=`
    Set,
    /// `+=`: indices only on the right are summed.
    Add,
    /// `max=`
    Max,
    /// `min=`
    Min,
}

impl AssignOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            AssignOp::Set => "=",
            AssignOp::Add => "+=",
            AssignOp::Max => "max=",
            AssignOp::Min => "min=",
        }
    }
}

/// One semantics statement.
#[derive(Clone, Debug)]
pub enum Stmt {
    /// `target op value;`
    Assign {
        /// What is written: an operand, possibly indexed.
        target: Expr,
        /// How.
        op: AssignOp,
        /// The value.
        value: Expr,
        /// The whole statement.
        span: Span,
    },
    /// `name(args);`
    Action {
        /// The action.
        name: Ident,
        /// Its arguments.
        args: Vec<Expr>,
        /// The whole statement.
        span: Span,
    },
}

/// `encoding FORMAT { field = value; }`
#[derive(Clone, Debug)]
pub struct Encoding {
    /// The format.
    pub format: Ident,
    /// Field assignments.
    pub fields: Vec<(Ident, Expr)>,
    /// The whole section.
    pub span: Span,
}

/// Comparison operators in constraints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CmpOp {
    /// `<=`
    Le,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `>`
    Gt,
}

impl CmpOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Le => "<=",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Gt => ">",
        }
    }

    /// Applies the comparison.
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Le => a <= b,
            CmpOp::Ge => a >= b,
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Gt => a > b,
        }
    }
}

/// `lhs CMP rhs`
#[derive(Clone, Debug)]
pub struct Constraint {
    /// Left side.
    pub lhs: Expr,
    /// Comparison.
    pub op: CmpOp,
    /// Right side.
    pub rhs: Expr,
    /// The whole constraint.
    pub span: Span,
}
