//! Encoding formats and the whole-machine opcode collision check.

use super::{Checker, record};
use crate::ast::Item;
use crate::diag::{Code, Diagnostic};
use crate::model::*;
use crate::source::Span;
use crate::spans::SpanKey;

pub(crate) fn check_formats(c: &mut Checker, items: &[Item]) {
    for item in items {
        let Item::Format(f) = item else { continue };
        if !super::items::is_first(c, &f.name) {
            continue;
        }
        let id = FormatId::from_index(c.formats.len());
        record(c, SpanKey::Format(id), f.span);
        let errors_before = c.failures();
        let width = c
            .global_int(&f.width, 1, "a format width")
            .map_or(1, |q| q.value);
        if width > 4096 {
            c.error(
                Diagnostic::new(
                    Code::OutOfRange,
                    f.width.span,
                    format!("format width {width} is more than 4096 bits"),
                )
                .label("too wide")
                .help("formats are at most 4096 bits wide"),
            );
        }
        let width = u32::try_from(width.clamp(1, 4096)).unwrap_or(1);
        let mut fields: Vec<FieldDef> = Vec::new();
        let mut field_spans: Vec<Span> = Vec::new();
        if c.failures() > errors_before {
            c.broken.insert(f.name.name.clone());
        }
        for field in &f.fields {
            let field_errors = c.failures();
            let broken = |c: &mut Checker| {
                c.broken_fields
                    .insert((f.name.name.clone(), field.name.name.clone()));
            };
            let hi = c
                .global_int(&field.hi, 0, "a bit number")
                .map_or(0, |q| q.value);
            let lo = match &field.lo {
                Some(lo) => c.global_int(lo, 0, "a bit number").map_or(0, |q| q.value),
                None => hi,
            };
            if c.failures() > field_errors {
                broken(c);
                continue;
            }
            if let Some(prev) = fields.iter().position(|p| p.name == field.name.name) {
                c.error(
                    Diagnostic::new(
                        Code::Duplicate,
                        field.name.span,
                        format!(
                            "field `{}` defined twice in format `{}`",
                            field.name.name, f.name.name
                        ),
                    )
                    .label("defined again here")
                    .with_secondary(field_spans[prev], "first defined here")
                    .help("rename one of the fields"),
                );
                broken(c);
                continue;
            }
            if hi < lo {
                c.error(
                    Diagnostic::new(
                        Code::FieldOrder,
                        field.span,
                        format!(
                            "field `{}` is written [{hi}:{lo}], high bit below low bit",
                            field.name.name
                        ),
                    )
                    .label("reversed")
                    .help(format!(
                        "write `{} [{lo}:{hi}];`: bit ranges are [high:low]",
                        field.name.name
                    )),
                );
                broken(c);
                continue;
            }
            if hi >= i64::from(width) {
                c.error(
                    Diagnostic::new(
                        Code::FieldOutsideWord,
                        field.span,
                        format!(
                            "field `{}` reaches bit {hi} of the {width}-bit format `{}`",
                            field.name.name, f.name.name
                        ),
                    )
                    .label(format!("bit {hi} does not exist"))
                    .help(format!(
                        "bits of a {width}-bit format are numbered {}..0",
                        width - 1
                    )),
                );
                broken(c);
                continue;
            }
            if hi - lo >= 64 {
                c.error(
                    Diagnostic::new(
                        Code::FieldOutsideWord,
                        field.span,
                        format!("field `{}` is {} bits wide", field.name.name, hi - lo + 1),
                    )
                    .label("wider than 64 bits")
                    .help("split it into fields of at most 64 bits"),
                );
                broken(c);
                continue;
            }
            let (hi, lo) = (
                u32::try_from(hi).unwrap_or(0),
                u32::try_from(lo).unwrap_or(0),
            );
            if let Some(other) = fields.iter().position(|p| lo <= p.hi && p.lo <= hi) {
                let o = &fields[other];
                c.error(
                    Diagnostic::new(
                        Code::OverlappingFields,
                        field.span,
                        format!(
                            "field `{}` [{hi}:{lo}] overlaps field `{}` [{}:{}]",
                            field.name.name, o.name, o.hi, o.lo
                        ),
                    )
                    .label("overlapping bits")
                    .with_secondary(field_spans[other], format!("`{}` is here", o.name))
                    .help("give each field its own bits"),
                );
            }
            record(
                c,
                SpanKey::Field(id, u32::try_from(fields.len()).unwrap_or(0)),
                field.span,
            );
            fields.push(FieldDef {
                name: field.name.name.clone(),
                hi,
                lo,
            });
            field_spans.push(field.span);
        }
        c.formats.push(Format {
            name: f.name.name.clone(),
            width,
            fields,
        });
    }
}

/// Fixed bits of an encoding: `(mask, value)` as little-endian 64-bit words.
fn fixed_bits(format: &Format, enc: &Encoding) -> (Vec<u64>, Vec<u64>) {
    let words = format.width.div_ceil(64) as usize;
    let (mut mask, mut value) = (vec![0u64; words], vec![0u64; words]);
    for fv in &enc.fields {
        let FieldSource::Const(v) = fv.source else {
            continue;
        };
        let Some(f) = format.fields.get(fv.field) else {
            continue;
        };
        for bit in 0..f.width() {
            let pos = (f.lo + bit) as usize;
            mask[pos / 64] |= 1 << (pos % 64);
            if (v >> bit) & 1 == 1 {
                value[pos / 64] |= 1 << (pos % 64);
            }
        }
    }
    (mask, value)
}

/// Where each checked instruction's parts were written, for conflict reports.
pub(crate) struct InstSpans {
    pub encoding: Span,
}

pub(crate) fn check_collisions(c: &mut Checker, insts: &[(Instruction, InstSpans)]) {
    let fixed: Vec<Option<(Vec<u64>, Vec<u64>)>> = insts
        .iter()
        .map(|(i, _)| {
            c.formats
                .get(i.encoding.format.index())
                .map(|f| fixed_bits(f, &i.encoding))
        })
        .collect();
    for (b, (inst_b, spans_b)) in insts.iter().enumerate() {
        let Some((mb, vb)) = &fixed[b] else { continue };
        let is_nop = inst_b
            .semantics
            .stmts
            .iter()
            .all(|s| matches!(s, Stmt::Action(Action::Nop)));
        if !is_nop && vb.iter().all(|w| *w == 0) {
            c.error(
                Diagnostic::new(
                    Code::NopCollision,
                    spans_b.encoding,
                    format!(
                        "`{}` can encode as the all-zero word, which is the empty slot (nop)",
                        inst_b.name
                    ),
                )
                .label("no fixed bit is 1")
                .help("give the instruction an opcode with at least one bit set"),
            );
        }
        for (a, (inst_a, spans_a)) in insts[..b].iter().enumerate() {
            let Some((ma, va)) = &fixed[a] else { continue };
            let Some(shared) = inst_a
                .timing
                .slots
                .iter()
                .find(|s| inst_b.timing.slots.contains(s))
            else {
                continue;
            };
            if ma.len() != mb.len() {
                continue;
            }
            let slot = c
                .slots
                .get(shared.index())
                .map_or_else(String::new, |s| s.name.clone());
            let distinguishable = (0..ma.len()).any(|w| (va[w] ^ vb[w]) & ma[w] & mb[w] != 0);
            if !distinguishable {
                c.error(
                    Diagnostic::new(
                        Code::OpcodeCollision,
                        spans_b.encoding,
                        format!(
                            "`{}` and `{}` both issue from slot `{slot}` and no fixed bit tells them apart",
                            inst_b.name, inst_a.name
                        ),
                    )
                    .label(format!("`{}` encoded here", inst_b.name))
                    .with_secondary(
                        spans_a.encoding,
                        format!("`{}` has the same fixed bits", inst_a.name),
                    )
                    .help("give one of them a different opcode"),
                );
            }
        }
    }
}
