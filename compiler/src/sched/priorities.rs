//! The ranks list scheduling orders ready instructions by: the
//! latency-weighted critical path, and the distance from the end in a list
//! schedule of the reversed program.

use super::Deps;
use super::list::{Successors, View, list};
use isa_specs::Machine;

/// Longest latency-weighted path from each instruction to the end (edges only point forward in program order).
/// Visited by decreasing `from`: every edge points forward, so each
/// successor is final when read.
pub(super) fn priorities(v: View<'_>, succ: &Successors) -> Vec<u64> {
    let n = v.len();
    let mut prio: Vec<u64> = (0..n).map(|i| v.get(i).latency).collect();
    for from in (0..n).rev() {
        for (to, delay) in succ.of(from) {
            prio[from] = prio[from].max(delay + prio[to]);
        }
    }
    prio
}

/// Priorities from a list schedule of the reversed program under the same
/// resources: each instruction's distance from the end of that schedule
/// (plus its latency). Where units or memory bandwidth are the bottleneck,
/// this orders the work the end must wait for (the last tiles' pops and
/// stores, say) ahead of work the critical path alone ranks equal.
pub(super) fn reverse_priorities(m: &Machine, deps: &Deps) -> Vec<u64> {
    let n = deps.infos.len();
    let rev = View {
        infos: &deps.infos,
        bookings: &deps.bookings,
        reversed: true,
    };
    let succ = Successors::reversed(deps);
    let prio = priorities(rev, &succ);
    let (_, issue) = list(m, None, rev, &succ, &prio, None);
    (0..n)
        .map(|i| issue[n - 1 - i] + deps.infos[i].latency)
        .collect()
}
