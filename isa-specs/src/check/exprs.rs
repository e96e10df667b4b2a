//! Resolving written expressions into model expressions, and evaluating them.

use super::{Checker, Kind, Sym};
use crate::ast::{self, ExprKind};
use crate::diag::{Code, Diagnostic};
use crate::eval::{self, Num, Params};
use crate::model::{Builtin, Expr, IntQ, OperandId, ParamId, RealQ};
use crate::source::Span;
use std::collections::HashMap;

/// Names visible in an expression beyond the global ones.
#[derive(Default)]
pub(crate) struct Scope {
    /// Operands usable as values (immediates, registers by index).
    pub operands: HashMap<String, OperandId>,
    /// Operands without a numeric value (registers, addresses, semaphores).
    pub others: std::collections::HashSet<String>,
    /// Operands whose declaration failed: uses are skipped silently.
    pub poisoned: std::collections::HashSet<String>,
}

impl Checker {
    /// Resolves an expression over parameters (and, with a scope, operands).
    pub fn resolve(&mut self, scope: &Scope, e: &ast::Expr) -> Option<Expr> {
        match &e.kind {
            ExprKind::Int(v) => Some(Expr::Int(*v)),
            ExprKind::Real(v) => Some(Expr::Real(*v)),
            ExprKind::Name(n) => {
                if let Some(id) = scope.operands.get(n) {
                    return Some(Expr::Operand(*id));
                }
                if scope.poisoned.contains(n) {
                    return None;
                }
                if scope.others.contains(n) {
                    self.error(
                        Diagnostic::new(Code::WrongKind, e.span, format!("operand `{n}` has no numeric value"))
                            .label("not an immediate")
                            .help("only immediate operands and parameters can be used in shapes, timing and energy"),
                    );
                    return None;
                }
                match self.lookup(n, e.span, &[Kind::Param])? {
                    Sym::Param(p) => Some(Expr::Param(p)),
                    _ => None,
                }
            }
            ExprKind::Member(owner, prop) => self.member(owner, prop),
            ExprKind::Neg(a) => Some(Expr::Neg(Box::new(self.resolve(scope, a)?))),
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (self.resolve(scope, a), self.resolve(scope, b));
                Some(Expr::Binary(*op, Box::new(a?), Box::new(b?)))
            }
            ExprKind::Call(f, args) => {
                let Some(builtin) = Builtin::ALL.into_iter().find(|b| b.name() == f.name) else {
                    let names: Vec<&str> = Builtin::ALL.iter().map(|b| b.name()).collect();
                    let mut d = Diagnostic::new(
                        Code::UnknownFunction,
                        f.span,
                        format!("unknown function `{}`", f.name),
                    )
                    .label("not a function");
                    d = match super::suggest(&f.name, names.iter().copied()) {
                        Some(s) => d.help(format!(
                            "did you mean `{s}`? the functions are {}",
                            names.join(", ")
                        )),
                        None => d.help(format!("the functions are {}", names.join(", "))),
                    };
                    self.error(d);
                    return None;
                };
                let (lo, hi) = builtin.arity();
                if args.len() < lo || args.len() > hi {
                    let want = if lo == hi {
                        format!("{lo}")
                    } else {
                        format!("at least {lo}")
                    };
                    self.error(
                        Diagnostic::new(
                            Code::Arity,
                            e.span,
                            format!("`{}` takes {want} arguments, not {}", f.name, args.len()),
                        )
                        .label("wrong number of arguments")
                        .help(format!("call it as `{}`", builtin_usage(builtin))),
                    );
                    return None;
                }
                let resolved: Vec<Option<Expr>> =
                    args.iter().map(|a| self.resolve(scope, a)).collect();
                Some(Expr::Call(
                    builtin,
                    resolved.into_iter().collect::<Option<_>>()?,
                ))
            }
            ExprKind::Index(name, _) => {
                self.error(
                    Diagnostic::new(
                        Code::WrongKind,
                        e.span,
                        format!("`{}[...]` is an element access, not a number", name.name),
                    )
                    .label("element access outside semantics")
                    .help(
                        "element accesses belong in `semantics`; here use a parameter or operand",
                    ),
                );
                None
            }
            ExprKind::Reduce(op, idx, body) => {
                let names: Vec<&str> = idx.iter().map(|i| i.name.as_str()).collect();
                // `min(a, b) - c` reads as the reduction over `a, b` of `-c`.
                let help = if matches!(body.kind, ExprKind::Neg(_)) {
                    format!(
                        "`{w}({n}) - ...` reads as a reduction of a negation: to subtract from \
                         the function's value, write `({w}({n})) - ...`",
                        w = op.word(),
                        n = names.join(", ")
                    )
                } else {
                    "use `max(a, b)` or `min(a, b)` for the larger or smaller of two numbers"
                        .to_owned()
                };
                self.error(
                    Diagnostic::new(
                        Code::WrongKind,
                        e.span,
                        format!("a `{}` reduction is only allowed in semantics", op.word()),
                    )
                    .label("reduction outside semantics")
                    .help(help),
                );
                None
            }
        }
    }

    fn member(&mut self, owner: &ast::Ident, prop: &ast::Ident) -> Option<Expr> {
        let sym = self.lookup(
            &owner.name,
            owner.span,
            &[Kind::Memory, Kind::Unit, Kind::RegFile, Kind::Semaphore],
        )?;
        let value = match sym {
            Sym::Memory(m) => {
                let mem = self.memories.get(m.index())?;
                match prop.name.as_str() {
                    "size" => Some(&mem.size),
                    "banks" => Some(&mem.banks),
                    "bandwidth" => Some(&mem.bandwidth),
                    "latency" => Some(&mem.latency),
                    "ports" => Some(&mem.ports),
                    "read_energy" => return Some(mem.read_energy.expr.clone()),
                    "write_energy" => return Some(mem.write_energy.expr.clone()),
                    _ => None,
                }
            }
            Sym::Unit(u) => self
                .units
                .get(u.index())
                .and_then(|u| match prop.name.as_str() {
                    "count" => Some(&u.count),
                    "macs_per_cycle" => Some(&u.macs_per_cycle),
                    _ => None,
                }),
            Sym::RegFile(r) => self
                .regfiles
                .get(r.index())
                .and_then(|r| (prop.name == "count").then_some(&r.count)),
            Sym::Semaphore(s) => self
                .semaphores
                .get(s.index())
                .and_then(|s| (prop.name == "count").then_some(&s.count)),
            _ => None,
        };
        match value {
            Some(q) => Some(q.expr.clone()),
            None => {
                let props: &[&str] = match sym {
                    Sym::Memory(_) => &[
                        "size",
                        "banks",
                        "bandwidth",
                        "latency",
                        "ports",
                        "read_energy",
                        "write_energy",
                    ],
                    Sym::Unit(_) => &["count", "macs_per_cycle"],
                    _ => &["count"],
                };
                let help = match super::suggest(&prop.name, props.iter().copied()) {
                    Some(s) => format!("did you mean `{}.{s}`?", owner.name),
                    None => format!("usable properties: {}", props.join(", ")),
                };
                self.error(
                    Diagnostic::new(
                        Code::UnknownProperty,
                        prop.span,
                        format!(
                            "{} `{}` has no property `{}` usable in expressions",
                            sym.kind_word(),
                            owner.name,
                            prop.name
                        ),
                    )
                    .label("unknown property")
                    .help(help),
                );
                None
            }
        }
    }

    /// Evaluates a resolved expression at the current parameter values.
    pub fn eval_global(&mut self, e: &Expr, span: Span) -> Option<Num> {
        match eval::eval(e, &Params(&self.param_values)) {
            Ok(v) => Some(v),
            Err(err) => {
                self.error(
                    Diagnostic::new(Code::Arithmetic, span, format!("cannot evaluate: {err}"))
                        .label("here")
                        .help("check the parameter values this expression uses"),
                );
                None
            }
        }
    }

    /// Resolves and evaluates a global integer expression, requiring `value >= min`.
    pub fn global_int(&mut self, e: &ast::Expr, min: i64, what: &str) -> Option<IntQ> {
        let expr = self.resolve(&Scope::default(), e)?;
        let value = match self.eval_global(&expr, e.span)? {
            Num::Int(v) => v,
            Num::Real(r) => {
                self.error(
                    Diagnostic::new(
                        Code::NotInteger,
                        e.span,
                        format!("{what} must be an integer, not {r}"),
                    )
                    .label("not an integer")
                    .help("write a whole number, or round with integer arithmetic"),
                );
                return None;
            }
        };
        if value < min {
            self.error(
                Diagnostic::new(
                    Code::OutOfRange,
                    e.span,
                    format!("{what} must be at least {min}, but is {value}"),
                )
                .label(format!("evaluates to {value}"))
                .help(format!("give {what} a value of {min} or more")),
            );
            return None;
        }
        Some(IntQ { value, expr })
    }

    /// Resolves and evaluates a global real expression, requiring `value >= 0`.
    pub fn global_real(&mut self, e: &ast::Expr, what: &str) -> Option<RealQ> {
        let expr = self.resolve(&Scope::default(), e)?;
        let value = self.eval_global(&expr, e.span)?.as_f64();
        if value < 0.0 {
            self.error(
                Diagnostic::new(
                    Code::OutOfRange,
                    e.span,
                    format!("{what} cannot be negative ({value})"),
                )
                .label("negative")
                .help(format!("give {what} a value of 0 or more")),
            );
            return None;
        }
        Some(RealQ { value, expr })
    }
}

/// Resolves an expression written alone, outside a description
/// ([`crate::parse_expr`]), whose names are the integer variables `names`:
/// the `i`th name becomes parameter `i`. Functions are resolved as in a
/// description; anything else a description could name (a memory's
/// property, an operand's element, a reduction) has no meaning here and is
/// an error, as is a name not in `names`.
pub(crate) fn resolve_standalone(e: &ast::Expr, names: &[&str]) -> Result<Expr, Diagnostic> {
    if let Some(d) = foreign_name(e, names) {
        return Err(d);
    }
    let mut c = Checker::new();
    for (i, n) in names.iter().enumerate() {
        c.symbols.insert(
            (*n).to_owned(),
            (
                Sym::Param(ParamId::from_index(i)),
                Span::new(e.span.file, 0, 0),
            ),
        );
    }
    let resolved = c.resolve(&Scope::default(), e);
    c.diags.sort();
    match (resolved, c.diags.0.into_iter().next()) {
        (_, Some(d)) => Err(d),
        (Some(x), None) => Ok(x),
        (None, None) => Err(Diagnostic::new(
            Code::Syntax,
            e.span,
            "internal error: an expression resolved to nothing without a diagnostic",
        )),
    }
}

/// The first name of `e` that is not one of `names`, or a property access
/// (`hbm.size`), as an error.
fn foreign_name(e: &ast::Expr, names: &[&str]) -> Option<Diagnostic> {
    match &e.kind {
        ExprKind::Int(_) | ExprKind::Real(_) => None,
        ExprKind::Name(n) if names.contains(&n.as_str()) => None,
        ExprKind::Name(n) => {
            let help = match super::suggest(n, names.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None if names.is_empty() => "no name is defined here".to_owned(),
                None => format!("the parameters are {}", names.join(", ")),
            };
            Some(
                Diagnostic::new(Code::Undefined, e.span, format!("no parameter `{n}`"))
                    .label("unknown name")
                    .help(help),
            )
        }
        ExprKind::Member(owner, prop) => Some(
            Diagnostic::new(
                Code::WrongKind,
                e.span,
                format!(
                    "`{}.{}` is a property of a description's item, not a parameter",
                    owner.name, prop.name
                ),
            )
            .label("not usable here")
            .help("only parameters, numbers and functions can be used here"),
        ),
        ExprKind::Neg(a) => foreign_name(a, names),
        ExprKind::Binary(_, a, b) => foreign_name(a, names).or_else(|| foreign_name(b, names)),
        ExprKind::Call(_, args) => args.iter().find_map(|a| foreign_name(a, names)),
        // Refused as a whole by `Checker::resolve`.
        ExprKind::Index(..) | ExprKind::Reduce(..) => None,
    }
}

fn builtin_usage(b: Builtin) -> &'static str {
    match b {
        Builtin::CeilDiv => "ceil_div(a, b)",
        Builtin::Min => "min(a, b, ...)",
        Builtin::Max => "max(a, b, ...)",
        Builtin::Log2 => "log2(a)",
        Builtin::Pow2 => "pow2(a)",
        Builtin::AlignUp => "align_up(a, multiple)",
        Builtin::Pick => "pick(index, choice0, choice1, ...)",
    }
}
