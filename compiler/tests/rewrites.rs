//! Operations a machine lacks, built from the instructions it has: each
//! compiles where it did not and matches the interpreter on every target
//! that can express it.

mod onnx_util;

use onnx_util::*;

/// `sqrt(x)` as `recip(rsqrt(x))` on machines without a square root
/// (simd-dsp and pim-dram have `rsqrt` and `recip`), exact at 0; and a
/// reciprocal of it as one `rsqrt` again.
#[test]
fn a_square_root_is_built_from_a_reciprocal_square_root() {
    use compiler::onnx::proto::NodeProto;
    for (nodes, what) in [
        (
            vec![
                NodeProto::new("Mul", "sq", &["x", "x"], &["s"]),
                NodeProto::new("Sqrt", "root", &["s"], &["y"]),
            ],
            "sqrt(x²)",
        ),
        (
            vec![
                NodeProto::new("Mul", "sq", &["x", "x"], &["s"]),
                NodeProto::new("Sqrt", "root", &["s"], &["r"]),
                NodeProto::new("Reciprocal", "inv", &["r"], &["y"]),
            ],
            "1 / sqrt(x²)",
        ),
    ] {
        let g = import_ok(&encode(graph(
            nodes,
            vec![input("x", &[4, 64])],
            &["y"],
            vec![],
        )));
        let ran = run_everywhere(&g, 3, what, &["lacks"]);
        for t in ["simd-dsp", "pim-dram", "vliw-systolic"] {
            assert!(
                ran.contains(&t),
                "{what} did not run on {t}: ran on {ran:?}"
            );
        }
    }
}
