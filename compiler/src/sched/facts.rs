//! Each instruction's scheduling facts ([`Info`]): from the target's effects
//! and the machine's timing tables, with what they refer to by runs of
//! shared lists ([`Lists`]).

use super::Rules;
use isa_specs::Machine;
use isa_specs::model::SlotId;
use isa_specs::target::MInst;
use targets::sim::{Effects, Place};

/// One instruction's scheduling facts.
#[derive(Clone, Debug)]
pub(super) struct Info {
    /// The instruction (its slots are the definition's).
    pub(super) inst: u32,
    pub(super) unit: usize,
    pub(super) latency: u64,
    pub(super) busy: u64,
    /// Must come after everything earlier (fences, halts, signals of synchronous units).
    pub(super) after_all: bool,
    /// Everything later must come after it (fences, halts, signals of
    /// synchronous units; waits and asynchronous transfers under
    /// [`Rules::transfers_are_barriers`]).
    pub(super) before_all: bool,
    /// Runs on an asynchronous unit (its accesses complete by the wait on its signal).
    pub(super) asynchronous: bool,
    /// Accumulation forwarding: another accumulating instruction may use the
    /// registers this one writes this many cycles after it issues (0: none).
    pub(super) accumulate: u64,
    /// What it reads and writes: runs of the places [`infos`] returns
    /// beside the facts (only finding the edges needs them).
    pub(super) reads: (u32, u32),
    pub(super) writes: (u32, u32),
    /// Semaphores it signals and waits on: runs of [`Lists::sems`].
    pub(super) signals: (u32, u32),
    pub(super) waits: (u32, u32),
    /// An asynchronous transfer's share of each memory it touches: `(memory,
    /// cycles of its bandwidth)`. Transfers on one memory take turns (as the
    /// simulator books them), so one may start after it issues.
    /// A run of [`Lists::bookings`].
    pub(super) bookings: (u32, u32),
}

/// What instructions' facts refer to by runs (most instructions have few or
/// none of each, so they share one list rather than a vector apiece).
#[derive(Default)]
pub(super) struct Lists {
    pub(super) places: Vec<Place>,
    pub(super) sems: Vec<(usize, u32)>,
    pub(super) bookings: Vec<(usize, u64)>,
}

/// The elements of `run` (of an [`Info`]) in `list`.
pub(super) fn run_of<T>(list: &[T], run: (u32, u32)) -> &[T] {
    &list[run.0 as usize..run.1 as usize]
}

/// The slots instruction `info` may issue from.
pub(super) fn slots<'m>(m: &'m Machine, info: &Info) -> &'m [SlotId] {
    &m.instructions[info.inst as usize].timing.slots
}

pub(super) fn infos(
    t: &targets::Target,
    m: &Machine,
    insts: &[MInst],
    rules: Rules,
) -> (Vec<Info>, Lists) {
    let isa = t.isa();
    let mut fx = Effects::default();
    let mut lists = Lists {
        places: Vec::with_capacity(insts.len() * 3),
        ..Lists::default()
    };
    fn run<T>(list: &mut Vec<T>, items: impl IntoIterator<Item = T>) -> (u32, u32) {
        let from = list.len() as u32;
        list.extend(items);
        (from, list.len() as u32)
    }
    let infos = insts
        .iter()
        .map(|i| {
            t.effects(m, i, &mut fx);
            let place = |write: bool| {
                fx.accesses
                    .iter()
                    .filter(move |a| a.write == write)
                    .map(|a| a.place)
            };
            let reads = run(&mut lists.places, place(false));
            let writes = run(&mut lists.places, place(true));
            let def = &m.instructions[i.inst.index()];
            let unit = &m.units[def.timing.unit.index()];
            let latency = isa.latency(m, i).max(1) as u64;
            let occupancy = isa.occupancy(m, i).max(1) as u64;
            let bookings = fx
                .accesses
                .iter()
                .filter(|_| unit.asynchronous)
                .filter_map(|a| match a.place {
                    Place::Mem { mem, .. } => {
                        let bw = m.memories[mem].bandwidth.value.max(1) as u64;
                        Some((mem, a.bytes.div_ceil(bw)))
                    }
                    Place::Reg { .. } => None,
                });
            Info {
                inst: i.inst.index() as u32,
                unit: def.timing.unit.index(),
                latency,
                busy: if unit.pipelined {
                    occupancy
                } else {
                    occupancy.max(latency)
                },
                after_all: fx.fence || fx.halt || (!unit.asynchronous && !fx.signals.is_empty()),
                before_all: (rules.transfers_are_barriers
                    && (unit.asynchronous || !fx.signals.is_empty()))
                    || (!unit.asynchronous && !fx.signals.is_empty())
                    || (rules.transfers_are_barriers && !fx.waits.is_empty())
                    || fx.fence
                    || fx.halt,
                reads,
                writes,
                signals: run(&mut lists.sems, fx.signals.iter().copied()),
                waits: run(&mut lists.sems, fx.waits.iter().copied()),
                bookings: run(&mut lists.bookings, bookings),
                asynchronous: unit.asynchronous,
                accumulate: isa.accumulate(m, i).max(0) as u64,
            }
        })
        .collect();
    (infos, lists)
}
