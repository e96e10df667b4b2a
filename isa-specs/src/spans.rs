//! The side table of spans: where in the sources each part of the model was written.
//!
//! The model itself holds no spans, so it stays plain data; generators that
//! want to cite `targets/x.isa:42` look the item up here.

use crate::model::*;
use crate::source::{SourceMap, Span};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A part of the model that has a place in the sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SpanKey {
    /// The machine header.
    Machine,
    /// A parameter.
    Param(ParamId),
    /// A memory.
    Memory(MemId),
    /// A register file.
    RegFile(RegFileId),
    /// A unit.
    Unit(UnitId),
    /// A slot.
    Slot(SlotId),
    /// A semaphore bank.
    Semaphore(SemId),
    /// A format.
    Format(FormatId),
    /// A field of a format.
    Field(FormatId, u32),
    /// An instruction.
    Inst(InstId),
    /// An instruction's operand.
    Operand(InstId, OperandId),
    /// An instruction's semantics.
    Semantics(InstId),
    /// An instruction's encoding.
    Encoding(InstId),
}

/// Spans of model parts.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SpanTable(BTreeMap<SpanKey, Span>);

impl SpanTable {
    /// Records where a part was written.
    pub fn insert(&mut self, key: SpanKey, span: Span) {
        self.0.insert(key, span);
    }

    /// Where a part was written.
    pub fn get(&self, key: SpanKey) -> Option<Span> {
        self.0.get(&key).copied()
    }

    /// `file:line` of a part, for comments in generated code.
    pub fn cite(&self, sources: &SourceMap, key: SpanKey) -> Option<String> {
        let span = self.get(key)?;
        let file = sources.file(span.file);
        let (line, _) = file.line_col(span.start as usize);
        Some(format!("{}:{line}", file.name))
    }
}
