//! End-to-end tests of the toolchain (this crate has no library code):
//!
//! - `end_to_end.rs`: every bundled example on every shipped target, against
//!   the reference interpreter and onnxruntime's stored outputs;
//! - `random_graphs.rs`: a property test over random MatMul/element-wise
//!   graphs with odd shapes, on every target;
//! - `filetests.rs`: small graphs in `filetests/*.tgraph`, one Markdown
//!   snapshot per (file, target) with a section per pipeline stage.
//!
//! The helpers here are what the suites share.

use std::path::{Path, PathBuf};

/// The bundled example models (`examples/<name>/model.onnx`), sorted.
pub fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.join("model.onnx").exists())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Compiles and runs `g` on every shipped target with seeded inputs, and
/// asserts every output matches the reference interpreter.
pub fn runs_everywhere(g: &compiler::ir::Graph, seed: u64) {
    matches_everywhere(g, &compiler::run::random_inputs(g, seed), &[]);
}

/// Compiles and runs `g` on every shipped target but those named in `except`
/// with `inputs`, and asserts every output matches the reference interpreter.
pub fn matches_everywhere(
    g: &compiler::ir::Graph,
    inputs: &[compiler::ir::Tensor],
    except: &[&str],
) {
    for t in targets::all()
        .iter()
        .filter(|t| !except.contains(&t.name()))
    {
        let r = compiler::run::run(t, t.machine(), g, inputs, None)
            .unwrap_or_else(|e| panic!("{}: {e}\n{g}", t.name()));
        assert!(
            r.checks.iter().all(|c| c.ok),
            "{}: {:?}\n{g}",
            t.name(),
            r.checks
        );
    }
}

/// Deterministic f32 values in `[lo, hi)` (xorshift from `seed`).
pub fn values(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            compiler::ir::ElemType::F32.round(lo + (hi - lo) * u)
        })
        .collect()
}

/// The small bench set's synthetic GEMM `a · b`: `a: [m, k]` an input, `b` a
/// seeded constant.
pub fn gemm_graph(m: usize, k: usize, n: usize) -> compiler::ir::Graph {
    compiler::run::gemm_graph(m, k, n)
}
