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
fn softmax_runs_where_exp_exists() {
    for dims in [[4i64, 40], [3, 130]] {
        let node =
            NodeProto::new("Softmax", "s", &["x"], &["y"]).with(AttributeProto::int("axis", -1));
        let g = model(node, &dims, vec![]);
        // systolic-os has no exp.
        assert_eq!(check(&g, &format!("Softmax {dims:?}"), &["d = exp(a)"]), 3);
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
    assert_eq!(check(&g, "masked softmax", &["d = exp(a)"]), 3);
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
    // Softmax's exp is fused after the widened maximum; the error names the exp.
    let node = NodeProto::new("Softmax", "s", &["x"], &["y"]).with(AttributeProto::int("axis", -1));
    let g = model(node, &[4, 40], vec![]);
    let t = targets::by_name("systolic-os").expect("shipped");
    let e = compiler::lower::compile(t, t.machine(), &g).expect_err("no exp");
    assert_eq!(e.node.as_deref(), Some("s/exp"), "{e}");
    assert_eq!(e.op.as_deref(), Some("Exp"), "{e}");
}
