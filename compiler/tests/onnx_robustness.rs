//! The ONNX importer on malformed input — arbitrary, mutated, truncated and
//! deeply nested bytes give errors, never panics, and whatever imports
//! verifies — and tensor decoding for every element type, from the typed
//! fields and from `raw_data`, in memory and from backend-test files.

mod onnx_util;

use compiler::ir::verify;
use compiler::onnx::proto::tensor_proto::DataType;
use compiler::onnx::proto::{AttributeProto, ModelProto, NodeProto, TensorProto};
use compiler::onnx::{ImportError, import, tensor_from_proto};
use onnx_util::*;
use proptest::prelude::*;
use prost::Message;

// ---- Tensors ----

/// Little-endian bytes of fixed-width elements.
fn le<const N: usize>(v: impl IntoIterator<Item = [u8; N]>) -> Vec<u8> {
    v.into_iter().flatten().collect()
}

/// One element type: its data type, a typed-field tensor, the same values as
/// little-endian raw bytes, and the values expected.
fn tensor_cases() -> Vec<(DataType, TensorProto, Vec<u8>, Vec<f64>)> {
    use DataType::*;
    let empty = |dt| TensorProto::from_raw("t", dt, &[3], vec![]);
    let int32 = |dt, v: &[i32]| TensorProto {
        int32_data: v.to_vec(),
        ..empty(dt)
    };
    let bits = |h: [u16; 3]| h.map(i32::from);
    let floats = [1.5f32, -2.25, 1e30];
    let doubles = [1e-300, -2.5, 0.1];
    let halves = [0x3e00u16, 0xc000, 0x7c00]; // 1.5, -2, inf
    let bhalves = [0x3fc0u16, 0xc000, 0x4120]; // 1.5, -2, 10
    let i32s = [i32::MIN, -1, 7];
    let i64s = [-(1i64 << 53), 42, -1];
    let doubles_t = TensorProto {
        double_data: doubles.to_vec(),
        ..empty(Double)
    };
    vec![
        (
            Float,
            TensorProto::from_f32("t", &[3], &floats),
            le(floats.map(f32::to_le_bytes)),
            floats.map(f64::from).to_vec(),
        ),
        (
            Double,
            doubles_t,
            le(doubles.map(f64::to_le_bytes)),
            doubles.to_vec(),
        ),
        (
            Float16,
            int32(Float16, &bits(halves)),
            le(halves.map(u16::to_le_bytes)),
            vec![1.5, -2.0, f64::INFINITY],
        ),
        (
            Bfloat16,
            int32(Bfloat16, &bits(bhalves)),
            le(bhalves.map(u16::to_le_bytes)),
            vec![1.5, -2.0, 10.0],
        ),
        (
            Int8,
            int32(Int8, &[-128, 127, 0]),
            vec![0x80, 0x7f, 0],
            vec![-128.0, 127.0, 0.0],
        ),
        (
            Uint8,
            int32(Uint8, &[0, 255, 7]),
            vec![0, 255, 7],
            vec![0.0, 255.0, 7.0],
        ),
        (
            Int32,
            int32(Int32, &i32s),
            le(i32s.map(i32::to_le_bytes)),
            i32s.map(f64::from).to_vec(),
        ),
        (
            Int64,
            TensorProto::from_i64("t", &[3], &i64s),
            le(i64s.map(i64::to_le_bytes)),
            i64s.map(|x| x as f64).to_vec(),
        ),
        (
            Bool,
            int32(Bool, &[0, 1, 1]),
            vec![0, 1, 1],
            vec![0.0, 1.0, 1.0],
        ),
    ]
}

#[test]
fn tensors_decode_for_every_element_type_from_typed_fields_and_raw_data() {
    for (dt, typed, raw, want) in tensor_cases() {
        let from_typed = tensor_from_proto(&typed).unwrap_or_else(|e| panic!("{dt:?} typed: {e}"));
        let from_raw = tensor_from_proto(&TensorProto::from_raw("t", dt, &[3], raw))
            .unwrap_or_else(|e| panic!("{dt:?} raw: {e}"));
        assert_eq!(*from_typed.data, want, "{dt:?} typed");
        assert_eq!(from_raw, from_typed, "{dt:?} raw");
        assert_eq!(from_raw.ty.shape, vec![3]);
        assert_eq!(compiler::onnx::elem_type(dt as i32), Some(from_raw.ty.elem));
    }
}

#[test]
fn tensors_of_other_types_or_elsewhere_are_errors() {
    for dt in [
        DataType::String,
        DataType::Complex64,
        DataType::Float8e4m3fn,
        DataType::Uint4,
        DataType::Undefined,
    ] {
        let e = tensor_from_proto(&TensorProto::from_raw("w", dt, &[1], vec![0; 8]))
            .expect_err("unsupported");
        assert_eq!(
            e.to_string(),
            format!("tensor `w`: unsupported element type {}", dt.name())
        );
    }
    let mut t = TensorProto::from_f32("w", &[1], &[1.0]);
    t.data_location = 1;
    assert!(
        tensor_from_proto(&t)
            .expect_err("external")
            .to_string()
            .contains("external data")
    );
    let wrong_field = TensorProto {
        int32_data: vec![1],
        ..TensorProto::from_f32("w", &[1], &[])
    };
    assert_eq!(
        tensor_from_proto(&wrong_field)
            .expect_err("wrong field")
            .to_string(),
        "tensor `w`: 1 elements expected, `float_data` holds 0"
    );
    let bad_init = graph(
        vec![],
        vec![],
        &[],
        vec![TensorProto::from_raw("w", F32, &[2], vec![0; 3])],
    );
    assert!(
        matches!(import_err(&encode(bad_init)), ImportError::Tensor { ref name, .. } if name == "w")
    );
    let unnamed = graph(vec![], vec![], &[], vec![ramp("", &[1], 0.0, 1.0)]);
    let e = import_err(&encode(unnamed));
    assert_eq!(e.to_string(), "unnamed tensor: initializer #0 has no name");
}

#[test]
fn tensor_files_and_model_files_are_read() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("onnx_import");
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("input_0.pb");
    std::fs::write(&path, ramp("x", &[2, 2], 1.0, 1.0).encode_to_vec()).expect("write");
    let (name, t) = compiler::onnx::read_tensor_file(&path).expect("read");
    assert_eq!(name, "x");
    assert_eq!(*t.data, [1.0, 2.0, 3.0, 4.0]);

    let model = dir.join("relu.onnx");
    std::fs::write(
        &model,
        one_node(NodeProto::new("Relu", "r", &["x"], &["y"]), &[2]),
    )
    .expect("write");
    assert_eq!(
        ops(&compiler::onnx::import_file(&model).expect("model")),
        ["Relu"]
    );

    let e = compiler::onnx::import_file(dir.join("missing.onnx")).expect_err("missing");
    assert!(matches!(e, ImportError::Io { .. }), "{e}");
    std::fs::write(&path, b"\xff\xff\xff").expect("write");
    let e = compiler::onnx::read_tensor_file(&path).expect_err("garbage");
    assert!(e.to_string().starts_with("malformed protobuf"), "{e}");
}

// ---- Robustness ----

fn mlp_bytes() -> Vec<u8> {
    let nodes = vec![
        NodeProto::new("Gemm", "fc1", &["x", "w1", "b1"], &["h"])
            .with(AttributeProto::int("transB", 1)),
        NodeProto::new("Relu", "act", &["h"], &["a"]),
        NodeProto::new("Constant", "shape", &[], &["s"])
            .with(AttributeProto::ints("value_ints", &[0, -1])),
        NodeProto::new("Reshape", "flat", &["a", "s"], &["f"]),
        NodeProto::new("MatMul", "fc2", &["f", "w2"], &["m"]),
        NodeProto::new("Cast", "to_f16", &["m"], &["y"]).with(AttributeProto::int("to", 10)),
    ];
    let inits = vec![
        ramp("w1", &[4, 3], 0.0, 0.5),
        TensorProto::from_raw("b1", F32, &[4], vec![0; 16]),
        ramp("w2", &[4, 2], 1.0, -0.125),
    ];
    encode(graph(nodes, vec![input("x", &[2, 3])], &["y"], inits))
}

/// Imports bytes: an error or a graph the verifier accepts, never a panic.
fn import_never_panics(bytes: &[u8]) {
    if let Ok(g) = import(bytes) {
        verify(&g).unwrap_or_else(|e| panic!("an imported graph fails verification: {e:?}"));
    }
}

#[test]
fn the_robustness_seed_model_imports() {
    let g = import_ok(&mlp_bytes());
    assert_eq!(
        ops(&g),
        // The transposed constant weight is folded as it is imported.
        ["MatMul", "Add", "Relu", "Reshape", "MatMul", "Cast"]
    );
    assert_eq!(shape(&g, "y"), vec![2, 2]);
}

#[test]
fn every_truncation_of_a_model_is_an_error_or_a_graph() {
    let bytes = mlp_bytes();
    for n in 0..bytes.len() {
        import_never_panics(&bytes[..n]);
    }
    assert!(matches!(
        import_err(&bytes[..bytes.len() - 1]),
        ImportError::Decode(_)
    ));
}

/// `inner` nested `depth` times in fields whose tags cycle through `fields`, outermost first.
fn nested(depth: usize, fields: &[u8], inner: Vec<u8>) -> Vec<u8> {
    let mut bytes = inner;
    for i in 0..depth {
        let mut len = Vec::new();
        prost::encoding::encode_varint(bytes.len() as u64, &mut len);
        let mut outer = vec![fields[(depth - 1 - i) % fields.len()]];
        outer.extend(len);
        outer.extend(bytes);
        bytes = outer;
    }
    bytes
}

#[test]
fn deeply_nested_messages_are_refused_without_exhausting_the_stack() {
    // graph (7) → node (1) → attribute (5) → g (6 → 0x32) → node → …
    let tags = [0x0a, 0x2a, 0x32];
    let inner = nested(3000, &tags, vec![]);
    let mut model = vec![0x3a];
    prost::encoding::encode_varint(inner.len() as u64, &mut model);
    model.extend(inner);
    let e = import_err(&model);
    assert!(e.to_string().contains("recursion limit reached"), "{e}");
    // input type: graph (7) → input (11 → 0x5a) → type (2 → 0x12) → sequence (4 → 0x22) → elem (1 → 0x0a) → …
    let types = nested(3000, &[0x22, 0x0a], vec![]);
    let mut vi = vec![0x12];
    prost::encoding::encode_varint(types.len() as u64, &mut vi);
    vi.extend(types);
    let g = nested(2, &[0x3a, 0x5a], vi);
    let e = import_err(&g);
    assert!(e.to_string().contains("recursion limit reached"), "{e}");
}

fn mutate(bytes: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for &(pos, kind, value) in edits {
        if b.is_empty() {
            b.push(value);
            continue;
        }
        let i = pos % b.len();
        match kind % 4 {
            0 => b[i] = value,
            1 => b[i] ^= 1 << (value % 8),
            2 => b.insert(i, value),
            _ => {
                b.remove(i);
            }
        }
    }
    b
}

// ---- Random graphs from the supported vocabulary ----

const OP_TYPES: &[&str] = &[
    "MatMul",
    "Gemm",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "Identity",
    "Reshape",
    "Flatten",
    "Transpose",
    "Cast",
    "Constant",
    "LSTM",
];
const VALUE_NAMES: &[&str] = &["x", "w", "s", "a", "b", "c", ""];

fn any_attribute() -> impl Strategy<Value = AttributeProto> {
    let float_names = prop::sample::select(&["alpha", "beta", "value_float"][..]);
    let int_names = prop::sample::select(
        &[
            "transA",
            "transB",
            "axis",
            "to",
            "allowzero",
            "value_int",
            "perm",
        ][..],
    );
    let ints_names = prop::sample::select(&["perm", "value_ints", "axis"][..]);
    prop_oneof![
        (float_names, any::<f32>()).prop_map(|(n, f)| AttributeProto::float(n, f)),
        (int_names, -3i64..26).prop_map(|(n, i)| AttributeProto::int(n, i)),
        (ints_names, prop::collection::vec(-2i64..5, 0..4))
            .prop_map(|(n, v)| AttributeProto::ints(n, &v)),
        prop::collection::vec(-2i64..4, 0..3).prop_map(|dims| {
            // element counts that may not match the dimensions
            let n = dims.iter().map(|d| d.max(&0)).product::<i64>().min(16);
            let t = TensorProto {
                float_data: (0..n).map(|i| i as f32).collect(),
                ..TensorProto::from_f32("", &dims, &[])
            };
            AttributeProto::tensor("value", t)
        }),
    ]
}

/// How many inputs an op takes (mostly right, sometimes not).
fn input_count(op: &str) -> impl Strategy<Value = usize> + use<> {
    let right = match op {
        "Constant" => 0..=0usize,
        "Gemm" => 2..=3,
        "MatMul" | "Add" | "Sub" | "Mul" | "Div" | "Reshape" => 2..=2,
        _ => 1..=1,
    };
    prop_oneof![6 => right, 1 => 0..=3usize]
}

fn any_node() -> impl Strategy<Value = NodeProto> {
    let name = || prop::sample::select(VALUE_NAMES);
    let attributes = prop_oneof![
        2 => Just(vec![]),
        1 => prop::collection::vec(any_attribute(), 1..3),
    ];
    let op_inputs = prop::sample::select(OP_TYPES).prop_flat_map(move |op| {
        let inputs = input_count(op).prop_flat_map(move |n| prop::collection::vec(name(), n));
        (Just(op), inputs)
    });
    (op_inputs, name(), attributes).prop_map(|((op, inputs), output, attributes)| NodeProto {
        attribute: attributes,
        ..NodeProto::new(op, op, &inputs, &[output])
    })
}

fn any_model() -> impl Strategy<Value = Vec<u8>> {
    let dims = || prop::collection::vec(0i64..4, 0..4);
    let elem = prop::sample::select(&[DataType::Float, DataType::Int64, DataType::Float16][..]);
    (
        (dims(), elem),
        dims(),
        prop::collection::vec(-2i64..5, 0..4),
        prop::collection::vec(any_node(), 1..6),
        prop::sample::select(VALUE_NAMES),
    )
        .prop_map(|((x_dims, x_elem), w_dims, s, nodes, out)| {
            let inits = vec![
                ramp("w", &w_dims, 1.0, 0.5),
                TensorProto::from_i64("s", &[s.len() as i64], &s),
            ];
            let x = compiler::onnx::proto::ValueInfoProto::tensor("x", x_elem, &x_dims);
            encode(graph(nodes, vec![x], &[out], inits))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        import_never_panics(&bytes);
        let _ = ModelProto::decode(bytes.as_slice());
        let _ = TensorProto::decode(bytes.as_slice()).map(|t| tensor_from_proto(&t));
    }

    #[test]
    fn mutated_models_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..8)) {
        import_never_panics(&mutate(&mlp_bytes(), &edits));
    }

    #[test]
    fn random_graphs_of_supported_ops_never_panic(bytes in any_model()) {
        import_never_panics(&bytes);
    }
}
