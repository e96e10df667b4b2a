//! Instructions: operands, timing, encoding, energy and constraints (semantics in `semantics.rs`).

use super::encoding::InstSpans;
use super::exprs::Scope;
use super::props::Props;
use super::{Checker, Header, Kind, Sym, record};
use crate::ast::{self, ExprKind, Item, OperandKindAst};
use crate::diag::{Code, Diagnostic};
use crate::eval::{self, WithOperands};
use crate::model::*;
use crate::source::Span;
use crate::spans::SpanKey;

/// Operands of one instruction while it is checked.
pub(crate) struct Operands {
    pub list: Vec<Operand>,
    pub spans: Vec<Span>,
    pub scope: Scope,
    /// Sample points that satisfy the constraints, once they are known.
    legal: Option<Vec<Vec<Option<i64>>>>,
}

impl Operands {
    /// `(id, lo, hi)` of every integer immediate, for sampling.
    pub fn ranges(&self) -> Vec<(OperandId, i64, i64)> {
        self.list
            .iter()
            .enumerate()
            .filter_map(|(i, o)| match o.kind {
                OperandKind::Imm { lo, hi } => Some((OperandId::from_index(i), lo, hi)),
                _ => None,
            })
            .collect()
    }

    /// Sample points of all immediates (those satisfying the constraints, once restricted).
    pub fn grid(&self) -> &[Vec<Option<i64>>] {
        self.legal.as_deref().unwrap_or_default()
    }

    /// Restricts later sampling to the points where every constraint holds.
    fn restrict(&mut self, params: &[i64], constraints: &[Constraint]) {
        let points = self
            .legal
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|point| {
                let env = WithOperands { params, operands: point };
                constraints.iter().all(|k| {
                    matches!((eval::eval(&k.lhs, &env), eval::eval(&k.rhs, &env)), (Ok(a), Ok(b)) if k.op.holds(a.as_f64(), b.as_f64()))
                })
            })
            .collect();
        self.legal = Some(points);
    }

    /// `m = 3, n = 1` for a sample point.
    pub fn describe(&self, point: &[Option<i64>]) -> String {
        let parts: Vec<String> = self
            .list
            .iter()
            .zip(point)
            .filter_map(|(o, v)| v.map(|v| format!("{} = {v}", o.name)))
            .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!(" when {}", parts.join(", "))
        }
    }
}

pub(crate) fn check_instructions(
    c: &mut Checker,
    items: &[Item],
    header: Option<&Header>,
) -> Vec<(Instruction, InstSpans)> {
    if c.slots.is_empty() {
        // A single-issue machine: one slot covers the word and feeds every unit.
        let units = (0..c.units.len()).map(UnitId::from_index).collect();
        let hi = header.map_or(63, |h| h.word_bits - 1);
        c.slots.push(Slot {
            name: "issue".to_owned(),
            hi,
            lo: 0,
            units,
        });
        if header.is_none() {
            // Without a header the word width is unknown: do not check formats against it.
            c.broken.insert("issue".to_owned());
        }
    }
    let mut out: Vec<(Instruction, InstSpans)> = Vec::new();
    let mut seen: std::collections::HashMap<String, Span> = std::collections::HashMap::new();
    for item in items {
        let Item::Inst(inst) = item else { continue };
        if let Some(first) = seen.get(&inst.name.name) {
            c.error(
                Diagnostic::new(
                    Code::Duplicate,
                    inst.name.span,
                    format!("instruction `{}` is defined twice", inst.name.name),
                )
                .label("defined again here")
                .with_secondary(*first, "first defined here")
                .help("rename one of them; mnemonics must be unique"),
            );
            continue;
        }
        seen.insert(inst.name.name.clone(), inst.name.span);
        let id = InstId::from_index(out.len());
        if let Some(checked) = check_instruction(c, inst, id) {
            out.push(checked);
        }
    }
    out
}

fn one_section<'a, T>(
    c: &mut Checker,
    inst: &ast::Inst,
    what: &str,
    sections: &'a [(T, Span)],
) -> Option<&'a T> {
    for extra in sections.iter().skip(1) {
        c.error(
            Diagnostic::new(
                Code::DuplicateProperty,
                extra.1,
                format!(
                    "instruction `{}` has a second `{what}` section",
                    inst.name.name
                ),
            )
            .label("second section")
            .with_secondary(sections[0].1, "first section here")
            .help(format!("merge the two `{what}` sections")),
        );
    }
    sections.first().map(|(t, _)| t)
}

fn check_instruction(
    c: &mut Checker,
    inst: &ast::Inst,
    id: InstId,
) -> Option<(Instruction, InstSpans)> {
    record(c, SpanKey::Inst(id), inst.span);
    let props = Props::new(
        c,
        &inst.props,
        format!("instruction `{}`", inst.name.name),
        inst.name.span,
        &["energy", "doc"],
    );
    let doc = props.string(c, "doc").unwrap_or_default();
    let no_ops = Vec::new();
    let decls = one_section(c, inst, "operands", &inst.operands).unwrap_or(&no_ops);
    let (mut ops, operands_ok) = check_operands(c, id, decls);
    let constraints = check_constraints(c, &ops, &inst.constraints);
    if let Some(k) = &constraints {
        ops.restrict(&c.param_values, k);
    }
    let dims_ok = ops
        .list
        .iter()
        .zip(&ops.spans)
        .all(|(o, span)| dims_positive(c, &ops, o, *span));

    let semantics = match one_section(c, inst, "semantics", &inst.semantics) {
        Some(stmts) => {
            if let Some((_, span)) = inst.semantics.first() {
                record(c, SpanKey::Semantics(id), *span);
            }
            super::semantics::check_semantics(c, &ops, stmts, inst.semantics[0].1)
        }
        None => {
            c.error(
                Diagnostic::new(Code::NoSemantics, inst.name.span, format!("instruction `{}` has no semantics", inst.name.name))
                    .label("no `semantics` section")
                    .help("say what it computes, e.g. `semantics { y[i] = exp(x[i]); }`, or `semantics { nop; }`"),
            );
            None
        }
    };
    let timing = match one_section(c, inst, "timing", &inst.timing) {
        Some(t) => check_timing(c, &ops, t, inst.timing[0].1, &inst.name.name),
        None => {
            c.error(
                Diagnostic::new(
                    Code::MissingProperty,
                    inst.name.span,
                    format!("instruction `{}` has no timing", inst.name.name),
                )
                .label("no `timing` section")
                .help("add `timing { unit = U; latency = 1; }`"),
            );
            None
        }
    };
    let encoding = match inst.encodings.as_slice() {
        [] => {
            c.error(
                Diagnostic::new(
                    Code::MissingProperty,
                    inst.name.span,
                    format!("instruction `{}` has no encoding", inst.name.name),
                )
                .label("no `encoding` section")
                .help("add `encoding FORMAT { opcode = 0x1; operand = operand; }`"),
            );
            None
        }
        [first, rest @ ..] => {
            for extra in rest {
                c.error(
                    Diagnostic::new(
                        Code::DuplicateProperty,
                        extra.span,
                        format!(
                            "instruction `{}` has a second `encoding` section",
                            inst.name.name
                        ),
                    )
                    .label("second section")
                    .with_secondary(first.span, "first section here")
                    .help("an instruction has one encoding"),
                );
            }
            record(c, SpanKey::Encoding(id), first.span);
            check_encoding(c, &ops, first, timing.as_ref(), &inst.name.name)
        }
    };
    let energy = match props.get("energy") {
        Some(p) => check_energy(c, &ops, &p.value),
        None => {
            c.error(
                Diagnostic::new(Code::MissingProperty, inst.name.span, format!("instruction `{}` needs property `energy`", inst.name.name))
                    .label("`energy` missing")
                    .help("add `energy = <pJ per execution>;` (an expression over operands and parameters)"),
            );
            None
        }
    };
    if let (Some(t), Some(sem)) = (&timing, &semantics)
        && c.units[t.unit.index()].asynchronous
        && !sem
            .stmts
            .iter()
            .any(|s| matches!(s, Stmt::Action(Action::Signal(_))))
    {
        c.error(
            Diagnostic::new(Code::AsyncWithoutToken, inst.name.span, format!("`{}` runs on the asynchronous unit `{}` but signals no semaphore", inst.name.name, c.units[t.unit.index()].name))
                .label("completion cannot be observed")
                .help("add a `sem` operand and `signal(s);` to the semantics, so programs can wait for it (or rely on `fence`)"),
        );
    }
    let enc_span = inst.encodings.first().map_or(inst.name.span, |e| e.span);
    if !dims_ok || !operands_ok {
        return None;
    }
    let instruction = Instruction {
        name: inst.name.name.clone(),
        doc,
        operands: ops.list,
        semantics: semantics?,
        timing: timing?,
        encoding: encoding?,
        energy: energy?,
        constraints: constraints?,
    };
    Some((instruction, InstSpans { encoding: enc_span }))
}

/// Checks operand declarations. Operand ids are declaration positions: a
/// declaration that fails leaves a nameless placeholder (and fails the
/// instruction), so the ids of the others do not shift.
fn check_operands(c: &mut Checker, inst: InstId, decls: &[ast::OperandDecl]) -> (Operands, bool) {
    let mut ops = Operands {
        list: Vec::new(),
        spans: Vec::new(),
        scope: Scope::default(),
        legal: None,
    };
    // Immediates are usable in every shape, whatever the declaration order.
    for (i, d) in decls.iter().enumerate() {
        if matches!(d.kind, OperandKindAst::ImmRange { .. })
            && !ops.scope.operands.contains_key(&d.name.name)
        {
            ops.scope
                .operands
                .insert(d.name.name.clone(), OperandId::from_index(i));
        }
    }
    let mut ok = true;
    let placeholder = Operand {
        name: String::new(),
        kind: OperandKind::Imm { lo: 0, hi: 0 },
    };
    for (i, d) in decls.iter().enumerate() {
        let oid = OperandId::from_index(i);
        if let Some(prev) = ops.list.iter().position(|o| o.name == d.name.name) {
            c.error(
                Diagnostic::new(
                    Code::Duplicate,
                    d.name.span,
                    format!("operand `{}` declared twice", d.name.name),
                )
                .label("declared again here")
                .with_secondary(ops.spans[prev], "first declared here")
                .help("rename one of the operands"),
            );
            ops.list.push(placeholder.clone());
            ops.spans.push(d.span);
            ok = false;
            continue;
        }
        let Some(kind) = operand_kind(c, &ops.scope, d) else {
            // Uses of the name are skipped instead of reported as undefined.
            ops.scope.operands.remove(&d.name.name);
            ops.scope.poisoned.insert(d.name.name.clone());
            ops.list.push(placeholder.clone());
            ops.spans.push(d.span);
            ok = false;
            continue;
        };
        if !matches!(kind, OperandKind::Imm { .. }) {
            ops.scope.others.insert(d.name.name.clone());
        }
        record(c, SpanKey::Operand(inst, oid), d.span);
        ops.list.push(Operand {
            name: d.name.name.clone(),
            kind,
        });
        ops.spans.push(d.span);
    }
    ops.legal = Some(eval::sample_grid(&ops.ranges(), ops.list.len()));
    (ops, ok)
}

/// Every dimension of a tensor operand is at least 1 for every legal value of the earlier immediates.
fn dims_positive(c: &mut Checker, ops: &Operands, op: &Operand, span: Span) -> bool {
    let (dims, limits): (&[Expr], Vec<i64>) = match &op.kind {
        OperandKind::Reg { shape, file } => {
            let limits = c
                .regfiles
                .get(file.index())
                .map(|r| r.shape.iter().map(|q| q.value).collect())
                .unwrap_or_default();
            (shape, limits)
        }
        OperandKind::Mem { shape, .. } => (shape, Vec::new()),
        _ => return true,
    };
    for point in ops.grid() {
        let env = WithOperands {
            params: &c.param_values,
            operands: point,
        };
        for (i, dim) in dims.iter().enumerate() {
            match eval::eval_int(dim, &env) {
                Ok(v) if limits.get(i).is_some_and(|l| v > *l) => {
                    let when = ops.describe(point);
                    let msg = format!(
                        "dimension {i} of operand `{}` is {v}{when}, but the registers have only {}",
                        op.name, limits[i]
                    );
                    c.error(
                        Diagnostic::new(Code::OutOfRange, span, msg)
                            .label("view larger than the register")
                            .help("narrow the immediate range or add a constraint so the view fits the register"),
                    );
                    return false;
                }
                Ok(v) if v >= 1 => {}
                result => {
                    let what = result.map_or_else(|e| e.to_string(), |v| format!("is {v}"));
                    let when = ops.describe(point);
                    let msg = format!("dimension {i} of operand `{}` {what}{when}", op.name);
                    c.error(
                        Diagnostic::new(Code::OutOfRange, span, msg)
                            .label("empty or negative dimension")
                            .help("every dimension must be at least 1 for every legal immediate value"),
                    );
                    return false;
                }
            }
        }
    }
    true
}

fn operand_kind(c: &mut Checker, scope: &Scope, d: &ast::OperandDecl) -> Option<OperandKind> {
    match &d.kind {
        OperandKindAst::Reg { class, shape } => {
            let Sym::RegFile(file) = c.lookup(&class.name, class.span, &[Kind::RegFile])? else {
                return None;
            };
            let rf_shape: Vec<Expr> = c
                .regfiles
                .get(file.index())?
                .shape
                .iter()
                .map(|q| q.expr.clone())
                .collect();
            let shape = match shape {
                None => rf_shape,
                Some((dims, span)) => {
                    if dims.len() != rf_shape.len() {
                        c.error(
                            Diagnostic::new(
                                Code::Rank,
                                *span,
                                format!("register file `{}` holds rank-{} registers, this view has rank {}", class.name, rf_shape.len(), dims.len()),
                            )
                            .label("wrong rank")
                            .help("a register view has as many dimensions as the register"),
                        );
                        return None;
                    }
                    dims.iter()
                        .map(|e| c.resolve(scope, e))
                        .collect::<Option<Vec<_>>>()?
                }
            };
            Some(OperandKind::Reg { file, shape })
        }
        OperandKindAst::Mem {
            mem,
            shape,
            dtype,
            align,
            stride,
        } => {
            let Sym::Memory(m) = c.lookup(&mem.name, mem.span, &[Kind::Memory])? else {
                return None;
            };
            let dt = dtype_of(c, dtype)?;
            let dims = shape
                .0
                .iter()
                .map(|e| c.resolve(scope, e))
                .collect::<Option<Vec<_>>>()?;
            let align = match align {
                Some(e) => c.global_int(e, 1, "an alignment")?.value,
                None => i64::try_from(dt.bytes()).unwrap_or(1),
            };
            let stride = match stride {
                None => None,
                Some((s, span)) => {
                    if s.len() != dims.len() {
                        c.error(
                            Diagnostic::new(
                                Code::Rank,
                                *span,
                                format!("{} strides for a rank-{} shape", s.len(), dims.len()),
                            )
                            .label("wrong number of strides")
                            .help("give one stride (in elements) per dimension"),
                        );
                        return None;
                    }
                    Some(
                        s.iter()
                            .map(|e| c.resolve(scope, e))
                            .collect::<Option<Vec<_>>>()?,
                    )
                }
            };
            Some(OperandKind::Mem {
                mem: m,
                shape: dims,
                dtype: dt,
                align: u64::try_from(align).unwrap_or(1),
                stride,
            })
        }
        OperandKindAst::ImmRange { lo, hi } => {
            let l = c.global_int(lo, i64::MIN, "an immediate bound")?.value;
            let h = c.global_int(hi, i64::MIN, "an immediate bound")?.value;
            if l > h {
                let span = Span::new(lo.span.file, lo.span.start as usize, hi.span.end as usize);
                c.error(
                    Diagnostic::new(
                        Code::OutOfRange,
                        span,
                        format!("immediate range {l}..={h} is empty"),
                    )
                    .label("low bound above high bound")
                    .help(format!("write `imm {h}..={l}`")),
                );
                return None;
            }
            Some(OperandKind::Imm { lo: l, hi: h })
        }
        OperandKindAst::ImmTyped(t) => {
            let dt = dtype_of(c, t)?;
            if !dt.is_float() {
                c.error(
                    Diagnostic::new(Code::WrongValue, t.span, format!("`imm {}` needs a range", t.name))
                        .label("integer immediates take a range")
                        .help("write `imm LO..=HI` for integers; `imm f32` (or another float type) for reals"),
                );
                return None;
            }
            Some(OperandKind::ImmReal { dtype: dt })
        }
        OperandKindAst::Sem(bank) => match c.lookup(&bank.name, bank.span, &[Kind::Semaphore])? {
            Sym::Semaphore(s) => Some(OperandKind::Sem { bank: s }),
            _ => None,
        },
    }
}

pub(crate) fn dtype_of(c: &mut Checker, t: &ast::Ident) -> Option<DType> {
    if let Some(d) = DType::from_name(&t.name) {
        return Some(d);
    }
    let names = DType::ALL.map(DType::name);
    let help = match super::suggest(&t.name, names.iter().copied()) {
        Some(s) => format!("did you mean `{s}`?"),
        None => format!("the element types are {}", names.join(", ")),
    };
    c.error(
        Diagnostic::new(
            Code::UnknownDtype,
            t.span,
            format!("unknown element type `{}`", t.name),
        )
        .label("not an element type")
        .help(help),
    );
    None
}

/// Resolves an expression over operands and checks it at every sample point.
/// Resolves an expression over operands and checks `ok` at every sample point;
/// `report` explains the first failure.
fn sampled(
    c: &mut Checker,
    ops: &Operands,
    e: &ast::Expr,
    ok: impl Fn(eval::Num) -> bool,
    report: impl FnOnce(&mut Checker, eval::Num, &str),
) -> Option<Expr> {
    let expr = c.resolve(&ops.scope, e)?;
    for point in ops.grid() {
        let env = WithOperands {
            params: &c.param_values,
            operands: point,
        };
        match eval::eval(&expr, &env) {
            Ok(v) if ok(v) => {}
            Ok(v) => {
                report(c, v, &ops.describe(point));
                return None;
            }
            Err(err) => {
                let when = ops.describe(point);
                c.error(
                    Diagnostic::new(Code::Arithmetic, e.span, format!("cannot evaluate this expression{when}: {err}"))
                        .label("here")
                        .help("make the expression defined for every legal operand value, or narrow the immediate ranges"),
                );
                return None;
            }
        }
    }
    Some(expr)
}

fn check_timing(
    c: &mut Checker,
    ops: &Operands,
    props: &[ast::Prop],
    span: Span,
    inst: &str,
) -> Option<Timing> {
    let p = Props::new(
        c,
        props,
        format!("the timing of `{inst}`"),
        span,
        &[
            "unit",
            "slot",
            "slots",
            "occupancy",
            "latency",
            "accumulate",
        ],
    );
    let unit_prop = p.get("unit");
    let unit = match p.names(c, "unit").as_deref() {
        Some([u]) => match c.lookup(&u.name, u.span, &[Kind::Unit]) {
            Some(Sym::Unit(id)) => Some((id, u.span)),
            _ => None,
        },
        Some(_) => {
            let s = unit_prop.map_or(span, |q| q.value.span());
            c.error(
                Diagnostic::new(Code::WrongValue, s, "an instruction runs on one unit")
                    .label("one unit expected")
                    .help("write `unit = NAME;`"),
            );
            None
        }
        None => {
            if unit_prop.is_none() {
                c.error(
                    Diagnostic::new(
                        Code::MissingProperty,
                        span,
                        format!("the timing of `{inst}` needs property `unit`"),
                    )
                    .label("`unit` missing")
                    .help("add `unit = NAME;`"),
                );
            }
            None
        }
    };
    let slot_names = p.names(c, "slots").or_else(|| p.names(c, "slot"));
    let mut slots = Vec::new();
    let mut slots_ok = true;
    for s in slot_names.iter().flatten() {
        match c.lookup(&s.name, s.span, &[Kind::Slot]) {
            Some(Sym::Slot(id)) => slots.push((id, s.span)),
            _ => slots_ok = false,
        }
    }
    let occupancy = match p.get("occupancy") {
        None => Some(Expr::Int(1)),
        Some(q) => positive(c, ops, &q.value, Code::NonPositiveOccupancy, "occupancy"),
    };
    let latency = match p.get("latency") {
        None => {
            c.error(
                Diagnostic::new(
                    Code::MissingProperty,
                    span,
                    format!("the timing of `{inst}` needs property `latency`"),
                )
                .label("`latency` missing")
                .help("add `latency = <cycles>;` (an expression over operands and parameters)"),
            );
            None
        }
        Some(q) => positive(c, ops, &q.value, Code::NonPositiveLatency, "latency"),
    };
    let accumulate = match p.get("accumulate") {
        None => Some(None),
        Some(q) => positive(c, ops, &q.value, Code::NonPositiveLatency, "accumulate").map(Some),
    };
    let (unit, unit_span) = unit?;
    let mut slot_ids = Vec::new();
    for (s, sspan) in &slots {
        if c.slots[s.index()].units.contains(&unit) {
            slot_ids.push(*s);
        } else {
            let slot = &c.slots[s.index()];
            let feeds: Vec<&str> = slot
                .units
                .iter()
                .map(|u| c.units[u.index()].name.as_str())
                .collect();
            let msg = format!(
                "slot `{}` does not issue to unit `{}`",
                slot.name,
                c.units[unit.index()].name
            );
            let help = format!(
                "slot `{}` issues to {}; pick a slot that lists `{}` in its `units`",
                slot.name,
                feeds.join(", "),
                c.units[unit.index()].name
            );
            c.error(
                Diagnostic::new(Code::SlotUnit, *sspan, msg)
                    .label("wrong slot for this unit")
                    .with_secondary(unit_span, "the unit")
                    .help(help),
            );
        }
    }
    let some_slot_broken = !slots_ok || c.slots.iter().any(|s| c.broken.contains(&s.name));
    if slots.is_empty() && !some_slot_broken {
        slot_ids = (0..c.slots.len())
            .map(SlotId::from_index)
            .filter(|s| c.slots[s.index()].units.contains(&unit))
            .collect();
        if slot_ids.is_empty() && c.unreachable_units.insert(unit) {
            c.error(
                Diagnostic::new(
                    Code::SlotUnit,
                    unit_span,
                    format!("no slot issues to unit `{}`", c.units[unit.index()].name),
                )
                .label("unreachable unit")
                .help("list the unit in some slot's `units`"),
            );
        }
    }
    if slot_ids.is_empty() {
        return None;
    }
    Some(Timing {
        unit,
        slots: slot_ids,
        occupancy: occupancy?,
        latency: latency?,
        accumulate: accumulate?,
    })
}

fn positive(
    c: &mut Checker,
    ops: &Operands,
    v: &ast::Value,
    code: Code,
    what: &str,
) -> Option<Expr> {
    let ast::Value::Expr(e) = v else {
        c.error(
            Diagnostic::new(
                Code::WrongValue,
                v.span(),
                format!("`{what}` must be an expression"),
            )
            .label("not an expression")
            .help(format!("write `{what} = <cycles>;`")),
        );
        return None;
    };
    let positive = |v: eval::Num| match v {
        eval::Num::Int(i) => i > 0,
        eval::Num::Real(r) => r > 0.0,
    };
    sampled(c, ops, e, positive, |c, v, when| {
        let value = match v {
            eval::Num::Int(i) => i.to_string(),
            eval::Num::Real(r) => r.to_string(),
        };
        c.error(
            Diagnostic::new(code, e.span, format!("{what} is {value}{when}"))
                .label("must be at least 1 for every legal operand")
                .help(format!("{what} counts cycles: narrow the immediate ranges or add to the expression so it stays positive")),
        );
    })
}

fn check_energy(c: &mut Checker, ops: &Operands, v: &ast::Value) -> Option<Expr> {
    let ast::Value::Expr(e) = v else {
        c.error(
            Diagnostic::new(Code::WrongValue, v.span(), "`energy` must be an expression")
                .label("not an expression")
                .help("write `energy = <pJ>;`"),
        );
        return None;
    };
    sampled(
        c,
        ops,
        e,
        |v| v.as_f64() >= 0.0,
        |c, _, when| {
            c.error(
                Diagnostic::new(
                    Code::OutOfRange,
                    e.span,
                    format!("energy is negative{when}"),
                )
                .label("negative energy")
                .help("energy is picojoules per execution, 0 or more"),
            );
        },
    )
}

fn check_constraints(
    c: &mut Checker,
    ops: &Operands,
    cons: &[ast::Constraint],
) -> Option<Vec<Constraint>> {
    let mut out = Vec::new();
    let mut ok = true;
    for k in cons {
        let (Some(lhs), Some(rhs)) = (c.resolve(&ops.scope, &k.lhs), c.resolve(&ops.scope, &k.rhs))
        else {
            ok = false;
            continue;
        };
        let holds_somewhere = ops.grid().iter().any(|point| {
            let env = WithOperands { params: &c.param_values, operands: point };
            matches!((eval::eval(&lhs, &env), eval::eval(&rhs, &env)), (Ok(a), Ok(b)) if k.op.holds(a.as_f64(), b.as_f64()))
        });
        if !holds_somewhere {
            c.error(
                Diagnostic::new(Code::Unsatisfiable, k.span, "this constraint holds for no legal operand value")
                    .label("never true")
                    .help("the instruction could never be used: fix the constraint or the immediate ranges"),
            );
            ok = false;
        }
        out.push(Constraint { lhs, op: k.op, rhs });
    }
    ok.then_some(out)
}

fn check_encoding(
    c: &mut Checker,
    ops: &Operands,
    enc: &ast::Encoding,
    timing: Option<&Timing>,
    inst: &str,
) -> Option<Encoding> {
    let Sym::Format(format_id) = c.lookup(&enc.format.name, enc.format.span, &[Kind::Format])?
    else {
        return None;
    };
    let format = c.formats.get(format_id.index())?.clone();
    for s in timing.map(|t| t.slots.as_slice()).unwrap_or_default() {
        let slot = &c.slots[s.index()];
        if slot.width() != format.width && !c.broken.contains(&slot.name) {
            let msg = format!(
                "format `{}` is {} bits but slot `{}` is {} bits",
                format.name,
                format.width,
                slot.name,
                slot.width()
            );
            let slot_span = c.spans.get(crate::spans::SpanKey::Slot(*s));
            let mut d = Diagnostic::new(Code::FormatWidth, enc.format.span, msg)
                .label("width differs from the slot")
                .help(
                    "an instruction's format must be exactly as wide as each slot it issues from",
                );
            if let Some(sp) = slot_span {
                d = d.with_secondary(sp, format!("slot `{}`", slot.name));
            }
            c.error(d);
            return None;
        }
    }
    let mut fields: Vec<FieldValue> = Vec::new();
    let mut field_spans: Vec<Span> = Vec::new();
    let mut encoded_at: Vec<Option<Span>> = vec![None; ops.list.len()];
    let mut ok = true;
    // Set when a field could not be checked: then "operand not encoded" would be a follow-on error.
    let mut incomplete = false;
    for (name, value) in &enc.fields {
        let Some(fi) = format.fields.iter().position(|f| f.name == name.name) else {
            ok = false;
            incomplete = true;
            if !c
                .broken_fields
                .contains(&(format.name.clone(), name.name.clone()))
            {
                let names: Vec<&str> = format.fields.iter().map(|f| f.name.as_str()).collect();
                let help = match super::suggest(&name.name, names.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("the fields of `{}` are {}", format.name, names.join(", ")),
                };
                let msg = format!("format `{}` has no field `{}`", format.name, name.name);
                c.error(
                    Diagnostic::new(Code::Undefined, name.span, msg)
                        .label("no such field")
                        .help(help),
                );
            }
            continue;
        };
        if let Some(prev) = fields.iter().position(|f| f.field == fi) {
            c.error(
                Diagnostic::new(
                    Code::BadFieldValue,
                    name.span,
                    format!("field `{}` assigned twice", name.name),
                )
                .label("assigned again")
                .with_secondary(field_spans[prev], "first assigned here")
                .help("assign each field once"),
            );
            ok = false;
            continue;
        }
        let field = &format.fields[fi];
        let operand = match &value.kind {
            ExprKind::Name(n) => ops.list.iter().position(|o| &o.name == n).map(|i| (i, n)),
            _ => None,
        };
        let source = if let Some((oi, n)) = operand {
            if let Some(first) = encoded_at[oi] {
                c.error(
                    Diagnostic::new(
                        Code::BadFieldValue,
                        value.span,
                        format!("operand `{n}` is encoded in two fields"),
                    )
                    .label("encoded again")
                    .with_secondary(first, "first encoded here")
                    .help("put each operand in one field"),
                );
                ok = false;
            }
            encoded_at[oi] = Some(value.span);
            ok &= operand_fits(c, ops, oi, field, value.span);
            FieldSource::Operand(OperandId::from_index(oi))
        } else {
            if let ExprKind::Name(n) = &value.kind {
                if ops.scope.poisoned.contains(n) {
                    ok = false;
                    incomplete = true;
                    continue;
                }
                if !matches!(c.symbols.get(n), Some((Sym::Param(_), _))) {
                    let names: Vec<&str> = ops
                        .list
                        .iter()
                        .map(|o| o.name.as_str())
                        .filter(|n| !n.is_empty())
                        .collect();
                    let help = match super::suggest(n, names.iter().copied()) {
                        Some(s) => format!("did you mean the operand `{s}`?"),
                        None if names.is_empty() => {
                            "a field holds an operand or a constant".to_owned()
                        }
                        None => format!(
                            "a field holds an operand ({}) or a constant",
                            names.join(", ")
                        ),
                    };
                    let msg = format!("`{n}` is not an operand of `{inst}` or a parameter");
                    c.error(
                        Diagnostic::new(Code::BadFieldValue, value.span, msg)
                            .label("not an operand")
                            .help(help),
                    );
                    ok = false;
                    continue;
                }
            }
            let Some(q) = c.global_int(value, 0, &format!("field `{}`", field.name)) else {
                ok = false;
                continue;
            };
            let v = u64::try_from(q.value).unwrap_or(u64::MAX);
            if field.width() < 64 && v >> field.width() != 0 {
                let msg = format!(
                    "{v:#x} does not fit the {}-bit field `{}`",
                    field.width(),
                    field.name
                );
                let help = format!(
                    "the largest value of `{}` is {:#x}; widen the field or pick a smaller value",
                    field.name,
                    (1u64 << field.width()) - 1
                );
                c.error(
                    Diagnostic::new(Code::FieldOverflow, value.span, msg)
                        .label(format!("needs {} bits", 64 - v.leading_zeros()))
                        .help(help),
                );
                ok = false;
            }
            FieldSource::Const(v)
        };
        fields.push(FieldValue { field: fi, source });
        field_spans.push(name.span);
    }
    if !incomplete {
        for (i, at) in encoded_at.iter().enumerate() {
            if at.is_none() && !ops.list[i].name.is_empty() {
                c.error(
                    Diagnostic::new(
                        Code::UnencodedOperand,
                        ops.spans[i],
                        format!("operand `{}` is not encoded", ops.list[i].name),
                    )
                    .label("not in any field")
                    .with_secondary(enc.span, "the encoding")
                    .help(format!(
                        "assign it to a field of `{}`: `FIELD = {};`",
                        format.name, ops.list[i].name
                    )),
                );
                ok = false;
            }
        }
    }
    ok.then_some(Encoding {
        format: format_id,
        fields,
    })
}

fn bits_for_range(lo: i64, hi: i64) -> u32 {
    if lo >= 0 {
        64 - hi.unsigned_abs().leading_zeros()
    } else {
        let m = (-(lo + 1)).max(hi).unsigned_abs();
        65 - m.leading_zeros()
    }
}

fn bits(n: u32) -> String {
    if n == 1 {
        "1 bit".to_owned()
    } else {
        format!("{n} bits")
    }
}

fn operand_fits(c: &mut Checker, ops: &Operands, oi: usize, field: &FieldDef, span: Span) -> bool {
    let op = &ops.list[oi];
    let w = field.width();
    let problem: Option<(Code, String, String)> = match &op.kind {
        OperandKind::Imm { lo, hi } => {
            let need = bits_for_range(*lo, *hi);
            (need > w).then(|| {
                let msg = format!(
                    "immediate `{}` ranges over {lo}..={hi}, which needs {}, but field `{}` has {}",
                    op.name,
                    bits(need),
                    field.name,
                    bits(w)
                );
                (
                    Code::ImmediateTooWide,
                    msg,
                    format!("narrow the range to fit {} or widen the field", bits(w)),
                )
            })
        }
        OperandKind::ImmReal { dtype } => {
            let need = u32::try_from(dtype.bytes() * 8).unwrap_or(64);
            (need > w).then(|| {
                let msg = format!(
                    "{} immediate `{}` needs {}, but field `{}` has {}",
                    dtype.name(),
                    op.name,
                    bits(need),
                    field.name,
                    bits(w)
                );
                (
                    Code::ImmediateTooWide,
                    msg,
                    format!("widen the field to {}", bits(need)),
                )
            })
        }
        OperandKind::Reg { file, .. } => {
            let rf = &c.regfiles[file.index()];
            let count = rf.count.value;
            (w < 63 && count > 1i64 << w).then(|| {
                let msg = format!("register file `{}` has {count} registers, but the {}-bit field `{}` names only {}", rf.name, w, field.name, 1i64 << w);
                let need = 64 - (count - 1).leading_zeros();
                (Code::RegisterReach, msg, format!("widen the field to {} or use fewer registers", bits(need)))
            })
        }
        OperandKind::Sem { bank } => {
            let b = &c.semaphores[bank.index()];
            let count = b.count.value;
            (w < 63 && count > 1i64 << w).then(|| {
                let msg = format!("semaphore bank `{}` has {count} semaphores, but the {}-bit field `{}` names only {}", b.name, w, field.name, 1i64 << w);
                let need = 64 - (count - 1).leading_zeros();
                (Code::RegisterReach, msg, format!("widen the field to {} or use fewer semaphores", bits(need)))
            })
        }
        OperandKind::Mem { mem, align, .. } => {
            let m = &c.memories[mem.index()];
            let reach = if w >= 62 {
                u128::MAX
            } else {
                (1u128 << w) * u128::from(*align)
            };
            let size = u128::try_from(m.size.value).unwrap_or(0);
            (size > reach).then(|| {
                let msg = format!(
                    "memory `{}` has {} bytes, but field `{}` ({} of {align}-byte units) reaches only {reach} bytes",
                    m.name,
                    m.size.value,
                    field.name,
                    bits(w)
                );
                (Code::AddressReach, msg, "widen the address field, raise the operand's `align`, or shrink the memory".to_owned())
            })
        }
    };
    match problem {
        None => true,
        Some((code, msg, help)) => {
            let d = Diagnostic::new(code, span, msg)
                .label("does not fit")
                .with_secondary(ops.spans[oi], format!("`{}` declared here", op.name))
                .help(help);
            c.error(d);
            false
        }
    }
}
