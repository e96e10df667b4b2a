//! Attention fused into one region with its intermediates kept on chip
//! (`compiler::lower::fuse`): recognised in the bundled GPT-2 block, the
//! same outputs with and without it, fewer cycles with it where the machine
//! keeps it on chip, and patterns that must not be fused.

use compiler::ir::{ElemType, Graph, Op, ReduceKind, Tensor, TensorType, Unary, ValueId};
use compiler::lower::Options;
use std::path::Path;

/// Plain regions through the home memory: without attention fusion, and
/// without residency, which would keep the same values on chip.
fn off() -> Options {
    Options {
        fuse_attention: false,
        residency: false,
        ..Options::default()
    }
}

fn gpt2() -> (Graph, Vec<Tensor>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpt2_block_small");
    let mut g = compiler::onnx::import_file(dir.join("model.onnx")).expect("import");
    compiler::interp::fold_constants(&mut g);
    let inputs = compiler::run::random_inputs(&g, 7);
    (g, inputs)
}

fn attention_regions(c: &compiler::lower::Compiled) -> Vec<&str> {
    c.regions
        .iter()
        .map(|(r, _)| r.as_str())
        .filter(|r| r.starts_with("Attention("))
        .collect()
}

#[test]
fn gpt2_attention_is_one_region_and_agrees_with_the_unfused_code() {
    let (g, inputs) = gpt2();
    for name in ["vliw-systolic", "simd-dsp", "pim-dram"] {
        let t = targets::by_name(name).expect("target");
        let on = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("fused");
        let off = compiler::run::run_with(t, t.machine(), &g, &inputs, None, off()).expect("plain");
        assert!(on.checks.iter().all(|c| c.ok), "{name}: {:?}", on.checks);
        assert!(off.checks.iter().all(|c| c.ok), "{name}: {:?}", off.checks);
        assert!(
            attention_regions(&off.compiled).is_empty(),
            "{name}: off means off"
        );
        let fused = attention_regions(&on.compiled);
        assert_eq!(fused.len(), 1, "{name}: {:?}", on.compiled.regions);
        let region = fused[0];
        assert!(
            region.starts_with("Attention(attn.scores .. attn.context"),
            "{region}"
        );
        for step in ["ReduceMax", "Exp", "ReduceSum", "MatMul(attn.context)"] {
            assert!(region.contains(step), "{name}: {region} lacks {step}");
        }
        let kept = region.contains("intermediates on chip");
        let note = region.contains("intermediates at home: ")
            || on
                .compiled
                .regions
                .iter()
                .any(|(r, _)| r.starts_with("(attention not kept on chip"));
        // Either kept on chip, or the reason it is not is reported.
        assert!(kept || note, "{name}: {:?}", on.compiled.regions);
        if kept {
            // Nothing between the two products goes through the home memory.
            assert!(
                on.report.cycles < off.report.cycles,
                "{name}: fused {} cycles, plain {}",
                on.report.cycles,
                off.report.cycles
            );
        }
    }
    // The machine with the room and the copies for it keeps attention on chip.
    let t = targets::by_name("vliw-systolic").expect("target");
    let c = compiler::lower::compile(t, t.machine(), &g).expect("compiles");
    assert!(attention_regions(&c)[0].contains("intermediates on chip"));
}

/// `q · kᵀ`, softmax, `· v`, one head of `[s, d]`; `extra` adds a use of the
/// probabilities outside the pattern (as a second graph output).
fn sdpa(s: usize, d: usize, extra: bool, mask: bool) -> Graph {
    sdpa_scaled(s, d, extra, mask, false)
}

/// [`sdpa`], with the scores scaled by a constant first if `scale`.
fn sdpa_scaled(s: usize, d: usize, extra: bool, mask: bool, scale: bool) -> Graph {
    let mut g = Graph::default();
    let ty = |shape: Vec<usize>| TensorType {
        elem: ElemType::F32,
        shape,
    };
    let q = g.add_value("q", ty(vec![s, d]));
    let k = g.add_value("k", ty(vec![s, d]));
    let v = g.add_value("v", ty(vec![s, d]));
    g.inputs.extend([q, k, v]);
    let one = |g: &mut Graph, name: &str, op: Op, ins: Vec<ValueId>| -> ValueId {
        g.add_node(name, op, ins).expect("node")[0]
    };
    let kt = one(&mut g, "kt", Op::Transpose { perm: vec![1, 0] }, vec![k]);
    let mut x = one(&mut g, "scores", Op::MatMul, vec![q, kt]);
    if scale {
        let c = g.add_constant("c", Tensor::new(ty(vec![]), vec![0.25]));
        x = one(&mut g, "scaled", Op::Mul, vec![x, c]);
    }
    if mask {
        // A padding mask computed from an input: added to the scores.
        let m = g.add_value("mask", ty(vec![1, s]));
        g.inputs.push(m);
        x = one(&mut g, "masked", Op::Add, vec![x, m]);
    }
    let (p, o) = softmax_times(&mut g, x, v);
    g.outputs.push(o);
    if extra {
        g.outputs.push(p);
    }
    g
}

#[test]
fn a_computed_padding_mask_is_part_of_the_region() {
    let g = sdpa(8, 16, false, true);
    let t = targets::by_name("vliw-systolic").expect("target");
    let inputs = compiler::run::random_inputs(&g, 3);
    let r = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
    let fused = attention_regions(&r.compiled);
    assert_eq!(fused.len(), 1, "{:?}", r.compiled.regions);
    assert!(fused[0].contains("Add(masked)"), "{}", fused[0]);
    assert!(fused[0].contains("intermediates on chip"), "{}", fused[0]);
}

/// Scores scaled in the product's epilogue never reach memory, so they hold
/// no on-chip memory either: the scaled form keeps as many values on chip
/// as the plain one, all of them, and computes the same.
#[test]
fn values_computed_in_an_epilogue_are_not_kept_on_chip() {
    let t = targets::by_name("vliw-systolic").expect("target");
    let kept = |scale: bool| {
        let g = sdpa_scaled(8, 16, false, false, scale);
        let inputs = compiler::run::random_inputs(&g, 5);
        let r = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
        assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
        let fused = attention_regions(&r.compiled);
        assert_eq!(fused[0].contains("Mul(scaled)"), scale, "{}", fused[0]);
        assert!(fused[0].contains("intermediates on chip"), "{}", fused[0]);
        r.compiled.kept_on_chip
    };
    assert_eq!(kept(true), kept(false));
}

#[test]
fn probabilities_used_elsewhere_are_not_fused() {
    let g = sdpa(8, 16, true, false);
    for t in targets::all().iter().filter(|t| t.name() != "systolic-os") {
        let inputs = compiler::run::random_inputs(&g, 5);
        let r = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
        assert!(
            r.checks.iter().all(|c| c.ok),
            "{}: {:?}",
            t.name(),
            r.checks
        );
        assert!(attention_regions(&r.compiled).is_empty(), "{}", t.name());
    }
}

#[test]
fn recogniser_finds_the_pattern_and_its_inner_values() {
    // On a graph already in the lowering's form (row results widened by ones).
    let g = sdpa(4, 8, false, false);
    let found = compiler::passes::fuse::attention(&g);
    assert_eq!(found.len(), 1);
    let a = &found[0];
    let name = |k: usize| g.nodes[k].name.clone();
    assert_eq!(name(a.scores), "scores");
    assert_eq!(name(a.context), "context");
    // kᵀ is made for these scores alone: inside.
    assert!(a.nodes.iter().any(|&k| name(k) == "kt"));
    let inner: Vec<&str> = a
        .inner
        .iter()
        .map(|v| g.values[v.index()].name.as_str())
        .collect();
    for v in ["kt", "scores", "max", "shifted", "exp", "sum", "probs"] {
        assert!(
            inner.contains(&format!("{v}:0").as_str()),
            "{inner:?} lacks {v}"
        );
    }
    assert!(!inner.iter().any(|v| v.starts_with("context")));
    // Without the softmax's exponential it is not attention.
    let mut h = sdpa(4, 8, false, false);
    for n in &mut h.nodes {
        if n.name == "exp" {
            n.op = Op::Unary(Unary::Tanh);
        }
    }
    assert!(compiler::passes::fuse::attention(&h).is_empty());
}

/// The softmax's row group takes the scores' (scaled) causal mask from
/// the product's epilogue (`rows::row_groups`): the product pops its raw
/// scores, and the group reads them once and keeps the scaled, masked
/// scores in registers, instead of the epilogue writing them for the group
/// to read again. The mask, one `[S, S]` constant over every head, is read
/// by bands of rows.
#[test]
fn the_softmax_takes_the_scores_scale_and_mask() {
    let (g, inputs) = gpt2();
    let t = targets::by_name("vliw-systolic").expect("target");
    let r = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
    let region = attention_regions(&r.compiled)[0];
    // The scale (1/8, a power of two) went into the projection's epilogue,
    // over the query columns (`canon`); the mask's product stays.
    assert!(!region.contains("attn.scaled"), "{region}");
    assert!(
        region.contains(
            "MatMul(attn.scores) | Rows: Mul(attn.masked_scores/kept) -> Add(attn.masked_scores) -> ReduceMax"
        ),
        "{region}"
    );
}

/// Causal attention over `h` heads of `[s, d]`: `q · kᵀ` scaled by 1/8,
/// masked by `Where(tril, x, -1e9)` (as GPT-2 exports it), softmax, `· v`.
/// `full_rows` lists rows whose mask is all off (their softmax is uniform).
fn causal(h: usize, s: usize, d: usize, full_rows: &[usize]) -> Graph {
    causal_after(h, s, 0, d, full_rows)
}

/// [`causal`] for `s` queries after `past` keys (a KV cache): query `i`
/// sees keys `0..=i + past`.
fn causal_after(h: usize, s: usize, past: usize, d: usize, full_rows: &[usize]) -> Graph {
    let mut g = Graph::default();
    let ty = |elem, shape: Vec<usize>| TensorType { elem, shape };
    let f = |shape| ty(ElemType::F32, shape);
    let n = s + past;
    let q = g.add_value("q", f(vec![h, s, d]));
    let k = g.add_value("k", f(vec![h, n, d]));
    let v = g.add_value("v", f(vec![h, n, d]));
    g.inputs.extend([q, k, v]);
    let one = |g: &mut Graph, name: &str, op: Op, ins: Vec<ValueId>| -> ValueId {
        g.add_node(name, op, ins).expect("node")[0]
    };
    let kt = one(
        &mut g,
        "kt",
        Op::Transpose {
            perm: vec![0, 2, 1],
        },
        vec![k],
    );
    let x = one(&mut g, "scores", Op::MatMul, vec![q, kt]);
    let c = g.add_constant("c", Tensor::new(f(vec![]), vec![0.125]));
    let x = one(&mut g, "scaled", Op::Mul, vec![x, c]);
    let tril = (0..s * n)
        .map(|i| {
            f64::from(u8::from(
                i % n <= i / n + past && !full_rows.contains(&(i / n)),
            ))
        })
        .collect();
    let m = g.add_constant("tril", Tensor::new(ty(ElemType::Bool, vec![s, n]), tril));
    let lo = g.add_constant("lo", Tensor::new(f(vec![]), vec![-1e9]));
    let x = one(&mut g, "masked", Op::Where, vec![m, x, lo]);
    let (_, o) = softmax_times(&mut g, x, v);
    g.outputs.push(o);
    g
}

/// The softmax of `x` along its last dimension, then its product with
/// `v`: the probabilities and the context.
fn softmax_times(g: &mut Graph, x: ValueId, v: ValueId) -> (ValueId, ValueId) {
    let last = g.ty(x).shape.len() - 1;
    let mut one = |name: &str, op: Op, ins: Vec<ValueId>| -> ValueId {
        g.add_node(name, op, ins).expect("node")[0]
    };
    let red = |kind| Op::Reduce {
        kind,
        axes: vec![last],
        keepdims: true,
    };
    let mx = one("max", red(ReduceKind::Max), vec![x]);
    let d_ = one("shifted", Op::Sub, vec![x, mx]);
    let e = one("exp", Op::Unary(Unary::Exp), vec![d_]);
    let z = one("sum", red(ReduceKind::Sum), vec![e]);
    let p = one("probs", Op::Div, vec![e, z]);
    (p, one("context", Op::MatMul, vec![p, v]))
}

/// The count of instructions whose mnemonic starts with `prefix`.
fn count(c: &compiler::lower::Compiled, prefix: &str) -> usize {
    let m = targets::by_name("vliw-systolic").expect("target").machine();
    c.insts
        .iter()
        .filter(|i| m.instructions[i.inst.index()].name.starts_with(prefix))
        .count()
}

/// A causal mask's upper triangle is skipped (`lower::masked`): the scores
/// above the diagonal are not computed, the softmax stops at the diagonal's
/// chunk, the context product's reduction too; the outputs are unchanged.
#[test]
fn a_causal_softmax_skips_the_masked_triangle() {
    let g = causal(2, 384, 64, &[]);
    let inputs = compiler::run::random_inputs(&g, 3);
    let t = targets::by_name("vliw-systolic").expect("target");
    let on = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("skipping");
    let off_opts = Options {
        skip_masked: false,
        ..Options::default()
    };
    let off = compiler::run::run_with(t, t.machine(), &g, &inputs, None, off_opts).expect("whole");
    assert!(on.checks.iter().all(|c| c.ok), "{:?}", on.checks);
    assert!(off.checks.iter().all(|c| c.ok), "{:?}", off.checks);
    // Rows in blocks of 8, chunks of 128: 2/3 of the exponentials per row
    // on average, (1 + 2 + 3) / 9 of the products' passes.
    let (e_on, e_off) = (count(&on.compiled, "vexp"), count(&off.compiled, "vexp"));
    assert_eq!(e_on * 3, e_off * 2, "vexp: {e_on} against {e_off}");
    let (m_on, m_off) = (count(&on.compiled, "mmul"), count(&off.compiled, "mmul"));
    assert!(m_on < m_off, "mmul: {m_on} against {m_off}");
    assert!(on.report.cycles < off.report.cycles);
}

/// Where the scale went elsewhere (into the query projection, `canon`),
/// the mask holds 0 and 1: a chunk of it that keeps every element costs no
/// operation, so of each block of 8 rows only the diagonal's chunk is
/// masked (one multiply-add per block, with the mask loaded), where a
/// scale left in the mask costs one per chunk computed.
#[test]
fn chunks_the_mask_keeps_whole_cost_no_operation() {
    let t = targets::by_name("vliw-systolic").expect("target");
    let loaded = Options {
        mask_by_position: false,
        ..Options::default()
    };
    let fmas = |scale: f64| {
        let mut g = causal(1, 256, 64, &[]);
        set_scale(&mut g, scale);
        let inputs = compiler::run::random_inputs(&g, 4);
        let r = compiler::run::run_with(t, t.machine(), &g, &inputs, None, loaded).expect("runs");
        assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
        count(&r.compiled, "vfma")
    };
    // 32 blocks of 8 rows; blocks from row 128 on compute two chunks.
    assert_eq!(fmas(1.0), 32);
    assert_eq!(fmas(0.125), 48);
}

/// A row with every column masked has a uniform softmax, not zeros: it is
/// computed whole (and so is its block of rows).
#[test]
fn a_row_masked_whole_is_computed_whole() {
    let g = causal(1, 256, 64, &[3]);
    let inputs = compiler::run::random_inputs(&g, 5);
    let t = targets::by_name("vliw-systolic").expect("target");
    let r = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
}

/// The causal mask over every head comes on chip once per softmax, not
/// once per head: the HBM reads are the inputs and one copy of the mask's
/// constants (two of 256 KiB), not four.
#[test]
fn the_mask_over_every_head_is_read_once() {
    let g = causal(4, 256, 64, &[]);
    let inputs = compiler::run::random_inputs(&g, 9);
    let t = targets::by_name("vliw-systolic").expect("target");
    let r = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
    let hbm = r
        .report
        .memories
        .iter()
        .find(|m| m.name == "hbm")
        .expect("hbm");
    let inputs_bytes = 3 * 4 * 256 * 64 * 4;
    let mask_bytes = 2 * 256 * 256 * 4;
    assert!(
        hbm.bytes_read < inputs_bytes + 2 * mask_bytes,
        "{} bytes read from HBM",
        hbm.bytes_read
    );
}

/// A causal mask of 0 and 1 is computed from element positions (`vcausal`,
/// one per block of 8 rows: the diagonal's chunk), not loaded: no
/// multiply-add, and nothing of the mask read from HBM. Also after a KV
/// cache, where the diagonal is `past` columns to the right.
/// Sets the attention's scale, the constant `c`, to `scale`.
fn set_scale(g: &mut compiler::ir::Graph, scale: f64) {
    let c = g
        .values
        .iter()
        .position(|v| v.name == "c")
        .expect("the scale");
    let ty = g.constants[&ValueId(c as u32)].ty.clone();
    g.constants
        .insert(ValueId(c as u32), Tensor::new(ty, vec![scale]));
}

#[test]
fn a_causal_mask_is_computed_from_positions_not_loaded() {
    let t = targets::by_name("vliw-systolic").expect("target");
    for past in [0, 40, 128] {
        let mut g = causal_after(2, 256, past, 64, &[]);
        set_scale(&mut g, 1.0);
        let inputs = compiler::run::random_inputs(&g, 11);
        let on = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
        let loaded = Options {
            mask_by_position: false,
            ..Options::default()
        };
        let off = compiler::run::run_with(t, t.machine(), &g, &inputs, None, loaded).expect("runs");
        assert!(
            on.checks.iter().all(|c| c.ok),
            "past {past}: {:?}",
            on.checks
        );
        assert!(
            off.checks.iter().all(|c| c.ok),
            "past {past}: {:?}",
            off.checks
        );
        // One chunk of 128 on the diagonal per block of 8 rows, per head.
        let diagonal = 2 * 256 / 8;
        assert_eq!(count(&on.compiled, "vcausal"), diagonal, "past {past}");
        assert_eq!(count(&on.compiled, "vfma"), 0, "past {past}");
        assert_eq!(count(&off.compiled, "vcausal"), 0, "past {past}");
        assert_eq!(count(&off.compiled, "vfma"), diagonal, "past {past}");
        let hbm = |r: &compiler::run::RunResult| {
            r.report
                .memories
                .iter()
                .find(|m| m.name == "hbm")
                .expect("hbm")
                .bytes_read
        };
        // The two constants (which mask, which bias) are all the difference.
        let mask_bytes = 2 * 256 * (256 + past) as u64 * 4;
        assert_eq!(hbm(&off) - hbm(&on), mask_bytes, "past {past}");
    }
}
