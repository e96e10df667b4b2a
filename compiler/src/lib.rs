//! The Tessera compiler: from ONNX models to programs for any described machine.
//!
//! Today: the graph IR (`ir`) with its op rules and verifier. The ONNX
//! importer, the reference interpreter and the lowering pipeline build on it.
//! The `tessera` binary (`src/main.rs`, `src/cli/`) is the command-line front end.

pub mod ir;
