//! Names, the machine header, units, memories, register files, semaphores and slots.

use super::props::Props;
use super::{Checker, Header, Kind, Sym, blocks, record};
use crate::ast::{BlockKind, Item};
use crate::diag::{Code, Diagnostic};
use crate::model::*;
use crate::spans::SpanKey;

fn one() -> IntQ {
    IntQ {
        value: 1,
        expr: Expr::Int(1),
    }
}

fn zero_real() -> RealQ {
    RealQ {
        value: 0.0,
        expr: Expr::Real(0.0),
    }
}

/// Numbers every named item and reports names defined twice.
pub(crate) fn collect_names(c: &mut Checker, items: &[Item]) {
    let mut counts = [0usize; 7];
    for item in items {
        let (name, slot) = match item {
            Item::Param { name, .. } => (name, 0),
            Item::Block(b) => match b.kind {
                BlockKind::Machine => continue,
                BlockKind::Memory => (&b.name, 1),
                BlockKind::RegFile => (&b.name, 2),
                BlockKind::Unit => (&b.name, 3),
                BlockKind::Slot => (&b.name, 4),
                BlockKind::Semaphore => (&b.name, 5),
            },
            Item::Format(f) => (&f.name, 6),
            Item::Include { .. } | Item::Inst(_) => continue,
        };
        if let Some((sym, first)) = c.symbols.get(&name.name) {
            let d = Diagnostic::new(Code::Duplicate, name.span, format!("`{}` is defined twice", name.name))
                .label("defined again here")
                .with_secondary(*first, format!("first defined here, as a {}", sym.kind_word()))
                .help("rename one of them: parameters, memories, register files, units, slots, semaphores and formats share one namespace");
            c.error(d);
            continue;
        }
        let n = counts[slot];
        counts[slot] += 1;
        let sym = match slot {
            0 => Sym::Param(ParamId::from_index(n)),
            1 => Sym::Memory(MemId::from_index(n)),
            2 => Sym::RegFile(RegFileId::from_index(n)),
            3 => Sym::Unit(UnitId::from_index(n)),
            4 => Sym::Slot(SlotId::from_index(n)),
            5 => Sym::Semaphore(SemId::from_index(n)),
            _ => Sym::Format(FormatId::from_index(n)),
        };
        c.symbols.insert(name.name.clone(), (sym, name.span));
    }
}

/// Whether this block is the first definition of its name (later ones were reported as duplicates).
pub(crate) fn is_first(c: &Checker, name: &crate::ast::Ident) -> bool {
    c.symbols
        .get(&name.name)
        .is_some_and(|(_, s)| *s == name.span)
}

pub(crate) fn check_header(c: &mut Checker, items: &[Item]) -> Option<Header> {
    let headers: Vec<_> = blocks(items, BlockKind::Machine).collect();
    let Some(first) = headers.first() else {
        let span = items
            .first()
            .map(item_span)
            .unwrap_or(crate::source::Span::new(crate::source::FileId(0), 0, 0));
        c.error(
            Diagnostic::new(Code::MachineHeader, span, "no `machine` header")
                .label("the description starts here")
                .help("add `machine \"name\" { description = \"...\"; clock_mhz = 1000; word_bits = 64; hazards = interlocked; }`"),
        );
        return None;
    };
    for extra in &headers[1..] {
        c.error(
            Diagnostic::new(
                Code::MachineHeader,
                extra.name.span,
                "a second `machine` header",
            )
            .label("second header")
            .with_secondary(first.name.span, "first header here")
            .help("a description (with all its includes) describes one machine: keep one header"),
        );
    }
    record(c, SpanKey::Machine, first.span);
    let owner = format!("machine \"{}\"", first.name.name);
    let p = Props::new(
        c,
        &first.props,
        owner,
        first.name.span,
        &["description", "clock_mhz", "word_bits", "hazards"],
    );
    let description = p.string(c, "description").unwrap_or_default();
    let clock_mhz = p.int(c, "clock_mhz", None, 1).unwrap_or_else(one);
    let word_bits = p.int(c, "word_bits", None, 1).unwrap_or_else(one);
    let hazards = match p
        .word(c, "hazards", &["interlocked", "exposed"], None)
        .as_deref()
    {
        Some("exposed") => Hazards::Exposed,
        _ => Hazards::Interlocked,
    };
    if word_bits.value > 4096 {
        c.error(
            Diagnostic::new(
                Code::OutOfRange,
                first.span,
                format!("`word_bits` is {}, more than 4096", word_bits.value),
            )
            .label("word too wide")
            .help("microcode words are at most 4096 bits"),
        );
    }
    let name = first.name.name.clone();
    if name.is_empty()
        || !name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
    {
        c.error(
            Diagnostic::new(
                Code::WrongValue,
                first.name.span,
                format!("machine name \"{name}\" is not a valid target name"),
            )
            .label("invalid name")
            .help("use letters, digits, `-` and `_`, e.g. \"vliw-systolic\""),
        );
    }
    Some(Header {
        name,
        description,
        clock_mhz,
        word_bits: u32::try_from(word_bits.value.clamp(1, 4096)).unwrap_or(1),
        hazards,
        span: first.name.span,
    })
}

fn item_span(i: &Item) -> crate::source::Span {
    match i {
        Item::Include { span, .. } => *span,
        Item::Param { name, .. } => name.span,
        Item::Block(b) => b.span,
        Item::Format(f) => f.span,
        Item::Inst(i) => i.span,
    }
}

pub(crate) fn check_units(c: &mut Checker, items: &[Item]) {
    for b in blocks(items, BlockKind::Unit) {
        if !is_first(c, &b.name) {
            continue;
        }
        let errors_before = c.failures();
        let id = UnitId::from_index(c.units.len());
        record(c, SpanKey::Unit(id), b.span);
        let allowed = [
            "count",
            "pipelined",
            "async",
            "macs_per_cycle",
            "area",
            "static_power",
        ];
        let p = Props::new(
            c,
            &b.props,
            format!("unit `{}`", b.name.name),
            b.name.span,
            &allowed,
        );
        let unit = Unit {
            name: b.name.name.clone(),
            count: p.int(c, "count", Some(1), 1).unwrap_or_else(one),
            pipelined: p.bool(c, "pipelined", true),
            asynchronous: p.bool(c, "async", false),
            macs_per_cycle: p.int(c, "macs_per_cycle", Some(0), 0).unwrap_or_else(one),
            area: p.real(c, "area", None).unwrap_or_else(zero_real),
            static_power: p.real(c, "static_power", None).unwrap_or_else(zero_real),
        };
        if c.failures() > errors_before {
            c.broken.insert(b.name.name.clone());
        }
        c.units.push(unit);
    }
}

/// Resolves a list of unit names.
fn unit_list(c: &mut Checker, names: &[crate::ast::Ident]) -> Vec<UnitId> {
    names
        .iter()
        .filter_map(|n| match c.lookup(&n.name, n.span, &[Kind::Unit]) {
            Some(Sym::Unit(u)) => Some(u),
            _ => None,
        })
        .collect()
}

pub(crate) fn check_memories(c: &mut Checker, items: &[Item]) {
    for b in blocks(items, BlockKind::Memory) {
        if !is_first(c, &b.name) {
            continue;
        }
        let errors_before = c.failures();
        let id = MemId::from_index(c.memories.len());
        record(c, SpanKey::Memory(id), b.span);
        let allowed = [
            "kind",
            "size",
            "banks",
            "bandwidth",
            "latency",
            "ports",
            "read_energy",
            "write_energy",
            "area",
            "static_power",
            "compute",
        ];
        let p = Props::new(
            c,
            &b.props,
            format!("memory `{}`", b.name.name),
            b.name.span,
            &allowed,
        );
        let kind = match p.word(c, "kind", &["dram", "hbm", "sram"], None).as_deref() {
            Some("dram") => MemKind::Dram,
            Some("hbm") => MemKind::Hbm,
            _ => MemKind::Sram,
        };
        let compute = p
            .names(c, "compute")
            .map(|n| unit_list(c, &n))
            .unwrap_or_default();
        let mem = Memory {
            name: b.name.name.clone(),
            kind,
            size: p.int(c, "size", None, 1).unwrap_or_else(one),
            banks: p.int(c, "banks", Some(1), 1).unwrap_or_else(one),
            bandwidth: p.int(c, "bandwidth", None, 1).unwrap_or_else(one),
            latency: p.int(c, "latency", None, 0).unwrap_or_else(one),
            ports: p.int(c, "ports", Some(1), 1).unwrap_or_else(one),
            read_energy: p.real(c, "read_energy", None).unwrap_or_else(zero_real),
            write_energy: p.real(c, "write_energy", None).unwrap_or_else(zero_real),
            area: p.real(c, "area", None).unwrap_or_else(zero_real),
            static_power: p
                .real(c, "static_power", Some(0.0))
                .unwrap_or_else(zero_real),
            compute,
        };
        if c.failures() == errors_before && mem.size.value % mem.banks.value != 0 {
            let span = p.get("banks").map_or(b.span, |q| q.value.span());
            c.error(
                Diagnostic::new(
                    Code::MemoryGeometry,
                    span,
                    format!(
                        "memory `{}` of {} bytes does not divide into {} equal banks",
                        mem.name, mem.size.value, mem.banks.value
                    ),
                )
                .label("banks do not divide the size")
                .help("make `size` a multiple of `banks`"),
            );
        }
        if c.failures() > errors_before {
            c.broken.insert(b.name.name.clone());
        }
        c.memories.push(mem);
    }
}

pub(crate) fn check_regfiles(c: &mut Checker, items: &[Item]) {
    for b in blocks(items, BlockKind::RegFile) {
        if !is_first(c, &b.name) {
            continue;
        }
        let errors_before = c.failures();
        let id = RegFileId::from_index(c.regfiles.len());
        record(c, SpanKey::RegFile(id), b.span);
        let allowed = ["count", "dtype", "shape", "area", "energy"];
        let p = Props::new(
            c,
            &b.props,
            format!("register file `{}`", b.name.name),
            b.name.span,
            &allowed,
        );
        let dtype = p.dtype(c, "dtype");
        let shape = p
            .exprs(c, "shape")
            .map(|dims| {
                dims.into_iter()
                    .map(|d| {
                        c.global_int(d, 1, "a register dimension")
                            .unwrap_or_else(one)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let rf = RegFile {
            name: b.name.name.clone(),
            count: p.int(c, "count", None, 1).unwrap_or_else(one),
            dtype: dtype.unwrap_or(DType::F32),
            shape,
            area: p.real(c, "area", None).unwrap_or_else(zero_real),
            energy: p.real(c, "energy", None).unwrap_or_else(zero_real),
        };
        if c.failures() > errors_before {
            c.broken.insert(b.name.name.clone());
        }
        c.regfiles.push(rf);
    }
}

pub(crate) fn check_semaphores(c: &mut Checker, items: &[Item]) {
    for b in blocks(items, BlockKind::Semaphore) {
        if !is_first(c, &b.name) {
            continue;
        }
        let errors_before = c.failures();
        let id = SemId::from_index(c.semaphores.len());
        record(c, SpanKey::Semaphore(id), b.span);
        let p = Props::new(
            c,
            &b.props,
            format!("semaphore bank `{}`", b.name.name),
            b.name.span,
            &["count", "max"],
        );
        let bank = SemaphoreBank {
            name: b.name.name.clone(),
            count: p.int(c, "count", None, 1).unwrap_or_else(one),
            max: p.int(c, "max", Some(255), 1).unwrap_or_else(one),
        };
        if c.failures() > errors_before {
            c.broken.insert(b.name.name.clone());
        }
        c.semaphores.push(bank);
    }
}

pub(crate) fn check_slots(c: &mut Checker, items: &[Item], word_bits: u32) {
    let mut placed: Vec<(u32, u32, crate::source::Span, String)> = Vec::new();
    for b in blocks(items, BlockKind::Slot) {
        if !is_first(c, &b.name) {
            continue;
        }
        let errors_before = c.failures();
        let id = SlotId::from_index(c.slots.len());
        record(c, SpanKey::Slot(id), b.span);
        let p = Props::new(
            c,
            &b.props,
            format!("slot `{}`", b.name.name),
            b.name.span,
            &["bits", "units"],
        );
        let units = match p.names(c, "units") {
            Some(n) => unit_list(c, &n),
            None => {
                if p.get("units").is_none() {
                    c.error(
                        Diagnostic::new(
                            Code::MissingProperty,
                            b.span,
                            format!("slot `{}` needs property `units`", b.name.name),
                        )
                        .label("`units` missing")
                        .help("add `units = [unit, ...];` naming the units this slot issues to"),
                    );
                }
                Vec::new()
            }
        };
        let (hi, lo, bits_span) = match (p.exprs(c, "bits"), p.get("bits")) {
            (Some(v), Some(prop)) if v.len() == 2 => {
                let hi = c.global_int(v[0], 0, "a bit number").map_or(0, |q| q.value);
                let lo = c.global_int(v[1], 0, "a bit number").map_or(0, |q| q.value);
                (hi, lo, prop.value.span())
            }
            (_, Some(prop)) => {
                c.error(
                    Diagnostic::new(
                        Code::WrongValue,
                        prop.value.span(),
                        "`bits` of a slot is `[high, low]`",
                    )
                    .label("expected two bit numbers")
                    .help(format!(
                        "e.g. `bits = [{}, 0];` for a slot covering the whole word",
                        word_bits - 1
                    )),
                );
                (0, 0, prop.value.span())
            }
            (_, None) => (i64::from(word_bits) - 1, 0, b.span),
        };
        if hi < lo {
            c.error(
                Diagnostic::new(
                    Code::FieldOrder,
                    bits_span,
                    format!("slot bits [{hi}, {lo}] are reversed"),
                )
                .label("high bit below low bit")
                .help(format!("write `bits = [{lo}, {hi}];`")),
            );
        } else if hi >= i64::from(word_bits) {
            c.error(
                Diagnostic::new(
                    Code::FieldOutsideWord,
                    bits_span,
                    format!(
                        "slot `{}` reaches bit {hi} of a {word_bits}-bit word",
                        b.name.name
                    ),
                )
                .label("outside the word")
                .help(format!(
                    "keep slot bits below `word_bits` ({word_bits}) or widen the word"
                )),
            );
        }
        let (hi, lo) = (
            u32::try_from(hi).unwrap_or(0),
            u32::try_from(lo.min(hi)).unwrap_or(0),
        );
        if let Some(other) = placed.iter().find(|(h, l, ..)| lo <= *h && *l <= hi) {
            c.error(
                Diagnostic::new(
                    Code::OverlappingFields,
                    bits_span,
                    format!("slot `{}` overlaps slot `{}`", b.name.name, other.3),
                )
                .label(format!("bits {hi}..{lo}"))
                .with_secondary(
                    other.2,
                    format!("`{}` has bits {}..{}", other.3, other.0, other.1),
                )
                .help("give each slot its own bits of the bundle word"),
            );
        }
        placed.push((hi, lo, bits_span, b.name.name.clone()));
        if c.failures() > errors_before {
            c.broken.insert(b.name.name.clone());
        }
        c.slots.push(Slot {
            name: b.name.name.clone(),
            hi,
            lo,
            units,
        });
    }
}
