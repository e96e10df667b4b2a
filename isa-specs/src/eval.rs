//! Evaluation of model expressions, and the operand-value sampling the
//! checker uses to prove properties like "latency is positive for every legal operand".

use crate::ast;
use crate::diag::Diagnostic;
use crate::model::{BinOp, Builtin, Constraint, Expr, OperandId, ParamId};

/// An evaluated number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// Integer.
    Int(i64),
    /// Real.
    Real(f64),
}

impl Num {
    /// As a real.
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(v) => v as f64,
            Num::Real(v) => v,
        }
    }
}

/// Why an expression has no value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalError {
    /// `x / 0` or `x % 0`.
    DivisionByZero,
    /// The result does not fit 64 bits.
    Overflow,
    /// A function outside its domain (`log2(0)`, `pow2(-1)`).
    Domain(&'static str),
    /// An operand with no value in this context.
    UnboundOperand(OperandId),
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalError::DivisionByZero => write!(f, "division by zero"),
            EvalError::Overflow => write!(f, "the value does not fit in 64 bits"),
            EvalError::Domain(what) => write!(f, "{what}"),
            EvalError::UnboundOperand(_) => write!(f, "an operand has no value here"),
        }
    }
}

/// Values of parameters and operands while evaluating.
pub trait Env {
    /// A parameter's value.
    fn param(&self, id: ParamId) -> i64;
    /// An operand's value, if it has one here.
    fn operand(&self, id: OperandId) -> Option<i64>;
}

/// Parameters only.
#[derive(Debug)]
pub struct Params<'a>(pub &'a [i64]);

impl Env for Params<'_> {
    fn param(&self, id: ParamId) -> i64 {
        self.0.get(id.index()).copied().unwrap_or(0)
    }
    fn operand(&self, _: OperandId) -> Option<i64> {
        None
    }
}

/// Parameters and operand values.
#[derive(Debug)]
pub struct WithOperands<'a> {
    /// Parameter values by id.
    pub params: &'a [i64],
    /// Operand values by id (`None` for operands without a numeric value).
    pub operands: &'a [Option<i64>],
}

impl Env for WithOperands<'_> {
    fn param(&self, id: ParamId) -> i64 {
        self.params.get(id.index()).copied().unwrap_or(0)
    }
    fn operand(&self, id: OperandId) -> Option<i64> {
        self.operands.get(id.index()).copied().flatten()
    }
}

/// Evaluates an expression.
pub fn eval(e: &Expr, env: &dyn Env) -> Result<Num, EvalError> {
    Ok(match e {
        Expr::Int(v) => Num::Int(*v),
        Expr::Real(v) => Num::Real(*v),
        Expr::Param(p) => Num::Int(env.param(*p)),
        Expr::Operand(o) => Num::Int(env.operand(*o).ok_or(EvalError::UnboundOperand(*o))?),
        Expr::Neg(a) => match eval(a, env)? {
            Num::Int(v) => Num::Int(v.checked_neg().ok_or(EvalError::Overflow)?),
            Num::Real(v) => Num::Real(-v),
        },
        Expr::Binary(op, a, b) => binary(*op, eval(a, env)?, eval(b, env)?)?,
        Expr::Call(f, args) => {
            let vals = args
                .iter()
                .map(|a| eval(a, env))
                .collect::<Result<Vec<_>, _>>()?;
            call(*f, &vals)?
        }
    })
}

/// Evaluates an expression that must be an integer.
pub fn eval_int(e: &Expr, env: &dyn Env) -> Result<i64, EvalError> {
    match eval(e, env)? {
        Num::Int(v) => Ok(v),
        Num::Real(v) if v.fract() == 0.0 && v.abs() < 9.0e15 => Ok(v as i64),
        Num::Real(_) => Err(EvalError::Domain("the value is not an integer")),
    }
}

/// Whether a constraint holds: integers compare exactly, anything else as reals.
pub fn holds(k: &Constraint, env: &dyn Env) -> Result<bool, EvalError> {
    Ok(match (eval(&k.lhs, env)?, eval(&k.rhs, env)?) {
        (Num::Int(a), Num::Int(b)) => k.op.holds(a, b),
        (a, b) => k.op.holds(a.as_f64(), b.as_f64()),
    })
}

/// Resolves an expression written alone ([`crate::parse_expr`]) over the
/// integer variables `names`: the `i`th name becomes parameter `i`, so
/// `eval(&e, &Params(&values))` evaluates it with `values[i]` for `names[i]`.
/// The functions are those of descriptions. A name not in `names` is an
/// error (`no parameter `X``, with the nearest name), and so is what only a
/// description can name (`hbm.size`, `x[i]`, `sum(k) e`) or an unknown
/// function or a wrong number of arguments, each located in the text.
///
/// ```
/// use isa_specs::eval::{Params, eval_int, resolve};
/// let e = resolve(&isa_specs::parse_expr("max(A, 2) * B").unwrap(), &["A", "B"]).unwrap();
/// assert_eq!(eval_int(&e, &Params(&[5, 3])), Ok(15));
/// ```
pub fn resolve(e: &ast::Expr, names: &[&str]) -> Result<Expr, Diagnostic> {
    crate::check::resolve_standalone(e, names)
}

/// Resolves a constraint written alone ([`crate::parse_constraint`]) over
/// the integer variables `names`, as [`resolve`] does; [`holds`] then tells
/// whether it is true for values of them.
///
/// ```
/// use isa_specs::eval::{Params, holds, resolve_constraint};
/// let k = isa_specs::parse_constraint("A * B <= 256").unwrap();
/// let k = resolve_constraint(&k, &["A", "B"]).unwrap();
/// assert_eq!(holds(&k, &Params(&[64, 4])), Ok(true));
/// assert_eq!(holds(&k, &Params(&[128, 4])), Ok(false));
/// ```
pub fn resolve_constraint(k: &ast::Constraint, names: &[&str]) -> Result<Constraint, Diagnostic> {
    Ok(Constraint {
        lhs: resolve(&k.lhs, names)?,
        op: k.op,
        rhs: resolve(&k.rhs, names)?,
    })
}

fn binary(op: BinOp, a: Num, b: Num) -> Result<Num, EvalError> {
    if let (Num::Int(x), Num::Int(y)) = (a, b) {
        let r = match op {
            BinOp::Add => x.checked_add(y),
            BinOp::Sub => x.checked_sub(y),
            BinOp::Mul => x.checked_mul(y),
            BinOp::Div | BinOp::Rem if y == 0 => return Err(EvalError::DivisionByZero),
            BinOp::Div => x.checked_div(y),
            BinOp::Rem => x.checked_rem(y),
        };
        return r.map(Num::Int).ok_or(EvalError::Overflow);
    }
    let (x, y) = (a.as_f64(), b.as_f64());
    let r = match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div | BinOp::Rem if y == 0.0 => return Err(EvalError::DivisionByZero),
        BinOp::Div => x / y,
        BinOp::Rem => x % y,
    };
    if r.is_finite() {
        Ok(Num::Real(r))
    } else {
        Err(EvalError::Overflow)
    }
}

fn call(f: Builtin, args: &[Num]) -> Result<Num, EvalError> {
    if f == Builtin::Pick {
        let Some(Num::Int(i)) = args.first() else {
            return Err(EvalError::Domain("pick needs an integer index"));
        };
        let choices = &args[1..];
        return usize::try_from(*i)
            .ok()
            .and_then(|i| choices.get(i).copied())
            .ok_or(EvalError::Domain("pick index is outside its choices"));
    }
    let ints: Option<Vec<i64>> = args
        .iter()
        .map(|a| match a {
            Num::Int(v) => Some(*v),
            Num::Real(_) => None,
        })
        .collect();
    match (f, ints) {
        (Builtin::Min, Some(v)) => Ok(Num::Int(v.into_iter().min().unwrap_or(0))),
        (Builtin::Max, Some(v)) => Ok(Num::Int(v.into_iter().max().unwrap_or(0))),
        (Builtin::Min, None) => Ok(Num::Real(
            args.iter()
                .map(|a| a.as_f64())
                .fold(f64::INFINITY, f64::min),
        )),
        (Builtin::Max, None) => Ok(Num::Real(
            args.iter()
                .map(|a| a.as_f64())
                .fold(f64::NEG_INFINITY, f64::max),
        )),
        (Builtin::CeilDiv, Some(v)) => {
            let (a, b) = (v[0], v[1]);
            if b == 0 {
                return Err(EvalError::DivisionByZero);
            }
            let q = a.checked_div(b).ok_or(EvalError::Overflow)?;
            let adjust = i64::from(a % b != 0 && ((a < 0) == (b < 0)));
            Ok(Num::Int(q + adjust))
        }
        (Builtin::AlignUp, Some(v)) => {
            let (a, b) = (v[0], v[1]);
            if b <= 0 {
                return Err(EvalError::Domain("align_up needs a positive alignment"));
            }
            let r = a.rem_euclid(b);
            let up = if r == 0 {
                Some(a)
            } else {
                a.checked_add(b - r)
            };
            up.map(Num::Int).ok_or(EvalError::Overflow)
        }
        (Builtin::Log2, Some(v)) if v[0] > 0 => Ok(Num::Int(i64::from(v[0].ilog2()))),
        (Builtin::Log2, Some(_)) => Err(EvalError::Domain("log2 needs a positive argument")),
        (Builtin::Pow2, Some(v)) if (0..63).contains(&v[0]) => Ok(Num::Int(1i64 << v[0])),
        (Builtin::Pow2, Some(_)) => Err(EvalError::Domain("pow2 needs an argument from 0 to 62")),
        (Builtin::Pick, _) => Err(EvalError::Domain("pick is handled above")),
        (_, None) => Err(EvalError::Domain("this function takes integers")),
    }
}

/// Ranges with at most this many values are tried exhaustively.
const EXHAUSTIVE_VALUES: i128 = 64;
/// Most points in a sample grid.
const MAX_POINTS: usize = 4096;

/// The operand values worth trying for one integer operand range: every value
/// of a small range; otherwise the ends, their neighbours, the middle, zero and
/// the powers of two (and their neighbours) inside the range.
pub fn samples(lo: i64, hi: i64) -> Vec<i64> {
    let (l, h) = (i128::from(lo), i128::from(hi));
    if h - l < EXHAUSTIVE_VALUES {
        return (lo..=hi).collect();
    }
    let mut v: Vec<i128> = vec![l, h, l + 1, h - 1, l + (h - l) / 2, 0];
    for k in 0..63 {
        let p = 1i128 << k;
        v.extend([p - 1, p, p + 1, -p]);
    }
    let mut v: Vec<i64> = v
        .into_iter()
        .filter(|x| (l..=h).contains(x))
        .filter_map(|x| i64::try_from(x).ok())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Combinations of samples for several operand ranges: every combination when
/// there are at most 4096, otherwise each operand's samples with the others at
/// their ends, plus every combination of the ends.
pub fn sample_grid(
    ranges: &[(OperandId, i64, i64)],
    operand_count: usize,
) -> Vec<Vec<Option<i64>>> {
    let per: Vec<Vec<i64>> = ranges.iter().map(|&(_, lo, hi)| samples(lo, hi)).collect();
    let total = per
        .iter()
        .try_fold(1usize, |acc, v| acc.checked_mul(v.len()));
    let choices: Vec<Vec<i64>> = match total {
        Some(n) if n <= MAX_POINTS => per.clone(),
        _ => ranges
            .iter()
            .map(|&(_, lo, hi)| if lo == hi { vec![lo] } else { vec![lo, hi] })
            .collect(),
    };
    let mut grid: Vec<Vec<Option<i64>>> = vec![vec![None; operand_count]];
    for (&(id, ..), vals) in ranges.iter().zip(&choices) {
        grid = grid
            .iter()
            .flat_map(|point| {
                vals.iter().map(move |&v| {
                    let mut p = point.clone();
                    if let Some(slot) = p.get_mut(id.index()) {
                        *slot = Some(v);
                    }
                    p
                })
            })
            .take(MAX_POINTS)
            .collect();
    }
    if total.is_none_or(|n| n > MAX_POINTS) {
        // One operand at a time through its samples, the others at their low ends.
        let base: Vec<Option<i64>> = {
            let mut b = vec![None; operand_count];
            for &(id, lo, _) in ranges {
                if let Some(slot) = b.get_mut(id.index()) {
                    *slot = Some(lo);
                }
            }
            b
        };
        for (&(id, ..), vals) in ranges.iter().zip(&per) {
            for &v in vals {
                let mut p = base.clone();
                if let Some(slot) = p.get_mut(id.index()) {
                    *slot = Some(v);
                }
                grid.push(p);
            }
        }
    }
    grid
}
