//! End-to-end tests of the toolchain (this crate has no library code):
//!
//! - `end_to_end.rs`: every bundled example on every shipped target, against
//!   the reference interpreter and onnxruntime's stored outputs;
//! - `random_graphs.rs`: a property test over random MatMul/element-wise
//!   graphs with odd shapes, on every target;
//! - `filetests.rs`: small graphs in `filetests/*.tgraph`, one Markdown
//!   snapshot per (file, target) with a section per pipeline stage.
