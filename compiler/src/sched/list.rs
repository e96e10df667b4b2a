//! The list scheduler: instructions packed into bundles in priority order
//! under the dependences, slots, unit copies and memory bandwidth, then the
//! padding interlocked machines do not need dropped.

use super::Deps;
use super::chains::{Chains, HEAD, Ready};
use super::facts::{Info, run_of, slots};
use isa_specs::Machine;
use isa_specs::model::{Hazards, SlotId};
use isa_specs::target::{Bundle, MInst};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The instructions as list scheduling sees them: in program order, or
/// backwards (index `i` standing for instruction `n - 1 - i`).
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    pub(super) infos: &'a [Info],
    /// [`Deps::bookings`].
    pub(super) bookings: &'a [(usize, u64)],
    pub(super) reversed: bool,
}

impl View<'_> {
    pub(super) fn len(&self) -> usize {
        self.infos.len()
    }

    pub(super) fn get(&self, i: usize) -> &Info {
        if self.reversed {
            &self.infos[self.infos.len() - 1 - i]
        } else {
            &self.infos[i]
        }
    }
}

/// What list scheduling reads of the edges, laid out by `from`: the
/// `(to, delay)` of the edges from `i` are `succ[start[i]..start[i + 1]]`,
/// next to each other.
pub(super) struct Successors {
    pub(super) start: Vec<u32>,
    pub(super) succ: Vec<(u32, u32)>,
}

impl Successors {
    /// The successors of the program run backwards (instruction `i` standing
    /// for `n - 1 - i`, every edge turned round): from the edges in
    /// [`edges`](super::edges::edges)' order (by `to`), read from the end.
    pub(super) fn reversed(deps: &Deps) -> Successors {
        let n = deps.infos.len();
        let mut start = vec![0u32; n + 1];
        for e in &deps.edges {
            start[n - e.to()] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        debug_assert!(deps.edges.is_sorted_by_key(|e| e.to));
        let succ = deps
            .edges
            .iter()
            .rev()
            .map(|e| ((n - 1 - e.from()) as u32, e.delay))
            .collect();
        Successors { start, succ }
    }

    /// `(to, delay)` of each edge from `i`.
    pub(super) fn of(&self, i: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.succ[self.start[i] as usize..self.start[i + 1] as usize]
            .iter()
            .map(|&(to, delay)| (to as usize, u64::from(delay)))
    }
}

/// List scheduling: the bundles (of `insts`; empty without them), and the
/// cycle each instruction issued at.
pub(super) fn list(
    m: &Machine,
    insts: Option<&[MInst]>,
    infos: View<'_>,
    succ: &Successors,
    prio: &[u64],
    chains: Option<&Chains>,
) -> (Vec<Bundle>, Vec<u64>) {
    let n = infos.len();
    let mut issue: Vec<Option<u64>> = vec![None; n];
    let mut unit_free: Vec<Vec<u64>> = m
        .units
        .iter()
        .map(|u| vec![0; u.count.value.max(1) as usize])
        .collect();
    let mut bundles: Vec<Bundle> = Vec::new();
    // Per memory, the cycle its bandwidth is booked until.
    let mut booked = vec![0u64; m.memories.len()];
    let mut remaining = vec![0u32; n];
    let mut earliest = vec![0u64; n];
    for &(to, _) in &succ.succ {
        remaining[to as usize] += 1;
    }
    // Instructions whose predecessors have all issued, by the cycle they may issue.
    let mut timed: BinaryHeap<Reverse<(u64, usize)>> = (0..n)
        .filter(|&i| remaining[i] == 0)
        .map(|i| Reverse((0, i)))
        .collect();
    // Ready now, per unit, highest priority first: the instructions of a
    // unit with no copy free this cycle are not looked at (each would be
    // blocked).
    let mut ready: Vec<Ready> = (0..m.units.len()).map(|_| Ready::default()).collect();
    let copies: Vec<usize> = unit_free.iter().map(Vec::len).collect();
    // Per head, its predecessors left that do not hold it up by registers
    // alone: at none, its chain counts as work to come.
    let mut gates = chains.map_or_else(Vec::new, |c| c.gates.clone());
    if let Some(c) = chains {
        for i in 0..n {
            if c.role[i] & HEAD != 0 && gates[i] == 0 {
                ready[infos.get(i).unit].waiting += c.rest[i];
            }
        }
    }
    // The head of each unit's ready instructions with a copy free, best first.
    let mut heads: BinaryHeap<(u64, Reverse<usize>)> = BinaryHeap::new();
    let mut left = n;
    let mut cycle = 0u64;
    let mut used_slots: Vec<SlotId> = Vec::new();
    let mut blocked = Vec::new();
    let free_copy = |unit_free: &[Vec<u64>], u: usize, cycle: u64| {
        unit_free[u].iter().position(|f| *f <= cycle)
    };
    // The slots any instruction of each unit may take: once the bundle
    // uses them all, the unit's ready instructions are not tried this
    // cycle (each would be blocked, and popped and pushed back in vain).
    let mut unit_slots: Vec<Vec<SlotId>> = vec![Vec::new(); m.units.len()];
    for def in &m.instructions {
        let us = &mut unit_slots[def.timing.unit.index()];
        for s in &def.timing.slots {
            if !us.contains(s) {
                us.push(*s);
            }
        }
    }
    let slot_left = |used: &[SlotId], u: usize| unit_slots[u].iter().any(|s| !used.contains(s));
    while left > 0 {
        while let Some(Reverse((c, i))) = timed.peek().copied() {
            if c > cycle {
                break;
            }
            timed.pop();
            ready[infos.get(i).unit].push(chains, i, prio[i]);
        }
        used_slots.clear();
        let mut bundle = Bundle::default();
        heads.clear();
        if chains.is_some() {
            ready.iter_mut().for_each(|r| r.retire(cycle));
        }
        for (u, r) in ready.iter().enumerate() {
            if let Some(t) = r.top(chains, copies[u], cycle)
                && free_copy(&unit_free, u, cycle).is_some()
            {
                heads.push(t);
            }
        }
        // In priority order across the units, as if one list.
        while let Some((pr, Reverse(i))) = heads.pop() {
            let u = infos.get(i).unit;
            ready[u].pop(chains, i);
            // Same-cycle edges (delay 0) never occur: every edge delays at least one cycle.
            let copy = free_copy(&unit_free, u, cycle);
            let slot = slots(m, infos.get(i))
                .iter()
                .copied()
                .find(|s| !used_slots.contains(s));
            if let (Some(copy), Some(slot)) = (copy, slot) {
                used_slots.push(slot);
                // A transfer starts when every memory it touches has bandwidth
                // for it; its copy is busy, and what follows it waits, from then.
                let bookings = run_of(infos.bookings, infos.get(i).bookings);
                let begins = bookings
                    .iter()
                    .fold(cycle, |s, &(mem, _)| s.max(booked[mem]));
                for &(mem, cycles) in bookings {
                    booked[mem] = begins + cycles;
                }
                unit_free[u][copy] = begins + infos.get(i).busy;
                issue[i] = Some(cycle);
                ready[u].issued(chains, i, infos.get(i).accumulate, begins);
                if let Some(insts) = insts {
                    bundle.ops.push((slot, insts[i].clone()));
                }
                left -= 1;
                for (to, delay) in succ.of(i) {
                    if let Some(c) = chains
                        && c.role[to] & HEAD != 0
                        && !c.holds[i]
                    {
                        gates[to] -= 1;
                        if gates[to] == 0 {
                            ready[infos.get(to).unit].waiting += c.rest[to];
                        }
                    }
                    earliest[to] = earliest[to].max(begins + delay);
                    remaining[to] -= 1;
                    if remaining[to] == 0 {
                        timed.push(Reverse((earliest[to], to)));
                    }
                }
            } else {
                blocked.push((pr, Reverse(i)));
            }
            if let Some(next) = ready[u].top(chains, copies[u], cycle)
                && free_copy(&unit_free, u, cycle).is_some()
                && slot_left(&used_slots, u)
            {
                heads.push(next);
            }
        }
        for (p, Reverse(i)) in blocked.drain(..) {
            ready[infos.get(i).unit].push(chains, i, p);
        }
        bundle.ops.sort_by_key(|(s, _)| *s);
        bundles.push(bundle);
        cycle += 1;
    }
    (bundles, issue.iter().map(|c| c.unwrap_or(0)).collect())
}

/// Empty bundles cost cycles and code. Interlocked hardware stalls by itself,
/// so none is needed there. On exposed machines every one stays: dropping the
/// padding before a wait is only safe if the wait is sure to stall as long,
/// which needs the simulator's transfer times never to undercut the static
/// latencies (found false by the property test; see issue 6).
/// Returns the bundles and, for each cycle of the input, the index its
/// bundle has in the output.
pub(super) fn drop_needless_padding(
    m: &Machine,
    bundles: Vec<Bundle>,
) -> (Vec<Bundle>, Vec<usize>) {
    if m.hazards != Hazards::Interlocked {
        let n = bundles.len();
        return (bundles, (0..n).collect());
    }
    let mut index = Vec::with_capacity(bundles.len());
    let mut out = Vec::new();
    for b in bundles {
        index.push(out.len());
        if !b.ops.is_empty() {
            out.push(b);
        }
    }
    (out, index)
}
