//! Syntax tree to checked [`Machine`]: every check, every diagnostic.
//!
//! The checks run in dependency order (names, parameters, storage and units,
//! formats, instructions, whole-machine checks). Each `check_*` function adds
//! its diagnostics to the shared list and carries on: one mistake never hides
//! the next. The machine is returned only when no check found an error.

mod coverage;
mod encoding;
mod exprs;
mod inst;
mod items;
mod params;
mod props;
mod semantics;

use crate::ast::{BlockKind, Item};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::model::*;
use crate::source::Span;
use crate::spans::{SpanKey, SpanTable};
use std::collections::HashMap;

/// What a global name refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sym {
    Param(ParamId),
    Memory(MemId),
    RegFile(RegFileId),
    Unit(UnitId),
    Slot(SlotId),
    Semaphore(SemId),
    Format(FormatId),
}

impl Sym {
    fn kind_word(self) -> &'static str {
        match self {
            Sym::Param(_) => "parameter",
            Sym::Memory(_) => "memory",
            Sym::RegFile(_) => "register file",
            Sym::Unit(_) => "unit",
            Sym::Slot(_) => "slot",
            Sym::Semaphore(_) => "semaphore bank",
            Sym::Format(_) => "format",
        }
    }
}

/// State shared by the checks.
pub(crate) struct Checker {
    pub diags: Diagnostics,
    pub spans: SpanTable,
    pub symbols: HashMap<String, (Sym, Span)>,
    pub param_values: Vec<i64>,
    pub params: Vec<Param>,
    pub memories: Vec<Memory>,
    pub regfiles: Vec<RegFile>,
    pub units: Vec<Unit>,
    pub slots: Vec<Slot>,
    pub semaphores: Vec<SemaphoreBank>,
    pub formats: Vec<Format>,
    /// Items that failed to check, so later checks do not pile up follow-on errors.
    pub broken: std::collections::HashSet<String>,
}

impl Checker {
    pub fn error(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Looks a name up and reports undefined names with a suggestion.
    pub fn lookup(&mut self, name: &str, span: Span, wanted: &str) -> Option<Sym> {
        if let Some((sym, _)) = self.symbols.get(name) {
            return Some(*sym);
        }
        if self.broken.contains(name) {
            return None;
        }
        let mut d = Diagnostic::new(
            Code::Undefined,
            span,
            format!("undefined {wanted} `{name}`"),
        )
        .label("not defined");
        d = match self.suggest(name) {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help(format!(
                "define the {wanted} before using it, or check the spelling"
            )),
        };
        self.error(d);
        None
    }

    fn suggest(&self, name: &str) -> Option<String> {
        suggest(name, self.symbols.keys().map(String::as_str))
    }
}

/// The closest candidate to a misspelt name, if any is close.
pub(crate) fn suggest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    candidates
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|(d, c)| *d <= 2.max(name.len() / 3) && *d < c.len().max(name.len()))
        .min()
        .map(|(_, c)| c.to_owned())
}

/// Checks all items of a machine (from every file) and builds the model.
pub(crate) fn check(
    items: &[Item],
    overrides: &[(String, i64)],
) -> (Option<Machine>, SpanTable, Diagnostics) {
    let mut c = Checker {
        diags: Diagnostics::default(),
        spans: SpanTable::default(),
        symbols: HashMap::new(),
        param_values: Vec::new(),
        params: Vec::new(),
        memories: Vec::new(),
        regfiles: Vec::new(),
        units: Vec::new(),
        slots: Vec::new(),
        semaphores: Vec::new(),
        formats: Vec::new(),
        broken: Default::default(),
    };
    items::collect_names(&mut c, items);
    params::check_params(&mut c, items, overrides);
    let header = items::check_header(&mut c, items);
    items::check_units(&mut c, items);
    items::check_memories(&mut c, items);
    items::check_regfiles(&mut c, items);
    items::check_semaphores(&mut c, items);
    if let Some(h) = &header {
        items::check_slots(&mut c, items, h.word_bits);
    }
    encoding::check_formats(&mut c, items);
    let insts = inst::check_instructions(&mut c, items, header.as_ref());
    encoding::check_collisions(&mut c, &insts);
    let instructions: Vec<Instruction> = insts.into_iter().map(|(i, _)| i).collect();
    // Coverage is about what a usable machine lacks: skip it while the description has errors.
    if let Some(h) = &header
        && !c.diags.has_errors()
    {
        coverage::check_coverage(&mut c, &instructions, h.span);
    }
    let Checker {
        mut diags,
        spans,
        params,
        memories,
        regfiles,
        units,
        slots,
        semaphores,
        formats,
        ..
    } = c;
    diags.sort();
    let machine = match header {
        Some(h) if !diags.has_errors() => Some(Machine {
            name: h.name,
            description: h.description,
            clock_mhz: h.clock_mhz,
            word_bits: h.word_bits,
            hazards: h.hazards,
            params,
            memories,
            regfiles,
            units,
            slots,
            semaphores,
            formats,
            instructions,
        }),
        _ => None,
    };
    (machine, spans, diags)
}

/// The checked machine header.
pub(crate) struct Header {
    pub name: String,
    pub description: String,
    pub clock_mhz: IntQ,
    pub word_bits: u32,
    pub hazards: Hazards,
    pub span: Span,
}

/// The blocks of one kind, in file order.
pub(crate) fn blocks(items: &[Item], kind: BlockKind) -> impl Iterator<Item = &crate::ast::Block> {
    items.iter().filter_map(move |i| match i {
        Item::Block(b) if b.kind == kind => Some(b),
        _ => None,
    })
}

pub(crate) fn record(c: &mut Checker, key: SpanKey, span: Span) {
    c.spans.insert(key, span);
}
