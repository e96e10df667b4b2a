//! The ONNX frontend: models (protobuf, decoded with `prost` into the message
//! structs of [`proto`]) to the graph IR, and ONNX tensor files to IR tensors.
//!
//! [`import`] decodes a model, checks the default-domain opset (7 to 25),
//! makes initializers constants and the other graph inputs typed values (every
//! dimension static: symbolic ones are bound by [`ImportOptions`]), and lowers
//! the nodes in order into canonical IR ops with their shapes inferred.
//! Values keep their ONNX names. Ops: MatMul, Gemm, Add, Sub, Mul, Div, Pow
//! (constant scalar exponent: products, Sqrt, Reciprocal, or Exp(Log · p)), Max
//! and Min (two inputs), Relu, Gelu (erf and tanh forms, as their formulas), Exp, Log, Tanh, Erf, Sqrt, Reciprocal, Neg,
//! Abs, Sigmoid, Identity, Reshape, Flatten, Squeeze, Unsqueeze, Expand (an add of zeros),
//! Transpose, Cast, Constant. Anything else, and
//! every malformed input, is an [`ImportError`] naming what it is about.

mod error;
mod import;
mod node;
mod ops;
pub mod proto;
mod tensor;

pub use error::{ImportError, NodeRef};
pub use import::{
    ImportOptions, OPSETS, import, import_file, import_file_with, import_model, import_with,
    read_tensor, read_tensor_file,
};
pub use ops::SUPPORTED_OPS;
pub use tensor::{MAX_ELEMENTS, data_type, elem_type, tensor_from_proto};
