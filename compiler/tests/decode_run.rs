//! Decode attention's scores: one row per head against a transposed cache
//! of keys (`q · kᵀ`), on every target. Where a machine has no transposing
//! copy (pim-dram), the transpose was done element by element (two scalar
//! instructions per element: 1.6 M for GPT-2's 12 heads of 1025 × 64);
//! the product now takes dot products with the rows of `k` instead.

mod onnx_util;

use compiler::ir::{ElemType, Graph, Op, TensorType};

fn scores(heads: usize, keys: usize, d: usize) -> Graph {
    let mut g = Graph::default();
    let ty = |shape: Vec<usize>| TensorType {
        elem: ElemType::F32,
        shape,
    };
    let q = g.add_value("q", ty(vec![heads, 1, d]));
    let k = g.add_value("k", ty(vec![heads, keys, d]));
    g.inputs.extend([q, k]);
    let kt = g
        .add_node(
            "k.t",
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            vec![k],
        )
        .expect("typed")[0];
    let y = g
        .add_node("scores", Op::MatMul, vec![q, kt])
        .expect("typed")[0];
    g.outputs.push(y);
    g
}

#[test]
fn one_row_against_a_transposed_cache_runs_everywhere() {
    let g = scores(3, 1025, 64);
    let ran = onnx_util::run_everywhere(&g, 6, "scores", &[]);
    assert_eq!(ran.len(), targets::all().len());
}

#[test]
fn pim_dram_takes_dot_products_not_an_element_transpose() {
    let (heads, keys) = (3, 1025);
    let g = scores(heads, keys, 64);
    let t = targets::by_name("pim-dram").expect("target");
    let m = t.machine();
    let c = compiler::lower::compile(t, m, &g).expect("compiles");
    let store = m
        .instructions
        .iter()
        .position(|i| i.name == "sst")
        .expect("pim-dram's scalar store");
    let stores = c.insts.iter().filter(|i| i.inst.index() == store).count();
    // One per score; the element transpose stored every element of `k`.
    assert!(stores <= heads * keys, "{stores} scalar stores");
}
