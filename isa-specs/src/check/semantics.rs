//! Semantics in tensor index notation: indices, ranks, extents, reductions, dtypes.
//!
//! Rules (see docs/isa-language.md):
//! - with `=`, every index on the right must appear on the left or be reduced;
//!   with `+=`, `max=`, `min=` the right-only indices are reduced by that operator;
//! - an index only on the left broadcasts;
//! - a reduction `sum(k) e` must use `k` in `e` and `k` must not be on the left;
//! - every access has one index per dimension, and one index names dimensions of one extent;
//! - both sides of an operator have one element type; casts (`f32(x)`) convert.

use super::exprs::Scope;
use super::inst::Operands;
use super::{Checker, Sym};
use crate::ast::{self, ExprKind};
use crate::diag::{Code, Diagnostic};
use crate::eval::{self, WithOperands};
use crate::model::*;
use crate::source::Span;
use std::collections::BTreeSet;

struct Ctx<'a> {
    ops: &'a Operands,
    indices: Vec<(IndexVar, Span)>,
    ok: bool,
}

/// A converted expression with its element type (`None` for literals, which adopt the other side's) and free indices.
struct Typed {
    expr: SemExpr,
    dtype: Option<DType>,
    free: BTreeSet<IndexId>,
}

pub(crate) fn check_semantics(
    c: &mut Checker,
    ops: &Operands,
    stmts: &[ast::Stmt],
    span: Span,
) -> Option<Semantics> {
    if stmts.is_empty() {
        c.error(
            Diagnostic::new(Code::NoSemantics, span, "empty semantics")
                .label("no statements")
                .help("write at least one statement; `nop;` for an instruction that does nothing"),
        );
        return None;
    }
    let mut cx = Ctx {
        ops,
        indices: Vec::new(),
        ok: true,
    };
    let mut out = Vec::new();
    for s in stmts {
        if let Some(stmt) = statement(c, &mut cx, s) {
            out.push(stmt);
        }
    }
    for (var, vspan) in &cx.indices {
        // An unknown extent is only worth reporting when nothing else went wrong first.
        if var.extent == Expr::Int(0) && cx.ok {
            c.error(
                Diagnostic::new(
                    Code::ExtentMismatch,
                    *vspan,
                    format!("the extent of index `{}` is unknown", var.name),
                )
                .label("never indexes a dimension on its own")
                .help(format!(
                    "use `{}` alone as the index of some operand dimension so its range is known",
                    var.name
                )),
            );
            cx.ok = false;
        }
    }
    let indices = cx.indices.into_iter().map(|(v, _)| v).collect();
    cx.ok.then_some(Semantics {
        indices,
        stmts: out,
    })
}

fn fail<T>(c: &mut Checker, cx: &mut Ctx<'_>, d: Diagnostic) -> Option<T> {
    c.error(d);
    cx.ok = false;
    None
}

fn statement(c: &mut Checker, cx: &mut Ctx<'_>, s: &ast::Stmt) -> Option<Stmt> {
    match s {
        ast::Stmt::Action { name, args, span } => action(c, cx, name, args, *span),
        ast::Stmt::Assign {
            target, op, value, ..
        } => {
            let (access, target_dtype, lhs) = target_access(c, cx, target)?;
            let v = typed(c, cx, value, &lhs)?;
            if *op == AssignOp::Set
                && let Some(idx) = v.free.difference(&lhs).next()
            {
                let (var, vspan) = &cx.indices[idx.index()];
                let msg = format!(
                    "index `{}` appears only on the right of `=` and is not reduced",
                    var.name
                );
                let help = format!(
                    "reduce it (`sum({0}) ...`, `max({0}) ...`) or accumulate with `+=`",
                    var.name
                );
                let d = Diagnostic::new(Code::UnboundIndex, *vspan, msg)
                    .label("only on the right")
                    .with_secondary(target.span, "not on the left")
                    .help(help);
                return fail(c, cx, d);
            }
            if let Some(vt) = v.dtype
                && vt != target_dtype
            {
                let msg = format!(
                    "the right side is {} but `{}` holds {}",
                    vt.name(),
                    operand_name(cx, access.operand),
                    target_dtype.name()
                );
                let help = format!(
                    "convert explicitly: `{}({})`",
                    target_dtype.name(),
                    snippet_hint(value)
                );
                return fail(
                    c,
                    cx,
                    Diagnostic::new(Code::DtypeMismatch, value.span, msg)
                        .label(format!("{} value", vt.name()))
                        .with_secondary(target.span, format!("{} target", target_dtype.name()))
                        .help(help),
                );
            }
            Some(Stmt::Assign {
                target: access,
                op: *op,
                value: v.expr,
            })
        }
    }
}

fn snippet_hint(e: &ast::Expr) -> String {
    match &e.kind {
        ExprKind::Index(n, _) | ExprKind::Call(n, _) => format!("{}...", n.name),
        ExprKind::Name(n) => n.clone(),
        _ => "...".to_owned(),
    }
}

fn operand_name(cx: &Ctx<'_>, id: OperandId) -> String {
    cx.ops.list[id.index()].name.clone()
}

fn action(
    c: &mut Checker,
    cx: &mut Ctx<'_>,
    name: &ast::Ident,
    args: &[ast::Expr],
    span: Span,
) -> Option<Stmt> {
    let simple = match name.name.as_str() {
        "nop" => Some(Action::Nop),
        "halt" => Some(Action::Halt),
        "fence" => Some(Action::Fence),
        _ => None,
    };
    if let Some(a) = simple {
        if !args.is_empty() {
            return fail(
                c,
                cx,
                Diagnostic::new(
                    Code::BadAction,
                    span,
                    format!("`{}` takes no arguments", name.name),
                )
                .label("unexpected arguments")
                .help(format!("write `{};`", name.name)),
            );
        }
        return Some(Stmt::Action(a));
    }
    if !matches!(name.name.as_str(), "signal" | "wait") {
        let actions = ["nop", "halt", "fence", "signal", "wait"];
        let help = match super::suggest(&name.name, actions.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None => "statements are assignments (`y[i] = ...;`) or one of the actions nop, halt, fence, signal(s), wait(s)".to_owned(),
        };
        return fail(
            c,
            cx,
            Diagnostic::new(
                Code::BadAction,
                name.span,
                format!("unknown action `{}`", name.name),
            )
            .label("not an action")
            .help(help),
        );
    }
    if let [
        ast::Expr {
            kind: ExprKind::Name(n),
            ..
        },
    ] = args
        && cx.ops.scope.poisoned.contains(n)
    {
        cx.ok = false;
        return None;
    }
    let sem = match args {
        [
            ast::Expr {
                kind: ExprKind::Name(n),
                ..
            },
        ] => cx
            .ops
            .list
            .iter()
            .position(|o| &o.name == n && matches!(o.kind, OperandKind::Sem { .. })),
        _ => None,
    };
    match sem {
        Some(i) => {
            let id = OperandId::from_index(i);
            Some(Stmt::Action(if name.name == "signal" {
                Action::Signal(id)
            } else {
                Action::Wait(id)
            }))
        }
        None => fail(
            c,
            cx,
            Diagnostic::new(
                Code::BadAction,
                span,
                format!("`{}` takes one semaphore operand", name.name),
            )
            .label("needs a `sem` operand")
            .help(format!(
                "declare an operand `s : sem BANK;` and write `{}(s);`",
                name.name
            )),
        ),
    }
}

/// Shape and element type of a tensor operand, or `None` for immediates and semaphores.
fn tensor_of(c: &Checker, op: &Operand) -> Option<(Vec<Expr>, DType)> {
    match &op.kind {
        OperandKind::Reg { file, shape } => {
            Some((shape.clone(), c.regfiles.get(file.index())?.dtype))
        }
        OperandKind::Mem { shape, dtype, .. } => Some((shape.clone(), *dtype)),
        _ => None,
    }
}

fn target_access(
    c: &mut Checker,
    cx: &mut Ctx<'_>,
    t: &ast::Expr,
) -> Option<(Access, DType, BTreeSet<IndexId>)> {
    let (name, idx): (&str, &[ast::Expr]) = match &t.kind {
        ExprKind::Name(n) => (n, &[]),
        ExprKind::Index(n, idx) => (&n.name, idx),
        _ => {
            return fail(
                c,
                cx,
                Diagnostic::new(
                    Code::NotWritable,
                    t.span,
                    "the left of an assignment must be an operand",
                )
                .label("not an operand")
                .help("write `dst[i, j] = ...;` with an operand of the instruction"),
            );
        }
    };
    let Some(oi) = cx.ops.list.iter().position(|o| o.name == name) else {
        return undefined_operand(c, cx, name, t.span);
    };
    let Some((shape, dtype)) = tensor_of(c, &cx.ops.list[oi]) else {
        let msg = format!("operand `{name}` is not a register or memory, so it cannot be written");
        return fail(
            c,
            cx,
            Diagnostic::new(Code::NotWritable, t.span, msg)
                .label("read-only")
                .with_secondary(cx.ops.spans[oi], "declared here")
                .help("assign to a `reg` or `mem` operand"),
        );
    };
    let access = access(c, cx, OperandId::from_index(oi), &shape, idx, t.span)?;
    let lhs: BTreeSet<IndexId> = access
        .indices
        .iter()
        .flat_map(|a| a.terms.iter().map(|(i, _)| *i))
        .collect();
    Some((access, dtype, lhs))
}

fn undefined_operand<T>(c: &mut Checker, cx: &mut Ctx<'_>, name: &str, span: Span) -> Option<T> {
    if cx.ops.scope.poisoned.contains(name) {
        cx.ok = false;
        return None;
    }
    let names: Vec<&str> = cx
        .ops
        .list
        .iter()
        .map(|o| o.name.as_str())
        .filter(|n| !n.is_empty())
        .collect();
    let help = match super::suggest(name, names.iter().copied()) {
        Some(s) => format!("did you mean `{s}`?"),
        None if names.iter().all(|n| n.is_empty()) => {
            "declare operands in an `operands { ... }` section".to_owned()
        }
        None => format!("the operands are {}", names.join(", ")),
    };
    fail(
        c,
        cx,
        Diagnostic::new(Code::Undefined, span, format!("undefined operand `{name}`"))
            .label("not an operand of this instruction")
            .help(help),
    )
}

/// Checks an indexed access: rank, affine indices, extents.
fn access(
    c: &mut Checker,
    cx: &mut Ctx<'_>,
    operand: OperandId,
    shape: &[Expr],
    idx: &[ast::Expr],
    span: Span,
) -> Option<Access> {
    let name = operand_name(cx, operand);
    if idx.len() != shape.len() {
        let msg = format!(
            "`{name}` has rank {} but is accessed with {} indices",
            shape.len(),
            idx.len()
        );
        let help = if shape.is_empty() {
            format!("write `{name}` without indices")
        } else {
            format!(
                "write `{name}[{}]`",
                ["i", "j", "k", "l", "m", "n"]
                    .iter()
                    .cycle()
                    .take(shape.len())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        return fail(
            c,
            cx,
            Diagnostic::new(Code::Rank, span, msg)
                .label("wrong number of indices")
                .with_secondary(cx.ops.spans[operand.index()], "declared here")
                .help(help),
        );
    }
    let mut out = Vec::new();
    for (dim, e) in idx.iter().enumerate() {
        let affine = affine(c, cx, e)?;
        if let ([(var, 1)], 0, true) = (
            affine.terms.as_slice(),
            affine.constant,
            affine.offsets.is_empty(),
        ) {
            bind_extent(c, cx, *var, &shape[dim], e.span, &name, dim)?;
        }
        out.push(affine);
    }
    Some(Access {
        operand,
        indices: out,
    })
}

fn index_var(cx: &mut Ctx<'_>, name: &str, span: Span) -> IndexId {
    if let Some(i) = cx.indices.iter().position(|(v, _)| v.name == name) {
        return IndexId::from_index(i);
    }
    cx.indices.push((
        IndexVar {
            name: name.to_owned(),
            extent: Expr::Int(0),
        },
        span,
    ));
    IndexId::from_index(cx.indices.len() - 1)
}

fn bind_extent(
    c: &mut Checker,
    cx: &mut Ctx<'_>,
    var: IndexId,
    extent: &Expr,
    span: Span,
    operand: &str,
    dim: usize,
) -> Option<()> {
    let (current, first_span) = {
        let (v, s) = &cx.indices[var.index()];
        (v.extent.clone(), *s)
    };
    if current == Expr::Int(0) {
        cx.indices[var.index()].0.extent = extent.clone();
        cx.indices[var.index()].1 = span;
        return Some(());
    }
    if current == *extent {
        return Some(());
    }
    // Different expressions may still agree: compare them at every sample point.
    let ops = cx.ops;
    for point in ops.grid() {
        let env = WithOperands {
            params: &c.param_values,
            operands: point,
        };
        let (a, b) = (eval::eval_int(&current, &env), eval::eval_int(extent, &env));
        if a != b {
            let name = cx.indices[var.index()].0.name.clone();
            let show = |r: Result<i64, eval::EvalError>| {
                r.map_or_else(|e| e.to_string(), |v| v.to_string())
            };
            let when = ops.describe(point);
            let msg = format!(
                "index `{name}` ranges over {} in dimension {dim} of `{operand}` but over {} where it was first used{}",
                show(b),
                show(a),
                if when.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", when.trim())
                }
            );
            return fail(
                c,
                cx,
                Diagnostic::new(Code::ExtentMismatch, span, msg)
                    .label(format!("extent {}", show(b)))
                    .with_secondary(first_span, format!("extent {} here", show(a)))
                    .help("use a different index name, or make the operand shapes agree"),
            );
        }
    }
    Some(())
}

/// `a + sign·b` of two term lists, dropping zero coefficients.
fn merge<K: Ord + Copy>(mut a: Vec<(K, i64)>, b: &[(K, i64)], sign: i64) -> Vec<(K, i64)> {
    for (i, k) in b {
        match a.iter_mut().find(|(j, _)| j == i) {
            Some((_, kk)) => *kk += sign * k,
            None => a.push((*i, sign * k)),
        }
    }
    a.retain(|(_, k)| *k != 0);
    a.sort();
    a
}

fn scaled<K: Copy>(v: &[(K, i64)], k: i64) -> Vec<(K, i64)> {
    v.iter()
        .map(|(i, x)| (*i, x * k))
        .filter(|(_, x)| *x != 0)
        .collect()
}

fn affine(c: &mut Checker, cx: &mut Ctx<'_>, e: &ast::Expr) -> Option<Affine> {
    let non_affine = |c: &mut Checker, cx: &mut Ctx<'_>| {
        let d = Diagnostic::new(Code::NonAffineIndex, e.span, "index expressions must be affine: sums of indices and immediates times constants, plus a constant")
            .label("not affine")
            .help("write indices like `i`, `i + 1`, `2*i + k`, `i + row` (with `row` an immediate)");
        fail::<Affine>(c, cx, d)
    };
    let constant = |v: i64| Affine {
        constant: v,
        ..Affine::default()
    };
    match &e.kind {
        ExprKind::Int(v) => Some(constant(*v)),
        ExprKind::Name(n) => {
            if let Some(op) = cx.ops.scope.operands.get(n) {
                // An immediate: a run-time offset.
                return Some(Affine {
                    offsets: vec![(*op, 1)],
                    ..Affine::default()
                });
            }
            if cx.ops.scope.others.contains(n) || c.symbols.contains_key(n) {
                let Some(Sym::Param(p)) = c.symbols.get(n).map(|(s, _)| *s) else {
                    return non_affine(c, cx);
                };
                return Some(constant(c.param_values[p.index()]));
            }
            Some(Affine {
                terms: vec![(index_var(cx, n, e.span), 1)],
                ..Affine::default()
            })
        }
        ExprKind::Neg(a) => {
            let a = affine(c, cx, a)?;
            Some(Affine {
                terms: scaled(&a.terms, -1),
                constant: -a.constant,
                offsets: scaled(&a.offsets, -1),
            })
        }
        ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub), a, b) => {
            let (a, b) = (affine(c, cx, a)?, affine(c, cx, b)?);
            let sign = if *op == BinOp::Add { 1 } else { -1 };
            Some(Affine {
                terms: merge(a.terms, &b.terms, sign),
                constant: a.constant + sign * b.constant,
                offsets: merge(a.offsets, &b.offsets, sign),
            })
        }
        ExprKind::Binary(BinOp::Mul, a, b) => {
            let (a, b) = (affine(c, cx, a)?, affine(c, cx, b)?);
            let is_const = |x: &Affine| x.terms.is_empty() && x.offsets.is_empty();
            let (k, v) = match (is_const(&a), is_const(&b)) {
                (true, _) => (a.constant, b),
                (_, true) => (b.constant, a),
                _ => return non_affine(c, cx),
            };
            Some(Affine {
                terms: scaled(&v.terms, k),
                constant: v.constant * k,
                offsets: scaled(&v.offsets, k),
            })
        }
        _ => non_affine(c, cx),
    }
}

/// Converts and types a right-hand-side expression.
fn typed(
    c: &mut Checker,
    cx: &mut Ctx<'_>,
    e: &ast::Expr,
    lhs: &BTreeSet<IndexId>,
) -> Option<Typed> {
    let leaf = |expr, dtype, free| Some(Typed { expr, dtype, free });
    match &e.kind {
        ExprKind::Int(_) | ExprKind::Real(_) | ExprKind::Member(..) => {
            let v = c.resolve(&Scope::default(), e)?;
            leaf(SemExpr::Const(v), None, BTreeSet::new())
        }
        ExprKind::Name(n) => {
            if let Some(oi) = cx.ops.list.iter().position(|o| &o.name == n) {
                let op = cx.ops.list[oi].clone();
                let id = OperandId::from_index(oi);
                return match &op.kind {
                    OperandKind::Imm { .. } => leaf(
                        SemExpr::Access(Access {
                            operand: id,
                            indices: vec![],
                        }),
                        Some(DType::I32),
                        BTreeSet::new(),
                    ),
                    OperandKind::ImmReal { dtype } => leaf(
                        SemExpr::Access(Access {
                            operand: id,
                            indices: vec![],
                        }),
                        Some(*dtype),
                        BTreeSet::new(),
                    ),
                    OperandKind::Sem { .. } => fail(
                        c,
                        cx,
                        Diagnostic::new(
                            Code::WrongKind,
                            e.span,
                            format!("semaphore `{n}` has no value"),
                        )
                        .label("a semaphore")
                        .help("semaphores appear only in `signal(s)` and `wait(s)`"),
                    ),
                    _ => {
                        let (shape, dtype) = tensor_of(c, &op)?;
                        let a = access(c, cx, id, &shape, &[], e.span)?;
                        leaf(SemExpr::Access(a), Some(dtype), BTreeSet::new())
                    }
                };
            }
            if matches!(c.symbols.get(n), Some((Sym::Param(_), _))) {
                let v = c.resolve(&Scope::default(), e)?;
                return leaf(SemExpr::Const(v), None, BTreeSet::new());
            }
            // An index already bound (on the left, or by an enclosing reduction) has a value.
            if let Some(i) = cx.indices.iter().position(|(v, _)| &v.name == n) {
                let id = IndexId::from_index(i);
                return leaf(SemExpr::Index(id), Some(DType::I32), BTreeSet::from([id]));
            }
            undefined_operand(c, cx, n, e.span)
        }
        ExprKind::Index(n, idx) => {
            let Some(oi) = cx.ops.list.iter().position(|o| o.name == n.name) else {
                return undefined_operand(c, cx, &n.name, n.span);
            };
            let op = cx.ops.list[oi].clone();
            let Some((shape, dtype)) = tensor_of(c, &op) else {
                return fail(
                    c,
                    cx,
                    Diagnostic::new(
                        Code::Rank,
                        e.span,
                        format!("`{}` is a scalar operand and takes no indices", n.name),
                    )
                    .label("indexed scalar")
                    .help(format!("write `{}`", n.name)),
                );
            };
            let a = access(c, cx, OperandId::from_index(oi), &shape, idx, e.span)?;
            let free = a
                .indices
                .iter()
                .flat_map(|x| x.terms.iter().map(|(i, _)| *i))
                .collect();
            leaf(SemExpr::Access(a), Some(dtype), free)
        }
        ExprKind::Neg(a) => {
            let a = typed(c, cx, a, lhs)?;
            Some(Typed {
                expr: SemExpr::Neg(Box::new(a.expr)),
                dtype: a.dtype,
                free: a.free,
            })
        }
        ExprKind::Binary(op, a, b) => {
            let (a, b) = (typed(c, cx, a, lhs), typed(c, cx, b, lhs));
            let (a, b) = (a?, b?);
            let dtype = unify(c, cx, e, a.dtype, b.dtype, op.symbol())?;
            let free = a.free.union(&b.free).copied().collect();
            Some(Typed {
                expr: SemExpr::Binary(*op, Box::new(a.expr), Box::new(b.expr)),
                dtype,
                free,
            })
        }
        ExprKind::Call(f, args) => call(c, cx, e, f, args, lhs),
        ExprKind::Reduce(op, binders, body) => {
            let ids: Vec<IndexId> = binders
                .iter()
                .map(|b| index_var(cx, &b.name, b.span))
                .collect();
            let body = typed(c, cx, body, lhs)?;
            for (b, id) in binders.iter().zip(&ids) {
                if !body.free.contains(id) {
                    let msg = format!(
                        "reduction index `{}` is not used by what it reduces",
                        b.name
                    );
                    return fail(
                        c,
                        cx,
                        Diagnostic::new(Code::ReductionIndex, b.span, msg)
                            .label("never used")
                            .with_secondary(e.span, "the reduction")
                            .help(format!(
                                "index an operand with `{}` inside the reduction, or remove it",
                                b.name
                            )),
                    );
                }
                if lhs.contains(id) {
                    let msg = format!(
                        "reduction index `{}` also appears on the left, so it is never reduced",
                        b.name
                    );
                    return fail(
                        c,
                        cx,
                        Diagnostic::new(Code::ReductionIndex, b.span, msg)
                            .label("reduced here")
                            .help(format!(
                                "remove `{}` from the left side or from the reduction",
                                b.name
                            )),
                    );
                }
            }
            let free = body
                .free
                .iter()
                .filter(|i| !ids.contains(i))
                .copied()
                .collect();
            Some(Typed {
                expr: SemExpr::Reduce(*op, ids, Box::new(body.expr)),
                dtype: body.dtype,
                free,
            })
        }
    }
}

fn unify(
    c: &mut Checker,
    cx: &mut Ctx<'_>,
    e: &ast::Expr,
    a: Option<DType>,
    b: Option<DType>,
    what: &str,
) -> Option<Option<DType>> {
    match (a, b) {
        (Some(x), Some(y)) if x != y => {
            let msg = format!("`{what}` combines {} and {} values", x.name(), y.name());
            let help = format!(
                "cast one side, e.g. `{}(...)`",
                if x.bytes() >= y.bytes() {
                    x.name()
                } else {
                    y.name()
                }
            );
            fail(
                c,
                cx,
                Diagnostic::new(Code::DtypeMismatch, e.span, msg)
                    .label("mixed element types")
                    .help(help),
            )
        }
        (x, y) => Some(x.or(y)),
    }
}

fn call(
    c: &mut Checker,
    cx: &mut Ctx<'_>,
    e: &ast::Expr,
    f: &ast::Ident,
    args: &[ast::Expr],
    lhs: &BTreeSet<IndexId>,
) -> Option<Typed> {
    if let Some(to) = DType::from_name(&f.name) {
        let [arg] = args else {
            return fail(
                c,
                cx,
                Diagnostic::new(
                    Code::Arity,
                    e.span,
                    format!("the cast `{}(...)` takes one argument", f.name),
                )
                .label("wrong number of arguments")
                .help(format!("write `{}(x)`", f.name)),
            );
        };
        let a = typed(c, cx, arg, lhs)?;
        return Some(Typed {
            expr: SemExpr::Cast(to, Box::new(a.expr)),
            dtype: Some(to),
            free: a.free,
        });
    }
    let Some(func) = Func::ALL.into_iter().find(|g| g.name() == f.name) else {
        let names: Vec<&str> = Func::ALL
            .iter()
            .map(|g| g.name())
            .chain(DType::ALL.iter().map(|d| d.name()))
            .collect();
        let help = match super::suggest(&f.name, names.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None => format!("semantics may call {}", names.join(", ")),
        };
        return fail(
            c,
            cx,
            Diagnostic::new(
                Code::UnknownFunction,
                f.span,
                format!("unknown function `{}` in semantics", f.name),
            )
            .label("not a function")
            .help(help),
        );
    };
    if args.len() != func.arity() {
        let n = func.arity();
        let msg = format!(
            "`{}` takes {n} argument{}, not {}",
            f.name,
            if n == 1 { "" } else { "s" },
            args.len()
        );
        return fail(
            c,
            cx,
            Diagnostic::new(Code::Arity, e.span, msg)
                .label("wrong number of arguments")
                .help(format!(
                    "call it as `{}({})`",
                    f.name,
                    ["x", "y", "z"][..n].join(", ")
                )),
        );
    }
    let typed_args = args
        .iter()
        .map(|a| typed(c, cx, a, lhs))
        .collect::<Vec<_>>();
    let typed_args: Vec<Typed> = typed_args.into_iter().collect::<Option<_>>()?;
    let free = typed_args
        .iter()
        .flat_map(|a| a.free.iter().copied())
        .collect();
    let dtype = match func {
        Func::Select => unify(c, cx, e, typed_args[1].dtype, typed_args[2].dtype, "select")?,
        Func::Max | Func::Min | Func::Lt | Func::Le | Func::Eq => unify(
            c,
            cx,
            e,
            typed_args[0].dtype,
            typed_args[1].dtype,
            func.name(),
        )?,
        Func::Abs => typed_args[0].dtype,
        _ => {
            let d = typed_args[0].dtype;
            if let Some(t) = d
                && !t.is_float()
            {
                let msg = format!(
                    "`{}` needs a floating-point operand, not {}",
                    f.name,
                    t.name()
                );
                return fail(
                    c,
                    cx,
                    Diagnostic::new(Code::DtypeMismatch, args[0].span, msg)
                        .label(format!("{} value", t.name()))
                        .help(format!("convert first: `{}(f32(...))`", f.name)),
                );
            }
            d
        }
    };
    let exprs = typed_args.into_iter().map(|a| a.expr).collect();
    Some(Typed {
        expr: SemExpr::Call(func, exprs),
        dtype,
        free,
    })
}
