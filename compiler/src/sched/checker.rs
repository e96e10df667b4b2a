//! The schedule checker: replays bundles against the dependences, slots and
//! unit copies, independently of how the schedule was built.

use super::edges::Edge;
use super::facts::slots;
use super::{Deps, Rules};
use isa_specs::Machine;
use isa_specs::model::{Hazards, SlotId};
use isa_specs::target::{Bundle, MInst};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Replays a schedule: every dependency of the program-order instruction list
/// is met, every bundle uses each slot once and no unit beyond its copies.
/// Returns every violation found.
pub fn check(
    t: &targets::Target,
    m: &Machine,
    program_order: &[MInst],
    bundles: &[Bundle],
) -> Result<(), Vec<String>> {
    check_with(t, m, program_order, bundles, Rules::default())
}

/// An instruction instance's operand as bits: two instances are the same
/// instruction exactly when their instruction and operand bits are equal.
fn operand_bits(o: &isa_specs::target::OpValue) -> (u8, u64) {
    use isa_specs::target::OpValue;
    match *o {
        OpValue::Reg(r) => (0, u64::from(r)),
        OpValue::Addr(a) => (1, a),
        OpValue::Imm(v) => (2, v as u64),
        OpValue::Real(f) => (3, u64::from(f.to_bits())),
        OpValue::Sem(s) => (4, u64::from(s)),
    }
}

fn same_inst(a: &MInst, b: &MInst) -> bool {
    a.inst == b.inst
        && a.operands.len() == b.operands.len()
        && a.operands
            .iter()
            .zip(&b.operands)
            .all(|(x, y)| operand_bits(x) == operand_bits(y))
}

/// A hash of an instruction instance's bits (equal for [`same_inst`]).
fn inst_hash(i: &MInst) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    i.inst.index().hash(&mut h);
    for o in &i.operands {
        operand_bits(o).hash(&mut h);
    }
    h.finish()
}

/// [`check`] under `rules`.
pub fn check_with(
    t: &targets::Target,
    m: &Machine,
    program_order: &[MInst],
    bundles: &[Bundle],
    rules: Rules,
) -> Result<(), Vec<String>> {
    check_deps(
        m,
        program_order,
        bundles,
        &Deps::new(t, m, program_order, rules),
        None,
    )
}

/// Checks the bundles against the dependencies. With `claimed` (the bundle
/// the scheduler put each instruction in), the claim is checked first: every
/// instruction is in its bundle, each bundle operation stands for one
/// instruction, and under that placement every rule holds. Otherwise, or if
/// that fails, each bundle operation is matched to the first instruction not
/// yet matched with the same bits, and the rules checked under that placement
/// (identical instructions are interchangeable, so either placement passing
/// shows the schedule keeps the program's meaning).
pub(super) fn check_deps(
    m: &Machine,
    program_order: &[MInst],
    bundles: &[Bundle],
    deps: &Deps,
    claimed: Option<&[usize]>,
) -> Result<(), Vec<String>> {
    if let Some(placed) = claimed.and_then(|c| claimed_placement(program_order, bundles, c))
        && check_placed(m, program_order, bundles, deps, placed, Vec::new()).is_ok()
    {
        return Ok(());
    }
    let (placed, errors) = found_placement(m, program_order, bundles);
    check_placed(m, program_order, bundles, deps, placed, errors)
}

/// Where each instruction went, bundle and slot, if `claimed` says so
/// truly: every instruction's bundle has an operation with its bits, taken
/// once, and the bundles hold nothing else.
pub(super) fn claimed_placement(
    program_order: &[MInst],
    bundles: &[Bundle],
    claimed: &[usize],
) -> Option<Vec<Option<(u64, SlotId)>>> {
    // Operation `j` of bundle `k` is `first[k] + j` of them all.
    let mut first = Vec::with_capacity(bundles.len());
    let mut ops = 0;
    for b in bundles {
        first.push(ops);
        ops += b.ops.len();
    }
    if claimed.len() != program_order.len() || ops != program_order.len() {
        return None;
    }
    let mut taken = vec![false; ops];
    let mut placed = Vec::with_capacity(program_order.len());
    for (inst, &k) in program_order.iter().zip(claimed) {
        let b = bundles.get(k)?;
        let used = &mut taken[first[k]..first[k] + b.ops.len()];
        let j = (0..b.ops.len()).find(|&j| !used[j] && same_inst(&b.ops[j].1, inst))?;
        used[j] = true;
        placed.push(Some((k as u64, b.ops[j].0)));
    }
    Some(placed)
}

/// Where each instruction went, bundle and slot, matching each bundle
/// operation to the first instruction not yet matched with the same bits;
/// and the operations no instruction has.
fn found_placement(
    m: &Machine,
    program_order: &[MInst],
    bundles: &[Bundle],
) -> (Vec<Option<(u64, SlotId)>>, Vec<String>) {
    let mut errors = Vec::new();
    let mut placed = vec![None; program_order.len()];
    // By hash; among equal hashes, the first instance with the same bits.
    let mut by_hash: rustc_hash::FxHashMap<u64, std::collections::VecDeque<usize>> =
        Default::default();
    for (i, inst) in program_order.iter().enumerate() {
        by_hash.entry(inst_hash(inst)).or_default().push_back(i);
    }
    for (cycle, b) in bundles.iter().enumerate() {
        for (slot, inst) in &b.ops {
            let found = by_hash.get_mut(&inst_hash(inst)).and_then(|q| {
                let at = q.iter().position(|&i| same_inst(&program_order[i], inst))?;
                q.remove(at)
            });
            match found {
                Some(i) => placed[i] = Some((cycle as u64, *slot)),
                None => errors.push(format!(
                    "bundle {cycle}: `{}` is not in the program",
                    m.instructions[inst.inst.index()].name
                )),
            }
        }
    }
    (placed, errors)
}

/// Checks the rules under a placement of the instructions (bundle and
/// slot), adding to `errors`.
fn check_placed(
    m: &Machine,
    program_order: &[MInst],
    bundles: &[Bundle],
    deps: &Deps,
    placement: Vec<Option<(u64, SlotId)>>,
    mut errors: Vec<String>,
) -> Result<(), Vec<String>> {
    let (infos, edges) = (&deps.infos, &deps.edges);
    for (i, p) in placement.iter().enumerate() {
        if let Some((cycle, slot)) = p
            && !slots(m, &infos[i]).contains(slot)
        {
            errors.push(format!(
                "bundle {cycle}: `{}` cannot issue from slot `{}`",
                m.instructions[program_order[i].inst.index()].name,
                m.slots[slot.index()].name
            ));
        }
    }
    for (cycle, b) in bundles.iter().enumerate() {
        let twice = b
            .ops
            .iter()
            .enumerate()
            .any(|(j, (s, _))| b.ops[..j].iter().any(|(t, _)| t == s));
        if twice {
            errors.push(format!("bundle {cycle}: a slot is used twice"));
        }
    }
    let placed: Vec<Option<u64>> = placement.iter().map(|p| p.map(|(k, _)| k)).collect();
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
    let mut signal_edges: Vec<Vec<&Edge>> = vec![Vec::new(); bundles.len()];
    for e in edges.iter().filter(|e| e.signal) {
        if let Some(k) = placed[e.to()] {
            signal_edges[k as usize].push(e);
        }
    }
    for edges_here in &signal_edges {
        let mut c = bundle_cycle.last().map_or(0, |p| p + 1);
        for e in edges_here {
            if let Some(a) = placed[e.from()] {
                c = c.max(bundle_cycle.get(a as usize).copied().unwrap_or(0) + e.delay());
            }
        }
        bundle_cycle.push(c);
    }
    let at = |i: usize| placed[i].and_then(|k| bundle_cycle.get(k as usize).copied());
    // On interlocked machines the hardware waits for values; a schedule need only keep dependent instructions in order.
    let interlocked = m.hazards == Hazards::Interlocked;
    for e in edges {
        let delay = if interlocked { 1 } else { e.delay() };
        if let (Some(a), Some(b)) = (at(e.from()), at(e.to()))
            && a + delay > b
        {
            errors.push(format!("instruction {} issues at {b}, but it depends on instruction {} (issued at {a}) by {delay} cycles", e.to, e.from));
        }
    }
    // Unit copies: at no cycle more instructions busy on a unit than it has copies (on exposed
    // machines, where bundle positions are cycles; interlocked hardware stalls for a free copy).
    for (u, unit) in m.units.iter().enumerate().filter(|_| !interlocked) {
        let mut spans: Vec<(u64, u64)> = (0..program_order.len())
            .filter(|&i| infos[i].unit == u)
            .filter_map(|i| at(i).map(|s| (s, s + infos[i].busy)))
            .collect();
        spans.sort_unstable();
        // Sweep: the ends of the spans still busy, soonest first.
        let mut busy: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
        for (s, e) in &spans {
            while busy.peek().is_some_and(|Reverse(end)| end <= s) {
                busy.pop();
            }
            busy.push(Reverse(*e));
            let active = busy.len();
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
