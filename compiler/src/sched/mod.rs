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
//! copies busy that way ([`Ready`](chains::Ready)). A slot takes one instruction per bundle; a unit copy is busy
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
//! The parts: `deps` (each instruction's facts and the dependences, shared
//! by the scheduler and the checker), `edges` (finding the dependences) with
//! `records` (who last wrote and read each place), `priorities` and `chains`
//! (how ready instructions are ranked), `list` (the list scheduler) and
//! `checker`.

mod chains;
mod checker;
mod deps;
mod edges;
mod list;
mod priorities;
mod records;
#[cfg(test)]
mod tests;

pub use checker::{check, check_with};

use crate::timing::PassTimes;
use checker::check_deps;
use deps::Deps;
use isa_specs::Machine;
use isa_specs::target::{Bundle, MInst};
use list::scheduled;

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
    /// [`Ready`](chains::Ready)).
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

/// The instructions of bundles, in order (the input a scheduler repacks).
pub fn flatten(bundles: &[Bundle]) -> Vec<MInst> {
    bundles
        .iter()
        .flat_map(|b| b.ops.iter().map(|(_, i)| i.clone()))
        .collect()
}
