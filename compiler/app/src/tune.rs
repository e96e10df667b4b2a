//! `--tune`: the mappings of a model's matrix products chosen by measuring
//! candidates on the timing-only simulator instead of trusting the
//! analytical estimate alone.
//!
//! The compiler's own choice is compiled and timed first. Then, round by
//! round, every product takes its next-best mapping by estimate (from its
//! tuning space, [`compiler::lower::mapping`]); the whole model is compiled and
//! timed, and each product keeps the mapping under which its own region took
//! the fewest cycles. Rounds stop when the candidates run out or the
//! time budget is spent. The combination is compiled once more and kept only
//! if the whole model is no slower than the compiler's own choice (regions
//! interact through buffers and the schedule), so tuning never makes a model
//! slower.

use compiler::ir::Graph;
use compiler::lower::mapping::{Mapping, Mappings};
use compiler::lower::{self, Compiled, LowerError, Options};
use compiler::run;
use isa_specs::Machine;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What to try, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Stop starting rounds after this long.
    pub time: Duration,
    /// At most this many alternative mappings per product.
    pub candidates: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            time: Duration::from_secs(30),
            candidates: 8,
        }
    }
}

/// One product's outcome.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Tuned {
    pub node: String,
    /// The compiler's own mapping and its region's cycles.
    pub default: Mapping,
    pub default_cycles: u64,
    /// The best measured, and its region's cycles.
    pub best: Mapping,
    pub best_cycles: u64,
    /// Mappings measured for it (the default included).
    pub measured: usize,
}

/// What tuning did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TuneReport {
    /// Whole-model cycles with the compiler's own mappings.
    pub default_cycles: u64,
    /// Whole-model cycles with the mappings kept.
    pub tuned_cycles: u64,
    /// Whole-model cycles of the best mappings measured, combined (kept
    /// only if no more than `default_cycles`).
    pub combined_cycles: Option<u64>,
    /// Compilations and timing simulations run.
    pub evaluations: usize,
    /// Rounds that failed to compile or simulate (their mappings skipped).
    pub failed: usize,
    /// Seconds spent.
    pub seconds: f64,
    /// Whether the time budget stopped it before the candidates ran out.
    pub out_of_time: bool,
    /// Per product.
    pub products: Vec<Tuned>,
    /// The mappings kept (empty when the compiler's own choice won).
    pub mappings: Mappings,
}

/// Cycles of each product's region, by node name, from one timed compile.
fn product_cycles(
    t: &targets::Target,
    m: &Machine,
    c: &Compiled,
) -> Result<(u64, BTreeMap<String, u64>), String> {
    let report = run::timing(t, m, c).map_err(|e| e.to_string())?;
    let regions = run::regions(c, m, &report);
    let mut per = BTreeMap::new();
    for s in &c.space {
        // A product's region names it as `MatMul(node)`; a product merged
        // into a larger region (attention) is not measured on its own.
        let tag = format!("MatMul({})", s.node);
        let hits: Vec<&run::RegionRun> = regions
            .iter()
            .filter(|r| r.region.starts_with(&tag))
            .collect();
        if let [r] = hits.as_slice() {
            per.insert(s.node.clone(), r.cycles);
        }
    }
    Ok((report.cycles, per))
}

/// Tunes the products of `g` for machine `m` (see the module doc). Returns
/// the program compiled with the mappings kept, and the report.
pub fn tune(
    t: &targets::Target,
    m: &Machine,
    g: &Graph,
    opts: Options,
    budget: Budget,
) -> Result<(Compiled, TuneReport), LowerError> {
    let started = Instant::now();
    let base = lower::compile_with(t, m, g, opts)?;
    let (default_cycles, base_per) = product_cycles(t, m, &base).map_err(lower_err)?;
    let mut evaluations = 1;
    let mut failed = 0;
    // Per product: its default, its best so far, how many measured.
    let mut state: BTreeMap<String, Tuned> = base
        .space
        .iter()
        .filter_map(|s| {
            let cycles = *base_per.get(&s.node)?;
            Some((
                s.node.clone(),
                Tuned {
                    node: s.node.clone(),
                    default: s.chosen.clone(),
                    default_cycles: cycles,
                    best: s.chosen.clone(),
                    best_cycles: cycles,
                    measured: 1,
                },
            ))
        })
        .collect();
    // The alternatives of each product, best estimate first.
    let alternatives: BTreeMap<String, Vec<Mapping>> = base
        .space
        .iter()
        .filter(|s| state.contains_key(&s.node))
        .map(|s| {
            let alts = s
                .ranked
                .iter()
                .map(|r| r.mapping.clone())
                .filter(|x| *x != s.chosen)
                .take(budget.candidates)
                .collect();
            (s.node.clone(), alts)
        })
        .collect();
    let rounds = alternatives.values().map(Vec::len).max().unwrap_or(0);
    let mut out_of_time = false;
    for round in 0..rounds {
        if started.elapsed() >= budget.time {
            out_of_time = true;
            break;
        }
        let mut trial = Mappings {
            target: Some(m.name.clone()),
            mappings: BTreeMap::new(),
        };
        for (node, alts) in &alternatives {
            if let Some(x) = alts.get(round) {
                trial.mappings.insert(node.clone(), x.clone());
            }
        }
        // A mapping the machine cannot take names its node: the round goes
        // on without it.
        let per = loop {
            evaluations += 1;
            match lower::compile_mapped(t, m, g, opts, &trial) {
                Ok(c) => break product_cycles(t, m, &c).ok(),
                Err(e) => {
                    failed += 1;
                    match e.node().and_then(|n| trial.mappings.remove(n)) {
                        Some(_) if !trial.mappings.is_empty() => continue,
                        _ => break None,
                    }
                }
            }
        };
        let Some((_, per)) = per else {
            continue;
        };
        for (node, x) in &trial.mappings {
            let (Some(st), Some(&cycles)) = (state.get_mut(node), per.get(node)) else {
                continue;
            };
            st.measured += 1;
            if cycles < st.best_cycles {
                st.best_cycles = cycles;
                st.best = x.clone();
            }
        }
    }
    let chosen = Mappings {
        target: Some(m.name.clone()),
        mappings: state
            .values()
            .filter(|s| s.best != s.default)
            .map(|s| (s.node.clone(), s.best.clone()))
            .collect(),
    };
    let mut kept = (base, default_cycles, Mappings::default());
    let mut combined_cycles = None;
    if !chosen.mappings.is_empty() {
        evaluations += 1;
        let tuned = lower::compile_mapped(t, m, g, opts, &chosen)
            .map_err(|e| e.to_string())
            .and_then(|c| product_cycles(t, m, &c).map(|(cy, _)| (c, cy)));
        match tuned {
            Ok((c, cycles)) => {
                combined_cycles = Some(cycles);
                if cycles <= default_cycles {
                    kept = (c, cycles, chosen);
                }
            }
            Err(_) => failed += 1,
        }
    }
    let (compiled, tuned_cycles, mappings) = kept;
    let report = TuneReport {
        default_cycles,
        tuned_cycles,
        combined_cycles,
        evaluations,
        failed,
        seconds: started.elapsed().as_secs_f64(),
        out_of_time,
        products: state.into_values().collect(),
        mappings,
    };
    Ok((compiled, report))
}

fn lower_err(message: String) -> LowerError {
    LowerError::from(format!("timing simulation while tuning: {message}"))
}
