//! Compile, simulate, compare: what `tessera run` and the end-to-end tests do.
//!
//! Outputs of the simulated program are compared with the reference
//! interpreter ([`crate::interp`]) under a tolerance set by the narrowest
//! floating-point type the program computes in (see [`Tolerance::for_dtype`]).

use crate::interp;
use crate::ir::{ElemType, Graph, Op, Tensor, TensorType};
use crate::lower::{self, Compiled, LowerError};
use isa_specs::Machine;
use isa_specs::model::{DType, OperandKind};
use isa_specs::program::TensorDesc;
use serde::Serialize;

/// How close a result must be: `|got - want| <= abs + rel * max|want|` (the
/// largest magnitude of the whole expected tensor, so that cancellation in
/// one element does not demand a precision no element had).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tolerance {
    /// Absolute part.
    pub abs: f64,
    /// Relative part (of the tensor's largest magnitude).
    pub rel: f64,
}

impl Tolerance {
    /// The tolerance for a program computing in `dt`: a few units in the last
    /// place of `dt`, times the growth of rounding error over reductions.
    pub fn for_dtype(dt: DType) -> Tolerance {
        match dt {
            DType::F32 => Tolerance {
                abs: 1e-5,
                rel: 1e-4,
            },
            DType::F16 => Tolerance {
                abs: 1e-3,
                rel: 1e-2,
            },
            DType::Bf16 => Tolerance {
                abs: 1e-2,
                rel: 4e-2,
            },
            _ => Tolerance {
                abs: 0.0,
                rel: 0.15,
            },
        }
    }
}

/// The narrowest floating-point type any operand of the program's instructions has.
pub fn compute_dtype(m: &Machine, c: &Compiled) -> DType {
    let mut best = DType::F32;
    let mut seen = std::collections::HashSet::new();
    for mi in &c.insts {
        if !seen.insert(mi.inst) {
            continue;
        }
        for o in &m.instructions[mi.inst.index()].operands {
            let dt = match &o.kind {
                OperandKind::Reg { file, .. } => m.regfiles[file.index()].dtype,
                OperandKind::Mem { dtype, .. } => *dtype,
                _ => continue,
            };
            if dt.is_float() && dt.bytes() < best.bytes() {
                best = dt;
            }
        }
    }
    best
}

/// One output compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutputCheck {
    /// The output's name.
    pub name: String,
    /// Largest absolute difference from the reference.
    pub max_abs_err: f64,
    /// Largest difference relative to the reference's largest magnitude.
    pub max_rel_err: f64,
    /// Within tolerance of the reference interpreter, and of the expected
    /// output when one was given.
    pub ok: bool,
    /// Largest absolute difference from the expected file, if one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_max_abs_err: Option<f64>,
    /// Why a comparison could not be made (the expected output has another shape).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Everything one run produced.
#[derive(Debug)]
pub struct RunResult {
    /// The compiled program and its stages.
    pub compiled: Compiled,
    /// The simulator's report.
    pub report: targets::sim::Report,
    /// Outputs read back from the simulated memory.
    pub outputs: Vec<Tensor>,
    /// Per output, the comparison.
    pub checks: Vec<OutputCheck>,
    /// The tolerance applied.
    pub tolerance: Tolerance,
    /// The narrowest type computed in.
    pub compute_dtype: DType,
    /// Per fused region: its bound, its simulated cycles, its efficiency.
    pub regions: Vec<RegionRun>,
}

/// One fused region's roofline bound beside the cycles its code took.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RegionRun {
    /// What it computes (as `Compiled::regions` names it).
    pub region: String,
    /// Instructions selected for it.
    pub instructions: usize,
    /// Multiply-accumulates.
    pub macs: u64,
    /// Bytes it must move across the home memory at least.
    pub home_bytes: u64,
    /// Bytes of constants it reads where they lie at home (not in `home_bytes`).
    pub in_place_bytes: u64,
    /// Its roofline bound alone.
    pub roofline_cycles: u64,
    /// Its share of the program: cycles from its first bundle's issue to
    /// the next region's (the regions' shares add up to the program).
    pub cycles: u64,
    /// Cycles from its first instruction's issue to its last one's
    /// completion (regions overlap where the scheduler moved instructions
    /// across them, so spans add up to more than the program).
    pub span_cycles: u64,
    /// `roofline_cycles / span_cycles`: its bound against the time it took.
    pub efficiency: f64,
}

/// Every region's bound and cycles, from a simulation that recorded when
/// each bundle issued ([`targets::sim::Config::record_issue`]).
pub fn regions(compiled: &Compiled, m: &Machine, report: &targets::sim::Report) -> Vec<RegionRun> {
    compiled
        .regions
        .iter()
        .zip(&compiled.region_stats)
        .map(|((name, n), s)| {
            let bound = s.roofline(m).cycles;
            let span = s.span_cycles(&report.issue_cycles, report.cycles);
            RegionRun {
                region: name.clone(),
                instructions: *n,
                macs: s.macs,
                home_bytes: s.home_bytes,
                in_place_bytes: s.in_place_bytes,
                roofline_cycles: bound,
                cycles: s.cycles(&report.issue_cycles, report.cycles),
                span_cycles: span,
                efficiency: if span == 0 {
                    0.0
                } else {
                    bound as f64 / span as f64
                },
            }
        })
        .collect()
}

/// A timing-only simulation of a compiled program (no data, much faster),
/// recording when each bundle issued: its report gives the cycles of the
/// whole program and, through [`regions`], of each region.
pub fn timing(
    t: &targets::Target,
    m: &Machine,
    compiled: &Compiled,
) -> Result<targets::sim::Report, targets::sim::SimError> {
    let cfg = targets::sim::Config {
        functional: false,
        record_issue: true,
        ..targets::sim::Config::default()
    };
    t.simulate(m, &compiled.program, &[], &cfg)
        .map(|o| o.report)
}

/// Why a run failed before any comparison.
#[derive(Debug)]
pub enum RunError {
    /// The model does not compile for the machine.
    Lower(LowerError),
    /// The reference interpreter failed.
    Interp(interp::InterpError),
    /// The simulator faulted.
    Sim(targets::sim::SimError),
    /// Inputs do not match the model.
    Inputs(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Lower(e) => write!(f, "cannot compile: {e}"),
            RunError::Interp(e) => write!(f, "reference interpreter: {e}"),
            RunError::Sim(e) => write!(f, "simulation faulted: {e}"),
            RunError::Inputs(e) => write!(f, "inputs: {e}"),
        }
    }
}

impl std::error::Error for RunError {}

/// Bytes of a tensor in a program's element type.
pub fn tensor_bytes(d: &TensorDesc, t: &Tensor) -> Vec<u8> {
    lower::encode(d.dtype, t.data.iter().copied())
}

/// Seeded inputs in [-1, 1) for a graph.
pub fn random_inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    g.inputs
        .iter()
        .map(|v| {
            let ty = g.ty(*v).clone();
            let mut s = seed ^ 0x9E37_79B9_7F4A_7C15 ^ (v.index() as u64).wrapping_mul(0x1000_0001);
            let data = (0..ty.numel())
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    let unit = (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                    ty.elem.round(unit)
                })
                .collect();
            Tensor::new(ty, data)
        })
        .collect()
}

/// Compiles `g` for `m`, simulates it on `inputs`, and compares every output
/// with the reference interpreter (and with `expected`, when given).
pub fn run(
    t: &targets::Target,
    m: &Machine,
    g: &Graph,
    inputs: &[Tensor],
    expected: Option<&[Tensor]>,
) -> Result<RunResult, RunError> {
    run_with(t, m, g, inputs, expected, lower::Options::default())
}

/// [`run`] with the lowering options `opts`.
pub fn run_with(
    t: &targets::Target,
    m: &Machine,
    g: &Graph,
    inputs: &[Tensor],
    expected: Option<&[Tensor]>,
    opts: lower::Options,
) -> Result<RunResult, RunError> {
    check_inputs(g, inputs)?;
    let compiled = lower::compile_with(t, m, g, opts).map_err(RunError::Lower)?;
    run_compiled(t, m, g, compiled, inputs, expected)
}

/// [`run`] of a program already compiled from `g` (with chosen mappings, or tuned).
pub fn run_compiled(
    t: &targets::Target,
    m: &Machine,
    g: &Graph,
    compiled: lower::Compiled,
    inputs: &[Tensor],
    expected: Option<&[Tensor]>,
) -> Result<RunResult, RunError> {
    check_inputs(g, inputs)?;
    let reference = interp::run(g, inputs).map_err(RunError::Interp)?;
    let bytes: Vec<(String, Vec<u8>)> = compiled
        .program
        .inputs
        .iter()
        .zip(inputs)
        .map(|(d, x)| (d.name.clone(), tensor_bytes(d, x)))
        .collect();
    let cfg = targets::sim::Config {
        record_issue: true,
        ..targets::sim::Config::default()
    };
    let mut outcome = t
        .simulate(m, &compiled.program, &bytes, &cfg)
        .map_err(RunError::Sim)?;
    let dt = compute_dtype(m, &compiled);
    let tol = Tolerance::for_dtype(dt);
    let mut outputs = Vec::new();
    let mut checks = Vec::new();
    for (k, d) in compiled.program.outputs.iter().enumerate() {
        let mem = m
            .memories
            .iter()
            .position(|x| x.name == d.memory)
            .unwrap_or(0);
        let raw = outcome
            .state
            .read_tensor(m, mem, d)
            .map_err(|f| RunError::Inputs(format!("output `{}`: {f}", d.name)))?;
        let eb = d.dtype.bytes() as usize;
        let data: Vec<f64> = raw
            .chunks(eb)
            .map(|c| targets::sim::from_bytes(d.dtype, c))
            .collect();
        let ty = TensorType {
            elem: reference[k].ty.elem,
            shape: reference[k].ty.shape.clone(),
        };
        let got = Tensor::new(ty, data);
        let (abs, rel, ok_reference) = compare(&got, &reference[k], tol);
        let vs_expected = expected
            .and_then(|e| e.get(k))
            .map(|e| compare(&got, e, tol));
        let ok = ok_reference && vs_expected.is_none_or(|(_, _, ok)| ok);
        let expected_max_abs_err = vs_expected.map(|(abs, _, _)| abs).filter(|e| e.is_finite());
        let problem = expected
            .and_then(|e| e.get(k))
            .filter(|e| e.ty.shape != got.ty.shape)
            .map(|e| {
                format!(
                    "the expected output has shape {:?}, the model's is {:?}",
                    e.ty.shape, got.ty.shape
                )
            });
        checks.push(OutputCheck {
            name: d.name.clone(),
            max_abs_err: abs,
            max_rel_err: rel,
            ok,
            expected_max_abs_err,
            problem,
        });
        outputs.push(got);
    }
    let mut report = outcome.report;
    let regions = regions(&compiled, m, &report);
    // Kept for `regions` only: one entry per bundle is large for big programs.
    report.issue_cycles = Vec::new();
    Ok(RunResult {
        compiled,
        report,
        outputs,
        checks,
        tolerance: tol,
        compute_dtype: dt,
        regions,
    })
}

/// Whether `inputs` are as many as the model's inputs, of their shapes.
fn check_inputs(g: &Graph, inputs: &[Tensor]) -> Result<(), RunError> {
    if inputs.len() != g.inputs.len() {
        return Err(RunError::Inputs(format!(
            "the model takes {} inputs, {} given",
            g.inputs.len(),
            inputs.len()
        )));
    }
    for (v, x) in g.inputs.iter().zip(inputs) {
        if x.ty.shape != g.ty(*v).shape {
            return Err(RunError::Inputs(format!(
                "input `{}` has shape {:?}, the model wants {:?}",
                g.values[v.index()].name,
                x.ty.shape,
                g.ty(*v).shape
            )));
        }
    }
    Ok(())
}

/// `(max abs error, max error relative to the largest reference magnitude, within tolerance)`;
/// the errors are NaN where one has a NaN and the other a number.
pub fn compare(got: &Tensor, want: &Tensor, tol: Tolerance) -> (f64, f64, bool) {
    if got.data.len() != want.data.len() {
        return (f64::INFINITY, f64::INFINITY, false);
    }
    let scale = want.data.iter().fold(0.0f64, |a, x| a.max(x.abs()));
    let mut abs = 0.0f64;
    let mut nan = false;
    for (g, w) in got.data.iter().zip(want.data.iter()) {
        if g.is_nan() != w.is_nan() {
            nan = true;
        } else if !w.is_nan() {
            abs = abs.max((g - w).abs());
        }
    }
    let ok = !nan && abs <= tol.abs + tol.rel * scale;
    // A NaN where the other has a number is the largest error there is:
    // reported as NaN, not as the largest of the other elements' errors.
    if nan {
        abs = f64::NAN;
    }
    let rel = if scale > 0.0 { abs / scale } else { abs };
    (abs, rel, ok)
}

/// `n` seeded values in [-1, 1), rounded to f32, from `seed`.
fn seeded(seed: u64, n: usize) -> Vec<f64> {
    let mut s: u64 = 0x2545_F491_4F6C_DD1D ^ seed;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let unit = (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            ElemType::F32.round(unit)
        })
        .collect()
}

/// A 2-D convolution of an input `[1, c, hw, hw]` by seeded constant
/// weights `[m, c / groups, k, k]` (scaled by `1/√(c·k²/groups)`) and bias,
/// with stride `stride` and the padding that keeps the size at stride 1
/// (`k / 2` on every side).
pub fn conv_graph(c: usize, m: usize, hw: usize, k: usize, stride: usize, groups: usize) -> Graph {
    let ty = |shape: Vec<usize>| TensorType {
        elem: ElemType::F32,
        shape,
    };
    let mut g = Graph::default();
    let x = g.add_value("x", ty(vec![1, c, hw, hw]));
    g.inputs.push(x);
    let cg = c / groups.max(1);
    let scale = 1.0 / ((cg * k * k) as f64).sqrt();
    let seed = ((((c * 31 + m) * 31 + hw) * 31 + k) * 31 + groups) as u64;
    let wdata = seeded(seed, m * cg * k * k)
        .into_iter()
        .map(|v| ElemType::F32.round(v * scale))
        .collect();
    let w = g.add_constant("w", Tensor::new(ty(vec![m, cg, k, k]), wdata));
    let b = g.add_constant("b", Tensor::new(ty(vec![m]), seeded(seed + 1, m)));
    let window = crate::ir::Window {
        kernel: [k, k],
        strides: [stride, stride],
        pads: [k / 2; 4],
        dilations: [1, 1],
        ceil: false,
    };
    let op = Op::Conv { window, groups };
    let y = g
        .add_node("conv", op, vec![x, w, b])
        .expect("a convolution of matching shapes types")[0];
    g.outputs.push(y);
    g
}

/// `c = a · b` with `a: [m, k]` an input and `b: [k, n]` a seeded constant in [-1, 1).
pub fn gemm_graph(m: usize, k: usize, n: usize) -> Graph {
    let ty = |shape: Vec<usize>| TensorType {
        elem: ElemType::F32,
        shape,
    };
    let mut g = Graph::default();
    let a = g.add_value("a", ty(vec![m, k]));
    g.inputs.push(a);
    let data = seeded(((m * 31 + k) * 31 + n) as u64, k * n);
    let b = g.add_constant("b", Tensor::new(ty(vec![k, n]), data));
    let c = g
        .add_node("c", Op::MatMul, vec![a, b])
        .expect("a matmul of matching shapes types")[0];
    g.outputs.push(c);
    g
}
