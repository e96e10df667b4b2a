//! Slice, Split, Concat, Where and Transpose compile for every shipped
//! target that can move the data, run on its simulator and match the
//! reference interpreter; the others refuse with the reason.

mod onnx_util;

use compiler::onnx::proto::{AttributeProto, NodeProto, TensorProto};
use onnx_util::{folded, run_checked, run_everywhere};

fn build(
    nodes: Vec<NodeProto>,
    x: &[i64],
    outs: &[&str],
    inits: Vec<TensorProto>,
) -> compiler::ir::Graph {
    folded(nodes, x, outs, inits)
}

/// Runs `g` on every target; a target may refuse only with a message containing one of `may_refuse`.
fn check(g: &compiler::ir::Graph, what: &str, may_refuse: &[&str]) -> Vec<&'static str> {
    run_everywhere(g, 5, what, may_refuse)
}

/// Runs `g` on vliw-systolic, checks its outputs against the interpreter,
/// and returns the regions and the instruction count of the first whose
/// name starts with `prefix`.
fn vliw_region(g: &compiler::ir::Graph, prefix: &str) -> (Vec<(String, usize)>, usize) {
    let regions = run_checked("vliw-systolic", g).compiled.regions;
    let n = regions
        .iter()
        .find(|(name, _)| name.starts_with(prefix))
        .map(|(_, n)| *n)
        .unwrap_or_else(|| panic!("no {prefix} region: {regions:?}"));
    (regions, n)
}

fn relu() -> NodeProto {
    NodeProto::new("Relu", "relu", &["x"], &["r"])
}

#[test]
fn slices_with_steps_along_leading_dimensions_run_everywhere() {
    let s = NodeProto::new("Slice", "s", &["r", "st", "en", "ax", "sp"], &["y"]);
    let i = |n: &str, v: &[i64]| TensorProto::from_i64(n, &[v.len() as i64], v);
    let g = build(
        vec![relu(), s],
        &[4, 7, 16],
        &["y"],
        vec![
            i("st", &[3, 1]),
            i("en", &[0, 7]),
            i("ax", &[0, 1]),
            i("sp", &[-2, 2]),
        ],
    );
    assert_eq!(check(&g, "slice", &[]).len(), targets::all().len());
}

/// Rows reversed (`step -1` on the first axis) of a width the transfers'
/// alignment does not divide: each row lands at an aligned row of its
/// buffer (the second landed 400 bytes in, misaligned, on vliw-systolic
/// and simd-dsp; a bidirectional recurrent model reverses its sequence so).
#[test]
fn a_reversed_slice_of_unaligned_rows_runs_everywhere() {
    let s = NodeProto::new("Slice", "s", &["r", "st", "en", "ax", "sp"], &["y"]);
    let i = |n: &str, v: &[i64]| TensorProto::from_i64(n, &[v.len() as i64], v);
    let g = build(
        vec![relu(), s],
        &[2, 1, 100],
        &["y"],
        vec![
            i("st", &[-1]),
            i("en", &[-3]),
            i("ax", &[0]),
            i("sp", &[-1]),
        ],
    );
    assert_eq!(check(&g, "reversed", &[]).len(), targets::all().len());
}

#[test]
fn split_and_concat_at_aligned_columns_run_everywhere() {
    // 3 x 16 f32 columns: 64-byte parts, on every machine's transfer alignment.
    let split = NodeProto::new("Split", "sp", &["x", "parts"], &["a", "b", "c"])
        .with(AttributeProto::int("axis", -1));
    let add = NodeProto::new("Add", "add", &["a", "c"], &["ac"]);
    let cat = NodeProto::new("Concat", "cat", &["ac", "b", "ac"], &["y"])
        .with(AttributeProto::int("axis", -1));
    let cat0 =
        NodeProto::new("Concat", "cat0", &["b", "ac"], &["z"]).with(AttributeProto::int("axis", 0));
    let g = build(
        vec![split, add, cat, cat0],
        &[5, 48],
        &["y", "z"],
        vec![TensorProto::from_i64("parts", &[3], &[16, 16, 16])],
    );
    assert_eq!(check(&g, "split/concat", &[]).len(), targets::all().len());
}

#[test]
fn unaligned_column_offsets_shift_on_chip_where_the_machine_has_scalar_moves() {
    let i = |n: &str, v: i64| TensorProto::from_i64(n, &[1], &[v]);
    // Columns 5..18 of 40, and a join at column 10.
    let s = NodeProto::new("Slice", "s", &["r", "st", "en", "ax"], &["y"]);
    let g = build(
        vec![relu(), s],
        &[6, 40],
        &["y"],
        vec![i("st", 5), i("en", 18), i("ax", 1)],
    );
    let cat = NodeProto::new("Concat", "cat", &["x", "r", "x"], &["z"])
        .with(AttributeProto::int("axis", -1));
    let j = build(vec![relu(), cat], &[2, 3, 10], &["z"], vec![]);
    for (g, what) in [(g, "unaligned slice"), (j, "unaligned join")] {
        // systolic-os moves 2-byte-aligned tiles; vliw-systolic and pim-dram shift
        // through f32 scalar registers; simd-dsp moves the bits through its
        // i32 scalar registers in L1.
        assert_eq!(check(&g, what, &[]).len(), targets::all().len(), "{what}");
    }
}

#[test]
fn where_with_a_constant_mask_runs_everywhere() {
    let mask: Vec<u8> = (0..64).map(|i| u8::from(i % 8 <= i / 8)).collect();
    let m = TensorProto::from_raw(
        "m",
        compiler::onnx::proto::tensor_proto::DataType::Bool,
        &[8, 8],
        mask,
    );
    let lo = TensorProto::from_f32("lo", &[], &[-1e9]);
    // A constant other operand (a causal mask), and two computed ones.
    let w1 = NodeProto::new("Where", "w1", &["m", "x", "lo"], &["y"]);
    let w2 = NodeProto::new("Where", "w2", &["m", "r", "x"], &["z"]);
    let g = build(vec![relu(), w1, w2], &[8, 8], &["y", "z"], vec![m, lo]);
    assert_eq!(check(&g, "where", &[]).len(), targets::all().len());
}

#[test]
fn every_transpose_of_three_dimensions_runs_where_rows_can_be_transposed() {
    let perms = [[0, 2, 1], [1, 0, 2], [2, 0, 1], [2, 1, 0], [1, 2, 0]];
    for p in perms {
        let t =
            NodeProto::new("Transpose", "t", &["r"], &["y"]).with(AttributeProto::ints("perm", &p));
        let g = build(vec![relu(), t], &[3, 4, 8], &["y"], vec![]);
        let ran = check(&g, &format!("perm {p:?}"), &["lacks a transposing copy"]);
        // Keeping the last dimension is a permutation of rows: every machine.
        if p[2] == 2 {
            assert_eq!(ran.len(), targets::all().len(), "{p:?}");
        } else {
            assert!(
                ran.contains(&"vliw-systolic") && ran.contains(&"systolic-os"),
                "{p:?}: {ran:?}"
            );
        }
    }
}

#[test]
fn reshapes_of_padded_rows_are_copied_into_their_own_layout() {
    // [2, 3, 5] rows of 5 f32 are padded on every machine but systolic-os;
    // Flatten to [2, 15] and a 1-D MatMul operand ([5] as [5, 1]) need copies.
    let flat = NodeProto::new("Flatten", "f", &["r"], &["y"]).with(AttributeProto::int("axis", 1));
    let g = build(vec![relu(), flat], &[2, 3, 5], &["y"], vec![]);
    assert_eq!(check(&g, "flatten", &[]).len(), targets::all().len());
    let mm = NodeProto::new("MatMul", "mm", &["r", "v"], &["y"]);
    let v = TensorProto::from_f32("v", &[5], &[0.5, -1.0, 2.0, 0.25, 1.5]);
    let g = build(vec![relu(), mm], &[3, 5], &["y"], vec![v]);
    // The [3, 1] product is reshaped to [3]: a copy again.
    assert_eq!(
        check(&g, "matrix x vector", &[]).len(),
        targets::all().len()
    );
}

#[test]
fn reductions_over_several_trailing_dimensions_and_variadic_max() {
    // A global average pool: ReduceMean over [2, 3] of NCHW.
    let pool = NodeProto::new("ReduceMean", "gap", &["r"], &["p"])
        .with(AttributeProto::ints("axes", &[2, 3]));
    let max3 = NodeProto::new("Max", "max3", &["x", "r", "x"], &["m"]);
    let g = build(vec![relu(), pool, max3], &[2, 3, 4, 8], &["p", "m"], vec![]);
    assert_eq!(
        check(&g, "global average pool", &[]).len(),
        targets::all().len()
    );
}

#[test]
fn casts_that_would_change_values_are_refused() {
    // Integers are held in f32: a float-to-int Cast of arbitrary values would
    // need truncation, so only casts of known integers compile.
    let cast = NodeProto::new("Cast", "c", &["x"], &["y"]).with(AttributeProto::int("to", 3)); // INT8
    let g = build(vec![cast], &[2, 8], &["y"], vec![]);
    for t in targets::all() {
        let e = compiler::lower::compile(t, t.machine(), &g).expect_err("a truncating cast");
        assert!(e.to_string().contains("Cast from float to int8"), "{e}");
    }
    // Rounded first, it is a view.
    let round = NodeProto::new("Round", "r", &["x"], &["q"]);
    let cast = NodeProto::new("Cast", "c", &["q"], &["y"]).with(AttributeProto::int("to", 6)); // INT32
    let g = build(vec![round, cast], &[2, 8], &["y"], vec![]);
    assert_eq!(
        check(&g, "round then cast", &[]).len(),
        targets::all().len()
    );
}

#[test]
fn a_slice_of_a_value_kept_on_chip_is_copied_once() {
    // relu(x) is kept on chip between its region and the slice's; columns
    // 128..384 of its 64 rows (64 KiB of f32, 16 vector registers of 8 x 128
    // on vliw-systolic) are copied straight into the slice's buffer, one
    // load and one store per register, not first into a landing buffer and
    // then out of it.
    let i = |n: &str, v: i64| TensorProto::from_i64(n, &[1], &[v]);
    let s = NodeProto::new("Slice", "s", &["r", "st", "en", "ax"], &["q"]);
    let mm = NodeProto::new("MatMul", "mm", &["q", "w"], &["y"]);
    let w = onnx_util::ramp("w", &[256, 128], -0.01, 0.0001);
    let g = build(
        vec![relu(), s, mm],
        &[64, 512],
        &["y"],
        vec![i("st", 128), i("en", 384), i("ax", 1), w],
    );
    let (regions, n) = vliw_region(&g, "Slice(");
    assert!(n <= 2 * 16 + 4, "{n} instructions: {regions:?}");
}

#[test]
fn a_transpose_into_a_value_kept_in_bf16_converts_on_the_way() {
    // relu(x) is kept on chip in f32; its transpose of the leading
    // dimensions is read only by a product, so it is kept in bf16, the
    // type the product reads. The rows go through the registers once,
    // converted by the store (64 KiB of f32: 16 registers of 8 x 128 on
    // vliw-systolic, one load and one store each), not first copied in
    // f32 into a landing buffer and then converted out of it.
    let t = NodeProto::new("Transpose", "t", &["r"], &["q"])
        .with(AttributeProto::ints("perm", &[1, 0, 2]));
    let mm = NodeProto::new("MatMul", "mm", &["q", "w"], &["y"]);
    let w = onnx_util::ramp("w", &[128, 128], -0.01, 0.0001);
    let g = build(vec![relu(), t, mm], &[64, 2, 128], &["y"], vec![w]);
    let (regions, n) = vliw_region(&g, "Transpose(");
    assert!(n <= 2 * 16 + 4, "{n} instructions: {regions:?}");
}

#[test]
fn a_slice_split_into_heads_and_transposed_is_copied_once() {
    // Columns 128..384 of relu(x), split into two heads of 128 and moved
    // head-major (attention's q, k or v from the projection's result): the
    // transpose reads relu(x) itself, so the slice is not copied first.
    let graph = |rows: i64| {
        let i = |n: &str, v: &[i64]| TensorProto::from_i64(n, &[v.len() as i64], v);
        let s = NodeProto::new("Slice", "s", &["r", "st", "en", "ax"], &["q"]);
        let heads = NodeProto::new("Reshape", "heads", &["q", "shape"], &["qh"]);
        let t = NodeProto::new("Transpose", "t", &["qh"], &["y"])
            .with(AttributeProto::ints("perm", &[1, 0, 2]));
        build(
            vec![relu(), s, heads, t],
            &[rows, 384],
            &["y"],
            vec![
                i("st", &[128]),
                i("en", &[384]),
                i("ax", &[1]),
                i("shape", &[rows, 2, 128]),
            ],
        )
    };
    let small = graph(8);
    assert_eq!(
        check(&small, "sliced transpose", &[]).len(),
        targets::all().len()
    );
    // Rows padded on chip (96 columns in rows of 128): the slice is copied
    // first after all, where the transpose is lowered.
    let i = |n: &str, v: &[i64]| TensorProto::from_i64(n, &[v.len() as i64], v);
    let padded = build(
        vec![
            relu(),
            NodeProto::new("Slice", "s", &["r", "st", "en", "ax"], &["q"]),
            NodeProto::new("Reshape", "heads", &["q", "shape"], &["qh"]),
            NodeProto::new("Transpose", "t", &["qh"], &["y"])
                .with(AttributeProto::ints("perm", &[1, 0, 2])),
        ],
        &[8, 96],
        &["y"],
        vec![
            i("st", &[32]),
            i("en", &[96]),
            i("ax", &[1]),
            i("shape", &[8, 2, 32]),
        ],
    );
    assert_eq!(
        check(&padded, "sliced transpose of padded rows", &[]).len(),
        targets::all().len()
    );
    let g = graph(64);
    let (regions, n) = vliw_region(&g, "Transpose(");
    assert!(
        !regions.iter().any(|(name, _)| name.starts_with("Slice(")),
        "{regions:?}"
    );
    // 64 KiB of f32: 16 registers of 8 x 128, one load and one store each.
    assert!(n <= 2 * 16 + 4, "{n} instructions: {regions:?}");
}

#[test]
fn an_empty_slice_before_a_transpose_compiles_without_a_panic() {
    // Columns 4..4: an empty slice, transposed (a width of zero must not
    // be divided by when the compiler looks for slices to fold into the
    // transpose).
    let i = |n: &str, v: &[i64]| TensorProto::from_i64(n, &[v.len() as i64], v);
    let s = NodeProto::new("Slice", "s", &["r", "st", "en", "ax"], &["q"]);
    let t = NodeProto::new("Transpose", "t", &["q"], &["y"])
        .with(AttributeProto::ints("perm", &[1, 0, 2]));
    let g = build(
        vec![relu(), s, t],
        &[8, 2, 16],
        &["y"],
        vec![i("st", &[4]), i("en", &[4]), i("ax", &[2])],
    );
    run_checked("vliw-systolic", &g);
}

#[test]
fn a_join_kept_on_chip_takes_its_part_from_home_by_transfer() {
    // A KV cache's shape: the cache (an input, at home) joined with a new
    // row computed on chip, then read by a product. Kept on chip in dense
    // rows, the join takes the cache's rows straight from their transfer;
    // in rows padded to whole registers, they land first and are copied in
    // through the registers.
    let i = |n: &str, v: i64| TensorProto::from_i64(n, &[1], &[v]);
    let last = NodeProto::new("Slice", "last", &["x", "st", "en", "ax"], &["l"]);
    let new = NodeProto::new("Relu", "new", &["l"], &["n"]);
    let cat =
        NodeProto::new("Concat", "all", &["x", "n"], &["a"]).with(AttributeProto::int("axis", 2));
    let mm = NodeProto::new("MatMul", "mm", &["a", "w"], &["y"]);
    let w = onnx_util::ramp("w", &[64, 32], -0.01, 0.0003);
    let g = build(
        vec![last, new, cat, mm],
        &[1, 2, 64, 64],
        &["y"],
        vec![i("st", 63), i("en", 64), i("ax", 2), w],
    );
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let inputs = compiler::run::random_inputs(&g, 7);
    let join = |dense_joins| {
        let opts = compiler::lower::Options {
            dense_joins,
            ..Default::default()
        };
        let r = compiler::run::run_with(t, m, &g, &inputs, None, opts).expect("runs");
        assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
        r.compiled
            .regions
            .iter()
            .find(|(name, _)| name.starts_with("Concat("))
            .map(|(_, n)| *n)
            .expect("a join region")
    };
    let (dense, padded) = (join(true), join(false));
    assert!(
        dense * 4 < padded,
        "{dense} instructions dense, {padded} padded"
    );
}

#[test]
fn a_transpose_after_a_product_takes_the_other_half_of_the_registers_and_overlaps_it() {
    // q = x · w split into 8 heads and moved head-major (attention's
    // projection, then its transpose). The registers are allocated before
    // scheduling, so a region reusing the registers the product's last
    // epilogue instructions read could not start before them. The
    // transpose prefers the other half of the vector registers than the
    // product, so its first copies are scheduled while the product still
    // runs.
    let mm = NodeProto::new("MatMul", "proj", &["x", "w"], &["q"]);
    let heads = NodeProto::new("Reshape", "heads", &["q", "shape"], &["qh"]);
    let t = NodeProto::new("Transpose", "t", &["qh"], &["y"])
        .with(AttributeProto::ints("perm", &[1, 0, 2]));
    let g = build(
        vec![mm, heads, t],
        &[512, 256],
        &["y"],
        vec![
            onnx_util::ramp("w", &[256, 512], -0.5, 0.001),
            TensorProto::from_i64("shape", &[3], &[512, 8, 64]),
        ],
    );
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let inputs = compiler::run::random_inputs(&g, 3);
    let r = compiler::run::run(t, m, &g, &inputs, None).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
    let c = &r.compiled;
    let at = |prefix: &str| {
        let mut start = 0;
        for (name, n) in &c.regions {
            if name.starts_with(prefix) {
                return start..start + n;
            }
            start += n;
        }
        panic!("no {prefix} region: {:?}", c.regions)
    };
    let (product, transpose) = (at("MatMul"), at("Transpose"));
    let halves = |range: std::ops::Range<usize>| {
        let mut seen = [false; 2];
        for p in onnx_util::registers_of(m, &c.insts[range], "vreg") {
            seen[usize::from(p >= 16)] = true;
        }
        seen
    };
    let (hp, ht) = (halves(product.clone()), halves(transpose.clone()));
    assert!(
        hp != ht
            && hp.iter().filter(|s| **s).count() == 1
            && ht.iter().filter(|s| **s).count() == 1,
        "halves used: product {hp:?}, transpose {ht:?}"
    );
    // The bundle each instruction issues in, found by identity.
    let issue = |i: usize| {
        let x = &c.insts[i];
        c.bundles
            .iter()
            .position(|b| {
                b.ops
                    .iter()
                    .any(|(_, y)| y.inst == x.inst && y.operands == x.operands)
            })
            .expect("scheduled")
    };
    let first_copy = issue(transpose.start);
    let product_end = product.map(issue).max().expect("a product");
    assert!(
        first_copy < product_end,
        "the transpose starts at {first_copy}, the product ends at {product_end}"
    );
}

/// On systolic-os, whose element-wise and transposing memory (`ofmap`,
/// 64 KiB) is the smallest: an element-wise region over a large tensor
/// tiles smaller until its buffers fit, and a transpose keeps few tiles in
/// flight (both overflowed `ofmap` before, 107,520 and 143,360 bytes).
#[test]
fn large_element_wise_regions_and_transposes_fit_the_smallest_memory() {
    let t = targets::by_name("systolic-os").expect("target");
    let tr = NodeProto::new("Transpose", "t", &["x"], &["tt"])
        .with(AttributeProto::ints("perm", &[0, 2, 3, 1]));
    let r = NodeProto::new("Relu", "relu", &["tt"], &["y"]);
    for (what, nodes, x) in [
        (
            "relu",
            vec![NodeProto::new("Relu", "relu", &["x"], &["y"])],
            [1, 56, 56, 64],
        ),
        ("transpose", vec![tr, r], [1, 64, 56, 56]),
    ] {
        let g = build(nodes, &x, &["y"], vec![]);
        let inputs = compiler::run::random_inputs(&g, 3);
        let r = compiler::run::run(t, t.machine(), &g, &inputs, None)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(r.checks.iter().all(|c| c.ok), "{what}: {:?}", r.checks);
    }
}

/// `Resize` doubling the height and width of feature maps with rows
/// narrower than a transfer's alignment (2 and 7 f32 columns): its joins
/// along the height stored rows of a dense buffer one by one, and the
/// second row started 8 bytes in, off vliw-systolic's and simd-dsp's
/// transfer alignment ("address 0x8 is not a multiple of 32"). Nearest
/// and linear, everywhere.
#[test]
fn resizing_narrow_feature_maps_runs_everywhere() {
    for (mode, dims) in [
        ("nearest", [1, 4, 2, 2]),
        ("nearest", [1, 8, 5, 7]),
        ("linear", [1, 16, 4, 4]),
    ] {
        let resize = NodeProto::new("Resize", "resize", &["x", "", "scales"], &["y"])
            .with(AttributeProto::string("mode", mode));
        let g = build(
            vec![resize],
            &dims,
            &["y"],
            vec![TensorProto::from_f32("scales", &[4], &[1.0, 1.0, 2.0, 2.0])],
        );
        let what = format!("{mode} Resize of {dims:?}");
        assert_eq!(check(&g, &what, &[]).len(), targets::all().len(), "{what}");
    }
}

/// A column (a pooling's `[C, 1]`) flattened into rows is transposed in
/// runs through the machine's transposing copy, not shifted element by
/// element: on vliw-systolic it takes no scalar loads (PP-LCNet's flatten
/// of 1,280 pooled channels took 1,120 of them and 389 k cycles). Every
/// target still matches.
#[test]
fn a_pooled_column_flattened_into_a_row_is_transposed_not_shifted() {
    for (c, hw) in [(320, 4), (40, 3)] {
        let gap = NodeProto::new("GlobalAveragePool", "gap", &["r"], &["p"]);
        let flat =
            NodeProto::new("Flatten", "f", &["p"], &["y"]).with(AttributeProto::int("axis", 1));
        let g = build(vec![relu(), gap, flat], &[1, c, hw, hw], &["y"], vec![]);
        let what = format!("pool and flatten {c} channels");
        assert_eq!(check(&g, &what, &[]).len(), targets::all().len());
        let t = targets::by_name("vliw-systolic").expect("target");
        let m = t.machine();
        let compiled = compiler::lower::compile(t, m, &g).expect("compiles");
        // The flatten's region: its instructions follow the regions before it.
        let at = compiled
            .regions
            .iter()
            .position(|(name, _)| name == "Relayout(f)")
            .unwrap_or_else(|| panic!("{what}: {:?}", compiled.regions));
        let start: usize = compiled.regions[..at].iter().map(|r| r.1).sum();
        let scalar_loads = compiled.selected[start..start + compiled.regions[at].1]
            .iter()
            .filter(|i| m.instructions[i.inst.index()].name == "sld")
            .count();
        assert_eq!(scalar_loads, 0, "{what}: {:?}", compiled.regions);
    }
}
