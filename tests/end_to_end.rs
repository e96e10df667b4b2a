//! Every bundled example compiles for every shipped target, runs on its
//! simulator, and matches both the reference interpreter and onnxruntime's
//! stored output, within the tolerance of the narrowest type the program
//! computes in (`compiler::run::Tolerance::for_dtype`). Every checker runs
//! inside the compile (IR verifier, memory plan, register allocation, schedule).

use std::path::Path;
use tests::examples;

/// Examples a target cannot express, and the reason it gives. (None
/// today: GPT-2's softmax and GELU compile on systolic-os, whose
/// post-processor has no `exp` or `tanh`, by instruction selection's
/// approximations.)
const REFUSALS: &[(&str, &str, &str)] = &[];

/// The bundled examples, one test each (they run in parallel).
const EXAMPLES: &[&str] = &[
    "cnn_small",
    "gpt2_block_small",
    "gpt2_decode_2l_kv64",
    "matmul_bias_relu_large",
    "matmul_bias_relu_small",
    "mlp_int8",
    "mlp_medium",
    "mlp_small",
];

#[test]
fn every_bundled_example_has_a_test() {
    let names: Vec<String> = examples()
        .iter()
        .map(|d| {
            d.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, EXAMPLES, "add the new example to EXAMPLES");
}

macro_rules! example_tests {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            runs_on_every_target_and_matches(stringify!($name));
        }
    )*};
}

example_tests!(
    cnn_small,
    gpt2_block_small,
    gpt2_decode_2l_kv64,
    matmul_bias_relu_large,
    matmul_bias_relu_small,
    mlp_int8,
    mlp_medium,
    mlp_small
);

/// Example `name` compiles for every target (or is refused as `REFUSALS`
/// says), runs, and matches the interpreter and onnxruntime.
fn runs_on_every_target_and_matches(name: &str) {
    let all: Vec<_> = examples()
        .into_iter()
        .filter(|d| d.file_name().is_some_and(|f| f == name))
        .collect();
    assert_eq!(all.len(), 1, "example {name}");
    let mut failures = Vec::new();
    for dir in &all {
        let mut g = compiler::onnx::import_file(dir.join("model.onnx")).expect("import");
        compiler::interp::fold_constants(&mut g);
        compiler::ir::verify(&g).expect("verified");
        let data = dir.join("test_data_set_0");
        // input_0.pb, input_1.pb, ... (a decode step's caches after its token).
        let inputs: Vec<_> = (0..)
            .map(|i| data.join(format!("input_{i}.pb")))
            .take_while(|p| p.exists())
            .map(|p| compiler::onnx::read_tensor_file(p).expect("input").1)
            .collect();
        let expected = compiler::onnx::read_tensor_file(data.join("output_0.pb"))
            .expect("output")
            .1;
        let example = dir.file_name().unwrap_or_default().to_string_lossy();
        for t in targets::all() {
            let name = format!("{example} on {}", t.name());
            let refusal = REFUSALS
                .iter()
                .find(|(e, tn, _)| *e == example && *tn == t.name())
                .map(|r| r.2);
            match compiler::run::run(
                t,
                t.machine(),
                &g,
                &inputs,
                Some(std::slice::from_ref(&expected)),
            ) {
                Ok(_) if refusal.is_some() => {
                    failures.push(format!("{name}: compiles now; drop it from REFUSALS"));
                }
                Err(compiler::run::RunError::Lower(e))
                    if refusal.is_some_and(|why| e.to_string().contains(why)) => {}
                Ok(r) => {
                    for c in &r.checks {
                        let scale = expected.data.iter().fold(0.0f64, |a, x| a.max(x.abs()));
                        let vs_ort = c.expected_max_abs_err.unwrap_or(f64::INFINITY);
                        let ort_ok = vs_ort <= r.tolerance.abs + r.tolerance.rel * scale;
                        if !c.ok || !ort_ok {
                            failures.push(format!("{name}: {c:?} (tolerance {:?})", r.tolerance));
                        }
                    }
                    assert!(r.report.cycles > 0);
                }
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_target_override_is_followed() {
    // A shallower systolic array (32 rows): the compiler picks a shorter reduction step and the result still matches.
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t
        .with_params(&[("SA_ROWS".to_owned(), 32)])
        .expect("params");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/matmul_bias_relu_large");
    let mut g = compiler::onnx::import_file(dir.join("model.onnx")).expect("import");
    compiler::interp::fold_constants(&mut g);
    let inputs = compiler::run::random_inputs(&g, 3);
    let small = compiler::run::run(t, &m, &g, &inputs, None).expect("runs");
    let big = compiler::run::run(t, t.machine(), &g, &inputs, None).expect("runs");
    assert!(small.checks.iter().all(|c| c.ok), "{:?}", small.checks);
    assert_ne!(
        small.compiled.insts.len(),
        big.compiled.insts.len(),
        "the tiling follows the array size"
    );
}

fn f32t(shape: Vec<usize>) -> compiler::ir::TensorType {
    compiler::ir::TensorType {
        elem: compiler::ir::ElemType::F32,
        shape,
    }
}

#[test]
fn outputs_that_are_inputs_or_constants_need_no_code() {
    use compiler::ir::{Graph, Op, Tensor};
    // y = x (an alias) and z = c1 + c2 (folded to a constant).
    let mut g = Graph::default();
    let x = g.add_value("x", f32t(vec![3, 5]));
    g.inputs.push(x);
    let y = g.add_node("y", Op::Identity, vec![x]).expect("typed")[0];
    let c1 = g.add_constant(
        "c1",
        Tensor::new(f32t(vec![2, 3]), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
    );
    let c2 = g.add_constant("c2", Tensor::new(f32t(vec![3]), vec![0.5, 0.25, 0.125]));
    let z = g.add_node("z", Op::Add, vec![c1, c2]).expect("typed")[0];
    g.outputs.extend([y, z]);
    compiler::interp::fold_constants(&mut g);
    let inputs = compiler::run::random_inputs(&g, 5);
    for t in targets::all() {
        let r = compiler::run::run(t, t.machine(), &g, &inputs, None)
            .unwrap_or_else(|e| panic!("{}: {e}", t.name()));
        assert!(
            r.checks.iter().all(|c| c.ok && c.max_abs_err == 0.0),
            "{}: {:?}",
            t.name(),
            r.checks
        );
    }
}

#[test]
fn a_graph_the_lowering_cannot_take_is_refused_with_the_node_named() {
    use compiler::ir::{ElemType, Graph, Op};
    // A cast of values that need not be integers to int8.
    let mut g = Graph::default();
    let x = g.add_value("x", f32t(vec![2, 3, 4]));
    g.inputs.push(x);
    let r = g.add_node("r", Op::Relu, vec![x]).expect("typed")[0];
    let op = Op::Cast { to: ElemType::I8 };
    let y = g.add_node("odd_cast", op, vec![r]).expect("typed")[0];
    g.outputs.push(y);
    for t in targets::all() {
        let e = compiler::lower::compile(t, t.machine(), &g).expect_err("refused");
        assert_eq!(e.node(), Some("odd_cast"), "{}: {e}", t.name());
        assert!(
            e.to_string().contains("not supported by the lowering yet"),
            "{e}"
        );
    }
}

#[test]
fn reductions_over_leading_dimensions_compile_and_match() {
    use compiler::ir::{Graph, Op, ReduceKind};
    // Over the first dimension, and over the middle one without keeping it.
    let mut g = Graph::default();
    let x = g.add_value("x", f32t(vec![2, 3, 4]));
    g.inputs.push(x);
    let r = g.add_node("r", Op::Relu, vec![x]).expect("typed")[0];
    let first = Op::Reduce {
        kind: ReduceKind::Sum,
        axes: vec![0],
        keepdims: true,
    };
    let a = g.add_node("first", first, vec![r]).expect("typed")[0];
    let middle = Op::Reduce {
        kind: ReduceKind::Max,
        axes: vec![1],
        keepdims: false,
    };
    let b = g.add_node("middle", middle, vec![x]).expect("typed")[0];
    g.outputs.extend([a, b]);
    let inputs = compiler::run::random_inputs(&g, 3);
    tests::matches_everywhere(&g, &inputs, &[]);
}

#[test]
fn a_target_lacking_a_function_computes_it_and_strict_refuses_it_saying_which() {
    use compiler::ir::{Graph, Op, Unary};
    let mut g = Graph::default();
    let x = g.add_value("x", f32t(vec![2, 8]));
    g.inputs.push(x);
    let e = g
        .add_node("e", Op::Unary(Unary::Exp), vec![x])
        .expect("typed")[0];
    let s = g
        .add_node("s", Op::Unary(Unary::Sigmoid), vec![e])
        .expect("typed")[0];
    let y = g
        .add_node("soft", Op::Unary(Unary::Tanh), vec![s])
        .expect("typed")[0];
    g.outputs.push(y);
    let t = targets::by_name("systolic-os").expect("shipped");
    let strict = compiler::lower::Options {
        approximations: false,
        ..Default::default()
    };
    let e = compiler::lower::compile_with(t, t.machine(), &g, strict)
        .expect_err("systolic-os has no exp, tanh or sigmoid");
    assert!(
        e.to_string().contains("the target lacks `d = exp(a)`"),
        "{e}"
    );
    assert!(e.to_string().contains("`--strict` refuses"), "{e}");
    // Without --strict, every target computes them (systolic-os from its
    // multiply-adds and reciprocals), and matches.
    let inputs = compiler::run::random_inputs(&g, 2);
    tests::matches_everywhere(&g, &inputs, &[]);
}

/// A scalar computed at run time (the mel front end's `max - 80` dB floor)
/// read by a node of a larger shape: it was refused on every target, as a
/// broadcast along the last dimension.
#[test]
fn a_computed_scalar_broadcasts_against_every_element() {
    use compiler::ir::{Graph, Op, ReduceKind, Tensor};
    let mut g = Graph::default();
    let x = g.add_value("x", f32t(vec![6, 40]));
    g.inputs.push(x);
    let all = Op::Reduce {
        kind: ReduceKind::Max,
        axes: vec![0, 1],
        keepdims: false,
    };
    let m = g.add_node("peak", all, vec![x]).expect("typed")[0];
    assert!(g.ty(m).shape.is_empty(), "a scalar");
    let k = g.add_constant("range", Tensor::new(f32t(vec![]), vec![0.5]));
    let floor = g.add_node("floor", Op::Sub, vec![m, k]).expect("typed")[0];
    let y = g.add_node("clip", Op::Max, vec![x, floor]).expect("typed")[0];
    g.outputs.push(y);
    let inputs = compiler::run::random_inputs(&g, 4);
    tests::matches_everywhere(&g, &inputs, &[]);
}

/// A row's maximum compared with its row: exactly one element of each row
/// (with random data) is at the maximum. Where products read bf16
/// (pim-dram, systolic-os), widening the maximum by a product with ones
/// rounded it, and `max <= x` was false everywhere.
#[test]
fn a_row_result_widened_for_a_comparison_is_exact() {
    use compiler::ir::{Graph, Op, ReduceKind};
    let mut g = Graph::default();
    let x = g.add_value("x", f32t(vec![2, 3, 4]));
    g.inputs.push(x);
    let max = Op::Reduce {
        kind: ReduceKind::Max,
        axes: vec![2],
        keepdims: true,
    };
    let m = g.add_node("max", max, vec![x]).expect("typed")[0];
    let hit = g
        .add_node("hit", Op::LessOrEqual, vec![m, x])
        .expect("typed")[0];
    g.outputs.push(hit);
    let inputs = compiler::run::random_inputs(&g, 5);
    tests::matches_everywhere(&g, &inputs, &[]);
}

#[test]
fn a_computed_operand_broadcast_against_a_constant() {
    use compiler::ir::{Graph, Op, Tensor};
    // relu(x)[1, 5] + c[4, 5], and relu(x)[1, 5] * d[3, 1, 5]: the computed rows repeat.
    let mut g = Graph::default();
    let x = g.add_value("x", f32t(vec![1, 5]));
    g.inputs.push(x);
    let r = g.add_node("r", Op::Relu, vec![x]).expect("typed")[0];
    let c = g.add_constant(
        "c",
        Tensor::new(
            f32t(vec![4, 5]),
            (0..20).map(|i| f64::from(i) * 0.25).collect(),
        ),
    );
    let y = g.add_node("y", Op::Add, vec![r, c]).expect("typed")[0];
    let d = g.add_constant(
        "d",
        Tensor::new(
            f32t(vec![3, 1, 5]),
            (0..15).map(|i| 1.0 + f64::from(i) * 0.125).collect(),
        ),
    );
    let z = g.add_node("z", Op::Mul, vec![d, r]).expect("typed")[0];
    g.outputs.extend([y, z]);
    tests::runs_everywhere(&g, 6);
}

#[test]
fn empty_tensors_compile_and_match() {
    use compiler::ir::{Graph, Op, Tensor};
    // Found by review: an empty tensor divided by zero in the tile sizing.
    // A zero-column input through an element-wise op, and a zero-row product.
    for (xs, ws) in [(vec![3, 0], vec![0, 4]), (vec![0, 5], vec![5, 4])] {
        let mut g = Graph::default();
        let x = g.add_value("x", f32t(xs.clone()));
        g.inputs.push(x);
        let r = g.add_node("r", Op::Relu, vec![x]).expect("typed")[0];
        let n: usize = ws.iter().product();
        let w = g.add_constant("w", Tensor::new(f32t(ws), vec![0.5; n]));
        let y = g.add_node("y", Op::MatMul, vec![r, w]).expect("typed")[0];
        g.outputs.push(y);
        // [3, 0] x [0, 4] is zeros; [0, 5] x [5, 4] is empty.
        tests::runs_everywhere(&g, 1);
    }
}
