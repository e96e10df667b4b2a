//! Values kept on chip across regions (`compiler::lower::Options::residency`):
//! the same outputs with and without it, less home traffic and fewer cycles
//! with it where the machine can keep them, the reason where it cannot, and
//! the copies that write into a value kept on chip.

use compiler::ir::{ElemType, Graph, Op, TensorType, ValueId};
use compiler::lower::Options;
use std::path::Path;

fn off() -> Options {
    Options {
        residency: false,
        ..Options::default()
    }
}

fn example(name: &str) -> Graph {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    let mut g = compiler::onnx::import_file(dir.join("model.onnx")).expect("import");
    compiler::interp::fold_constants(&mut g);
    g
}

fn home_bytes(t: &targets::Target, r: &targets::sim::Report) -> u64 {
    let home: Vec<&str> = t
        .machine()
        .memories
        .iter()
        .filter(|m| m.kind.off_chip())
        .map(|m| m.name.as_str())
        .collect();
    r.memories
        .iter()
        .filter(|m| home.contains(&m.name.as_str()))
        .map(|m| m.bytes_read + m.bytes_written)
        .sum()
}

#[test]
fn kept_values_agree_and_save_home_traffic_and_cycles() {
    for (model, target) in [
        ("gpt2_block_small", "vliw-systolic"),
        ("mlp_medium", "vliw-systolic"),
        ("gpt2_block_small", "simd-dsp"),
    ] {
        let g = example(model);
        let t = targets::by_name(target).expect("target");
        let inputs = compiler::run::random_inputs(&g, 11);
        let on = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("kept");
        let plain =
            compiler::run::run_with(t, t.machine(), &g, &inputs, None, off()).expect("plain");
        assert!(
            on.checks.iter().all(|c| c.ok),
            "{model} on {target}: {:?}",
            on.checks
        );
        assert!(
            plain.checks.iter().all(|c| c.ok),
            "{model} on {target}: {:?}",
            plain.checks
        );
        assert!(
            on.compiled.notes.iter().all(|n| !n.contains("kept")),
            "{model} on {target}: {:?}",
            on.compiled.notes
        );
        // Without residency only attention's intermediates stay on chip.
        assert!(
            on.compiled.kept_on_chip > plain.compiled.kept_on_chip,
            "{model} on {target}: {} kept, {} plain",
            on.compiled.kept_on_chip,
            plain.compiled.kept_on_chip
        );
        let (a, b) = (home_bytes(t, &on.report), home_bytes(t, &plain.report));
        assert!(a < b, "{model} on {target}: {a} home bytes kept, {b} plain");
        assert!(
            on.report.cycles < plain.report.cycles,
            "{model} on {target}: {} cycles kept, {} plain",
            on.report.cycles,
            plain.report.cycles
        );
        // The roofline counts only what must cross the home memory.
        assert!(
            on.compiled
                .region_stats
                .iter()
                .map(|r| r.home_bytes)
                .sum::<u64>()
                < plain
                    .compiled
                    .region_stats
                    .iter()
                    .map(|r| r.home_bytes)
                    .sum::<u64>()
        );
    }
}

#[test]
fn a_machine_without_a_round_trip_into_its_landing_memory_says_why() {
    let g = example("mlp_medium");
    let t = targets::by_name("pim-dram").expect("target");
    let c = compiler::lower::compile(t, t.machine(), &g).expect("compiles");
    assert!(
        c.notes.iter().any(|n| n
            .starts_with("values not kept on chip across regions: no instruction sequence writes")),
        "{:?}",
        c.notes
    );
    assert_eq!(c.kept_on_chip, 0);
}

/// `past` `[1, heads, rows, 16]` joined with one new row per head, then
/// doubled: the join's result is kept on chip, and the new rows land
/// `rows + 1` rows apart in it.
fn kv_append(heads: usize, rows: usize) -> Graph {
    let mut g = Graph::default();
    let ty = |shape: Vec<usize>| TensorType {
        elem: ElemType::F32,
        shape,
    };
    let past = g.add_value("past", ty(vec![1, heads, rows, 16]));
    let new = g.add_value("new", ty(vec![1, heads, 1, 16]));
    g.inputs.extend([past, new]);
    let one = |g: &mut Graph, name: &str, op: Op, ins: Vec<ValueId>| -> ValueId {
        g.add_node(name, op, ins).expect("node")[0]
    };
    let all = one(&mut g, "all", Op::Concat { axis: 2 }, vec![past, new]);
    let y = one(&mut g, "twice", Op::Add, vec![all, all]);
    g.outputs.push(y);
    g
}

#[test]
fn rows_far_apart_are_written_into_a_kept_value_one_by_one() {
    // On vliw-systolic a kept value's rows are 128 elements apart: the new
    // rows, 129 rows apart, are a stride no vector store takes, so they go
    // one transfer each instead of moving the join to the home memory.
    let g = kv_append(2, 128);
    let t = targets::by_name("vliw-systolic").expect("target");
    let inputs = compiler::run::random_inputs(&g, 3);
    let r = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
    assert!(r.compiled.notes.is_empty(), "{:?}", r.compiled.notes);
    // The join itself stays on chip (nothing else is a candidate).
    assert_eq!(r.compiled.kept_on_chip, 1);
}

#[test]
fn evenly_spaced_rows_are_joined_in_few_transfers() {
    // Each head's 64 past rows are one run in and one run out; before, every
    // row took its own transfers (four instructions a row).
    let g = kv_append(4, 64);
    for t in targets::all() {
        let inputs = compiler::run::random_inputs(&g, 5);
        let r = compiler::run::run_with(t, t.machine(), &g, &inputs, None, off()).expect("runs");
        assert!(
            r.checks.iter().all(|c| c.ok),
            "{}: {:?}",
            t.name(),
            r.checks
        );
        let (_, n) = r
            .compiled
            .regions
            .iter()
            .find(|(name, _)| name.starts_with("Concat(all)"))
            .expect("the join");
        assert!(
            *n < 4 * 64,
            "{}: {n} instructions for 4 x 65 rows",
            t.name()
        );
    }
}
