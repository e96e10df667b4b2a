//! Every bundled example compiles for every shipped target, runs on its
//! simulator, and matches both the reference interpreter and onnxruntime's
//! stored output, within the tolerance of the narrowest type the program
//! computes in (`compiler::run::Tolerance::for_dtype`). Every checker runs
//! inside the compile (IR verifier, memory plan, register allocation, schedule).

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
fn every_example_runs_on_every_target_and_matches() {
    let all = examples();
    assert!(all.len() >= 4);
    let mut failures = Vec::new();
    for dir in &all {
        let mut g = compiler::onnx::import_file(dir.join("model.onnx")).expect("import");
        compiler::interp::fold_constants(&mut g);
        compiler::ir::verify(&g).expect("verified");
        let data = dir.join("test_data_set_0");
        let input = compiler::onnx::read_tensor_file(data.join("input_0.pb"))
            .expect("input")
            .1;
        let expected = compiler::onnx::read_tensor_file(data.join("output_0.pb"))
            .expect("output")
            .1;
        for t in targets::all() {
            let name = format!(
                "{} on {}",
                dir.file_name().unwrap_or_default().to_string_lossy(),
                t.name()
            );
            match compiler::run::run(
                t,
                t.machine(),
                &g,
                std::slice::from_ref(&input),
                Some(std::slice::from_ref(&expected)),
            ) {
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
