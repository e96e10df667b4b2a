//! Hand-written assembly programs for every shipped target, run on its
//! generated simulator: `tests/programs/<target>/{matmul,eltwise,reduce}.s`.
//!
//! Each program says in comments what it computes and, on a line
//! `# cycles: N`, the total cycle count derived by hand from the description's
//! timing (the derivation follows that line). This test assembles every
//! program, feeds it seeded inputs (values in [-1, 1) rounded to the input's
//! element type), runs the simulator, checks every output element against a
//! reference computed here from the rounded inputs, and checks the cycle count
//! against the derived one.
//!
//! The kind of program is its file name:
//! - `matmul`:  inputs `a` [M, K], `b` [K, N]; output `c` [M, N] = a @ b.
//! - `eltwise`: input `x`; output `y` = relu(x * x + x), same element count.
//! - `reduce`:  input `x` [R, C]; output `y` [R] or [R, 1] = max over each row.
//!
//! Tolerances, per output element, with u the unit roundoff of the output type
//! (2^-24 for f32):
//! - `matmul`: the machine sums K products; bf16 x bf16 products are exact in
//!   f32 and any order of K - 1 f32 additions is within (K - 1) u Σ|a b| of the
//!   exact sum (Higham, recursive summation bound); the reference rounds the
//!   f64 sum to the output type once more: |got - ref| <= (K + 1) u Σ|a b| + u |ref|.
//!   (Much tighter than a bf16 rounding of partial sums or results for the
//!   small K of most programs; for pim-dram's K = 1024 it is about 1e-3 relative.)
//! - `eltwise`: two roundings in the machine (x*x, then + x; one if fused) and
//!   one in the reference: |got - ref| <= 3 u (x^2 + |x|) (relu is 1-Lipschitz).
//! - `reduce`: exact (a maximum is one of the inputs).

use isa_specs::Machine;
use isa_specs::model::DType;
use isa_specs::program::{Program, TensorDesc};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use targets::sim::{Config, from_bytes, to_bytes};

/// The programs every shipped target must have.
const KINDS: [&str; 3] = ["matmul", "eltwise", "reduce"];

fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// `(target directory name, program stem, path)` of every `.s` file, sorted.
fn program_files() -> Vec<(String, String, PathBuf)> {
    let mut out = Vec::new();
    let dirs = std::fs::read_dir(programs_dir()).expect("tests/programs exists");
    for dir in dirs {
        let dir = dir.expect("directory entry").path();
        if !dir.is_dir() {
            continue;
        }
        let target = dir
            .file_name()
            .expect("directory name")
            .to_string_lossy()
            .into_owned();
        for f in std::fs::read_dir(&dir).expect("target directory") {
            let f = f.expect("directory entry").path();
            if f.extension().is_some_and(|e| e == "s") {
                let stem = f
                    .file_stem()
                    .expect("file name")
                    .to_string_lossy()
                    .into_owned();
                out.push((target.clone(), stem, f));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_shipped_target_has_exactly_the_three_programs() {
    let mut by_target: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (target, stem, _) in program_files() {
        by_target.entry(target).or_default().push(stem);
    }
    for name in targets::names() {
        let mut have = by_target.remove(name).unwrap_or_default();
        have.sort();
        let mut want: Vec<String> = KINDS.iter().map(|k| (*k).to_owned()).collect();
        want.sort();
        assert_eq!(have, want, "programs of target `{name}`");
    }
    assert!(
        by_target.is_empty(),
        "program directories for targets that are not shipped: {:?}",
        by_target.keys().collect::<Vec<_>>()
    );
}

/// The `# cycles: N` line.
fn expected_cycles(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix('#')?
            .trim()
            .strip_prefix("cycles:")?
            .trim()
            .parse()
            .ok()
    })
}

/// A small deterministic generator (xorshift64*), seeded per program and input.
struct Rng(u64);

impl Rng {
    fn new(seed: &str) -> Rng {
        // FNV-1a of the seed text; never zero.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in seed.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng(h | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// One input tensor: its values (exactly as the machine sees them) and bytes.
struct Tensor {
    shape: Vec<usize>,
    values: Vec<f64>,
}

fn elements(shape: &[u64]) -> usize {
    shape.iter().product::<u64>() as usize
}

fn make_input(seed: &str, t: &TensorDesc) -> (Tensor, Vec<u8>) {
    let mut rng = Rng::new(seed);
    let n = elements(&t.shape);
    let size = t.dtype.bytes() as usize;
    let mut bytes = Vec::with_capacity(n * size);
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        let raw = to_bytes(t.dtype, rng.unit());
        bytes.extend_from_slice(&raw[..size]);
        values.push(from_bytes(t.dtype, &raw[..size]));
    }
    let shape = t.shape.iter().map(|d| *d as usize).collect();
    (Tensor { shape, values }, bytes)
}

fn read_output(
    m: &Machine,
    st: &mut targets::sim::State,
    t: &TensorDesc,
) -> Result<Vec<f64>, String> {
    let mi = m
        .memories
        .iter()
        .position(|x| x.name == t.memory)
        .ok_or_else(|| format!("output `{}` in unknown memory `{}`", t.name, t.memory))?;
    let size = t.dtype.bytes();
    let n = elements(&t.shape) as u64;
    let bytes = st
        .read_bytes(m, mi, t.addr, n * size)
        .map_err(|e| format!("reading output `{}`: {e}", t.name))?;
    Ok(bytes
        .chunks(size as usize)
        .map(|c| from_bytes(t.dtype, c))
        .collect())
}

/// Unit roundoff of a floating-point type (0 for integers: exact).
fn unit_roundoff(dt: DType) -> f64 {
    match dt {
        DType::F32 => 2f64.powi(-24),
        DType::Bf16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        DType::Fp8E4M3 => 2f64.powi(-4),
        DType::Fp8E5M2 => 2f64.powi(-3),
        DType::I8 | DType::U8 | DType::I16 | DType::I32 => 0.0,
    }
}

/// The value `x` as the output type holds it.
fn round_to(dt: DType, x: f64) -> f64 {
    from_bytes(dt, &to_bytes(dt, x)[..dt.bytes() as usize])
}

/// Reference values and per-element tolerances for one program.
fn reference(
    kind: &str,
    inputs: &BTreeMap<String, Tensor>,
    out: &TensorDesc,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let input = |name: &str| {
        inputs
            .get(name)
            .ok_or_else(|| format!("{kind} needs an input `{name}`"))
    };
    let u = unit_roundoff(out.dtype);
    let out_n = elements(&out.shape);
    match kind {
        "matmul" => {
            let (a, b) = (input("a")?, input("b")?);
            let (&[m, k], &[k2, n]) = (&a.shape[..], &b.shape[..]) else {
                return Err(format!(
                    "matmul wants a [M, K] and b [K, N], found {:?} and {:?}",
                    a.shape, b.shape
                ));
            };
            if k != k2 || out_n != m * n || out.shape.first() != Some(&(m as u64)) {
                return Err(format!(
                    "shapes a {:?}, b {:?}, c {:?} do not make a matmul",
                    a.shape, b.shape, out.shape
                ));
            }
            let mut refs = Vec::with_capacity(m * n);
            let mut tols = Vec::with_capacity(m * n);
            for i in 0..m {
                for j in 0..n {
                    let (mut s, mut abs) = (0.0f64, 0.0f64);
                    for l in 0..k {
                        let p = a.values[i * k + l] * b.values[l * n + j];
                        s += p;
                        abs += p.abs();
                    }
                    let r = round_to(out.dtype, s);
                    refs.push(r);
                    tols.push((k as f64 + 1.0) * u * abs + u * r.abs());
                }
            }
            Ok((refs, tols))
        }
        "eltwise" => {
            let x = input("x")?;
            if x.values.len() != out_n {
                return Err(format!(
                    "eltwise wants y as many elements as x: {:?} vs {:?}",
                    x.shape, out.shape
                ));
            }
            Ok(x.values
                .iter()
                .map(|&v| {
                    let r = round_to(out.dtype, (v * v + v).max(0.0));
                    (r, 3.0 * u * (v * v + v.abs()))
                })
                .unzip())
        }
        "reduce" => {
            let x = input("x")?;
            let [r, c] = x.shape[..] else {
                return Err(format!("reduce wants x [R, C], found {:?}", x.shape));
            };
            let shape_ok = matches!(out.shape[..], [rr] | [rr, 1] if rr as usize == r);
            if !shape_ok {
                return Err(format!(
                    "reduce wants y [{r}] or [{r}, 1], found {:?}",
                    out.shape
                ));
            }
            Ok((0..r)
                .map(|i| {
                    let row = &x.values[i * c..(i + 1) * c];
                    (row.iter().copied().fold(f64::NEG_INFINITY, f64::max), 0.0)
                })
                .unzip())
        }
        other => Err(format!(
            "unknown program kind `{other}` (kinds: {})",
            KINDS.join(", ")
        )),
    }
}

/// Runs one program; `Err` describes every way it went wrong.
fn check_program(target: &str, kind: &str, path: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading: {e}"))?;
    let want_cycles = expected_cycles(&text).ok_or_else(|| "no `# cycles: N` line".to_owned())?;
    let t = targets::by_name(target).ok_or_else(|| format!("no shipped target `{target}`"))?;
    let m = t.machine();
    let name = format!("{target}/{kind}.s");
    let program: Program =
        isa_specs::assembly::assemble(t.isa(), m, &name, &text).map_err(|errs| {
            errs.iter()
                .map(|e| e.0.clone())
                .collect::<Vec<_>>()
                .join("\n")
        })?;
    let mut values = BTreeMap::new();
    let mut inputs = Vec::new();
    for desc in &program.inputs {
        let (tensor, bytes) = make_input(&format!("{name}:{}", desc.name), desc);
        values.insert(desc.name.clone(), tensor);
        inputs.push((desc.name.clone(), bytes));
    }
    let mut outcome = t
        .simulate(m, &program, &inputs, &Config::default())
        .map_err(|e| format!("simulation failed: {e}"))?;
    let mut problems = Vec::new();
    let [out] = program.outputs.as_slice() else {
        return Err(format!(
            "expected one output, found {}",
            program.outputs.len()
        ));
    };
    let got = read_output(m, &mut outcome.state, out)?;
    let (refs, tols) = reference(kind, &values, out)?;
    let mut bad = 0;
    for (i, ((g, r), tol)) in got.iter().zip(&refs).zip(&tols).enumerate() {
        let ok = if *tol == 0.0 {
            g == r
        } else {
            (g - r).abs() <= *tol
        };
        if !ok {
            bad += 1;
            if bad <= 5 {
                problems.push(format!(
                    "{}[{i}] = {g} but the reference is {r} (tolerance {tol:e})",
                    out.name
                ));
            }
        }
    }
    if bad > 5 {
        problems.push(format!("... {bad} of {} elements wrong", got.len()));
    }
    let cycles = outcome.report.cycles;
    if cycles != want_cycles {
        problems.push(format!(
            "{cycles} cycles simulated, {want_cycles} derived from the description (`# cycles:`)"
        ));
    }
    if problems.is_empty() {
        Ok(cycles)
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn programs_compute_the_reference_in_the_derived_cycles() {
    let files = program_files();
    assert!(
        !files.is_empty(),
        "no programs under {}",
        programs_dir().display()
    );
    let mut failures = Vec::new();
    for (target, kind, path) in &files {
        match check_program(target, kind, path) {
            Ok(cycles) => eprintln!("ok   {target}/{kind}.s: {cycles} cycles"),
            Err(e) => {
                eprintln!("FAIL {target}/{kind}.s");
                failures.push(format!("{target}/{kind}.s:\n  {}", e.replace('\n', "\n  ")));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} programs failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
