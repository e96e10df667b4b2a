//! `Gather`: an embedding lookup (computed indices into a constant table,
//! negative indices too) and a selection by constant indices from a
//! computed tensor, on every target against the reference interpreter.

use compiler::ir::{ElemType, Graph, Op, Tensor, TensorType};

fn ty(elem: ElemType, shape: Vec<usize>) -> TensorType {
    TensorType { elem, shape }
}

#[test]
fn embedding_lookup_runs_everywhere() {
    let (vocab, d) = (11, 8);
    let mut g = Graph::default();
    let ids = g.add_value("ids", ty(ElemType::I64, vec![2, 3]));
    g.inputs.push(ids);
    let table = g.add_constant(
        "table",
        Tensor::new(
            ty(ElemType::F32, vec![vocab, d]),
            tests::values(vocab * d, 3, -1.0, 1.0),
        ),
    );
    let e = g
        .add_node("embed", Op::Gather { axis: 0 }, vec![table, ids])
        .expect("node")[0];
    g.outputs.push(e);
    assert_eq!(g.ty(e).shape, vec![2, 3, d]);
    // Indices in range, some negative (they count from the end).
    let inputs = vec![Tensor::new(
        ty(ElemType::I64, vec![2, 3]),
        vec![0.0, 10.0, -1.0, 5.0, -11.0, 3.0],
    )];
    let want = compiler::interp::run(&g, &inputs).expect("interprets");
    // Row 1 of the result is row 10 of the table; row 2 (index -1) too.
    let row10 = &g.constants[&table].data[10 * d..11 * d];
    assert_eq!(&want[0].data[d..2 * d], row10);
    assert_eq!(&want[0].data[2 * d..3 * d], row10);
    tests::matches_everywhere(&g, &inputs, &[]);
}

#[test]
fn constant_indices_select_from_a_computed_tensor() {
    let mut g = Graph::default();
    let x = g.add_value("x", ty(ElemType::F32, vec![6, 4]));
    g.inputs.push(x);
    let r = g.add_node("r", Op::Relu, vec![x]).expect("node")[0];
    let idx = g.add_constant(
        "idx",
        Tensor::new(ty(ElemType::I64, vec![4]), vec![1.0, 2.0, 5.0, -6.0]),
    );
    let y = g
        .add_node("pick", Op::Gather { axis: 0 }, vec![r, idx])
        .expect("node")[0];
    g.outputs.push(y);
    tests::runs_everywhere(&g, 9);
}

#[test]
fn out_of_range_and_unsupported_gathers_are_errors() {
    let mut g = Graph::default();
    let x = g.add_value("x", ty(ElemType::F32, vec![3, 4]));
    let i = g.add_value("i", ty(ElemType::I64, vec![2]));
    g.inputs.extend([x, i]);
    let y = g
        .add_node("pick", Op::Gather { axis: 0 }, vec![x, i])
        .expect("node")[0];
    g.outputs.push(y);
    // The interpreter refuses an index out of range.
    let bad = [
        Tensor::new(ty(ElemType::F32, vec![3, 4]), vec![0.0; 12]),
        Tensor::new(ty(ElemType::I64, vec![2]), vec![0.0, 3.0]),
    ];
    assert!(compiler::interp::run(&g, &bad).is_err());
    // Computed data and computed indices: refused, naming the node.
    let t = targets::by_name("vliw-systolic").expect("target");
    let e = compiler::lower::compile(t, t.machine(), &g).expect_err("refused");
    assert_eq!(e.node(), Some("pick"), "{e}");
    assert!(e.message().contains("not supported yet"), "{e}");
}
