//! Build-time generator: from a checked [`Machine`], the Rust of one target's
//! instruction set — typed instruction enum, encoder and decoder, assembly
//! printer and parser, scheduling tables, selector patterns — and its ISA
//! manual (Markdown and HTML).
//!
//! One module per artifact; each Rust generator is `&Ctx -> syn::File`, built
//! with `quote!` from small `emit_*` helpers and printed with `prettyplease`.
//! Generators read the checked model, never syntax trees. Output is
//! deterministic: generating twice gives identical bytes.

#![deny(missing_docs)]

#[cfg(feature = "rust")]
pub mod emit;
#[cfg(feature = "rust")]
pub mod gen_asm;
pub mod gen_docs;
#[cfg(feature = "rust")]
pub mod gen_encode;
#[cfg(feature = "rust")]
pub mod gen_inst;
#[cfg(feature = "rust")]
pub mod gen_sched;
#[cfg(feature = "rust")]
pub mod gen_select;

use isa_specs::{Loaded, Machine, SourceMap, SpanKey, SpanTable};

/// What every generator reads.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// The checked machine, at default parameter values.
    pub machine: &'a Machine,
    /// Where each part was written.
    pub spans: &'a SpanTable,
    /// The files read.
    pub sources: &'a SourceMap,
    /// The description's path as cited in generated files (relative, e.g. `targets/toy.isa`).
    pub spec_path: &'a str,
    /// Where the source files are, relative to the workspace (prefix to strip from source names).
    pub source_root: &'a str,
}

impl<'a> Ctx<'a> {
    /// A context over a loaded description.
    pub fn new(loaded: &'a Loaded, spec_path: &'a str, source_root: &'a str) -> Ctx<'a> {
        Ctx {
            machine: &loaded.machine,
            spans: &loaded.spans,
            sources: &loaded.sources,
            spec_path,
            source_root,
        }
    }

    /// `targets/x.isa:42` for a part of the model, with a relative path.
    pub fn cite(&self, key: SpanKey) -> String {
        let Some(span) = self.spans.get(key) else {
            return self.spec_path.to_owned();
        };
        let file = self.sources.file(span.file);
        let (line, _) = file.line_col(span.start as usize);
        format!("{}:{line}", relative(&file.name, self.source_root))
    }
}

/// A path with a root prefix removed and `/` separators, so generated files never hold absolute paths.
pub fn relative(path: &str, root: &str) -> String {
    let p = path.replace('\\', "/");
    let root = root.replace('\\', "/");
    let trimmed = p.strip_prefix(&root).unwrap_or(&p).trim_start_matches('/');
    trimmed.to_owned()
}

/// One generated file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedFile {
    /// The artifact, e.g. `inst`; the file is `<target>_<artifact>.rs`.
    pub artifact: &'static str,
    /// The file's text.
    pub text: String,
}

/// A Rust generator: the model to one file.
#[cfg(feature = "rust")]
type Generator = fn(&Ctx) -> syn::File;

/// The Rust generators of one target, by artifact, in a fixed order.
#[cfg(feature = "rust")]
const GENERATORS: [(&str, Generator); 5] = [
    ("inst", gen_inst::generate),
    ("encode", gen_encode::generate),
    ("asm", gen_asm::generate),
    ("sched", gen_sched::generate),
    ("select", gen_select::generate),
];

/// Generates every Rust artifact of one target.
#[cfg(feature = "rust")]
pub fn generate_all(ctx: &Ctx) -> Vec<GeneratedFile> {
    GENERATORS
        .iter()
        .map(|(artifact, g)| GeneratedFile {
            artifact,
            text: emit::print_file(ctx, artifact, &g(ctx)),
        })
        .collect()
}

/// The Rust-safe stem of a target name: `vliw-systolic` -> `vliw_systolic`.
pub fn stem(target: &str) -> String {
    target
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}
