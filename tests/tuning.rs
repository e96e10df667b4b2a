//! The tuning space of matrix products (`compiler::lower::mapping`): every
//! point it lists compiles and computes the same result, mappings given from
//! outside are used or refused with the reason, and `--tune`
//! (`tessera::tune`) never makes a model slower.

use compiler::ir::Graph;
use compiler::lower::mapping::{Mapping, Mappings, Order};
use compiler::lower::{self, Options};
use std::collections::BTreeMap;

fn example(name: &str) -> Graph {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    let mut g = compiler::onnx::import_file(dir.join("model.onnx")).expect("import");
    compiler::interp::fold_constants(&mut g);
    g
}

fn given(target: &str, node: &str, x: Mapping) -> Mappings {
    Mappings {
        target: Some(target.to_owned()),
        mappings: BTreeMap::from([(node.to_owned(), x)]),
    }
}

#[test]
fn the_space_lists_every_product_with_its_choice_and_ranked_estimates() {
    let g = example("mlp_medium");
    for t in targets::all() {
        let c = lower::compile(t, t.machine(), &g).expect("compiles");
        assert_eq!(c.space.len(), 3, "{}: one entry per MatMul", t.name());
        for s in &c.space {
            assert!(!s.given);
            assert!(!s.ranked.is_empty() && !s.axes.is_empty(), "{}", t.name());
            // Best first, and the compiler's choice is a point of the axes.
            assert!(s.ranked.windows(2).all(|w| w[0].estimate <= w[1].estimate));
            let axes = s
                .axes
                .iter()
                .find(|a| a.inst == s.chosen.inst)
                .expect("chosen instruction listed");
            assert!(
                axes.tm.contains(&s.chosen.tm)
                    && axes.tn.contains(&s.chosen.tn)
                    && axes.tk.contains(&s.chosen.tk)
            );
            assert!(s.orders.contains(&s.chosen.order));
        }
    }
}

#[test]
fn the_compilers_own_mappings_given_back_give_the_same_program() {
    let g = example("mlp_medium");
    for t in targets::all() {
        let m = t.machine();
        let c = lower::compile(t, m, &g).expect("compiles");
        let own = Mappings {
            target: Some(m.name.clone()),
            mappings: c
                .space
                .iter()
                .map(|s| (s.node.clone(), s.chosen.clone()))
                .collect(),
        };
        let json = serde_json::to_string(&own).expect("serialises");
        let back = Mappings::from_json(&json).expect("reads back");
        assert_eq!(back, own);
        let again = lower::compile_mapped(t, m, &g, Options::default(), &back).expect("compiles");
        assert_eq!(again.program, c.program, "{}", t.name());
        assert!(again.space.iter().all(|s| s.given));
    }
}

#[test]
fn ranked_alternatives_compile_and_match_the_interpreter() {
    let g = example("mlp_small");
    let inputs = compiler::run::random_inputs(&g, 3);
    for t in targets::all() {
        let m = t.machine();
        let c = lower::compile(t, m, &g).expect("compiles");
        let mut tried = 0;
        for s in &c.space {
            for r in s.ranked.iter().filter(|r| r.mapping != s.chosen).take(3) {
                let ms = given(&m.name, &s.node, r.mapping.clone());
                // A point of the space may still fail to lower (an operand
                // the copies cannot align); it must then say so, not panic.
                let Ok(alt) = lower::compile_mapped(t, m, &g, Options::default(), &ms) else {
                    continue;
                };
                tried += 1;
                let run = compiler::run::run_compiled(t, m, &g, alt, &inputs, None).expect("runs");
                assert!(
                    run.checks.iter().all(|c| c.ok),
                    "{} with {}: {:?}",
                    t.name(),
                    r.mapping,
                    run.checks
                );
            }
        }
        assert!(tried > 0, "{}: no alternative compiled", t.name());
    }
}

#[test]
fn both_orders_compute_the_same_product() {
    // Column-first keeps the weights' runs on chip across row blocks.
    let g = compiler::run::gemm_graph(96, 64, 80);
    let inputs = compiler::run::random_inputs(&g, 5);
    for t in targets::all() {
        let m = t.machine();
        let c = lower::compile(t, m, &g).expect("compiles");
        let s = &c.space[0];
        for order in [Order::Rows, Order::Cols] {
            let x = Mapping {
                order,
                ..s.chosen.clone()
            };
            let alt =
                lower::compile_mapped(t, m, &g, Options::default(), &given(&m.name, &s.node, x))
                    .unwrap_or_else(|e| panic!("{} {order:?}: {e}", t.name()));
            assert_eq!(alt.space[0].chosen.order, order);
            let run = compiler::run::run_compiled(t, m, &g, alt, &inputs, None).expect("runs");
            assert!(run.checks.iter().all(|c| c.ok), "{} {order:?}", t.name());
        }
    }
}

#[test]
fn mappings_the_machine_cannot_take_are_refused_with_the_reason() {
    let g = example("mlp_small");
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let c = lower::compile(t, m, &g).expect("compiles");
    let s = &c.space[0];
    let compile = |ms: &Mappings| {
        lower::compile_mapped(t, m, &g, Options::default(), ms).expect_err("refused")
    };
    // A tile larger than the instruction takes.
    let big = Mapping {
        tm: 4096,
        ..s.chosen.clone()
    };
    let e = compile(&given(&m.name, &s.node, big));
    assert_eq!(e.node(), Some(s.node.as_str()));
    assert!(e.message().contains("cannot be used"), "{e}");
    // An instruction that is not a contraction.
    let e = compile(&given(
        &m.name,
        &s.node,
        Mapping {
            inst: "vadd".into(),
            ..s.chosen.clone()
        },
    ));
    assert!(
        e.message()
            .contains("`vadd` is not a contraction instruction usable"),
        "{e}"
    );
    // A node that is not a product of the model.
    let e = compile(&given(&m.name, "no.such.node", s.chosen.clone()));
    assert!(e.message().contains("`no.such.node`"), "{e}");
    // Mappings chosen for another machine.
    let e = compile(&given("simd-dsp", &s.node, s.chosen.clone()));
    assert!(e.message().contains("chosen for `simd-dsp`"), "{e}");
    // Malformed JSON is located.
    let e = Mappings::from_json("{\"mappings\": {\"x\": {\"inst\": 3}}}").expect_err("bad");
    assert!(e.contains("line 1"), "{e}");
}

#[test]
fn tuning_is_never_slower_and_keeps_results_right() {
    let g = example("mlp_medium");
    let inputs = compiler::run::random_inputs(&g, 7);
    for t in targets::all() {
        let m = t.machine();
        let budget = tessera::tune::Budget {
            time: std::time::Duration::from_secs(20),
            candidates: 3,
        };
        let (c, r) = tessera::tune::tune(t, m, &g, Options::default(), budget).expect("tunes");
        assert!(r.tuned_cycles <= r.default_cycles, "{}: {r:?}", t.name());
        assert!(r.evaluations >= 1 && r.products.len() == 3);
        for p in &r.products {
            assert!(p.best_cycles <= p.default_cycles);
        }
        // The kept mappings are what was compiled.
        for (node, x) in &r.mappings.mappings {
            let s = c.space.iter().find(|s| s.node == *node).expect("product");
            assert_eq!(s.chosen, *x);
        }
        let timed = compiler::run::timing(t, m, &c).expect("simulates");
        assert_eq!(timed.cycles, r.tuned_cycles);
        let run = compiler::run::run_compiled(t, m, &g, c, &inputs, None).expect("runs");
        assert!(run.checks.iter().all(|c| c.ok), "{}", t.name());
    }
}

#[test]
fn the_weights_are_loaded_once_across_row_blocks_when_they_fit() {
    // 512 rows are two row blocks of vliw-systolic's 256-row tiles: the
    // weights' staged runs serve both, so the home memory is read for the
    // input once and the (bf16-packed) weights once.
    let (m_, k, n) = (512, 256, 256);
    let g = compiler::run::gemm_graph(m_, k, n);
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let c = lower::compile(t, m, &g).expect("compiles");
    assert_eq!(c.space[0].chosen.order, Order::Rows);
    assert!(c.space[0].chosen.tm < m_ as i64, "several row blocks");
    let r = compiler::run::timing(t, m, &c).expect("simulates");
    let hbm = r.memories.iter().find(|x| x.name == "hbm").expect("hbm");
    let once = (m_ * k * 4 + k * n * 2) as u64;
    assert_eq!(
        hbm.bytes_read, once,
        "input f32 + weights bf16, each read once"
    );
    // Without operand reuse the weights are read again for every row block.
    let off = Options {
        operand_reuse: false,
        ..Options::default()
    };
    let c = lower::compile_with(t, m, &g, off).expect("compiles");
    let r = compiler::run::timing(t, m, &c).expect("simulates");
    let hbm = r.memories.iter().find(|x| x.name == "hbm").expect("hbm");
    assert!(hbm.bytes_read > once, "{} bytes", hbm.bytes_read);
}

#[test]
fn a_large_transfer_is_spread_over_the_dma_engines() {
    // vliw-systolic has four DMA engines of 512 bytes per cycle behind a
    // 1142-byte HBM: a 256-row block of a 512-wide f32 input (512 KiB) goes
    // as four transfers of 64 rows signalling one semaphore (brought whole,
    // without bands; with bands, each band goes as four). Both 256-row
    // blocks whole (not the last in halves, which go as two transfers).
    let g = compiler::run::gemm_graph(512, 512, 512);
    let t = targets::by_name("vliw-systolic").expect("target");
    let blocks = Options {
        split_last_rows: false,
        ..Options::default()
    };
    let whole = Options {
        band_runs: false,
        ..blocks
    };
    let loads = |c: &lower::Compiled| -> Vec<String> {
        c.selected_text(t.machine())
            .into_iter()
            .filter(|l| l.starts_with("dma_ld_f32"))
            .collect()
    };
    let c = lower::compile_with(t, t.machine(), &g, whole).expect("compiles");
    let l = loads(&c);
    assert_eq!(l.len(), 8, "{l:#?}");
    assert!(l.iter().all(|l| l.contains(", 64, 512, 512,")), "{l:#?}");
    let c = lower::compile_with(t, t.machine(), &g, blocks).expect("compiles");
    let l = loads(&c);
    // Bands of 128, 128 and 256 columns, each in four transfers of 64 rows.
    assert_eq!(l.len(), 24, "{l:#?}");
    assert!(
        l.iter()
            .all(|l| l.starts_with("dma_ld_f32 sem") && l.contains(", 64, ")),
        "{l:#?}"
    );
    let inputs = compiler::run::random_inputs(&g, 9);
    let run = compiler::run::run_compiled(t, t.machine(), &g, c, &inputs, None).expect("runs");
    assert!(run.checks.iter().all(|c| c.ok));
}

#[test]
fn staged_runs_come_in_bands_so_the_first_passes_start_early() {
    // GEMM 512³ on vliw-systolic: the first 256-row block of the f32 input
    // (512 KiB) comes on chip in bands of 128, 128 and 256 columns, each
    // converted to bf16 as it lands, so the first pass waits for one band
    // instead of the whole block.
    let g = compiler::run::gemm_graph(512, 512, 512);
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let first_pass = |c: &lower::Compiled| {
        c.bundles
            .iter()
            .position(|b| {
                b.ops
                    .iter()
                    .any(|(_, i)| m.instructions[i.inst.index()].name.starts_with("mmul"))
            })
            .expect("a pass")
    };
    let banded = lower::compile(t, m, &g).expect("compiles");
    let whole = Options {
        band_runs: false,
        ..Options::default()
    };
    let whole = lower::compile_with(t, m, &g, whole).expect("compiles");
    let (fb, fw) = (first_pass(&banded), first_pass(&whole));
    assert!(fb + 300 < fw, "first pass at {fb} in bands, {fw} whole");
    let cycles = |c: &lower::Compiled| compiler::run::timing(t, m, c).expect("simulates").cycles;
    let (cb, cw) = (cycles(&banded), cycles(&whole));
    assert!(cb < cw, "{cb} cycles in bands, {cw} whole");
    let inputs = compiler::run::random_inputs(&g, 5);
    let run = compiler::run::run_compiled(t, m, &g, banded, &inputs, None).expect("runs");
    assert!(run.checks.iter().all(|c| c.ok));
}

/// How many times a product compiled for vliw-systolic converts a register
/// of its f32 input to bf16 (`vst_bf16`), and the compiled product.
fn conversions(g: &Graph) -> (usize, lower::Compiled) {
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let c = lower::compile(t, m, g).expect("compiles");
    let n = c
        .insts
        .iter()
        .filter(|i| m.instructions[i.inst.index()].name == "vst_bf16")
        .count();
    (n, c)
}

#[test]
fn a_staged_run_wider_than_one_transfer_comes_in_column_chunks_and_serves_every_column() {
    // K = 4096: the input's run of the whole reduction ends in a band of
    // 2048 columns, wider than vliw-systolic's transfers take (1024). It
    // comes in chunks of 1024 columns instead of failing, so the run is
    // still staged once and every column tile reads it: the input is
    // converted to bf16 once whether there are one or two column tiles
    // (unstaged, each column tile converted its own steps again).
    let (one, _) = conversions(&compiler::run::gemm_graph(16, 4096, 128));
    let g = compiler::run::gemm_graph(16, 4096, 256);
    let (two, c) = conversions(&g);
    assert!(one > 0);
    assert_eq!(two, one, "the run is staged once for both column tiles");
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let inputs = compiler::run::random_inputs(&g, 7);
    let run = compiler::run::run_compiled(t, m, &g, c, &inputs, None).expect("runs");
    assert!(run.checks.iter().all(|c| c.ok));
}

#[test]
fn a_run_of_a_long_reduction_is_staged_once_for_every_column_tile() {
    // K = 8192 in blocks of 256 rows: the input's run (8 MiB counted in
    // f32) is a quarter of vliw-systolic's 32 MiB SRAM and is staged whole.
    // Cut in two runs (an eighth of the memory each, before 2026-12-04),
    // every column tile staged and converted both again: a GEMM of
    // 1024 x 8192 x 1024 converted its input eight times and ran at 44%.
    let at = |n: usize| conversions(&compiler::run::gemm_graph(256, 8192, n)).0;
    let one = at(128);
    assert!(one > 0);
    assert_eq!(at(256), one, "staged once for both column tiles");
}

#[test]
fn the_tile_search_keeps_a_long_reduction_in_one_run() {
    // K = 16384: a run of 256 rows (16 MiB counted in f32) is over a
    // quarter of the SRAM and would be staged again for each column tile;
    // one of 128 rows fits. The estimate used to charge the HBM's latency
    // to every reduction step, which made 256-row blocks look best (a GEMM
    // of 512 x 16384 x 512 ran at 37%); staged runs wait once per run, and
    // blocks of 128 rows are chosen: the input is converted once.
    let (n, c) = conversions(&compiler::run::gemm_graph(256, 16384, 256));
    // One conversion per 8 x 128 register of the input.
    assert_eq!(n, 256 * 16384 / (8 * 128), "{:?}", c.space);
}
