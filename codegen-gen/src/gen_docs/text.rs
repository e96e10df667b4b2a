//! Expressions and semantics written back as an architect would type them,
//! and numbers written for people.

use isa_specs::Machine;
use isa_specs::eval::{self, Num};
use isa_specs::model::*;
use std::fmt::Write as _;

// ---------------------------------------------------------------------------
// Expressions and semantics as text

/// An expression as written in a description, e.g. `m + SA_ROWS + 2`, with
/// the fewest parentheses that keep its meaning. Operands are named after
/// `inst`'s operands (without an instruction, `operand#N`).
pub fn expr_text(m: &Machine, inst: Option<&Instruction>, e: &Expr) -> String {
    let mut out = String::new();
    Names { m, inst }.expr(&mut out, e);
    out
}

/// An instruction's semantics in index notation, one statement per line,
/// e.g. `d[i, j] += f32(a[i, k]) * f32(b[k, j]);`.
pub fn semantics_text(m: &Machine, inst: &Instruction) -> String {
    let names = Names {
        m,
        inst: Some(inst),
    };
    let lines: Vec<String> = inst.semantics.stmts.iter().map(|s| names.stmt(s)).collect();
    lines.join("\n")
}

/// Binding strength: sums 1, products 2, negation 3, atoms 4.
pub(super) fn binop_prec(op: BinOp) -> u8 {
    match op {
        BinOp::Add | BinOp::Sub => 1,
        BinOp::Mul | BinOp::Div | BinOp::Rem => 2,
    }
}

pub(super) fn expr_prec(e: &Expr) -> u8 {
    match e {
        Expr::Binary(op, ..) => binop_prec(*op),
        Expr::Neg(_) => 3,
        Expr::Int(v) if *v < 0 => 3,
        Expr::Real(v) if v.is_sign_negative() => 3,
        _ => 4,
    }
}

/// A real literal that reads back as a real (`20.0`, `0.55`, `2e-3`).
pub(super) fn real_literal(v: f64) -> String {
    format!("{v:?}")
}

pub(super) fn push_group(out: &mut String, paren: bool, body: impl FnOnce(&mut String)) {
    if paren {
        out.push('(');
    }
    body(out);
    if paren {
        out.push(')');
    }
}

/// Resolves ids to names while writing text.
#[derive(Clone, Copy)]
pub(super) struct Names<'a> {
    pub(super) m: &'a Machine,
    pub(super) inst: Option<&'a Instruction>,
}

impl Names<'_> {
    pub(super) fn operand(&self, id: OperandId) -> String {
        match self.inst.and_then(|i| i.operands.get(id.index())) {
            Some(op) => op.name.clone(),
            None => format!("operand#{}", id.0),
        }
    }

    fn param(&self, id: isa_specs::model::ParamId) -> String {
        match self.m.params.get(id.index()) {
            Some(p) => p.name.clone(),
            None => format!("param#{}", id.0),
        }
    }

    fn index(&self, id: isa_specs::model::IndexId) -> String {
        match self.inst.and_then(|i| i.semantics.indices.get(id.index())) {
            Some(ix) => ix.name.clone(),
            None => format!("index#{}", id.0),
        }
    }

    fn expr(&self, out: &mut String, e: &Expr) {
        match e {
            Expr::Int(v) => out.push_str(&v.to_string()),
            Expr::Real(v) => out.push_str(&real_literal(*v)),
            Expr::Param(p) => out.push_str(&self.param(*p)),
            Expr::Operand(o) => out.push_str(&self.operand(*o)),
            Expr::Neg(a) => {
                out.push('-');
                push_group(out, expr_prec(a) < 4, |out| self.expr(out, a));
            }
            Expr::Binary(op, a, b) => {
                let p = binop_prec(*op);
                push_group(out, expr_prec(a) < p, |out| self.expr(out, a));
                let _ = write!(out, " {} ", op.symbol());
                push_group(out, expr_prec(b) <= p, |out| self.expr(out, b));
            }
            Expr::Call(f, args) => {
                out.push_str(f.name());
                self.list(out, args, |out, a| self.expr(out, a));
            }
        }
    }

    fn list<T>(&self, out: &mut String, items: &[T], mut each: impl FnMut(&mut String, &T)) {
        out.push('(');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            each(out, item);
        }
        out.push(')');
    }

    pub(super) fn stmt(&self, s: &Stmt) -> String {
        match s {
            Stmt::Assign { target, op, value } => {
                let mut out = self.access(target);
                let _ = write!(out, " {} ", op.symbol());
                self.sem(&mut out, value);
                out.push(';');
                out
            }
            Stmt::Action(a) => self.action(a),
        }
    }

    fn action(&self, a: &Action) -> String {
        match a {
            Action::Nop => "nop;".to_owned(),
            Action::Halt => "halt;".to_owned(),
            Action::Fence => "fence;".to_owned(),
            Action::Signal(o) => format!("signal({});", self.operand(*o)),
            Action::Wait(o) => format!("wait({});", self.operand(*o)),
        }
    }

    fn access(&self, a: &Access) -> String {
        let mut out = self.operand(a.operand);
        if !a.indices.is_empty() {
            let idx: Vec<String> = a.indices.iter().map(|x| self.affine(x)).collect();
            let _ = write!(out, "[{}]", idx.join(", "));
        }
        out
    }

    /// `2*i + k - 1`, `i + row`
    fn affine(&self, a: &Affine) -> String {
        let names = a
            .terms
            .iter()
            .map(|&(ix, k)| (self.index(ix), k))
            .chain(a.offsets.iter().map(|&(op, k)| (self.operand(op), k)));
        let mut out = String::new();
        for (n, (name, coeff)) in names.enumerate() {
            push_signed(&mut out, n == 0, coeff);
            if coeff.unsigned_abs() != 1 {
                let _ = write!(out, "{}*", coeff.unsigned_abs());
            }
            out.push_str(&name);
        }
        if out.is_empty() {
            out = a.constant.to_string();
        } else if a.constant != 0 {
            push_signed(&mut out, false, a.constant);
            let _ = write!(out, "{}", a.constant.unsigned_abs());
        }
        out
    }

    fn sem(&self, out: &mut String, e: &SemExpr) {
        match e {
            SemExpr::Access(a) => out.push_str(&self.access(a)),
            SemExpr::Index(i) => out.push_str(&self.index(*i)),
            SemExpr::Const(c) => self.expr(out, c),
            SemExpr::Neg(a) => {
                out.push('-');
                push_group(out, sem_prec(a) < 4, |out| self.sem(out, a));
            }
            SemExpr::Binary(op, a, b) => self.sem_binary(out, *op, a, b),
            SemExpr::Call(f, args) => {
                out.push_str(f.name());
                self.list(out, args, |out, a| self.sem(out, a));
            }
            SemExpr::Cast(t, a) => {
                out.push_str(t.name());
                self.list(out, std::slice::from_ref(&**a), |out, a| self.sem(out, a));
            }
            SemExpr::Reduce(op, indices, body) => {
                let names: Vec<String> = indices.iter().map(|i| self.index(*i)).collect();
                let _ = write!(out, "{}({}) ", op.word(), names.join(", "));
                // The body of a reduction is a product: a sum needs parentheses.
                push_group(out, sem_prec(body) < 2, |out| self.sem(out, body));
            }
        }
    }

    fn sem_binary(&self, out: &mut String, op: BinOp, a: &SemExpr, b: &SemExpr) {
        let p = binop_prec(op);
        // A reduction extends over the whole product that follows it, so inside
        // a product it is bracketed; inside a sum it needs nothing.
        let reduce_paren = |e: &SemExpr| matches!(e, SemExpr::Reduce(..)) && p == 2;
        let left = reduce_paren(a) || (!matches!(a, SemExpr::Reduce(..)) && sem_prec(a) < p);
        let right = reduce_paren(b) || (!matches!(b, SemExpr::Reduce(..)) && sem_prec(b) <= p);
        push_group(out, left, |out| self.sem(out, a));
        let _ = write!(out, " {} ", op.symbol());
        push_group(out, right, |out| self.sem(out, b));
    }
}

/// The sign of a term: ` + `, ` - `, or a leading `-`.
pub(super) fn push_signed(out: &mut String, first: bool, v: i64) {
    match (first, v < 0) {
        (true, true) => out.push('-'),
        (true, false) => {}
        (false, true) => out.push_str(" - "),
        (false, false) => out.push_str(" + "),
    }
}

pub(super) fn sem_prec(e: &SemExpr) -> u8 {
    match e {
        SemExpr::Binary(op, ..) => binop_prec(*op),
        SemExpr::Neg(_) => 3,
        SemExpr::Const(c) => expr_prec(c),
        // Lower than a product: `-(sum(k) x)`, `(sum(k) x) * y`.
        SemExpr::Reduce(..) => 1,
        SemExpr::Access(_) | SemExpr::Index(_) | SemExpr::Call(..) | SemExpr::Cast(..) => 4,
    }
}

// ---------------------------------------------------------------------------
// Numbers for people

/// A real with at most six significant digits, without trailing zeros.
pub(super) fn fmt_real(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let digits = if v == 0.0 {
        0
    } else {
        v.abs().log10().floor() as i32 + 1
    };
    let decimals = usize::try_from((6 - digits).max(0)).unwrap_or(0);
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    s.to_owned()
}

/// `64 KiB`, `32 GiB`, `1000 B`.
pub(super) fn fmt_bytes(v: i64) -> String {
    const UNITS: [(i64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (size, unit) in UNITS {
        if v >= size && v % size == 0 {
            return format!("{} {unit}", v / size);
        }
    }
    format!("{v} B")
}

pub(super) fn is_literal(e: &Expr) -> bool {
    matches!(e, Expr::Int(_) | Expr::Real(_))
}

pub(super) fn param_values(m: &Machine) -> Vec<i64> {
    m.params.iter().map(|p| p.value).collect()
}

/// The value of an expression over parameters only, if it has one.
pub(super) fn eval_params(m: &Machine, e: &Expr) -> Option<String> {
    let values = param_values(m);
    match eval::eval(e, &eval::Params(&values)).ok()? {
        Num::Int(v) => Some(v.to_string()),
        Num::Real(v) => Some(fmt_real(v)),
    }
}
