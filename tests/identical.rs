//! The compiler's output, held byte for byte against stored hashes.
//!
//! Every bundled example and the small bench set's synthetic GEMMs are
//! compiled for every shipped target, with every optimisation on and with
//! each one off in turn. For each, `golden/outputs.tsv` stores a hash of the
//! program file's bytes, the cycles of a timing-only simulation and a hash of
//! the report (regions, per-region timing, roofline, buffers, notes, the
//! tuning space); a refused pair stores a hash of its error.
//!
//! A restructuring must leave every line as it is. A change that means to
//! change the output rewrites the file with `TESSERA_BLESS_OUTPUTS=1` and
//! says so in its commit: the diff of this file shows which pairs changed.

use compiler::ir::Graph;
use compiler::lower::Options;
use std::fmt::Write as _;
use std::path::Path;

const GOLDEN: &str = "golden/outputs.tsv";

/// FNV-1a, 64 bits: stable across platforms and releases.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The workloads: every example model, then the small bench set's GEMMs.
fn workloads() -> Vec<(String, Graph)> {
    let mut v: Vec<(String, Graph)> = tests::examples()
        .iter()
        .map(|dir| {
            let path = dir.join("model.onnx");
            let mut g = compiler::onnx::import_file(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            compiler::interp::fold_constants(&mut g);
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, g)
        })
        .collect();
    for n in [64, 128] {
        v.push((format!("gemm_{n}x{n}x{n}"), tests::gemm_graph(n, n, n)));
    }
    v
}

/// One line of the golden file: what `g` compiles to on `t` with `opts`.
fn line(t: &targets::Target, name: &str, g: &Graph, variant: &str, opts: Options) -> String {
    let m = t.machine();
    let head = format!("{name}\t{}\t{variant}", t.name());
    let c = match compiler::lower::compile_with(t, m, g, opts) {
        Ok(c) => c,
        Err(e) => return format!("{head}\trefused\t{:016x}", fnv(e.to_string().as_bytes())),
    };
    let bytes = c.program.to_bytes().expect("a compiled program serialises");
    let (cycles, regions) = match compiler::run::timing(t, m, &c) {
        Ok(r) => (
            r.cycles.to_string(),
            serde_json::to_value(compiler::run::regions(&c, m, &r)).expect("regions serialise"),
        ),
        Err(e) => (format!("fault: {e}"), serde_json::Value::Null),
    };
    let report = serde_json::json!({
        "regions": c.regions,
        "region_runs": regions,
        "roofline": c.roofline(m),
        "buffers": c.buffers,
        "notes": c.notes,
        "kept_on_chip": c.kept_on_chip,
        "macs": c.macs,
        "space": c.space,
        "selected": c.selected_text(m),
    });
    format!(
        "{head}\t{:016x}\t{cycles}\t{:016x}",
        fnv(&bytes),
        fnv(report.to_string().as_bytes())
    )
}

/// Every line, in a fixed order: workloads, targets, then the variants
/// (`all`, then `no_<option>` for each option).
fn all_lines() -> String {
    let workloads = workloads();
    let mut jobs: Vec<(usize, &targets::Target, String, Options)> = Vec::new();
    for (w, _) in workloads.iter().enumerate() {
        for t in targets::all() {
            jobs.push((w, t, "all".to_owned(), Options::default()));
            for i in compiler::lower::OPTIONS {
                let o = Options::default().without(i.opt);
                jobs.push((w, t, format!("no_{}", i.name), o));
            }
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<String>> = vec![None; jobs.len()];
    let results = std::sync::Mutex::new(&mut out);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((w, t, variant, opts)) = jobs.get(k) else {
                        break;
                    };
                    let (name, g) = &workloads[*w];
                    let l = line(t, name, g, variant, *opts);
                    results.lock().expect("no thread panicked")[k] = Some(l);
                }
            });
        }
    });
    let mut text = String::from("# workload\ttarget\toptions\tprogram\tcycles\treport\n");
    for l in out.into_iter().flatten() {
        let _ = writeln!(text, "{l}");
    }
    text
}

#[test]
fn every_program_is_byte_for_byte_what_is_stored() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    let now = all_lines();
    if std::env::var_os("TESSERA_BLESS_OUTPUTS").is_some() {
        std::fs::write(&path, &now).expect("the golden file is writable");
        return;
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (write it with TESSERA_BLESS_OUTPUTS=1)",
            path.display()
        )
    });
    let stored: Vec<&str> = stored.lines().collect();
    let now: Vec<&str> = now.lines().collect();
    let changed: Vec<String> = now
        .iter()
        .filter(|l| !stored.contains(l))
        .map(|l| format!("  now:    {l}"))
        .chain(
            stored
                .iter()
                .filter(|l| !now.contains(l))
                .map(|l| format!("  stored: {l}")),
        )
        .collect();
    assert!(
        changed.is_empty(),
        "{} line(s) differ from {GOLDEN}:\n{}",
        changed.len(),
        changed.join("\n")
    );
}
