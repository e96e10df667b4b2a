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
//! copies busy that way ([`Ready`]). A slot takes one instruction per bundle; a unit copy is busy
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

use crate::timing::PassTimes;
use isa_specs::Machine;
use isa_specs::model::{Hazards, SlotId};
use isa_specs::target::{Bundle, MInst};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use targets::sim::{Effects, Place, Span};

/// One instruction's scheduling facts.
#[derive(Clone, Debug)]
struct Info {
    /// The instruction (its slots are the definition's).
    inst: u32,
    unit: usize,
    latency: u64,
    busy: u64,
    /// Must come after everything earlier (fences, halts, signals of synchronous units).
    after_all: bool,
    /// Everything later must come after it (fences, halts, signals of
    /// synchronous units; waits and asynchronous transfers under
    /// [`Rules::transfers_are_barriers`]).
    before_all: bool,
    /// Runs on an asynchronous unit (its accesses complete by the wait on its signal).
    asynchronous: bool,
    /// Accumulation forwarding: another accumulating instruction may use the
    /// registers this one writes this many cycles after it issues (0: none).
    accumulate: u64,
    /// What it reads and writes: runs of the places [`infos`] returns
    /// beside the facts (only finding the edges needs them).
    reads: (u32, u32),
    writes: (u32, u32),
    /// Semaphores it signals and waits on: runs of [`Lists::sems`].
    signals: (u32, u32),
    waits: (u32, u32),
    /// An asynchronous transfer's share of each memory it touches: `(memory,
    /// cycles of its bandwidth)`. Transfers on one memory take turns (as the
    /// simulator books them), so one may start after it issues.
    /// A run of [`Lists::bookings`].
    bookings: (u32, u32),
}

/// What instructions' facts refer to by runs (most instructions have few or
/// none of each, so they share one list rather than a vector apiece).
#[derive(Default)]
struct Lists {
    places: Vec<Place>,
    sems: Vec<(usize, u32)>,
    bookings: Vec<(usize, u64)>,
}

/// An edge: `to` may issue no earlier than `from`'s issue plus `delay`.
/// Kept small (16 bytes): a program has millions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Edge {
    from: u32,
    to: u32,
    delay: u32,
    /// A wait on what `from` signals: the machine enforces it by stalling.
    signal: bool,
}

impl Edge {
    fn from(&self) -> usize {
        self.from as usize
    }
    fn to(&self) -> usize {
        self.to as usize
    }
    fn delay(&self) -> u64 {
        u64::from(self.delay)
    }
}

/// What the scheduler and its checker both derive from the program order:
/// each instruction's facts and the dependencies between them.
struct Deps {
    infos: Vec<Info>,
    edges: Vec<Edge>,
    /// The accumulation chains ([`chains`]).
    chains: Chains,
    rules: Rules,
    /// [`Lists::bookings`].
    bookings: Vec<(usize, u64)>,
}

/// The elements of `run` (of an [`Info`]) in `list`.
fn run_of<T>(list: &[T], run: (u32, u32)) -> &[T] {
    &list[run.0 as usize..run.1 as usize]
}

/// The slots instruction `info` may issue from.
fn slots<'m>(m: &'m Machine, info: &Info) -> &'m [SlotId] {
    &m.instructions[info.inst as usize].timing.slots
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
        let edges = times.time("dependences", || edges(&infos, &lists));
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

/// The instructions as list scheduling sees them: in program order, or
/// backwards (index `i` standing for instruction `n - 1 - i`).
#[derive(Clone, Copy)]
struct View<'a> {
    infos: &'a [Info],
    /// [`Deps::bookings`].
    bookings: &'a [(usize, u64)],
    reversed: bool,
}

impl View<'_> {
    fn len(&self) -> usize {
        self.infos.len()
    }

    fn get(&self, i: usize) -> &Info {
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
struct Successors {
    start: Vec<u32>,
    succ: Vec<(u32, u32)>,
}

impl Successors {
    /// The successors of the program run backwards (instruction `i` standing
    /// for `n - 1 - i`, every edge turned round): from the edges in
    /// [`edges`]' order (by `to`), read from the end.
    fn reversed(deps: &Deps) -> Successors {
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
    fn of(&self, i: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.succ[self.start[i] as usize..self.start[i + 1] as usize]
            .iter()
            .map(|&(to, delay)| (to as usize, u64::from(delay)))
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
    /// work known would then leave copies idle at the end (see [`Ready`]).
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

fn infos(t: &targets::Target, m: &Machine, insts: &[MInst], rules: Rules) -> (Vec<Info>, Lists) {
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

/// Who last wrote a place and who read it since, with the bytes each
/// reader read (a register's readers read all of it).
#[derive(Clone, Debug)]
struct Record {
    /// The bytes the writer wrote (of a memory; everything for a register).
    span: Span,
    writer: Option<usize>,
    readers: Vec<(usize, Span)>,
}

/// All of a register.
const WHOLE: Span = Span {
    start: i64::MIN,
    end: i64::MAX,
    pitch: 0,
    width: 0,
};

impl Default for Record {
    fn default() -> Record {
        Record {
            span: WHOLE,
            writer: None,
            readers: Vec::new(),
        }
    }
}

/// Bytes of a page of the records' index ([`MemRecords`]): 32 KiB (measured best of 4 to 256 KiB on GPT-2).
const PAGE_BITS: u32 = 15;

/// Pages beyond which a record is kept in a list of its own rather than
/// under every page it touches (4 MiB).
const LARGE_PAGES: i64 = (4 << 20) >> PAGE_BITS;

/// The records of one memory, indexed by the pages of [`PAGE_BITS`] each
/// touches: the ones overlapping an access are among those listed under
/// its pages (and the few large ones).
#[derive(Default)]
struct MemRecords {
    /// Every record made, by id; `None` once retired.
    recs: Vec<Option<Record>>,
    /// The records touching each page, by id.
    pages: rustc_hash::FxHashMap<i64, Vec<u32>>,
    /// The records spanning more than [`LARGE_PAGES`] pages.
    large: Vec<u32>,
    /// The last search that found each record (a record under several
    /// pages is taken once).
    seen: Vec<u32>,
    search: u32,
    /// The candidates of the last search, by id.
    hits: Vec<u32>,
}

/// The first and last page of `span`.
fn pages_of(span: &Span) -> (i64, i64) {
    (
        span.start >> PAGE_BITS,
        (span.end - 1).max(span.start) >> PAGE_BITS,
    )
}

impl MemRecords {
    /// The live records listed under the pages of `span` (and the large
    /// ones) into `hits`, by id.
    fn candidates(&mut self, span: Span) {
        self.hits.clear();
        self.search = self.search.wrapping_add(1);
        let (p0, p1) = pages_of(&span);
        let (seen, hits, search) = (&mut self.seen, &mut self.hits, self.search);
        let mut take = |id: u32| {
            if seen[id as usize] != search {
                seen[id as usize] = search;
                hits.push(id);
            }
        };
        if p1 - p0 >= self.pages.len() as i64 {
            // Wider than the index: every page is as good.
            for ids in self.pages.values() {
                ids.iter().copied().for_each(&mut take);
            }
        } else {
            for p in p0..=p1 {
                if let Some(ids) = self.pages.get(&p) {
                    ids.iter().copied().for_each(&mut take);
                }
            }
        }
        self.large.iter().copied().for_each(&mut take);
    }

    /// Calls `f` with every record sharing a byte with `span`, in no
    /// particular order.
    fn for_each_overlapping(&mut self, span: Span, mut f: impl FnMut(&mut Record)) {
        self.candidates(span);
        for &id in &self.hits {
            if let Some(r) = self.recs[id as usize].as_mut()
                && r.span.overlaps(&span)
            {
                f(r);
            }
        }
    }

    fn push(&mut self, rec: Record) {
        let id = self.recs.len() as u32;
        let (p0, p1) = pages_of(&rec.span);
        if p1 - p0 >= LARGE_PAGES {
            self.large.push(id);
        } else {
            for p in p0..=p1 {
                self.pages.entry(p).or_default().push(id);
            }
        }
        self.recs.push(Some(rec));
        self.seen.push(0);
    }

    /// Drops the records whose bytes `span` covers.
    fn retire_within(&mut self, span: Span) {
        self.candidates(span);
        let hits = std::mem::take(&mut self.hits);
        for &id in &hits {
            let Some(rec) = self.recs[id as usize].take_if(|r| span.covers(&r.span)) else {
                continue;
            };
            let (p0, p1) = pages_of(&rec.span);
            if p1 - p0 >= LARGE_PAGES {
                self.large.retain(|&x| x != id);
            } else {
                for p in p0..=p1 {
                    if let Some(ids) = self.pages.get_mut(&p) {
                        ids.retain(|&x| x != id);
                        if ids.is_empty() {
                            self.pages.remove(&p);
                        }
                    }
                }
            }
        }
        self.hits = hits;
    }
}

/// Dependencies, found in one pass over the program with, per register, its
/// last writer and readers since, and per memory the same for spans of rows (a
/// write covering a range retires its record). Only the edges that bind are
/// made: an instruction after a barrier depends on the latest barrier alone,
/// a wait on the signals since the previous wait on its semaphore.
fn edges(infos: &[Info], lists: &Lists) -> Vec<Edge> {
    let places = &lists.places;
    use rustc_hash::FxHashMap as HashMap;
    let mut out: Vec<Edge> = Vec::new();
    let mut regs: HashMap<(usize, u32), Record> = HashMap::default();
    let mut mems: HashMap<usize, MemRecords> = HashMap::default();
    let mut last_barrier: Option<usize> = None;
    let mut since_all: Vec<usize> = Vec::new();
    let mut signalers: HashMap<(usize, u32), Vec<usize>> = HashMap::default();
    let mut last_wait: HashMap<(usize, u32), usize> = HashMap::default();
    let mut consumed: HashMap<(usize, u32), usize> = HashMap::default();
    let mut pending: HashMap<(usize, u32), Vec<usize>> = HashMap::default();
    let mut stamp = vec![0usize; infos.len()];
    let mut at = vec![0usize; infos.len()];
    // (from, delay, signal) for one instruction; merged per `from` below.
    let mut need: Vec<(usize, u64, bool)> = Vec::new();
    let (mut reads, mut writes): (Vec<Place>, Vec<Place>) = (Vec::new(), Vec::new());
    out.reserve(infos.len() * 8);
    for (to, b) in infos.iter().enumerate() {
        need.clear();
        if let Some(bar) = last_barrier {
            need.push((bar, 1, false));
        }
        if b.after_all {
            need.extend(since_all.drain(..).map(|f| (f, 1, false)));
        }
        // The transfers this wait completes: it stands for their accesses
        // from here on (what touches their data comes after it; anything
        // else may move above it). A wait on a synchronous unit's signal
        // stays a barrier.
        // Signals count: of several pending on one semaphore, only the wait
        // consuming the last completes them all. A wait follows every
        // signal since the previous wait on its semaphore (conservatively,
        // their completion), and that wait.
        let mut completes: Vec<usize> = Vec::new();
        let mut unknown = false;
        for w in run_of(&lists.sems, b.waits) {
            for f in signalers.remove(w).unwrap_or_default() {
                need.push((f, infos[f].latency, true));
            }
            if let Some(&prev) = last_wait.get(w) {
                need.push((prev, 1, false));
            }
            let list = pending.get(w).map_or(0, Vec::len);
            let used = consumed.entry(*w).or_insert(0);
            *used += 1;
            if list == 0 {
                unknown = true;
            }
            if *used >= list {
                completes.extend(pending.remove(w).unwrap_or_default());
                consumed.remove(w);
            }
            // A later signal of this semaphore stays after this wait, so
            // the wait is not satisfied by a transfer after it.
            last_wait.insert(*w, to);
        }
        for sg in run_of(&lists.sems, b.signals) {
            if let Some(&w) = last_wait.get(sg) {
                need.push((w, 1, false));
            }
        }
        let wait_barrier = unknown || completes.iter().any(|&f| !infos[f].asynchronous);
        // A write follows the readers of the bytes it writes (not those of
        // other parts of a record it overlaps), or all of them where it will
        // stand in for them (more than `MANY_READERS`, see below).
        let dep = |rec: &Record, write: bool, span: Span, need: &mut Vec<(usize, u64, bool)>| {
            if let Some(f) = rec.writer {
                need.push((f, infos[f].latency, false));
            }
            if write {
                let all = rec.readers.len() > MANY_READERS;
                need.extend(
                    rec.readers
                        .iter()
                        .filter(|(_, s)| all || s.overlaps(&span))
                        .map(|&(f, _)| (f, 1, false)),
                );
            }
        };
        for (place, write) in run_of(places, b.reads)
            .iter()
            .map(|p| (p, false))
            .chain(run_of(places, b.writes).iter().map(|p| (p, true)))
        {
            match *place {
                Place::Reg { file, reg } => {
                    if let Some(rec) = regs.get(&(file, reg)) {
                        match rec.writer {
                            // An accumulation into what an accumulating
                            // instruction writes: after its forwarding delay.
                            Some(f) if b.accumulate > 0 && infos[f].accumulate > 0 => {
                                need.push((f, infos[f].accumulate, false));
                                if write {
                                    need.extend(rec.readers.iter().map(|&(r, _)| (r, 1, false)));
                                }
                            }
                            _ => dep(rec, write, WHOLE, &mut need),
                        }
                    }
                }
                Place::Mem { mem, span } => {
                    if let Some(recs) = mems.get_mut(&mem) {
                        recs.for_each_overlapping(span, |rec| dep(rec, write, span, &mut need));
                    }
                }
            }
        }
        // Record this instruction's accesses (reads first: an instruction
        // reading and writing a place is its writer), and as its own those
        // of the transfers it completes.
        reads.clear();
        reads.extend(
            run_of(places, b.reads).iter().chain(
                completes
                    .iter()
                    .flat_map(|&f| run_of(places, infos[f].reads)),
            ),
        );
        writes.clear();
        writes.extend(
            run_of(places, b.writes).iter().chain(
                completes
                    .iter()
                    .flat_map(|&f| run_of(places, infos[f].writes)),
            ),
        );
        for place in &reads {
            match *place {
                Place::Reg { file, reg } => {
                    regs.entry((file, reg))
                        .or_default()
                        .readers
                        .push((to, WHOLE));
                }
                Place::Mem { mem, span } => {
                    let recs = mems.entry(mem).or_default();
                    let mut found = false;
                    recs.for_each_overlapping(span, |rec| {
                        rec.readers.push((to, span));
                        found |= rec.span.covers(&span);
                    });
                    if !found {
                        recs.push(Record {
                            span,
                            writer: None,
                            readers: vec![(to, span)],
                        });
                    }
                }
            }
        }
        for place in &writes {
            match *place {
                Place::Reg { file, reg } => {
                    regs.insert(
                        (file, reg),
                        Record {
                            span: WHOLE,
                            writer: Some(to),
                            readers: Vec::new(),
                        },
                    );
                }
                Place::Mem { mem, span } => {
                    let recs = mems.entry(mem).or_default();
                    recs.retire_within(span);
                    // A record with many readers this write overlaps only in
                    // part: this write now stands for its readers (it follows
                    // them all), so a later write follows one instruction
                    // instead of every reader again (quadratic for element by
                    // element moves). Its writer stays: reads still wait for
                    // the data they read. Few readers are kept exactly (no
                    // false ordering between writes to different parts).
                    recs.for_each_overlapping(span, |rec| {
                        if rec.readers.len() > MANY_READERS {
                            // It stands for readers anywhere in the record.
                            let (lo, hi) = rec
                                .readers
                                .iter()
                                .fold((rec.span.start, rec.span.end), |(l, h), (_, s)| {
                                    (l.min(s.start), h.max(s.end))
                                });
                            rec.readers.clear();
                            rec.readers.push((to, Span::dense(lo, hi)));
                        }
                    });
                    recs.push(Record {
                        span,
                        writer: Some(to),
                        readers: Vec::new(),
                    });
                }
            }
        }
        for sg in run_of(&lists.sems, b.signals) {
            signalers.entry(*sg).or_default().push(to);
            pending.entry(*sg).or_default().push(to);
        }
        if b.before_all || wait_barrier {
            last_barrier = Some(to);
        }
        since_all.push(to);
        // One edge per predecessor (the longest delay, a signal if any
        // asked for one), in the order first needed; `at[from]` is where
        // this instruction's edge from `from` is, while `stamp[from]` says
        // it was made for this instruction.
        let first = out.len();
        for &(from, delay, signal) in &need {
            if from == to {
                continue;
            }
            let delay = u32::try_from(delay).unwrap_or(u32::MAX);
            if stamp[from] == to + 1 {
                let e = &mut out[at[from]];
                e.delay = e.delay.max(delay);
                e.signal |= signal;
            } else {
                stamp[from] = to + 1;
                at[from] = out.len();
                out.push(Edge {
                    from: from as u32,
                    to: to as u32,
                    delay,
                    signal,
                });
            }
        }
        // By predecessor, as the checker's messages and tests expect.
        out[first..].sort_unstable_by_key(|e| e.from);
    }
    out
}

/// Readers of a memory record beyond which a partial write stands in for them.
const MANY_READERS: usize = 64;

/// Longest latency-weighted path from each instruction to the end (edges only point forward in program order).
/// Visited by decreasing `from`: every edge points forward, so each
/// successor is final when read.
fn priorities(v: View<'_>, succ: &Successors) -> Vec<u64> {
    let n = v.len();
    let mut prio: Vec<u64> = (0..n).map(|i| v.get(i).latency).collect();
    for from in (0..n).rev() {
        for (to, delay) in succ.of(from) {
            prio[from] = prio[from].max(delay + prio[to]);
        }
    }
    prio
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

/// An instruction's part in a chain of accumulations into one register: a
/// head starts it (overwrites the register, or adds to what something else
/// wrote), a continuation adds to what the accumulation before it left,
/// an end is the last.
const HEAD: u8 = 1;
const CONTINUES: u8 = 2;
const ENDS: u8 = 4;

/// The accumulation chains of a program.
#[derive(Default)]
struct Chains {
    /// Each instruction's [`HEAD`], [`CONTINUES`], [`ENDS`] bits (0: not an
    /// accumulation).
    role: Vec<u8>,
    /// The head of its chain.
    head: Vec<u32>,
    /// The cycles of its chain from it on: its accumulation delay and those
    /// of the links after it.
    rest: Vec<u64>,
    /// Whether it holds up what follows only by the chains' registers: an
    /// accumulation, or a read of a register file accumulations write (a
    /// pop). Known for the predecessors of heads (the only ones asked).
    holds: Vec<bool>,
    /// Per head, its predecessors that do not [`Self::holds`].
    gates: Vec<u32>,
}

/// A continuation reads a register it writes, and has an edge from an
/// accumulation (the one that last wrote the register).
fn chains(infos: &[Info], edges: &[Edge], places: &[Place]) -> Chains {
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
struct Ready {
    /// Highest priority first.
    others: BinaryHeap<(u64, Reverse<usize>)>,
    conts: BinaryHeap<(u64, Reverse<usize>)>,
    /// The chains begun whose last step has not finished: head, cycles of
    /// the steps not issued, and the cycle the last one issued ends.
    open: Vec<(u32, u64, u64)>,
    /// The cycles of the chains not begun whose heads wait for nothing but
    /// what holds the chains' registers.
    waiting: u64,
}

impl Ready {
    fn push(&mut self, chains: Option<&Chains>, i: usize, prio: u64) {
        let role = chains.map_or(0, |c| c.role[i]);
        if role & CONTINUES != 0 {
            self.conts.push((prio, Reverse(i)));
        } else {
            self.others.push((prio, Reverse(i)));
        }
    }

    /// The instruction to try next on a unit of `copies`.
    fn top(
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
    fn pop(&mut self, chains: Option<&Chains>, i: usize) {
        let role = chains.map_or(0, |c| c.role[i]);
        if role & CONTINUES != 0 {
            self.conts.pop();
        } else {
            self.others.pop();
        }
    }

    /// `i` issued at `begins`: its chain is open until its last step ends.
    fn issued(&mut self, chains: Option<&Chains>, i: usize, accumulate: u64, begins: u64) {
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
    fn retire(&mut self, cycle: u64) {
        self.open
            .retain(|&(_, left, until)| left > 0 || until > cycle);
    }
}

/// Priorities from a list schedule of the reversed program under the same
/// resources: each instruction's distance from the end of that schedule
/// (plus its latency). Where units or memory bandwidth are the bottleneck,
/// this orders the work the end must wait for (the last tiles' pops and
/// stores, say) ahead of work the critical path alone ranks equal.
fn reverse_priorities(m: &Machine, deps: &Deps) -> Vec<u64> {
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
        // either alone or their maximum (session 10).
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

/// List scheduling: the bundles (of `insts`; empty without them), and the
/// cycle each instruction issued at.
fn list(
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
fn drop_needless_padding(m: &Machine, bundles: Vec<Bundle>) -> (Vec<Bundle>, Vec<usize>) {
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
fn check_deps(
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
fn claimed_placement(
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

/// The instructions of bundles, in order (the input a scheduler repacks).
pub fn flatten(bundles: &[Bundle]) -> Vec<MInst> {
    bundles
        .iter()
        .flat_map(|b| b.ops.iter().map(|(_, i)| i.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn span((start, len, pitch, width): (i64, i64, i64, i64)) -> Span {
        if pitch == 0 || width >= pitch {
            Span::dense(start, start + len)
        } else {
            // Whole rows: `len` rounded down to rows of `pitch`, plus the last row's width.
            let rows = (len / pitch).max(1);
            Span {
                start,
                end: start + (rows - 1) * pitch + width,
                pitch,
                width,
            }
        }
    }

    /// vliw-systolic, and the instructions of an assembly text for it.
    fn vliw_program(text: &str) -> (&'static targets::Target, &'static Machine, Vec<MInst>) {
        let t = targets::by_name("vliw-systolic").expect("target");
        let m = t.machine();
        let p = isa_specs::assembly::assemble(t.isa(), m, "t.s", text).expect("assembles");
        let insts =
            flatten(&isa_specs::target::decode_program(t.isa(), m, &p.code).expect("decodes"));
        (t, m, insts)
    }

    /// The reversed successors read straight from the edges are those of
    /// the program with every edge turned round and every index mirrored.
    #[test]
    fn reversed_successors_are_the_edges_turned_round() {
        let (t, m, insts) = vliw_program(
            "vexp vreg1, vreg0\nvadd vreg2, vreg1, vreg1\nvmul vreg3, vreg2, vreg1\nvexp vreg1, vreg3\nhalt\n",
        );
        let deps = Deps::new(t, m, &insts, Rules::default());
        let n = deps.infos.len();
        assert!(deps.edges.len() >= 4, "{:?}", deps.edges);
        let turned = Deps {
            edges: deps
                .edges
                .iter()
                .map(|e| Edge {
                    from: (n - 1 - e.to()) as u32,
                    to: (n - 1 - e.from()) as u32,
                    ..*e
                })
                .collect(),
            infos: deps.infos.iter().rev().map(|i| Info { ..*i }).collect(),
            rules: deps.rules,
            bookings: Vec::new(),
            chains: Chains::default(),
        };
        let (fast, slow) = (Successors::reversed(&deps), turned.successors());
        for i in 0..n {
            let mut a: Vec<_> = fast.of(i).collect();
            let mut b: Vec<_> = slow.of(i).collect();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "instruction {i}");
        }
    }

    /// The checker takes the scheduler's word for where each instruction
    /// went only as far as it holds: a true claim passes, a false claim of a
    /// good schedule falls back to matching by bits and passes, and a bad
    /// schedule fails under its own true claim.
    #[test]
    fn a_claimed_placement_is_checked_not_trusted() {
        let (t, m, insts) =
            vliw_program("vexp vreg1, vreg0\nvadd vreg2, vreg1, vreg1\nvexp vreg1, vreg0\nhalt\n");
        let rules = Rules::default();
        let deps = Deps::new(t, m, &insts, rules);
        let (good, placed) = schedule_placed(t, m, &insts, rules);
        assert!(claimed_placement(&insts, &good, &placed).is_some());
        check_deps(m, &insts, &good, &deps, Some(&placed)).expect("true claim");
        // Both `vexp`s claimed in each other's bundle, and everything in bundle 0.
        let mut swapped = placed;
        swapped.swap(0, 2);
        let all_first = vec![0; insts.len()];
        for claim in [&swapped, &all_first] {
            check_deps(m, &insts, &good, &deps, Some(claim)).expect("false claim, good schedule");
        }
        assert!(claimed_placement(&insts, &good, &all_first).is_none());
        // Back to back: the `vadd` issues before the first `vexp`'s result.
        let bad: Vec<Bundle> = insts
            .iter()
            .map(|i| Bundle {
                ops: vec![(m.instructions[i.inst.index()].timing.slots[0], i.clone())],
            })
            .collect();
        let in_order: Vec<usize> = (0..insts.len()).collect();
        assert!(claimed_placement(&insts, &bad, &in_order).is_some());
        let errors = check_deps(m, &insts, &bad, &deps, Some(&in_order)).expect_err("too early");
        assert!(
            errors
                .iter()
                .any(|e| e.contains("depends on instruction 0")),
            "{errors:?}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

        /// The page index finds exactly the live records a scan of all of
        /// them finds, through pushes and retirements of small, strided and
        /// large (over 4 MiB) spans.
        #[test]
        fn the_page_index_finds_what_a_scan_finds(
            ops in prop::collection::vec(
                (0u8..3, 0i64..(1 << 23), 1i64..(1 << 23), 0i64..4096, 1i64..4096),
                1..60,
            )
        ) {
            let mut index = MemRecords::default();
            // What was pushed: the op that made it, its span, whether live.
            let mut all: Vec<(usize, Span, bool)> = Vec::new();
            for (k, (op, start, len, pitch, width)) in ops.into_iter().enumerate() {
                let len = if k % 3 == 0 { len } else { len % 300_000 + 1 };
                let s = span((start, len, pitch, width));
                match op {
                    0 => {
                        index.push(Record { span: s, writer: Some(k), readers: Vec::new() });
                        all.push((k, s, true));
                    }
                    1 => {
                        index.retire_within(s);
                        for r in all.iter_mut().filter(|r| s.covers(&r.1)) {
                            r.2 = false;
                        }
                    }
                    _ => {}
                }
                let mut found: Vec<usize> = Vec::new();
                index.for_each_overlapping(s, |r| found.extend(r.writer));
                found.sort_unstable();
                let want: Vec<usize> = all
                    .iter()
                    .filter(|r| r.2 && r.1.overlaps(&s))
                    .map(|r| r.0)
                    .collect();
                prop_assert_eq!(found, want);
            }
        }
    }
}
