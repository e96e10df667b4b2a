//! Dynamic quantisation as onnxruntime's `quantize_dynamic` writes it:
//! `DynamicQuantizeLinear` of the activations (scale and zero point
//! computed at run time), then `MatMulInteger` or `ConvInteger` with that
//! run-time zero point and constant uint8 weights, cast to float and
//! scaled by the product of the scales. Each compiles for every shipped
//! target and matches the reference interpreter.

mod onnx_util;

use compiler::onnx::proto::tensor_proto::DataType;
use compiler::onnx::proto::{AttributeProto, NodeProto, TensorProto};
use onnx_util::{folded, run_everywhere};

/// Constant uint8 weights of `dims`, a spread of values.
fn weights(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    let raw = (0..n).map(|i| ((i * 37 + 11) % 251) as u8).collect();
    TensorProto::from_raw(name, DataType::Uint8, dims, raw)
}

fn u8_scalar(name: &str, v: u8) -> TensorProto {
    TensorProto::from_raw(name, DataType::Uint8, &[], vec![v])
}

/// The scaling after the integer product: `float(acc) · (x_scale · w_scale)`.
fn rescale() -> Vec<NodeProto> {
    vec![
        NodeProto::new("Mul", "scales", &["xs", "ws"], &["s"]),
        NodeProto::new("Cast", "to_float", &["acc"], &["accf"])
            .with(AttributeProto::int("to", DataType::Float as i64)),
        NodeProto::new("Mul", "rescaled", &["accf", "s"], &["y"]),
    ]
}

#[test]
fn matmul_integer_with_a_run_time_zero_point() {
    let mut nodes = vec![
        NodeProto::new("DynamicQuantizeLinear", "dql", &["x"], &["xq", "xs", "xz"]),
        NodeProto::new("MatMulInteger", "mmi", &["xq", "w", "xz", "wz"], &["acc"]),
    ];
    nodes.extend(rescale());
    let inits = vec![
        weights("w", &[40, 24]),
        u8_scalar("wz", 131),
        TensorProto::from_f32("ws", &[], &[0.01]),
    ];
    let g = folded(nodes, &[6, 40], &["y", "xq", "xz"], inits);
    let ran = run_everywhere(&g, 7, "dynamic MatMulInteger", &[]);
    assert_eq!(ran.len(), targets::all().len());
}

/// 960 activations: their minimum and maximum are reductions of a row
/// wider than simd-dsp's register file (which once kept every chunk live).
/// The product's reduction (8 channels x 9 window positions = 72) is
/// narrower than pim-dram's step (128): the window tiles' columns past
/// 72 were left as an earlier tile had them, a NaN there times a zero
/// weight gave two NaN pixels per channel.
#[test]
fn conv_integer_with_a_run_time_zero_point() {
    let mut nodes = vec![
        NodeProto::new("DynamicQuantizeLinear", "dql", &["x"], &["xq", "xs", "xz"]),
        NodeProto::new("ConvInteger", "ci", &["xq", "w", "xz", "wz"], &["acc"])
            .with(AttributeProto::ints("pads", &[1, 1, 1, 1])),
    ];
    nodes.extend(rescale());
    let inits = vec![
        weights("w", &[16, 8, 3, 3]),
        u8_scalar("wz", 120),
        TensorProto::from_f32("ws", &[], &[0.02]),
    ];
    let g = folded(nodes, &[1, 8, 10, 12], &["y"], inits);
    let ran = run_everywhere(&g, 3, "dynamic ConvInteger", &[]);
    assert_eq!(ran.len(), targets::all().len());
}
