//! The ONNX protobuf messages, declared with `prost` derives: ONNX's field
//! numbers and wire types are the interface (`onnx.proto`, IR version 10).
//!
//! Only what an importer reads is declared; every other field (training
//! information, model-local functions, quantization annotations, device
//! configurations) is skipped as an unknown field when decoding. Repeated
//! scalars that `onnx.proto` (proto2) leaves unpacked — `dims`, attribute
//! `floats` and `ints` — are written unpacked, as the ONNX writers do; the
//! decoder accepts both forms anyway. Decoding never recurses more than
//! prost's limit of 100 nested messages, so a crafted file cannot exhaust the
//! stack through nested subgraphs or types.
//!
//! The constructors at the end build models in code (tests, generators of
//! random graphs).

/// A model: metadata, the operator sets it uses and its graph (`ModelProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// The IR version the model was written for.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// The operator sets the model uses (one per domain).
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// The tool that wrote the model.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// Its version.
    #[prost(string, tag = "3")]
    pub producer_version: String,
    /// The model's domain (reverse DNS).
    #[prost(string, tag = "4")]
    pub domain: String,
    /// The model's version.
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    /// Documentation.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// The graph.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    /// Named metadata.
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// An operator set a model imports (`OperatorSetIdProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    /// The domain: `""` (or `"ai.onnx"`) is the default ONNX operator set.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// The operator set version.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// A key-value pair (`StringStringEntryProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    /// The key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A graph: nodes in topological order, initializers, inputs and outputs (`GraphProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    /// The nodes, sorted topologically.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// The graph's name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Constant tensors (weights), named.
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Constant tensors stored sparse.
    #[prost(message, repeated, tag = "15")]
    pub sparse_initializer: Vec<SparseTensorProto>,
    /// Documentation.
    #[prost(string, tag = "10")]
    pub doc_string: String,
    /// Inputs (may include initializers, which are then constants).
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// Outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Types of intermediate values (optional).
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
    /// Named metadata.
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A node: an operator applied to named values (`NodeProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    /// Input value names (`""` for an absent optional input).
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Output value names.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// The node's name (optional).
    #[prost(string, tag = "3")]
    pub name: String,
    /// The operator.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// The operator's domain (`""` is the default ONNX domain).
    #[prost(string, tag = "7")]
    pub domain: String,
    /// The overload of a model-local function.
    #[prost(string, tag = "8")]
    pub overload: String,
    /// Attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    /// Documentation.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// Named metadata.
    #[prost(message, repeated, tag = "9")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A named attribute of a node (`AttributeProto`): `type` says which value field is used.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// The attribute's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// In a function body: the caller's attribute this one refers to.
    #[prost(string, tag = "21")]
    pub ref_attr_name: String,
    /// Documentation.
    #[prost(string, tag = "13")]
    pub doc_string: String,
    /// Which value field is used ([`attribute_proto::AttributeType`]).
    #[prost(enumeration = "attribute_proto::AttributeType", tag = "20")]
    pub r#type: i32,
    /// A float.
    #[prost(float, tag = "2")]
    pub f: f32,
    /// An integer.
    #[prost(int64, tag = "3")]
    pub i: i64,
    /// A string (UTF-8 bytes).
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    /// A tensor.
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    /// A graph (the body of a control-flow op).
    #[prost(message, optional, tag = "6")]
    pub g: Option<GraphProto>,
    /// A sparse tensor.
    #[prost(message, optional, tag = "22")]
    pub sparse_tensor: Option<SparseTensorProto>,
    /// A type.
    #[prost(message, optional, tag = "14")]
    pub tp: Option<TypeProto>,
    /// Floats.
    #[prost(float, repeated, packed = "false", tag = "7")]
    pub floats: Vec<f32>,
    /// Integers.
    #[prost(int64, repeated, packed = "false", tag = "8")]
    pub ints: Vec<i64>,
    /// Strings.
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
    /// Tensors.
    #[prost(message, repeated, tag = "10")]
    pub tensors: Vec<TensorProto>,
    /// Graphs.
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphProto>,
    /// Sparse tensors.
    #[prost(message, repeated, tag = "23")]
    pub sparse_tensors: Vec<SparseTensorProto>,
    /// Types.
    #[prost(message, repeated, tag = "15")]
    pub type_protos: Vec<TypeProto>,
}

/// Types nested in [`AttributeProto`].
pub mod attribute_proto {
    /// Which value field of an attribute is used.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum AttributeType {
        /// Not set.
        Undefined = 0,
        /// `f`.
        Float = 1,
        /// `i`.
        Int = 2,
        /// `s`.
        String = 3,
        /// `t`.
        Tensor = 4,
        /// `g`.
        Graph = 5,
        /// `sparse_tensor`.
        SparseTensor = 11,
        /// `tp`.
        TypeProto = 13,
        /// `floats`.
        Floats = 6,
        /// `ints`.
        Ints = 7,
        /// `strings`.
        Strings = 8,
        /// `tensors`.
        Tensors = 9,
        /// `graphs`.
        Graphs = 10,
        /// `sparse_tensors`.
        SparseTensors = 12,
        /// `type_protos`.
        TypeProtos = 14,
    }

    impl AttributeType {
        /// The ONNX name (`FLOAT`, `INTS`, …).
        pub fn name(self) -> &'static str {
            match self {
                AttributeType::Undefined => "UNDEFINED",
                AttributeType::Float => "FLOAT",
                AttributeType::Int => "INT",
                AttributeType::String => "STRING",
                AttributeType::Tensor => "TENSOR",
                AttributeType::Graph => "GRAPH",
                AttributeType::SparseTensor => "SPARSE_TENSOR",
                AttributeType::TypeProto => "TYPE_PROTO",
                AttributeType::Floats => "FLOATS",
                AttributeType::Ints => "INTS",
                AttributeType::Strings => "STRINGS",
                AttributeType::Tensors => "TENSORS",
                AttributeType::Graphs => "GRAPHS",
                AttributeType::SparseTensors => "SPARSE_TENSORS",
                AttributeType::TypeProtos => "TYPE_PROTOS",
            }
        }
    }
}

/// A named value's type (`ValueInfoProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    /// The value's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its type.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    /// Documentation.
    #[prost(string, tag = "3")]
    pub doc_string: String,
    /// Named metadata.
    #[prost(message, repeated, tag = "4")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A type: a tensor, or a sequence, map, optional or sparse tensor (`TypeProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// A standard denotation of the whole type.
    #[prost(string, tag = "6")]
    pub denotation: String,
    /// The type.
    #[prost(oneof = "type_proto::Value", tags = "1, 4, 5, 9, 8")]
    pub value: Option<type_proto::Value>,
}

/// Types nested in [`TypeProto`].
pub mod type_proto {
    use super::{TensorShapeProto, TypeProto};

    /// A tensor type: element type and (possibly symbolic) shape.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Tensor {
        /// The element type (a [`super::tensor_proto::DataType`]).
        #[prost(int32, tag = "1")]
        pub elem_type: i32,
        /// The shape (absent: unknown rank).
        #[prost(message, optional, tag = "2")]
        pub shape: Option<TensorShapeProto>,
    }

    /// A sequence type.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sequence {
        /// The elements' type.
        #[prost(message, optional, boxed, tag = "1")]
        pub elem_type: Option<Box<TypeProto>>,
    }

    /// A map type.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Map {
        /// The keys' element type.
        #[prost(int32, tag = "1")]
        pub key_type: i32,
        /// The values' type.
        #[prost(message, optional, boxed, tag = "2")]
        pub value_type: Option<Box<TypeProto>>,
    }

    /// An optional type.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Optional {
        /// The type of the value when present.
        #[prost(message, optional, boxed, tag = "1")]
        pub elem_type: Option<Box<TypeProto>>,
    }

    /// A sparse tensor type.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SparseTensor {
        /// The element type.
        #[prost(int32, tag = "1")]
        pub elem_type: i32,
        /// The shape.
        #[prost(message, optional, tag = "2")]
        pub shape: Option<TensorShapeProto>,
    }

    /// The kinds of type.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        /// A tensor.
        #[prost(message, tag = "1")]
        TensorType(Tensor),
        /// A sequence.
        #[prost(message, tag = "4")]
        SequenceType(Sequence),
        /// A map.
        #[prost(message, tag = "5")]
        MapType(Map),
        /// An optional.
        #[prost(message, tag = "9")]
        OptionalType(Optional),
        /// A sparse tensor.
        #[prost(message, tag = "8")]
        SparseTensorType(SparseTensor),
    }
}

/// A tensor shape: dimensions that are numbers or symbols (`TensorShapeProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// The dimensions.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<tensor_shape_proto::Dimension>,
}

/// Types nested in [`TensorShapeProto`].
pub mod tensor_shape_proto {
    /// One dimension.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Dimension {
        /// A standard denotation of the dimension.
        #[prost(string, tag = "3")]
        pub denotation: String,
        /// A number, a symbol, or nothing (unknown).
        #[prost(oneof = "dimension::Value", tags = "1, 2")]
        pub value: Option<dimension::Value>,
    }

    /// Types nested in [`Dimension`].
    pub mod dimension {
        /// A dimension's value.
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            /// A known size.
            #[prost(int64, tag = "1")]
            DimValue(i64),
            /// A symbol (e.g. `batch`), bound by the caller.
            #[prost(string, tag = "2")]
            DimParam(String),
        }
    }
}

/// A tensor: type, shape and data (`TensorProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// The shape.
    #[prost(int64, repeated, packed = "false", tag = "1")]
    pub dims: Vec<i64>,
    /// The element type (a [`tensor_proto::DataType`]).
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// A chunk of a larger tensor.
    #[prost(message, optional, tag = "3")]
    pub segment: Option<tensor_proto::Segment>,
    /// Data of `FLOAT` (and `COMPLEX64`) tensors.
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// Data of `INT32`, `INT16`, `INT8`, `UINT16`, `UINT8`, `BOOL`, and the
    /// bit patterns of `FLOAT16`, `BFLOAT16` and the 8-bit float types.
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    /// Data of `STRING` tensors.
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub string_data: Vec<Vec<u8>>,
    /// Data of `INT64` tensors.
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// The tensor's name.
    #[prost(string, tag = "8")]
    pub name: String,
    /// Documentation.
    #[prost(string, tag = "12")]
    pub doc_string: String,
    /// The data as fixed-width little-endian elements (`BOOL`: one byte each).
    /// Shared with the buffer the model was decoded from, where that was
    /// owned ([`crate::onnx::import_owned`]): weights are not copied.
    #[prost(bytes = "bytes", tag = "9")]
    pub raw_data: prost::bytes::Bytes,
    /// Where external data lives (`location`, `offset`, `length`).
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    /// Whether the data is in this message or external ([`tensor_proto::DataLocation`]).
    #[prost(enumeration = "tensor_proto::DataLocation", tag = "14")]
    pub data_location: i32,
    /// Data of `DOUBLE` (and `COMPLEX128`) tensors.
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    /// Data of `UINT32` and `UINT64` tensors.
    #[prost(uint64, repeated, tag = "11")]
    pub uint64_data: Vec<u64>,
    /// Named metadata.
    #[prost(message, repeated, tag = "16")]
    pub metadata: Vec<StringStringEntryProto>,
}

/// Types nested in [`TensorProto`].
pub mod tensor_proto {
    /// The element types.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum DataType {
        /// Not set.
        Undefined = 0,
        /// 32-bit float.
        Float = 1,
        /// 8-bit unsigned integer.
        Uint8 = 2,
        /// 8-bit signed integer.
        Int8 = 3,
        /// 16-bit unsigned integer.
        Uint16 = 4,
        /// 16-bit signed integer.
        Int16 = 5,
        /// 32-bit signed integer.
        Int32 = 6,
        /// 64-bit signed integer.
        Int64 = 7,
        /// String.
        String = 8,
        /// Boolean.
        Bool = 9,
        /// IEEE half precision.
        Float16 = 10,
        /// 64-bit float.
        Double = 11,
        /// 32-bit unsigned integer.
        Uint32 = 12,
        /// 64-bit unsigned integer.
        Uint64 = 13,
        /// Two 32-bit floats.
        Complex64 = 14,
        /// Two 64-bit floats.
        Complex128 = 15,
        /// bfloat16.
        Bfloat16 = 16,
        /// 8-bit float, 4 exponent bits, finite only.
        Float8e4m3fn = 17,
        /// 8-bit float, 4 exponent bits, finite only, no negative zero.
        Float8e4m3fnuz = 18,
        /// 8-bit float, 5 exponent bits.
        Float8e5m2 = 19,
        /// 8-bit float, 5 exponent bits, finite only, no negative zero.
        Float8e5m2fnuz = 20,
        /// 4-bit unsigned integer.
        Uint4 = 21,
        /// 4-bit signed integer.
        Int4 = 22,
        /// 4-bit float.
        Float4e2m1 = 23,
        /// 8-bit exponent-only float (scales).
        Float8e8m0 = 24,
    }

    impl DataType {
        /// The ONNX name (`FLOAT`, `INT64`, …).
        pub fn name(self) -> &'static str {
            match self {
                DataType::Undefined => "UNDEFINED",
                DataType::Float => "FLOAT",
                DataType::Uint8 => "UINT8",
                DataType::Int8 => "INT8",
                DataType::Uint16 => "UINT16",
                DataType::Int16 => "INT16",
                DataType::Int32 => "INT32",
                DataType::Int64 => "INT64",
                DataType::String => "STRING",
                DataType::Bool => "BOOL",
                DataType::Float16 => "FLOAT16",
                DataType::Double => "DOUBLE",
                DataType::Uint32 => "UINT32",
                DataType::Uint64 => "UINT64",
                DataType::Complex64 => "COMPLEX64",
                DataType::Complex128 => "COMPLEX128",
                DataType::Bfloat16 => "BFLOAT16",
                DataType::Float8e4m3fn => "FLOAT8E4M3FN",
                DataType::Float8e4m3fnuz => "FLOAT8E4M3FNUZ",
                DataType::Float8e5m2 => "FLOAT8E5M2",
                DataType::Float8e5m2fnuz => "FLOAT8E5M2FNUZ",
                DataType::Uint4 => "UINT4",
                DataType::Int4 => "INT4",
                DataType::Float4e2m1 => "FLOAT4E2M1",
                DataType::Float8e8m0 => "FLOAT8E8M0",
            }
        }
    }

    /// Where a tensor's data is.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum DataLocation {
        /// In the message (`raw_data` or a typed field).
        Default = 0,
        /// In an external file described by `external_data`.
        External = 1,
    }

    /// The part of a larger tensor a message holds.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Segment {
        /// First element.
        #[prost(int64, tag = "1")]
        pub begin: i64,
        /// One past the last element.
        #[prost(int64, tag = "2")]
        pub end: i64,
    }
}

/// A sparse tensor: non-zero values and their indices (`SparseTensorProto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SparseTensorProto {
    /// The values, shape `[nnz]`.
    #[prost(message, optional, tag = "1")]
    pub values: Option<TensorProto>,
    /// The indices, shape `[nnz, rank]` or `[nnz]` (linearised).
    #[prost(message, optional, tag = "2")]
    pub indices: Option<TensorProto>,
    /// The dense shape.
    #[prost(int64, repeated, packed = "false", tag = "3")]
    pub dims: Vec<i64>,
}

// ---- Constructors for building models in code ----

use attribute_proto::AttributeType;
use tensor_proto::DataType;

impl ModelProto {
    /// A model of one graph importing the default operator set at `opset`.
    pub fn with_graph(graph: GraphProto, opset: i64) -> ModelProto {
        ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: opset,
            }],
            producer_name: "tessera".to_owned(),
            graph: Some(graph),
            ..ModelProto::default()
        }
    }
}

impl NodeProto {
    /// A node of the default domain without attributes.
    pub fn new(op_type: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            input: inputs.iter().map(|s| (*s).to_owned()).collect(),
            output: outputs.iter().map(|s| (*s).to_owned()).collect(),
            name: name.to_owned(),
            op_type: op_type.to_owned(),
            ..NodeProto::default()
        }
    }

    /// The node with one more attribute.
    pub fn with(mut self, attribute: AttributeProto) -> NodeProto {
        self.attribute.push(attribute);
        self
    }
}

impl AttributeProto {
    fn typed(name: &str, ty: AttributeType) -> AttributeProto {
        AttributeProto {
            name: name.to_owned(),
            r#type: ty as i32,
            ..AttributeProto::default()
        }
    }

    /// A float attribute.
    pub fn float(name: &str, f: f32) -> AttributeProto {
        AttributeProto {
            f,
            ..AttributeProto::typed(name, AttributeType::Float)
        }
    }

    /// An integer attribute.
    pub fn int(name: &str, i: i64) -> AttributeProto {
        AttributeProto {
            i,
            ..AttributeProto::typed(name, AttributeType::Int)
        }
    }

    /// A string attribute.
    pub fn string(name: &str, s: &str) -> AttributeProto {
        AttributeProto {
            s: s.as_bytes().to_vec(),
            ..AttributeProto::typed(name, AttributeType::String)
        }
    }

    /// A float list attribute.
    pub fn floats(name: &str, floats: &[f32]) -> AttributeProto {
        AttributeProto {
            floats: floats.to_vec(),
            ..AttributeProto::typed(name, AttributeType::Floats)
        }
    }

    /// An integer list attribute.
    pub fn ints(name: &str, ints: &[i64]) -> AttributeProto {
        AttributeProto {
            ints: ints.to_vec(),
            ..AttributeProto::typed(name, AttributeType::Ints)
        }
    }

    /// A tensor attribute.
    pub fn tensor(name: &str, t: TensorProto) -> AttributeProto {
        AttributeProto {
            t: Some(t),
            ..AttributeProto::typed(name, AttributeType::Tensor)
        }
    }
}

impl TensorProto {
    fn shaped(name: &str, data_type: DataType, dims: &[i64]) -> TensorProto {
        TensorProto {
            name: name.to_owned(),
            data_type: data_type as i32,
            dims: dims.to_vec(),
            ..TensorProto::default()
        }
    }

    /// A `FLOAT` tensor in `float_data`.
    pub fn from_f32(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
        TensorProto {
            float_data: data.to_vec(),
            ..TensorProto::shaped(name, DataType::Float, dims)
        }
    }

    /// An `INT64` tensor in `int64_data`.
    pub fn from_i64(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
        TensorProto {
            int64_data: data.to_vec(),
            ..TensorProto::shaped(name, DataType::Int64, dims)
        }
    }

    /// A tensor of any type from its little-endian bytes (`raw_data`).
    pub fn from_raw(name: &str, data_type: DataType, dims: &[i64], raw: Vec<u8>) -> TensorProto {
        TensorProto {
            raw_data: raw.into(),
            ..TensorProto::shaped(name, data_type, dims)
        }
    }
}

impl ValueInfoProto {
    /// A tensor value with a static shape.
    pub fn tensor(name: &str, data_type: DataType, dims: &[i64]) -> ValueInfoProto {
        let dims = dims
            .iter()
            .map(|d| tensor_shape_proto::dimension::Value::DimValue(*d));
        ValueInfoProto::tensor_dims(name, data_type, dims)
    }

    /// A tensor value whose dimensions may be symbols.
    pub fn tensor_dims(
        name: &str,
        data_type: DataType,
        dims: impl IntoIterator<Item = tensor_shape_proto::dimension::Value>,
    ) -> ValueInfoProto {
        let dim = dims
            .into_iter()
            .map(|v| tensor_shape_proto::Dimension {
                value: Some(v),
                ..Default::default()
            })
            .collect();
        let tensor = type_proto::Tensor {
            elem_type: data_type as i32,
            shape: Some(TensorShapeProto { dim }),
        };
        ValueInfoProto {
            name: name.to_owned(),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(tensor)),
                ..TypeProto::default()
            }),
            ..ValueInfoProto::default()
        }
    }
}
