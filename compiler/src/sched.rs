//! List scheduling into VLIW bundles, and its independent checker.
//!
//! The scheduler takes instructions in program order and packs them into
//! bundles using only the machine model and the generated tables (slots,
//! units, occupancy, latency through [`Isa`]; reads and writes through the
//! target's generated access sets). Dependencies:
//! - read after write: the reader issues no earlier than the writer's latency;
//! - write after write: the later write lands after the earlier one;
//! - write after read: the writer issues after the reader;
//! - nothing moves above a wait, a fence, a halt, a signal or an
//!   asynchronous transfer; fences, halts and signals of synchronous units
//!   stay after everything before them (a wait may move up: it only delays);
//!
//! - a wait comes after the instruction signalling its semaphore has completed.
//!
//! On interlocked machines the empty bundles that spacing leaves are dropped
//! (the hardware stalls by itself); on exposed machines they stay.
//!
//! Among the instructions whose dependencies are met, the one with the longest
//! latency-weighted path to the end goes first (critical-path list
//! scheduling). A slot takes one instruction per bundle; a unit copy is busy
//! for the instruction's occupancy (until it finishes if not pipelined).
//!
//! [`check`] replays a schedule against the same rules, independently of how it
//! was built.

use isa_specs::Machine;
use isa_specs::model::{Hazards, SlotId};
use isa_specs::target::{Bundle, MInst};
use targets::sim::{Effects, Place};

/// One instruction's scheduling facts.
#[derive(Clone, Debug)]
struct Info {
    unit: usize,
    slots: Vec<SlotId>,
    latency: u64,
    busy: u64,
    /// Must come after everything earlier (fences, halts, signals of synchronous units).
    after_all: bool,
    /// Everything later must come after it (waits, fences, halts, signals, asynchronous transfers).
    before_all: bool,
    reads: Vec<Place>,
    writes: Vec<Place>,
    signals: Vec<(usize, u32)>,
    waits: Vec<(usize, u32)>,
}

/// An edge: `to` may issue no earlier than `from`'s issue plus `delay`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Edge {
    from: usize,
    to: usize,
    delay: u64,
    /// A wait on what `from` signals: the machine enforces it by stalling.
    signal: bool,
}

fn overlaps(a: &Place, b: &Place) -> bool {
    match (a, b) {
        (Place::Reg { file: f1, reg: r1 }, Place::Reg { file: f2, reg: r2 }) => {
            f1 == f2 && r1 == r2
        }
        (
            Place::Mem {
                mem: m1,
                start: s1,
                end: e1,
            },
            Place::Mem {
                mem: m2,
                start: s2,
                end: e2,
            },
        ) => m1 == m2 && s1 < e2 && s2 < e1,
        _ => false,
    }
}

fn infos(t: &targets::Target, m: &Machine, insts: &[MInst]) -> Vec<Info> {
    let isa = t.isa();
    let mut fx = Effects::default();
    insts
        .iter()
        .map(|i| {
            t.effects(m, i, &mut fx);
            let def = &m.instructions[i.inst.index()];
            let unit = &m.units[def.timing.unit.index()];
            let latency = isa.latency(m, i).max(1) as u64;
            let occupancy = isa.occupancy(m, i).max(1) as u64;
            Info {
                unit: def.timing.unit.index(),
                slots: def.timing.slots.clone(),
                latency,
                busy: if unit.pipelined {
                    occupancy
                } else {
                    occupancy.max(latency)
                },
                after_all: fx.fence || fx.halt || (!unit.asynchronous && !fx.signals.is_empty()),
                before_all: unit.asynchronous
                    || !fx.signals.is_empty()
                    || !fx.waits.is_empty()
                    || fx.fence
                    || fx.halt,
                reads: fx
                    .accesses
                    .iter()
                    .filter(|a| !a.write)
                    .map(|a| a.place)
                    .collect(),
                writes: fx
                    .accesses
                    .iter()
                    .filter(|a| a.write)
                    .map(|a| a.place)
                    .collect(),
                signals: fx.signals.clone(),
                waits: fx.waits.clone(),
            }
        })
        .collect()
}

fn edges(infos: &[Info]) -> Vec<Edge> {
    let mut out = Vec::new();
    for to in 0..infos.len() {
        for from in 0..to {
            let (a, b) = (&infos[from], &infos[to]);
            let raw = a
                .writes
                .iter()
                .any(|w| b.reads.iter().any(|r| overlaps(w, r)));
            let waw = a
                .writes
                .iter()
                .any(|w| b.writes.iter().any(|x| overlaps(w, x)));
            let war = a
                .reads
                .iter()
                .any(|r| b.writes.iter().any(|w| overlaps(r, w)));
            let mut delay = None::<u64>;
            let signal = a.signals.iter().any(|s| b.waits.contains(s));
            let mut need = |d: u64| delay = Some(delay.map_or(d, |x| x.max(d)));
            if a.before_all || b.after_all {
                // Program order only: the simulator stalls waits and fences until what they wait for is done.
                need(1);
            }
            if raw || waw {
                // The value (or the earlier write) must have landed.
                need(a.latency);
            }
            if signal {
                // A wait is satisfied when the signalling instruction completes.
                need(a.latency);
            }
            if war {
                need(1);
            }
            if let Some(delay) = delay {
                out.push(Edge {
                    from,
                    to,
                    delay,
                    signal,
                });
            }
        }
    }
    out
}

/// Longest latency-weighted path from each instruction to the end (edges only point forward in program order).
fn priorities(infos: &[Info], edges: &[Edge]) -> Vec<u64> {
    let mut prio: Vec<u64> = infos.iter().map(|i| i.latency).collect();
    // Edges come out of `edges` ordered by `to`; visit them by decreasing `from`.
    let mut by_from: Vec<&Edge> = edges.iter().collect();
    by_from.sort_by_key(|e| std::cmp::Reverse(e.from));
    for e in by_from {
        prio[e.from] = prio[e.from].max(e.delay + prio[e.to]);
    }
    prio
}

/// Packs instructions (in program order) into bundles for machine `m` of target `t`.
pub fn schedule(t: &targets::Target, m: &Machine, insts: &[MInst]) -> Vec<Bundle> {
    let infos = infos(t, m, insts);
    let edges = edges(&infos);
    let prio = priorities(&infos, &edges);
    let mut issue: Vec<Option<u64>> = vec![None; insts.len()];
    let mut unit_free: Vec<Vec<u64>> = m
        .units
        .iter()
        .map(|u| vec![0; u.count.value.max(1) as usize])
        .collect();
    let mut bundles: Vec<Bundle> = Vec::new();
    let mut has_wait: Vec<bool> = Vec::new();
    let mut preds: Vec<Vec<&Edge>> = vec![Vec::new(); insts.len()];
    for e in &edges {
        preds[e.to].push(e);
    }
    let mut waiting: Vec<usize> = (0..insts.len()).collect();
    let mut cycle = 0u64;
    while !waiting.is_empty() {
        let mut used_slots: Vec<SlotId> = Vec::new();
        let mut bundle = Bundle::default();
        let mut ready: Vec<usize> = waiting
            .iter()
            .copied()
            .filter(|&i| {
                preds[i]
                    .iter()
                    .all(|e| issue[e.from].is_some_and(|s| s + e.delay <= cycle))
            })
            .collect();
        ready.sort_by_key(|&i| (std::cmp::Reverse(prio[i]), i));
        for i in ready {
            // Same-cycle edges (delay 0) never occur: every edge delays at least one cycle.
            let Some(copy) = unit_free[infos[i].unit].iter().position(|f| *f <= cycle) else {
                continue;
            };
            let Some(slot) = infos[i]
                .slots
                .iter()
                .copied()
                .find(|s| !used_slots.contains(s))
            else {
                continue;
            };
            used_slots.push(slot);
            unit_free[infos[i].unit][copy] = cycle + infos[i].busy;
            issue[i] = Some(cycle);
            bundle.ops.push((slot, insts[i].clone()));
        }
        bundle.ops.sort_by_key(|(s, _)| *s);
        has_wait.push(
            waiting
                .iter()
                .any(|&i| issue[i] == Some(cycle) && !infos[i].waits.is_empty()),
        );
        waiting.retain(|&i| issue[i].is_none());
        bundles.push(bundle);
        cycle += 1;
    }
    drop_needless_padding(m, bundles, &has_wait)
}

/// Empty bundles cost cycles and code. Interlocked hardware stalls by itself,
/// so none is needed there. On exposed machines, padding right before a wait is
/// needless too: the wait stalls until its signal, which comes no earlier than
/// the cycle the padding reached, so nothing after it issues earlier.
fn drop_needless_padding(m: &Machine, bundles: Vec<Bundle>, has_wait: &[bool]) -> Vec<Bundle> {
    let interlocked = m.hazards == Hazards::Interlocked;
    let mut keep = vec![true; bundles.len()];
    for i in (0..bundles.len()).rev() {
        let before_wait = (i + 1..bundles.len())
            .find(|&j| !bundles[j].ops.is_empty())
            .is_some_and(|j| has_wait[j]);
        if bundles[i].ops.is_empty() && (interlocked || before_wait) {
            keep[i] = false;
        }
    }
    bundles
        .into_iter()
        .zip(keep)
        .filter_map(|(b, k)| k.then_some(b))
        .collect()
}

/// Replays a schedule: every dependency of the program-order instruction list
/// is met, every bundle uses each slot once and no unit beyond its copies.
/// Returns every violation found.
pub fn check(
    t: &targets::Target,
    m: &Machine,
    program_order: &[MInst],
    bundles: &[Bundle],
) -> Result<(), Vec<String>> {
    let infos = infos(t, m, program_order);
    let edges = edges(&infos);
    let mut errors = Vec::new();
    // Where each instruction went: match instances in order of appearance.
    let mut placed: Vec<Option<u64>> = vec![None; program_order.len()];
    for (cycle, b) in bundles.iter().enumerate() {
        for (slot, inst) in &b.ops {
            match (0..program_order.len())
                .find(|&i| placed[i].is_none() && &program_order[i] == inst)
            {
                Some(i) => {
                    placed[i] = Some(cycle as u64);
                    if !infos[i].slots.contains(slot) {
                        errors.push(format!(
                            "bundle {cycle}: `{}` cannot issue from slot `{}`",
                            m.instructions[inst.inst.index()].name,
                            m.slots[slot.index()].name
                        ));
                    }
                }
                None => errors.push(format!(
                    "bundle {cycle}: `{}` is not in the program",
                    m.instructions[inst.inst.index()].name
                )),
            }
        }
        let mut slots: Vec<SlotId> = b.ops.iter().map(|(s, _)| *s).collect();
        slots.sort();
        if slots.windows(2).any(|w| w[0] == w[1]) {
            errors.push(format!("bundle {cycle}: a slot is used twice"));
        }
    }
    for (i, p) in placed.iter().enumerate() {
        if p.is_none() {
            errors.push(format!(
                "instruction {i} (`{}`) is never issued",
                m.instructions[program_order[i].inst.index()].name
            ));
        }
    }
    // Bundles issue one per cycle, in order; a bundle with a wait stalls until its signal.
    let mut bundle_cycle: Vec<u64> = Vec::with_capacity(bundles.len());
    for k in 0..bundles.len() {
        let mut c = bundle_cycle.last().map_or(0, |p| p + 1);
        for e in edges
            .iter()
            .filter(|e| e.signal && placed[e.to] == Some(k as u64))
        {
            if let Some(a) = placed[e.from] {
                c = c.max(bundle_cycle.get(a as usize).copied().unwrap_or(0) + e.delay);
            }
        }
        bundle_cycle.push(c);
    }
    let at = |i: usize| placed[i].and_then(|k| bundle_cycle.get(k as usize).copied());
    // On interlocked machines the hardware waits for values; a schedule need only keep dependent instructions in order.
    let interlocked = m.hazards == Hazards::Interlocked;
    for e in &edges {
        let delay = if interlocked { 1 } else { e.delay };
        if let (Some(a), Some(b)) = (at(e.from), at(e.to))
            && a + delay > b
        {
            errors.push(format!("instruction {} issues at {b}, but it depends on instruction {} (issued at {a}) by {delay} cycles", e.to, e.from));
        }
    }
    // Unit copies: at no cycle more instructions busy on a unit than it has copies (on exposed
    // machines, where bundle positions are cycles; interlocked hardware stalls for a free copy).
    for (u, unit) in m.units.iter().enumerate().filter(|_| !interlocked) {
        let spans: Vec<(u64, u64)> = (0..program_order.len())
            .filter(|&i| infos[i].unit == u)
            .filter_map(|i| at(i).map(|s| (s, s + infos[i].busy)))
            .collect();
        for (s, _) in &spans {
            let active = spans.iter().filter(|(a, b)| a <= s && s < b).count();
            if active as i64 > unit.count.value.max(1) {
                errors.push(format!(
                    "cycle {s}: {active} instructions busy on unit `{}`, which has {}",
                    unit.name, unit.count.value
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The instructions of bundles, in order (the input a scheduler repacks).
pub fn flatten(bundles: &[Bundle]) -> Vec<MInst> {
    bundles
        .iter()
        .flat_map(|b| b.ops.iter().map(|(_, i)| i.clone()))
        .collect()
}
