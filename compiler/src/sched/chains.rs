//! Accumulation chains (a GEMM's output tiles: accumulations into one
//! register) and the per-unit ready list that, under
//! [`Rules::finish_chains`](super::Rules::finish_chains), finishes one chain
//! per copy of a unit before starting the next.

use super::edges::Edge;
use super::facts::{Info, run_of};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use targets::sim::Place;

/// An instruction's part in a chain of accumulations into one register: a
/// head starts it (overwrites the register, or adds to what something else
/// wrote), a continuation adds to what the accumulation before it left,
/// an end is the last.
pub(super) const HEAD: u8 = 1;

const CONTINUES: u8 = 2;

const ENDS: u8 = 4;

/// The accumulation chains of a program.
#[derive(Default)]
pub(super) struct Chains {
    /// Each instruction's [`HEAD`], [`CONTINUES`], [`ENDS`] bits (0: not an
    /// accumulation).
    pub(super) role: Vec<u8>,
    /// The head of its chain.
    pub(super) head: Vec<u32>,
    /// The cycles of its chain from it on: its accumulation delay and those
    /// of the links after it.
    pub(super) rest: Vec<u64>,
    /// Whether it holds up what follows only by the chains' registers: an
    /// accumulation, or a read of a register file accumulations write (a
    /// pop). Known for the predecessors of heads (the only ones asked).
    pub(super) holds: Vec<bool>,
    /// Per head, its predecessors that do not [`Self::holds`].
    pub(super) gates: Vec<u32>,
}

/// A continuation reads a register it writes, and has an edge from an
/// accumulation (the one that last wrote the register).
pub(super) fn chains(infos: &[Info], edges: &[Edge], places: &[Place]) -> Chains {
    let n = infos.len();
    let reads_own = |b: &Info| {
        let regs = |run| {
            run_of(places, run)
                .iter()
                .filter(|p| matches!(p, Place::Reg { .. }))
        };
        regs(b.reads).any(|r| regs(b.writes).any(|w| w == r))
    };
    let own: Vec<bool> = infos
        .iter()
        .map(|b| b.accumulate > 0 && reads_own(b))
        .collect();
    let mut next = vec![u32::MAX; n];
    let mut head: Vec<u32> = (0..n as u32).collect();
    let mut role: Vec<u8> = infos
        .iter()
        .map(|b| if b.accumulate > 0 { HEAD | ENDS } else { 0 })
        .collect();
    // Edges come by `to`, so a link's `from` has its head already.
    for e in edges {
        let (f, t) = (e.from(), e.to());
        if own[t] && infos[f].accumulate > 0 && role[t] & CONTINUES == 0 {
            role[t] = (role[t] & !HEAD) | CONTINUES;
            role[f] &= !ENDS;
            next[f] = t as u32;
            head[t] = head[f];
        }
    }
    let mut rest = vec![0u64; n];
    for i in (0..n).rev() {
        if role[i] != 0 {
            let after = next[i];
            rest[i] = infos[i].accumulate
                + if after == u32::MAX {
                    0
                } else {
                    rest[after as usize]
                };
        }
    }
    let mut files: Vec<usize> = Vec::new();
    for b in infos.iter().filter(|b| b.accumulate > 0) {
        for p in run_of(places, b.writes) {
            if let Place::Reg { file, .. } = p
                && !files.contains(file)
            {
                files.push(*file);
            }
        }
    }
    // Only what precedes a head is asked whether it holds.
    let mut holds = vec![false; n];
    let mut gates = vec![0u32; n];
    for e in edges {
        if role[e.to()] & HEAD != 0 {
            let b = &infos[e.from()];
            let h = b.accumulate > 0
                || run_of(places, b.reads)
                    .iter()
                    .any(|p| matches!(p, Place::Reg { file, .. } if files.contains(file)));
            holds[e.from()] = h;
            if !h {
                gates[e.to()] += 1;
            }
        }
    }
    Chains {
        role,
        head,
        rest,
        holds,
        gates,
    }
}

/// One unit's instructions ready to issue, and its accumulation chains.
///
/// Critical-path priorities alone interleave a unit's chains (the next
/// step of a chain ranks below the first of another), so that all of them
/// end at once: their registers are all busy until then, and the chains
/// after them wait for the registers. While every copy of the unit has a
/// chain going, a ready continuation therefore goes before a new chain,
/// unless the new chain, started when the shortest open one ends, would end
/// after the work known could keep every copy busy: then interleaving
/// balances the copies better. The work known is the steps left of the
/// open chains and the chains whose heads wait for nothing but what holds
/// the chains' registers ([`Chains::holds`]): a head waiting for other work
/// (the layer norm before the MLP's product) is no work to fill the copies
/// with meanwhile.
#[derive(Default)]
pub(super) struct Ready {
    /// Highest priority first.
    others: BinaryHeap<(u64, Reverse<usize>)>,
    conts: BinaryHeap<(u64, Reverse<usize>)>,
    /// The chains begun whose last step has not finished: head, cycles of
    /// the steps not issued, and the cycle the last one issued ends.
    open: Vec<(u32, u64, u64)>,
    /// The cycles of the chains not begun whose heads wait for nothing but
    /// what holds the chains' registers.
    pub(super) waiting: u64,
}

impl Ready {
    pub(super) fn push(&mut self, chains: Option<&Chains>, i: usize, prio: u64) {
        let role = chains.map_or(0, |c| c.role[i]);
        if role & CONTINUES != 0 {
            self.conts.push((prio, Reverse(i)));
        } else {
            self.others.push((prio, Reverse(i)));
        }
    }

    /// The instruction to try next on a unit of `copies`.
    pub(super) fn top(
        &self,
        chains: Option<&Chains>,
        copies: usize,
        cycle: u64,
    ) -> Option<(u64, Reverse<usize>)> {
        let (r, c) = (self.others.peek().copied(), self.conts.peek().copied());
        if let (Some(chains), Some((_, Reverse(h))), Some(_)) = (chains, r, c)
            && chains.role[h] & HEAD != 0
            && self.open.len() >= copies
        {
            let left = |&(_, left, until): &(u32, u64, u64)| left + until.saturating_sub(cycle);
            let shortest = self.open.iter().map(left).min().unwrap_or(0);
            let work = self.open.iter().map(left).sum::<u64>() + self.waiting;
            if (shortest + chains.rest[h]) * copies as u64 <= work {
                return c;
            }
        }
        r.max(c)
    }

    /// Takes `i` (the instruction [`Self::top`] returned) off the list.
    pub(super) fn pop(&mut self, chains: Option<&Chains>, i: usize) {
        let role = chains.map_or(0, |c| c.role[i]);
        if role & CONTINUES != 0 {
            self.conts.pop();
        } else {
            self.others.pop();
        }
    }

    /// `i` issued at `begins`: its chain is open until its last step ends.
    pub(super) fn issued(
        &mut self,
        chains: Option<&Chains>,
        i: usize,
        accumulate: u64,
        begins: u64,
    ) {
        let Some(c) = chains.filter(|c| c.role[i] != 0) else {
            return;
        };
        let head = c.head[i];
        if c.role[i] & HEAD != 0 {
            self.waiting -= c.rest[i];
        }
        let entry = (head, c.rest[i] - accumulate, begins + accumulate);
        match self.open.iter().position(|x| x.0 == head) {
            Some(k) => self.open[k] = entry,
            None => self.open.push(entry),
        }
    }

    /// Forgets the chains whose last step has ended by `cycle`.
    pub(super) fn retire(&mut self, cycle: u64) {
        self.open
            .retain(|&(_, left, until)| left > 0 || until > cycle);
    }
}
