//! Design-space exploration throughput: one (variant, model) evaluation —
//! compile and timing-only simulation — of the GPT-2-style block on a
//! vliw-systolic variant. Evaluations per minute on N cores ≈ N × 60 s / the
//! time printed (`tessera dse` prints the rate it reached too).
//!
//! `cargo bench -p tessera --bench dse`.

use criterion::{Criterion, criterion_group, criterion_main};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gpt2_block_small/model.onnx");
    let mut g = compiler::onnx::import_file(&path).expect("example model");
    compiler::interp::fold_constants(&mut g);
    let sweep = tessera::dse::Sweep {
        name: "bench".into(),
        base: "vliw-systolic".into(),
        params: BTreeMap::from([("MXUS".to_owned(), tessera::dse::Values::List(vec![2]))]),
        constraints: Vec::new(),
        alternatives: Vec::new(),
    };
    let v = sweep.expand().expect("expands").variants.remove(0);
    let mut group = c.benchmark_group("dse");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("evaluate gpt2_block_small on vliw-systolic", |b| {
        b.iter(|| {
            let r = tessera::dse::evaluate(&v, "gpt2_block_small", &g);
            assert_eq!(r.status, "ok");
            r
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
