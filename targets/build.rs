//! Build script of the `targets` crate: glue only.
//!
//! For every `targets/*.isa`: load and check it with `isa-specs`, print
//! `cargo:rerun-if-changed` for every file the loader opened, run the
//! generators of `codegen-gen`, and write `<target>_<artifact>.rs` into
//! `OUT_DIR`, plus `targets.rs`, the list the registry is built from. A
//! description with errors fails the build with the same located diagnostics
//! `tessera check` prints.
//!
//! Environment:
//! - `TESSERA_GEN_DIR`: also write the generated sources into this folder, so
//!   people can read them (they are otherwise only in `OUT_DIR`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=TESSERA_GEN_DIR");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = dir.parent().unwrap_or(dir);
    let root = workspace.display().to_string();
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
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let extra = std::env::var_os("TESSERA_GEN_DIR").map(PathBuf::from);
    let mut list = String::new();
    let mut failed = false;
    for spec in &specs {
        let shown = codegen_gen::relative(&spec.display().to_string(), &root);
        let result = isa_specs::load_file(spec, &[]);
        let sources = match &result {
            Ok(l) => &l.sources,
            Err(f) => &f.sources,
        };
        for (_, f) in sources.files() {
            println!("cargo:rerun-if-changed={}", f.name);
        }
        let loaded = match result {
            Ok(l) => l,
            Err(f) => {
                eprintln!("{}", f.diagnostics.render_plain(&f.sources));
                failed = true;
                continue;
            }
        };
        let ctx = codegen_gen::Ctx::new(&loaded, &shown, &root);
        let stem = codegen_gen::stem(&loaded.machine.name);
        for file in codegen_gen::generate_all(&ctx)
            .into_iter()
            .chain([simulator_gen::generate(&ctx)])
        {
            let name = format!("{stem}_{}.rs", file.artifact);
            write(&out.join(&name), &file.text);
            if let Some(extra) = &extra {
                write(&extra.join(&name), &file.text);
            }
        }
        let model = ron::to_string(&loaded.machine).expect("a checked machine always serialises");
        let files: Vec<String> = loaded
            .sources
            .files()
            .map(|(_, f)| {
                format!(
                    "({:?}, {:?})",
                    codegen_gen::relative(&f.name, &root),
                    f.text
                )
            })
            .collect();
        let _ = writeln!(
            list,
            "target!({stem}, {shown:?}, {model:?}, [{}]);",
            files.join(", ")
        );
    }
    if failed {
        eprintln!(
            "error: a machine description in targets/ has errors (run `tessera check targets/*.isa`)"
        );
        std::process::exit(1);
    }
    let stems: Vec<String> = list
        .lines()
        .filter_map(|l| {
            l.strip_prefix("target!(")?
                .split(',')
                .next()
                .map(str::to_owned)
        })
        .collect();
    let _ = writeln!(
        list,
        "\n/// Every shipped machine, sorted by file name.\npub static REGISTRY: &[Entry] = &[{}];",
        stems
            .iter()
            .map(|s| format!("{s}::ENTRY"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    write(&out.join("targets.rs"), &list);
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    // Writing only on change keeps the crate's mtime-based rebuilds quiet.
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
}
