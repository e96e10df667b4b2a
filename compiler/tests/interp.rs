//! The reference interpreter: every op on hand-computed examples, graphs,
//! constant folding, errors on bad input, and algebraic properties.

use compiler::interp::{InterpError, cast, eval_node, fold_constants, run};
use compiler::ir::{ElemType, Graph, Op, Tensor, TensorType, verify};
use proptest::prelude::*;

fn ty(elem: ElemType, shape: &[usize]) -> TensorType {
    TensorType {
        elem,
        shape: shape.to_vec(),
    }
}

fn t(elem: ElemType, shape: &[usize], data: &[f64]) -> Tensor {
    Tensor::new(ty(elem, shape), data.to_vec())
}

fn f32t(shape: &[usize], data: &[f64]) -> Tensor {
    t(ElemType::F32, shape, data)
}

fn f64t(shape: &[usize], data: &[f64]) -> Tensor {
    t(ElemType::F64, shape, data)
}

/// Evaluates a single-result op.
fn eval(op: Op, inputs: &[&Tensor]) -> Tensor {
    let mut out = eval_node(&op, inputs).expect("op evaluates");
    assert_eq!(out.len(), 1);
    out.remove(0)
}

#[test]
fn elementwise_ops_on_equal_shapes() {
    let a = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f32t(&[2, 2], &[10.0, 20.0, 30.0, 40.0]);
    assert_eq!(*eval(Op::Add, &[&a, &b]).data, [11.0, 22.0, 33.0, 44.0]);
    assert_eq!(*eval(Op::Sub, &[&a, &b]).data, [-9.0, -18.0, -27.0, -36.0]);
    assert_eq!(*eval(Op::Mul, &[&a, &b]).data, [10.0, 40.0, 90.0, 160.0]);
    assert_eq!(*eval(Op::Div, &[&b, &a]).data, [10.0; 4]);
    let out = eval(Op::Add, &[&a, &b]);
    assert_eq!(out.ty, ty(ElemType::F32, &[2, 2]));
}

#[test]
fn broadcasting_rows_columns_and_scalars() {
    let m = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let row = f32t(&[3], &[10.0, 20.0, 30.0]);
    let col = f32t(&[2, 1], &[100.0, 200.0]);
    let s = f32t(&[], &[2.0]);
    assert_eq!(
        *eval(Op::Add, &[&m, &row]).data,
        [11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
    );
    assert_eq!(
        *eval(Op::Sub, &[&col, &m]).data,
        [99.0, 98.0, 97.0, 196.0, 195.0, 194.0]
    );
    assert_eq!(
        *eval(Op::Mul, &[&s, &m]).data,
        [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    );
    // Both sides broadcast: [2, 1] x [3] -> [2, 3].
    let out = eval(Op::Mul, &[&col, &row]);
    assert_eq!(out.ty.shape, [2, 3]);
    assert_eq!(*out.data, [1000.0, 2000.0, 3000.0, 2000.0, 4000.0, 6000.0]);
    // Rank 3 against rank 2 with a middle 1: [2, 1, 2] + [3, 1] -> [2, 3, 2].
    let a = f64t(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f64t(&[3, 1], &[10.0, 20.0, 30.0]);
    let out = eval(Op::Add, &[&a, &b]);
    assert_eq!(out.ty.shape, [2, 3, 2]);
    assert_eq!(
        *out.data,
        [
            11.0, 12.0, 21.0, 22.0, 31.0, 32.0, 13.0, 14.0, 23.0, 24.0, 33.0, 34.0
        ]
    );
}

#[test]
fn f32_results_are_rounded_like_f32_arithmetic() {
    let a = f32t(&[1], &[1.0]);
    let b = f32t(&[1], &[3.0]);
    let q = eval(Op::Div, &[&a, &b]).data[0];
    assert_eq!(q, f64::from(1.0f32 / 3.0f32));
    assert_ne!(q, 1.0 / 3.0);
    let big = f32t(&[1], &[16_777_216.0]); // 2^24: adding 1 is lost in f32
    let one = f32t(&[1], &[1.0]);
    assert_eq!(eval(Op::Add, &[&big, &one]).data[0], 16_777_216.0);
    let x = f32t(&[1], &[0.1]);
    let y = f32t(&[1], &[0.2]);
    assert_eq!(eval(Op::Add, &[&x, &y]).data[0], f64::from(0.1f32 + 0.2f32));
    // Overflow goes to infinity; float division by zero is IEEE.
    let max = f32t(&[1], &[f64::from(f32::MAX)]);
    assert_eq!(eval(Op::Add, &[&max, &max]).data[0], f64::INFINITY);
    let zero = f32t(&[1], &[0.0]);
    assert_eq!(eval(Op::Div, &[&one, &zero]).data[0], f64::INFINITY);
    assert!(eval(Op::Div, &[&zero, &zero]).data[0].is_nan());
}

#[test]
fn integer_division_truncates_toward_zero() {
    let a = t(ElemType::I32, &[4], &[7.0, -7.0, 7.0, -7.0]);
    let b = t(ElemType::I32, &[4], &[2.0, 2.0, -2.0, -2.0]);
    assert_eq!(*eval(Op::Div, &[&a, &b]).data, [3.0, -3.0, -3.0, 3.0]);
    let a = t(ElemType::I64, &[2], &[1.0, -1.0]);
    let b = t(ElemType::I64, &[], &[3.0]);
    assert_eq!(*eval(Op::Div, &[&a, &b]).data, [0.0, 0.0]);
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let a = t(ElemType::I32, &[2], &[1.0, 2.0]);
    let b = t(ElemType::I32, &[2], &[1.0, 0.0]);
    assert_eq!(
        eval_node(&Op::Div, &[&a, &b]),
        Err(InterpError::DivisionByZero)
    );
}

#[test]
fn integer_arithmetic_wraps_to_the_type() {
    let a = t(ElemType::I8, &[2], &[100.0, -100.0]);
    let b = t(ElemType::I8, &[2], &[100.0, 100.0]);
    assert_eq!(*eval(Op::Add, &[&a, &b]).data, [-56.0, 0.0]);
    let a = t(ElemType::U8, &[1], &[1.0]);
    let b = t(ElemType::U8, &[1], &[2.0]);
    assert_eq!(*eval(Op::Sub, &[&a, &b]).data, [255.0]);
    // i8 MIN / -1 wraps instead of overflowing.
    let a = t(ElemType::I8, &[1], &[-128.0]);
    let b = t(ElemType::I8, &[1], &[-1.0]);
    assert_eq!(*eval(Op::Div, &[&a, &b]).data, [-128.0]);
}

#[test]
fn bool_arithmetic_is_refused() {
    let a = t(ElemType::Bool, &[1], &[1.0]);
    assert!(matches!(
        eval_node(&Op::Add, &[&a, &a]),
        Err(InterpError::Type { op: "Add", .. })
    ));
    assert!(eval_node(&Op::Relu, &[&a]).is_err());
}

#[test]
fn relu_clamps_negatives() {
    let x = f32t(&[5], &[-2.0, -0.0, 0.0, 0.5, 3.0]);
    let out = eval(Op::Relu, &[&x]).data;
    assert_eq!(*out, [0.0, 0.0, 0.0, 0.5, 3.0]);
    assert!(out[1].is_sign_positive());
    let n = f32t(&[1], &[f64::NAN]);
    assert!(eval(Op::Relu, &[&n]).data[0].is_nan());
    let i = t(ElemType::I32, &[2], &[-3.0, 3.0]);
    assert_eq!(*eval(Op::Relu, &[&i]).data, [0.0, 3.0]);
}

#[test]
fn matmul_2d() {
    let a = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32t(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    let out = eval(Op::MatMul, &[&a, &b]);
    assert_eq!(out.ty, ty(ElemType::F32, &[2, 2]));
    assert_eq!(*out.data, [58.0, 64.0, 139.0, 154.0]);
}

#[test]
fn matmul_1d_operands() {
    let v = f64t(&[3], &[1.0, 2.0, 3.0]);
    let m = f64t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let out = eval(Op::MatMul, &[&v, &m]);
    assert_eq!(out.ty.shape, [2]);
    assert_eq!(*out.data, [22.0, 28.0]);
    let mt = f64t(&[2, 3], &[1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    let out = eval(Op::MatMul, &[&mt, &v]);
    assert_eq!(out.ty.shape, [2]);
    assert_eq!(*out.data, [22.0, 28.0]);
    let out = eval(Op::MatMul, &[&v, &v]);
    assert_eq!(out.ty.shape, Vec::<usize>::new());
    assert_eq!(*out.data, [14.0]);
}

#[test]
fn matmul_batched_and_broadcast() {
    // [2, 2, 2] x [2, 2]: the matrix is shared by both batches.
    let a = f64t(&[2, 2, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 3.0, 4.0]);
    let b = f64t(&[2, 2], &[5.0, 6.0, 7.0, 8.0]);
    let out = eval(Op::MatMul, &[&a, &b]);
    assert_eq!(out.ty.shape, [2, 2, 2]);
    assert_eq!(*out.data, [5.0, 6.0, 7.0, 8.0, 19.0, 22.0, 43.0, 50.0]);
    // [2, 1, 1, 2] x [3, 2, 1]: batch dims [2, 1] and [3] broadcast to [2, 3].
    let a = f64t(&[2, 1, 1, 2], &[1.0, 1.0, 2.0, 2.0]);
    let b = f64t(&[3, 2, 1], &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    let out = eval(Op::MatMul, &[&a, &b]);
    assert_eq!(out.ty.shape, [2, 3, 1, 1]);
    assert_eq!(*out.data, [2.0, 4.0, 6.0, 4.0, 8.0, 12.0]);
}

#[test]
fn matmul_accumulates_in_f64_and_rounds_once() {
    // 1 + 2^-24 + 2^-24: f32 accumulation loses both small terms, f64 keeps them.
    let e = 2f64.powi(-24);
    let a = f32t(&[1, 3], &[1.0, e, e]);
    let b = f32t(&[3, 1], &[1.0, 1.0, 1.0]);
    let out = eval(Op::MatMul, &[&a, &b]).data[0];
    assert_eq!(out, f64::from((1.0 + 2.0 * e) as f32));
    assert_eq!(out, 1.0 + 2.0 * e);
}

#[test]
fn matmul_with_empty_dimensions() {
    let a = f32t(&[2, 0], &[]);
    let b = f32t(&[0, 3], &[]);
    let out = eval(Op::MatMul, &[&a, &b]);
    assert_eq!(out.ty.shape, [2, 3]);
    assert_eq!(*out.data, [0.0; 6]);
}

#[test]
fn integer_matmul() {
    let a = t(ElemType::I32, &[1, 2], &[3.0, -4.0]);
    let b = t(ElemType::I32, &[2, 1], &[5.0, 6.0]);
    assert_eq!(*eval(Op::MatMul, &[&a, &b]).data, [-9.0]);
}

#[test]
fn transpose_permutes_dimensions() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let out = eval(Op::Transpose { perm: vec![1, 0] }, &[&x]);
    assert_eq!(out.ty.shape, [3, 2]);
    assert_eq!(*out.data, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    // [2, 3, 4] with perm [2, 0, 1]: out[k][i][j] = in[i][j][k].
    let data: Vec<f64> = (0..24).map(f64::from).collect();
    let x = f32t(&[2, 3, 4], &data);
    let out = eval(
        Op::Transpose {
            perm: vec![2, 0, 1],
        },
        &[&x],
    );
    assert_eq!(out.ty.shape, [4, 2, 3]);
    for k in 0..4 {
        for i in 0..2 {
            for j in 0..3 {
                assert_eq!(
                    out.data[k * 6 + i * 3 + j],
                    data[i * 12 + j * 4 + k],
                    "[{k}][{i}][{j}]"
                );
            }
        }
    }
}

#[test]
fn reshape_and_identity_copy() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let out = eval(Op::Reshape { shape: vec![3, 2] }, &[&x]);
    assert_eq!(out.ty, ty(ElemType::F32, &[3, 2]));
    assert_eq!(out.data, x.data);
    assert_eq!(eval(Op::Identity, &[&x]), x);
}

#[test]
fn casts_round_truncate_and_wrap() {
    let x = f32t(&[6], &[1.7, -1.7, 0.5, -0.5, 300.0, -129.0]);
    let to_i8 = eval(Op::Cast { to: ElemType::I8 }, &[&x]);
    assert_eq!(to_i8.ty.elem, ElemType::I8);
    assert_eq!(*to_i8.data, [1.0, -1.0, 0.0, 0.0, 44.0, 127.0]);
    let to_u8 = eval(Op::Cast { to: ElemType::U8 }, &[&x]);
    assert_eq!(*to_u8.data, [1.0, 255.0, 0.0, 0.0, 44.0, 127.0]);
    let to_bool = eval(Op::Cast { to: ElemType::Bool }, &[&x]);
    assert_eq!(*to_bool.data, [1.0; 6]);
    // f64 -> f32 rounds to nearest even; beyond the range is infinity.
    let d = f64t(&[3], &[0.1, 1.0 + 2f64.powi(-24), 1e39]);
    let to_f32 = eval(Op::Cast { to: ElemType::F32 }, &[&d]);
    assert_eq!(*to_f32.data, [f64::from(0.1f32), 1.0, f64::INFINITY]);
    // bf16 keeps 8 significand bits: 257 rounds to even (256).
    let to_bf16 = eval(Op::Cast { to: ElemType::Bf16 }, &[&f32t(&[1], &[257.0])]);
    assert_eq!(*to_bf16.data, [256.0]);
    // int -> float and int -> int.
    let i = t(ElemType::I32, &[2], &[16_777_217.0, -1.0]);
    assert_eq!(
        *eval(Op::Cast { to: ElemType::F32 }, &[&i]).data,
        [16_777_216.0, -1.0]
    );
    assert_eq!(eval(Op::Cast { to: ElemType::U8 }, &[&i]).data[1], 255.0);
    // Non-finite to integers is 0, including int64.
    for to in [ElemType::I32, ElemType::I64] {
        assert_eq!(cast(f64::NAN, to), 0.0);
        assert_eq!(cast(f64::INFINITY, to), 0.0);
    }
    assert_eq!(cast(-2.9, ElemType::I64), -2.0);
    assert_eq!(cast(-(2f64.powi(63)), ElemType::I64), -(2f64.powi(63)));
    assert_eq!(cast(2f64.powi(63), ElemType::I64), -(2f64.powi(63)));
    assert_eq!(cast(2f64.powi(64) + 4096.0, ElemType::I64), 4096.0);
    assert_eq!(cast(-(2f64.powi(64)) - 4096.0, ElemType::I64), -4096.0);
}

#[test]
fn operand_errors_are_reported() {
    let a = f32t(&[2, 3], &[0.0; 6]);
    let b = f32t(&[4, 5], &[0.0; 20]);
    assert!(matches!(
        eval_node(&Op::MatMul, &[&a, &b]),
        Err(InterpError::Type { op: "MatMul", .. })
    ));
    assert!(eval_node(&Op::Add, &[&a, &b]).is_err());
    assert!(eval_node(&Op::Add, &[&a]).is_err());
    assert!(eval_node(&Op::Relu, &[]).is_err());
    let i = t(ElemType::I32, &[2, 3], &[0.0; 6]);
    assert!(eval_node(&Op::Add, &[&a, &i]).is_err());
    // Data that does not match the type.
    let bad = Tensor {
        ty: ty(ElemType::F32, &[2, 3]),
        data: vec![0.0; 5].into(),
    };
    assert!(matches!(
        eval_node(&Op::Relu, &[&bad]),
        Err(InterpError::BadTensor { len: 5, .. })
    ));
    // A shape whose element count overflows is refused, not a panic.
    let huge = Tensor {
        ty: ty(ElemType::F32, &[usize::MAX, 2]),
        data: vec![].into(),
    };
    assert!(matches!(
        eval_node(&Op::Identity, &[&huge]),
        Err(InterpError::BadTensor { len: 0, .. })
    ));
}

/// `relu(x @ w + b)` with a constant weight and bias.
fn mlp_layer() -> Graph {
    let mut g = Graph::default();
    let x = g.add_value("x", ty(ElemType::F32, &[2, 2]));
    g.inputs.push(x);
    let w = g.add_constant("w", f32t(&[2, 2], &[1.0, -1.0, 2.0, 0.5]));
    let b = g.add_constant("b", f32t(&[2], &[0.5, -10.0]));
    let h = g.add_node("mm", Op::MatMul, vec![x, w]).expect("mm")[0];
    let s = g.add_node("add", Op::Add, vec![h, b]).expect("add")[0];
    let y = g.add_node("relu", Op::Relu, vec![s]).expect("relu")[0];
    g.outputs.push(y);
    g
}

#[test]
fn run_evaluates_a_graph() {
    let g = mlp_layer();
    verify(&g).expect("valid graph");
    let x = f32t(&[2, 2], &[1.0, 2.0, -3.0, 4.0]);
    let out = run(&g, &[x]).expect("runs");
    // [1, 2] @ w = [5, 0]; + b = [5.5, -10]; relu = [5.5, 0].
    // [-3, 4] @ w = [5, 5]; + b = [5.5, -5]; relu = [5.5, 0].
    assert_eq!(out, vec![f32t(&[2, 2], &[5.5, 0.0, 5.5, 0.0])]);
}

#[test]
fn run_returns_outputs_in_order_including_inputs_and_constants() {
    let mut g = mlp_layer();
    let x = g.inputs[0];
    let w = *g.constants.keys().next().expect("a constant");
    g.outputs.push(x);
    g.outputs.push(w);
    let xin = f32t(&[2, 2], &[0.0; 4]);
    let out = run(&g, std::slice::from_ref(&xin)).expect("runs");
    assert_eq!(out.len(), 3);
    assert_eq!(out[1], xin);
    assert_eq!(out[2], g.constants[&w]);
}

#[test]
fn run_checks_its_inputs() {
    let g = mlp_layer();
    assert_eq!(
        run(&g, &[]),
        Err(InterpError::InputCount {
            expected: 1,
            got: 0
        })
    );
    let x = f32t(&[2, 2], &[0.0; 4]);
    assert!(matches!(
        run(&g, &[x.clone(), x]),
        Err(InterpError::InputCount {
            expected: 1,
            got: 2
        })
    ));
    let err = run(&g, &[f32t(&[2, 3], &[0.0; 6])]).expect_err("wrong shape");
    assert!(
        matches!(err, InterpError::InputType { index: 0, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("`x`"), "{err}");
    let err = run(&g, &[t(ElemType::F64, &[2, 2], &[0.0; 4])]).expect_err("wrong type");
    assert!(matches!(err, InterpError::InputType { .. }), "{err}");
    let bad = Tensor {
        ty: ty(ElemType::F32, &[2, 2]),
        data: vec![0.0; 3].into(),
    };
    assert!(matches!(
        run(&g, &[bad]),
        Err(InterpError::BadTensor { .. })
    ));
}

#[test]
fn run_names_the_failing_node() {
    let mut g = Graph::default();
    let x = g.add_value("x", ty(ElemType::I32, &[2]));
    g.inputs.push(x);
    let y = g.add_node("divide", Op::Div, vec![x, x]).expect("div")[0];
    g.outputs.push(y);
    let err = run(&g, &[t(ElemType::I32, &[2], &[1.0, 0.0])]).expect_err("div by zero");
    assert!(
        matches!(&err, InterpError::Node { node, op: "Div", error } if node == "divide" && **error == InterpError::DivisionByZero),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "node `divide` (Div): integer division by zero"
    );
}

#[test]
fn run_refuses_malformed_graphs_without_panicking() {
    let mut g = mlp_layer();
    // The relu node reads a value that nothing defines.
    let ghost = g.add_value("ghost", ty(ElemType::F32, &[2, 2]));
    g.nodes[2].inputs[0] = ghost;
    let x = f32t(&[2, 2], &[0.0; 4]);
    assert!(run(&g, std::slice::from_ref(&x)).is_err());
    // A node whose declared output type is wrong.
    let mut g = mlp_layer();
    let out = g.nodes[2].outputs[0];
    g.values[out.index()].ty = ty(ElemType::F32, &[4]);
    assert!(run(&g, std::slice::from_ref(&x)).is_err());
    // An output id that does not exist.
    let mut g = mlp_layer();
    g.outputs.push(compiler::ir::ValueId(999));
    assert!(run(&g, &[x]).is_err());
}

#[test]
fn fold_constants_folds_constant_chains() {
    let mut g = Graph::default();
    let x = g.add_value("x", ty(ElemType::F32, &[2, 3]));
    g.inputs.push(x);
    // A weight stored transposed, scaled: w = transpose(wt) * 2.
    let wt = g.add_constant("wt", f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let two = g.add_constant("two", f32t(&[], &[2.0]));
    let w = g
        .add_node("t", Op::Transpose { perm: vec![1, 0] }, vec![wt])
        .expect("t")[0];
    let w2 = g.add_node("scale", Op::Mul, vec![w, two]).expect("mul")[0];
    let y = g.add_node("add", Op::Add, vec![x, w2]).expect("add")[0];
    g.outputs.push(y);
    let input = f32t(&[2, 3], &[1.0; 6]);
    let before = run(&g, std::slice::from_ref(&input)).expect("runs");

    assert_eq!(fold_constants(&mut g), 2);
    verify(&g).expect("still valid");
    assert_eq!(g.nodes.len(), 1);
    assert_eq!(g.nodes[0].name, "add");
    assert_eq!(
        g.constants[&w2],
        f32t(&[2, 3], &[2.0, 6.0, 10.0, 4.0, 8.0, 12.0])
    );
    // The inputs of folded nodes that nothing else reads are dropped.
    assert!(!g.constants.contains_key(&wt));
    assert!(!g.constants.contains_key(&w));
    assert!(!g.constants.contains_key(&two));
    assert_eq!(run(&g, &[input]).expect("runs"), before);
    // Nothing is left to fold.
    assert_eq!(fold_constants(&mut g), 0);
}

#[test]
fn fold_constants_keeps_constants_still_in_use_and_outputs() {
    let mut g = Graph::default();
    let x = g.add_value("x", ty(ElemType::F32, &[2]));
    g.inputs.push(x);
    let c = g.add_constant("c", f32t(&[2], &[1.0, -2.0]));
    let r = g.add_node("relu", Op::Relu, vec![c]).expect("relu")[0];
    let y = g.add_node("add", Op::Add, vec![x, c]).expect("add")[0];
    g.outputs.extend([r, y]);
    assert_eq!(fold_constants(&mut g), 1);
    verify(&g).expect("still valid");
    assert!(g.constants.contains_key(&c), "still read by `add`");
    assert_eq!(*g.constants[&r].data, [1.0, 0.0]);
    let out = run(&g, &[f32t(&[2], &[10.0, 10.0])]).expect("runs");
    assert_eq!(*out[0].data, [1.0, 0.0]);
    assert_eq!(*out[1].data, [11.0, 8.0]);
}

#[test]
fn fold_constants_leaves_failing_nodes() {
    let mut g = Graph::default();
    let a = g.add_constant("a", t(ElemType::I32, &[1], &[1.0]));
    let z = g.add_constant("z", t(ElemType::I32, &[1], &[0.0]));
    let y = g.add_node("div", Op::Div, vec![a, z]).expect("div")[0];
    g.outputs.push(y);
    assert_eq!(fold_constants(&mut g), 0);
    assert_eq!(g.nodes.len(), 1);
    verify(&g).expect("still valid");
    assert!(run(&g, &[]).is_err());
}

/// Values whose sums and differences are exact in `f64`: multiples of 2^-10
/// below 2^20 in magnitude. (For arbitrary floats `(a + b) - b == a` does not
/// hold: rounding in the addition can lose bits of `a`.)
fn exact_values(n: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(
        (-(1i64 << 30)..(1i64 << 30)).prop_map(|i| i as f64 / 1024.0),
        n,
    )
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..5, 0..4)
}

/// A shape and a shape that broadcasts to it (some dimensions set to 1, some
/// leading ones dropped).
fn shape_and_broadcast() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    shape().prop_flat_map(|s| {
        let n = s.len();
        (Just(s), prop::collection::vec(any::<bool>(), n), 0..=n).prop_map(|(s, ones, drop)| {
            let b: Vec<usize> = s
                .iter()
                .zip(&ones)
                .map(|(&d, &one)| if one { 1 } else { d })
                .skip(drop)
                .collect();
            (s, b)
        })
    })
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn add_then_sub_is_the_identity(
        (xs, ys, xd, yd) in shape_and_broadcast().prop_flat_map(|(xs, ys)| {
            let (nx, ny) = (numel(&xs), numel(&ys));
            (Just(xs), Just(ys), exact_values(nx), exact_values(ny))
        })
    ) {
        let x = f64t(&xs, &xd);
        let y = f64t(&ys, &yd);
        let s = eval(Op::Add, &[&x, &y]);
        let back = eval(Op::Sub, &[&s, &y]);
        prop_assert_eq!(back, x);
    }

    #[test]
    fn matmul_by_the_identity_is_the_identity(
        (m, k, data) in (1usize..6, 1usize..6).prop_flat_map(|(m, k)| {
            (Just(m), Just(k), prop::collection::vec(-1e30f64..1e30, m * k))
        })
    ) {
        let x = f64t(&[m, k], &data);
        let eye = |n: usize| {
            let d: Vec<f64> = (0..n * n).map(|i| f64::from(u8::from(i % (n + 1) == 0))).collect();
            f64t(&[n, n], &d)
        };
        prop_assert_eq!(&eval(Op::MatMul, &[&x, &eye(k)]), &x);
        prop_assert_eq!(&eval(Op::MatMul, &[&eye(m), &x]), &x);
        // And the same in f32, where the data are first rounded.
        let x32 = f32t(&[m, k], &data);
        let eye32 = Tensor::new(ty(ElemType::F32, &[k, k]), eye(k).data.to_vec());
        prop_assert_eq!(&eval(Op::MatMul, &[&x32, &eye32]), &x32);
    }

    #[test]
    fn transpose_twice_with_inverse_perm_is_the_identity(
        (s, data, perm) in shape().prop_flat_map(|s| {
            let n = numel(&s);
            let perm: Vec<usize> = (0..s.len()).collect();
            (Just(s), exact_values(n), Just(perm).prop_shuffle())
        })
    ) {
        let x = f64t(&s, &data);
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        let y = eval(Op::Transpose { perm }, &[&x]);
        prop_assert_eq!(eval(Op::Transpose { perm: inv }, &[&y]), x);
    }
}

/// A graph of one `Conv` of `x [n, c, h, w]` by constant weights `[m, c / groups, kh, kw]`.
fn conv_graph(x: [usize; 4], m: usize, groups: usize, window: &compiler::ir::Window) -> Graph {
    let mut g = Graph::default();
    let xv = g.add_value("x", ty(ElemType::F32, &x));
    g.inputs.push(xv);
    let ws = [m, x[1] / groups, window.kernel[0], window.kernel[1]];
    let n: usize = ws.iter().product();
    let w = g.add_constant(
        "w",
        f32t(
            &ws,
            &(0..n)
                .map(|i| ((i * 37 % 23) as f64 - 11.0) / 16.0)
                .collect::<Vec<_>>(),
        ),
    );
    let b = g.add_constant(
        "b",
        f32t(&[m], &(0..m).map(|i| i as f64 / 8.0).collect::<Vec<_>>()),
    );
    let op = Op::Conv {
        window: window.clone(),
        groups,
    };
    let y = g.add_node("conv", op, vec![xv, w, b]).expect("conv")[0];
    g.outputs.push(y);
    g
}

/// The channels-last forms the canonicalisation gives convolutions (the
/// windows as rows, `Im2Row`, and a product; a depthwise window sum,
/// `WindowSum`) compute what the direct convolution does, on the
/// interpreter: over strides, dilations, asymmetric pads and two images.
#[test]
fn channels_last_convolutions_compute_the_direct_convolution() {
    use compiler::passes::canon::{Caps, prepare};
    let caps = Caps {
        min_reduction: true,
        lane_broadcast: true,
        row_chunk: None,
        mask_by_position: false,
        conv_rows: Some(2),
        b_as_rows: false,
        windows_in_place: true,
        narrow_products: false,
    };
    let window = |k: usize, s: usize, pads: [usize; 4], d: usize| compiler::ir::Window {
        kernel: [k, k],
        strides: [s, s],
        pads,
        dilations: [d, d],
        ceil: false,
    };
    let cases = [
        ([2, 4, 5, 6], 3, 1, window(3, 1, [1, 1, 1, 1], 1), "Im2Row"),
        ([1, 4, 7, 5], 2, 1, window(3, 2, [0, 2, 1, 0], 1), "Im2Row"),
        ([1, 2, 7, 7], 4, 1, window(2, 1, [1, 0, 0, 1], 2), "Im2Row"),
        (
            [2, 4, 6, 5],
            4,
            4,
            window(3, 2, [1, 1, 2, 1], 1),
            "WindowSum",
        ),
    ];
    for (x, m, groups, w, form) in cases {
        let g = conv_graph(x, m, groups, &w);
        let p = prepare(&g, caps).expect("prepares");
        assert!(p.nodes.iter().any(|n| n.op.name() == form), "{form}: {p}");
        let n: usize = x.iter().product();
        let input = f32t(
            &x,
            &(0..n)
                .map(|i| ((i * 13 % 17) as f64 - 8.0) / 4.0)
                .collect::<Vec<_>>(),
        );
        let direct = run(&g, std::slice::from_ref(&input)).expect("runs");
        let rows = run(&p, std::slice::from_ref(&input)).expect("runs");
        for (a, b) in direct[0].data.iter().zip(rows[0].data.iter()) {
            assert!(
                (a - b).abs() <= 1e-5 * a.abs().max(1.0),
                "{form} {x:?}: {a} vs {b}"
            );
        }
    }
}
