//! The view the manual templates render: plain serde data built from the
//! machine model, in model order, with every text already written out.

use super::text::{Names, eval_params, expr_text, fmt_bytes, fmt_real, is_literal};
use crate::Ctx;
use isa_specs::model::*;
use isa_specs::{Machine, SpanKey};
use serde::Serialize;

// ---------------------------------------------------------------------------
// The view the templates render

/// A machine quantity: its value, and the expression it follows from when
/// that is more than a literal.
#[derive(Serialize)]
pub(super) struct Quantity {
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
pub(super) struct Formula {
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
pub(super) struct Link {
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
pub(super) struct Segment {
    pub(super) text: String,
    pub(super) code: bool,
}

pub(super) fn segments(text: &str) -> Vec<Segment> {
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
pub(super) struct Row {
    label: String,
    value: Quantity,
}

/// The whole manual.
#[derive(Serialize)]
pub(super) struct Manual {
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

pub(super) fn manual(ctx: &Ctx) -> Manual {
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

pub(super) fn summary(m: &Machine) -> Vec<Row> {
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
pub(super) fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `8 GMAC/s`, `68.8128 TMAC/s`, from giga-things per second.
pub(super) fn fmt_rate(giga: f64, unit: &str) -> String {
    if giga >= 1000.0 {
        format!("{} T{unit}", fmt_real(giga / 1000.0))
    } else {
        format!("{} G{unit}", fmt_real(giga))
    }
}

/// Giga-things per second from things per cycle at `mhz`.
pub(super) fn per_second(per_cycle: i64, mhz: i64) -> f64 {
    per_cycle as f64 * mhz as f64 / 1000.0
}

pub(super) fn hazards_text(h: Hazards) -> String {
    match h {
        Hazards::Interlocked => {
            "interlocked: the hardware stalls until operands are ready".to_owned()
        }
        Hazards::Exposed => {
            "exposed: the hardware does not stall; code must respect every latency".to_owned()
        }
    }
}

pub(super) fn total_area(m: &Machine) -> f64 {
    let mems: f64 = m.memories.iter().map(|x| x.area.value).sum();
    let regs: f64 = m.regfiles.iter().map(|r| r.area.value).sum();
    let units: f64 = m
        .units
        .iter()
        .map(|u| u.area.value * u.count.value as f64)
        .sum();
    mems + regs + units
}

pub(super) fn total_static_power(m: &Machine) -> f64 {
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
pub(super) struct ParamView {
    name: String,
    anchor: String,
    value: String,
    default: String,
    overridden: bool,
}

pub(super) fn params(m: &Machine) -> Vec<ParamView> {
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
pub(super) struct MemoryRow {
    label: String,
    cells: Vec<Quantity>,
}

pub(super) fn memory_rows(m: &Machine) -> Vec<MemoryRow> {
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

pub(super) fn mem_kind_text(k: MemKind) -> String {
    let place = if k.off_chip() { "off chip" } else { "on chip" };
    format!("{} ({place})", k.name())
}

pub(super) fn compute_units(m: &Machine, x: &Memory) -> String {
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
pub(super) struct RegFileView {
    name: String,
    anchor: String,
    count: Quantity,
    dtype: String,
    shape: Quantity,
    bytes: String,
    area: Quantity,
    energy: Quantity,
}

pub(super) fn regfile(m: &Machine, r: &RegFile) -> RegFileView {
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

pub(super) fn shape_quantity(m: &Machine, shape: &[IntQ]) -> Quantity {
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

pub(super) fn shape_text(m: &Machine, inst: Option<&Instruction>, shape: &[Expr]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| expr_text(m, inst, d)).collect();
    format!("[{}]", dims.join(", "))
}

// --- units -----------------------------------------------------------------

#[derive(Serialize)]
pub(super) struct UnitView {
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

pub(super) fn units(m: &Machine) -> Vec<UnitView> {
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

pub(super) fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

// --- slots and the bundle --------------------------------------------------

#[derive(Serialize)]
pub(super) struct SlotView {
    name: String,
    anchor: String,
    bits: String,
    width: u32,
    units: Vec<Link>,
}

pub(super) fn slot(m: &Machine, s: &Slot) -> SlotView {
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

pub(super) fn bit_range(hi: u32, lo: u32) -> String {
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
pub(super) struct Diagram {
    width: u32,
    columns: u32,
    rows: Vec<DiagramRow>,
}

#[derive(Serialize)]
pub(super) struct DiagramRow {
    label: String,
    cells: Vec<DiagramCell>,
}

#[derive(Serialize)]
pub(super) struct DiagramCell {
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
pub(super) struct Piece {
    hi: u32,
    lo: u32,
    texts: Vec<(String, bool)>,
    class: &'static str,
}

/// Lays pieces (in any order) over a word of `width` bits; bits no piece
/// covers get `fill`, one text per row.
pub(super) fn diagram(
    width: u32,
    labels: &[&str],
    fill: &[(&str, bool)],
    mut pieces: Vec<Piece>,
) -> Diagram {
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

pub(super) fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

pub(super) fn gap(hi: u32, lo: u32, fill: &[(&str, bool)]) -> Piece {
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

pub(super) fn cell(text: String, code: bool, p: &Piece, unit: u32) -> DiagramCell {
    let span = p.hi - p.lo + 1;
    DiagramCell {
        text,
        span,
        columns: span / unit,
        code,
        class: p.class.to_owned(),
    }
}

pub(super) fn bundle_diagram(m: &Machine) -> Diagram {
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
pub(super) struct SemaphoreView {
    name: String,
    anchor: String,
    count: Quantity,
    max: Quantity,
}

pub(super) fn semaphores(m: &Machine) -> Vec<SemaphoreView> {
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
pub(super) struct FormatView {
    name: String,
    anchor: String,
    width: u32,
    fields: Vec<FieldView>,
    diagram: Diagram,
    used_by: Vec<Link>,
    cite: String,
}

#[derive(Serialize)]
pub(super) struct FieldView {
    name: String,
    bits: String,
    width: u32,
}

pub(super) fn formats(ctx: &Ctx) -> Vec<FormatView> {
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

pub(super) fn format_diagram(f: &Format) -> Diagram {
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
pub(super) struct IndexEntry {
    name: String,
    anchor: String,
    unit: Link,
    slots: Vec<Link>,
    latency: String,
    occupancy: String,
    doc: String,
}

pub(super) fn index(m: &Machine) -> Vec<IndexEntry> {
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
pub(super) fn by_unit(m: &Machine) -> Vec<(usize, Vec<&Instruction>)> {
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

pub(super) fn slot_links(m: &Machine, inst: &Instruction) -> Vec<Link> {
    inst.timing
        .slots
        .iter()
        .map(|s| Link::new("slot", &m.slots[s.index()].name))
        .collect()
}

#[derive(Serialize)]
pub(super) struct Group {
    unit: Link,
    anchor: String,
    asynchronous: bool,
    /// `4 copies, pipelined, 16384 MACs/cycle per copy`
    facts: String,
    slots: Vec<Link>,
    insts: Vec<InstView>,
}

pub(super) fn groups(ctx: &Ctx) -> Vec<Group> {
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

pub(super) fn unit_facts(m: &Machine, u: usize) -> String {
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

pub(super) fn unit_slots(m: &Machine, u: usize) -> Vec<Link> {
    let id = isa_specs::model::UnitId::from_index(u);
    m.slots
        .iter()
        .filter(|s| s.units.contains(&id))
        .map(|s| Link::new("slot", &s.name))
        .collect()
}

// --- one instruction -------------------------------------------------------

#[derive(Serialize)]
pub(super) struct InstView {
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

pub(super) fn inst_view(ctx: &Ctx, inst: &Instruction) -> InstView {
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

pub(super) fn inst_id(m: &Machine, inst: &Instruction) -> InstId {
    let i = m
        .instructions
        .iter()
        .position(|x| std::ptr::eq(x, inst))
        .unwrap_or(usize::MAX);
    InstId::from_index(i)
}

/// `mma acc<d>, @<a>, @<b>`: the mnemonic, then the operands in declaration order.
pub(super) fn syntax(m: &Machine, inst: &Instruction) -> String {
    let ops: Vec<String> = inst.operands.iter().map(|o| operand_syntax(m, o)).collect();
    if ops.is_empty() {
        return inst.name.clone();
    }
    format!("{} {}", inst.name, ops.join(", "))
}

pub(super) fn operand_syntax(m: &Machine, o: &Operand) -> String {
    match &o.kind {
        OperandKind::Reg { file, .. } => format!("{}<{}>", m.regfiles[file.index()].name, o.name),
        OperandKind::Mem { .. } => format!("@<{}>", o.name),
        OperandKind::Imm { .. } | OperandKind::ImmReal { .. } => format!("<{}>", o.name),
        OperandKind::Sem { bank } => format!("{}<{}>", m.semaphores[bank.index()].name, o.name),
    }
}

#[derive(Serialize)]
pub(super) struct OperandView {
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

pub(super) const NONE: &str = "—";

pub(super) fn operand_view(m: &Machine, inst: &Instruction, o: &Operand) -> OperandView {
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
pub(super) fn register_view_of(m: &Machine, rf: &RegFile, shape: &[Expr]) -> String {
    let full: Vec<Expr> = rf.shape.iter().map(|d| d.expr.clone()).collect();
    if full == shape {
        String::new()
    } else {
        shape_text(m, None, &full)
    }
}

pub(super) fn index_range(prefix: &str, count: i64) -> String {
    match count {
        c if c <= 0 => NONE.to_owned(),
        1 => format!("{prefix}0"),
        c => format!("{prefix}0 … {prefix}{}", c - 1),
    }
}

#[derive(Serialize)]
pub(super) struct IndexView {
    name: String,
    extent: String,
    reduced: String,
}

/// Each index with its range and, if it is reduced, how.
pub(super) fn indices(m: &Machine, inst: &Instruction) -> Vec<IndexView> {
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

pub(super) fn mark_reductions(
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
pub(super) fn sem_indices(e: &SemExpr, used: &mut Vec<usize>, out: &mut [Option<&'static str>]) {
    match e {
        SemExpr::Access(a) => used.extend(
            a.indices
                .iter()
                .flat_map(|x| x.terms.iter().map(|(i, _)| i.index())),
        ),
        SemExpr::Index(i) => used.push(i.index()),
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

pub(super) fn constraints(m: &Machine, inst: &Instruction) -> Vec<String> {
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

pub(super) fn encoding_diagram(m: &Machine, inst: &Instruction, f: &Format) -> Diagram {
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
pub(super) fn field_contents(
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

pub(super) fn hex(v: u64, width: u32) -> String {
    let digits = width.div_ceil(4).max(1) as usize;
    format!("0x{v:0digits$x}")
}

/// `a / 32` for an address, `v (f32 bits)` for a real immediate.
pub(super) fn operand_encoding(o: &Operand) -> String {
    match &o.kind {
        OperandKind::Mem { align, .. } if *align > 1 => format!("{} / {align}", o.name),
        OperandKind::Imm { lo, .. } if *lo < 0 => format!("{} (two's complement)", o.name),
        OperandKind::ImmReal { dtype } => format!("{} ({} bits)", o.name, dtype.name()),
        _ => o.name.clone(),
    }
}
