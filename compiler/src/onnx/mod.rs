//! The ONNX frontend: models (protobuf, decoded with `prost` into the message
//! structs of [`proto`]) to the graph IR, and ONNX tensor files to IR tensors.
//!
//! [`import`] decodes a model, checks the default-domain opset (7 to 25),
//! makes initializers constants and the other graph inputs typed values (every
//! dimension static: symbolic, `-1` and unnamed ones are bound by
//! [`ImportOptions`], and every one left unbound is reported at once), and lowers
//! the nodes in order into canonical IR ops with their shapes inferred.
//! Values keep their ONNX names. The ops are [`SUPPORTED_OPS`]; many are
//! canonicalised: Gemm into Transpose, MatMul, Mul and Add; Pow with a
//! constant exponent into products, Sqrt, Reciprocal or Exp(Log · p); Gelu,
//! the other activations, Softmax, LogSoftmax and the normalisations into
//! their formulas; Split into Slices; Squeeze, Unsqueeze and Flatten into
//! Reshape; Expand into an add of zeros; Pad and Resize into Gathers at
//! constant indices (and weighted sums); ConvTranspose into a Conv; Einsum
//! into Transposes, Reshapes and a MatMul; RNN, GRU and LSTM unrolled over
//! their sequence; the quantised ops into exact integer and float
//! arithmetic. Whatever is computed from constants and shapes (`Shape`,
//! `ConstantOfShape`, `Range`, comparisons, `If` on a known condition, and
//! any op whose inputs are all constants) is evaluated as it is imported, so
//! exporters' shape subgraphs fold away. Inputs known at compile time may be bound as constants
//! ([`ImportOptions::constants`]). Anything else, and
//! every malformed input, is an [`ImportError`] naming what it is about.

mod error;
mod import;
mod node;
mod ops;
pub mod proto;
mod tensor;

pub use error::{ImportError, NodeRef, UnboundDim, UnsupportedGroup};
pub use import::{
    ImportOptions, OPSETS, import, import_file, import_file_with, import_model, import_owned,
    import_shared, import_with, read_tensor, read_tensor_file,
};
pub use ops::SUPPORTED_OPS;
pub use tensor::{MAX_ELEMENTS, data_type, elem_type, tensor_from_proto};
