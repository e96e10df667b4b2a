//! The ISA reference manual: Markdown and HTML, rendered with handlebars.
//!
//! The manual is laid out by two templates, `templates/manual.md.hbs` and
//! `templates/manual.html.hbs`, embedded with `include_str!` and rendered in
//! strict mode (a missing field is an error, never an empty string). Neither
//! template computes anything: this module builds a `Manual` view — plain
//! serde data, in model order, every text already written out — and the
//! templates only place it. Both formats render the same view, so they always
//! say the same things.
//!
//! [`expr_text`] and [`semantics_text`] write model expressions and
//! instruction semantics back as an architect would type them; other
//! generators use them for comments.

use crate::Ctx;
use handlebars::Handlebars;
use isa_specs::eval::{self, Num};
use isa_specs::model::{
    Access, Action, Affine, AssignOp, BinOp, Expr, FieldSource, Format, Hazards, InstId,
    Instruction, IntQ, MemKind, Memory, Operand, OperandId, OperandKind, RealQ, ReduceOp, RegFile,
    SemExpr, Slot, Stmt,
};
use isa_specs::{Machine, SpanKey};
use serde::Serialize;
use std::fmt::Write as _;

const MARKDOWN_TEMPLATE: &str = include_str!("../templates/manual.md.hbs");
const HTML_TEMPLATE: &str = include_str!("../templates/manual.html.hbs");

/// Errors rendering the manual (a template bug, always a bug in this crate).
#[derive(Debug)]
pub struct DocError(pub String);

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot render the ISA manual (a bug in codegen-gen): {}",
            self.0
        )
    }
}

impl std::error::Error for DocError {}

/// The manual as GitHub-flavoured Markdown.
pub fn manual_markdown(ctx: &Ctx) -> Result<String, DocError> {
    render(MARKDOWN_TEMPLATE, markdown_escape, &manual(ctx))
}

/// The manual as one self-contained HTML page.
pub fn manual_html(ctx: &Ctx) -> Result<String, DocError> {
    render(HTML_TEMPLATE, html_escape, &manual(ctx))
}

fn render(template: &str, escape: fn(&str) -> String, view: &Manual) -> Result<String, DocError> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(escape);
    hb.register_template_string("manual", template)
        .map_err(|e| DocError(e.to_string()))?;
    hb.render("manual", view)
        .map_err(|e| DocError(e.to_string()))
}

/// Keeps text inside one cell of a GitHub table.
fn markdown_escape(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

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
fn binop_prec(op: BinOp) -> u8 {
    match op {
        BinOp::Add | BinOp::Sub => 1,
        BinOp::Mul | BinOp::Div | BinOp::Rem => 2,
    }
}

fn expr_prec(e: &Expr) -> u8 {
    match e {
        Expr::Binary(op, ..) => binop_prec(*op),
        Expr::Neg(_) => 3,
        Expr::Int(v) if *v < 0 => 3,
        Expr::Real(v) if v.is_sign_negative() => 3,
        _ => 4,
    }
}

/// A real literal that reads back as a real (`20.0`, `0.55`, `2e-3`).
fn real_literal(v: f64) -> String {
    format!("{v:?}")
}

fn push_group(out: &mut String, paren: bool, body: impl FnOnce(&mut String)) {
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
struct Names<'a> {
    m: &'a Machine,
    inst: Option<&'a Instruction>,
}

impl Names<'_> {
    fn operand(&self, id: OperandId) -> String {
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

    fn stmt(&self, s: &Stmt) -> String {
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

    /// `2*i + k - 1`
    fn affine(&self, a: &Affine) -> String {
        let mut out = String::new();
        for (n, &(ix, coeff)) in a.terms.iter().enumerate() {
            push_signed(&mut out, n == 0, coeff);
            if coeff.unsigned_abs() != 1 {
                let _ = write!(out, "{}*", coeff.unsigned_abs());
            }
            out.push_str(&self.index(ix));
        }
        if a.terms.is_empty() {
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
fn push_signed(out: &mut String, first: bool, v: i64) {
    match (first, v < 0) {
        (true, true) => out.push('-'),
        (true, false) => {}
        (false, true) => out.push_str(" - "),
        (false, false) => out.push_str(" + "),
    }
}

fn sem_prec(e: &SemExpr) -> u8 {
    match e {
        SemExpr::Binary(op, ..) => binop_prec(*op),
        SemExpr::Neg(_) => 3,
        SemExpr::Const(c) => expr_prec(c),
        // Lower than a product: `-(sum(k) x)`, `(sum(k) x) * y`.
        SemExpr::Reduce(..) => 1,
        SemExpr::Access(_) | SemExpr::Call(..) | SemExpr::Cast(..) => 4,
    }
}

// ---------------------------------------------------------------------------
// Numbers for people

/// A real with at most six significant digits, without trailing zeros.
fn fmt_real(v: f64) -> String {
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
fn fmt_bytes(v: i64) -> String {
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

fn is_literal(e: &Expr) -> bool {
    matches!(e, Expr::Int(_) | Expr::Real(_))
}

fn param_values(m: &Machine) -> Vec<i64> {
    m.params.iter().map(|p| p.value).collect()
}

/// The value of an expression over parameters only, if it has one.
fn eval_params(m: &Machine, e: &Expr) -> Option<String> {
    let values = param_values(m);
    match eval::eval(e, &eval::Params(&values)).ok()? {
        Num::Int(v) => Some(v.to_string()),
        Num::Real(v) => Some(fmt_real(v)),
    }
}

// ---------------------------------------------------------------------------
// The view the templates render

/// A machine quantity: its value, and the expression it follows from when
/// that is more than a literal.
#[derive(Serialize)]
struct Quantity {
    value: String,
    expr: String,
}

impl Quantity {
    fn plain(value: impl Into<String>) -> Quantity {
        Quantity {
            value: value.into(),
            expr: String::new(),
        }
    }

    fn new(m: &Machine, value: String, e: &Expr) -> Quantity {
        let expr = if is_literal(e) {
            String::new()
        } else {
            expr_text(m, None, e)
        };
        Quantity { value, expr }
    }

    fn int(m: &Machine, q: &IntQ) -> Quantity {
        Quantity::new(m, q.value.to_string(), &q.expr)
    }

    fn bytes(m: &Machine, q: &IntQ) -> Quantity {
        Quantity::new(m, fmt_bytes(q.value), &q.expr)
    }

    fn real(m: &Machine, q: &RealQ) -> Quantity {
        Quantity::new(m, fmt_real(q.value), &q.expr)
    }
}

/// An instruction's expression (over operands and parameters), with its value
/// at the current parameters when it depends on no operand.
#[derive(Serialize)]
struct Formula {
    text: String,
    value: String,
    /// `cycle`, `cycles` or `pJ`.
    unit: String,
}

impl Formula {
    fn new(m: &Machine, inst: &Instruction, e: &Expr, unit: &str) -> Formula {
        let text = expr_text(m, Some(inst), e);
        let value = if is_literal(e) {
            None
        } else {
            eval_params(m, e)
        };
        Formula {
            text,
            value: value.unwrap_or_default(),
            unit: unit.to_owned(),
        }
    }

    fn cycles(m: &Machine, inst: &Instruction, e: &Expr) -> Formula {
        let one = eval_params(m, e).is_some_and(|v| v == "1");
        Formula::new(m, inst, e, if one { "cycle" } else { "cycles" })
    }
}

/// A name and the anchor of its definition.
#[derive(Serialize)]
struct Link {
    name: String,
    anchor: String,
}

impl Link {
    fn new(prefix: &str, name: &str) -> Link {
        Link {
            name: name.to_owned(),
            anchor: format!("{prefix}-{name}"),
        }
    }
}

/// A piece of free text: plain, or a `code` span (written in backquotes).
#[derive(Serialize)]
struct Segment {
    text: String,
    code: bool,
}

fn segments(text: &str) -> Vec<Segment> {
    text.split('`')
        .enumerate()
        .filter(|(_, t)| !t.is_empty())
        .map(|(i, t)| Segment {
            text: t.to_owned(),
            code: i % 2 == 1,
        })
        .collect()
}

/// A label and a value, for key/value tables.
#[derive(Serialize)]
struct Row {
    label: String,
    value: Quantity,
}

/// The whole manual.
#[derive(Serialize)]
struct Manual {
    name: String,
    description: String,
    spec_path: String,
    cite: String,
    summary: Vec<Row>,
    params: Vec<ParamView>,
    memories: Vec<Link>,
    memory_rows: Vec<MemoryRow>,
    regfiles: Vec<RegFileView>,
    units: Vec<UnitView>,
    slots: Vec<SlotView>,
    bundle: Diagram,
    semaphores: Vec<SemaphoreView>,
    formats: Vec<FormatView>,
    index: Vec<IndexEntry>,
    groups: Vec<Group>,
}

fn manual(ctx: &Ctx) -> Manual {
    let m = ctx.machine;
    Manual {
        name: m.name.clone(),
        description: m.description.clone(),
        spec_path: ctx.spec_path.to_owned(),
        cite: ctx.cite(SpanKey::Machine),
        summary: summary(m),
        params: params(m),
        memories: m
            .memories
            .iter()
            .map(|x| Link::new("mem", &x.name))
            .collect(),
        memory_rows: memory_rows(m),
        regfiles: m.regfiles.iter().map(|r| regfile(m, r)).collect(),
        units: units(m),
        slots: m.slots.iter().map(|s| slot(m, s)).collect(),
        bundle: bundle_diagram(m),
        semaphores: semaphores(m),
        formats: formats(ctx),
        index: index(m),
        groups: groups(ctx),
    }
}

// --- summary ---------------------------------------------------------------

fn summary(m: &Machine) -> Vec<Row> {
    let row = |label: &str, value: Quantity| Row {
        label: label.to_owned(),
        value,
    };
    let mhz = m.clock_mhz.value;
    let peak = m.peak_macs_per_cycle();
    let bw = m.off_chip_bandwidth();
    vec![
        row(
            "clock",
            Quantity::new(m, format!("{mhz} MHz"), &m.clock_mhz.expr),
        ),
        row(
            "bundle word",
            Quantity::plain(format!(
                "{} bits, {}",
                m.word_bits,
                count(m.slots.len(), "issue slot")
            )),
        ),
        row("hazards", Quantity::plain(hazards_text(m.hazards))),
        row(
            "peak MACs/cycle",
            Quantity::plain(format!(
                "{peak} ({})",
                fmt_rate(per_second(peak, mhz), "MAC/s")
            )),
        ),
        row(
            "on-chip memory",
            Quantity::plain(fmt_bytes(m.on_chip_bytes())),
        ),
        row(
            "off-chip bandwidth",
            Quantity::plain(format!(
                "{bw} B/cycle ({} GB/s)",
                fmt_real(per_second(bw, mhz))
            )),
        ),
        row(
            "area (memories, register files, units)",
            Quantity::plain(format!("{} mm²", fmt_real(total_area(m)))),
        ),
        row(
            "static power (memories, units)",
            Quantity::plain(format!("{} mW", fmt_real(total_static_power(m)))),
        ),
        row(
            "instructions",
            Quantity::plain(m.instructions.len().to_string()),
        ),
    ]
}

/// `1 issue slot`, `7 issue slots`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `8 GMAC/s`, `68.8128 TMAC/s`, from giga-things per second.
fn fmt_rate(giga: f64, unit: &str) -> String {
    if giga >= 1000.0 {
        format!("{} T{unit}", fmt_real(giga / 1000.0))
    } else {
        format!("{} G{unit}", fmt_real(giga))
    }
}

/// Giga-things per second from things per cycle at `mhz`.
fn per_second(per_cycle: i64, mhz: i64) -> f64 {
    per_cycle as f64 * mhz as f64 / 1000.0
}

fn hazards_text(h: Hazards) -> String {
    match h {
        Hazards::Interlocked => {
            "interlocked: the hardware stalls until operands are ready".to_owned()
        }
        Hazards::Exposed => {
            "exposed: the hardware does not stall; code must respect every latency".to_owned()
        }
    }
}

fn total_area(m: &Machine) -> f64 {
    let mems: f64 = m.memories.iter().map(|x| x.area.value).sum();
    let regs: f64 = m.regfiles.iter().map(|r| r.area.value).sum();
    let units: f64 = m
        .units
        .iter()
        .map(|u| u.area.value * u.count.value as f64)
        .sum();
    mems + regs + units
}

fn total_static_power(m: &Machine) -> f64 {
    let mems: f64 = m.memories.iter().map(|x| x.static_power.value).sum();
    let units: f64 = m
        .units
        .iter()
        .map(|u| u.static_power.value * u.count.value as f64)
        .sum();
    mems + units
}

// --- parameters ------------------------------------------------------------

#[derive(Serialize)]
struct ParamView {
    name: String,
    anchor: String,
    value: String,
    default: String,
    overridden: bool,
}

fn params(m: &Machine) -> Vec<ParamView> {
    m.params
        .iter()
        .map(|p| {
            let default_value = eval_params(m, &p.default);
            ParamView {
                name: p.name.clone(),
                anchor: format!("param-{}", p.name),
                value: p.value.to_string(),
                default: expr_text(m, None, &p.default),
                overridden: default_value.is_some_and(|d| d != p.value.to_string()),
            }
        })
        .collect()
}

// --- memories --------------------------------------------------------------

/// One property of every memory (memories are columns).
#[derive(Serialize)]
struct MemoryRow {
    label: String,
    cells: Vec<Quantity>,
}

fn memory_rows(m: &Machine) -> Vec<MemoryRow> {
    type Cell = fn(&Machine, &Memory) -> Quantity;
    let rows: [(&str, Cell); 11] = [
        ("kind", |_, x| Quantity::plain(mem_kind_text(x.kind))),
        ("size", |m, x| Quantity::bytes(m, &x.size)),
        ("banks", |m, x| Quantity::int(m, &x.banks)),
        ("bandwidth, B/cycle", |m, x| Quantity::int(m, &x.bandwidth)),
        ("latency, cycles", |m, x| Quantity::int(m, &x.latency)),
        ("ports", |m, x| Quantity::int(m, &x.ports)),
        ("read energy, pJ/B", |m, x| {
            Quantity::real(m, &x.read_energy)
        }),
        ("write energy, pJ/B", |m, x| {
            Quantity::real(m, &x.write_energy)
        }),
        ("area, mm²", |m, x| Quantity::real(m, &x.area)),
        ("static power, mW", |m, x| {
            Quantity::real(m, &x.static_power)
        }),
        ("compute units", |m, x| Quantity::plain(compute_units(m, x))),
    ];
    rows.iter()
        .map(|(label, cell)| MemoryRow {
            label: (*label).to_owned(),
            cells: m.memories.iter().map(|x| cell(m, x)).collect(),
        })
        .collect()
}

fn mem_kind_text(k: MemKind) -> String {
    let place = if k.off_chip() { "off chip" } else { "on chip" };
    format!("{} ({place})", k.name())
}

fn compute_units(m: &Machine, x: &Memory) -> String {
    if x.compute.is_empty() {
        return "—".to_owned();
    }
    let names: Vec<&str> = x
        .compute
        .iter()
        .map(|u| m.units[u.index()].name.as_str())
        .collect();
    names.join(", ")
}

// --- register files --------------------------------------------------------

#[derive(Serialize)]
struct RegFileView {
    name: String,
    anchor: String,
    count: Quantity,
    dtype: String,
    shape: Quantity,
    bytes: String,
    area: Quantity,
    energy: Quantity,
}

fn regfile(m: &Machine, r: &RegFile) -> RegFileView {
    let elems: i64 = r.shape.iter().map(|d| d.value).product();
    RegFileView {
        name: r.name.clone(),
        anchor: format!("regfile-{}", r.name),
        count: Quantity::int(m, &r.count),
        dtype: r.dtype.name().to_owned(),
        shape: shape_quantity(m, &r.shape),
        bytes: fmt_bytes(elems.saturating_mul(r.dtype.bytes() as i64)),
        area: Quantity::real(m, &r.area),
        energy: Quantity::real(m, &r.energy),
    }
}

fn shape_quantity(m: &Machine, shape: &[IntQ]) -> Quantity {
    if shape.is_empty() {
        return Quantity::plain("scalar");
    }
    let values: Vec<String> = shape.iter().map(|d| d.value.to_string()).collect();
    let value = format!("[{}]", values.join(", "));
    if shape.iter().all(|d| is_literal(&d.expr)) {
        return Quantity::plain(value);
    }
    let exprs: Vec<Expr> = shape.iter().map(|d| d.expr.clone()).collect();
    Quantity {
        value,
        expr: shape_text(m, None, &exprs),
    }
}

fn shape_text(m: &Machine, inst: Option<&Instruction>, shape: &[Expr]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| expr_text(m, inst, d)).collect();
    format!("[{}]", dims.join(", "))
}

// --- units -----------------------------------------------------------------

#[derive(Serialize)]
struct UnitView {
    name: String,
    anchor: String,
    count: Quantity,
    pipelined: String,
    asynchronous: String,
    macs: Quantity,
    area: Quantity,
    static_power: Quantity,
    slots: Vec<Link>,
    instructions: usize,
}

fn units(m: &Machine) -> Vec<UnitView> {
    m.units
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let id = isa_specs::model::UnitId::from_index(i);
            UnitView {
                name: u.name.clone(),
                anchor: format!("unit-{}", u.name),
                count: Quantity::int(m, &u.count),
                pipelined: yes_no(u.pipelined),
                asynchronous: yes_no(u.asynchronous),
                macs: Quantity::int(m, &u.macs_per_cycle),
                area: Quantity::real(m, &u.area),
                static_power: Quantity::real(m, &u.static_power),
                slots: unit_slots(m, i),
                instructions: m
                    .instructions
                    .iter()
                    .filter(|x| x.timing.unit == id)
                    .count(),
            }
        })
        .collect()
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

// --- slots and the bundle --------------------------------------------------

#[derive(Serialize)]
struct SlotView {
    name: String,
    anchor: String,
    bits: String,
    width: u32,
    units: Vec<Link>,
}

fn slot(m: &Machine, s: &Slot) -> SlotView {
    SlotView {
        name: s.name.clone(),
        anchor: format!("slot-{}", s.name),
        bits: bit_range(s.hi, s.lo),
        width: s.width(),
        units: s
            .units
            .iter()
            .map(|u| Link::new("unit", &m.units[u.index()].name))
            .collect(),
    }
}

fn bit_range(hi: u32, lo: u32) -> String {
    if hi == lo {
        hi.to_string()
    } else {
        format!("{hi}:{lo}")
    }
}

/// A bit-layout diagram: rows of cells, each cell spanning its bits, most
/// significant bit first. The first row holds the bit ranges.
///
/// An HTML table lays it out on `columns` columns of `width / columns` bits
/// each (the largest unit every cell is a multiple of), which keeps the table
/// small and every `colspan` within what browsers honour.
#[derive(Serialize)]
struct Diagram {
    width: u32,
    columns: u32,
    rows: Vec<DiagramRow>,
}

#[derive(Serialize)]
struct DiagramRow {
    label: String,
    cells: Vec<DiagramCell>,
}

#[derive(Serialize)]
struct DiagramCell {
    text: String,
    /// Bits covered.
    span: u32,
    /// Table columns covered.
    columns: u32,
    code: bool,
    /// `field`, `opcode`, `operand` or `unused` (for styling).
    class: String,
}

/// One span of a word: its bits, one text per row (with whether it is code), a class.
struct Piece {
    hi: u32,
    lo: u32,
    texts: Vec<(String, bool)>,
    class: &'static str,
}

/// Lays pieces (in any order) over a word of `width` bits; bits no piece
/// covers get `fill`, one text per row.
fn diagram(width: u32, labels: &[&str], fill: &[(&str, bool)], mut pieces: Vec<Piece>) -> Diagram {
    pieces.sort_by_key(|p| std::cmp::Reverse(p.hi));
    let mut filled = Vec::new();
    let mut next = width; // bits at and above `next` are laid out
    for p in pieces {
        if p.hi + 1 < next {
            filled.push(gap(next - 1, p.hi + 1, fill));
        }
        next = p.lo;
        filled.push(p);
    }
    if next > 0 {
        filled.push(gap(next - 1, 0, fill));
    }
    let unit = filled.iter().fold(0, |g, p| gcd(g, p.hi - p.lo + 1)).max(1);
    let bits_row = DiagramRow {
        label: "bits".to_owned(),
        cells: filled
            .iter()
            .map(|p| cell(bit_range(p.hi, p.lo), false, p, unit))
            .collect(),
    };
    let mut rows = vec![bits_row];
    for (r, label) in labels.iter().enumerate() {
        let cells = filled
            .iter()
            .map(|p| cell(p.texts[r].0.clone(), p.texts[r].1, p, unit))
            .collect();
        rows.push(DiagramRow {
            label: (*label).to_owned(),
            cells,
        });
    }
    Diagram {
        width,
        columns: width / unit,
        rows,
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn gap(hi: u32, lo: u32, fill: &[(&str, bool)]) -> Piece {
    let texts = fill
        .iter()
        .map(|(t, code)| ((*t).to_owned(), *code))
        .collect();
    Piece {
        hi,
        lo,
        texts,
        class: "unused",
    }
}

fn cell(text: String, code: bool, p: &Piece, unit: u32) -> DiagramCell {
    let span = p.hi - p.lo + 1;
    DiagramCell {
        text,
        span,
        columns: span / unit,
        code,
        class: p.class.to_owned(),
    }
}

fn bundle_diagram(m: &Machine) -> Diagram {
    let pieces = m
        .slots
        .iter()
        .map(|s| {
            let units: Vec<&str> = s
                .units
                .iter()
                .map(|u| m.units[u.index()].name.as_str())
                .collect();
            Piece {
                hi: s.hi,
                lo: s.lo,
                texts: vec![(s.name.clone(), true), (units.join(", "), false)],
                class: "field",
            }
        })
        .collect();
    diagram(
        m.word_bits,
        &["slot", "units"],
        &[("unused", false), (NONE, false)],
        pieces,
    )
}

// --- semaphores ------------------------------------------------------------

#[derive(Serialize)]
struct SemaphoreView {
    name: String,
    anchor: String,
    count: Quantity,
    max: Quantity,
}

fn semaphores(m: &Machine) -> Vec<SemaphoreView> {
    m.semaphores
        .iter()
        .map(|s| SemaphoreView {
            name: s.name.clone(),
            anchor: format!("sem-{}", s.name),
            count: Quantity::int(m, &s.count),
            max: Quantity::int(m, &s.max),
        })
        .collect()
}

// --- formats ---------------------------------------------------------------

#[derive(Serialize)]
struct FormatView {
    name: String,
    anchor: String,
    width: u32,
    fields: Vec<FieldView>,
    diagram: Diagram,
    used_by: Vec<Link>,
    cite: String,
}

#[derive(Serialize)]
struct FieldView {
    name: String,
    bits: String,
    width: u32,
}

fn formats(ctx: &Ctx) -> Vec<FormatView> {
    let m = ctx.machine;
    m.formats
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let id = isa_specs::model::FormatId::from_index(i);
            FormatView {
                name: f.name.clone(),
                anchor: format!("format-{}", f.name),
                width: f.width,
                fields: f
                    .fields
                    .iter()
                    .map(|x| FieldView {
                        name: x.name.clone(),
                        bits: bit_range(x.hi, x.lo),
                        width: x.width(),
                    })
                    .collect(),
                diagram: format_diagram(f),
                used_by: m
                    .instructions
                    .iter()
                    .filter(|x| x.encoding.format == id)
                    .map(|x| Link::new("inst", &x.name))
                    .collect(),
                cite: ctx.cite(SpanKey::Format(id)),
            }
        })
        .collect()
}

fn format_diagram(f: &Format) -> Diagram {
    let pieces = f
        .fields
        .iter()
        .map(|x| Piece {
            hi: x.hi,
            lo: x.lo,
            texts: vec![(x.name.clone(), false)],
            class: "field",
        })
        .collect();
    diagram(f.width, &["field"], &[("unused", false)], pieces)
}

// --- instruction index and groups ------------------------------------------

#[derive(Serialize)]
struct IndexEntry {
    name: String,
    anchor: String,
    unit: Link,
    slots: Vec<Link>,
    latency: String,
    occupancy: String,
    doc: String,
}

fn index(m: &Machine) -> Vec<IndexEntry> {
    by_unit(m)
        .into_iter()
        .flat_map(|(_, insts)| insts)
        .map(|inst| IndexEntry {
            name: inst.name.clone(),
            anchor: format!("inst-{}", inst.name),
            unit: Link::new("unit", &m.units[inst.timing.unit.index()].name),
            slots: slot_links(m, inst),
            latency: expr_text(m, Some(inst), &inst.timing.latency),
            occupancy: expr_text(m, Some(inst), &inst.timing.occupancy),
            doc: inst.doc.clone(),
        })
        .collect()
}

/// Instructions grouped by unit, units in model order, instructions in model order.
fn by_unit(m: &Machine) -> Vec<(usize, Vec<&Instruction>)> {
    (0..m.units.len())
        .map(|u| {
            (
                u,
                m.instructions
                    .iter()
                    .filter(|x| x.timing.unit.index() == u)
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, insts)| !insts.is_empty())
        .collect()
}

fn slot_links(m: &Machine, inst: &Instruction) -> Vec<Link> {
    inst.timing
        .slots
        .iter()
        .map(|s| Link::new("slot", &m.slots[s.index()].name))
        .collect()
}

#[derive(Serialize)]
struct Group {
    unit: Link,
    anchor: String,
    asynchronous: bool,
    /// `4 copies, pipelined, 16384 MACs/cycle per copy`
    facts: String,
    slots: Vec<Link>,
    insts: Vec<InstView>,
}

fn groups(ctx: &Ctx) -> Vec<Group> {
    let m = ctx.machine;
    by_unit(m)
        .into_iter()
        .map(|(u, insts)| Group {
            unit: Link::new("unit", &m.units[u].name),
            anchor: format!("insts-{}", m.units[u].name),
            asynchronous: m.units[u].asynchronous,
            facts: unit_facts(m, u),
            slots: unit_slots(m, u),
            insts: insts.into_iter().map(|i| inst_view(ctx, i)).collect(),
        })
        .collect()
}

fn unit_facts(m: &Machine, u: usize) -> String {
    let unit = &m.units[u];
    let copies = unit.count.value;
    let mut facts = vec![if copies == 1 {
        "1 copy".to_owned()
    } else {
        format!("{copies} copies")
    }];
    facts.push(
        if unit.pipelined {
            "pipelined"
        } else {
            "not pipelined"
        }
        .to_owned(),
    );
    if unit.macs_per_cycle.value > 0 {
        facts.push(format!("{} MACs/cycle per copy", unit.macs_per_cycle.value));
    }
    facts.join(", ")
}

fn unit_slots(m: &Machine, u: usize) -> Vec<Link> {
    let id = isa_specs::model::UnitId::from_index(u);
    m.slots
        .iter()
        .filter(|s| s.units.contains(&id))
        .map(|s| Link::new("slot", &s.name))
        .collect()
}

// --- one instruction -------------------------------------------------------

#[derive(Serialize)]
struct InstView {
    name: String,
    anchor: String,
    doc: String,
    doc_segments: Vec<Segment>,
    syntax: String,
    operands: Vec<OperandView>,
    semantics: Vec<String>,
    indices: Vec<IndexView>,
    format: Link,
    format_width: u32,
    encoding: Diagram,
    unit: Link,
    asynchronous: bool,
    pipelined: bool,
    slots: Vec<Link>,
    occupancy: Formula,
    latency: Formula,
    energy: Formula,
    constraints: Vec<String>,
    cite: String,
}

fn inst_view(ctx: &Ctx, inst: &Instruction) -> InstView {
    let m = ctx.machine;
    let id = inst_id(m, inst);
    let unit = &m.units[inst.timing.unit.index()];
    let format = &m.formats[inst.encoding.format.index()];
    InstView {
        name: inst.name.clone(),
        anchor: format!("inst-{}", inst.name),
        doc: inst.doc.clone(),
        doc_segments: segments(&inst.doc),
        syntax: syntax(m, inst),
        operands: inst
            .operands
            .iter()
            .map(|o| operand_view(m, inst, o))
            .collect(),
        semantics: inst
            .semantics
            .stmts
            .iter()
            .map(|s| {
                Names {
                    m,
                    inst: Some(inst),
                }
                .stmt(s)
            })
            .collect(),
        indices: indices(m, inst),
        format: Link::new("format", &format.name),
        format_width: format.width,
        encoding: encoding_diagram(m, inst, format),
        unit: Link::new("unit", &unit.name),
        asynchronous: unit.asynchronous,
        pipelined: unit.pipelined,
        slots: slot_links(m, inst),
        occupancy: Formula::cycles(m, inst, &inst.timing.occupancy),
        latency: Formula::cycles(m, inst, &inst.timing.latency),
        energy: Formula::new(m, inst, &inst.energy, "pJ"),
        constraints: constraints(m, inst),
        cite: ctx.cite(SpanKey::Inst(id)),
    }
}

fn inst_id(m: &Machine, inst: &Instruction) -> InstId {
    let i = m
        .instructions
        .iter()
        .position(|x| std::ptr::eq(x, inst))
        .unwrap_or(usize::MAX);
    InstId::from_index(i)
}

/// `mma acc<d>, @<a>, @<b>`: the mnemonic, then the operands in declaration order.
fn syntax(m: &Machine, inst: &Instruction) -> String {
    let ops: Vec<String> = inst.operands.iter().map(|o| operand_syntax(m, o)).collect();
    if ops.is_empty() {
        return inst.name.clone();
    }
    format!("{} {}", inst.name, ops.join(", "))
}

fn operand_syntax(m: &Machine, o: &Operand) -> String {
    match &o.kind {
        OperandKind::Reg { file, .. } => format!("{}<{}>", m.regfiles[file.index()].name, o.name),
        OperandKind::Mem { .. } => format!("@<{}>", o.name),
        OperandKind::Imm { .. } | OperandKind::ImmReal { .. } => format!("<{}>", o.name),
        OperandKind::Sem { bank } => format!("{}<{}>", m.semaphores[bank.index()].name, o.name),
    }
}

#[derive(Serialize)]
struct OperandView {
    name: String,
    kind: String,
    place: Vec<Link>,
    element: String,
    /// `[m, n]` (`[]` for a scalar); empty if the operand has no shape.
    shape: String,
    /// The register's whole shape when the operand is a smaller view of it.
    view_of: String,
    align: String,
    /// `[ld, 1]`; empty when dense or not an address.
    stride: String,
    values: String,
}

const NONE: &str = "—";

fn operand_view(m: &Machine, inst: &Instruction, o: &Operand) -> OperandView {
    let mut v = OperandView {
        name: o.name.clone(),
        kind: String::new(),
        place: Vec::new(),
        element: NONE.to_owned(),
        shape: String::new(),
        view_of: String::new(),
        align: NONE.to_owned(),
        stride: String::new(),
        values: NONE.to_owned(),
    };
    match &o.kind {
        OperandKind::Reg { file, shape } => {
            let rf = &m.regfiles[file.index()];
            v.kind = "register".to_owned();
            v.place = vec![Link::new("regfile", &rf.name)];
            v.element = rf.dtype.name().to_owned();
            v.shape = shape_text(m, Some(inst), shape);
            v.view_of = register_view_of(m, rf, shape);
            v.values = index_range(&rf.name, rf.count.value);
        }
        OperandKind::Mem {
            mem,
            shape,
            dtype,
            align,
            stride,
        } => {
            v.kind = "address".to_owned();
            v.place = vec![Link::new("mem", &m.memories[mem.index()].name)];
            v.element = dtype.name().to_owned();
            v.shape = shape_text(m, Some(inst), shape);
            v.align = format!("{align} B");
            v.stride = stride
                .as_ref()
                .map_or_else(String::new, |s| shape_text(m, Some(inst), s));
        }
        OperandKind::Imm { lo, hi } => {
            v.kind = "immediate".to_owned();
            v.element = "integer".to_owned();
            v.values = format!("{lo} … {hi}");
        }
        OperandKind::ImmReal { dtype } => {
            v.kind = "immediate".to_owned();
            v.element = dtype.name().to_owned();
            v.values = format!("any {}", dtype.name());
        }
        OperandKind::Sem { bank } => {
            let b = &m.semaphores[bank.index()];
            v.kind = "semaphore".to_owned();
            v.place = vec![Link::new("sem", &b.name)];
            v.values = index_range(&b.name, b.count.value);
        }
    }
    v
}

/// The register's whole shape, if the operand accesses less of it.
fn register_view_of(m: &Machine, rf: &RegFile, shape: &[Expr]) -> String {
    let full: Vec<Expr> = rf.shape.iter().map(|d| d.expr.clone()).collect();
    if full == shape {
        String::new()
    } else {
        shape_text(m, None, &full)
    }
}

fn index_range(prefix: &str, count: i64) -> String {
    match count {
        c if c <= 0 => NONE.to_owned(),
        1 => format!("{prefix}0"),
        c => format!("{prefix}0 … {prefix}{}", c - 1),
    }
}

#[derive(Serialize)]
struct IndexView {
    name: String,
    extent: String,
    reduced: String,
}

/// Each index with its range and, if it is reduced, how.
fn indices(m: &Machine, inst: &Instruction) -> Vec<IndexView> {
    let sem = &inst.semantics;
    let mut reduced: Vec<Option<&'static str>> = vec![None; sem.indices.len()];
    for s in &sem.stmts {
        if let Stmt::Assign { target, op, value } = s {
            mark_reductions(&mut reduced, target, *op, value);
        }
    }
    sem.indices
        .iter()
        .zip(reduced)
        .map(|(ix, r)| IndexView {
            name: ix.name.clone(),
            extent: expr_text(m, Some(inst), &ix.extent),
            reduced: r.unwrap_or_default().to_owned(),
        })
        .collect()
}

fn mark_reductions(
    out: &mut [Option<&'static str>],
    target: &Access,
    op: AssignOp,
    value: &SemExpr,
) {
    let on_left = |ix: usize| {
        target
            .indices
            .iter()
            .any(|a| a.terms.iter().any(|(i, _)| i.index() == ix))
    };
    let word = match op {
        AssignOp::Set => None,
        AssignOp::Add => Some("summed"),
        AssignOp::Max => Some("max-reduced"),
        AssignOp::Min => Some("min-reduced"),
    };
    let mut used = Vec::new();
    sem_indices(value, &mut used, out);
    for ix in used {
        if let (Some(w), false, Some(slot)) = (word, on_left(ix), out.get_mut(ix)) {
            slot.get_or_insert(w);
        }
    }
}

/// Collects the indices a value reads; marks those of explicit reductions.
fn sem_indices(e: &SemExpr, used: &mut Vec<usize>, out: &mut [Option<&'static str>]) {
    match e {
        SemExpr::Access(a) => used.extend(
            a.indices
                .iter()
                .flat_map(|x| x.terms.iter().map(|(i, _)| i.index())),
        ),
        SemExpr::Const(_) => {}
        SemExpr::Neg(a) | SemExpr::Cast(_, a) => sem_indices(a, used, out),
        SemExpr::Binary(_, a, b) => {
            sem_indices(a, used, out);
            sem_indices(b, used, out);
        }
        SemExpr::Call(_, args) => args.iter().for_each(|a| sem_indices(a, used, out)),
        SemExpr::Reduce(op, ixs, body) => {
            let word = match op {
                ReduceOp::Sum => "summed",
                ReduceOp::Max => "max-reduced",
                ReduceOp::Min => "min-reduced",
            };
            for ix in ixs {
                if let Some(slot) = out.get_mut(ix.index()) {
                    slot.get_or_insert(word);
                }
            }
            sem_indices(body, used, out);
        }
    }
}

fn constraints(m: &Machine, inst: &Instruction) -> Vec<String> {
    inst.constraints
        .iter()
        .map(|c| {
            let (l, r) = (
                expr_text(m, Some(inst), &c.lhs),
                expr_text(m, Some(inst), &c.rhs),
            );
            format!("{l} {} {r}", c.op.symbol())
        })
        .collect()
}

fn encoding_diagram(m: &Machine, inst: &Instruction, f: &Format) -> Diagram {
    let pieces = f
        .fields
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let source = inst
                .encoding
                .fields
                .iter()
                .find(|v| v.field == i)
                .map(|v| &v.source);
            let (value, class) = field_contents(m, inst, x.width(), source);
            Piece {
                hi: x.hi,
                lo: x.lo,
                texts: vec![(x.name.clone(), false), (value, true)],
                class,
            }
        })
        .collect();
    diagram(
        f.width,
        &["field", "value"],
        &[("unused", false), ("0", true)],
        pieces,
    )
}

/// What goes into a field: an opcode constant, an operand (as encoded), or zero.
fn field_contents(
    m: &Machine,
    inst: &Instruction,
    width: u32,
    source: Option<&FieldSource>,
) -> (String, &'static str) {
    match source {
        Some(FieldSource::Const(c)) => (hex(*c, width), "opcode"),
        Some(FieldSource::Operand(o)) => match inst.operands.get(o.index()) {
            Some(op) => (operand_encoding(op), "operand"),
            None => (
                Names {
                    m,
                    inst: Some(inst),
                }
                .operand(*o),
                "operand",
            ),
        },
        None => ("0".to_owned(), "unused"),
    }
}

fn hex(v: u64, width: u32) -> String {
    let digits = width.div_ceil(4).max(1) as usize;
    format!("0x{v:0digits$x}")
}

/// `a / 32` for an address, `v (f32 bits)` for a real immediate.
fn operand_encoding(o: &Operand) -> String {
    match &o.kind {
        OperandKind::Mem { align, .. } if *align > 1 => format!("{} / {align}", o.name),
        OperandKind::Imm { lo, .. } if *lo < 0 => format!("{} (two's complement)", o.name),
        OperandKind::ImmReal { dtype } => format!("{} ({} bits)", o.name, dtype.name()),
        _ => o.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reals_read_well() {
        assert_eq!(fmt_real(4.915200000000001), "4.9152");
        assert_eq!(fmt_real(20.0), "20");
        assert_eq!(fmt_real(0.0003), "0.0003");
        assert_eq!(fmt_real(1142.857142), "1142.86");
    }

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(fmt_bytes(65536), "64 KiB");
        assert_eq!(fmt_bytes(32 << 30), "32 GiB");
        assert_eq!(fmt_bytes(1000), "1000 B");
    }

    #[test]
    fn doc_code_spans_split() {
        let s = segments("signals `s` on completion");
        let parts: Vec<(&str, bool)> = s.iter().map(|x| (x.text.as_str(), x.code)).collect();
        assert_eq!(
            parts,
            [("signals ", false), ("s", true), (" on completion", false)]
        );
    }
}
