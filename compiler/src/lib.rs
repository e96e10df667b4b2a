//! The Tessera compiler: from ONNX models to programs for any described machine.
//!
//! The graph IR (`ir`) with its op rules and verifier; the ONNX importer
//! (`onnx`); the reference interpreter (`interp`), the correctness oracle;
//! the lowering pipeline (`lower`: layout, fusion, tiling, instruction
//! selection by semantics, data movement) and the back-end passes it drives,
//! each with an independent checker (`memplan`, `regalloc`, `sched`); and
//! `run`, which compiles, simulates and compares with the oracle (and
//! reports each region's efficiency; `roofline` plots it); and `bench`,
//! the performance regression suite behind `tessera bench`; `tune`, which
//! picks the products' mappings by measuring them on the simulator (`--tune`);
//! `dse`, design-space exploration over hardware variants (`tessera dse`);
//! `timing`, the wall time of each pass (`tessera compile --time-passes`).
//! The `tessera` binary (`src/main.rs`, `src/cli/`) is the command-line front end.

pub mod bench;
pub mod dse;
pub mod interp;
pub mod ir;
pub mod lower;
pub mod memplan;
pub mod onnx;
pub mod regalloc;
pub mod roofline;
pub mod run;
pub mod sched;
pub mod timing;
pub mod tune;
