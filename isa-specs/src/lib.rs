//! The Tessera architecture description language (ADL).
//!
//! An architect describes an accelerator in a `.isa` file; this crate reads it:
//! `parse → syntax tree with spans → check → Machine`. The [`Machine`] is plain
//! data (serde, typed ids, no spans); spans live in a side [`SpanTable`].
//! Every mistake is a located [`Diagnostic`] with a stable [`Code`]; all are
//! collected, none is fatal, nothing panics on bad input.
//!
//! ```
//! let text = r#"
//!     machine "tiny" { description = "one adder"; clock_mhz = 500; word_bits = 16; hazards = interlocked; }
//!     memory sram { kind = sram; size = 4 KiB; bandwidth = 16; latency = 1; read_energy = 0.5; write_energy = 0.6; area = 0.1; }
//!     unit alu { area = 0.01; static_power = 0.1; }
//!     format r [16] { op [15:12]; dst [11:0]; }
//!     inst inc {
//!         operands { x : mem sram [] i32 align 4; }
//!         semantics { x = x + 1; }
//!         timing { unit = alu; latency = 2; }
//!         encoding r { op = 1; dst = x; }
//!         energy = 1.5;
//!     }
//! "#;
//! let loaded = isa_specs::load_source("tiny.isa", text, &[]).unwrap();
//! assert_eq!(loaded.machine.instructions[0].name, "inc");
//! ```
//!
//! The language itself is documented in `docs/isa-language.md`.

#![deny(missing_docs)]

pub mod assembly;
pub mod ast;
mod check;
pub mod diag;
pub mod dtype;
pub mod eval;
mod load;
pub mod model;
pub mod program;
pub mod select;
pub mod semantic_ops;
pub mod source;
pub mod spans;
mod syntax;
pub mod target;

pub use diag::{Code, Diagnostic, Diagnostics, Severity};
pub use load::{
    Failed, Loaded, MAX_FILE_BYTES, Overrides, load_file, load_source, load_sources, parse_override,
};
pub use model::Machine;
pub use source::{SourceMap, Span};
pub use spans::{SpanKey, SpanTable};
pub use syntax::{parse_constraint, parse_expr};
