//! The Tessera compiler: from ONNX models to programs for any described machine.
//!
//! The graph IR (`ir`) with its op rules and verifier; the ONNX importer
//! (`onnx`); the reference interpreter (`interp`), the correctness oracle;
//! graph passes before lowering (`passes`: canonicalisation, fusion
//! decisions); the lowering pipeline (`lower`: layout, fusion, tiling, instruction
//! selection by semantics, data movement) and the back-end passes it drives,
//! each with an independent checker (`memplan`, `regalloc`, `sched`); and
//! `run`, which compiles, simulates and compares with the oracle (and
//! reports each region's efficiency); `timing`, the wall time of each pass.
//!
//! The `tessera` binary and the application modules (bench, tune, design-space
//! exploration, plots) are the crate `tessera` in `compiler/app/`, which
//! depends on this one and never the other way round.

pub mod interp;
pub mod ir;
pub mod lower;
pub mod memplan;
pub mod onnx;
pub mod passes;
pub mod regalloc;
pub mod run;
pub mod sched;
pub mod timing;
