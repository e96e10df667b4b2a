//! Loading and checking each shipped machine description (parse, include, check).
//!
//! `cargo bench -p isa-specs --bench load`; figures are reported in `docs/performance.md`.

use criterion::{Criterion, criterion_group, criterion_main};
use std::path::{Path, PathBuf};

fn specs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("../targets"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "isa"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.push(root.join("tests/specs/ok/toy.isa"));
    v
}

fn load(c: &mut Criterion) {
    let mut group = c.benchmark_group("load_and_check");
    for path in specs() {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        group.bench_function(name, |b| {
            b.iter(|| {
                isa_specs::load_file(std::hint::black_box(&path), &[])
                    .map(|l| l.machine.instructions.len())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, load);
criterion_main!(benches);
