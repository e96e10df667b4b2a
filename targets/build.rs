//! Build script of the `targets` crate: glue only.
//!
//! Loads and checks every `targets/*.isa` with `isa-specs`, prints
//! `cargo:rerun-if-changed` for every file the loader opened, and writes the
//! registry (`registry.rs` in `OUT_DIR`) with each checked machine model.
//! A description with errors fails the build with the same located
//! diagnostics `tessera check` prints.
//!
//! Environment: none read yet.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut specs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "isa"))
                .collect()
        })
        .unwrap_or_default();
    specs.sort();
    let mut registry = String::from(
        "/// Every shipped machine, sorted by file name.\npub static REGISTRY: &[Entry] = &[\n",
    );
    let mut failed = false;
    for spec in &specs {
        let shown = format!(
            "targets/{}",
            spec.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        match isa_specs::load_file(spec, &[]) {
            Ok(loaded) => {
                for (_, f) in loaded.sources.files() {
                    println!("cargo:rerun-if-changed={}", f.name);
                }
                let ron =
                    ron::to_string(&loaded.machine).expect("a checked machine always serialises");
                let _ = writeln!(registry, "    Entry {{ file: {shown:?}, model: {ron:?} }},");
            }
            Err(failed_spec) => {
                for (_, f) in failed_spec.sources.files() {
                    println!("cargo:rerun-if-changed={}", f.name);
                }
                eprintln!(
                    "{}",
                    failed_spec.diagnostics.render_plain(&failed_spec.sources)
                );
                failed = true;
            }
        }
    }
    registry.push_str("];\n");
    if failed {
        eprintln!(
            "error: a machine description in targets/ has errors (run `tessera check targets/*.isa`)"
        );
        std::process::exit(1);
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("registry.rs"), registry).expect("OUT_DIR is writable");
}
