//! The ONNX importer on models built in Rust with the prost messages: the
//! graphs it builds (ops, shapes, constants, names, verified), Gemm against
//! its formula for every attribute combination, and the errors for
//! unsupported or inconsistent models. `onnx_robustness.rs` has tensor
//! decoding and malformed input.

mod onnx_util;

use std::collections::HashMap;

use compiler::ir::{ElemType, Graph, Op, Tensor, ValueId, broadcast};
use compiler::onnx::proto::tensor_proto::DataType;
use compiler::onnx::proto::tensor_shape_proto::dimension::Value as Dim;
use compiler::onnx::proto::{AttributeProto, ModelProto, NodeProto, TensorProto, ValueInfoProto};
use compiler::onnx::{ImportError, ImportOptions, import, import_with, tensor_from_proto};
use onnx_util::*;
use prost::Message;

// ---- A small evaluator for the ops Gemm lowers to ----

/// The offset in a tensor of shape `src` of the element at `flat` of the broadcast shape `out`.
fn broadcast_offset(src: &[usize], out: &[usize], flat: usize) -> usize {
    let (mut rem, mut off, mut stride) = (flat, 0, 1);
    let lead = out.len() - src.len();
    for k in (0..out.len()).rev() {
        let i = rem % out[k];
        rem /= out[k];
        if k >= lead {
            let d = src[k - lead];
            if d != 1 {
                off += i * stride;
            }
            stride *= d;
        }
    }
    off
}

fn elementwise(a: &Tensor, b: &Tensor, f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let out = broadcast(&a.ty.shape, &b.ty.shape).expect("broadcasts");
    let n: usize = out.iter().product();
    (0..n)
        .map(|i| {
            let x = a.data[broadcast_offset(&a.ty.shape, &out, i)];
            let y = b.data[broadcast_offset(&b.ty.shape, &out, i)];
            f(x, y)
        })
        .collect()
}

fn matmul2(a: &Tensor, b: &Tensor) -> Vec<f64> {
    let (m, k, n) = (a.ty.shape[0], a.ty.shape[1], b.ty.shape[1]);
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a.data[i * k + p] * b.data[p * n + j]).sum();
        }
    }
    out
}

fn transpose2(a: &Tensor) -> Vec<f64> {
    let (m, n) = (a.ty.shape[0], a.ty.shape[1]);
    (0..m * n).map(|i| a.data[(i % m) * n + i / m]).collect()
}

/// Runs a graph of 2-D MatMul, Transpose, Mul and Add.
fn eval(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut env: HashMap<ValueId, Tensor> = g.constants.clone().into_iter().collect();
    env.extend(g.inputs.iter().copied().zip(inputs.iter().cloned()));
    for n in &g.nodes {
        let x: Vec<&Tensor> = n.inputs.iter().map(|v| &env[v]).collect();
        let data = match &n.op {
            Op::MatMul => matmul2(x[0], x[1]),
            Op::Transpose { .. } => transpose2(x[0]),
            Op::Mul => elementwise(x[0], x[1], |a, b| a * b),
            Op::Add => elementwise(x[0], x[1], |a, b| a + b),
            other => panic!("eval does not know {other:?}"),
        };
        let ty = g.ty(n.outputs[0]).clone();
        env.insert(n.outputs[0], Tensor::new(ty, data));
    }
    g.outputs.iter().map(|o| env[o].clone()).collect()
}

// ---- Graphs ----

#[test]
fn an_mlp_imports_with_onnx_names_shapes_and_constants() {
    let nodes = vec![
        NodeProto::new("MatMul", "fc1", &["x", "w1"], &["h"]),
        NodeProto::new("Add", "bias1", &["h", "b1"], &["hb"]),
        NodeProto::new("Relu", "act", &["hb"], &["a"]),
        NodeProto::new("Gemm", "fc2", &["a", "w2", "b2"], &["y"])
            .with(AttributeProto::int("transB", 1)),
    ];
    let inits = vec![
        ramp("w1", &[4, 8], 0.0, 0.5),
        ramp("b1", &[8], -1.0, 0.25),
        ramp("w2", &[3, 8], 1.0, -0.125),
        ramp("b2", &[3], 0.0, 1.0),
    ];
    let mut g = graph(nodes, vec![input("x", &[2, 4])], &["y"], inits);
    g.output[0] = ValueInfoProto::tensor("y", F32, &[2, 3]);
    let g = import_ok(&encode(g));

    // The transposed constant `w2` is folded as it is imported.
    assert_eq!(ops(&g), ["MatMul", "Add", "Relu", "MatMul", "Add"]);
    assert_eq!(g.inputs, vec![by_name(&g, "x")]);
    assert_eq!(g.outputs, vec![by_name(&g, "y")]);
    assert_eq!(g.constants.len(), 4);
    let w2t = &g.constants[&by_name(&g, "fc2/transpose_b")];
    assert_eq!(
        (w2t.ty.shape.as_slice(), &w2t.data[..2]),
        ([8, 3].as_slice(), [1.0, 0.0].as_slice())
    );
    for (name, dims) in [("h", vec![2, 8]), ("hb", vec![2, 8]), ("a", vec![2, 8])] {
        assert_eq!(shape(&g, name), dims, "{name}");
    }
    assert_eq!(shape(&g, "y"), vec![2, 3]);
    let b1 = &g.constants[&by_name(&g, "b1")];
    assert_eq!(b1.data[..3], [-1.0, -0.75, -0.5]);
    assert_eq!(g.nodes[0].name, "fc1");
    assert_eq!(g.nodes[3].name, "fc2/matmul");
    assert!(g.values.iter().all(|v| v.ty.elem == ElemType::F32));
}

/// Gemm's formula, straight from the ONNX definition.
fn gemm_reference(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    attrs: (bool, bool, f32, f32),
) -> Vec<f64> {
    let (ta, tb, alpha, beta) = attrs;
    let at = |t: &Tensor, tr: bool, i: usize, j: usize| {
        let cols = t.ty.shape[1];
        if tr {
            t.data[j * cols + i]
        } else {
            t.data[i * cols + j]
        }
    };
    let (m, k) = if ta {
        (a.ty.shape[1], a.ty.shape[0])
    } else {
        (a.ty.shape[0], a.ty.shape[1])
    };
    let n = if tb { b.ty.shape[0] } else { b.ty.shape[1] };
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|p| at(a, ta, i, p) * at(b, tb, p, j)).sum();
            let bias = c.map_or(0.0, |c| {
                c.data[broadcast_offset(&c.ty.shape, &[m, n], i * n + j)]
            });
            out.push(f64::from(alpha) * dot + f64::from(beta) * bias);
        }
    }
    out
}

fn gemm_case(trans_a: bool, trans_b: bool, alpha: f32, beta: f32, c_dims: Option<&[i64]>) {
    let (m, k, n) = (2i64, 3i64, 4i64);
    let a_dims = if trans_a { [k, m] } else { [m, k] };
    let b_dims = if trans_b { [n, k] } else { [k, n] };
    let mut node_inputs = vec!["A", "B"];
    let mut inits = vec![ramp("B", &b_dims, -2.0, 0.5)];
    if let Some(d) = c_dims {
        node_inputs.push("C");
        inits.push(ramp("C", d, 1.0, 1.0));
    }
    let node = NodeProto::new("Gemm", "g", &node_inputs, &["Y"])
        .with(AttributeProto::int("transA", i64::from(trans_a)))
        .with(AttributeProto::int("transB", i64::from(trans_b)))
        .with(AttributeProto::float("alpha", alpha))
        .with(AttributeProto::float("beta", beta));
    let g = import_ok(&encode(graph(
        vec![node],
        vec![input("A", &a_dims)],
        &["Y"],
        inits.clone(),
    )));
    let case = format!("transA={trans_a} transB={trans_b} alpha={alpha} beta={beta} C={c_dims:?}");

    // B and C are constants: their transpose and scaling fold as imported.
    let mut expected_ops = vec![];
    expected_ops.extend(trans_a.then_some("Transpose"));
    expected_ops.push("MatMul");
    expected_ops.extend((alpha != 1.0).then_some("Mul"));
    expected_ops.extend(c_dims.is_some().then_some("Add"));
    assert_eq!(ops(&g), expected_ops, "{case}");
    assert_eq!(shape(&g, "Y"), vec![2, 4], "{case}");

    let a = tensor_from_proto(&ramp("A", &a_dims, 0.5, 1.0)).expect("A");
    let b = tensor_from_proto(&inits[0]).expect("B");
    let c = inits.get(1).map(|c| tensor_from_proto(c).expect("C"));
    let got = eval(&g, std::slice::from_ref(&a));
    let want = gemm_reference(&a, &b, c.as_ref(), (trans_a, trans_b, alpha, beta));
    assert_eq!(*got[0].data, want, "{case}");
}

#[test]
fn gemm_lowers_correctly_for_every_attribute_combination() {
    let c_shapes: [Option<&[i64]>; 6] = [
        None,
        Some(&[]),
        Some(&[4]),
        Some(&[1, 4]),
        Some(&[2, 1]),
        Some(&[2, 4]),
    ];
    for trans_a in [false, true] {
        for trans_b in [false, true] {
            for alpha in [1.0, 0.5] {
                for beta in [1.0, 2.0] {
                    for c in c_shapes {
                        gemm_case(trans_a, trans_b, alpha, beta, c);
                    }
                }
            }
        }
    }
}

#[test]
fn gemm_refuses_c_that_would_grow_the_result_and_operands_that_are_not_2d() {
    let node = NodeProto::new("Gemm", "g", &["A", "B", "C"], &["Y"]);
    let inits = vec![
        ramp("B", &[3, 4], 0.0, 1.0),
        ramp("C", &[5, 2, 4], 0.0, 1.0),
    ];
    let e = import_err(&encode(graph(
        vec![node.clone()],
        vec![input("A", &[2, 3])],
        &["Y"],
        inits,
    )));
    assert!(matches!(e, ImportError::Shape { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("does not broadcast to the result shape [2, 4]"),
        "{e}"
    );

    let inits = vec![ramp("B", &[3, 4], 0.0, 1.0), ramp("C", &[4], 0.0, 1.0)];
    let e = import_err(&encode(graph(
        vec![node],
        vec![input("A", &[1, 2, 3])],
        &["Y"],
        inits,
    )));
    assert_eq!(
        e.to_string(),
        "Gemm node `g`: operand `A` must be 2-D, it is float[1, 2, 3]"
    );
}

fn reshape_model(x_dims: &[i64], spec: &[i64], allowzero: Option<i64>) -> Vec<u8> {
    let mut node = NodeProto::new("Reshape", "r", &["x", "s"], &["y"]);
    if let Some(z) = allowzero {
        node = node.with(AttributeProto::int("allowzero", z));
    }
    let s = TensorProto::from_i64("s", &[i64::try_from(spec.len()).expect("short")], spec);
    encode(graph(vec![node], vec![input("x", x_dims)], &["y"], vec![s]))
}

#[test]
fn reshape_copies_zeros_and_infers_minus_one() {
    for (spec, want) in [
        (vec![0, -1], vec![2, 12]),
        (vec![-1], vec![24]),
        (vec![0, 0, 2, 2], vec![2, 3, 2, 2]),
        (vec![4, -1, 3], vec![4, 2, 3]),
    ] {
        let g = import_ok(&reshape_model(&[2, 3, 4], &spec, None));
        assert_eq!(
            g.nodes[0].op,
            Op::Reshape {
                shape: want.clone()
            },
            "{spec:?}"
        );
        assert_eq!(shape(&g, "y"), want);
    }
    let g = import_ok(&reshape_model(&[0, 3], &[3, 0], Some(1)));
    assert_eq!(shape(&g, "y"), vec![3, 0]);
    let e = import_err(&reshape_model(&[2, 3, 4], &[5, -1], None));
    assert!(
        e.to_string()
            .starts_with("Reshape node `r`: cannot infer the -1"),
        "{e}"
    );
    let e = import_err(&reshape_model(&[2, 3], &[0, -1], Some(1)));
    assert!(e.to_string().contains("both 0 and -1"), "{e}");
}

#[test]
fn reshape_takes_its_shape_from_a_constant_node_and_refuses_a_computed_one() {
    let nodes = vec![
        NodeProto::new("Constant", "c", &[], &["s"]).with(AttributeProto::tensor(
            "value",
            TensorProto::from_i64("", &[2], &[3, -1]),
        )),
        NodeProto::new("Reshape", "r", &["x", "s"], &["y"]),
    ];
    let g = import_ok(&encode(graph(
        nodes,
        vec![input("x", &[6])],
        &["y"],
        vec![],
    )));
    assert_eq!(shape(&g, "y"), vec![3, 2]);
    assert_eq!(ops(&g), ["Reshape"]);

    let nodes = vec![NodeProto::new("Reshape", "r", &["x", "s"], &["y"])];
    let inputs = vec![
        input("x", &[6]),
        ValueInfoProto::tensor("s", DataType::Int64, &[2]),
    ];
    let e = import_err(&encode(graph(nodes, inputs, &["y"], vec![])));
    assert!(
        matches!(e, ImportError::NotConstant { ref value, .. } if value == "s"),
        "{e}"
    );

    let e = import_err(&encode(graph(
        vec![NodeProto::new("Reshape", "r", &["x", "s"], &["y"])],
        vec![input("x", &[6])],
        &["y"],
        vec![TensorProto::from_f32("s", &[1], &[6.0])],
    )));
    assert!(
        e.to_string()
            .contains("`s` must be a 1-D int64 (or int32) tensor, it is float[1]"),
        "{e}"
    );
}

#[test]
fn flatten_becomes_a_2d_reshape() {
    for (axis, want) in [
        (Some(0), vec![1, 24]),
        (None, vec![2, 12]),
        (Some(2), vec![6, 4]),
        (Some(3), vec![24, 1]),
        (Some(-1), vec![6, 4]),
    ] {
        let mut node = NodeProto::new("Flatten", "f", &["x"], &["y"]);
        if let Some(a) = axis {
            node = node.with(AttributeProto::int("axis", a));
        }
        let g = import_ok(&one_node(node, &[2, 3, 4]));
        assert_eq!(g.nodes[0].op, Op::Reshape { shape: want }, "axis {axis:?}");
    }
    let node = NodeProto::new("Flatten", "f", &["x"], &["y"]).with(AttributeProto::int("axis", 4));
    let e = import_err(&one_node(node, &[2, 3, 4]));
    assert_eq!(
        e.to_string(),
        "attribute `axis` of Flatten node `f`: 4 is out of range for a 3-D input"
    );
}

#[test]
fn transpose_defaults_to_reversing_the_dimensions() {
    let g = import_ok(&one_node(
        NodeProto::new("Transpose", "t", &["x"], &["y"]),
        &[2, 3, 4],
    ));
    assert_eq!(
        g.nodes[0].op,
        Op::Transpose {
            perm: vec![2, 1, 0]
        }
    );
    assert_eq!(shape(&g, "y"), vec![4, 3, 2]);
    let node = NodeProto::new("Transpose", "t", &["x"], &["y"])
        .with(AttributeProto::ints("perm", &[1, 2, 0]));
    assert_eq!(
        shape(&import_ok(&one_node(node, &[2, 3, 4])), "y"),
        vec![3, 4, 2]
    );
    for perm in [&[0, 0, 1][..], &[0, 1], &[0, 1, -1]] {
        let node = NodeProto::new("Transpose", "t", &["x"], &["y"])
            .with(AttributeProto::ints("perm", perm));
        let e = import_err(&one_node(node, &[2, 3, 4]));
        assert!(
            e.to_string().starts_with("Transpose node `t`")
                || e.to_string().contains("attribute `perm`"),
            "{e}"
        );
    }
}

#[test]
fn cast_converts_to_every_ir_type_and_refuses_others() {
    for (dt, elem) in [
        (DataType::Float, ElemType::F32),
        (DataType::Double, ElemType::F64),
        (DataType::Float16, ElemType::F16),
        (DataType::Bfloat16, ElemType::Bf16),
        (DataType::Int8, ElemType::I8),
        (DataType::Uint8, ElemType::U8),
        (DataType::Int32, ElemType::I32),
        (DataType::Int64, ElemType::I64),
    ] {
        let node =
            NodeProto::new("Cast", "c", &["x"], &["y"]).with(AttributeProto::int("to", dt as i64));
        let g = import_ok(&one_node(node, &[3]));
        assert_eq!(g.nodes[0].op, Op::Cast { to: elem });
        assert_eq!(g.ty(by_name(&g, "y")).elem, elem);
    }
    // To bool, a value known only at run time becomes a truth value:
    // `0 < |x|`, 1 or 0 of its own type.
    let node = NodeProto::new("Cast", "c", &["x"], &["y"])
        .with(AttributeProto::int("to", DataType::Bool as i64));
    let g = import_ok(&one_node(node, &[3]));
    assert_eq!(ops(&g), ["Abs", "Less"]);
    assert_eq!(g.ty(by_name(&g, "y")).elem, ElemType::F32);
    let node = NodeProto::new("Cast", "c", &["x"], &["y"])
        .with(AttributeProto::int("to", DataType::String as i64));
    let e = import_err(&one_node(node, &[3]));
    assert_eq!(
        e.to_string(),
        "attribute `to` of Cast node `c`: unsupported element type STRING"
    );
    let e = import_err(&one_node(NodeProto::new("Cast", "c", &["x"], &["y"]), &[3]));
    assert_eq!(
        e.to_string(),
        "attribute `to` of Cast node `c`: required, missing"
    );
}

#[test]
fn constant_nodes_become_constants() {
    let cases = [
        (
            AttributeProto::tensor("value", ramp("", &[2, 2], 1.0, 1.0)),
            ElemType::F32,
            vec![2, 2],
            vec![1.0, 2.0, 3.0, 4.0],
        ),
        (
            AttributeProto::float("value_float", 2.5),
            ElemType::F32,
            vec![],
            vec![2.5],
        ),
        (
            AttributeProto::floats("value_floats", &[1.0, -1.0]),
            ElemType::F32,
            vec![2],
            vec![1.0, -1.0],
        ),
        (
            AttributeProto::int("value_int", -7),
            ElemType::I64,
            vec![],
            vec![-7.0],
        ),
        (
            AttributeProto::ints("value_ints", &[3, 4, 5]),
            ElemType::I64,
            vec![3],
            vec![3.0, 4.0, 5.0],
        ),
    ];
    for (attr, elem, dims, data) in cases {
        let what = attr.name.clone();
        let node = NodeProto::new("Constant", "k", &[], &["y"]).with(attr);
        let g = import_ok(&encode(graph(vec![node], vec![], &["y"], vec![])));
        assert!(g.nodes.is_empty(), "{what}");
        let y = by_name(&g, "y");
        assert_eq!(g.outputs, vec![y]);
        assert_eq!(g.constants[&y].ty.elem, elem, "{what}");
        assert_eq!(g.constants[&y].ty.shape, dims, "{what}");
        assert_eq!(*g.constants[&y].data, data, "{what}");
    }
    let strings = AttributeProto {
        name: "value_string".to_owned(),
        r#type: 3,
        s: b"hi".to_vec(),
        ..AttributeProto::default()
    };
    let node = NodeProto::new("Constant", "k", &[], &["y"]).with(strings);
    let e = import_err(&encode(graph(vec![node], vec![], &["y"], vec![])));
    assert_eq!(
        e.to_string(),
        "attribute `value_string` of Constant node `k`: string and sparse constants are not supported"
    );
    let node = NodeProto::new("Constant", "k", &[], &["y"]);
    let e = import_err(&encode(graph(vec![node], vec![], &["y"], vec![])));
    assert!(
        e.to_string()
            .contains("exactly one value attribute, it has 0"),
        "{e}"
    );
}

#[test]
fn identity_is_an_alias_except_for_a_graph_output() {
    let nodes = vec![
        NodeProto::new("Identity", "i1", &["x"], &["x2"]),
        NodeProto::new("Relu", "r", &["x2"], &["r"]),
        NodeProto::new("Identity", "i2", &["r"], &["y"]),
    ];
    let g = import_ok(&encode(graph(
        nodes,
        vec![input("x", &[3])],
        &["y"],
        vec![],
    )));
    assert_eq!(ops(&g), ["Relu", "Identity"]);
    assert_eq!(g.nodes[0].inputs, vec![by_name(&g, "x")]);
    assert_eq!(g.outputs, vec![by_name(&g, "y")]);
}

#[test]
fn initializers_listed_as_inputs_are_constants() {
    let nodes = vec![NodeProto::new("Add", "a", &["x", "w"], &["y"])];
    let inputs = vec![input("x", &[2, 2]), input("w", &[2, 2])];
    let g = import_ok(&encode(graph(
        nodes,
        inputs,
        &["y"],
        vec![ramp("w", &[2, 2], 0.0, 1.0)],
    )));
    assert_eq!(g.inputs, vec![by_name(&g, "x")]);
    assert!(g.constants.contains_key(&by_name(&g, "w")));
}

#[test]
fn binary_ops_broadcast_like_numpy() {
    for op in ["Add", "Sub", "Mul", "Div"] {
        let nodes = vec![NodeProto::new(op, "", &["x", "b"], &["y"])];
        let g = import_ok(&encode(graph(
            nodes,
            vec![input("x", &[4, 1, 3])],
            &["y"],
            vec![ramp("b", &[5, 1], 0.0, 1.0)],
        )));
        assert_eq!(shape(&g, "y"), vec![4, 5, 3], "{op}");
        assert_eq!(g.nodes[0].name, format!("{op}_0"));
    }
    let nodes = vec![NodeProto::new("MatMul", "mm", &["x", "w"], &["y"])];
    let g = import_ok(&encode(graph(
        nodes,
        vec![input("x", &[5, 2, 3])],
        &["y"],
        vec![ramp("w", &[3, 4], 0.0, 1.0)],
    )));
    assert_eq!(shape(&g, "y"), vec![5, 2, 4]);
}

#[test]
fn symbolic_dimensions_are_bound_by_the_caller() {
    let x =
        ValueInfoProto::tensor_dims("x", F32, [Dim::DimParam("batch".into()), Dim::DimValue(4)]);
    let nodes = vec![NodeProto::new("Relu", "r", &["x"], &["y"])];
    let bytes = encode(graph(nodes, vec![x], &["y"], vec![]));
    let e = import_err(&bytes);
    let ImportError::UnboundDims { ref dims } = e else {
        panic!("{e}");
    };
    assert_eq!(dims.len(), 1);
    assert_eq!((dims[0].input.as_str(), dims[0].index), ("x", 0));
    assert_eq!(dims[0].param.as_deref(), Some("batch"));
    assert_eq!(
        e.to_string(),
        "1 input dimension without a size:\n  `x` [batch, 4]: dimension #0 is the symbol `batch`"
    );
    assert!(e.help().is_some_and(|h| h.contains("--input-shape")));
    let options = ImportOptions {
        dims: HashMap::from([("batch".to_owned(), 8)]),
        ..Default::default()
    };
    let g = import_with(&bytes, &options).expect("bound");
    assert_eq!(shape(&g, "y"), vec![8, 4]);
}

/// Paddle and PyTorch exports: `-1`, unnamed and repeated `?` dimensions,
/// all reported in one error, each fixed by the input's whole shape.
#[test]
fn unsized_dimensions_are_all_reported_and_fixed_by_input_shapes() {
    let q = || Dim::DimParam("?".into());
    let x = ValueInfoProto::tensor_dims("x", F32, [Dim::DimValue(1), Dim::DimValue(3), q(), q()]);
    let mut m = ValueInfoProto::tensor_dims("m", F32, [Dim::DimValue(-1), Dim::DimValue(4)]);
    if let Some(compiler::onnx::proto::type_proto::Value::TensorType(t)) =
        m.r#type.as_mut().and_then(|t| t.value.as_mut())
        && let Some(shape) = t.shape.as_mut()
    {
        shape.dim.push(Default::default()); // neither size nor name
    }
    let nodes = vec![
        NodeProto::new("Relu", "r", &["x"], &["y"]),
        NodeProto::new("Relu", "s", &["m"], &["z"]),
    ];
    let bytes = encode(graph(nodes, vec![x, m], &["y", "z"], vec![]));
    let e = import_err(&bytes);
    let ImportError::UnboundDims { ref dims } = e else {
        panic!("{e}");
    };
    let found: Vec<(&str, usize)> = dims.iter().map(|d| (d.input.as_str(), d.index)).collect();
    assert_eq!(found, [("x", 2), ("x", 3), ("m", 0), ("m", 2)]);
    assert!(
        e.to_string()
            .contains("`m` [?, 4, ?]: dimension #0 has no size"),
        "{e}"
    );
    // `--dim '?=48'` would make both of x's `?` 48; whole shapes say more.
    let options = ImportOptions {
        shapes: HashMap::from([
            ("x".to_owned(), vec![1, 3, 48, 192]),
            ("m".to_owned(), vec![2, 4, 5]),
        ]),
        ..Default::default()
    };
    let g = import_with(&bytes, &options).expect("shapes given");
    assert_eq!(shape(&g, "y"), vec![1, 3, 48, 192]);
    assert_eq!(shape(&g, "z"), vec![2, 4, 5]);
    // A shape that contradicts a fixed size, or has another rank, is refused.
    for bad in [vec![1, 4, 48, 192], vec![1, 3, 48]] {
        let options = ImportOptions {
            shapes: HashMap::from([("x".to_owned(), bad), ("m".to_owned(), vec![2, 4, 5])]),
            ..Default::default()
        };
        let e = import_with(&bytes, &options).expect_err("contradicts the declaration");
        assert!(e.to_string().contains("[1, 3, ?, ?]"), "{e}");
    }
    // A shape for a name that is not an input is refused, naming the inputs.
    let options = ImportOptions {
        shapes: HashMap::from([
            ("x".to_owned(), vec![1, 3, 4, 4]),
            ("m".to_owned(), vec![2, 4, 5]),
            ("img".to_owned(), vec![1]),
        ]),
        ..Default::default()
    };
    let e = import_with(&bytes, &options).expect_err("no such input");
    assert!(e.to_string().contains("`x`, `m`"), "{e}");
}

#[test]
fn inputs_known_when_compiling_become_constants() {
    use compiler::ir::TensorType;
    // Reshape's shape fed as a graph input, as ONNX's node tests do.
    let node = NodeProto::new("Reshape", "r", &["x", "shape"], &["y"]);
    let shape_in = ValueInfoProto::tensor("shape", DataType::Int64, &[2]);
    let bytes = encode(graph(
        vec![node],
        vec![input("x", &[2, 6]), shape_in],
        &["y"],
        vec![],
    ));
    assert!(matches!(
        import_err(&bytes),
        ImportError::NotConstant { .. }
    ));
    let value = |shape: Vec<usize>, data: Vec<f64>| {
        let ty = TensorType {
            elem: ElemType::I64,
            shape,
        };
        Tensor::new(ty, data)
    };
    let options = ImportOptions {
        constants: HashMap::from([("shape".to_owned(), value(vec![2], vec![3.0, 4.0]))]),
        ..Default::default()
    };
    let g = import_with(&bytes, &options).expect("bound");
    assert_eq!(shape(&g, "y"), vec![3, 4]);
    assert_eq!(g.inputs.len(), 1, "the bound input is no longer an input");
    // A value of another type is refused, naming the input.
    let options = ImportOptions {
        constants: HashMap::from([("shape".to_owned(), value(vec![3], vec![3.0, 4.0, 1.0]))]),
        ..Default::default()
    };
    let e = import_with(&bytes, &options).expect_err("wrong shape");
    assert!(e.to_string().contains("shape"), "{e}");
}

#[test]
fn declared_output_types_are_checked() {
    let nodes = vec![NodeProto::new("Relu", "r", &["x"], &["y"])];
    let mut g = graph(nodes, vec![input("x", &[2, 3])], &["y"], vec![]);
    g.output[0] =
        ValueInfoProto::tensor_dims("y", F32, [Dim::DimParam("n".into()), Dim::DimValue(3)]);
    import_ok(&encode(g.clone()));
    g.output[0] = ValueInfoProto::tensor("y", F32, &[3, 2]);
    let e = import_err(&encode(g.clone()));
    assert_eq!(
        e.to_string(),
        "graph output `y`: declared shape [3, 2], computed float[2, 3]"
    );
    g.output[0] = ValueInfoProto::tensor("y", DataType::Int64, &[2, 3]);
    let e = import_err(&encode(g));
    assert_eq!(
        e.to_string(),
        "graph output `y`: declared INT64, computed float[2, 3]"
    );
}

// ---- Errors ----

#[test]
fn unsupported_ops_name_the_op_the_node_and_the_opset() {
    let node = NodeProto::new("Hardmax", "hm_1", &["x"], &["y"]);
    let e = import_err(&one_node(node, &[1, 2, 3]));
    assert_eq!(
        e.to_string(),
        "unsupported op `Hardmax` (node `hm_1`, opset 17)"
    );
    let nodes = vec![
        NodeProto::new("Relu", "", &["x"], &["h"]),
        NodeProto::new("Hardmax", "", &["h"], &["y"]),
    ];
    let e = import_err(&encode(graph(
        nodes,
        vec![input("x", &[3])],
        &["y"],
        vec![],
    )));
    assert_eq!(
        e.to_string(),
        "unsupported op `Hardmax` (node #1, opset 17)"
    );
    let mut node = NodeProto::new("Relu", "r", &["x"], &["y"]);
    node.domain = "com.microsoft".to_owned();
    let e = import_err(&one_node(node, &[3]));
    assert_eq!(
        e.to_string(),
        "unsupported op `Relu` of domain `com.microsoft` (node `r`)"
    );
}

#[test]
fn every_unsupported_op_of_a_model_is_reported_in_one_run_grouped() {
    let mut custom = NodeProto::new("Relu", "c", &["h3"], &["y"]);
    custom.domain = "com.microsoft".to_owned();
    let nodes = vec![
        NodeProto::new("Hardmax", "hs1", &["x"], &["h1"]),
        NodeProto::new("Relu", "ok", &["h1"], &["h2"]),
        NodeProto::new("StringNormalizer", "", &["h2"], &["h3a"]),
        NodeProto::new("Hardmax", "hs2", &["h3a"], &["h3b"]),
        NodeProto::new("Hardmax", "hs3", &["h3b"], &["h3c"]),
        NodeProto::new("Hardmax", "hs4", &["h3c"], &["h3"]),
        custom,
    ];
    let e = import_err(&encode(graph(
        nodes,
        vec![input("x", &[3])],
        &["y"],
        vec![],
    )));
    let ImportError::UnsupportedOps { groups, opset } = &e else {
        panic!("one error for all of them: {e}");
    };
    assert_eq!(*opset, 17);
    let summary: Vec<(&str, &str, Vec<usize>)> = groups
        .iter()
        .map(|g| {
            (
                g.op_type.as_str(),
                g.domain.as_str(),
                g.nodes.iter().map(|n| n.index).collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("Hardmax", "", vec![0, 3, 4, 5]),
            ("StringNormalizer", "", vec![2]),
            ("Relu", "com.microsoft", vec![6]),
        ]
    );
    assert_eq!(
        e.to_string(),
        "3 unsupported op(s) at 6 nodes (opset 17): `Hardmax` (node `hs1`, node `hs2`, node `hs3` and 1 more); `StringNormalizer` (node #2); `Relu` of domain `com.microsoft` (node `c`)"
    );
    assert!(e.help().is_some_and(|h| h.starts_with("supported ops: ")));
}

#[test]
fn opsets_outside_7_to_25_are_refused() {
    let g = graph(
        vec![NodeProto::new("Relu", "r", &["x"], &["y"])],
        vec![input("x", &[3])],
        &["y"],
        vec![],
    );
    for opset in [7, 13, 21, 25] {
        assert!(
            import(&ModelProto::with_graph(g.clone(), opset).encode_to_vec()).is_ok(),
            "{opset}"
        );
    }
    for opset in [1, 6, 26, 1000] {
        let e = import_err(&ModelProto::with_graph(g.clone(), opset).encode_to_vec());
        assert!(
            matches!(e, ImportError::UnsupportedOpset { version } if version == opset),
            "{e}"
        );
    }
    let mut m = ModelProto::with_graph(g, 13);
    m.opset_import[0].domain = "ai.onnx.ml".to_owned();
    assert!(matches!(
        import_err(&m.encode_to_vec()),
        ImportError::NoOpset
    ));
    m.opset_import[0].domain = "ai.onnx".to_owned();
    assert!(import(&m.encode_to_vec()).is_ok());
    let no_graph = ModelProto { graph: None, ..m };
    assert!(matches!(
        import_err(&no_graph.encode_to_vec()),
        ImportError::NoGraph
    ));
}

#[test]
fn bad_graphs_are_errors_that_name_the_node() {
    let relu = |i: &str, o: &str| NodeProto::new("Relu", "r", &[i], &[o]);
    let case = |nodes: Vec<NodeProto>, outputs: &[&str]| {
        import_err(&encode(graph(
            nodes,
            vec![input("x", &[2, 3])],
            outputs,
            vec![ramp("w", &[4, 5], 0.0, 1.0)],
        )))
        .to_string()
    };
    assert_eq!(
        case(vec![relu("z", "y")], &["y"]),
        "Relu node `r`: input #0 `z` is not defined before the node"
    );
    assert_eq!(
        case(vec![relu("x", "x")], &["x"]),
        "value `x` is defined more than once"
    );
    assert_eq!(
        case(vec![relu("x", "y")], &["q"]),
        "graph output `q` is never defined"
    );
    assert_eq!(
        case(
            vec![NodeProto::new("Relu", "r", &["x", "x"], &["y"])],
            &["y"]
        ),
        "Relu node `r`: takes 1 input, has 2"
    );
    assert_eq!(
        case(
            vec![NodeProto::new("MatMul", "mm", &["x", "w"], &["y"])],
            &["y"]
        ),
        "MatMul node `mm`: inner dimensions differ: [2, 3] x [4, 5]"
    );
    assert_eq!(
        case(vec![NodeProto::new("Add", "a", &["x", ""], &["y"])], &["y"]),
        "Add node `a`: required input #1 is missing"
    );
    let gemm = |attr| NodeProto::new("Gemm", "g", &["x", "x"], &["y"]).with(attr);
    assert_eq!(
        case(vec![gemm(AttributeProto::int("transA", 2))], &["y"]),
        "attribute `transA` of Gemm node `g`: must be 0 or 1, is 2"
    );
    assert_eq!(
        case(vec![gemm(AttributeProto::int("alpha", 2))], &["y"]),
        "attribute `alpha` of Gemm node `g`: expected FLOAT, found INT"
    );
    assert_eq!(
        case(vec![gemm(AttributeProto::int("gamma", 2))], &["y"]),
        "attribute `gamma` of Gemm node `g`: unknown attribute of this op"
    );
    let both = gemm(AttributeProto::int("transA", 1)).with(AttributeProto::int("transB", 1));
    assert_eq!(
        case(vec![both], &["y"]),
        "Gemm node `g`: MatMul: inner dimensions differ: [3, 2] x [3, 2]"
    );
}

#[test]
fn bad_inputs_are_errors_that_name_the_input() {
    let case = |x: ValueInfoProto| {
        import_err(&encode(graph(
            vec![NodeProto::new("Relu", "r", &["x"], &["y"])],
            vec![x],
            &["y"],
            vec![],
        )))
        .to_string()
    };
    assert_eq!(case(output("x")), "graph input `x`: has no type");
    assert_eq!(
        case(ValueInfoProto::tensor("x", DataType::String, &[2])),
        "graph input `x`: unsupported element type STRING"
    );
    assert_eq!(
        case(ValueInfoProto::tensor("x", F32, &[2, -3])),
        "graph input `x`: dimension #1 is negative (-3)"
    );
    assert!(case(ValueInfoProto::tensor("x", F32, &[1 << 30, 1 << 30])).contains("too large"));
    let mut no_shape = input("x", &[2]);
    if let Some(compiler::onnx::proto::type_proto::Value::TensorType(t)) =
        no_shape.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape = None;
    }
    assert_eq!(
        case(no_shape),
        "graph input `x`: has no shape (unknown rank)"
    );
}

#[test]
fn results_too_large_to_describe_are_errors() {
    let nodes = vec![NodeProto::new("Add", "a", &["x", "z"], &["y"])];
    let inputs = vec![input("x", &[1 << 25, 1]), input("z", &[1, 1 << 25])];
    let e = import_err(&encode(graph(nodes, inputs, &["y"], vec![])));
    assert!(
        e.to_string()
            .starts_with("Add node `a`: the result has more than"),
        "{e}"
    );
}

#[test]
fn element_wise_functions_and_max_min_import_and_evaluate() {
    use compiler::ir::Unary;
    let x = Tensor::new(
        compiler::ir::TensorType {
            elem: ElemType::F32,
            shape: vec![4],
        },
        vec![-1.5, -0.25, 0.5, 2.0],
    );
    for u in Unary::ALL.into_iter().filter(|u| u.is_onnx()) {
        let g = import_ok(&one_node(
            NodeProto::new(u.name(), "f", &["x"], &["y"]),
            &[4],
        ));
        assert_eq!(ops(&g), [u.name()]);
        assert_eq!(g.nodes[0].op, Op::Unary(u));
        let got = compiler::interp::run(&g, std::slice::from_ref(&x)).expect("runs");
        let want: Vec<f64> = x
            .data
            .iter()
            .map(|&v| ElemType::F32.round(u.eval(v)))
            .collect();
        for (a, b) in got[0].data.iter().zip(&want) {
            assert!(
                a == b || (a.is_nan() && b.is_nan()),
                "{}: {a} vs {b}",
                u.name()
            );
        }
    }
    // Spot values: independent of `Unary::eval`.
    let run = |op: &str| {
        let g = import_ok(&one_node(NodeProto::new(op, "f", &["x"], &["y"]), &[4]));
        compiler::interp::run(&g, std::slice::from_ref(&x)).expect("runs")[0]
            .data
            .to_vec()
    };
    assert_eq!(run("Abs"), [1.5, 0.25, 0.5, 2.0]);
    assert_eq!(run("Neg"), [1.5, 0.25, -0.5, -2.0]);
    assert_eq!(run("Reciprocal")[3], 0.5);
    assert!((run("Sigmoid")[2] - 0.622_459_3).abs() < 1e-6);
    assert!((run("Erf")[3] - 0.995_322_3).abs() < 1e-6);
    assert!(run("Sqrt")[0].is_nan() && run("Log")[1].is_nan());
    // Two-input Max and Min broadcast like the arithmetic ops.
    for (op, want) in [
        ("Max", [0.0, 0.0, 0.5, 2.0]),
        ("Min", [-1.5, -0.25, 0.0, 0.0]),
    ] {
        let node = NodeProto::new(op, "m", &["x", "z"], &["y"]);
        let g = import_ok(&encode(graph(
            vec![node],
            vec![input("x", &[4])],
            &["y"],
            vec![ramp("z", &[1], 0.0, 0.0)],
        )));
        let got = compiler::interp::run(&g, std::slice::from_ref(&x)).expect("runs");
        assert_eq!(*got[0].data, want, "{op}");
    }
}

#[test]
fn pow_with_a_constant_exponent_is_canonicalised() {
    let x = Tensor::new(
        compiler::ir::TensorType {
            elem: ElemType::F32,
            shape: vec![4],
        },
        vec![0.25, 0.5, 1.5, 3.0],
    );
    for (p, want_ops) in [
        (2.0f32, vec!["Mul"]),
        (3.0, vec!["Mul", "Mul"]),
        (0.5, vec!["Sqrt"]),
        (-1.0, vec!["Reciprocal"]),
        (-0.5, vec!["Sqrt", "Reciprocal"]),
        (1.7, vec!["Log", "Mul", "Exp"]),
    ] {
        let node = NodeProto::new("Pow", "p", &["x", "e"], &["y"]);
        let g = import_ok(&encode(graph(
            vec![node],
            vec![input("x", &[4])],
            &["y"],
            vec![ramp("e", &[], p, 0.0)],
        )));
        assert_eq!(ops(&g), want_ops, "p = {p}");
        let got = compiler::interp::run(&g, std::slice::from_ref(&x)).expect("runs");
        for (a, v) in got[0].data.iter().zip(x.data.iter()) {
            let want = v.powf(f64::from(p));
            assert!(
                (a - want).abs() <= 1e-6 * want.abs().max(1.0),
                "p = {p}: {a} vs {want}"
            );
        }
    }
    // The exponent must be a constant.
    let node = NodeProto::new("Pow", "p", &["x", "e"], &["y"]);
    let e = import_err(&encode(graph(
        vec![node],
        vec![input("x", &[4]), input("e", &[])],
        &["y"],
        vec![],
    )));
    assert!(matches!(e, ImportError::NotConstant { .. }), "{e}");
}

#[test]
fn gelu_is_canonicalised_in_both_forms() {
    let x = Tensor::new(
        compiler::ir::TensorType {
            elem: ElemType::F32,
            shape: vec![5],
        },
        vec![-3.0, -1.0, 0.0, 0.5, 2.0],
    );
    let erf_form = |v: f64| 0.5 * v * (1.0 + libm_erf(v / std::f64::consts::SQRT_2));
    let tanh_form = |v: f64| {
        0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
    };
    for (approx, f) in [
        ("none", &erf_form as &dyn Fn(f64) -> f64),
        ("tanh", &tanh_form),
    ] {
        let node = NodeProto::new("Gelu", "gelu", &["x"], &["y"])
            .with(AttributeProto::string("approximate", approx));
        let g = import_ok(&encode(graph(
            vec![node],
            vec![input("x", &[5])],
            &["y"],
            vec![],
        )));
        let got = compiler::interp::run(&g, std::slice::from_ref(&x)).expect("runs");
        for (a, v) in got[0].data.iter().zip(x.data.iter()) {
            assert!(
                (a - f(*v)).abs() <= 1e-6,
                "{approx}: gelu({v}) = {a}, want {}",
                f(*v)
            );
        }
    }
    let node = NodeProto::new("Gelu", "gelu", &["x"], &["y"])
        .with(AttributeProto::string("approximate", "fast"));
    let e = import_err(&encode(graph(
        vec![node],
        vec![input("x", &[5])],
        &["y"],
        vec![],
    )));
    assert!(e.to_string().contains("approximate"), "{e}");
}

/// erf by its series (independent of the interpreter's libm).
fn libm_erf(x: f64) -> f64 {
    let mut sum = 0.0;
    let mut term = x;
    for n in 0..200 {
        sum += term / (2 * n + 1) as f64;
        term *= -x * x / (n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn squeeze_and_unsqueeze_are_reshapes() {
    let axes = |name: &str, v: &[i64]| TensorProto {
        name: name.to_owned(),
        dims: vec![v.len() as i64],
        data_type: DataType::Int64 as i32,
        int64_data: v.to_vec(),
        ..TensorProto::default()
    };
    // Opset 13 and later: axes as an input.
    let un = NodeProto::new("Unsqueeze", "u", &["x", "a"], &["y"]);
    let g = import_ok(&encode(graph(
        vec![un],
        vec![input("x", &[3, 4])],
        &["y"],
        vec![axes("a", &[0, -1])],
    )));
    assert_eq!(ops(&g), ["Reshape"]);
    assert_eq!(shape(&g, "y"), [1, 3, 4, 1]);
    let sq = NodeProto::new("Squeeze", "s", &["x"], &["y"]);
    let g = import_ok(&encode(graph(
        vec![sq],
        vec![input("x", &[1, 3, 1, 4])],
        &["y"],
        vec![],
    )));
    assert_eq!(shape(&g, "y"), [3, 4]);
    let sq = NodeProto::new("Squeeze", "s", &["x", "a"], &["y"]);
    let e = import_err(&encode(graph(
        vec![sq],
        vec![input("x", &[1, 3])],
        &["y"],
        vec![axes("a", &[1])],
    )));
    assert!(
        e.to_string()
            .contains("cannot squeeze dimension 1 of size 3"),
        "{e}"
    );
    // Opset 11: axes as an attribute.
    let un =
        NodeProto::new("Unsqueeze", "u", &["x"], &["y"]).with(AttributeProto::ints("axes", &[1]));
    let bytes = ModelProto::with_graph(
        graph(vec![un], vec![input("x", &[3, 4])], &["y"], vec![]),
        11,
    )
    .encode_to_vec();
    let g = import_ok(&bytes);
    assert_eq!(shape(&g, "y"), [3, 1, 4]);
}

#[test]
fn expand_is_an_add_of_zeros() {
    let shape = TensorProto {
        name: "s".to_owned(),
        dims: vec![3],
        data_type: DataType::Int64 as i32,
        int64_data: vec![2, 3, 4],
        ..TensorProto::default()
    };
    let node = NodeProto::new("Expand", "e", &["x", "s"], &["y"]);
    let g = import_ok(&encode(graph(
        vec![node],
        vec![input("x", &[3, 1])],
        &["y"],
        vec![shape],
    )));
    assert_eq!(ops(&g), ["Add"]);
    assert_eq!(super_shape(&g), [2, 3, 4]);
    let x = Tensor::new(
        compiler::ir::TensorType {
            elem: ElemType::F32,
            shape: vec![3, 1],
        },
        vec![1.0, 2.0, 3.0],
    );
    let got = compiler::interp::run(&g, &[x]).expect("runs");
    assert_eq!(&got[0].data[..8], [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]);
}

fn super_shape(g: &Graph) -> Vec<usize> {
    g.ty(g.outputs[0]).shape.clone()
}

#[test]
fn piecewise_linear_activations_import_as_their_formulas() {
    let mut leaky = NodeProto::new("LeakyRelu", "l", &["x"], &["y"]);
    leaky.attribute.push(AttributeProto::float("alpha", 0.25));
    let g = import_ok(&one_node(leaky, &[4]));
    assert_eq!(ops(&g), ["Relu", "Min", "Mul", "Add"]);
    let g = import_ok(&one_node(
        NodeProto::new("HardSigmoid", "h", &["x"], &["y"]),
        &[4],
    ));
    assert_eq!(ops(&g), ["Mul", "Add", "Min", "Relu"]);
    let g = import_ok(&one_node(
        NodeProto::new("HardSwish", "s", &["x"], &["y"]),
        &[4],
    ));
    assert_eq!(ops(&g), ["Mul", "Add", "Min", "Relu", "Mul"]);
    // Integers are refused with the reason, not computed.
    let mut i = NodeProto::new("HardSigmoid", "hi", &["x"], &["y"]);
    i.attribute.push(AttributeProto::float("alpha", 0.5));
    let bytes = encode(graph(
        vec![i],
        vec![ValueInfoProto::tensor("x", DataType::Int32, &[4])],
        &["y"],
        vec![],
    ));
    let e = import_err(&bytes);
    assert!(e.to_string().contains("floating-point"), "{e}");
}

#[test]
fn clip_takes_its_bounds_from_constant_inputs_or_old_attributes() {
    let lo = TensorProto::from_f32("lo", &[], &[-1.0]);
    let hi = TensorProto::from_f32("hi", &[], &[2.0]);
    let node = NodeProto::new("Clip", "c", &["x", "lo", "hi"], &["y"]);
    let g = import_ok(&encode(graph(
        vec![node],
        vec![input("x", &[4])],
        &["y"],
        vec![lo, hi],
    )));
    assert_eq!(ops(&g), ["Max", "Min"]);
    // Only a maximum (the minimum left out by an empty name).
    let hi = TensorProto::from_f32("hi", &[], &[2.0]);
    let node = NodeProto::new("Clip", "c", &["x", "", "hi"], &["y"]);
    let g = import_ok(&encode(graph(
        vec![node],
        vec![input("x", &[4])],
        &["y"],
        vec![hi],
    )));
    assert_eq!(ops(&g), ["Min"]);
    // A bound computed at run time is the other operand of the max; one
    // that is not a scalar of the input's type is refused.
    let node = NodeProto::new("Clip", "c", &["x", "lo"], &["y"]);
    let g = import_ok(&encode(graph(
        vec![node.clone()],
        vec![input("x", &[4]), input("lo", &[])],
        &["y"],
        vec![],
    )));
    assert_eq!(ops(&g), ["Max"]);
    assert_eq!(g.nodes[0].inputs[1], by_name(&g, "lo"));
    let e = import_err(&encode(graph(
        vec![node],
        vec![input("x", &[4]), input("lo", &[2])],
        &["y"],
        vec![],
    )));
    assert!(e.to_string().contains("a bound must be a scalar"), "{e}");
    // Before opset 11 the bounds are attributes.
    let mut node = NodeProto::new("Clip", "c", &["x"], &["y"]);
    node.attribute.push(AttributeProto::float("min", 0.0));
    node.attribute.push(AttributeProto::float("max", 6.0));
    let old = ModelProto::with_graph(graph(vec![node], vec![input("x", &[4])], &["y"], vec![]), 7);
    let g = import_ok(&old.encode_to_vec());
    assert_eq!(ops(&g), ["Max", "Min"]);
}

/// Malformed recurrent nodes are errors naming the node and what is wrong,
/// never panics (a huge hidden size, weights of the wrong shape, an unknown
/// direction or activation, a shorter sequence).
#[test]
fn malformed_recurrent_nodes_are_errors() {
    let lstm = |attrs: Vec<AttributeProto>, w_dims: &[i64]| {
        let mut n = NodeProto::new("LSTM", "l", &["x", "w", "r"], &["y"]);
        n.attribute = attrs;
        encode(graph(
            vec![n],
            vec![input("x", &[3, 1, 2])],
            &["y"],
            vec![
                ramp("w", w_dims, 0.0, 0.1),
                ramp("r", &[1, 16, 4], 0.0, 0.1),
            ],
        ))
    };
    let h = |n: i64| AttributeProto::int("hidden_size", n);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (lstm(vec![h(1 << 62)], &[1, 16, 2]), "hidden_size"),
        (lstm(vec![h(4)], &[1, 12, 2]), "W must be float[1, 16, 2]"),
        (
            lstm(
                vec![h(4), AttributeProto::string("direction", "sideways")],
                &[1, 16, 2],
            ),
            "unknown direction",
        ),
        (
            lstm(
                vec![
                    h(4),
                    AttributeProto {
                        name: "activations".to_owned(),
                        r#type: compiler::onnx::proto::attribute_proto::AttributeType::Strings
                            as i32,
                        strings: vec![b"Sigmoid".to_vec(), b"Elu".to_vec(), b"Tanh".to_vec()],
                        ..AttributeProto::default()
                    },
                ],
                &[1, 16, 2],
            ),
            "`Elu` is not supported",
        ),
    ];
    for (bytes, want) in cases {
        let e = import_err(&bytes);
        assert!(e.to_string().contains("LSTM node `l`"), "{e}");
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
    // A well-formed one imports.
    import_ok(&lstm(vec![h(4)], &[1, 16, 2]));
}
