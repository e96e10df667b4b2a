//! Property test: random small graphs of matrix products and element-wise ops,
//! with shapes that are multiples of no tile size, compile on every shipped
//! target and match the reference interpreter within the tolerance of the
//! narrowest type the program computes in.

use compiler::ir::{ElemType, Graph, Op, Tensor, TensorType, ValueId};
use proptest::prelude::*;
use tests::values;

/// One layer of a random graph.
#[derive(Clone, Debug)]
enum Layer {
    /// `x @ W` with a constant `W` of `n` columns.
    MatMulConst(usize),
    /// `x @ x^T`-free product with a second input of `n` columns: `x @ y`.
    MatMulInput(usize),
    /// `x op c` with a constant broadcast along rows (`[n]`) or full.
    EwConst(u8, bool),
    /// `x op z` with a graph input of the same shape.
    EwInput(u8),
    /// `x op z` with a graph input of one row, broadcast down the rows.
    EwInputRow(u8),
    /// `max(x, 0)`.
    Relu,
    /// `x^T`.
    Transpose,
    /// An element-wise function: exp, tanh, sigmoid, erf, abs, neg.
    Unary(u8),
}

fn ew_op(k: u8) -> Op {
    match k % 6 {
        0 => Op::Add,
        1 => Op::Sub,
        2 => Op::Mul,
        3 => Op::Max,
        4 => Op::Min,
        _ => Op::Div,
    }
}

fn unary(k: u8) -> compiler::ir::Unary {
    use compiler::ir::Unary;
    [
        Unary::Exp,
        Unary::Tanh,
        Unary::Sigmoid,
        Unary::Erf,
        Unary::Abs,
        Unary::Neg,
    ][usize::from(k % 6)]
}

fn f32t(shape: Vec<usize>) -> TensorType {
    TensorType {
        elem: ElemType::F32,
        shape,
    }
}

fn build(m: usize, k: usize, layers: &[Layer], seed: u64) -> Graph {
    let mut g = Graph::default();
    let x = g.add_value("x", f32t(vec![m, k]));
    g.inputs.push(x);
    let mut cur: ValueId = x;
    let (mut rows, mut cols) = (m, k);
    for (i, l) in layers.iter().enumerate() {
        let s = seed.wrapping_add(i as u64 * 7919);
        cur = match l {
            Layer::MatMulConst(n) => {
                // Scaled so activations stay near 1 whatever the depth.
                let scale = 1.0 / (cols as f64).sqrt();
                let w = g.add_constant(
                    format!("w{i}"),
                    Tensor::new(f32t(vec![cols, *n]), values(cols * n, s, -scale, scale)),
                );
                cols = *n;
                g.add_node(format!("mm{i}"), Op::MatMul, vec![cur, w])
                    .expect("matmul")[0]
            }
            Layer::MatMulInput(n) => {
                let y = g.add_value(format!("y{i}"), f32t(vec![cols, *n]));
                g.inputs.push(y);
                cols = *n;
                g.add_node(format!("mm{i}"), Op::MatMul, vec![cur, y])
                    .expect("matmul")[0]
            }
            Layer::EwConst(op, full) => {
                let shape = if *full { vec![rows, cols] } else { vec![cols] };
                let n = shape.iter().product();
                // Divisors away from zero.
                let c = g.add_constant(
                    format!("c{i}"),
                    Tensor::new(f32t(shape), values(n, s, 0.5, 1.5)),
                );
                g.add_node(format!("ew{i}"), ew_op(*op), vec![cur, c])
                    .expect("ew")[0]
            }
            Layer::EwInput(op) => {
                let z = g.add_value(format!("z{i}"), f32t(vec![rows, cols]));
                g.inputs.push(z);
                let op = if ew_op(*op) == Op::Div {
                    Op::Mul
                } else {
                    ew_op(*op)
                };
                g.add_node(format!("ew{i}"), op, vec![cur, z]).expect("ew")[0]
            }
            Layer::EwInputRow(op) => {
                let z = g.add_value(format!("z{i}"), f32t(vec![cols]));
                g.inputs.push(z);
                let op = if ew_op(*op) == Op::Div {
                    Op::Sub
                } else {
                    ew_op(*op)
                };
                g.add_node(format!("ew{i}"), op, vec![cur, z]).expect("ew")[0]
            }
            Layer::Relu => g
                .add_node(format!("relu{i}"), Op::Relu, vec![cur])
                .expect("relu")[0],
            Layer::Unary(u) => g
                .add_node(format!("u{i}"), Op::Unary(unary(*u)), vec![cur])
                .expect("unary")[0],
            Layer::Transpose => {
                std::mem::swap(&mut rows, &mut cols);
                g.add_node(
                    format!("t{i}"),
                    Op::Transpose { perm: vec![1, 0] },
                    vec![cur],
                )
                .expect("transpose")[0]
            }
        };
    }
    g.outputs.push(cur);
    g
}

fn layer() -> impl Strategy<Value = Layer> {
    prop_oneof![
        3 => (1usize..40).prop_map(Layer::MatMulConst),
        1 => (1usize..24).prop_map(Layer::MatMulInput),
        2 => (0u8..6, any::<bool>()).prop_map(|(o, f)| Layer::EwConst(o, f)),
        1 => (0u8..6).prop_map(Layer::EwInput),
        1 => (0u8..6).prop_map(Layer::EwInputRow),
        1 => Just(Layer::Relu),
        1 => Just(Layer::Transpose),
        1 => (0u8..6).prop_map(Layer::Unary),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_graphs_match_the_reference_on_every_target(
        m in 1usize..12,
        k in 1usize..40,
        layers in prop::collection::vec(layer(), 1..4),
        seed in any::<u64>(),
    ) {
        let g = build(m, k, &layers, seed);
        compiler::ir::verify(&g).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let inputs = compiler::run::random_inputs(&g, seed);
        let transposes = layers.iter().any(|l| matches!(l, Layer::Transpose));
        let functions = layers.iter().any(|l| matches!(l, Layer::Unary(_)));
        for t in targets::all() {
            let r = match compiler::run::run(t, t.machine(), &g, &inputs, None) {
                Ok(r) => r,
                // Known gap: pim-dram and simd-dsp have no transposing instruction.
                Err(compiler::run::RunError::Lower(e)) if transposes && e.lacks("d[j, i] = a[i, j]") => continue,
                // A target without an element-wise function (systolic-os has no exp, tanh or erf) says which.
                Err(compiler::run::RunError::Lower(e)) if functions && matches!(e.cause(), compiler::lower::LowerError::MissingOperation { semantics, .. } if semantics.starts_with("d = ")) => continue,
                Err(e) => return Err(TestCaseError::fail(format!("{}: {e}\n{g}", t.name()))),
            };
            for c in &r.checks {
                prop_assert!(c.ok, "{}: output {} off by {} (relative {}), tolerance {:?}\n{g}", t.name(), c.name, c.max_abs_err, c.max_rel_err, r.tolerance);
            }
        }
    }
}

/// Found by the property test: on an exposed pipeline, the scheduler dropped
/// the padding before a wait released by the first of several signals, so a
/// register was read before its load landed.
#[test]
fn padding_before_a_wait_on_several_signals_is_kept() {
    let layers = [Layer::EwConst(0, false), Layer::EwConst(0, false)];
    let g = build(7, 9, &layers, 0);
    tests::runs_everywhere(&g, 0);
}

/// Found by the property test: rows of a computed tensor broadcast down a tile
/// arrive by one transfer each, and every one must be waited for; and on an
/// exposed pipeline, padding before a bundle that mixes a wait with other
/// instructions must stay.
#[test]
fn a_broadcast_computed_row_is_waited_for() {
    let layers = [Layer::EwConst(5, false), Layer::EwInputRow(0)];
    let g = build(10, 5, &layers, 0);
    tests::runs_everywhere(&g, 0);
}
