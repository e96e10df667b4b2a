//! `tessera sim` (run a program on the generated simulator) and `tessera doc` (the ISA manual).

use super::{EXIT_ERRORS, EXIT_OK, Format, TargetArgs};
use anyhow::Context as _;
use clap::Args;
use isa_specs::program::{Program, TensorDesc};

use std::path::PathBuf;
use std::process::ExitCode;
use targets::sim::{Config, Report};

/// Arguments of `tessera sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Program file (.tsr).
    program: PathBuf,
    /// Input tensors: `DIR/<name>.bin` holds the raw little-endian elements of input `<name>`
    /// (its dtype and shape are in the program); otherwise `DIR/input_<i>.pb`, an ONNX TensorProto
    /// (the backend-test layout), is converted to the input's type. Inputs without a file get
    /// seeded random values in [-1, 1).
    #[arg(long, value_name = "DIR")]
    inputs: Option<PathBuf>,
    /// Write each output tensor to `DIR/<name>.bin` (raw little-endian elements).
    #[arg(long, value_name = "DIR")]
    outputs: Option<PathBuf>,
    /// Write a Chrome/Perfetto trace (one track per unit copy and DMA engine; 1 µs shown = 1 cycle).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Skip the data: timing, utilisation, traffic and energy only (faster).
    #[arg(long)]
    timing_only: bool,
    /// Parameter values (default: the ones the program was built with; they must match).
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = super::parse_set)]
    set: Vec<(String, i64)>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Seeded values in [-1, 1), encoded as `t.dtype` (integers: in the type's range).
fn random_input(t: &TensorDesc, seed: u64) -> Vec<u8> {
    let mut s = seed
        ^ 0x9E37_79B9_7F4A_7C15
        ^ t.name
            .bytes()
            .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
    let n = t.shape.iter().product::<u64>();
    let mut out = Vec::with_capacity((n * t.dtype.bytes()) as usize);
    for _ in 0..n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let unit = (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        let x = if t.dtype.is_float() {
            unit
        } else {
            (unit * 100.0).round()
        };
        out.extend_from_slice(&targets::sim::to_bytes(t.dtype, x)[..t.dtype.bytes() as usize]);
    }
    out
}

/// Raw little-endian elements from `<name>.bin`.
fn raw_input(t: &TensorDesc, path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let b = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    anyhow::ensure!(
        b.len() as u64 == t.bytes(),
        "{}: {} bytes, but input `{}` ({} {:?}) has {}",
        path.display(),
        b.len(),
        t.name,
        t.dtype.name(),
        t.shape,
        t.bytes()
    );
    Ok(b)
}

/// An ONNX `TensorProto` file (`input_<i>.pb`), converted to the input's element type.
fn tensor_input(t: &TensorDesc, path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let (_, tensor) = compiler::onnx::read_tensor_file(path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    anyhow::ensure!(
        tensor.data.len() as u64 == t.shape.iter().product::<u64>(),
        "{}: {} elements, but input `{}` has shape {:?}",
        path.display(),
        tensor.data.len(),
        t.name,
        t.shape
    );
    let n = t.dtype.bytes() as usize;
    Ok(tensor
        .data
        .iter()
        .flat_map(|x| targets::sim::to_bytes(t.dtype, *x)[..n].to_vec())
        .collect())
}

/// Each input from `DIR/<name>.bin`, else `DIR/input_<i>.pb` (the ONNX backend-test layout), else seeded random values.
fn inputs(program: &Program, args: &SimArgs) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    program
        .inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let raw = args
                .inputs
                .as_ref()
                .map(|d| d.join(format!("{}.bin", t.name)))
                .filter(|f| f.exists());
            let pb = args
                .inputs
                .as_ref()
                .map(|d| d.join(format!("input_{i}.pb")))
                .filter(|f| f.exists());
            let bytes = match (raw, pb) {
                (Some(f), _) => raw_input(t, &f)?,
                (None, Some(f)) => tensor_input(t, &f)?,
                (None, None) => random_input(t, args.seed),
            };
            Ok((t.name.clone(), bytes))
        })
        .collect()
}

/// Runs a program.
pub fn sim(args: &SimArgs) -> anyhow::Result<ExitCode> {
    let Some((program, t, machine)) = super::open_program(&args.program, &args.set)? else {
        return Ok(ExitCode::from(EXIT_ERRORS));
    };
    let data = inputs(&program, args)?;
    let cfg = Config {
        functional: !args.timing_only,
        trace: args.trace.is_some(),
        ..Config::default()
    };
    let outcome = match t.simulate(&machine, &program, &data, &cfg) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {}: fault at {e}", args.program.display());
            return Ok(ExitCode::from(EXIT_ERRORS));
        }
    };
    if let (Some(path), Some(trace)) = (&args.trace, &outcome.trace) {
        let text = serde_json::to_string(&trace.to_json(&machine.name))?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut state = outcome.state;
    let mut outputs = Vec::new();
    for o in &program.outputs {
        let mem = machine
            .memories
            .iter()
            .position(|x| x.name == o.memory)
            .context("output in an unknown memory")?;
        let bytes = if cfg.functional {
            state
                .read_tensor(&machine, mem, o)
                .map_err(|f| anyhow::anyhow!("output `{}`: {f}", o.name))?
        } else {
            Vec::new()
        };
        if let Some(dir) = &args.outputs {
            std::fs::create_dir_all(dir)?;
            std::fs::write(dir.join(format!("{}.bin", o.name)), &bytes)?;
        }
        outputs.push((o, bytes));
    }
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&json_report(&outcome.report, &outputs))?
        ),
        Format::Human => print_human(&outcome.report, &outputs),
    }
    Ok(ExitCode::from(EXIT_OK))
}

fn summary(t: &TensorDesc, bytes: &[u8]) -> Option<(f64, f64, f64)> {
    let n = t.dtype.bytes() as usize;
    let vals: Vec<f64> = bytes
        .chunks(n)
        .map(|c| targets::sim::from_bytes(t.dtype, c))
        .collect();
    if vals.is_empty() {
        return None;
    }
    let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((min, max, vals.iter().sum::<f64>() / vals.len() as f64))
}

fn json_report(r: &Report, outputs: &[(&TensorDesc, Vec<u8>)]) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    v["utilisation"] = r
        .units
        .iter()
        .map(|u| (u.name.clone(), serde_json::json!(u.utilisation)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    v["bytes"] = r
        .memories
        .iter()
        .map(|x| {
            (
                x.name.clone(),
                serde_json::json!({ "read": x.bytes_read, "written": x.bytes_written }),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    v["outputs"] = outputs
        .iter()
        .map(|(t, b)| {
            let s = summary(t, b);
            serde_json::json!({ "name": t.name, "dtype": t.dtype.name(), "shape": t.shape,
                "min": s.map(|x| x.0), "max": s.map(|x| x.1), "mean": s.map(|x| x.2) })
        })
        .collect();
    v
}

fn print_human(r: &Report, outputs: &[(&TensorDesc, Vec<u8>)]) {
    println!("target      {}", r.target);
    println!(
        "cycles      {} ({:.3} µs at the target clock)",
        r.cycles,
        r.seconds * 1e6
    );
    println!(
        "issued      {} bundles, {} instructions",
        r.bundles, r.instructions
    );
    println!(
        "energy      {:.1} nJ (datapath {:.1}, memory and registers {:.1}, static {:.1})",
        r.energy_pj / 1e3,
        r.dynamic_energy_pj / 1e3,
        r.access_energy_pj / 1e3,
        r.static_energy_pj / 1e3
    );
    println!(
        "units       {:<14} {:>6} {:>12} {:>8}",
        "", "copies", "busy cycles", "util"
    );
    for u in &r.units {
        println!(
            "            {:<14} {:>6} {:>12} {:>7.1}%",
            u.name,
            u.count,
            u.busy_cycles,
            u.utilisation * 100.0
        );
    }
    println!(
        "memories    {:<14} {:>14} {:>14}",
        "", "bytes read", "bytes written"
    );
    for x in &r.memories {
        println!(
            "            {:<14} {:>14} {:>14}",
            x.name, x.bytes_read, x.bytes_written
        );
    }
    for (t, b) in outputs {
        if let Some((min, max, mean)) = summary(t, b) {
            println!(
                "output      {} {} {:?}: min {min:.6} max {max:.6} mean {mean:.6}",
                t.name,
                t.dtype.name(),
                t.shape
            );
        }
    }
}

/// Arguments of `tessera doc`.
#[derive(Debug, Args)]
pub struct DocArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Folder to write `<target>.md` and `<target>.html` into.
    #[arg(short, long, value_name = "DIR")]
    output: PathBuf,
}

/// Writes a target's ISA manual.
pub fn doc(args: &DocArgs) -> anyhow::Result<ExitCode> {
    let (t, _) = args.target.resolve()?;
    let loaded = t
        .load(&args.target.set)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let ctx = codegen_gen::Ctx::new(&loaded, t.file, "");
    let md = codegen_gen::gen_docs::manual_markdown(&ctx).map_err(|e| anyhow::anyhow!("{e}"))?;
    let html = codegen_gen::gen_docs::manual_html(&ctx).map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let stem = t.name();
    for (ext, text) in [("md", md), ("html", html)] {
        let path = args.output.join(format!("{stem}.{ext}"));
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::from(EXIT_OK))
}
