//! Back-end pass throughput on long straight-line code, at two sizes so that
//! the ratio shows how each pass scales: register allocation and its checker,
//! list scheduling and its checker.
//!
//! `cargo bench -p compiler --bench passes`.

use compiler::regalloc::{self, VInst, VOperand};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use isa_specs::Machine;
use isa_specs::model::RegFileId;
use isa_specs::target::OpValue;

/// `n` instructions on vliw-systolic's vector registers: 16 interleaved
/// chains of `vexp`/`vadd`, each seeded from a live-in register.
fn chains(m: &Machine, n: usize) -> Vec<VInst> {
    let file = RegFileId::from_index(
        m.regfiles
            .iter()
            .position(|r| r.name == "vreg")
            .expect("vreg"),
    );
    let (vexp, vadd) = (
        m.instruction("vexp").expect("vexp"),
        m.instruction("vadd").expect("vadd"),
    );
    let seed = VOperand::Fixed(OpValue::Reg(0));
    let mut last: Vec<Option<u32>> = vec![None; 16];
    let mut code = Vec::with_capacity(n);
    for k in 0..n {
        let c = k % 16;
        let d = VOperand::Virtual(file, u32::try_from(k).expect("small"));
        let a = last[c].map_or(seed, |v| VOperand::Virtual(file, v));
        code.push(if k % 3 == 0 {
            VInst {
                inst: vadd,
                operands: vec![d, a, seed],
            }
        } else {
            VInst {
                inst: vexp,
                operands: vec![d, a],
            }
        });
        last[c] = Some(u32::try_from(k).expect("small"));
    }
    code
}

fn bench(c: &mut Criterion) {
    let t = targets::by_name("vliw-systolic").expect("shipped target");
    let m = t.machine();
    let mut g = c.benchmark_group("backend_passes");
    g.sample_size(10);
    for n in [1_000usize, 4_000] {
        let code = chains(m, n);
        let allocated = regalloc::allocate(m, &code).expect("fits");
        let bundles = compiler::sched::schedule(t, m, &allocated);
        eprintln!("{n} instructions -> {} bundles", bundles.len());
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("regalloc", n), &code, |b, code| {
            b.iter(|| regalloc::allocate(m, code));
        });
        g.bench_with_input(BenchmarkId::new("regalloc_check", n), &code, |b, code| {
            b.iter(|| regalloc::check(m, code, &allocated).is_ok());
        });
        g.bench_with_input(BenchmarkId::new("schedule", n), &allocated, |b, insts| {
            b.iter(|| compiler::sched::schedule(t, m, insts).len());
        });
        g.bench_with_input(
            BenchmarkId::new("schedule_check", n),
            &allocated,
            |b, insts| b.iter(|| compiler::sched::check(t, m, insts, &bundles).is_ok()),
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
