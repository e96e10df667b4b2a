//! The shipped machines: every `targets/*.isa`, checked at build time.
//!
//! A target is reached only through this registry ([`all`], [`by_name`]);
//! nothing outside this crate names a concrete machine. Adding a machine is
//! adding a `.isa` file here: no Rust edit.

use isa_specs::Machine;
use std::sync::OnceLock;

/// A registry entry as the build script writes it.
#[derive(Debug)]
pub struct Entry {
    /// The description file, relative to the workspace root.
    pub file: &'static str,
    /// The checked machine model at default parameters, as RON.
    pub model: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/registry.rs"));

/// A shipped machine.
#[derive(Debug)]
pub struct Target {
    /// The description file, relative to the workspace root.
    pub file: &'static str,
    machine: Machine,
}

impl Target {
    /// The checked machine model at default parameters.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The target's name, e.g. `vliw-systolic`.
    pub fn name(&self) -> &str {
        &self.machine.name
    }
}

/// Every shipped machine, sorted by file name.
pub fn all() -> &'static [Target] {
    static TARGETS: OnceLock<Vec<Target>> = OnceLock::new();
    TARGETS.get_or_init(|| {
        REGISTRY
            .iter()
            .map(|e| Target {
                file: e.file,
                // The build script wrote this RON from a checked model; failing to read it back is a bug.
                machine: ron::from_str(e.model)
                    .unwrap_or_else(|err| panic!("registry entry {} is corrupt: {err}", e.file)),
            })
            .collect()
    })
}

/// The machine with this name.
pub fn by_name(name: &str) -> Option<&'static Target> {
    all().iter().find(|t| t.name() == name)
}

/// Names of every shipped machine.
pub fn names() -> Vec<&'static str> {
    all().iter().map(Target::name).collect()
}
