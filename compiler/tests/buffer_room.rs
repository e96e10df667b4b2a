//! Regions whose on-chip buffers fit by the bytes live at once, but not
//! as a greedy placement first puts them: each compiles on every shipped
//! target and matches the reference interpreter. A `Relu` of a 70 x 200
//! tensor before its product with a 200 x 130 constant was refused on
//! systolic-os ("the buffers need 70496 bytes at their peak, but only
//! 65536 are available", where at most 62,400 are live at once): the
//! element-wise result's stores are waited for by the product, so their
//! buffers live across both regions, and largest-first placement left a
//! gap too small between them.

mod onnx_util;

use compiler::onnx::proto::NodeProto;
use onnx_util::{folded, ramp, run_everywhere};

fn product_after(op: &str) -> compiler::ir::Graph {
    let nodes = vec![
        NodeProto::new(op, "first", &["x"], &["r"]),
        NodeProto::new("MatMul", "product", &["r", "w"], &["y"]),
    ];
    folded(
        nodes,
        &[70, 200],
        &["y"],
        vec![ramp("w", &[200, 130], -1.0, 1.0 / 13_000.0)],
    )
}

#[test]
fn a_relu_then_a_product_fits_every_machine() {
    let ran = run_everywhere(&product_after("Relu"), 5, "Relu then MatMul", &[]);
    assert_eq!(ran.len(), targets::all().len());
}

/// The same with a `Reciprocal` (also refused on systolic-os before).
#[test]
fn a_reciprocal_then_a_product_fits_every_machine() {
    let ran = run_everywhere(
        &product_after("Reciprocal"),
        6,
        "Reciprocal then MatMul",
        &[],
    );
    assert_eq!(ran.len(), targets::all().len());
}
