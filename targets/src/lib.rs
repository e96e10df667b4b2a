//! The shipped machines: every `targets/*.isa`, checked and generated at build time.
//!
//! A target is reached only through this registry ([`all`], [`by_name`]) and
//! the [`Isa`] interface; nothing outside this crate names a concrete
//! machine. Adding a machine is adding a `.isa` file here: no Rust edit.

pub mod sim;

use isa_specs::Machine;
use isa_specs::program::Program;
use isa_specs::target::Isa;
use std::sync::OnceLock;

/// What an instruction instance reads, writes, signals and waits for (for schedulers).
pub type EffectsFn = fn(&Machine, &isa_specs::target::MInst, &mut sim::Effects);

/// A target's simulator entry point: machine in force, program, inputs `(name, bytes)`, configuration.
pub type SimulateFn = fn(
    &Machine,
    &Program,
    &[(String, Vec<u8>)],
    &sim::Config,
) -> Result<sim::Outcome, sim::SimError>;

/// A registry entry as the build script writes it.
#[derive(Debug)]
pub struct Entry {
    /// The description file, relative to the workspace root.
    pub file: &'static str,
    /// The checked machine model at default parameters, as RON.
    pub model: &'static str,
    /// The generated instruction set.
    pub isa: &'static dyn Isa,
    /// The description's files, `(path, text)`, the top file first, to re-check it with other parameter values.
    pub sources: &'static [(&'static str, &'static str)],
    /// The generated simulator.
    pub simulate: SimulateFn,
    /// The generated access sets.
    pub effects: EffectsFn,
}

/// The one shim that includes generated code: one module per target, one submodule per artifact.
macro_rules! target {
    ($stem:ident, $file:literal, $model:literal, [$(($src:literal, $text:literal)),*]) => {
        #[doc = concat!("Generated from `", $file, "`.")]
        pub mod $stem {
            /// The typed instruction enum.
            #[allow(clippy::all, clippy::pedantic, unused, reason = "generated code")]
            pub mod inst {
                include!(concat!(env!("OUT_DIR"), "/", stringify!($stem), "_inst.rs"));
            }
            /// The encoder and decoder.
            #[allow(clippy::all, clippy::pedantic, unused, reason = "generated code")]
            pub mod encode {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/",
                    stringify!($stem),
                    "_encode.rs"
                ));
            }
            /// The assembly printer and parser.
            #[allow(clippy::all, clippy::pedantic, unused, reason = "generated code")]
            pub mod asm {
                include!(concat!(env!("OUT_DIR"), "/", stringify!($stem), "_asm.rs"));
            }
            /// The scheduling tables.
            #[allow(clippy::all, clippy::pedantic, unused, reason = "generated code")]
            pub mod sched {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/",
                    stringify!($stem),
                    "_sched.rs"
                ));
            }
            /// The selector patterns.
            #[allow(clippy::all, clippy::pedantic, unused, reason = "generated code")]
            pub mod select {
                include!(concat!(env!("OUT_DIR"), "/", stringify!($stem), "_select.rs"));
            }
            /// The simulator core: semantics as loops, access sets.
            #[allow(clippy::all, clippy::pedantic, unused, reason = "generated code")]
            pub mod exec {
                include!(concat!(env!("OUT_DIR"), "/", stringify!($stem), "_exec.rs"));
            }

            /// The generated simulator core behind the timing engine.
            #[derive(Debug)]
            pub struct Sim;

            impl crate::sim::SimIsa for Sim {
                type Inst = inst::Inst;
                fn decode(m: &isa_specs::Machine, slot: isa_specs::model::SlotId, w: &[u64]) -> Result<Option<inst::Inst>, isa_specs::target::DecodeError> {
                    encode::decode(m, slot, w)
                }
                fn exec(st: &mut crate::sim::State, m: &isa_specs::Machine, i: &inst::Inst) -> Result<(), crate::sim::Fault> {
                    exec::exec(st, m, i)
                }
                fn effects(m: &isa_specs::Machine, i: &inst::Inst, fx: &mut crate::sim::Effects) {
                    exec::effects(m, i, fx)
                }
                fn unit(i: &inst::Inst) -> isa_specs::model::UnitId {
                    sched::UNIT[i.id().index()]
                }
                fn latency(m: &isa_specs::Machine, i: &inst::Inst) -> i64 {
                    sched::latency(m, i)
                }
                fn occupancy(m: &isa_specs::Machine, i: &inst::Inst) -> i64 {
                    sched::occupancy(m, i)
                }
                fn accumulate(m: &isa_specs::Machine, i: &inst::Inst) -> i64 {
                    sched::accumulate(m, i)
                }
                fn energy(m: &isa_specs::Machine, i: &inst::Inst) -> f64 {
                    sched::energy(m, i)
                }
                fn mnemonic(i: &inst::Inst) -> &'static str {
                    i.mnemonic()
                }
            }

            fn effects(m: &isa_specs::Machine, i: &isa_specs::target::MInst, fx: &mut crate::sim::Effects) {
                fx.clear();
                if let Some(i) = inst::Inst::from_minst(i) {
                    exec::effects(m, &i, fx);
                }
            }

            fn simulate(
                m: &isa_specs::Machine,
                p: &isa_specs::program::Program,
                inputs: &[(String, Vec<u8>)],
                cfg: &crate::sim::Config,
            ) -> Result<crate::sim::Outcome, crate::sim::SimError> {
                crate::sim::run::<Sim>(m, p, inputs, cfg)
            }

            /// The generated instruction set behind the target-independent interface.
            #[derive(Debug)]
            pub struct Isa;

            impl Isa {
                fn typed(
                    m: &isa_specs::Machine,
                    i: &isa_specs::target::MInst,
                ) -> Result<inst::Inst, isa_specs::target::EncodeError> {
                    inst::Inst::from_minst(i).ok_or_else(|| isa_specs::target::EncodeError::Arity {
                        inst: m
                            .instructions
                            .get(i.inst.index())
                            .map_or_else(|| format!("#{}", i.inst.0), |d| d.name.clone()),
                        expected: m
                            .instructions
                            .get(i.inst.index())
                            .map_or(0, |d| d.operands.len()),
                        found: i.operands.len(),
                    })
                }
            }

            impl isa_specs::target::Isa for Isa {
                fn encode_inst(
                    &self,
                    m: &isa_specs::Machine,
                    i: &isa_specs::target::MInst,
                    w: &mut [u64],
                ) -> Result<(), isa_specs::target::EncodeError> {
                    encode::encode(m, &Self::typed(m, i)?, w)
                }
                fn decode_inst(
                    &self,
                    m: &isa_specs::Machine,
                    slot: isa_specs::model::SlotId,
                    w: &[u64],
                ) -> Result<Option<isa_specs::target::MInst>, isa_specs::target::DecodeError>
                {
                    Ok(encode::decode(m, slot, w)?.map(|i| i.to_minst()))
                }
                fn print_inst(
                    &self,
                    m: &isa_specs::Machine,
                    i: &isa_specs::target::MInst,
                ) -> String {
                    Self::typed(m, i).map_or_else(|e| format!("<{e}>"), |i| asm::print(&i))
                }
                fn parse_inst(
                    &self,
                    _m: &isa_specs::Machine,
                    text: &str,
                ) -> Result<isa_specs::target::MInst, isa_specs::target::asm::AsmError> {
                    asm::parse(text).map(|i| i.to_minst())
                }
                fn latency(&self, m: &isa_specs::Machine, i: &isa_specs::target::MInst) -> i64 {
                    Self::typed(m, i).map_or(1, |i| sched::latency(m, &i))
                }
                fn occupancy(&self, m: &isa_specs::Machine, i: &isa_specs::target::MInst) -> i64 {
                    Self::typed(m, i).map_or(1, |i| sched::occupancy(m, &i))
                }
                fn accumulate(&self, m: &isa_specs::Machine, i: &isa_specs::target::MInst) -> i64 {
                    Self::typed(m, i).map_or(0, |i| sched::accumulate(m, &i))
                }
                fn energy(&self, m: &isa_specs::Machine, i: &isa_specs::target::MInst) -> f64 {
                    Self::typed(m, i).map_or(0.0, |i| sched::energy(m, &i))
                }
                fn match_op(&self, m: &isa_specs::Machine, op: &isa_specs::select::TileOp) -> Vec<(isa_specs::model::InstId, isa_specs::select::Binder)> {
                    select::match_all(m, op)
                }
                fn match_inst(&self, m: &isa_specs::Machine, id: isa_specs::model::InstId, op: &isa_specs::select::TileOp) -> Option<isa_specs::select::Binder> {
                    select::match_one(m, id, op)
                }
            }

            /// This target's registry entry.
            pub const ENTRY: crate::Entry = crate::Entry { file: $file, model: $model, isa: &Isa, sources: &[$(($src, $text)),*], simulate, effects };
        }
    };
}

include!(concat!(env!("OUT_DIR"), "/targets.rs"));

/// A shipped machine.
#[derive(Debug)]
pub struct Target {
    /// The description file, relative to the workspace root.
    pub file: &'static str,
    machine: Machine,
    isa: &'static dyn Isa,
    sources: &'static [(&'static str, &'static str)],
    simulate: SimulateFn,
    effects: EffectsFn,
}

/// Why a target cannot take the parameter values asked for.
#[derive(Debug)]
pub enum TargetError {
    /// The description has errors with these values (for example an address field no longer reaches the memory).
    Invalid(isa_specs::Failed),
    /// The values change what the generated code fixed at build time (bit layouts, slots, operand kinds).
    NeedsRebuild {
        /// The target.
        target: String,
    },
}

impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetError::Invalid(failed) => write!(
                f,
                "the parameter values make the description invalid:\n{failed}"
            ),
            TargetError::NeedsRebuild { target } => write!(
                f,
                "these parameter values change the encoding of `{target}` (formats, slots or operands), which the generated code fixes at build time: edit the description and rebuild instead"
            ),
        }
    }
}

impl std::error::Error for TargetError {}

/// What the generated code fixes at build time: bit layouts, slots, operand kinds and names.
fn structure(m: &Machine) -> String {
    use std::fmt::Write as _;
    let mut s = format!("{} {:?} {:?}", m.word_bits, m.formats, m.slots);
    for r in &m.regfiles {
        let _ = write!(s, " rf:{}", r.name);
    }
    for b in &m.semaphores {
        let _ = write!(s, " sem:{}", b.name);
    }
    for i in &m.instructions {
        let _ = write!(
            s,
            " {}:{:?}:{:?}:{:?}",
            i.name, i.encoding, i.timing.slots, i.timing.unit
        );
        for o in &i.operands {
            let kind = match &o.kind {
                isa_specs::model::OperandKind::Reg { file, .. } => format!("reg{}", file.0),
                isa_specs::model::OperandKind::Mem { mem, dtype, .. } => {
                    format!("mem{}{dtype:?}", mem.0)
                }
                isa_specs::model::OperandKind::Imm { .. } => "imm".to_owned(),
                isa_specs::model::OperandKind::ImmReal { dtype } => format!("real{dtype:?}"),
                isa_specs::model::OperandKind::Sem { bank } => format!("sem{}", bank.0),
            };
            let _ = write!(s, " {}={kind}", o.name);
        }
    }
    s
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

    /// The generated instruction set.
    pub fn isa(&self) -> &'static dyn Isa {
        self.isa
    }

    /// Runs a program on the generated simulator, with the machine in force (see [`Target::with_params`]).
    pub fn simulate(
        &self,
        m: &Machine,
        p: &Program,
        inputs: &[(String, Vec<u8>)],
        cfg: &sim::Config,
    ) -> Result<sim::Outcome, sim::SimError> {
        (self.simulate)(m, p, inputs, cfg)
    }

    /// What an instruction instance reads, writes, signals and waits for.
    pub fn effects(&self, m: &Machine, inst: &isa_specs::target::MInst, fx: &mut sim::Effects) {
        (self.effects)(m, inst, fx);
    }

    /// The machine with parameters overridden (`--set`): the description is
    /// re-checked with the new values, and refused if they would change what
    /// the generated code fixed at build time. No rebuild is needed otherwise.
    pub fn with_params(&self, overrides: &isa_specs::Overrides) -> Result<Machine, TargetError> {
        if overrides.is_empty() {
            return Ok(self.machine.clone());
        }
        Ok(self.load(overrides)?.machine)
    }

    /// The embedded description re-loaded with parameters overridden, with its
    /// spans and sources (for the manual); refused as [`Target::with_params`] refuses.
    pub fn load(&self, overrides: &isa_specs::Overrides) -> Result<isa_specs::Loaded, TargetError> {
        let files: Vec<(String, String)> = self
            .sources
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
            .collect();
        let loaded = isa_specs::load_sources(&files, overrides).map_err(TargetError::Invalid)?;
        if structure(&loaded.machine) != structure(&self.machine) {
            return Err(TargetError::NeedsRebuild {
                target: self.machine.name.clone(),
            });
        }
        Ok(loaded)
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
                isa: e.isa,
                sources: e.sources,
                simulate: e.simulate,
                effects: e.effects,
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
