//! Parameters: dependency order, cycles, defaults and `--set` overrides.

use super::exprs::Scope;
use super::{Checker, Sym, record};
use crate::ast::{self, ExprKind, Item};
use crate::diag::{Code, Diagnostic};
use crate::eval::Num;
use crate::model::{Expr, Param, ParamId};
use crate::spans::SpanKey;

/// Names a written expression refers to.
fn names_in(e: &ast::Expr, out: &mut Vec<(String, crate::source::Span)>) {
    match &e.kind {
        ExprKind::Name(n) => out.push((n.clone(), e.span)),
        ExprKind::Neg(a) | ExprKind::Reduce(_, _, a) => names_in(a, out),
        ExprKind::Binary(_, a, b) => {
            names_in(a, out);
            names_in(b, out);
        }
        ExprKind::Call(_, args) | ExprKind::Index(_, args) => {
            args.iter().for_each(|a| names_in(a, out));
        }
        ExprKind::Int(_) | ExprKind::Real(_) | ExprKind::Member(..) => {}
    }
}

pub(crate) fn check_params(c: &mut Checker, items: &[Item], overrides: &[(String, i64)]) {
    let decls: Vec<(&ast::Ident, &ast::Expr)> = items
        .iter()
        .filter_map(|i| match i {
            Item::Param { name, value } => Some((name, value)),
            _ => None,
        })
        .collect();
    // Parameter ids follow `collect_names`, which numbered the first definition of each name.
    let mut by_id: Vec<Option<(&ast::Ident, &ast::Expr)>> = vec![None; decls.len()];
    for (name, value) in &decls {
        if let Some((Sym::Param(id), span)) = c.symbols.get(&name.name)
            && *span == name.span
        {
            by_id[id.index()] = Some((name, value));
        }
    }
    let by_id: Vec<(&ast::Ident, &ast::Expr)> = by_id.into_iter().flatten().collect();
    let deps: Vec<Vec<(ParamId, crate::source::Span)>> = by_id
        .iter()
        .map(|(_, value)| {
            let mut names = Vec::new();
            names_in(value, &mut names);
            names
                .into_iter()
                .filter_map(|(n, s)| match c.symbols.get(&n) {
                    Some((Sym::Param(p), _)) => Some((*p, s)),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let order = topo_order(c, &by_id, &deps);
    c.param_values = vec![0; by_id.len()];
    c.params = by_id
        .iter()
        .map(|(name, _)| Param {
            name: name.name.clone(),
            default: Expr::Int(0),
            value: 0,
        })
        .collect();
    for (i, (name, _)) in by_id.iter().enumerate() {
        record(c, SpanKey::Param(ParamId::from_index(i)), name.span);
    }
    let overrides = check_overrides(c, overrides);
    for id in order {
        let (name, value) = by_id[id.index()];
        if c.broken.contains(&name.name) {
            continue;
        }
        let Some(expr) = c.resolve(&Scope::default(), value) else {
            continue;
        };
        let v = match c.eval_global(&expr, value.span) {
            Some(Num::Int(v)) => v,
            Some(Num::Real(r)) => {
                c.error(
                    Diagnostic::new(
                        Code::NotInteger,
                        value.span,
                        format!("parameter `{}` must be an integer, but its expression uses real numbers (value {r})", name.name),
                    )
                    .label("real-valued")
                    .help("parameters are integers: write sizes as `512 KiB` rather than `0.5 MiB`; write reals (energies, areas) directly in the property that uses them"),
                );
                c.broken.insert(name.name.clone());
                continue;
            }
            None => {
                c.broken.insert(name.name.clone());
                continue;
            }
        };
        let v = overrides.get(&id).copied().unwrap_or(v);
        c.param_values[id.index()] = v;
        c.params[id.index()] = Param {
            name: name.name.clone(),
            default: expr,
            value: v,
        };
    }
}

fn check_overrides(
    c: &mut Checker,
    overrides: &[(String, i64)],
) -> std::collections::HashMap<ParamId, i64> {
    let mut out = std::collections::HashMap::new();
    for (name, value) in overrides {
        match c.symbols.get(name) {
            Some((Sym::Param(p), _)) => {
                out.insert(*p, *value);
            }
            Some((other, _)) => {
                let other = other.kind_word();
                c.error(
                    Diagnostic::unlocated(
                        Code::UnknownOverride,
                        format!("`--set {name}={value}`: `{name}` is a {other}, not a parameter"),
                    )
                    .help("only parameters (`param NAME = ...;`) can be overridden"),
                );
            }
            None => {
                let names: Vec<&str> = c.params.iter().map(|p| p.name.as_str()).collect();
                let help = match super::suggest(name, names.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None if names.is_empty() => "this machine has no parameters".to_owned(),
                    None => format!("the parameters are {}", names.join(", ")),
                };
                c.error(
                    Diagnostic::unlocated(
                        Code::UnknownOverride,
                        format!("`--set {name}={value}` names no parameter"),
                    )
                    .help(help),
                );
            }
        }
    }
    out
}

/// Orders parameters so each comes after those it uses; reports cycles.
fn topo_order(
    c: &mut Checker,
    decls: &[(&ast::Ident, &ast::Expr)],
    deps: &[Vec<(ParamId, crate::source::Span)>],
) -> Vec<ParamId> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut marks = vec![Mark::New; decls.len()];
    let mut order = Vec::new();
    for start in 0..decls.len() {
        if marks[start] != Mark::New {
            continue;
        }
        // Iterative depth-first search; the stack holds (param, next dependency to visit).
        let mut stack = vec![(start, 0usize)];
        marks[start] = Mark::Active;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(&(dep, use_span)) = deps[node].get(*next) {
                *next += 1;
                match marks[dep.index()] {
                    Mark::New => {
                        marks[dep.index()] = Mark::Active;
                        stack.push((dep.index(), 0));
                    }
                    Mark::Active => {
                        let pos = stack
                            .iter()
                            .position(|(n, _)| *n == dep.index())
                            .unwrap_or(0);
                        let cycle: Vec<usize> = stack[pos..].iter().map(|(n, _)| *n).collect();
                        report_cycle(c, decls, &cycle, use_span);
                        marks[dep.index()] = Mark::Done;
                    }
                    Mark::Done => {}
                }
            } else {
                marks[node] = Mark::Done;
                order.push(ParamId::from_index(node));
                stack.pop();
            }
        }
    }
    // Parameters on a cycle are still in `order` but their evaluation fails quietly: mark them broken.
    order
}

fn report_cycle(
    c: &mut Checker,
    decls: &[(&ast::Ident, &ast::Expr)],
    cycle: &[usize],
    closing_use: crate::source::Span,
) {
    let names: Vec<&str> = cycle.iter().map(|i| decls[*i].0.name.as_str()).collect();
    let path = names
        .iter()
        .chain(names.first())
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(" -> ");
    let mut d = Diagnostic::new(
        Code::CyclicParam,
        closing_use,
        format!("parameters defined in terms of each other: {path}"),
    )
    .label("this use closes the cycle")
    .help("give one of these parameters a value that does not depend on the others");
    for i in cycle {
        d = d.with_secondary(
            decls[*i].0.span,
            format!("`{}` is part of the cycle", decls[*i].0.name),
        );
        c.broken.insert(decls[*i].0.name.clone());
    }
    c.error(d);
}
