//! Reductions, softmax and layer normalisation compile for every shipped
//! target that has the operations they need, run on its simulator and match
//! the reference interpreter; a target lacking one names it.

mod onnx_util;

use compiler::onnx::proto::{AttributeProto, NodeProto, TensorProto};
use onnx_util::{encode, folded, graph, import_ok, input, ramp, run_everywhere};

fn model(node: NodeProto, x: &[i64], inits: Vec<TensorProto>) -> compiler::ir::Graph {
    folded(vec![node], x, &["y"], inits)
}

/// Runs `g` everywhere; a target may only fail by lacking one of `may_lack`.
fn check(g: &compiler::ir::Graph, what: &str, may_lack: &[&str]) -> usize {
    let lacks: Vec<String> = may_lack.iter().map(|s| format!("lacks `{s}`")).collect();
    let lacks: Vec<&str> = lacks.iter().map(String::as_str).collect();
    run_everywhere(g, 3, what, &lacks).len()
}

#[test]
fn reductions_over_the_last_dimension_run_everywhere() {
    for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"] {
        // Odd widths: a partial chunk of every register width; one column; many rows.
        for dims in [[3i64, 5, 37], [2, 9, 1], [1, 17, 300]] {
            // At opset 17, ReduceSum takes its axes as an input, the others as an attribute.
            let g = if op == "ReduceSum" {
                let node = NodeProto::new(op, "r", &["x", "axes"], &["y"]);
                model(
                    node,
                    &dims,
                    vec![TensorProto::from_i64("axes", &[1], &[-1])],
                )
            } else {
                let node = NodeProto::new(op, "r", &["x"], &["y"])
                    .with(AttributeProto::ints("axes", &[-1]));
                model(node, &dims, vec![])
            };
            assert_eq!(
                check(&g, &format!("{op} {dims:?}"), &[]),
                targets::all().len()
            );
        }
    }
}

#[test]
fn softmax_runs_on_every_target() {
    for dims in [[4i64, 40], [3, 130]] {
        let node =
            NodeProto::new("Softmax", "s", &["x"], &["y"]).with(AttributeProto::int("axis", -1));
        let g = model(node, &dims, vec![]);
        // systolic-os has no exp: it squares a polynomial (`passes::select`).
        assert_eq!(check(&g, &format!("Softmax {dims:?}"), &[]), 4);
    }
}

#[test]
fn softmax_of_large_and_masked_logits_is_exact_enough() {
    // The max is subtracted first, so exp never overflows; -1e9 (a mask) gives 0.
    let node = NodeProto::new("Add", "mask", &["x", "m"], &["z"]);
    let soft = NodeProto::new("Softmax", "s", &["z"], &["y"]).with(AttributeProto::int("axis", -1));
    let mask: Vec<f32> = (0..4 * 8)
        .map(|i| if i % 8 > i / 8 + 3 { -1e9 } else { 1000.0 })
        .collect();
    let m = TensorProto::from_f32("m", &[4, 8], &mask);
    let mut g = import_ok(&encode(graph(
        vec![node, soft],
        vec![input("x", &[4, 8])],
        &["y"],
        vec![m],
    )));
    compiler::interp::fold_constants(&mut g);
    assert_eq!(check(&g, "masked softmax", &[]), 4);
}

/// A row group that reads a constant mask (its producer's `Add` joins it)
/// and fails to lower on a target falls back to one region per node; the
/// fallback must find the mask's data at home. The failed attempt had packed
/// the mask, then dropped its data but kept it in the packing cache, so the
/// fallback read zeros (a wrong maximum and difference on simd-dsp).
#[test]
fn a_failed_row_group_leaves_no_constant_without_its_data() {
    let add = NodeProto::new("Add", "mask", &["x", "m"], &["z"]);
    let max = NodeProto::new("ReduceMax", "max", &["z"], &["mx"])
        .with(AttributeProto::ints("axes", &[-1]));
    let sub = NodeProto::new("Sub", "shift", &["z", "mx"], &["y"]);
    let mask: Vec<f32> = (0..4 * 8)
        .map(|i| if i % 8 > i / 8 + 3 { -1e9 } else { 1000.0 })
        .collect();
    let m = TensorProto::from_f32("m", &[4, 8], &mask);
    let mut g = import_ok(&encode(graph(
        vec![add, max, sub],
        vec![input("x", &[4, 8])],
        &["y"],
        vec![m],
    )));
    compiler::interp::fold_constants(&mut g);
    assert_eq!(check(&g, "masked shift", &[]), targets::all().len());
}

#[test]
fn layer_normalization_runs_everywhere() {
    for dims in [[6i64, 64], [5, 100]] {
        let c = dims[1];
        let node = NodeProto::new("LayerNormalization", "ln", &["x", "s", "b"], &["y"])
            .with(AttributeProto::int("axis", -1));
        let g = model(
            node,
            &dims,
            vec![ramp("s", &[c], 0.5, 0.01), ramp("b", &[c], -0.25, 0.005)],
        );
        assert_eq!(
            check(&g, &format!("LayerNormalization {dims:?}"), &[]),
            targets::all().len()
        );
    }
}

#[test]
fn a_missing_function_in_a_fused_region_names_the_node_that_needs_it() {
    // Softmax's exp is fused after the subtraction of the maximum; under
    // --strict (no approximation of exp) the error names the exp.
    let node = NodeProto::new("Softmax", "s", &["x"], &["y"]).with(AttributeProto::int("axis", -1));
    let g = model(node, &[4, 40], vec![]);
    let t = targets::by_name("systolic-os").expect("shipped");
    let strict = compiler::lower::Options {
        approximations: false,
        ..Default::default()
    };
    let e = compiler::lower::compile_with(t, t.machine(), &g, strict).expect_err("no exp");
    assert_eq!(e.node(), Some("s/exp"), "{e}");
    assert_eq!(e.op(), Some("Exp"), "{e}");
    // Without it, the softmax runs (exp by squaring a polynomial) and matches.
    run_on(&g, "systolic-os", &[], compiler::lower::Options::default());
}

/// Runs `g` on `target` (its parameters overridden by `set`) with `opts`;
/// the outputs must match the interpreter.
fn run_on(
    g: &compiler::ir::Graph,
    target: &str,
    set: &[(&str, i64)],
    opts: compiler::lower::Options,
) -> compiler::run::RunResult {
    let t = targets::by_name(target).expect("shipped");
    let set: Vec<(String, i64)> = set.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
    let m = t.with_params(&set).expect("parameters");
    let inputs = compiler::run::random_inputs(g, 5);
    let r = compiler::run::run_with(t, &m, g, &inputs, None, opts).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{target}: {:?}", r.checks);
    r
}

/// [`run_on`] `target` with every optimisation, then with `switch` applied.
fn on_and_off(
    g: &compiler::ir::Graph,
    target: &str,
    switch: fn(&mut compiler::lower::Options),
) -> (compiler::run::RunResult, compiler::run::RunResult) {
    let mut off = compiler::lower::Options::default();
    switch(&mut off);
    (
        run_on(g, target, &[], compiler::lower::Options::default()),
        run_on(g, target, &[], off),
    )
}

#[test]
fn row_results_are_broadcast_in_registers_not_widened_by_products() {
    let softmax =
        NodeProto::new("Softmax", "s", &["x"], &["y"]).with(AttributeProto::int("axis", -1));
    let c = 300;
    let ln = NodeProto::new("LayerNormalization", "ln", &["x", "s", "b"], &["y"])
        .with(AttributeProto::int("axis", -1));
    let graphs = [
        ("softmax", model(softmax, &[20, c], vec![])),
        (
            "layernorm",
            model(
                ln,
                &[20, c],
                vec![ramp("s", &[c], 0.5, 0.01), ramp("b", &[c], -0.25, 0.005)],
            ),
        ),
    ];
    let widened = |r: &compiler::run::RunResult| {
        r.compiled
            .regions
            .iter()
            .filter(|(n, _)| n.contains("/widen"))
            .count()
    };
    for target in ["vliw-systolic", "simd-dsp"] {
        for (what, g) in &graphs {
            let on = run_on(g, target, &[], compiler::lower::Options::default());
            let off = run_on(
                g,
                target,
                &[],
                compiler::lower::Options {
                    broadcast_rows: false,
                    ..Default::default()
                },
            );
            assert_eq!(
                widened(&on),
                0,
                "{what} on {target}: {:?}",
                on.compiled.regions
            );
            assert!(
                widened(&off) > 0,
                "{what} on {target}: {:?}",
                off.compiled.regions
            );
            assert!(
                on.report.cycles < off.report.cycles,
                "{what} on {target}: {} cycles broadcast, {} widened",
                on.report.cycles,
                off.report.cycles
            );
        }
    }
}

#[test]
fn rows_too_large_to_stage_whole_are_reduced_in_bands_that_overlap() {
    // 64 rows of 512 (128 KiB) are more than a quarter of 256 KiB of SRAM:
    // the rows come on chip in bands of 8, each transfer issued before the
    // band ahead is reduced, rather than one chunk at a time.
    let stage_off = compiler::lower::Options {
        stage_runs: false,
        ..Default::default()
    };
    for op in ["ReduceMax", "ReduceMean"] {
        let node =
            NodeProto::new(op, "r", &["x"], &["y"]).with(AttributeProto::ints("axes", &[-1]));
        let g = model(node, &[64, 512], vec![]);
        let set = [("SRAM_SIZE", 256 * 1024)];
        let bands = run_on(
            &g,
            "vliw-systolic",
            &set,
            compiler::lower::Options::default(),
        );
        let chunks = run_on(&g, "vliw-systolic", &set, stage_off);
        assert!(
            bands.report.cycles * 3 < chunks.report.cycles * 2,
            "{op}: {} cycles in bands, {} chunk by chunk",
            bands.report.cycles,
            chunks.report.cycles
        );
    }
}

#[test]
fn uniform_constants_are_splatted_into_registers_not_expanded_at_home() {
    // relu(x * 0.5 + 1) / 4 on 64 x 256: every constant is one value.
    let scale = NodeProto::new("Mul", "scale", &["x", "half"], &["s"]);
    let shift = NodeProto::new("Add", "shift", &["s", "one"], &["t"]);
    let relu = NodeProto::new("Relu", "relu", &["t"], &["r"]);
    let div = NodeProto::new("Div", "div", &["r", "four"], &["y"]);
    let g = folded(
        vec![scale, shift, relu, div],
        &[64, 256],
        &["y"],
        vec![
            TensorProto::from_f32("half", &[], &[0.5]),
            TensorProto::from_f32("one", &[1], &[1.0]),
            TensorProto::from_f32("four", &[1, 1], &[4.0]),
        ],
    );
    let r = run_on(
        &g,
        "vliw-systolic",
        &[],
        compiler::lower::Options::default(),
    );
    let data: usize = r.compiled.program.data.iter().map(|d| d.bytes.len()).sum();
    assert_eq!(data, 0, "constants placed at home: {data} bytes");
    // Where the machine has no immediate splat, they are still tiles at home.
    assert_eq!(check(&g, "uniform constants", &[]), targets::all().len());
}

#[test]
fn a_mean_scales_by_a_splatted_reciprocal_not_a_column_read_from_home() {
    // Before, every block of rows read a column of 1/n from home and waited
    // for it: a DMA latency per block.
    let node =
        NodeProto::new("ReduceMean", "r", &["x"], &["y"]).with(AttributeProto::ints("axes", &[-1]));
    let g = model(node, &[64, 768], vec![]);
    let r = run_on(
        &g,
        "vliw-systolic",
        &[],
        compiler::lower::Options::default(),
    );
    let data: usize = r.compiled.program.data.iter().map(|d| d.bytes.len()).sum();
    assert_eq!(data, 0, "constants placed at home: {data} bytes");
}

#[test]
fn constant_rows_are_loaded_into_every_row_of_a_register_not_expanded_at_home() {
    // LayerNormalization's scale and shift are rows broadcast down 64 rows.
    let c = 256;
    let ln = NodeProto::new("LayerNormalization", "ln", &["x", "s", "b"], &["y"])
        .with(AttributeProto::int("axis", -1));
    let g = model(
        ln,
        &[64, c],
        vec![ramp("s", &[c], 0.5, 0.01), ramp("b", &[c], -0.25, 0.005)],
    );
    let data = |target: &str| {
        let r = run_on(&g, target, &[], compiler::lower::Options::default());
        r.compiled
            .program
            .data
            .iter()
            .map(|d| d.bytes.len())
            .sum::<usize>()
    };
    // Two rows of 256 f32 and the mean's small column of 1/n (vliw-systolic
    // has a row-broadcasting load)...
    let vliw = data("vliw-systolic");
    assert!(vliw <= 4096, "{vliw} bytes of constants");
    // ...against both expanded to 64 rows where there is none.
    let simd = data("simd-dsp");
    assert!(simd >= 2 * 64 * 256 * 4, "{simd} bytes of constants");
}

/// GPT-2's layer normalisation as exported: mean, centred, variance, `rsqrt`, scale, shift.
fn gpt2_layer_norm(c: i64) -> (Vec<NodeProto>, Vec<TensorProto>) {
    let mean = |name: &str, x: &str, y: &str| {
        NodeProto::new("ReduceMean", name, &[x], &[y]).with(AttributeProto::ints("axes", &[-1]))
    };
    (
        vec![
            mean("mean", "x", "mu"),
            NodeProto::new("Sub", "centered", &["x", "mu"], &["d"]),
            NodeProto::new("Mul", "square", &["d", "d"], &["d2"]),
            mean("variance", "d2", "var"),
            NodeProto::new("Add", "variance_eps", &["var", "eps"], &["ve"]),
            NodeProto::new("Sqrt", "stddev", &["ve"], &["sd"]),
            NodeProto::new("Reciprocal", "inv_stddev", &["sd"], &["inv"]),
            NodeProto::new("Mul", "normalized", &["d", "inv"], &["n"]),
            NodeProto::new("Mul", "scaled", &["n", "gamma"], &["ns"]),
            NodeProto::new("Add", "shifted", &["ns", "beta"], &["y"]),
        ],
        vec![
            TensorProto::from_f32("eps", &[], &[1e-5]),
            ramp("gamma", &[c], 0.5, 0.01),
            ramp("beta", &[c], -0.25, 0.005),
        ],
    )
}

/// Softmax as its primitive nodes.
fn primitive_softmax() -> Vec<NodeProto> {
    vec![
        NodeProto::new("ReduceMax", "max", &["x"], &["m"])
            .with(AttributeProto::ints("axes", &[-1])),
        NodeProto::new("Sub", "shifted", &["x", "m"], &["s"]),
        NodeProto::new("Exp", "exp", &["s"], &["e"]),
        NodeProto::new("ReduceSum", "sum", &["e", "axes"], &["z"]),
        NodeProto::new("Div", "probs", &["e", "z"], &["y"]),
    ]
}

/// GPT-2's GELU (tanh approximation) as exported: `x` read by four nodes.
fn gpt2_gelu() -> (Vec<NodeProto>, Vec<TensorProto>) {
    (
        vec![
            NodeProto::new("Mul", "square", &["x", "x"], &["x2"]),
            NodeProto::new("Mul", "cube", &["x2", "x"], &["x3"]),
            NodeProto::new("Mul", "cubic", &["x3", "k"], &["c"]),
            NodeProto::new("Add", "poly", &["x", "c"], &["p"]),
            NodeProto::new("Mul", "scaled", &["p", "s"], &["q"]),
            NodeProto::new("Tanh", "tanh", &["q"], &["t"]),
            NodeProto::new("Add", "one_plus", &["t", "one"], &["u"]),
            NodeProto::new("Mul", "half_x", &["x", "half"], &["h"]),
            NodeProto::new("Mul", "gelu", &["h", "u"], &["y"]),
        ],
        vec![
            TensorProto::from_f32("k", &[], &[0.044715]),
            TensorProto::from_f32("s", &[], &[0.797_884_6]),
            TensorProto::from_f32("one", &[], &[1.0]),
            TensorProto::from_f32("half", &[], &[0.5]),
        ],
    )
}

fn row_graphs(rows: i64, c: i64) -> Vec<(&'static str, compiler::ir::Graph)> {
    let (ln, ln_inits) = gpt2_layer_norm(c);
    let (gelu, gelu_inits) = gpt2_gelu();
    vec![
        ("layer norm", folded(ln, &[rows, c], &["y"], ln_inits)),
        (
            "softmax",
            folded(
                primitive_softmax(),
                &[rows, c],
                &["y"],
                vec![TensorProto::from_i64("axes", &[1], &[-1])],
            ),
        ),
        ("gelu", folded(gelu, &[rows, c], &["y"], gelu_inits)),
    ]
}

fn row_regions(r: &compiler::run::RunResult) -> Vec<&String> {
    r.compiled
        .regions
        .iter()
        .map(|(n, _)| n)
        .filter(|n| n.starts_with("Rows:"))
        .collect()
}

/// Vector loads and stores of a compiled program on machine `m` (not
/// counting constant rows loaded into every row of a register).
fn vector_moves(m: &isa_specs::Machine, r: &compiler::run::RunResult) -> usize {
    r.compiled
        .insts
        .iter()
        .filter(|x| {
            let n = &m.instructions[x.inst.index()].name;
            (n.starts_with("vld") && n != "vld_row") || n.starts_with("vst")
        })
        .count()
}

#[test]
fn a_layer_norm_a_softmax_and_a_gelu_are_one_region_each_reading_their_rows_once() {
    // 300 columns: two whole registers of 128 lanes and a partial one.
    let m = targets::by_name("vliw-systolic")
        .expect("shipped")
        .machine();
    for (what, g) in row_graphs(24, 300) {
        let (on, off) = on_and_off(&g, "vliw-systolic", |o| o.fuse_rows = false);
        let fused = row_regions(&on);
        assert_eq!(fused.len(), 1, "{what}: {:?}", on.compiled.regions);
        assert_eq!(
            on.compiled.regions.len(),
            1,
            "{what}: {:?}",
            on.compiled.regions
        );
        assert!(
            row_regions(&off).is_empty(),
            "{what}: {:?}",
            off.compiled.regions
        );
        // Each row in once and out once: 3 blocks of 8 rows x 3 chunks, in and out.
        let (a, b) = (vector_moves(m, &on), vector_moves(m, &off));
        assert!(a <= 2 * 9 + 12, "{what}: {a} vector loads and stores fused");
        assert!(
            2 * a < b,
            "{what}: {a} vector loads and stores fused, {b} not"
        );
        assert!(
            on.report.cycles < off.report.cycles,
            "{what}: {} cycles fused, {} not",
            on.report.cycles,
            off.report.cycles
        );
    }
}

#[test]
fn row_groups_run_everywhere_with_rows_shorter_and_longer_than_a_register() {
    for (rows, c) in [(3, 37), (9, 130)] {
        for (what, g) in row_graphs(rows, c) {
            let may_lack = if what == "layer norm" {
                vec![]
            } else {
                vec!["d = exp(a)", "d = tanh(a)"]
            };
            let lacks: Vec<String> = may_lack.iter().map(|s| format!("lacks `{s}`")).collect();
            let lacks: Vec<&str> = lacks.iter().map(String::as_str).collect();
            let ran = run_everywhere(&g, 7, &format!("{what} {rows}x{c}"), &lacks);
            assert!(ran.contains(&"vliw-systolic"), "{what}: ran on {ran:?}");
        }
    }
}

#[test]
fn a_value_also_read_outside_stays_out_of_the_row_group() {
    // The mean is a graph output too: it is written where others can read it.
    let (ln, inits) = gpt2_layer_norm(256);
    let g = folded(ln, &[16, 256], &["y", "mu"], inits);
    let r = run_on(
        &g,
        "vliw-systolic",
        &[],
        compiler::lower::Options::default(),
    );
    let fused = row_regions(&r);
    assert!(
        fused.iter().all(|n| !n.contains("ReduceMean(mean)")),
        "{:?}",
        r.compiled.regions
    );
    // What follows the variance still is one group.
    assert_eq!(fused.len(), 1, "{:?}", r.compiled.regions);
}

#[test]
fn rows_too_long_for_the_registers_are_lowered_region_by_region() {
    // 8192 columns are 64 registers of 128 lanes: more than the file holds.
    let (ln, inits) = gpt2_layer_norm(8192);
    let g = folded(ln, &[2, 8192], &["y"], inits);
    let r = run_on(
        &g,
        "vliw-systolic",
        &[],
        compiler::lower::Options::default(),
    );
    assert!(row_regions(&r).is_empty(), "{:?}", r.compiled.regions);
}

#[test]
fn a_row_group_read_only_by_products_is_written_in_their_operand_type() {
    // A layer norm feeding a product on vliw-systolic: the norm stores bf16,
    // the type the matrix unit reads, so the product reads it in place
    // instead of converting it through the registers first.
    let (mut nodes, mut inits) = gpt2_layer_norm(256);
    nodes.push(NodeProto::new("MatMul", "proj", &["y", "w"], &["z"]));
    inits.push(ramp("w", &[256, 128], -0.5, 0.0001));
    let g = folded(nodes, &[64, 256], &["z"], inits);
    let m = targets::by_name("vliw-systolic")
        .expect("shipped")
        .machine();
    let r = run_on(
        &g,
        "vliw-systolic",
        &[],
        compiler::lower::Options::default(),
    );
    assert_eq!(row_regions(&r).len(), 1, "{:?}", r.compiled.regions);
    let count = |name: &str| {
        r.compiled
            .insts
            .iter()
            .filter(|x| m.instructions[x.inst.index()].name == name)
            .count()
    };
    // 8 blocks of 8 rows, 2 chunks each: loaded once by the norm, stored
    // once in bf16, and never loaded again to be converted.
    assert_eq!(count("vld"), 16, "{:?}", r.compiled.regions);
    assert_eq!(count("vst_bf16"), 16);
    assert_eq!(count("vst"), 0);
}

#[test]
fn a_gelu_between_two_products_is_computed_by_columns_so_they_overlap() {
    // x · W1 → GELU (tanh form, a fan-out of element-wise nodes: a row group
    // without reductions) → · W2. Computed a column chunk at a time, the
    // second product's first reduction steps need only the first chunks.
    let k = |name: &str, v: f32| TensorProto::from_f32(name, &[1], &[v]);
    let n = |op: &str, name: &str, ins: &[&str]| NodeProto::new(op, name, ins, &[name]);
    let nodes = vec![
        n("MatMul", "h", &["x", "w1"]),
        n("Mul", "sq", &["h", "h"]),
        n("Mul", "cube", &["sq", "h"]),
        n("Mul", "cubic", &["cube", "c1"]),
        n("Add", "poly", &["h", "cubic"]),
        n("Mul", "scaled", &["poly", "c2"]),
        n("Tanh", "th", &["scaled"]),
        n("Mul", "half", &["h", "c3"]),
        n("Add", "onep", &["th", "c4"]),
        n("Mul", "gelu", &["half", "onep"]),
        n("MatMul", "y", &["gelu", "w2"]),
    ];
    let inits = vec![
        ramp("w1", &[128, 1024], -0.02, 0.0000003),
        ramp("w2", &[1024, 128], 0.03, -0.0000004),
        k("c1", 0.044715),
        k("c2", 0.797_884_6),
        k("c3", 0.5),
        k("c4", 1.0),
    ];
    let mut g = import_ok(&encode(graph(
        nodes,
        vec![input("x", &[128, 128])],
        &["y"],
        inits,
    )));
    compiler::interp::fold_constants(&mut g);
    let (on, off) = on_and_off(&g, "vliw-systolic", |o| o.column_chunks = false);
    assert!(
        on.compiled
            .regions
            .iter()
            .any(|(r, _)| r.starts_with("Rows:")),
        "{:?}",
        on.compiled.regions
    );
    assert!(
        on.report.cycles < off.report.cycles,
        "{} cycles by columns, {} by rows",
        on.report.cycles,
        off.report.cycles
    );
}

#[test]
fn a_row_groups_first_band_is_short_so_its_first_block_starts_early() {
    // A layer norm of 256 rows of 768 f32 from HBM: bands of 256 rows
    // (768 KiB), but the first bands grow from 32 rows (32, 32, 64, 128),
    // so the first block of rows waits for 96 KiB instead of the whole
    // band. Switched off with the products' bands (`--no-band-runs`).
    let (nodes, inits) = gpt2_layer_norm(768);
    let g = folded(nodes, &[256, 768], &["y"], inits);
    let (on, off) = on_and_off(&g, "vliw-systolic", |o| o.band_runs = false);
    let m = targets::by_name("vliw-systolic")
        .expect("shipped")
        .machine();
    let first_load = |r: &compiler::run::RunResult| {
        r.compiled
            .bundles
            .iter()
            .position(|b| {
                b.ops
                    .iter()
                    .any(|(_, i)| m.instructions[i.inst.index()].name == "vld")
            })
            .expect("a load")
    };
    let rows_of_first_transfer = |r: &compiler::run::RunResult| {
        r.compiled
            .insts
            .iter()
            .find(|i| m.instructions[i.inst.index()].name.starts_with("dma_ld"))
            .and_then(|i| match i.operands[1] {
                isa_specs::target::OpValue::Imm(n) => Some(n),
                _ => None,
            })
            .expect("a transfer")
    };
    assert_eq!(rows_of_first_transfer(&on), 8, "32 rows over 4 engines");
    assert_eq!(rows_of_first_transfer(&off), 64, "256 rows over 4 engines");
    let (fon, foff) = (first_load(&on), first_load(&off));
    assert!(
        fon + 150 < foff,
        "first load at {fon} growing, {foff} whole"
    );
    assert!(
        on.report.cycles < off.report.cycles,
        "{} cycles growing, {} whole",
        on.report.cycles,
        off.report.cycles
    );
}
