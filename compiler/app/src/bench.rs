//! The performance regression suite behind `tessera bench`.
//!
//! A fixed, enumerable set of workloads ([`workloads`]: the bundled example
//! models and synthetic GEMMs, in two sizes) is compiled for each target,
//! simulated functionally and checked against the reference interpreter
//! ([`compiler::run::run_with`]). Each pair gives a [`PairResult`]: simulated
//! cycles, the roofline bound and the efficiency, compile and simulator
//! time, instruction and bundle counts, and — with ablation — the cycles with
//! each optimisation of [`lower::OPTIONS`] turned off over the cycles with all on.
//! A [`BenchReport`] is written as JSON; [`compare`] sets two of them side by
//! side and flags cycle regressions.

use compiler::ir::{Graph, Tensor};
use compiler::lower::{self, Options};
use compiler::run::{self, RunError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Version of the JSON layout of [`BenchReport`].
pub const JSON_VERSION: u32 = 1;

/// More cycles than the old run by more than this fraction is a regression.
pub const REGRESSION_THRESHOLD: f64 = 0.01;

/// Which set of workloads to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// The default: the small GEMMs and the cheaper examples (about half a minute).
    Small,
    /// Everything: every example and GEMMs up to 1024³ (tens of minutes).
    Full,
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Size::Small => "small",
            Size::Full => "full",
        })
    }
}

/// Synthetic GEMM sizes `(M, K, N)` of each set.
const SMALL_GEMMS: &[(usize, usize, usize)] = &[(64, 64, 64), (128, 128, 128)];
const FULL_GEMMS: &[(usize, usize, usize)] = &[
    (64, 64, 64),
    (128, 128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (1024, 1024, 1024),
];

/// Synthetic convolutions `(c, m, hw, k, stride, groups)` of each size:
/// ResNet's and MobileNet's layers (the full set at their sizes).
const SMALL_CONVS: &[(usize, usize, usize, usize, usize, usize)] =
    &[(32, 32, 16, 3, 1, 1), (32, 32, 16, 3, 1, 32)];
const FULL_CONVS: &[(usize, usize, usize, usize, usize, usize)] = &[
    (64, 64, 56, 3, 1, 1),
    (128, 128, 28, 3, 1, 1),
    (64, 128, 56, 3, 2, 1),
    (256, 256, 14, 1, 1, 1),
    (64, 64, 56, 3, 1, 64),
    (128, 128, 28, 3, 2, 128),
];

/// Bundled examples too slow to compile and simulate on every target for
/// the small set (seconds each on the slower machines); the full set has them.
const FULL_ONLY_EXAMPLES: &[&str] = &["cnn_small"];

/// Where a workload's graph comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `[M, K] · [K, N]`: an input times a constant, in f32.
    Gemm {
        /// Rows of the input.
        m: usize,
        /// Columns of the input, rows of the constant.
        k: usize,
        /// Columns of the constant.
        n: usize,
    },
    /// A 2-D convolution `[1, c, hw, hw]` by constant `[m, c / groups, k, k]`
    /// weights and a bias, stride `stride`, padded to keep the size at
    /// stride 1, in f32.
    Conv {
        /// Input channels.
        c: usize,
        /// Output channels.
        m: usize,
        /// Height and width of the input.
        hw: usize,
        /// Kernel height and width.
        k: usize,
        /// Stride.
        stride: usize,
        /// Groups (`c` for a depthwise convolution).
        groups: usize,
    },
    /// An ONNX model file; its inputs are `test_data_set_0/input_<i>.pb`
    /// beside it when present, seeded random otherwise.
    Onnx(PathBuf),
    /// A real exported model (`scripts/real_models.py`): a folder with
    /// `model.onnx` and `test_data_set_0/` holding its inputs and
    /// onnxruntime's outputs. The inputs' shapes come from the data; an
    /// integer scalar input (a sample rate an `If` tests, a flag), and any
    /// other input the compiler needs when compiling, is bound to its test
    /// value, as a deployment fixes it; the outputs are checked against
    /// onnxruntime's as well as the interpreter's.
    Real(PathBuf),
}

/// One workload of the suite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Its name in tables, filters and JSON (`gemm_64x64x64`, `mlp_small`).
    pub name: String,
    /// Where its graph comes from.
    pub source: Source,
}

/// A workload's graph, ready to compile, and its inputs.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The graph (imported, constant-folded, verified).
    pub graph: Graph,
    /// One tensor per graph input.
    pub inputs: Vec<Tensor>,
    /// Outputs to check against besides the interpreter's (onnxruntime's,
    /// for a real model).
    pub expected: Option<Vec<Tensor>>,
    /// Inputs bound to their test values when compiling.
    pub bound: Vec<String>,
}

impl Loaded {
    /// A synthetic graph with seeded random inputs.
    fn synthetic(graph: Graph) -> Loaded {
        let inputs = run::random_inputs(&graph, 1);
        Loaded {
            graph,
            inputs,
            expected: None,
            bound: Vec::new(),
        }
    }
}

impl Workload {
    /// A synthetic GEMM `[m, k] · [k, n]`.
    pub fn gemm(m: usize, k: usize, n: usize) -> Workload {
        Workload {
            name: format!("gemm_{m}x{k}x{n}"),
            source: Source::Gemm { m, k, n },
        }
    }

    /// A synthetic convolution (see [`Source::Conv`]): `conv3x3_64x64_56`,
    /// or `dwconv3x3_64_56` for a depthwise one, `_s2` at stride 2.
    pub fn conv(c: usize, m: usize, hw: usize, k: usize, stride: usize, groups: usize) -> Workload {
        let s = if stride == 1 {
            String::new()
        } else {
            format!("_s{stride}")
        };
        let name = if groups == c && m == c && groups > 1 {
            format!("dwconv{k}x{k}_{c}_{hw}{s}")
        } else {
            format!("conv{k}x{k}_{c}x{m}_{hw}{s}")
        };
        Workload {
            name,
            source: Source::Conv {
                c,
                m,
                hw,
                k,
                stride,
                groups,
            },
        }
    }

    /// An ONNX model; named after its folder when the file is `model.onnx`
    /// (the examples' layout), after the file otherwise.
    pub fn onnx(path: &Path) -> Workload {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let folder = path
            .parent()
            .and_then(Path::file_name)
            .map(|s| s.to_string_lossy().into_owned());
        let name = match folder {
            Some(f) if stem == "model" && !f.is_empty() => f,
            _ => stem,
        };
        Workload {
            name,
            source: Source::Onnx(path.to_path_buf()),
        }
    }

    /// Its multiply-accumulates, when known without compiling (synthetic workloads).
    pub fn macs(&self) -> Option<u64> {
        match &self.source {
            Source::Gemm { m, k, n } => Some((*m as u64) * (*k as u64) * (*n as u64)),
            Source::Conv {
                c,
                m,
                hw,
                k,
                stride,
                groups,
            } => {
                let o = (hw + 2 * (k / 2) - k) / stride + 1;
                Some((o * o * m * (c / groups.max(&1)) * k * k) as u64)
            }
            Source::Onnx(_) | Source::Real(_) => None,
        }
    }

    /// What it is, for `tessera bench --list`.
    pub fn describe(&self) -> String {
        match &self.source {
            Source::Gemm { m, k, n } => {
                format!("synthetic: MatMul [{m},{k}] x constant [{k},{n}], f32")
            }
            Source::Conv {
                c,
                m,
                hw,
                k,
                stride,
                groups,
            } => format!(
                "synthetic: Conv [1,{c},{hw},{hw}] by constant [{m},{},{k},{k}] + bias, stride {stride}, pads {}, {groups} group(s), f32",
                c / groups.max(&1),
                k / 2
            ),
            Source::Onnx(p) => p.display().to_string(),
            Source::Real(p) => format!("{} (against onnxruntime)", p.join("model.onnx").display()),
        }
    }

    /// Builds or imports the graph and its inputs.
    pub fn load(&self) -> Result<Loaded, String> {
        match &self.source {
            Source::Gemm { m, k, n } => Ok(Loaded::synthetic(gemm_graph(*m, *k, *n))),
            Source::Conv {
                c,
                m,
                hw,
                k,
                stride,
                groups,
            } => Ok(Loaded::synthetic(run::conv_graph(
                *c, *m, *hw, *k, *stride, *groups,
            ))),
            Source::Onnx(path) => load_onnx(path),
            Source::Real(dir) => load_real(dir),
        }
    }
}

pub use compiler::run::gemm_graph;

fn load_onnx(path: &Path) -> Result<Loaded, String> {
    let mut graph =
        compiler::onnx::import_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
    compiler::interp::fold_constants(&mut graph);
    compiler::ir::verify(&graph)
        .map_err(|e| format!("{}: IR verifier: {}", path.display(), e.join("; ")))?;
    let data = path
        .parent()
        .unwrap_or(Path::new("."))
        .join("test_data_set_0");
    let stored: Option<Vec<Tensor>> = graph
        .inputs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            compiler::onnx::read_tensor_file(data.join(format!("input_{i}.pb")))
                .ok()
                .map(|(_, t)| t)
                .filter(|t| t.ty.shape == graph.ty(*v).shape)
        })
        .collect();
    let inputs = stored.unwrap_or_else(|| run::random_inputs(&graph, 1));
    Ok(Loaded {
        graph,
        inputs,
        expected: None,
        bound: Vec::new(),
    })
}

/// The tensors `{kind}_0.pb`, `{kind}_1.pb`, ... of a test-data folder.
fn read_tensors(dir: &Path, kind: &str) -> Result<Vec<(String, Tensor)>, String> {
    let mut found = Vec::new();
    loop {
        let p = dir.join(format!("{kind}_{}.pb", found.len()));
        if !p.exists() {
            return Ok(found);
        }
        found.push(
            compiler::onnx::read_tensor_file(&p).map_err(|e| format!("{}: {e}", p.display()))?,
        );
    }
}

/// Loads a real model's case (see [`Source::Real`]).
fn load_real(dir: &Path) -> Result<Loaded, String> {
    let path = dir.join("model.onnx");
    let data = dir.join("test_data_set_0");
    let given = read_tensors(&data, "input")?;
    let mut options = compiler::onnx::ImportOptions {
        shapes: (given.iter())
            .map(|(n, t)| (n.clone(), t.ty.shape.clone()))
            .collect(),
        ..Default::default()
    };
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // The integer scalars among the inputs (a sample rate, a flag) are
    // what a deployment fixes: bound, an `If` on them is one branch.
    // Left at run time, Silero VAD's `If` on its sample rate computed both
    // branches (twice the cycles), or did not import where the other
    // branch does not take this input's length.
    let mut bound = Vec::new();
    for (n, t) in &given {
        if t.ty.numel() == 1 && !t.ty.elem.is_float() {
            options.shapes.remove(n);
            options.constants.insert(n.clone(), t.clone());
            bound.push(n.clone());
        }
    }
    let mut graph = loop {
        match compiler::onnx::import_with(&bytes, &options) {
            Ok(g) => break g,
            Err(
                compiler::onnx::ImportError::NotConstant { value, .. }
                | compiler::onnx::ImportError::NotStatic { value, .. },
            ) if !bound.contains(&value) && given.iter().any(|(n, _)| *n == value) => {
                let (_, t) = (given.iter().find(|(n, _)| *n == value))
                    .ok_or_else(|| format!("no test value for `{value}`"))?;
                options.shapes.remove(&value);
                options.constants.insert(value.clone(), t.clone());
                bound.push(value);
            }
            Err(e) => return Err(format!("import: {e}")),
        }
    };
    compiler::interp::fold_constants(&mut graph);
    compiler::ir::verify(&graph).map_err(|e| format!("IR verifier: {}", e.join("; ")))?;
    let inputs = (graph.inputs.iter())
        .map(|v| {
            let name = &graph.values[v.index()].name;
            (given.iter().find(|(n, _)| n == name))
                .map(|(_, t)| t.clone())
                .ok_or_else(|| format!("no test value for input `{name}`"))
        })
        .collect::<Result<_, _>>()?;
    let expected: Vec<Tensor> = read_tensors(&data, "output")?
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    let expected = (expected.len() == graph.outputs.len()).then_some(expected);
    Ok(Loaded {
        graph,
        inputs,
        expected,
        bound,
    })
}

/// The real-model cases of a folder `scripts/real_models.py` wrote: every
/// `*/model.onnx` with a `test_data_set_0/` beside it, sorted by name.
pub fn real_models(dir: &Path) -> Vec<Workload> {
    example_models(dir)
        .into_iter()
        .filter_map(|p| {
            let case = p.parent()?.to_path_buf();
            let name = case.file_name()?.to_string_lossy().into_owned();
            let has_data = case.join("test_data_set_0").is_dir();
            has_data.then_some(Workload {
                name,
                source: Source::Real(case),
            })
        })
        .collect()
}

/// The examples folder: `examples/` in `start` or the nearest of its
/// ancestors that has one holding a `*/model.onnx`.
pub fn find_examples(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|d| d.join("examples"))
        .find(|d| !example_models(d).is_empty())
}

/// The `*/model.onnx` files of an examples folder, sorted.
pub fn example_models(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path().join("model.onnx"))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// The workloads of a set: the examples in `examples` (when given; the
/// small set leaves out the slow ones), the synthetic GEMMs of the size,
/// then the `models` given explicitly.
pub fn workloads(size: Size, examples: Option<&Path>, models: &[PathBuf]) -> Vec<Workload> {
    let mut v: Vec<Workload> = examples
        .map(example_models)
        .unwrap_or_default()
        .iter()
        .map(|p| Workload::onnx(p))
        .filter(|w| size == Size::Full || !FULL_ONLY_EXAMPLES.contains(&w.name.as_str()))
        .collect();
    let gemms = match size {
        Size::Small => SMALL_GEMMS,
        Size::Full => FULL_GEMMS,
    };
    v.extend(gemms.iter().map(|&(m, k, n)| Workload::gemm(m, k, n)));
    let convs = match size {
        Size::Small => SMALL_CONVS,
        Size::Full => FULL_CONVS,
    };
    v.extend(
        convs
            .iter()
            .map(|&(c, m, hw, k, s, groups)| Workload::conv(c, m, hw, k, s, groups)),
    );
    v.extend(models.iter().map(|p| Workload::onnx(p)));
    v
}

/// The outcome of one workload on one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Compiled, simulated, and every output within tolerance of the interpreter.
    Ok,
    /// An output differs from the interpreter, or the simulation faulted.
    Mismatch,
    /// The target cannot compile the workload (what it lacks is in `error`).
    Refused,
    /// Not run: too large for the budget (see [`Settings::max_bound_cycles`]).
    Skipped,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::Mismatch => "mismatch",
            Status::Refused => "refused",
            Status::Skipped => "skipped",
        })
    }
}

/// One workload on one target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairResult {
    /// The workload's name.
    pub workload: String,
    /// The target's name.
    pub target: String,
    /// What happened.
    pub status: Status,
    /// Simulated cycles.
    pub cycles: Option<u64>,
    /// The roofline bound: the larger of compute and home-memory cycles.
    pub roofline_cycles: Option<u64>,
    /// `roofline_cycles / cycles`.
    pub efficiency: Option<f64>,
    /// Wall-clock time of `lower::compile_with` (import and folding excluded), ms.
    pub compile_ms: Option<f64>,
    /// Wall-clock time of the functional simulation alone, ms.
    pub sim_ms: Option<f64>,
    /// Instructions issued.
    pub instructions: Option<u64>,
    /// Bundles issued.
    pub bundles: Option<u64>,
    /// Why the pair is refused, mismatched or skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Per optimisation of [`lower::OPTIONS`] (with `--ablate`): cycles with it
    /// off over cycles with it on; `null` when the run with it off did not
    /// complete (see `notes`).
    #[serde(default)]
    pub ablation: BTreeMap<String, Option<f64>>,
    /// With `--tune`: cycles with the compiler's own mappings over cycles
    /// with the tuned ones (1 or more; the tuned program is checked too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuned: Option<f64>,
    /// Anything else worth knowing (an ablated run that was refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl PairResult {
    fn empty(workload: &str, target: &str, status: Status) -> PairResult {
        PairResult {
            workload: workload.to_owned(),
            target: target.to_owned(),
            status,
            cycles: None,
            roofline_cycles: None,
            efficiency: None,
            compile_ms: None,
            sim_ms: None,
            instructions: None,
            bundles: None,
            error: None,
            ablation: BTreeMap::new(),
            tuned: None,
            notes: Vec::new(),
        }
    }
}

/// Everything one `tessera bench` run measured (its JSON form).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// [`JSON_VERSION`].
    pub version: u32,
    /// The set run.
    pub size: Size,
    /// The lowering options of the runs (ablation aside).
    #[serde(default)]
    pub options: serde_json::Value,
    /// [`Settings::max_bound_cycles`] of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bound_cycles: Option<u64>,
    /// One per workload × target, in run order.
    pub results: Vec<PairResult>,
}

impl BenchReport {
    /// Whether any pair's outputs differ from the interpreter.
    pub fn any_mismatch(&self) -> bool {
        self.results.iter().any(|r| r.status == Status::Mismatch)
    }

    /// Reads a report written by `tessera bench --json`.
    pub fn from_json(text: &str) -> Result<BenchReport, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let version = value.get("version").and_then(serde_json::Value::as_u64);
        if version != Some(u64::from(JSON_VERSION)) {
            return Err(format!(
                "version {} of the bench JSON layout; this tessera reads version {JSON_VERSION}",
                version.map_or_else(|| "(none)".to_owned(), |v| v.to_string())
            ));
        }
        serde_json::from_value(value).map_err(|e| e.to_string())
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Runs one workload on one target with the options `opts`; with `ablate`,
/// again with each optimisation of [`lower::OPTIONS`] that `opts` has on turned off.
///
/// Compile time is `lower::compile_with` timed alone; simulator time is the
/// functional simulation of that program timed alone; cycles, counts and the
/// check come from [`run::run_with`] (which compiles and simulates again).
/// An ablated run whose program is the same as with every optimisation on
/// is not simulated: its ratio is exactly 1.
pub fn run_pair(
    t: &targets::Target,
    name: &str,
    w: &Loaded,
    opts: Options,
    ablate: bool,
    tune: Option<crate::tune::Budget>,
) -> PairResult {
    let m = t.machine();
    let mut r = PairResult::empty(name, t.name(), Status::Ok);
    let start = Instant::now();
    let compiled = lower::compile_with(t, m, &w.graph, opts);
    r.compile_ms = Some(ms(start));
    let compiled = match compiled {
        Ok(c) => c,
        Err(e) => {
            r.status = Status::Refused;
            r.error = Some(e.to_string());
            return r;
        }
    };
    let bytes: Vec<(String, Vec<u8>)> = compiled
        .program
        .inputs
        .iter()
        .zip(&w.inputs)
        .map(|(d, x)| (d.name.clone(), run::tensor_bytes(d, x)))
        .collect();
    let start = Instant::now();
    let alone = t
        .simulate(
            m,
            &compiled.program,
            &bytes,
            &targets::sim::Config::default(),
        )
        .map(|o| o.report.cycles);
    r.sim_ms = Some(ms(start));
    drop(bytes);
    // Only the program is needed further on (to see whether ablation changes it).
    let program = {
        let c = compiled;
        c.program
    };
    if !w.bound.is_empty() {
        r.notes
            .push(format!("bound when compiling: {}", w.bound.join(", ")));
    }
    let run = match run::run_with(t, m, &w.graph, &w.inputs, w.expected.as_deref(), opts) {
        Ok(run) => run,
        Err(RunError::Lower(e)) => {
            r.status = Status::Refused;
            r.error = Some(e.to_string());
            return r;
        }
        Err(e) => {
            add_error(&mut r, e.to_string());
            return r;
        }
    };
    let cycles = run.report.cycles;
    let roofline = run.compiled.roofline(m).cycles;
    r.cycles = Some(cycles);
    r.roofline_cycles = Some(roofline);
    r.efficiency = Some(if cycles > 0 {
        roofline as f64 / cycles as f64
    } else {
        0.0
    });
    r.instructions = Some(run.report.instructions);
    r.bundles = Some(run.report.bundles);
    match alone {
        Ok(alone) if alone != cycles => r.notes.push(format!(
            "the timed simulation took {alone} cycles, the checked run {cycles}"
        )),
        Ok(_) => {}
        Err(e) => r.notes.push(format!("the timed simulation faulted: {e}")),
    }
    let bad: Vec<String> = run
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(describe_check)
        .collect();
    if !bad.is_empty() {
        add_error(&mut r, bad.join("; "));
    }
    drop(run);
    if let Some(budget) = tune {
        let tuned = crate::tune::tune(t, m, &w.graph, opts, budget)
            .map_err(|e| e.to_string())
            .and_then(|(c, report)| {
                run::run_compiled(t, m, &w.graph, c, &w.inputs, None)
                    .map(|run| (report, run))
                    .map_err(|e| e.to_string())
            });
        match tuned {
            Ok((report, run)) if run.checks.iter().all(|c| c.ok) => {
                r.tuned = Some(cycles as f64 / run.report.cycles.max(1) as f64);
                if report.default_cycles != cycles {
                    r.notes.push(format!(
                        "tuning measured {} cycles for the default, the checked run {cycles}",
                        report.default_cycles
                    ));
                }
            }
            Ok((_, run)) => {
                let bad: Vec<String> = run
                    .checks
                    .iter()
                    .filter(|c| !c.ok)
                    .map(describe_check)
                    .collect();
                add_error(&mut r, format!("tuned: {}", bad.join("; ")));
            }
            Err(e) => r.notes.push(format!("tuning failed: {e}")),
        }
    }
    if ablate {
        for info in lower::OPTIONS {
            let switch = info.name;
            let o = opts.without(info.opt);
            if o == opts {
                continue;
            }
            let ratio = ablated(t, w, o, &program, cycles)
                .map_err(|(mismatch, e)| {
                    let e = format!("with {switch} off: {e}");
                    if mismatch {
                        add_error(&mut r, e);
                    } else {
                        r.notes.push(e);
                    }
                })
                .ok();
            r.ablation.insert((*switch).to_owned(), ratio);
        }
    }
    r
}

/// Cycles with the options `o` over `cycles`: exactly 1 without running when
/// `o` compiles to the same program as `base`. The error says whether the
/// outputs are wrong (`true`: a mismatch) or the options are refused.
fn ablated(
    t: &targets::Target,
    w: &Loaded,
    o: Options,
    base: &isa_specs::program::Program,
    cycles: u64,
) -> Result<f64, (bool, String)> {
    let m = t.machine();
    let c = lower::compile_with(t, m, &w.graph, o)
        .map_err(|e| (false, format!("cannot compile: {e}")))?;
    if c.program == *base {
        return Ok(1.0);
    }
    drop(c);
    let a = run::run_with(t, m, &w.graph, &w.inputs, None, o).map_err(|e| match e {
        RunError::Lower(e) => (false, format!("cannot compile: {e}")),
        e => (true, e.to_string()),
    })?;
    let bad: Vec<String> = a
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(describe_check)
        .collect();
    if !bad.is_empty() {
        return Err((true, bad.join("; ")));
    }
    Ok(a.report.cycles as f64 / cycles.max(1) as f64)
}

/// Marks `r` mismatched with the reason `e` (after any earlier one).
fn add_error(r: &mut PairResult, e: String) {
    r.status = Status::Mismatch;
    r.error = Some(match r.error.take() {
        Some(x) => format!("{x}; {e}"),
        None => e,
    });
}

fn describe_check(c: &run::OutputCheck) -> String {
    match &c.problem {
        Some(p) => format!("output `{}`: {p}", c.name),
        None => format!(
            "output `{}` differs from the interpreter by {:.3e} (relative {:.3e})",
            c.name, c.max_abs_err, c.max_rel_err
        ),
    }
}

/// The default of [`Settings::max_bound_cycles`]: 2²⁰ cycles. Past it, a
/// machine with few MACs per cycle and fine-grained instructions needs
/// millions of instructions (gigabytes, minutes) for one GEMM.
pub const DEFAULT_MAX_BOUND_CYCLES: u64 = 1 << 20;

/// How the suite runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// The set (recorded in the report).
    pub size: Size,
    /// The lowering options.
    pub options: Options,
    /// Also run with each optimisation of [`lower::OPTIONS`] off.
    pub ablate: bool,
    /// Also tune each pair's mappings ([`crate::tune`]) within this budget.
    pub tune: Option<crate::tune::Budget>,
    /// A synthetic workload whose compute bound on a target (its MACs over
    /// the machine's peak MACs per cycle) exceeds this many cycles is
    /// [`Status::Skipped`] there instead of run.
    pub max_bound_cycles: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            size: Size::Small,
            options: Options::default(),
            ablate: false,
            tune: None,
            max_bound_cycles: DEFAULT_MAX_BOUND_CYCLES,
        }
    }
}

/// Why `w` is not run on `t` under `max_bound_cycles`, if it is not.
pub fn skip_reason(w: &Workload, t: &targets::Target, max_bound_cycles: u64) -> Option<String> {
    let macs = w.macs()?;
    let bound = lower::Roofline::of(t.machine(), macs, 0, 0).compute_cycles;
    (bound > max_bound_cycles).then(|| {
        format!(
            "its compute bound, {bound} cycles, exceeds the budget of {max_bound_cycles} \
             (--max-bound-cycles)"
        )
    })
}

/// Runs every workload on every target, in order, calling `progress` with
/// each pair's `(index, total, workload, target)` before running it.
/// A workload that cannot be loaded is an error.
pub fn run_suite(
    workloads: &[Workload],
    targets: &[&'static targets::Target],
    settings: &Settings,
    mut progress: impl FnMut(usize, usize, &str, &str),
) -> Result<BenchReport, String> {
    let total = workloads.len() * targets.len();
    let mut results = Vec::with_capacity(total);
    for w in workloads {
        let mut loaded = None;
        for t in targets {
            progress(results.len(), total, &w.name, t.name());
            if let Some(why) = skip_reason(w, t, settings.max_bound_cycles) {
                let mut r = PairResult::empty(&w.name, t.name(), Status::Skipped);
                r.error = Some(why);
                results.push(r);
                continue;
            }
            if loaded.is_none() {
                loaded = Some(match (w.load(), &w.source) {
                    (Ok(l), _) => Ok(l),
                    // A real model the importer refuses is a result, on every target.
                    (Err(e), Source::Real(_)) => Err(e),
                    (Err(e), _) => return Err(e),
                });
            }
            let l = match &loaded {
                Some(Ok(l)) => l,
                Some(Err(e)) => {
                    let mut r = PairResult::empty(&w.name, t.name(), Status::Refused);
                    r.error = Some(e.clone());
                    results.push(r);
                    continue;
                }
                None => continue,
            };
            results.push(run_pair(
                t,
                &w.name,
                l,
                settings.options,
                settings.ablate,
                settings.tune,
            ));
        }
    }
    Ok(BenchReport {
        version: JSON_VERSION,
        size: settings.size,
        options: serde_json::to_value(settings.options).unwrap_or_default(),
        max_bound_cycles: Some(settings.max_bound_cycles),
        results,
    })
}

/// Text aligned in columns: `right[i]` right-aligns column `i` (numbers).
pub fn columns(header: &[&str], rows: &[Vec<String>], right: &[bool]) -> String {
    let n = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(n) {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate().take(n) {
            let pad = width[i] - cell.chars().count();
            if i > 0 {
                line.push_str("  ");
            }
            if right.get(i).copied().unwrap_or(false) {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn opt<T: std::fmt::Display>(x: Option<T>) -> String {
    x.map_or_else(|| "-".to_owned(), |x| x.to_string())
}

fn opt_ms(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), format_ms)
}

/// Milliseconds with three significant digits or so.
pub fn format_ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The human table of a report: a row per pair, then every error and note.
pub fn human(report: &BenchReport) -> String {
    let switches: Vec<&str> = lower::OPTIONS
        .iter()
        .map(|i| i.name)
        .filter(|n| report.results.iter().any(|r| r.ablation.contains_key(*n)))
        .collect();
    let mut header = vec![
        "workload",
        "target",
        "status",
        "cycles",
        "roofline",
        "eff",
        "compile ms",
        "sim ms",
        "insts",
        "bundles",
    ];
    let ablation_headers: Vec<String> = switches.iter().map(|s| format!("no {s}")).collect();
    header.extend(ablation_headers.iter().map(String::as_str));
    let tuned = report.results.iter().any(|r| r.tuned.is_some());
    if tuned {
        header.push("tuned");
    }
    let mut right = vec![false, false, false];
    right.resize(header.len(), true);
    let rows: Vec<Vec<String>> = report
        .results
        .iter()
        .map(|r| {
            let mut row = vec![
                r.workload.clone(),
                r.target.clone(),
                r.status.to_string(),
                opt(r.cycles),
                opt(r.roofline_cycles),
                r.efficiency
                    .map_or_else(|| "-".to_owned(), |e| format!("{:.1}%", e * 100.0)),
                opt_ms(r.compile_ms),
                opt_ms(r.sim_ms),
                opt(r.instructions),
                opt(r.bundles),
            ];
            for s in &switches {
                row.push(match r.ablation.get(*s) {
                    Some(Some(x)) => format!("{x:.3}x"),
                    Some(None) => "failed".to_owned(),
                    None => "-".to_owned(),
                });
            }
            if tuned {
                row.push(
                    r.tuned
                        .map_or_else(|| "-".to_owned(), |x| format!("{x:.3}x")),
                );
            }
            row
        })
        .collect();
    let mut out = columns(&header, &rows, &right);
    for r in &report.results {
        if let Some(e) = &r.error {
            let _ = writeln!(out, "{} on {}: {}: {e}", r.workload, r.target, r.status);
        }
        for n in &r.notes {
            let _ = writeln!(out, "{} on {}: note: {n}", r.workload, r.target);
        }
    }
    out
}

/// One pair present in both reports of a [`compare`].
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The workload.
    pub workload: String,
    /// The target.
    pub target: String,
    /// Status in the old report.
    pub old_status: Status,
    /// Status in the new report.
    pub new_status: Status,
    /// Cycles in the old report.
    pub old_cycles: Option<u64>,
    /// Cycles in the new report.
    pub new_cycles: Option<u64>,
    /// New cycles over old, when both ran.
    pub cycles_ratio: Option<f64>,
    /// New compile time over old, when both have one.
    pub compile_ratio: Option<f64>,
    /// Why this pair regressed: more cycles than [`REGRESSION_THRESHOLD`]
    /// allows, or a status that was `ok` and is now `mismatch` or `refused`
    /// (a pair skipped by a smaller budget is not compared).
    pub regression: Option<String>,
}

/// Two reports side by side.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Comparison {
    /// Pairs in both, in the new report's order.
    pub changes: Vec<Change>,
    /// Pairs only the old report has.
    pub only_old: Vec<(String, String)>,
    /// Pairs only the new report has.
    pub only_new: Vec<(String, String)>,
}

impl Comparison {
    /// Whether any pair regressed in cycles or left `ok`.
    pub fn regressed(&self) -> bool {
        self.changes.iter().any(|c| c.regression.is_some())
    }
}

/// Compares `new` with `old` pair by pair (timings are reported, never a regression).
pub fn compare(old: &BenchReport, new: &BenchReport) -> Comparison {
    let key = |r: &PairResult| (r.workload.clone(), r.target.clone());
    let olds: BTreeMap<(String, String), &PairResult> =
        old.results.iter().map(|r| (key(r), r)).collect();
    let news: BTreeMap<(String, String), &PairResult> =
        new.results.iter().map(|r| (key(r), r)).collect();
    let mut out = Comparison::default();
    for n in &new.results {
        let Some(o) = olds.get(&key(n)) else {
            out.only_new.push(key(n));
            continue;
        };
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        };
        let cycles_ratio = if o.status == Status::Ok && n.status == Status::Ok {
            ratio(o.cycles.map(|x| x as f64), n.cycles.map(|x| x as f64))
        } else {
            None
        };
        let compiled = |s: Status| matches!(s, Status::Ok | Status::Mismatch);
        let compile_ratio = if compiled(o.status) && compiled(n.status) {
            ratio(o.compile_ms, n.compile_ms)
        } else {
            None
        };
        let regression =
            if o.status == Status::Ok && matches!(n.status, Status::Mismatch | Status::Refused) {
                Some(format!("was ok, now {}", n.status))
            } else {
                cycles_ratio
                    .filter(|r| *r > 1.0 + REGRESSION_THRESHOLD)
                    .map(|r| format!("{:+.1}% cycles", (r - 1.0) * 100.0))
            };
        out.changes.push(Change {
            workload: n.workload.clone(),
            target: n.target.clone(),
            old_status: o.status,
            new_status: n.status,
            old_cycles: o.cycles,
            new_cycles: n.cycles,
            cycles_ratio,
            compile_ratio,
            regression,
        });
    }
    out.only_old = old
        .results
        .iter()
        .map(key)
        .filter(|k| !news.contains_key(k))
        .collect();
    out
}

/// The human table of a comparison, with a summary line.
pub fn human_comparison(c: &Comparison) -> String {
    let header = [
        "workload",
        "target",
        "status",
        "old cycles",
        "new cycles",
        "cycles",
        "compile",
        "",
    ];
    let rows: Vec<Vec<String>> = c
        .changes
        .iter()
        .map(|x| {
            let status = if x.old_status == x.new_status {
                x.new_status.to_string()
            } else {
                format!("{} -> {}", x.old_status, x.new_status)
            };
            let ratio = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{r:.3}x"));
            vec![
                x.workload.clone(),
                x.target.clone(),
                status,
                opt(x.old_cycles),
                opt(x.new_cycles),
                ratio(x.cycles_ratio),
                ratio(x.compile_ratio),
                x.regression
                    .as_ref()
                    .map_or_else(String::new, |r| format!("REGRESSION: {r}")),
            ]
        })
        .collect();
    let right = [false, false, false, true, true, true, true, false];
    let mut out = columns(&header, &rows, &right);
    for (w, t) in &c.only_old {
        let _ = writeln!(out, "{w} on {t}: only in the old results");
    }
    for (w, t) in &c.only_new {
        let _ = writeln!(out, "{w} on {t}: only in the new results");
    }
    let regressions = c.changes.iter().filter(|x| x.regression.is_some()).count();
    let _ = writeln!(
        out,
        "{} pair(s) compared (ratios are new / old): {regressions} regression(s)",
        c.changes.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(w: &str, t: &str, status: Status, cycles: u64) -> PairResult {
        PairResult {
            cycles: Some(cycles),
            compile_ms: Some(1.0),
            ..PairResult::empty(w, t, status)
        }
    }

    fn report(results: Vec<PairResult>) -> BenchReport {
        BenchReport {
            version: JSON_VERSION,
            size: Size::Small,
            options: serde_json::Value::Null,
            max_bound_cycles: None,
            results,
        }
    }

    #[test]
    fn more_cycles_than_the_threshold_or_leaving_ok_regresses() {
        let old = report(vec![
            pair("a", "x", Status::Ok, 1000),
            pair("b", "x", Status::Ok, 1000),
            pair("c", "x", Status::Ok, 1000),
            pair("d", "x", Status::Refused, 0),
            pair("e", "x", Status::Ok, 1000),
            pair("gone", "x", Status::Ok, 1),
        ]);
        let new = report(vec![
            pair("a", "x", Status::Ok, 1010),
            pair("b", "x", Status::Ok, 1011),
            pair("c", "x", Status::Refused, 0),
            pair("d", "x", Status::Ok, 5),
            pair("e", "x", Status::Skipped, 0),
            pair("added", "x", Status::Ok, 1),
        ]);
        let c = compare(&old, &new);
        let regressed: Vec<&str> = c
            .changes
            .iter()
            .filter(|x| x.regression.is_some())
            .map(|x| x.workload.as_str())
            .collect();
        assert_eq!(regressed, ["b", "c"]);
        assert!(c.regressed());
        assert_eq!(c.only_old, [("gone".to_owned(), "x".to_owned())]);
        assert_eq!(c.only_new, [("added".to_owned(), "x".to_owned())]);
        assert!(!compare(&old, &old).regressed());
    }

    #[test]
    fn the_json_round_trips_and_the_version_is_checked() {
        let r = report(vec![pair("a", "x", Status::Ok, 10)]);
        let text = serde_json::to_string(&r).expect("serialises");
        assert_eq!(BenchReport::from_json(&text), Ok(r));
        let err = BenchReport::from_json(r#"{"version": 2, "size": "small", "results": []}"#)
            .expect_err("version 2 refused");
        assert!(err.contains("version 2"), "{err}");
    }

    #[test]
    fn gemm_names_and_examples_are_found() {
        assert_eq!(Workload::gemm(64, 64, 64).name, "gemm_64x64x64");
        assert_eq!(
            Workload::onnx(Path::new("examples/mlp_small/model.onnx")).name,
            "mlp_small"
        );
        assert_eq!(Workload::onnx(Path::new("/tmp/gpt2.onnx")).name, "gpt2");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let found = find_examples(here).expect("the bundled examples");
        assert!(found.join("mlp_small/model.onnx").is_file());
        let g = gemm_graph(4, 8, 2);
        assert!(compiler::ir::verify(&g).is_ok());
        assert_eq!(g.ty(g.outputs[0]).shape, [4, 2]);
    }

    #[test]
    fn synthetic_workloads_past_the_budget_are_skipped() {
        let t = &targets::all()[0];
        let w = Workload::gemm(64, 64, 64);
        assert_eq!(w.macs(), Some(64 * 64 * 64));
        assert!(skip_reason(&w, t, u64::MAX).is_none());
        let why = skip_reason(&w, t, 0).expect("over a budget of 0");
        assert!(why.contains("compute bound"), "{why}");
        let onnx = Workload::onnx(Path::new("examples/mlp_small/model.onnx"));
        assert!(
            skip_reason(&onnx, t, 0).is_none(),
            "models are never skipped"
        );
    }
}
