//! The bundled example models: imported, constant-folded and run by the
//! reference interpreter, they match onnxruntime's stored outputs.
//! Tolerance (f32 models): |err| <= 1e-5 + 1e-5 * |expected| — the interpreter
//! accumulates matmuls in f64 and rounds once; onnxruntime accumulates in f32.

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
