//! The Tessera compiler: from ONNX models to programs for any described machine.
//!
//! Today: the graph IR (`ir`) with its op rules and verifier, the ONNX
//! importer (`onnx`) and the reference interpreter (`interp`), the
//! correctness oracle. The lowering pipeline builds on them.
//! The `tessera` binary (`src/main.rs`, `src/cli/`) is the command-line front end.

pub mod interp;
pub mod ir;
pub mod lower;
pub mod memplan;
pub mod onnx;
pub mod regalloc;
pub mod run;
pub mod sched;
