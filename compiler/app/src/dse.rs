//! Design-space exploration: hardware variants × models, evaluated with the
//! compiler and the timing-only simulator (`tessera dse`).
//!
//! A sweep file (RON, `targets/variants/*.ron`) names a base machine, the
//! values of its parameters to try (lists, ranges, powers of two; their
//! cartesian product), constraints between them, and alternative machines
//! (other shipped targets, with their own parameters). [`Sweep::expand`]
//! gives the variants in a fixed order, each with a stable id. Every
//! (variant, model) pair is compiled and simulated timing-only
//! ([`evaluate`]); results are appended to a JSONL file as each finishes, one
//! complete line each, so a killed run loses nothing written and a rerun
//! skips the pairs done ([`Results`]). `--shard i/n` runs the pairs whose
//! index is `i` modulo `n`; merging shards is concatenating their lines, and
//! the reports are made from the lines alone, sorted, so a merge gives
//! exactly the report of a single run ([`report`]).

use compiler::ir::Graph;
use compiler::lower;
use compiler::run;
use isa_specs::eval;
use isa_specs::model::Constraint;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Values of one parameter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Values {
    /// These values.
    List(Vec<i64>),
    /// `start, start + step, …` up to `end` inclusive.
    Range { start: i64, end: i64, step: i64 },
    /// The powers of two from `min` to `max` inclusive.
    Pow2 { min: i64, max: i64 },
}

impl Values {
    fn expand(&self) -> Result<Vec<i64>, String> {
        match self {
            Values::List(v) if v.is_empty() => Err("an empty list".into()),
            Values::List(v) => Ok(v.clone()),
            Values::Range { step, .. } if *step <= 0 => Err("a range needs a positive step".into()),
            Values::Range { start, end, step } => {
                let v: Vec<i64> = (*start..=*end).step_by(*step as usize).collect();
                if v.is_empty() {
                    Err(format!("the range {start}..={end} is empty"))
                } else {
                    Ok(v)
                }
            }
            Values::Pow2 { min, max } => {
                let v: Vec<i64> = (0..62)
                    .map(|p| 1i64 << p)
                    .filter(|x| x >= min && x <= max)
                    .collect();
                if v.is_empty() {
                    Err(format!("no power of two between {min} and {max}"))
                } else {
                    Ok(v)
                }
            }
        }
    }
}

/// An alternative machine: another shipped target with parameters of its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    pub target: String,
    #[serde(default)]
    pub params: BTreeMap<String, i64>,
}

/// A sweep file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    pub name: String,
    /// The machine whose parameters are swept.
    pub base: String,
    /// Parameter values; every combination is a variant.
    #[serde(default)]
    pub params: BTreeMap<String, Values>,
    /// Conditions a variant must meet (`SA_ROWS * SA_COLS <= 65536`), over
    /// its parameters (swept values, else the machine's defaults): each one
    /// comparison of two expressions of the description language, as in an
    /// instruction's `constraints` section.
    #[serde(default)]
    pub constraints: Vec<String>,
    /// Other machines to evaluate beside the sweep.
    #[serde(default)]
    pub alternatives: Vec<Alternative>,
}

/// One machine to evaluate.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Variant {
    /// `target:NAME=V,NAME=V` (stable: parameters sorted).
    pub id: String,
    pub target: String,
    pub params: BTreeMap<String, i64>,
}

impl Variant {
    fn new(target: &str, params: BTreeMap<String, i64>) -> Variant {
        let p: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Variant {
            id: format!("{target}:{}", p.join(",")),
            target: target.to_owned(),
            params,
        }
    }
}

/// A sweep expanded: the variants kept and, per constraint, how many it removed.
#[derive(Clone, Debug, PartialEq)]
pub struct Expanded {
    pub variants: Vec<Variant>,
    pub filtered: Vec<(String, usize)>,
}

impl Sweep {
    /// Reads a sweep file; errors carry the line and column.
    pub fn parse(text: &str) -> Result<Sweep, String> {
        ron::from_str(text)
            .map_err(|e| format!("{}:{}: {}", e.span.start.line, e.span.start.col, e.code))
    }

    /// Every variant in a fixed order (the cartesian product in parameter
    /// name order, last name fastest; then the alternatives), less those a
    /// constraint rules out.
    pub fn expand(&self) -> Result<Expanded, String> {
        let base = targets::by_name(&self.base)
            .ok_or_else(|| format!("unknown base machine `{}`", self.base))?;
        let defaults: BTreeMap<String, i64> = base
            .machine()
            .params
            .iter()
            .map(|p| (p.name.clone(), p.value))
            .collect();
        let mut axes = Vec::new();
        for (name, values) in &self.params {
            if !defaults.contains_key(name) {
                return Err(format!("`{}` has no parameter `{name}`", self.base));
            }
            axes.push((
                name.clone(),
                values
                    .expand()
                    .map_err(|e| format!("parameter `{name}`: {e}"))?,
            ));
        }
        // Constraints are the description language's (`a CMP b`), over the
        // machine's parameters: the `i`th name is variable `i`.
        let names: Vec<&str> = defaults.keys().map(String::as_str).collect();
        let constraints: Vec<Constraint> = self
            .constraints
            .iter()
            .map(|c| constraint(c, &names))
            .collect::<Result<_, _>>()?;
        let mut filtered: Vec<(String, usize)> =
            self.constraints.iter().map(|c| (c.clone(), 0)).collect();
        let mut variants = Vec::new();
        let total: usize = axes.iter().map(|(_, v)| v.len()).product();
        for mut k in 0..total {
            let mut params = BTreeMap::new();
            for (name, values) in axes.iter().rev() {
                params.insert(name.clone(), values[k % values.len()]);
                k /= values.len();
            }
            let values: Vec<i64> = defaults
                .iter()
                .map(|(n, d)| params.get(n).copied().unwrap_or(*d))
                .collect();
            let mut keep = true;
            for (c, f) in constraints.iter().zip(filtered.iter_mut()) {
                let holds = eval::holds(c, &eval::Params(&values)).map_err(|e| {
                    let v = Variant::new(&self.base, params.clone());
                    format!("constraint `{}`: {e} (variant `{}`)", f.0, v.id)
                })?;
                if !holds {
                    f.1 += 1;
                    keep = false;
                    break;
                }
            }
            if keep {
                variants.push(Variant::new(&self.base, params));
            }
        }
        for a in &self.alternatives {
            if targets::by_name(&a.target).is_none() {
                return Err(format!("unknown alternative machine `{}`", a.target));
            }
            variants.push(Variant::new(&a.target, a.params.clone()));
        }
        Ok(Expanded { variants, filtered })
    }
}

/// A sweep's constraint, `a CMP b` in the description language
/// ([`isa_specs::parse_constraint`]), over the variables `names`. A mistake
/// is an error naming the constraint and the column.
fn constraint(text: &str, names: &[&str]) -> Result<Constraint, String> {
    let parsed = isa_specs::parse_constraint(text);
    let syntax = parsed.is_err();
    parsed
        .and_then(|k| eval::resolve_constraint(&k, names))
        .map_err(|d| {
            let mut s = format!("constraint `{text}`");
            if let Some(p) = &d.primary {
                let before = text.get(..p.span.start as usize).unwrap_or(text);
                let _ = write!(s, ", column {}", before.chars().count() + 1);
            }
            let _ = write!(s, ": {}", d.message);
            let logic =
                text.contains("&&") || text.contains("||") || text.replace("!=", "").contains('!');
            if syntax && logic {
                s.push_str(
                    " (a constraint is one comparison: write `a && b` as two constraints, \
                     `!(a < b)` as `a >= b`, and `a <= x || b <= y` as `min(a - x, b - y) <= 0`)",
                );
            } else if let Some(h) = &d.help {
                let _ = write!(s, " ({h})");
            }
            s
        })
}

/// Area of a machine in mm²: units (per copy), memories and register files
/// as their descriptions give them.
pub fn area(m: &isa_specs::Machine) -> BTreeMap<String, f64> {
    let mut a = BTreeMap::new();
    for u in &m.units {
        a.insert(
            format!("unit {}", u.name),
            u.area.value * u.count.value.max(1) as f64,
        );
    }
    for x in &m.memories {
        a.insert(format!("memory {}", x.name), x.area.value);
    }
    for r in &m.regfiles {
        a.insert(format!("regfile {}", r.name), r.area.value);
    }
    a
}

/// The outcome of one (variant, model) pair: one JSONL line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub variant: String,
    pub target: String,
    pub params: BTreeMap<String, i64>,
    pub model: String,
    /// `ok`, `refused` (the machine cannot take the variant or the model) or `failed`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub cycles: u64,
    #[serde(default)]
    pub seconds: f64,
    #[serde(default)]
    pub energy_j: f64,
    #[serde(default)]
    pub area_mm2: f64,
    /// Per unit, the fraction of cycles busy.
    #[serde(default)]
    pub utilisation: BTreeMap<String, f64>,
    /// Per memory, bytes read and written.
    #[serde(default)]
    pub traffic: BTreeMap<String, u64>,
}

impl Record {
    fn key(&self) -> (String, String) {
        (self.variant.clone(), self.model.clone())
    }
}

/// Compiles `g` for the variant and simulates it timing-only.
pub fn evaluate(v: &Variant, model: &str, g: &Graph) -> Record {
    let mut r = Record {
        variant: v.id.clone(),
        target: v.target.clone(),
        params: v.params.clone(),
        model: model.to_owned(),
        status: "ok".into(),
        error: None,
        cycles: 0,
        seconds: 0.0,
        energy_j: 0.0,
        area_mm2: 0.0,
        utilisation: BTreeMap::new(),
        traffic: BTreeMap::new(),
    };
    let Some(t) = targets::by_name(&v.target) else {
        r.status = "refused".into();
        r.error = Some(format!("unknown machine `{}`", v.target));
        return r;
    };
    let overrides: Vec<(String, i64)> = v.params.iter().map(|(k, x)| (k.clone(), *x)).collect();
    let m = match t.with_params(&overrides) {
        Ok(m) => m,
        Err(e) => {
            r.status = "refused".into();
            // The description's diagnostics, on one line.
            r.error = Some(
                e.to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            );
            return r;
        }
    };
    r.area_mm2 = area(&m).values().sum();
    let c = match lower::compile(t, &m, g) {
        Ok(c) => c,
        Err(e) => {
            r.status = "refused".into();
            r.error = Some(e.to_string());
            return r;
        }
    };
    match run::timing(t, &m, &c) {
        Ok(rep) => {
            r.cycles = rep.cycles;
            r.seconds = rep.seconds;
            r.energy_j = rep.energy_pj * 1e-12;
            r.utilisation = rep
                .units
                .iter()
                .map(|u| (u.name.clone(), u.utilisation))
                .collect();
            for x in &rep.memories {
                r.traffic.insert(format!("{} read", x.name), x.bytes_read);
                r.traffic
                    .insert(format!("{} written", x.name), x.bytes_written);
            }
        }
        Err(e) => {
            r.status = "failed".into();
            r.error = Some(e.to_string());
        }
    }
    r
}

/// The JSONL file of a run: records read back (a torn last line, from a
/// killed run, is cut off), and new ones appended one complete line at a time.
#[derive(Debug)]
pub struct Results {
    path: PathBuf,
    pub records: Vec<Record>,
}

impl Results {
    /// Opens (or starts) `path`.
    pub fn open(path: &Path) -> Result<Results, String> {
        let mut records = Vec::new();
        if let Ok(text) = std::fs::read_to_string(path) {
            let mut good = 0;
            for line in text.split_inclusive('\n') {
                match (
                    line.ends_with('\n'),
                    serde_json::from_str::<Record>(line.trim_end()),
                ) {
                    (true, Ok(r)) => {
                        records.push(r);
                        good += line.len();
                    }
                    _ => break,
                }
            }
            if good < text.len() {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                f.set_len(good as u64)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        Ok(Results {
            path: path.to_owned(),
            records,
        })
    }

    /// The pairs already done.
    pub fn done(&self) -> BTreeSet<(String, String)> {
        self.records.iter().map(Record::key).collect()
    }

    /// Appends one record and flushes it.
    pub fn append(&mut self, r: Record) -> Result<(), String> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let line = serde_json::to_string(&r).map_err(|e| e.to_string())? + "\n";
        f.write_all(line.as_bytes())
            .and_then(|()| f.flush())
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.records.push(r);
        Ok(())
    }
}

/// What is minimised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    Latency,
    Energy,
    Edp,
    Throughput,
}

impl Objective {
    /// Smaller is better (throughput as seconds per inference).
    pub fn score(self, r: &Record) -> f64 {
        match self {
            Objective::Latency | Objective::Throughput => r.seconds,
            Objective::Energy => r.energy_j,
            Objective::Edp => r.energy_j * r.seconds,
        }
    }
}

/// One variant over every model: sums of latency and energy (ok pairs only).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    pub variant: String,
    pub params: BTreeMap<String, i64>,
    pub seconds: f64,
    pub energy_j: f64,
    pub area_mm2: f64,
    pub score: f64,
    pub pareto: bool,
}

/// A Pareto point checked by full simulation: the program run with data
/// (seeded inputs) against the reference interpreter.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verified {
    pub variant: String,
    pub model: String,
    /// Cycles of the functional simulation (the same program as timed).
    pub cycles: u64,
    /// Every output within tolerance of the interpreter; or why not.
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// At most this many Pareto points are simulated in full.
pub const VERIFY_FRONT: usize = 8;

/// Runs the first [`VERIFY_FRONT`] Pareto points (by latency) of `points`
/// on every model with data, checking the outputs.
pub fn verify_front(points: &[Point], models: &[(String, Graph)]) -> Vec<Verified> {
    let mut front: Vec<&Point> = points.iter().filter(|p| p.pareto).collect();
    front.sort_by(|a, b| {
        a.seconds
            .total_cmp(&b.seconds)
            .then_with(|| a.variant.cmp(&b.variant))
    });
    let mut out = Vec::new();
    for p in front.into_iter().take(VERIFY_FRONT) {
        let target = p.variant.split(':').next().unwrap_or_default();
        for (name, g) in models {
            let mut v = Verified {
                variant: p.variant.clone(),
                model: name.clone(),
                cycles: 0,
                ok: false,
                error: None,
            };
            let overrides: Vec<(String, i64)> =
                p.params.iter().map(|(k, x)| (k.clone(), *x)).collect();
            match targets::by_name(target).map(|t| (t, t.with_params(&overrides))) {
                Some((t, Ok(m))) => match run::run(t, &m, g, &run::random_inputs(g, 1), None) {
                    Ok(r) => {
                        v.cycles = r.report.cycles;
                        v.ok = r.checks.iter().all(|c| c.ok);
                    }
                    Err(e) => v.error = Some(e.to_string()),
                },
                Some((_, Err(e))) => v.error = Some(e.to_string()),
                None => v.error = Some(format!("unknown machine `{target}`")),
            }
            out.push(v);
        }
    }
    out
}

/// The reports of a set of records (sorted first, so the order they were
/// written in does not matter): CSV, Markdown and JSON, into `dir`; with
/// `models`, the Pareto front is also simulated in full ([`verify_front`]).
pub fn report(
    records: &[Record],
    objective: Objective,
    dir: &Path,
    graphs: &[(String, Graph)],
) -> Result<Vec<Point>, String> {
    let mut recs: Vec<Record> = records.to_vec();
    recs.sort_by_key(|a| a.key());
    recs.dedup_by(|a, b| a.key() == b.key());
    let models: BTreeSet<&str> = recs.iter().map(|r| r.model.as_str()).collect();
    let mut by_variant: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in &recs {
        by_variant.entry(&r.variant).or_default().push(r);
    }
    let mut points: Vec<Point> = by_variant
        .values()
        .filter(|rs| rs.len() == models.len() && rs.iter().all(|r| r.status == "ok"))
        .map(|rs| Point {
            variant: rs[0].variant.clone(),
            params: rs[0].params.clone(),
            seconds: rs.iter().map(|r| r.seconds).sum(),
            energy_j: rs.iter().map(|r| r.energy_j).sum(),
            area_mm2: rs[0].area_mm2,
            score: rs.iter().map(|r| objective.score(r)).sum(),
            pareto: false,
        })
        .collect();
    let dominated = |p: &Point, q: &Point| {
        q.seconds <= p.seconds
            && q.energy_j <= p.energy_j
            && q.area_mm2 <= p.area_mm2
            && (q.seconds < p.seconds || q.energy_j < p.energy_j || q.area_mm2 < p.area_mm2)
    };
    let flags: Vec<bool> = points
        .iter()
        .map(|p| !points.iter().any(|q| dominated(p, q)))
        .collect();
    for (p, f) in points.iter_mut().zip(flags) {
        p.pareto = f;
    }
    points.sort_by(|a, b| {
        a.score
            .total_cmp(&b.score)
            .then_with(|| a.variant.cmp(&b.variant))
    });
    let verified = verify_front(&points, graphs);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .map_err(|e| format!("{}: {e}", dir.join(name).display()))
    };
    let mut csv =
        String::from("variant,target,model,status,cycles,seconds,energy_j,area_mm2,error\n");
    for r in &recs {
        let _ = writeln!(
            csv,
            "\"{}\",{},\"{}\",{},{},{:e},{:e},{:.4},\"{}\"",
            r.variant,
            r.target,
            r.model,
            r.status,
            r.cycles,
            r.seconds,
            r.energy_j,
            r.area_mm2,
            r.error.clone().unwrap_or_default().replace('"', "'")
        );
    }
    write("results.csv", &csv)?;
    write(
        "results.json",
        &serde_json::to_string_pretty(
            &serde_json::json!({"objective": objective, "records": recs, "points": points, "verified": verified}),
        )
        .map_err(|e| e.to_string())?,
    )?;
    let md = markdown(&recs, &points, objective, &verified);
    write("report.md", &md)?;
    write(
        "pareto-latency-energy.svg",
        &scatter(&points, "latency (µs)", "energy (µJ)", |p| {
            (p.seconds * 1e6, p.energy_j * 1e6)
        })?,
    )?;
    write(
        "pareto-latency-area.svg",
        &scatter(&points, "latency (µs)", "area (mm²)", |p| {
            (p.seconds * 1e6, p.area_mm2)
        })?,
    )?;
    write("report.html", &html(&md)?)?;
    Ok(points)
}

fn markdown(
    recs: &[Record],
    points: &[Point],
    objective: Objective,
    verified: &[Verified],
) -> String {
    let mut s = String::from("# Design-space exploration\n\n");
    let ok = recs.iter().filter(|r| r.status == "ok").count();
    let _ = writeln!(
        s,
        "{} pairs: {ok} evaluated, {} refused or failed; {} variants complete over every model; objective: {objective:?} (summed over the models).\n",
        recs.len(),
        recs.len() - ok,
        points.len()
    );
    s.push_str("## Best variants\n\n| rank | variant | latency (µs) | energy (µJ) | area (mm²) | Pareto |\n|---|---|---|---|---|---|\n");
    for (i, p) in points.iter().take(10).enumerate() {
        let _ = writeln!(
            s,
            "| {} | `{}` | {:.2} | {:.2} | {:.2} | {} |",
            i + 1,
            p.variant,
            p.seconds * 1e6,
            p.energy_j * 1e6,
            p.area_mm2,
            if p.pareto { "yes" } else { "" }
        );
    }
    s.push_str("\n## Pareto front (latency, energy, area)\n\n| variant | latency (µs) | energy (µJ) | area (mm²) |\n|---|---|---|---|\n");
    let mut front: Vec<&Point> = points.iter().filter(|p| p.pareto).collect();
    front.sort_by(|a, b| {
        a.seconds
            .total_cmp(&b.seconds)
            .then_with(|| a.variant.cmp(&b.variant))
    });
    for p in front {
        let _ = writeln!(
            s,
            "| `{}` | {:.2} | {:.2} | {:.2} |",
            p.variant,
            p.seconds * 1e6,
            p.energy_j * 1e6,
            p.area_mm2
        );
    }
    if !verified.is_empty() {
        s.push_str("\nThe front simulated in full, with data, against the reference interpreter:\n\n| variant | model | cycles | outputs |\n|---|---|---|---|\n");
        for v in verified {
            let what = match (&v.error, v.ok) {
                (Some(e), _) => e.clone(),
                (None, true) => "match".into(),
                (None, false) => "DIFFER".into(),
            };
            let _ = writeln!(
                s,
                "| `{}` | `{}` | {} | {what} |",
                v.variant, v.model, v.cycles
            );
        }
    }
    s.push_str("\n## Sensitivity\n\nPer parameter and value: the geometric mean of the objective over the variants with that value, relative to the best value's (1.00 = the best).\n\n");
    let names: BTreeSet<&String> = points.iter().flat_map(|p| p.params.keys()).collect();
    for n in names {
        let mut per: BTreeMap<i64, (f64, usize)> = BTreeMap::new();
        for p in points.iter().filter(|p| p.score > 0.0) {
            if let Some(v) = p.params.get(n) {
                let e = per.entry(*v).or_insert((0.0, 0));
                e.0 += p.score.ln();
                e.1 += 1;
            }
        }
        let means: Vec<(i64, f64)> = per
            .iter()
            .map(|(v, (l, c))| (*v, (l / *c as f64).exp()))
            .collect();
        let best = means.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
        let cells: Vec<String> = means
            .iter()
            .map(|(v, m)| format!("{v}: {:.2}", m / best))
            .collect();
        let _ = writeln!(s, "- `{n}`: {}", cells.join(", "));
    }
    if let Some(best) = points.first() {
        let _ = writeln!(
            s,
            "\n## The best variant, `{}`\n\n| model | cycles | unit utilisation | memory traffic (bytes) |\n|---|---|---|---|",
            best.variant
        );
        for r in recs.iter().filter(|r| r.variant == best.variant) {
            let u: Vec<String> = r
                .utilisation
                .iter()
                .filter(|(_, x)| **x > 0.0)
                .map(|(k, x)| format!("{k} {:.0}%", x * 100.0))
                .collect();
            let t: Vec<String> = r
                .traffic
                .iter()
                .filter(|(_, x)| **x > 0)
                .map(|(k, x)| format!("{k} {x}"))
                .collect();
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} |",
                r.model,
                r.cycles,
                u.join(", "),
                t.join(", ")
            );
        }
    }
    s
}

/// A scatter plot of every complete variant, the Pareto front in red (SVG).
fn scatter(
    points: &[Point],
    x: &str,
    y: &str,
    at: fn(&Point) -> (f64, f64),
) -> Result<String, String> {
    use plotters::prelude::*;
    let xy: Vec<((f64, f64), bool)> = points.iter().map(|p| (at(p), p.pareto)).collect();
    let span = |v: Vec<f64>| {
        let (lo, hi) = v
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                (a.min(*x), b.max(*x))
            });
        if lo.is_finite() && hi > lo {
            (lo - (hi - lo) * 0.05, hi + (hi - lo) * 0.05)
        } else if lo.is_finite() {
            (lo * 0.9, lo * 1.1 + 1e-9)
        } else {
            (0.0, 1.0)
        }
    };
    let (x0, x1) = span(xy.iter().map(|p| p.0.0).collect());
    let (y0, y1) = span(xy.iter().map(|p| p.0.1).collect());
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (800, 560)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{y} against {x}: every variant, the Pareto front in red"),
                ("sans-serif", 16),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc(x)
            .y_desc(y)
            .draw()
            .map_err(e)?;
        chart
            .draw_series(
                xy.iter()
                    .filter(|p| !p.1)
                    .map(|p| Circle::new(p.0, 3, BLUE.mix(0.5).filled())),
            )
            .map_err(e)?;
        chart
            .draw_series(
                xy.iter()
                    .filter(|p| p.1)
                    .map(|p| Circle::new(p.0, 5, RED.filled())),
            )
            .map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(out)
}

/// The Markdown report as an HTML page (handlebars template), with the plots.
fn html(md: &str) -> Result<String, String> {
    let mut body = String::new();
    let mut table = false;
    for line in md.lines() {
        let cells = |l: &str, tag: &str| {
            l.trim_matches('|')
                .split('|')
                .map(|c| format!("<{tag}>{}</{tag}>", escape(c.trim())))
                .collect::<String>()
        };
        if line.starts_with('|') {
            if line.starts_with("|---") {
                continue;
            }
            if !table {
                body.push_str(&format!("<table><tr>{}</tr>\n", cells(line, "th")));
                table = true;
            } else {
                body.push_str(&format!("<tr>{}</tr>\n", cells(line, "td")));
            }
            continue;
        }
        if table {
            body.push_str("</table>\n");
            table = false;
        }
        if let Some(h) = line.strip_prefix("## ") {
            body.push_str(&format!("<h2>{}</h2>\n", escape(h)));
        } else if line.starts_with("# ") {
        } else if let Some(item) = line.strip_prefix("- ") {
            body.push_str(&format!("<p>{}</p>\n", escape(item)));
        } else if !line.is_empty() {
            body.push_str(&format!("<p>{}</p>\n", escape(line)));
        }
    }
    if table {
        body.push_str("</table>\n");
    }
    let mut hb = handlebars::Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_template_string("report", HTML)
        .map_err(|e| e.to_string())?;
    hb.render("report", &serde_json::json!({ "body": body }))
        .map_err(|e| e.to_string())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "")
}

const HTML: &str = r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Design-space exploration</title>
<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}</style>
</head><body>
<h1>Design-space exploration</h1>
<p><img src="pareto-latency-energy.svg" alt="energy against latency"> <img src="pareto-latency-area.svg" alt="area against latency"></p>
{{{body}}}
</body></html>
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep of vliw-systolic whose grid sits on both sides of every
    /// constraint below (odd bandwidths exercise truncating division).
    fn sweep(constraints: &[&str]) -> Sweep {
        Sweep {
            name: "constraints".into(),
            base: "vliw-systolic".into(),
            params: [
                ("SA_ROWS", vec![32, 64, 128, 256]),
                ("MXUS", vec![1, 2, 4, 8]),
                ("DMA_ENGINES", vec![1, 2, 3]),
                (
                    "HBM_GBPS",
                    vec![599, 600, 1074, 1075, 1076, 1077, 2150, 2151, 2152, 3226],
                ),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Values::List(v)))
            .collect(),
            constraints: constraints.iter().map(|c| (*c).to_owned()).collect(),
            alternatives: Vec::new(),
        }
    }

    /// A variant's value of a parameter: swept, else the machine's default.
    fn value(params: &BTreeMap<String, i64>, name: &str) -> i64 {
        params.get(name).copied().unwrap_or_else(|| {
            let m = targets::by_name("vliw-systolic")
                .expect("machine")
                .machine();
            m.params
                .iter()
                .find(|p| p.name == name)
                .map(|p| p.value)
                .expect("a parameter of vliw-systolic")
        })
    }

    /// A variant's parameter values by name.
    type Lookup<'a> = &'a dyn Fn(&str) -> i64;

    /// Expanding with `constraint` keeps exactly the variants `rule` holds for,
    /// and counts the others as removed by it.
    fn same(constraint: &str, rule: &dyn Fn(Lookup<'_>) -> bool) {
        let all = sweep(&[]).expand().expect("expands").variants;
        let want: Vec<Variant> = all
            .iter()
            .filter(|v| rule(&|n| value(&v.params, n)))
            .cloned()
            .collect();
        assert!(
            !want.is_empty() && want.len() < all.len(),
            "`{constraint}` should keep some variants and remove others"
        );
        let got = sweep(&[constraint]).expand().expect(constraint);
        assert_eq!(got.variants, want, "{constraint}");
        assert_eq!(
            got.filtered,
            vec![(constraint.to_owned(), all.len() - want.len())]
        );
    }

    #[test]
    fn the_constraints_of_the_shipped_sweeps_and_docs_keep_their_meaning() {
        // targets/variants/vliw-systolic-small.ron
        same("SA_ROWS * MXUS <= 256", &|v| {
            v("SA_ROWS") * v("MXUS") <= 256
        });
        // targets/variants/vliw-systolic-gpt2.ron and docs/performance.md
        same("SA_ROWS * 128 * MXUS <= 131072", &|v| {
            v("SA_ROWS") * 128 * v("MXUS") <= 131072
        });
        same("DMA_ENGINES * 512 * 1050 / 1000 >= HBM_GBPS / 2", &|v| {
            v("DMA_ENGINES") * 512 * 1050 / 1000 >= v("HBM_GBPS") / 2
        });
        // The `Sweep` documentation: SA_COLS is not swept, its default counts.
        same("SA_ROWS * SA_COLS <= 16384", &|v| {
            v("SA_ROWS") * v("SA_COLS") <= 16384
        });
    }

    #[test]
    fn constraint_operators_precedence_and_arithmetic() {
        same("SA_ROWS < 128", &|v| v("SA_ROWS") < 128);
        same("SA_ROWS > 64", &|v| v("SA_ROWS") > 64);
        same("SA_ROWS <= 64", &|v| v("SA_ROWS") <= 64);
        same("SA_ROWS >= 128", &|v| v("SA_ROWS") >= 128);
        same("MXUS == 4", &|v| v("MXUS") == 4);
        same("MXUS != 4", &|v| v("MXUS") != 4);
        // No spaces; an expression on both sides.
        same("SA_ROWS*MXUS<=256", &|v| v("SA_ROWS") * v("MXUS") <= 256);
        same("SA_ROWS - 64 < MXUS * 16", &|v| {
            v("SA_ROWS") - 64 < v("MXUS") * 16
        });
        // `*` before `+`, parentheses, left to right within a level.
        same("SA_ROWS + MXUS * 64 <= 300", &|v| {
            v("SA_ROWS") + v("MXUS") * 64 <= 300
        });
        same("(SA_ROWS + MXUS) * 2 <= 300", &|v| {
            (v("SA_ROWS") + v("MXUS")) * 2 <= 300
        });
        same("HBM_GBPS - SA_ROWS - MXUS > 900", &|v| {
            v("HBM_GBPS") - v("SA_ROWS") - v("MXUS") > 900
        });
        same("HBM_GBPS / MXUS / DMA_ENGINES >= 300", &|v| {
            v("HBM_GBPS") / v("MXUS") / v("DMA_ENGINES") >= 300
        });
        same("SA_ROWS * MXUS % 3 == 1", &|v| {
            v("SA_ROWS") * v("MXUS") % 3 == 1
        });
        // Integer division truncates.
        same("HBM_GBPS / 600 * 600 >= HBM_GBPS", &|v| {
            v("HBM_GBPS") / 600 * 600 >= v("HBM_GBPS")
        });
        same("HBM_GBPS % 2 == 0", &|v| v("HBM_GBPS") % 2 == 0);
        // Unary minus.
        same("-SA_ROWS * MXUS >= -256", &|v| {
            -v("SA_ROWS") * v("MXUS") >= -256
        });
        same("0 - MXUS < -2", &|v| -v("MXUS") < -2);
    }

    #[test]
    fn several_constraints_count_what_each_removed_first() {
        let x = sweep(&["SA_ROWS * MXUS <= 256", "MXUS <= 2"])
            .expand()
            .expect("expands");
        let all = sweep(&[]).expand().expect("expands").variants;
        let first = all
            .iter()
            .filter(|v| v.params["SA_ROWS"] * v.params["MXUS"] > 256)
            .count();
        let kept = all
            .iter()
            .filter(|v| v.params["SA_ROWS"] * v.params["MXUS"] <= 256 && v.params["MXUS"] <= 2)
            .count();
        assert_eq!(x.variants.len(), kept);
        assert_eq!(
            x.filtered,
            vec![
                ("SA_ROWS * MXUS <= 256".to_owned(), first),
                ("MXUS <= 2".to_owned(), all.len() - kept - first),
            ]
        );
    }

    #[test]
    fn bad_constraints_are_errors_naming_the_constraint() {
        let err = |c: &str| sweep(&[c]).expand().expect_err(c);
        for c in [
            "SA_ROWS <",
            "SA_ROWS <= 64)",
            "(SA_ROWS <= 64",
            "SA_ROWS <= 64 $",
            "",
            "SA_ROWS / (MXUS - MXUS) > 1",
            "SA_ROWS * 9223372036854775807 > 1",
        ] {
            assert!(
                err(c).contains(&format!("constraint `{c}`")),
                "{c}: {}",
                err(c)
            );
        }
        assert!(err("FOO > 1").contains("no parameter `FOO`"));
        assert!(err("SA_ROWS / (MXUS - MXUS) > 1").contains("division by zero"));
    }

    #[test]
    fn constraint_errors_give_the_column_and_what_to_do() {
        let err = |c: &str| sweep(&[c]).expand().expect_err(c);
        assert_eq!(
            err("SA_ROWS <"),
            "constraint `SA_ROWS <`, column 10: expected an expression, found the end of the \
             constraint (see docs/isa-language.md for the syntax)"
        );
        assert!(
            err("SA_ROWS <= 64 $").starts_with("constraint `SA_ROWS <= 64 $`, column 15: "),
            "{}",
            err("SA_ROWS <= 64 $")
        );
        assert_eq!(
            err("MXUS * SA_ROW <= 256"),
            "constraint `MXUS * SA_ROW <= 256`, column 8: no parameter `SA_ROW` \
             (did you mean `SA_ROWS`?)"
        );
        assert!(err("FOO > 1").starts_with("constraint `FOO > 1`, column 1: no parameter `FOO`"));
        assert!(err("frob(MXUS) > 1").contains("column 1: unknown function `frob`"));
        // The logical operators of the former constraint language.
        for c in [
            "MXUS < 4 && SA_ROWS < 128",
            "MXUS < 4 || SA_ROWS < 128",
            "!(MXUS < 4)",
        ] {
            assert!(
                err(c)
                    .contains("a constraint is one comparison: write `a && b` as two constraints"),
                "{}",
                err(c)
            );
        }
        // An evaluation error names the variant.
        assert!(
            err("SA_ROWS / (MXUS - MXUS) > 1").ends_with(
                "division by zero (variant `vliw-systolic:DMA_ENGINES=1,HBM_GBPS=599,MXUS=1,SA_ROWS=32`)"
            ),
            "{}",
            err("SA_ROWS / (MXUS - MXUS) > 1")
        );
    }

    #[test]
    fn constraints_take_the_description_languages_functions_and_numbers() {
        // `a || b` as the docs suggest, functions, reals, size suffixes.
        same("min(MXUS - 2, SA_ROWS - 64) <= 0", &|v| {
            v("MXUS") <= 2 || v("SA_ROWS") <= 64
        });
        same("max(SA_ROWS, MXUS * 64) <= 128", &|v| {
            v("SA_ROWS").max(v("MXUS") * 64) <= 128
        });
        same("log2(SA_ROWS) + log2(MXUS) <= 8", &|v| {
            v("SA_ROWS") * v("MXUS") <= 256
        });
        same("SA_ROWS * 0.5 >= 64", &|v| v("SA_ROWS") >= 128);
        same("SA_ROWS * MXUS * 1 KiB <= 0x4_0000", &|v| {
            v("SA_ROWS") * v("MXUS") <= 256
        });
        // Parameters that are not swept keep the machine's default.
        same("SA_ROWS <= SA_COLS", &|v| v("SA_ROWS") <= 128);
    }
}
