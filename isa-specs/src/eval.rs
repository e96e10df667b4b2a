//! Evaluation of model expressions, and the operand-value sampling the
//! checker uses to prove properties like "latency is positive for every legal operand".

use crate::model::{BinOp, Builtin, Expr, OperandId, ParamId};

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
        let Some(Num::Int(i)) = args.first() else { return Err(EvalError::Domain("pick needs an integer index")) };
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

/// The operand values worth trying for one integer operand range: the ends, their neighbours, the middle.
pub fn samples(lo: i64, hi: i64) -> Vec<i64> {
    let mut v = vec![
        lo,
        hi,
        lo.saturating_add(1).min(hi),
        hi.saturating_sub(1).max(lo),
        lo + (hi - lo) / 2,
    ];
    if lo <= 0 && 0 <= hi {
        v.push(0);
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Every combination of samples for several operand ranges, capped so the count stays small.
pub fn sample_grid(
    ranges: &[(OperandId, i64, i64)],
    operand_count: usize,
) -> Vec<Vec<Option<i64>>> {
    const MAX_POINTS: usize = 4096;
    let mut grid: Vec<Vec<Option<i64>>> = vec![vec![None; operand_count]];
    for &(id, lo, hi) in ranges {
        let vals = samples(lo, hi);
        let vals: Vec<i64> = if grid.len() * vals.len() > MAX_POINTS {
            vec![lo, hi]
        } else {
            vals
        };
        let mut next = Vec::with_capacity(grid.len() * vals.len());
        for point in &grid {
            for &v in &vals {
                let mut p = point.clone();
                if let Some(slot) = p.get_mut(id.index()) {
                    *slot = Some(v);
                }
                next.push(p);
            }
        }
        if next.len() > MAX_POINTS {
            next.truncate(MAX_POINTS);
        }
        grid = next;
    }
    grid
}
