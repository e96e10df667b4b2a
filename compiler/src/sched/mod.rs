//! List scheduling into VLIW bundles, and its independent checker.
//!
//! The scheduler takes instructions in program order and packs them into
//! bundles using only the machine model and the generated tables (slots,
//! units, occupancy, latency through [`isa_specs::target::Isa`]; reads and writes through the
//! target's generated access sets). Dependencies:
//! - read after write: the reader issues no earlier than the writer's latency
//!   (an instruction with accumulation forwarding reading or writing a
//!   register last written by another: after that one's `accumulate` delay);
//! - write after write: the later write lands after the earlier one;
//! - write after read: the writer issues after the reader;
//! - nothing moves above a fence, a halt or a signal of a synchronous unit;
//!   fences, halts and signals of synchronous units stay after everything
//!   before them;
//! - an asynchronous transfer stays after the barrier before it; what
//!   follows it may move above it unless it depends on it through a
//!   register or memory (its data is only ready after the wait the lowering
//!   puts before any use, and its buffers stay allocated until that wait);
//! - a wait comes after the instructions signalling its semaphore since the
//!   previous wait on it have completed, and after that wait; a signal comes
//!   after the last wait on its semaphore (no wait is satisfied by a later
//!   transfer). The wait that consumes the last pending signal of a
//!   semaphore stands for the accesses of the transfers it completes: what
//!   reads their destination, or writes their source or destination, comes
//!   after it, and anything else may move above it, so the transfers of
//!   later tiles are issued while earlier ones are computed (a wait on an
//!   unknown or a synchronous signaller stays a barrier);
//! - with [`Rules::transfers_are_barriers`] nothing moves above a transfer
//!   or a wait (the conservative rule, kept to measure what overlap buys).
//!
//! On interlocked machines the empty bundles that spacing leaves are dropped
//! (the hardware stalls by itself); on exposed machines they stay.
//!
//! Among the instructions whose dependencies are met, the one with the longest
//! latency-weighted path to the end goes first (critical-path list
//! scheduling); with [`Rules::reverse_priorities`] the rank adds the
//! instruction's distance from the end in a list schedule of the reversed
//! program under the same resources, which sees the units and bandwidth the
//! critical path does not (the last output tiles' stores waiting for HBM).
//! With [`Rules::finish_chains`], a unit's chains of accumulations into one
//! register (a GEMM's output tiles) finish one per copy of the unit at a
//! time instead of advancing together, where the work known can keep the
//! copies busy that way (`chains::Ready`). A slot takes one instruction per bundle; a unit copy is busy
//! for the instruction's occupancy (until it finishes if not pipelined).
//! Asynchronous transfers take turns on each memory they touch, each for its
//! bytes over the memory's bandwidth, as the simulator books them: a
//! transfer starts when the memories are free, and its engine stays busy and
//! what depends on it waits from then. Engines whose rates together exceed a
//! memory's are thus not issued transfers before one is free (an issue stall
//! on the machine).
//!
//! [`check`] replays a schedule against the same rules, independently of how it
//! was built.
//!
//! The parts, each using only those before it: `facts` (each instruction's
//! scheduling facts), `records` (who last wrote and read each place),
//! `edges` (the dependences), `chains` (accumulation chains and the ready
//! list that finishes them), `list` (the list scheduler), `priorities` (how
//! ready instructions are ranked) and `checker`. Here: the rules, the
//! dependences both the scheduler and the checker use (`Deps`), and the
//! entry points.

mod chains;
mod checker;
mod edges;
mod facts;
mod list;
mod priorities;
mod records;
#[cfg(test)]
mod tests;

pub use checker::{check, check_with};

use crate::timing::PassTimes;
use chains::{Chains, chains};
use checker::check_deps;
use edges::{Edge, edges};
use facts::{Info, infos};
use isa_specs::Machine;
use isa_specs::target::{Bundle, MInst};
use list::{Successors, View, drop_needless_padding, list};
use priorities::{priorities, reverse_priorities};

/// What the scheduler and its checker both derive from the program order:
/// each instruction's facts and the dependencies between them.
struct Deps {
    infos: Vec<Info>,
    edges: Vec<Edge>,
    /// The accumulation chains ([`chains`](chains::chains)).
    chains: Chains,
    rules: Rules,
    /// [`Lists::bookings`](facts::Lists::bookings).
    bookings: Vec<(usize, u64)>,
}

impl Deps {
    fn new(t: &targets::Target, m: &Machine, insts: &[MInst], rules: Rules) -> Deps {
        Deps::timed(t, m, insts, rules, &mut PassTimes::default())
    }

    fn timed(
        t: &targets::Target,
        m: &Machine,
        insts: &[MInst],
        rules: Rules,
        times: &mut PassTimes,
    ) -> Deps {
        let (infos, lists) = times.time("effects", || infos(t, m, insts, rules));
        let mem_bytes: Vec<u64> = m.memories.iter().map(|x| x.size.value as u64).collect();
        let edges = times.time("dependences", || edges(&infos, &lists, &mem_bytes));
        let chains = if rules.finish_chains {
            times.time("chains", || chains(&infos, &edges, &lists.places))
        } else {
            Chains::default()
        };
        Deps {
            infos,
            edges,
            chains,
            rules,
            bookings: lists.bookings,
        }
    }

    /// The edges grouped by `from` (a counting sort).
    fn successors(&self) -> Successors {
        let n = self.infos.len();
        let mut start = vec![0u32; n + 1];
        for e in &self.edges {
            start[e.from() + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut next = start.clone();
        let mut succ = vec![(0, 0); self.edges.len()];
        for e in &self.edges {
            succ[next[e.from()] as usize] = (e.to, e.delay);
            next[e.from()] += 1;
        }
        Successors { start, succ }
    }
}

/// Which ordering rules the scheduler and its checker apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Nothing moves above an asynchronous transfer or a wait (no overlap
    /// of the instructions after a transfer with it beyond what issue order
    /// gives, no transfer issued before the wait for an earlier one).
    pub transfers_are_barriers: bool,
    /// Instructions are ranked by their latency-weighted critical path plus
    /// how far from the end a list schedule of the reversed program, under
    /// the same units and memory bandwidth, places them
    /// (`reverse_priorities`), rather than by the critical path alone.
    pub reverse_priorities: bool,
    /// While every copy of a unit has a chain of accumulations going, a
    /// ready next step of one goes before the first of another, unless the
    /// work known would then leave copies idle at the end (see
    /// `chains::Ready`).
    pub finish_chains: bool,
}

impl Default for Rules {
    /// The conservative rules ([`schedule`] and [`check`] apply them); the
    /// lowering relaxes them unless told not to.
    fn default() -> Self {
        Rules {
            transfers_are_barriers: true,
            reverse_priorities: false,
            finish_chains: false,
        }
    }
}

/// Packs instructions (in program order) into bundles for machine `m` of target `t`.
pub fn schedule(t: &targets::Target, m: &Machine, insts: &[MInst]) -> Vec<Bundle> {
    schedule_placed(t, m, insts, Rules::default()).0
}

/// [`schedule`] under `rules`, and the bundle each instruction went to.
pub fn schedule_placed(
    t: &targets::Target,
    m: &Machine,
    insts: &[MInst],
    rules: Rules,
) -> (Vec<Bundle>, Vec<usize>) {
    scheduled(
        m,
        insts,
        &Deps::new(t, m, insts, rules),
        &mut PassTimes::default(),
    )
}

/// [`schedule_placed`], and [`check_with`] of its result, deriving the
/// dependencies once for both (the check replays the bundles against them
/// without the scheduler's state).
pub fn schedule_checked(
    t: &targets::Target,
    m: &Machine,
    insts: &[MInst],
    rules: Rules,
    times: &mut PassTimes,
) -> Result<(Vec<Bundle>, Vec<usize>), Vec<String>> {
    let deps = Deps::timed(t, m, insts, rules, times);
    let (bundles, placed) = scheduled(m, insts, &deps, times);
    times.time("check schedule", || {
        check_deps(m, insts, &bundles, &deps, Some(&placed))
    })?;
    Ok((bundles, placed))
}

fn scheduled(
    m: &Machine,
    insts: &[MInst],
    deps: &Deps,
    times: &mut PassTimes,
) -> (Vec<Bundle>, Vec<usize>) {
    let succ = deps.successors();
    let forward = View {
        infos: &deps.infos,
        bookings: &deps.bookings,
        reversed: false,
    };
    let mut prio = times.time("priorities", || priorities(forward, &succ));
    if deps.rules.reverse_priorities {
        // Both estimate the time from an instruction to the end, the first
        // by latencies alone, the second with the units and bandwidth
        // taken; their sum ranked better on every workload measured than
        // either alone or their maximum (2026-12-04).
        let rev = times.time("reverse schedule", || reverse_priorities(m, deps));
        for (p, q) in prio.iter_mut().zip(rev) {
            *p += q;
        }
    }
    let chains = deps.rules.finish_chains.then_some(&deps.chains);
    let (bundles, issue) = times.time("schedule", || {
        list(m, Some(insts), forward, &succ, &prio, chains)
    });
    let (bundles, kept) = drop_needless_padding(m, bundles);
    let placed = issue.iter().map(|&c| kept[c as usize]).collect();
    (bundles, placed)
}

/// The instructions of bundles, in order (the input a scheduler repacks).
pub fn flatten(bundles: &[Bundle]) -> Vec<MInst> {
    bundles
        .iter()
        .flat_map(|b| b.ops.iter().map(|(_, i)| i.clone()))
        .collect()
}
