//! `tessera compile`, `tessera run` and `tessera demo`: ONNX models to programs,
//! simulated and checked against the reference interpreter.

use super::{EXIT_ERRORS, EXIT_OK, Format, TargetArgs};
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use compiler::ir::{Graph, Tensor};
use compiler::lower::Compiled;
use compiler::lower::mapping::Mappings;
use compiler::run::{RegionRun, RunError, RunResult};
use compiler::timing::PassTimes;
use isa_specs::Machine;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tessera::tune::TuneReport;

/// A stage `tessera compile --emit` can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Stage {
    /// The graph after import, canonicalisation and constant folding.
    Ir,
    /// The fused regions and the instructions selected for them, before register
    /// allocation (virtual registers `%file.N`) and scheduling.
    Selected,
    /// The program as assembly (`tessera asm` reads it back).
    Asm,
    /// The bundles with their issue slots and each instruction's unit and latency.
    Schedule,
    /// Regions, instruction counts, buffer use and the roofline bound.
    Report,
    /// Each matrix product's tuning space: the contraction instructions and
    /// the tile sizes each accepts, the visiting orders, the best mappings by
    /// estimate, and the mapping compiled (JSON; for scripts that search it).
    Space,
    /// The mapping compiled for each matrix product, as `--mapping` reads it back.
    Mappings,
}

/// How the mappings of matrix products are chosen.
#[derive(Debug, Args, Clone)]
pub struct TuneArgs {
    /// Compile the matrix products with these mappings (JSON, as
    /// `--emit mappings` writes it, by node name); the others get the
    /// compiler's choice. A mapping the machine cannot take is an error.
    #[arg(long, value_name = "FILE.json", conflicts_with = "tune")]
    mapping: Option<PathBuf>,
    /// Choose the mappings by measuring each product's best candidates (by
    /// estimate) on the timing-only simulator, within --tune-budget; never
    /// slower than the compiler's own choice.
    #[arg(long)]
    tune: bool,
    /// Seconds --tune may spend (it stops starting rounds after that).
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    tune_budget: f64,
    /// Alternative mappings --tune measures per product, at most.
    #[arg(long, value_name = "N", default_value_t = 8)]
    tune_candidates: usize,
}

impl TuneArgs {
    /// Compiles `g` as these arguments ask: with the compiler's mappings, the
    /// ones given, or tuned (then with the tuning report).
    fn compile(
        &self,
        t: &'static targets::Target,
        m: &Machine,
        g: &Graph,
        opts: compiler::lower::Options,
    ) -> anyhow::Result<Result<(Compiled, Option<TuneReport>), compiler::lower::LowerError>> {
        if self.tune {
            let budget = tessera::tune::Budget {
                time: std::time::Duration::from_secs_f64(self.tune_budget.max(0.0)),
                candidates: self.tune_candidates,
            };
            return Ok(tessera::tune::tune(t, m, g, opts, budget).map(|(c, r)| (c, Some(r))));
        }
        let mappings = match &self.mapping {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                Mappings::from_json(&text)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
            }
            None => Mappings::default(),
        };
        Ok(compiler::lower::compile_mapped(t, m, g, opts, &mappings).map(|c| (c, None)))
    }
}

/// The mappings compiled, as `--mapping` reads them.
fn mappings_of(m: &Machine, c: &Compiled) -> Mappings {
    Mappings {
        target: Some(m.name.clone()),
        mappings: c
            .space
            .iter()
            .map(|s| (s.node.clone(), s.chosen.clone()))
            .collect(),
    }
}

/// What tuning did, for people.
fn tune_text(r: &TuneReport) -> String {
    let mut s = format!(
        "tuned       {} -> {} cycles ({:.3}x) in {} evaluations, {:.1} s{}{}\n",
        r.default_cycles,
        r.tuned_cycles,
        r.default_cycles as f64 / r.tuned_cycles.max(1) as f64,
        r.evaluations,
        r.seconds,
        if r.out_of_time {
            ", stopped by the budget"
        } else {
            ""
        },
        if r.failed > 0 {
            format!(", {} compilations refused a mapping", r.failed)
        } else {
            String::new()
        },
    );
    if r.mappings.mappings.is_empty() {
        if let Some(c) = r.combined_cycles {
            s.push_str(&format!(
                "  kept the compiler's own mappings: the best measured per product took {c} cycles together\n"
            ));
        }
        return s;
    }
    for p in &r.products {
        if r.mappings.mappings.contains_key(&p.node) {
            s.push_str(&format!(
                "  {:<40} {} ({} cycles) -> {} ({} cycles)\n",
                p.node, p.default, p.default_cycles, p.best, p.best_cycles
            ));
        }
    }
    s
}

/// Optimisations that can be switched off, to measure what each buys: one
/// `--no-*` flag per row of [`compiler::lower::OPTIONS`].
#[derive(Debug, Clone, Copy, Default)]
pub struct OptArgs {
    opts: compiler::lower::Options,
}

impl OptArgs {
    /// The lowering options these flags ask for.
    pub fn options(self) -> compiler::lower::Options {
        self.opts
    }
}

impl clap::FromArgMatches for OptArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut a = OptArgs::default();
        a.update_from_arg_matches(m)?;
        Ok(a)
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        for i in compiler::lower::OPTIONS {
            if m.get_flag(i.flag) {
                self.opts.set(i.opt, false);
            }
        }
        Ok(())
    }
}

impl clap::Args for OptArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        compiler::lower::OPTIONS.iter().fold(cmd, |cmd, i| {
            let arg = clap::Arg::new(i.flag)
                .long(i.flag)
                .action(clap::ArgAction::SetTrue)
                .help(i.help);
            cmd.arg(match i.alias {
                Some(a) => arg.visible_alias(a),
                None => arg,
            })
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Arguments of `tessera compile`.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// The ONNX model.
    model: PathBuf,
    #[command(flatten)]
    target: TargetArgs,
    /// Where to write the program (.tsr).
    #[arg(short, long, value_name = "OUT.tsr")]
    output: Option<PathBuf>,
    /// Stages to print (comma-separated): ir, selected, asm, schedule, report.
    #[arg(long, value_enum, value_delimiter = ',')]
    emit: Vec<Stage>,
    #[command(flatten)]
    inputs: InputArgs,
    /// Output format of the emitted stages.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write a roofline plot (SVG) of the model and its regions, with cycles
    /// from a timing-only simulation.
    #[arg(long, value_name = "FILE.svg")]
    roofline: Option<PathBuf>,
    /// Print the time each pass took (reading and importing the model,
    /// lowering, buffers, registers, scheduling, each checker, encoding,
    /// writing) to standard error. With `--tune`, the final compile's.
    #[arg(long)]
    time_passes: bool,
    #[command(flatten)]
    opts: OptArgs,
    #[command(flatten)]
    tuning: TuneArgs,
}

/// Arguments of `tessera run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The ONNX model.
    model: PathBuf,
    #[command(flatten)]
    target: TargetArgs,
    /// Test data in the ONNX backend-test layout: `input_<i>.pb` and, optionally,
    /// `output_<i>.pb` (TensorProto files). Without it, inputs are seeded random.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    inputs: InputArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write a roofline plot (SVG) of the model and its regions.
    #[arg(long, value_name = "FILE.svg")]
    roofline: Option<PathBuf>,
    #[command(flatten)]
    opts: OptArgs,
    #[command(flatten)]
    tuning: TuneArgs,
}

/// Arguments of `tessera demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Target machine (see `tessera targets`).
    #[arg(long, short = 't', default_value = "vliw-systolic")]
    target: String,
}

/// What the model leaves open about its inputs: sizes of dimensions, and
/// inputs known when compiling.
#[derive(Debug, Default, Args)]
pub struct InputArgs {
    /// Size of a symbolic input dimension: `--dim batch=1` (repeatable).
    #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_dim)]
    dims: Vec<(String, usize)>,
    /// The whole shape of an input, fixing each of its dimensions (symbols,
    /// `-1`s, unnamed ones): `--input-shape x=1x3x224x224` (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DxDx..", value_parser = parse_shape)]
    shapes: Vec<(String, Vec<usize>)>,
    /// An input known when compiling (a sample rate, a flag), bound to its
    /// value and no longer an input: `--input-value sr=16000`, or a list for
    /// a 1-D input `--input-value axes=0,2` (repeatable).
    #[arg(long = "input-value", value_name = "NAME=V[,V..]", value_parser = parse_values)]
    values: Vec<(String, Vec<f64>)>,
}

impl InputArgs {
    /// The import options they give.
    fn options(&self) -> compiler::onnx::ImportOptions {
        compiler::onnx::ImportOptions {
            dims: self.dims.iter().cloned().collect(),
            shapes: self.shapes.iter().cloned().collect(),
            values: self.values.iter().cloned().collect(),
            ..Default::default()
        }
    }
}

fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (k, v) = s.split_once('=').ok_or("expected NAME=SIZE")?;
    let v = v
        .trim()
        .parse::<usize>()
        .map_err(|e| format!("`{v}`: {e}"))?;
    Ok((k.trim().to_owned(), v))
}

fn parse_shape(s: &str) -> Result<(String, Vec<usize>), String> {
    let (k, v) = s
        .rsplit_once('=')
        .ok_or("expected NAME=DxDx.. (e.g. x=1x3x224x224)")?;
    let dims = if v.trim().is_empty() {
        Vec::new() // a scalar
    } else {
        (v.split(['x', 'X', ',']))
            .map(|d| d.trim().parse::<usize>().map_err(|e| format!("`{d}`: {e}")))
            .collect::<Result<_, _>>()?
    };
    Ok((k.trim().to_owned(), dims))
}

fn parse_values(s: &str) -> Result<(String, Vec<f64>), String> {
    let (k, v) = s
        .rsplit_once('=')
        .ok_or("expected NAME=V[,V..] (e.g. sr=16000)")?;
    let values = (v.split(','))
        .map(|x| x.trim().parse::<f64>().map_err(|e| format!("`{x}`: {e}")))
        .collect::<Result<_, _>>()?;
    Ok((k.trim().to_owned(), values))
}

/// Imports, verifies and folds a model; import errors are printed.
fn load_model(
    path: &Path,
    options: &compiler::onnx::ImportOptions,
    format: Format,
    times: &mut PassTimes,
) -> anyhow::Result<Option<Graph>> {
    let bytes = times
        .time("read", || std::fs::read(path))
        .with_context(|| format!("cannot read {}", path.display()))?;
    model_from_bytes(bytes, &path.display().to_string(), options, format, times)
}

fn model_from_bytes(
    bytes: Vec<u8>,
    name: &str,
    options: &compiler::onnx::ImportOptions,
    format: Format,
    times: &mut PassTimes,
) -> anyhow::Result<Option<Graph>> {
    let mut g = match times.time("import", || compiler::onnx::import_owned(bytes, options)) {
        Ok(g) => g,
        Err(e) => {
            let unsupported = match &e {
                compiler::onnx::ImportError::UnsupportedOps { groups, .. } => groups
                    .iter()
                    .map(|g| {
                        serde_json::json!({
                            "op": g.op_type,
                            "domain": g.domain,
                            "nodes": g.nodes.iter().map(|n| serde_json::json!({"name": n.name, "index": n.index})).collect::<Vec<_>>(),
                        })
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let unbound = match &e {
                compiler::onnx::ImportError::UnboundDims { dims } => (dims.iter())
                    .map(|d| {
                        serde_json::json!({
                            "input": d.input, "index": d.index, "symbol": d.param, "declared": d.declared,
                        })
                    })
                    .collect(),
                _ => Vec::new(),
            };
            report_error(
                format,
                name,
                "import",
                &e.to_string(),
                e.help(),
                serde_json::json!({ "unsupported": unsupported, "unbound": unbound }),
            );
            return Ok(None);
        }
    };
    times.time("fold constants", || {
        compiler::interp::fold_constants(&mut g)
    });
    if let Err(errors) = times.time("verify", || compiler::ir::verify(&g)) {
        report_error(
            format,
            name,
            "verify",
            &format!("IR verifier: {}", errors.join("; ")),
            None,
            serde_json::json!({ "errors": errors }),
        );
        return Ok(None);
    }
    Ok(Some(g))
}

/// Reports an error in the input: a line on standard error (and a `help:`
/// line where there is advice); under `--format json` also one JSON document
/// on standard output, `{"error": {"stage", "model", "message", "help", ..}}`
/// with `extra`'s fields, so scripts need not parse the text.
fn report_error(
    format: Format,
    name: &str,
    stage: &str,
    message: &str,
    help: Option<&str>,
    extra: serde_json::Value,
) {
    eprintln!("error: {name}: {message}");
    if let Some(h) = help {
        eprintln!("  help: {h}");
    }
    if format == Format::Json {
        let mut e = serde_json::json!({
            "stage": stage,
            "model": name,
            "message": message,
            "help": help,
        });
        if let (Some(e), serde_json::Value::Object(x)) = (e.as_object_mut(), extra) {
            e.extend(x);
        }
        println!("{}", serde_json::json!({ "error": e }));
    }
}

/// [`report_error`] for a model the compiler refuses: the node and op to
/// blame and the kind of refusal among the JSON fields.
fn report_lower_error(format: Format, name: &str, target: &str, e: &compiler::lower::LowerError) {
    report_error(
        format,
        name,
        "compile",
        &format!("cannot compile for `{target}`: {e}"),
        None,
        serde_json::json!({
            "target": target,
            "kind": e.kind(),
            "node": e.node(),
            "op": e.op(),
            "reason": e.message(),
        }),
    );
}

/// `tessera compile`.
pub fn compile(args: &CompileArgs) -> anyhow::Result<ExitCode> {
    let (t, m) = args.target.resolve()?;
    let mut times = PassTimes::default();
    let options = args.inputs.options();
    let Some(g) = load_model(&args.model, &options, args.format, &mut times)? else {
        return Ok(ExitCode::from(EXIT_ERRORS));
    };
    let started = std::time::Instant::now();
    let (c, tuned) = match args.tuning.compile(t, &m, &g, args.opts.options())? {
        Ok(c) => c,
        Err(e) => {
            report_lower_error(args.format, &args.model.display().to_string(), &m.name, &e);
            return Ok(ExitCode::from(EXIT_ERRORS));
        }
    };
    let elapsed = started.elapsed();
    times.merge(&c.passes);
    if let Some(out) = &args.output {
        times
            .time("write", || c.program.save(out))
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    if args.time_passes {
        eprint!("{}", times.table());
    }
    if let Some(path) = &args.roofline {
        let (cycles, regions) = timed_regions(t, &m, &c)
            .map_err(|e| anyhow::anyhow!("timing simulation for the roofline plot: {e}"))?;
        let title = args.model.display().to_string();
        write_roofline(path, &title, &m, &c, cycles, &regions)?;
    }
    let mut json = serde_json::Map::new();
    for stage in &args.emit {
        let (key, text, value) = match stage {
            Stage::Ir => ("ir", g.to_string(), ir_json(&g)),
            Stage::Selected => {
                let mut text = String::new();
                for (region, n) in &c.regions {
                    text.push_str(&format!("# {region}: {n} instructions\n"));
                }
                let selected = c.selected_text(&m);
                for line in &selected {
                    text.push_str(line);
                    text.push('\n');
                }
                let value = serde_json::json!({
                    "regions": c.regions.iter().map(|(r, n)| serde_json::json!({"region": r, "instructions": n})).collect::<Vec<_>>(),
                    "instructions": selected,
                });
                ("selected", text, value)
            }
            Stage::Asm => {
                let text = isa_specs::assembly::disassemble(t.isa(), &m, &c.program)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                ("asm", text.clone(), serde_json::Value::String(text))
            }
            Stage::Schedule => (
                "schedule",
                schedule_text(t, &m, &c),
                schedule_json(t, &m, &c),
            ),
            Stage::Report => {
                let regions = timed_regions(t, &m, &c);
                let mut r = report_json(&m, &c, elapsed.as_secs_f64(), &regions);
                let mut text = report_text(&m, &c, elapsed.as_secs_f64(), &regions);
                if let Some(tr) = &tuned {
                    r["tune"] = serde_json::to_value(tr)?;
                    text.push_str(&tune_text(tr));
                }
                ("report", text, r)
            }
            Stage::Space => {
                let value = serde_json::json!({
                    "target": m.name,
                    "products": serde_json::to_value(&c.space)?,
                });
                let text = serde_json::to_string_pretty(&value)?;
                ("space", text, value)
            }
            Stage::Mappings => {
                let value = serde_json::to_value(mappings_of(&m, &c))?;
                let text = serde_json::to_string_pretty(&value)?;
                ("mappings", text, value)
            }
        };
        match args.format {
            Format::Human => {
                println!("== {key} ==");
                print!("{text}");
                if !text.ends_with('\n') {
                    println!();
                }
            }
            Format::Json => {
                json.insert(key.to_owned(), value);
            }
        }
    }
    if args.format == Format::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::Value::Object(json))?
        );
    }
    eprintln!(
        "{}: {} bundles for `{}` in {:.1} ms{}",
        args.model.display(),
        c.bundles.len(),
        m.name,
        elapsed.as_secs_f64() * 1e3,
        args.output
            .as_ref()
            .map(|o| format!(", written to {}", o.display()))
            .unwrap_or_default()
    );
    // The process ends here: its memory goes back whole, without walking
    // the model's and the program's allocations to free them one by one.
    std::mem::forget(c);
    std::mem::forget(g);
    Ok(ExitCode::from(EXIT_OK))
}

fn ir_json(g: &Graph) -> serde_json::Value {
    let name = |v: &compiler::ir::ValueId| g.values[v.index()].name.clone();
    serde_json::json!({
        "inputs": g.inputs.iter().map(|v| serde_json::json!({"name": name(v), "type": g.ty(*v).to_string()})).collect::<Vec<_>>(),
        "outputs": g.outputs.iter().map(name).collect::<Vec<_>>(),
        "constants": g.constants.iter().map(|(v, t)| serde_json::json!({"name": name(v), "type": t.ty.to_string()})).collect::<Vec<_>>(),
        "nodes": g.nodes.iter().map(|n| serde_json::json!({
            "name": n.name,
            "op": n.op.name(),
            "inputs": n.inputs.iter().map(name).collect::<Vec<_>>(),
            "outputs": n.outputs.iter().map(|v| serde_json::json!({"name": name(v), "type": g.ty(*v).to_string()})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn schedule_text(t: &targets::Target, m: &Machine, c: &Compiled) -> String {
    let mut out = String::new();
    for (k, b) in c.bundles.iter().enumerate() {
        out.push_str(&format!(
            "{k:>6}  {}\n",
            isa_specs::target::print_bundle(t.isa(), m, b)
        ));
    }
    out
}

fn schedule_json(t: &targets::Target, m: &Machine, c: &Compiled) -> serde_json::Value {
    c.bundles
        .iter()
        .map(|b| {
            b.ops
                .iter()
                .map(|(slot, i)| {
                    let def = &m.instructions[i.inst.index()];
                    serde_json::json!({
                        "slot": m.slots[slot.index()].name,
                        "unit": m.units[def.timing.unit.index()].name,
                        "latency": t.isa().latency(m, i),
                        "occupancy": t.isa().occupancy(m, i),
                        "asm": t.isa().print_inst(m, i),
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .into()
}

/// Per-region cycles from a timing-only simulation, or why there are none.
fn timed_regions(
    t: &targets::Target,
    m: &Machine,
    c: &Compiled,
) -> Result<(u64, Vec<RegionRun>), String> {
    let report = compiler::run::timing(t, m, c).map_err(|e| e.to_string())?;
    Ok((report.cycles, compiler::run::regions(c, m, &report)))
}

fn report_json(
    m: &Machine,
    c: &Compiled,
    seconds: f64,
    timed: &Result<(u64, Vec<RegionRun>), String>,
) -> serde_json::Value {
    let roof = c.roofline(m);
    let (cycles, regions, error) = match timed {
        Ok((cycles, r)) => (Some(*cycles), serde_json::json!(r), None),
        Err(e) => (None, serde_json::Value::Null, Some(e.clone())),
    };
    serde_json::json!({
        "cycles": cycles,
        "efficiency": cycles.map(|x| roof.cycles as f64 / x.max(1) as f64),
        "region_efficiency": regions,
        "timing_error": error,
        "notes": c.notes,
        "kept_on_chip": c.kept_on_chip,
        "target": m.name,
        "compile_seconds": seconds,
        "passes": c.passes.0.iter().map(|(n, d)| serde_json::json!({"pass": n, "seconds": d.as_secs_f64()})).collect::<Vec<_>>(),
        "bundles": c.bundles.len(),
        "instructions": c.insts.len(),
        "code_bytes": c.program.code.len(),
        "data_bytes": c.program.data.iter().map(|d| d.bytes.len()).sum::<usize>(),
        "macs": c.macs,
        "roofline": c.roofline(m),
        "regions": c.regions.iter().map(|(r, n)| serde_json::json!({"region": r, "instructions": n})).collect::<Vec<_>>(),
        "buffers": c.buffers.iter().map(|(mem, peak, cap)| serde_json::json!({"memory": mem, "peak_bytes": peak, "capacity": cap})).collect::<Vec<_>>(),
    })
}

fn report_text(
    m: &Machine,
    c: &Compiled,
    seconds: f64,
    timed: &Result<(u64, Vec<RegionRun>), String>,
) -> String {
    let r = c.roofline(m);
    let mut s = format!(
        "target        {}\ncompile time  {:.1} ms\ncode          {} bundles, {} instructions, {} bytes\nconstants     {} bytes\nMACs          {}\nroofline      {} cycles ({})\nregions\n",
        m.name,
        seconds * 1e3,
        c.bundles.len(),
        c.insts.len(),
        c.program.code.len(),
        c.program.data.iter().map(|d| d.bytes.len()).sum::<usize>(),
        c.macs,
        r.cycles,
        r
    );
    for (region, n) in &c.regions {
        s.push_str(&format!("  {n:>7} instructions  {region}\n"));
    }
    for note in &c.notes {
        s.push_str(&format!("note          {note}\n"));
    }
    match timed {
        Ok((cycles, regions)) => {
            s.push_str(&format!(
                "cycles        {cycles} (timing-only simulation): efficiency {:.1}%\n",
                100.0 * r.cycles as f64 / (*cycles).max(1) as f64
            ));
            s.push_str(&region_table(regions));
        }
        Err(e) => s.push_str(&format!("cycles        not simulated: {e}\n")),
    }
    s.push_str("on-chip buffers\n");
    for (mem, peak, cap) in &c.buffers {
        s.push_str(&format!("  {mem:<10} peak {peak} of {cap} bytes\n"));
    }
    s.push_str(&format!(
        "  {} value(s) kept on chip across regions\n",
        c.kept_on_chip
    ));
    s
}

/// Reads `input_<i>.pb` for every input and any `output_<i>.pb`.
fn read_data(dir: &Path, g: &Graph) -> anyhow::Result<(Vec<Tensor>, Option<Vec<Tensor>>)> {
    let files = read_tensors(dir, "input")?;
    let mut inputs = Vec::new();
    for (i, v) in g.inputs.iter().enumerate() {
        let name = &g.values[v.index()].name;
        // By name (an input bound with `--input-value` is not in the graph
        // any more), else by position.
        let t = (files.iter().find(|(n, _)| n == name))
            .or_else(|| files.get(i).filter(|(n, _)| n.is_empty()))
            .map(|(_, t)| t.clone())
            .ok_or_else(|| {
                anyhow::anyhow!("{}: no input_N.pb holds input `{name}`", dir.display())
            })?;
        inputs.push(t);
    }
    let expected: Vec<Tensor> = read_tensors(dir, "output")?
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    let expected = (expected.len() == g.outputs.len()).then_some(expected);
    Ok((inputs, expected))
}

/// The tensors of `{kind}_0.pb`, `{kind}_1.pb`, ... in `dir`, with their names.
fn read_tensors(dir: &Path, kind: &str) -> anyhow::Result<Vec<(String, Tensor)>> {
    let mut found = Vec::new();
    loop {
        let p = dir.join(format!("{kind}_{}.pb", found.len()));
        if !p.exists() {
            return Ok(found);
        }
        let t = compiler::onnx::read_tensor_file(&p)
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        found.push(t);
    }
}

/// Shapes the test data gives inputs, where the flags give none: `run
/// --data` needs no `--input-shape`.
fn data_shapes(dir: &Path, options: &mut compiler::onnx::ImportOptions) -> anyhow::Result<()> {
    for (name, t) in read_tensors(dir, "input")? {
        if !name.is_empty() && !options.values.contains_key(&name) {
            options.shapes.entry(name).or_insert(t.ty.shape);
        }
    }
    Ok(())
}

/// The JSON of a run (the fields `tessera run --format json` documents).
pub fn run_json(m: &Machine, r: &RunResult) -> serde_json::Value {
    let roof = r.compiled.roofline(m);
    serde_json::json!({
        "target": m.name,
        "cycles": r.report.cycles,
        "seconds": r.report.seconds,
        "roofline_cycles": roof.cycles,
        "roofline": roof,
        "efficiency": roof.cycles as f64 / r.report.cycles.max(1) as f64,
        "utilisation": r.report.units.iter().map(|u| (u.name.clone(), serde_json::json!(u.utilisation))).collect::<serde_json::Map<_, _>>(),
        "bytes": r.report.memories.iter().map(|x| (x.name.clone(), serde_json::json!({"read": x.bytes_read, "written": x.bytes_written}))).collect::<serde_json::Map<_, _>>(),
        "energy_pj": r.report.energy_pj,
        "bundles": r.report.bundles,
        "instructions": r.report.instructions,
        "compute_dtype": r.compute_dtype.name(),
        "tolerance": r.tolerance,
        "outputs": r.checks,
        "regions": r.regions,
        "notes": r.compiled.notes,
    })
}

/// Per region: simulated cycles, bound, efficiency (program order).
fn region_table(regions: &[RegionRun]) -> String {
    let mut s = format!(
        "{:<12}{:>9} {:>9} {:>9} {:>11}  region\n",
        "per region", "share", "span", "bound", "efficiency"
    );
    for x in regions {
        let name: String = if x.region.chars().count() > 90 {
            x.region
                .chars()
                .take(89)
                .chain(std::iter::once('…'))
                .collect()
        } else {
            x.region.clone()
        };
        s.push_str(&format!(
            "{:<12}{:>9} {:>9} {:>9} {:>10.1}%  {name}\n",
            "",
            x.cycles,
            x.span_cycles,
            x.roofline_cycles,
            100.0 * x.efficiency
        ));
    }
    s
}

/// Writes the roofline plot of a compiled model and its regions.
fn write_roofline(
    path: &Path,
    title: &str,
    m: &Machine,
    c: &Compiled,
    cycles: u64,
    regions: &[RegionRun],
) -> anyhow::Result<()> {
    let model = tessera::roofline::Point {
        label: "whole model".to_owned(),
        macs: c.macs,
        home_bytes: c.min_home_bytes,
        cycles,
    };
    let points: Vec<tessera::roofline::Point> = regions
        .iter()
        .map(|x| tessera::roofline::Point {
            label: x.region.clone(),
            macs: x.macs,
            home_bytes: x.home_bytes,
            cycles: x.span_cycles,
        })
        .collect();
    let svg = tessera::roofline::svg(title, m, &model, &points)
        .map_err(|e| anyhow::anyhow!("roofline plot: {e}"))?;
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))
}

fn print_run(m: &Machine, r: &RunResult) {
    let roof = r.compiled.roofline(m);
    println!("target      {}", m.name);
    println!(
        "cycles      {} ({:.3} µs at the target clock)",
        r.report.cycles,
        r.report.seconds * 1e6
    );
    println!(
        "roofline    {} cycles ({roof}): efficiency {:.1}%",
        roof.cycles,
        100.0 * roof.cycles as f64 / r.report.cycles.max(1) as f64
    );
    println!(
        "code        {} bundles, {} instructions",
        r.compiled.bundles.len(),
        r.compiled.insts.len()
    );
    println!("energy      {:.1} nJ", r.report.energy_pj / 1e3);
    for u in &r.report.units {
        println!(
            "unit        {:<14} {:>6.1}% busy",
            u.name,
            100.0 * u.utilisation
        );
    }
    for x in &r.report.memories {
        println!(
            "memory      {:<14} {} bytes read, {} written",
            x.name, x.bytes_read, x.bytes_written
        );
    }
    for note in &r.compiled.notes {
        println!("note        {note}");
    }
    print!("{}", region_table(&r.regions));
    println!(
        "precision   computes in {}; tolerance |err| <= {} + {} * max|reference|",
        r.compute_dtype.name(),
        r.tolerance.abs,
        r.tolerance.rel
    );
    for o in &r.checks {
        let expected = o
            .problem
            .as_ref()
            .map(|p| format!(", {p}"))
            .or_else(|| {
                o.expected_max_abs_err
                    .map(|e| format!(", vs expected output {e:.3e}"))
            })
            .unwrap_or_default();
        println!(
            "output      {:<14} {}  max |err| {:.3e} (relative {:.3e}){expected}",
            o.name,
            if o.ok { "ok  " } else { "FAIL" },
            o.max_abs_err,
            o.max_rel_err
        );
    }
}

fn finish_run(
    m: &Machine,
    result: Result<RunResult, RunError>,
    format: Format,
    what: &str,
    roofline: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let r = match result {
        Ok(r) => r,
        Err(RunError::Lower(e)) => {
            report_lower_error(format, what, &m.name, &e);
            return Ok(ExitCode::from(EXIT_ERRORS));
        }
        Err(e) => {
            report_error(
                format,
                what,
                "run",
                &e.to_string(),
                None,
                serde_json::json!({}),
            );
            return Ok(ExitCode::from(EXIT_ERRORS));
        }
    };
    if let Some(path) = roofline {
        write_roofline(path, what, m, &r.compiled, r.report.cycles, &r.regions)?;
    }
    match format {
        Format::Human => print_run(m, &r),
        Format::Json => println!("{}", serde_json::to_string_pretty(&run_json(m, &r))?),
    }
    let ok = r.checks.iter().all(|c| c.ok);
    Ok(ExitCode::from(if ok { EXIT_OK } else { EXIT_ERRORS }))
}

/// `tessera run`.
pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let (t, m) = args.target.resolve()?;
    let mut options = args.inputs.options();
    if let Some(dir) = &args.data {
        data_shapes(dir, &mut options)?;
    }
    let Some(g) = load_model(
        &args.model,
        &options,
        args.format,
        &mut PassTimes::default(),
    )?
    else {
        return Ok(ExitCode::from(EXIT_ERRORS));
    };
    let (inputs, expected) = match &args.data {
        Some(dir) => read_data(dir, &g)?,
        None => (compiler::run::random_inputs(&g, args.seed), None),
    };
    let (result, tuned) = match args.tuning.compile(t, &m, &g, args.opts.options())? {
        Ok((c, tuned)) => (
            compiler::run::run_compiled(t, &m, &g, c, &inputs, expected.as_deref()),
            tuned,
        ),
        Err(e) => (Err(RunError::Lower(e)), None),
    };
    if let Some(tr) = &tuned
        && args.format == Format::Human
    {
        print!("{}", tune_text(tr));
    }
    finish_run(
        &m,
        result,
        args.format,
        &args.model.display().to_string(),
        args.roofline.as_deref(),
    )
}

/// The demo model (bundled in the binary) and its onnxruntime test data.
const DEMO_MODEL: &[u8] = include_bytes!("../../../../examples/mlp_medium/model.onnx");
const DEMO_INPUT: &[u8] =
    include_bytes!("../../../../examples/mlp_medium/test_data_set_0/input_0.pb");
const DEMO_OUTPUT: &[u8] =
    include_bytes!("../../../../examples/mlp_medium/test_data_set_0/output_0.pb");

/// `tessera demo`.
pub fn demo(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let Some(t) = targets::by_name(&args.target) else {
        anyhow::bail!(
            "unknown target `{}` (targets: {})",
            args.target,
            targets::names().join(", ")
        );
    };
    let m = t.machine().clone();
    println!(
        "Tessera demo: examples/mlp_medium (MatMul+Add+Relu 64->256->256->10, batch 4) on `{}`\n",
        m.name
    );
    let Some(g) = model_from_bytes(
        DEMO_MODEL.to_vec(),
        "examples/mlp_medium/model.onnx",
        &Default::default(),
        Format::Human,
        &mut PassTimes::default(),
    )?
    else {
        return Ok(ExitCode::from(EXIT_ERRORS));
    };
    print!("{g}");
    let input =
        compiler::onnx::read_tensor(DEMO_INPUT).map_err(|e| anyhow::anyhow!("demo input: {e}"))?;
    let output = compiler::onnx::read_tensor(DEMO_OUTPUT)
        .map_err(|e| anyhow::anyhow!("demo output: {e}"))?;
    let result = compiler::run::run(t, &m, &g, &[input], Some(&[output]));
    if let Ok(r) = &result {
        println!("\nfirst bundles of the program:");
        let text =
            isa_specs::assembly::disassemble(t.isa(), &m, &r.compiled.program).unwrap_or_default();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with(".data"))
            .take(16)
        {
            println!("  {line}");
        }
        println!("\nregions:");
        for (region, n) in &r.compiled.regions {
            println!("  {n:>6} instructions  {region}");
        }
        println!();
    }
    finish_run(&m, result, Format::Human, "demo", None)
}
