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

pub(crate) use exprs::resolve_standalone;

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

/// The kinds of global name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Param,
    Memory,
    RegFile,
    Unit,
    Slot,
    Semaphore,
    Format,
}

impl Kind {
    pub fn word(self) -> &'static str {
        match self {
            Kind::Param => "parameter",
            Kind::Memory => "memory",
            Kind::RegFile => "register file",
            Kind::Unit => "unit",
            Kind::Slot => "slot",
            Kind::Semaphore => "semaphore bank",
            Kind::Format => "format",
        }
    }

    fn keyword(self) -> &'static str {
        match self {
            Kind::Param => "param",
            Kind::Memory => "memory",
            Kind::RegFile => "regfile",
            Kind::Unit => "unit",
            Kind::Slot => "slot",
            Kind::Semaphore => "semaphore",
            Kind::Format => "format",
        }
    }
}

impl Sym {
    pub fn kind(self) -> Kind {
        match self {
            Sym::Param(_) => Kind::Param,
            Sym::Memory(_) => Kind::Memory,
            Sym::RegFile(_) => Kind::RegFile,
            Sym::Unit(_) => Kind::Unit,
            Sym::Slot(_) => Kind::Slot,
            Sym::Semaphore(_) => Kind::Semaphore,
            Sym::Format(_) => Kind::Format,
        }
    }

    pub fn kind_word(self) -> &'static str {
        self.kind().word()
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
    /// Fields (format, field) whose definition failed.
    pub broken_fields: std::collections::HashSet<(String, String)>,
    /// Uses of broken names, which are not reported again.
    pub silent_failures: usize,
    /// Units already reported as reachable from no slot.
    pub unreachable_units: std::collections::HashSet<UnitId>,
}

impl Checker {
    /// A checker that knows no name yet.
    pub fn new() -> Checker {
        Checker {
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
            broken_fields: Default::default(),
            silent_failures: 0,
            unreachable_units: Default::default(),
        }
    }

    /// Adds a diagnostic (its code says whether it is an error or a warning).
    pub fn error(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Errors reported plus silent failures (uses of names whose definition
    /// failed) so far: tells whether an item's own checks failed.
    pub fn failures(&self) -> usize {
        self.diags.error_count() + self.silent_failures
    }

    /// Looks up a name of one of the `wanted` kinds. Reports an undefined name
    /// (with a suggestion of the wanted kind) or a name of another kind; stays
    /// silent for names whose definition already failed.
    pub fn lookup(&mut self, name: &str, span: Span, wanted: &[Kind]) -> Option<Sym> {
        if self.broken.contains(name) {
            self.silent_failures += 1;
            return None;
        }
        let want = wanted
            .iter()
            .map(|k| k.word())
            .collect::<Vec<_>>()
            .join(" or ");
        match self.symbols.get(name).map(|(s, _)| *s) {
            Some(sym) if wanted.contains(&sym.kind()) => Some(sym),
            Some(sym) => {
                let d = Diagnostic::new(
                    Code::WrongKind,
                    span,
                    format!("`{name}` is a {}, not a {want}", sym.kind_word()),
                )
                .label(format!("expected a {want}"))
                .help(match self.suggest(name, wanted) {
                    Some(s) => {
                        format!("did you mean the {} `{s}`?", self.symbols[&s].0.kind_word())
                    }
                    None => format!("name a {want} here"),
                });
                self.error(d);
                None
            }
            None => {
                let code = if wanted.iter().all(|k| matches!(k, Kind::Unit | Kind::Slot)) {
                    Code::UnknownUnit
                } else {
                    Code::Undefined
                };
                let word = if code == Code::UnknownUnit {
                    "unknown"
                } else {
                    "undefined"
                };
                let help = match self.suggest(name, wanted) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!(
                        "define it with `{} {name} ...`, or check the spelling",
                        wanted[0].keyword()
                    ),
                };
                self.error(
                    Diagnostic::new(code, span, format!("{word} {want} `{name}`"))
                        .label(format!("no such {want}"))
                        .help(help),
                );
                None
            }
        }
    }

    /// The closest defined name of the wanted kinds.
    pub fn suggest(&self, name: &str, wanted: &[Kind]) -> Option<String> {
        let candidates = self
            .symbols
            .iter()
            .filter(|(_, (s, _))| wanted.contains(&s.kind()))
            .map(|(n, _)| n.as_str());
        suggest(name, candidates)
    }
}

/// The closest candidate to a misspelt name, if any is close.
pub(crate) fn suggest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    candidates
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|(_, c)| *c != name)
        .filter(|(d, c)| *d <= 2.max(name.len() / 3) && *d < c.len().max(name.len()))
        .min()
        .map(|(_, c)| c.to_owned())
}

/// Checks all items of a machine (from every file) and builds the model.
pub(crate) fn check(
    items: &[Item],
    overrides: &[(String, i64)],
) -> (Option<Machine>, SpanTable, Diagnostics) {
    let mut c = Checker::new();
    items::collect_names(&mut c, items);
    params::check_params(&mut c, items, overrides);
    let header = items::check_header(&mut c, items);
    items::check_units(&mut c, items);
    items::check_memories(&mut c, items);
    items::check_regfiles(&mut c, items);
    items::check_semaphores(&mut c, items);
    // Without a header there is no word width to check slots against, but they are still numbered.
    items::check_slots(&mut c, items, header.as_ref().map_or(4096, |h| h.word_bits));
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
