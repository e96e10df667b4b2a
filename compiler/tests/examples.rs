//! The bundled example models: imported, constant-folded and run by the
//! reference interpreter, they match onnxruntime's stored outputs.
//! Tolerance (f32 models): |err| <= 1e-5 + 1e-5 * |expected| — the interpreter
//! accumulates matmuls in f64 and rounds once; onnxruntime accumulates in f32.

mod onnx_util;

use std::path::{Path, PathBuf};

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("examples folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    v.sort();
    v
}

#[test]
fn reference_interpreter_matches_onnxruntime_on_every_example() {
    let all = examples();
    assert!(all.len() >= 4, "the bundled examples: {all:?}");
    for dir in all {
        let mut g = compiler::onnx::import_file(dir.join("model.onnx"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        compiler::ir::verify(&g).unwrap_or_else(|e| panic!("{}: {e:?}", dir.display()));
        compiler::interp::fold_constants(&mut g);
        compiler::ir::verify(&g)
            .unwrap_or_else(|e| panic!("{} after folding: {e:?}", dir.display()));
        let data = dir.join("test_data_set_0");
        let inputs: Vec<_> = (0..g.inputs.len())
            .map(|i| {
                compiler::onnx::read_tensor_file(data.join(format!("input_{i}.pb")))
                    .expect("input tensor")
                    .1
            })
            .collect();
        let outputs =
            compiler::interp::run(&g, &inputs).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for (i, got) in outputs.iter().enumerate() {
            let (_, want) = compiler::onnx::read_tensor_file(data.join(format!("output_{i}.pb")))
                .expect("output tensor");
            assert_eq!(got.ty, want.ty, "{}: output {i} type", dir.display());
            let worst = got
                .data
                .iter()
                .zip(want.data.iter())
                .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
                .fold(0.0, f64::max);
            assert!(
                worst <= 1e-5,
                "{}: output {i} differs by {worst:e} (relative)",
                dir.display()
            );
        }
    }
}

/// The IR of the smallest example after import and after constant folding (Gemm's transposed weights fold away).
#[test]
fn mlp_small_ir_after_import_and_folding() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/mlp_small");
    let mut g = compiler::onnx::import_file(dir.join("model.onnx")).expect("imports");
    let imported = g.to_string();
    let folded = compiler::interp::fold_constants(&mut g);
    insta::assert_snapshot!(format!(
        "## after import\n{imported}\n## after constant folding ({folded} nodes folded)\n{g}"
    ));
}

/// Weights stay the model file's f32 bytes through a compile: packing reads
/// their rows and converts them straight to the machine's types, without a
/// whole-tensor f64 copy (what keeps compiling GPT-2 small's 85 M weights
/// cheap). Checked on the matrix products' weights of two examples.
#[test]
fn compiling_leaves_weights_as_their_bytes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let t = targets::by_name("vliw-systolic").expect("target");
    for name in ["mlp_medium", "gpt2_block_small"] {
        let mut g =
            compiler::onnx::import_file(dir.join(name).join("model.onnx")).expect("imports");
        compiler::interp::fold_constants(&mut g);
        let weights: Vec<_> = g
            .nodes
            .iter()
            .filter(|n| matches!(n.op, compiler::ir::Op::MatMul))
            .filter_map(|n| g.constants.get(&n.inputs[1]))
            .collect();
        assert!(!weights.is_empty(), "{name}");
        assert!(
            weights.iter().all(|w| !w.data.is_decoded()),
            "{name}: decoded on import"
        );
        compiler::lower::compile(t, t.machine(), &g).expect("compiles");
        for w in weights {
            assert!(
                !w.data.is_decoded(),
                "{name}: a {:?} weight decoded",
                w.ty.shape
            );
        }
    }
}

/// `gpt2_block_small` compiled for vliw-systolic.
fn small_block_on_vliw() -> (
    compiler::ir::Graph,
    &'static targets::Target,
    compiler::lower::Compiled,
) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpt2_block_small");
    let mut g = compiler::onnx::import_file(dir.join("model.onnx")).expect("imports");
    compiler::interp::fold_constants(&mut g);
    let t = targets::by_name("vliw-systolic").expect("target");
    let c = compiler::lower::compile(t, t.machine(), &g).expect("compiles");
    (g, t, c)
}

/// The head splits of `k` and `v` both copy the projection's result (`q`'s
/// is read in place, see the next test). The first takes a quarter of the
/// other half of the register file than the projection, as siblings
/// follow; each sibling after it takes the other quarter of that half than
/// the one before, so `k`'s and `v`'s splits share no register and run
/// side by side instead of one after the other (GPT-2 block at seq 512 on
/// vliw-systolic 76515 → 76386 cycles on 2026-12-05; with the whole file
/// for the second sibling, `v`'s split reused `k`'s registers. Since
/// 2026-12-05 the first copy takes a quarter where siblings follow: it had
/// taken the half, and with `q`'s copy gone, `k` and `v` shared a quarter).
#[test]
fn sibling_head_splits_take_different_quarters_of_the_register_file() {
    let (_, t, c) = small_block_on_vliw();
    let m = t.machine();
    // Each region's registers of the vector file, by the region's name.
    let mut at = 0;
    let mut regs = std::collections::HashMap::new();
    for (name, n) in &c.regions {
        let used: std::collections::BTreeSet<u32> =
            onnx_util::registers_of(m, &c.insts[at..at + n], "vreg")
                .into_iter()
                .collect();
        regs.insert(name.clone(), used);
        at += n;
    }
    let of = |prefix: &str| {
        regs.iter()
            .find(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no region {prefix}: {:?}", regs.keys()))
    };
    let (k, v) = (of("Transpose(k.t"), of("Transpose(v.t"));
    assert!(!k.is_empty() && !v.is_empty(), "{k:?} {v:?}");
    assert!(k.is_disjoint(&v), "k: {k:?}, v: {v:?}");
    let quarter = |s: &std::collections::BTreeSet<u32>| {
        s.iter()
            .map(|r| r / 8)
            .collect::<std::collections::BTreeSet<u32>>()
    };
    assert_eq!(quarter(&k).len(), 1, "k: {k:?}");
    assert_eq!(quarter(&v).len(), 1, "v: {v:?}");
}

/// Attention's split of the projection's result into heads (2026-12-05).
/// The queries are read only as `A`, which vliw-systolic's contractions
/// take strided: the scores read them where the projection wrote them
/// (`ld` is the pitch of its 192 columns) and no `q` split is lowered. The
/// projection stores its result in bf16, the type the products read, and
/// the keys' split is kept dense in bf16. The block still matches the
/// interpreter.
#[test]
fn attention_reads_its_heads_where_the_projection_writes_them() {
    let (g, t, c) = small_block_on_vliw();
    let m = t.machine();
    let name = |i: &isa_specs::target::MInst| m.instructions[i.inst.index()].name.as_str();
    let operand = |i: &isa_specs::target::MInst, op: &str| {
        let def = &m.instructions[i.inst.index()];
        let k = def
            .operands
            .iter()
            .position(|o| o.name == op)
            .expect("operand");
        i.operands[k]
    };
    let imm = |i: &isa_specs::target::MInst, op: &str| match operand(i, op) {
        isa_specs::target::OpValue::Imm(x) => x,
        o => panic!("{op} is {o:?}"),
    };
    let mut at = 0;
    let mut region = std::collections::HashMap::new();
    for (r, n) in &c.regions {
        region.insert(
            r.split(':').next().unwrap_or(r).to_owned(),
            &c.insts[at..at + n],
        );
        at += n;
    }
    let of = |prefix: &str| {
        region
            .iter()
            .find(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no region {prefix}: {:?}", region.keys()))
    };
    assert!(
        !region.keys().any(|k| k.starts_with("Transpose(q.t")),
        "{:?}",
        region.keys()
    );
    let stores = |insts: &[isa_specs::target::MInst]| -> Vec<String> {
        insts
            .iter()
            .filter(|i| name(i).starts_with("vst"))
            .map(|i| name(i).to_owned())
            .collect()
    };
    let projection = of("MatMul(attn.c_attn.matmul)");
    assert!(
        stores(projection).iter().all(|s| s == "vst_bf16"),
        "{:?}",
        stores(projection)
    );
    // The scores read the queries in the projection's rows (padded to
    // whole registers).
    let scores: Vec<_> = c.insts.iter().filter(|i| name(i) == "mmul_tz").collect();
    assert!(!scores.is_empty());
    assert!(
        scores.iter().all(|i| imm(i, "ld") == 256),
        "{:?}",
        scores.iter().map(|i| imm(i, "ld")).collect::<Vec<_>>()
    );
    // The keys' split, read transposed by the scores (whose instruction
    // takes `B` only dense), is kept dense in bf16: rows of the head's 16
    // columns, no padding to whole registers, no f32 copy to convert.
    // Each head's keys, where the scores read them, are written by a
    // `vst_bf16` of pitch 16.
    let addr = |i: &isa_specs::target::MInst, op: &str| match operand(i, op) {
        isa_specs::target::OpValue::Addr(x) => x,
        o => panic!("{op} is {o:?}"),
    };
    let dense: std::collections::HashSet<u64> = of("Transpose(k.t")
        .iter()
        .filter(|i| name(i) == "vst_bf16" && imm(i, "ld") == 16)
        .map(|i| addr(i, "dst"))
        .collect();
    for i in &scores {
        assert!(dense.contains(&addr(i, "b")), "{:#x}", addr(i, "b"));
    }
    let inputs = compiler::run::random_inputs(&g, 7);
    let r = compiler::run::run(t, m, &g, &inputs, None).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
}

/// A product visits its column tiles in the order their readers are
/// lowered (`--no-reader-order`, 2026-12-05): here the right half of the
/// result is sliced and read first, so its tile is computed first; left to
/// right without it. Both run right.
#[test]
fn product_computes_first_the_columns_read_first() {
    use compiler::onnx::proto::{NodeProto, TensorProto};
    let i = |n: &str, v: &[i64]| TensorProto::from_i64(n, &[v.len() as i64], v);
    let nodes = vec![
        NodeProto::new("MatMul", "p", &["x", "w"], &["p"]),
        NodeProto::new("Slice", "right", &["p", "s1", "e1", "ax"], &["b"]),
        NodeProto::new("Relu", "rb", &["b"], &["yb"]),
        NodeProto::new("Slice", "left", &["p", "s0", "e0", "ax"], &["a"]),
        NodeProto::new("Relu", "ra", &["a"], &["ya"]),
    ];
    let g = onnx_util::graph(
        nodes,
        vec![onnx_util::input("x", &[64, 128])],
        &["yb", "ya"],
        vec![
            onnx_util::ramp("w", &[128, 256], -1.0, 1.0 / 16384.0),
            i("s0", &[0]),
            i("e0", &[128]),
            i("s1", &[128]),
            i("e1", &[256]),
            i("ax", &[1]),
        ],
    );
    let mut g = onnx_util::import_ok(&onnx_util::encode(g));
    compiler::interp::fold_constants(&mut g);
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    // The columns each pop of the product writes, in program order.
    let pops = |reader_order: bool| -> Vec<u64> {
        let opts = compiler::lower::Options {
            reader_order,
            ..Default::default()
        };
        let c = compiler::lower::compile_with(t, m, &g, opts).expect("compiles");
        c.insts
            .iter()
            .filter(|i| m.instructions[i.inst.index()].name == "mpop")
            .filter_map(|i| {
                i.operands.iter().find_map(|o| match o {
                    isa_specs::target::OpValue::Addr(a) => Some(*a),
                    _ => None,
                })
            })
            .collect()
    };
    let (ordered, plain) = (pops(true), pops(false));
    assert_eq!(ordered.len(), 2, "{ordered:?}");
    assert!(ordered[0] > ordered[1], "right tile first: {ordered:?}");
    assert!(plain[0] < plain[1], "left to right: {plain:?}");
    let inputs = compiler::run::random_inputs(&g, 3);
    let r = compiler::run::run(t, m, &g, &inputs, None).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
}

/// The tile search's estimate (2026-12-05): a product whose `A` is on chip
/// and whose `B` runs stay on chip across row blocks waits for the home
/// memory once per column tile, not once per tile, and a result stored on
/// chip after its epilogue waits for none; so row tiles of 128 and of 256
/// cost the same (each pass fills the 128-row array either way). Of
/// tilings estimated alike, a product reading a row group's result (rows
/// made a block at a time) takes the fewest rows per tile, so it starts
/// after fewer of them (GPT-2 block at seq 512: 73533 → 72341 cycles).
#[test]
fn a_product_reading_a_row_groups_rows_takes_small_row_tiles() {
    use compiler::onnx::proto::NodeProto;
    let nodes = vec![
        NodeProto::new("MatMul", "p1", &["x", "w1"], &["h"]),
        NodeProto::new("Softmax", "s", &["h"], &["a"]),
        NodeProto::new("MatMul", "p2", &["a", "w2"], &["b"]),
        NodeProto::new("MatMul", "p3", &["b", "w3"], &["y"]),
    ];
    let g = onnx_util::graph(
        nodes,
        vec![onnx_util::input("x", &[512, 256])],
        &["y"],
        vec![
            // Positive weights: sums without cancellation, as bf16 allows.
            onnx_util::ramp("w1", &[256, 256], 0.0, 1.0 / 65536.0),
            onnx_util::ramp("w2", &[256, 512], 0.0, 1.0 / 131072.0),
            onnx_util::ramp("w3", &[512, 128], 0.0, 1.0 / 65536.0),
        ],
    );
    let mut g = onnx_util::import_ok(&onnx_util::encode(g));
    compiler::interp::fold_constants(&mut g);
    let t = targets::by_name("vliw-systolic").expect("target");
    let c = compiler::lower::compile(t, t.machine(), &g).expect("compiles");
    let s = c.space.iter().find(|s| s.node == "p2").expect("p2's space");
    let cost = |tm: i64| {
        s.ranked
            .iter()
            .find(|r| r.mapping.inst == "mmul_z" && r.mapping.tm == tm && r.mapping.tn == 128)
            .map(|r| r.estimate)
            .unwrap_or_else(|| panic!("no tm {tm}: {:?}", s.ranked))
    };
    assert_eq!(cost(128), cost(256));
    assert_eq!(s.chosen.tm, 128);
    let inputs = compiler::run::random_inputs(&g, 5);
    let r = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
}
