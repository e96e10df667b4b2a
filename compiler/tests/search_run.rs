//! `ArgMax`, `ArgMin` and `TopK` (searches built from comparisons and
//! reductions) compile for every shipped target, and find exactly the
//! indices the reference interpreter finds, on random data of shapes past
//! ONNX's node tests: along a middle axis, and over rows wider than one
//! register.

mod onnx_util;

use compiler::onnx::proto::{AttributeProto, NodeProto, TensorProto};
use onnx_util::folded;

/// Runs `g` everywhere and asserts every output equals the interpreter's
/// exactly (indices are not within a tolerance: they are right or wrong).
fn indices_match_everywhere(g: &compiler::ir::Graph, what: &str) {
    let inputs = compiler::run::random_inputs(g, 11);
    let want = compiler::interp::run(g, &inputs).expect("the interpreter runs it");
    for t in targets::all() {
        let r = compiler::run::run(t, t.machine(), g, &inputs, None)
            .unwrap_or_else(|e| panic!("{what} on {}: {e}", t.name()));
        for (k, (got, want)) in r.outputs.iter().zip(&want).enumerate() {
            if want.ty.elem.is_float() {
                assert!(r.checks[k].ok, "{what} on {}: {:?}", t.name(), r.checks);
            } else {
                assert_eq!(got.data, want.data, "{what} on {}, output {k}", t.name());
            }
        }
    }
}

#[test]
fn arg_max_and_min_along_a_middle_axis_and_a_wide_row() {
    let arg = |op: &str, name: &str, axis: i64, keep: i64, out: &str| {
        NodeProto::new(op, name, &["x"], &[out])
            .with(AttributeProto::int("axis", axis))
            .with(AttributeProto::int("keepdims", keep))
    };
    let g = folded(
        vec![
            arg("ArgMax", "max_mid", 1, 0, "a"),
            arg("ArgMin", "min_last", -1, 1, "b"),
            arg("ArgMax", "max_last", 2, 1, "c").with(AttributeProto::int("select_last_index", 1)),
        ],
        &[2, 9, 70],
        &["a", "b", "c"],
        vec![],
    );
    indices_match_everywhere(&g, "ArgMax/ArgMin");
}

#[test]
fn top_k_largest_and_smallest() {
    let k = TensorProto::from_i64("k", &[1], &[4]);
    let top = |name: &str, largest: i64, outs: &[&str]| {
        NodeProto::new("TopK", name, &["x", "k"], outs)
            .with(AttributeProto::int("largest", largest))
    };
    let g = folded(
        vec![top("top", 1, &["v", "i"]), top("bottom", 0, &["w", "j"])],
        &[3, 50],
        &["v", "i", "w", "j"],
        vec![k],
    );
    indices_match_everywhere(&g, "TopK");
}
