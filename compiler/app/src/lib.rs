//! The application around the Tessera compiler: what the `tessera` binary
//! does beyond compiling, kept apart from the `compiler` library so that the
//! library has no command-line, plotting or progress-bar dependencies.
//!
//! - `bench`: the performance regression suite behind `tessera bench`;
//! - `tune`: picks the products' mappings by measuring them on the simulator
//!   (`tessera compile --tune`);
//! - `dse`: design-space exploration over hardware variants (`tessera dse`);
//! - `roofline`: roofline plots (SVG).
//!
//! The binary (`src/main.rs`, `src/cli/`, one module per command family) is
//! the command-line front end over these and the library.

pub mod bench;
pub mod dse;
pub mod roofline;
pub mod tune;
