//! Simulator throughput on a long program, functional and timing-only.
//!
//! `cargo bench -p targets --bench sim`: each run reports time per program;
//! `docs/performance.md` turns it into simulated instructions and cycles per second.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use isa_specs::assembly::assemble;
use targets::sim::Config;

/// 4000 bundles on vliw-systolic: vector arithmetic on 8 x 128 registers, spaced for the exposed pipeline.
fn vector_program() -> String {
    let mut text = String::new();
    for i in 0..1000 {
        let (d, a) = (1 + i % 8, 9 + i % 8);
        text.push_str(&format!(
            "vadd vreg{d}, vreg0, vreg{a}\n{{}}\nvmul vreg{a}, vreg{d}, vreg0\n{{}}\n"
        ));
    }
    text.push_str("halt\n");
    text
}

fn bench(c: &mut Criterion) {
    let t = targets::by_name("vliw-systolic").expect("shipped target");
    let m = t.machine();
    let program = assemble(t.isa(), m, "bench.s", &vector_program()).expect("assembles");
    let full = t
        .simulate(m, &program, &[], &Config::default())
        .expect("runs");
    eprintln!(
        "program: {} instructions, {} cycles",
        full.report.instructions, full.report.cycles
    );
    let mut g = c.benchmark_group("simulate_vliw_vector_4k_bundles");
    g.throughput(Throughput::Elements(full.report.instructions));
    g.bench_function("functional", |b| {
        b.iter(|| {
            t.simulate(m, &program, &[], &Config::default())
                .map(|o| o.report.cycles)
        });
    });
    g.bench_function("timing_only", |b| {
        let cfg = Config {
            functional: false,
            ..Config::default()
        };
        b.iter(|| t.simulate(m, &program, &[], &cfg).map(|o| o.report.cycles));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
