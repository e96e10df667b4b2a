//! Every Gemm variant the importer canonicalises (transA, transB, alpha,
//! beta, bias shapes) compiles for every shipped target and runs on its
//! simulator, matching the reference interpreter. A transposed activation
//! (`transA = 1`) needs a transposing copy; a target without one says so.

mod onnx_util;

use compiler::onnx::proto::{AttributeProto, NodeProto};
use onnx_util::{encode, graph, import_ok, input, ramp};

fn gemm(
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
    beta: f32,
    c_dims: Option<&[i64]>,
) -> compiler::ir::Graph {
    let (m, k, n) = (3i64, 5i64, 7i64);
    let a_dims = if trans_a { [k, m] } else { [m, k] };
    let b_dims = if trans_b { [n, k] } else { [k, n] };
    let mut node_inputs = vec!["A", "B"];
    let mut inits = vec![ramp("B", &b_dims, -0.5, 0.0625)];
    if let Some(d) = c_dims {
        node_inputs.push("C");
        inits.push(ramp("C", d, 0.25, 0.125));
    }
    let node = NodeProto::new("Gemm", "g", &node_inputs, &["Y"])
        .with(AttributeProto::int("transA", i64::from(trans_a)))
        .with(AttributeProto::int("transB", i64::from(trans_b)))
        .with(AttributeProto::float("alpha", alpha))
        .with(AttributeProto::float("beta", beta));
    let mut g = import_ok(&encode(graph(
        vec![node],
        vec![input("A", &a_dims)],
        &["Y"],
        inits,
    )));
    compiler::interp::fold_constants(&mut g);
    g
}

#[test]
fn every_gemm_variant_runs_on_every_target() {
    for trans_a in [false, true] {
        for trans_b in [false, true] {
            for (alpha, beta, c) in [
                (1.0, 1.0, None),
                (0.5, 2.0, Some(&[7i64][..])),
                (1.0, 0.5, Some(&[3i64, 7][..])),
            ] {
                let g = gemm(trans_a, trans_b, alpha, beta, c);
                let inputs = compiler::run::random_inputs(&g, 9);
                for t in targets::all() {
                    let case = format!(
                        "{}: transA={trans_a} transB={trans_b} alpha={alpha} beta={beta} C={c:?}",
                        t.name()
                    );
                    match compiler::run::run(t, t.machine(), &g, &inputs, None) {
                        Ok(r) => assert!(r.checks.iter().all(|x| x.ok), "{case}: {:?}", r.checks),
                        Err(compiler::run::RunError::Lower(e)) if trans_a => {
                            assert!(
                                e.to_string().contains("lacks a transposing copy"),
                                "{case}: {e}"
                            );
                        }
                        Err(e) => panic!("{case}: {e}"),
                    }
                }
            }
        }
    }
}

#[test]
fn gelu_after_a_product_runs_where_the_functions_exist() {
    for approx in ["none", "tanh"] {
        let mm = NodeProto::new("MatMul", "mm", &["A", "B"], &["H"]);
        let gelu = NodeProto::new("Gelu", "gelu", &["H"], &["Y"])
            .with(AttributeProto::string("approximate", approx));
        let mut g = import_ok(&encode(graph(
            vec![mm, gelu],
            vec![input("A", &[3, 5])],
            &["Y"],
            vec![ramp("B", &[5, 6], -0.4, 0.03)],
        )));
        compiler::interp::fold_constants(&mut g);
        let inputs = compiler::run::random_inputs(&g, 4);
        let mut ran = 0;
        for t in targets::all() {
            match compiler::run::run(t, t.machine(), &g, &inputs, None) {
                Ok(r) => {
                    assert!(
                        r.checks.iter().all(|x| x.ok),
                        "{} {approx}: {:?}",
                        t.name(),
                        r.checks
                    );
                    ran += 1;
                }
                Err(compiler::run::RunError::Lower(e)) => assert!(
                    e.to_string().contains("the target lacks"),
                    "{} {approx}: {e}",
                    t.name()
                ),
                Err(e) => panic!("{} {approx}: {e}", t.name()),
            }
        }
        assert!(ran >= 3, "{approx}: ran on {ran} targets");
    }
}
