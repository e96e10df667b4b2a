//! Decode attention's scores: one row per head against a transposed cache
//! of keys (`q · kᵀ`), on every target. Where a machine has no transposing
//! copy (pim-dram), the transpose was done element by element (two scalar
//! instructions per element: 1.6 M for GPT-2's 12 heads of 1025 × 64);
//! the product now takes dot products with the rows of `k` instead.

mod onnx_util;

use compiler::ir::{ElemType, Graph, Op, TensorType};

fn scores(heads: usize, keys: usize, d: usize) -> Graph {
    let mut g = Graph::default();
    let ty = |shape: Vec<usize>| TensorType {
        elem: ElemType::F32,
        shape,
    };
    let q = g.add_value("q", ty(vec![heads, 1, d]));
    let k = g.add_value("k", ty(vec![heads, keys, d]));
    g.inputs.extend([q, k]);
    let kt = g
        .add_node(
            "k.t",
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            vec![k],
        )
        .expect("typed")[0];
    let y = g
        .add_node("scores", Op::MatMul, vec![q, kt])
        .expect("typed")[0];
    g.outputs.push(y);
    g
}

#[test]
fn one_row_against_a_transposed_cache_runs_everywhere() {
    let g = scores(3, 1025, 64);
    let ran = onnx_util::run_everywhere(&g, 6, "scores", &[]);
    assert_eq!(ran.len(), targets::all().len());
}

#[test]
fn pim_dram_takes_dot_products_not_an_element_transpose() {
    let (heads, keys) = (3, 1025);
    let g = scores(heads, keys, 64);
    let t = targets::by_name("pim-dram").expect("target");
    let m = t.machine();
    let c = compiler::lower::compile(t, m, &g).expect("compiles");
    let store = m
        .instructions
        .iter()
        .position(|i| i.name == "sst")
        .expect("pim-dram's scalar store");
    let stores = c.insts.iter().filter(|i| i.inst.index() == store).count();
    // One per score; the element transpose stored every element of `k`.
    assert!(stores <= heads * keys, "{stores} scalar stores");
}

/// The decode form exporters write: the new key appended to the cache of
/// earlier ones (`Concat` along the keys), then the scores against all.
fn scores_after_append(heads: usize, past: usize, d: usize) -> Graph {
    let mut g = Graph::default();
    let ty = |shape: Vec<usize>| TensorType {
        elem: ElemType::F32,
        shape,
    };
    let q = g.add_value("q", ty(vec![1, heads, 1, d]));
    let k_past = g.add_value("past_k", ty(vec![1, heads, past, d]));
    let k_new = g.add_value("k", ty(vec![1, heads, 1, d]));
    g.inputs.extend([q, k_past, k_new]);
    let all = g
        .add_node("k.all", Op::Concat { axis: 2 }, vec![k_past, k_new])
        .expect("typed")[0];
    let kt = g
        .add_node(
            "k.t",
            Op::Transpose {
                perm: vec![0, 1, 3, 2],
            },
            vec![all],
        )
        .expect("typed")[0];
    let y = g
        .add_node("scores", Op::MatMul, vec![q, kt])
        .expect("typed")[0];
    g.outputs.push(y);
    g
}

#[test]
fn scores_against_an_appended_cache_run_everywhere() {
    // 600 + 1 keys: a block of 512 banks and a part of one.
    let g = scores_after_append(3, 600, 64);
    let ran = onnx_util::run_everywhere(&g, 8, "scores after append", &[]);
    assert_eq!(ran.len(), targets::all().len());
}

#[test]
fn pim_dram_reads_the_key_cache_in_its_banks_and_only_appends() {
    let (heads, past, d) = (3, 600, 64);
    let g = scores_after_append(heads, past, d);
    let t = targets::by_name("pim-dram").expect("target");
    let m = t.machine();
    let count = |c: &compiler::lower::Compiled, name: &str| {
        let i = m
            .instructions
            .iter()
            .position(|i| i.name == name)
            .expect("an instruction of pim-dram");
        c.insts.iter().filter(|x| x.inst.index() == i).count()
    };
    let c = compiler::lower::compile(t, m, &g).expect("compiles");
    // One all-bank MAC per head and block of 512 keys; no dot product on
    // the controller's vector unit.
    let blocks = (past + 1).div_ceil(512);
    assert_eq!(count(&c, "mac"), heads * blocks);
    assert_eq!(count(&c, "vredsum"), 0);
    // The runner writes the cache in bf16, one key per bank row, each
    // head's rows from a stripe-aligned start: the step appends `k` only.
    let desc = c
        .program
        .inputs
        .iter()
        .find(|d| d.name == "past_k")
        .expect("the cache is an input");
    assert_eq!(desc.dtype, isa_specs::model::DType::Bf16);
    assert_eq!(desc.pitch, 1024);
    let stripe = 512 * 2048;
    assert_eq!(desc.batch, Some((past as u64, 1024 * 1024)));
    assert_eq!(desc.addr % stripe, 0);
    // Appending converts and stores `heads` rows of `d` elements, not the cache.
    assert!(
        count(&c, "vstbf") <= heads,
        "{} conversions",
        count(&c, "vstbf")
    );
    assert!(count(&c, "dmast") <= heads, "{} stores", count(&c, "dmast"));
    // The layout survives the assembly text.
    let text = isa_specs::assembly::disassemble(t.isa(), m, &c.program).expect("disassembles");
    assert!(text.contains("pitch 1024 batch 600 1048576"), "{text:.400}");
    let back = isa_specs::assembly::assemble(t.isa(), m, "decode.s", &text).expect("assembles");
    assert_eq!(back.inputs, c.program.inputs);
    let r = onnx_util::run_checked("pim-dram", &g);
    assert!(r.checks.iter().all(|c| c.ok));
    // Without it, the scores are dot products on the vector unit and the
    // cache is copied.
    let opts = compiler::lower::Options {
        in_place_rows: false,
        ..Default::default()
    };
    let c = compiler::lower::compile_with(t, m, &g, opts).expect("compiles");
    assert_eq!(count(&c, "mac"), 0);
}

/// The values side of decode attention: `p · Concat(past_v, v)`.
fn context_after_append(heads: usize, past: usize, d: usize) -> Graph {
    let mut g = Graph::default();
    let ty = |shape: Vec<usize>| TensorType {
        elem: ElemType::F32,
        shape,
    };
    let p = g.add_value("p", ty(vec![1, heads, 1, past + 1]));
    let v_past = g.add_value("past_v", ty(vec![1, heads, past, d]));
    let v_new = g.add_value("v", ty(vec![1, heads, 1, d]));
    g.inputs.extend([p, v_past, v_new]);
    let all = g
        .add_node("v.all", Op::Concat { axis: 2 }, vec![v_past, v_new])
        .expect("typed")[0];
    let y = g
        .add_node("context", Op::MatMul, vec![p, all])
        .expect("typed")[0];
    g.outputs.push(y);
    g
}

#[test]
fn a_cache_joined_with_the_new_row_is_appended_to_on_every_target() {
    let (heads, past, d) = (3, 200, 64);
    let g = context_after_append(heads, past, d);
    for t in targets::all() {
        let m = t.machine();
        let c = compiler::lower::compile(t, m, &g).expect("compiles");
        let desc = c
            .program
            .inputs
            .iter()
            .find(|x| x.name == "past_v")
            .expect("the cache is an input");
        // Each head's cached rows, with room for the new one after them;
        // or, where the join fits on chip (simd-dsp, vliw-systolic), kept
        // there.
        let pitch = desc.row_pitch();
        if desc.columns.is_some() {
            // Stored transposed where the banks compute (see
            // `pim_dram_reads_the_value_cache_in_its_banks_and_only_appends`).
            assert_eq!(t.name(), "pim-dram");
        } else if c.kept_on_chip == 0 {
            assert_eq!(
                desc.batch,
                Some((past as u64, (past as u64 + 1) * pitch)),
                "{}",
                t.name()
            );
        } else {
            assert_ne!(t.name(), "pim-dram");
        }
        let out = onnx_util::run_checked(t.name(), &g);
        assert!(out.checks.iter().all(|c| c.ok));
        // Without it, the cache is dense and copied.
        let opts = compiler::lower::Options {
            append_in_place: false,
            ..Default::default()
        };
        let c = compiler::lower::compile_with(t, m, &g, opts).expect("compiles");
        let desc = c
            .program
            .inputs
            .iter()
            .find(|x| x.name == "past_v")
            .expect("input");
        assert_eq!(desc.batch, None, "{}", t.name());
    }
}

/// The values in pim-dram's banks: each channel of a head is a bank row of
/// cached values (chunks of 1024, a stripe apart), the step appends one
/// column per head, and `p · V` is one all-bank MAC per head and chunk.
/// Cache lengths around the chunk and the transfer alignment: the empty
/// columns before the first (`skip`) make the appended one start a
/// transfer.
#[test]
fn pim_dram_reads_the_value_cache_in_its_banks_and_only_appends() {
    let t = targets::by_name("pim-dram").expect("target");
    let m = t.machine();
    let count = |c: &compiler::lower::Compiled, name: &str| {
        let i = m
            .instructions
            .iter()
            .position(|i| i.name == name)
            .expect("an instruction of pim-dram");
        c.insts.iter().filter(|x| x.inst.index() == i).count()
    };
    let d = 64;
    for (heads, past, skip) in [
        (2, 200, 8),
        (1, 1023, 1),
        (2, 1024, 0),
        (1, 1500, 4),
        (1, 5, 11),
    ] {
        let mut g = context_after_append(heads, past, d);
        let all = g.nodes[0].outputs[0];
        g.outputs.push(all);
        let all_name = g.values[all.index()].name.clone();
        let c = compiler::lower::compile(t, m, &g).expect("compiles");
        let chunks = (skip + past + 1).div_ceil(1024);
        assert_eq!(count(&c, "mac"), heads * chunks, "cache of {past}");
        // The append: one column transfer per head; no copy of the cache.
        assert_eq!(count(&c, "dmast"), heads, "cache of {past}");
        let stripe = 512 * 1024;
        let want = isa_specs::program::Columns {
            skip: skip as u64,
            chunk: 1024,
            stride: stripe,
        };
        for (name, list, n) in [
            ("past_v", &c.program.inputs, past),
            (all_name.as_str(), &c.program.outputs, past + 1),
        ] {
            let desc = list.iter().find(|x| x.name == name).expect(name);
            assert_eq!(desc.columns, Some(want), "{name} of {past}");
            assert_eq!(desc.shape, [1, heads as u64, n as u64, d as u64]);
            assert_eq!(desc.pitch, 1024);
            assert_eq!(desc.dtype, isa_specs::model::DType::Bf16);
            if heads > 1 {
                assert_eq!(desc.batch, Some((d as u64, chunks as u64 * stripe)));
            }
        }
        let text = isa_specs::assembly::disassemble(t.isa(), m, &c.program).expect("disassembles");
        assert!(
            text.contains(&format!("columns {skip} 1024 {stripe}")),
            "{text:.400}"
        );
        let back = isa_specs::assembly::assemble(t.isa(), m, "decode.s", &text).expect("assembles");
        assert_eq!(back.outputs, c.program.outputs);
        let r = onnx_util::run_checked("pim-dram", &g);
        assert!(
            r.checks.iter().all(|c| c.ok),
            "cache of {past}: {:?}",
            r.checks
        );
    }
    // Without it, the values are read by the controller.
    let g = context_after_append(1, 200, d);
    let opts = compiler::lower::Options {
        in_place_rows: false,
        ..Default::default()
    };
    let c = compiler::lower::compile_with(t, m, &g, opts).expect("compiles");
    assert_eq!(count(&c, "mac"), 0);
}

/// Exporters also return the cache with the new key (`present`): the
/// output is then the cache in the banks' layout, read back by the runner.
#[test]
fn the_appended_key_cache_can_be_an_output_and_stays_in_the_banks() {
    let (heads, past, d) = (2, 100, 64);
    let mut g = scores_after_append(heads, past, d);
    let all = g
        .nodes
        .iter()
        .find(|n| matches!(n.op, Op::Concat { .. }))
        .expect("the join")
        .outputs[0];
    g.outputs.push(all);
    let t = targets::by_name("pim-dram").expect("target");
    let m = t.machine();
    let c = compiler::lower::compile(t, m, &g).expect("compiles");
    let mac = m
        .instructions
        .iter()
        .position(|i| i.name == "mac")
        .expect("mac");
    assert_eq!(
        c.insts.iter().filter(|i| i.inst.index() == mac).count(),
        heads
    );
    let present = &c.program.outputs[1];
    assert_eq!(present.batch, Some((past as u64 + 1, 512 * 1024)));
    let r = onnx_util::run_checked("pim-dram", &g);
    assert_eq!(r.checks.len(), 2);
}

/// A row reduction over rows wider than one transfer takes (1025 scores
/// against pim-dram's 1024-element DMA) is staged on chip in pieces of
/// columns and its whole registers combined before one reduction across
/// the lanes, not reduced register by register from home.
#[test]
fn rows_wider_than_a_transfer_are_staged_in_pieces_and_reduced_once() {
    let (rows, cols) = (4, 1025);
    let mut g = Graph::default();
    let x = g.add_value(
        "x",
        TensorType {
            elem: ElemType::F32,
            shape: vec![rows, cols],
        },
    );
    g.inputs.push(x);
    let y = g
        .add_node(
            "max",
            Op::Reduce {
                kind: compiler::ir::ReduceKind::Max,
                axes: vec![1],
                keepdims: true,
            },
            vec![x],
        )
        .expect("typed")[0];
    g.outputs.push(y);
    let t = targets::by_name("pim-dram").expect("target");
    let m = t.machine();
    let c = compiler::lower::compile(t, m, &g).expect("compiles");
    let red = m
        .instructions
        .iter()
        .position(|i| i.name == "vredmax")
        .expect("pim-dram's lane maximum");
    let n = c.insts.iter().filter(|i| i.inst.index() == red).count();
    // The 16 whole registers of a row in one reduction, the last element in another.
    assert!(n <= 2 * rows, "{n} lane reductions for {rows} rows");
    let r = onnx_util::run_checked("pim-dram", &g);
    assert!(r.checks.iter().all(|c| c.ok));
}
