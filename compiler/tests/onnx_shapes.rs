//! Exporters' shape subgraphs: `Shape`, `Gather`, `Concat`, `Unsqueeze`,
//! `ConstantOfShape`, `Range`, the comparisons, `Where`, `If` and the
//! arithmetic on dimensions fold into constants as the model is imported, so
//! what reads them (`Reshape`, `Expand`) sees constants and only the
//! computation on data is left. Values only known at run time are refused by
//! the ops that are evaluated when compiling, naming the op and the value.

mod onnx_util;

use compiler::ir::{ElemType, Tensor, TensorType};
use compiler::onnx::proto::attribute_proto::AttributeType;
use compiler::onnx::proto::tensor_proto::DataType;
use compiler::onnx::proto::tensor_shape_proto::dimension::Value as Dim;
use compiler::onnx::proto::{AttributeProto, GraphProto, NodeProto, TensorProto, ValueInfoProto};
use compiler::onnx::{ImportError, ImportOptions, import_with};
use onnx_util::*;

fn ints(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        name: name.to_owned(),
        dims: dims.to_vec(),
        data_type: DataType::Int64 as i32,
        int64_data: data.to_vec(),
        ..TensorProto::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    let mut n = NodeProto::new(op, outputs[0], inputs, outputs);
    n.attribute = attrs;
    n
}

fn f32s(shape: &[usize], data: Vec<f64>) -> Tensor {
    let ty = TensorType {
        elem: ElemType::F32,
        shape: shape.to_vec(),
    };
    Tensor::new(ty, data)
}

fn shapes(list: &[(&str, &[usize])]) -> ImportOptions {
    ImportOptions {
        shapes: list
            .iter()
            .map(|(n, s)| ((*n).to_owned(), s.to_vec()))
            .collect(),
        ..Default::default()
    }
}

/// PyTorch's `x.view(x.size(0), -1)` and `x.expand(...)` over an input of
/// unnamed batch and spatial dimensions: the shape arithmetic folds away and
/// only the data ops are left.
#[test]
fn a_pytorch_flatten_and_expand_fold_to_static_reshapes() {
    let q = || Dim::DimParam(String::new());
    let x = ValueInfoProto::tensor_dims("x", F32, [q(), Dim::DimValue(3), q(), q()]);
    let nodes = vec![
        node("Shape", &["x"], &["s"], vec![]),
        node(
            "Gather",
            &["s", "zero"],
            &["n"],
            vec![AttributeProto::int("axis", 0)],
        ),
        node("Unsqueeze", &["n", "axes0"], &["n1"], vec![]),
        node(
            "Concat",
            &["n1", "minus1"],
            &["spec"],
            vec![AttributeProto::int("axis", 0)],
        ),
        node("Reshape", &["x", "spec"], &["flat"], vec![]),
        // The column count, as `Shape(flat)[1:2]`, and `ConstantOfShape` of
        // `[n, cols]` with ones: `Expand(b, where(spec == -1, ones, spec))`.
        node("Shape", &["flat"], &["fs"], vec![]),
        node(
            "ConstantOfShape",
            &["fs"],
            &["ones"],
            vec![AttributeProto::tensor("value", ints("v", &[1], &[1]))],
        ),
        node("Equal", &["fs", "minus1"], &["is_free"], vec![]),
        node(
            "Where",
            &["is_free", "ones_shape", "fs"],
            &["target"],
            vec![],
        ),
        node("Expand", &["b", "target"], &["b_wide"], vec![]),
        node("Add", &["flat", "b_wide"], &["y"], vec![]),
    ];
    let inits = vec![
        ints("zero", &[], &[0]),
        ints("axes0", &[1], &[0]),
        ints("minus1", &[1], &[-1]),
        ints("ones_shape", &[2], &[1, 1]),
        ramp("b", &[1, 1], 0.5, 0.0),
    ];
    let bytes = encode(graph(nodes, vec![x], &["y"], inits));
    let g = import_with(&bytes, &shapes(&[("x", &[2, 3, 4, 5])])).expect("imports");
    compiler::ir::verify(&g).expect("verified");
    assert_eq!(ops(&g), ["Reshape", "Add"], "only data ops are left");
    assert_eq!(shape(&g, "y"), [2, 60]);
    assert_eq!(
        g.constants
            .values()
            .filter(|t| t.ty.elem == ElemType::I64)
            .count(),
        0
    );
    let data: Vec<f64> = (0..120).map(f64::from).collect();
    let got = compiler::interp::run(&g, &[f32s(&[2, 3, 4, 5], data)]).expect("runs");
    assert_eq!(got[0].data[7], 7.5);
}

/// `Range` for positions, `Size`, `Mod`, `Floor` on a dimension and
/// `ReduceProd` of a shape, as exporters write them.
#[test]
fn range_size_mod_floor_and_reduce_prod_fold() {
    let x = input("x", &[2, 6, 4]);
    let nodes = vec![
        node(
            "Shape",
            &["x"],
            &["s"],
            vec![AttributeProto::int("start", -2)],
        ),
        node(
            "ReduceProd",
            &["s"],
            &["cols"],
            vec![AttributeProto::int("keepdims", 1)],
        ),
        node("Size", &["x"], &["count"], vec![]),
        node("Mod", &["count", "seven"], &["rem"], vec![]),
        node("Range", &["zero", "cols", "one"], &["pos"], vec![]),
        node(
            "Cast",
            &["pos"],
            &["posf"],
            vec![AttributeProto::int("to", 1)],
        ),
        node("Div", &["posf", "two"], &["half"], vec![]),
        node("Floor", &["half"], &["fl"], vec![]),
        node("Reshape", &["x", "shape2"], &["x2"], vec![]),
        node("Add", &["x2", "fl"], &["y"], vec![]),
    ];
    let inits = vec![
        ints("seven", &[], &[7]),
        ints("zero", &[], &[0]),
        ints("one", &[], &[1]),
        ints("shape2", &[2], &[2, 24]),
        TensorProto::from_f32("two", &[], &[2.0]),
    ];
    let bytes = encode(graph(nodes, vec![x], &["y", "rem"], inits));
    let g = import_with(&bytes, &ImportOptions::default()).expect("imports");
    assert_eq!(ops(&g), ["Reshape", "Add"]);
    let rem = g.constants[&by_name(&g, "rem")].data[0];
    assert_eq!(rem, (48 % 7) as f64);
    let fl = &g.constants[&by_name(&g, "fl")];
    assert_eq!(fl.ty.shape, [24]);
    assert_eq!(fl.data[..5], [0.0, 0.0, 1.0, 1.0, 2.0]);
}

fn branch(name: &str, value: f32) -> GraphProto {
    GraphProto {
        name: name.to_owned(),
        node: vec![node("Mul", &["x", name], &[&format!("{name}_out")], vec![])],
        initializer: vec![TensorProto::from_f32(name, &[], &[value])],
        output: vec![output(&format!("{name}_out"))],
        ..GraphProto::default()
    }
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: name.to_owned(),
        r#type: AttributeType::Graph as i32,
        g: Some(g),
        ..AttributeProto::default()
    }
}

/// An `If` whose condition folds (a shape compared with a constant) is the
/// branch taken, inlined; its outer-scope reads see the enclosing graph.
#[test]
fn an_if_on_a_known_condition_is_its_branch_inlined() {
    for (batch, want) in [(1, 2.0), (3, -1.0)] {
        let nodes = vec![
            node("Shape", &["x"], &["s"], vec![]),
            node(
                "Gather",
                &["s", "zero"],
                &["n"],
                vec![AttributeProto::int("axis", 0)],
            ),
            node("Equal", &["n", "one"], &["single"], vec![]),
            node(
                "If",
                &["single"],
                &["y"],
                vec![
                    graph_attr("then_branch", branch("twice", 2.0)),
                    graph_attr("else_branch", branch("negated", -1.0)),
                ],
            ),
        ];
        let inits = vec![ints("zero", &[], &[0]), ints("one", &[], &[1])];
        let bytes = encode(graph(nodes, vec![input("x", &[batch, 2])], &["y"], inits));
        let g = import_with(&bytes, &ImportOptions::default()).expect("imports");
        assert_eq!(ops(&g), ["Mul"]);
        let x = f32s(&[batch as usize, 2], vec![1.0; 2 * batch as usize]);
        let got = compiler::interp::run(&g, &[x]).expect("runs");
        assert_eq!(got[0].data[0], want);
        let out = &g.values[g.outputs[0].index()].name;
        assert!(
            out.ends_with("_out"),
            "the branch's value keeps its name: {out}"
        );
    }
}

/// Comparisons, logic and `If` of values known only at run time are
/// computed then, as truth values of 1 and 0 (`If` as both branches and a
/// selection), and the interpreter gives ONNX's answers.
#[test]
fn comparisons_logic_and_if_of_run_time_values_run() {
    let if_node = node(
        "If",
        &["c"],
        &["y"],
        vec![
            graph_attr("then_branch", branch("t", 1.0)),
            graph_attr("else_branch", branch("e", 2.0)),
        ],
    );
    let cmp = node("Less", &["x", "x1"], &["c0"], vec![]);
    let not = node("Not", &["c0"], &["c1"], vec![]);
    let eq = node("Equal", &["x", "x"], &["c2"], vec![]);
    let and = node("And", &["c1", "c2"], &["c3"], vec![]);
    let first = node(
        "Gather",
        &["c3", "zero"],
        &["c"],
        vec![AttributeProto::int("axis", 0)],
    );
    let zero = TensorProto::from_i64("zero", &[], &[0]);
    let one = TensorProto::from_f32("one", &[2], &[1.0, 1.0]);
    let x1 = node("Add", &["x", "one"], &["x1"], vec![]);
    let bytes = encode(graph(
        vec![x1, cmp, not, eq, and, first, if_node],
        vec![input("x", &[2])],
        &["y"],
        vec![zero, one],
    ));
    let g = import_with(&bytes, &ImportOptions::default()).expect("imports");
    let ty = compiler::ir::TensorType {
        elem: compiler::ir::ElemType::F32,
        shape: vec![2],
    };
    let x = compiler::ir::Tensor::new(ty, vec![3.0, -1.0]);
    // x < x + 1 always: Not gives 0, And 0, so the else branch (x · 2).
    let y = compiler::interp::run(&g, &[x]).expect("runs");
    assert_eq!(y[0].data.to_vec(), [6.0, -2.0]);
}

/// The ops evaluated when compiling refuse values only known at run time,
/// naming the op, the node and the value, with a hint.
#[test]
fn compile_time_ops_refuse_run_time_values() {
    let cases: Vec<(NodeProto, &str)> = vec![
        (node("Floor", &["x"], &["y"], vec![]), "Floor"),
        (node("Ceil", &["x"], &["y"], vec![]), "Ceil"),
    ];
    for (n, op) in cases {
        let b = ValueInfoProto::tensor("b", DataType::Bool, &[]);
        let bytes = encode(graph(vec![n], vec![input("x", &[2]), b], &["y"], vec![]));
        let e = import_with(&bytes, &ImportOptions::default()).expect_err(op);
        assert!(matches!(e, ImportError::NotStatic { .. }), "{op}: {e}");
        assert!(
            e.to_string()
                .starts_with(&format!("{op} node `y`: input `")),
            "{e}"
        );
        assert!(e.to_string().contains("only known at run time"), "{e}");
        assert!(e.help().is_some());
    }
}

/// Malformed forms are errors naming the node, never panics.
#[test]
fn malformed_shape_ops_are_errors() {
    let cases: Vec<(Vec<NodeProto>, Vec<TensorProto>, &str)> = vec![
        (
            vec![node("Range", &["a", "b", "z"], &["y"], vec![])],
            vec![
                ints("a", &[], &[0]),
                ints("b", &[], &[4]),
                ints("z", &[], &[0]),
            ],
            "delta is 0",
        ),
        (
            vec![node("Range", &["a", "b", "f"], &["y"], vec![])],
            vec![
                ints("a", &[], &[0]),
                ints("b", &[], &[4]),
                TensorProto::from_f32("f", &[], &[1.0]),
            ],
            "one type",
        ),
        (
            vec![node("ConstantOfShape", &["s"], &["y"], vec![])],
            vec![ints("s", &[2], &[2, -3])],
            "negative",
        ),
        (
            vec![node("ConstantOfShape", &["s"], &["y"], vec![])],
            vec![ints("s", &[2], &[1 << 20, 1 << 20])],
            "more than",
        ),
        (
            vec![node("Mod", &["a", "z"], &["y"], vec![])],
            vec![ints("a", &[], &[3]), ints("z", &[], &[0])],
            "division by zero",
        ),
        (
            vec![node("And", &["a", "a"], &["y"], vec![])],
            vec![ints("a", &[], &[3])],
            "must be bool",
        ),
    ];
    for (nodes, inits, want) in cases {
        let bytes = encode(graph(nodes, vec![input("x", &[2])], &["y"], inits));
        let e = import_with(&bytes, &ImportOptions::default()).expect_err(want);
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
}

/// A cast that changes no bits (exporters write `Cast(to=FLOAT)` of floats)
/// of a reshape whose rows differ from its input's: the cast has bytes of
/// its own, which must be written. Silero VAD's decoder (`Unsqueeze(h, -1)`,
/// `Cast`, `Relu`) read them unwritten on every target.
#[test]
fn a_cast_of_a_relaid_out_reshape_is_copied() {
    let nodes = vec![
        node("Tanh", &["x"], &["t"], vec![]),
        node("Unsqueeze", &["t", "last"], &["u"], vec![]),
        node("Cast", &["u"], &["c"], vec![AttributeProto::int("to", 1)]),
        node("Relu", &["c"], &["y"], vec![]),
    ];
    let inits = vec![ints("last", &[1], &[-1])];
    let bytes = encode(graph(nodes, vec![input("x", &[1, 64])], &["y"], inits));
    let g = import_with(&bytes, &ImportOptions::default()).expect("imports");
    let ran = run_everywhere(&g, 7, "tanh, unsqueeze, cast, relu", &["lacks"]);
    assert!(ran.len() >= 3, "ran on {ran:?}");
}
