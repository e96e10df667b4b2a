//! The dependences between instructions: one pass over the program order
//! making the edges that bind (registers, memory spans, barriers,
//! semaphores), as the module documentation lists them.

use super::facts::{Info, Lists, run_of};
use super::records::{MemRecords, Record, WHOLE};
use rustc_hash::FxHashMap as HashMap;
use targets::sim::{Place, Span};

/// An edge: `to` may issue no earlier than `from`'s issue plus `delay`.
/// Kept small (16 bytes): a program has millions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Edge {
    pub(super) from: u32,
    pub(super) to: u32,
    pub(super) delay: u32,
    /// A wait on what `from` signals: the machine enforces it by stalling.
    pub(super) signal: bool,
}

impl Edge {
    pub(super) fn from(&self) -> usize {
        self.from as usize
    }
    pub(super) fn to(&self) -> usize {
        self.to as usize
    }
    pub(super) fn delay(&self) -> u64 {
        u64::from(self.delay)
    }
}

/// Dependencies, found in one pass over the program with, per register, its
/// last writer and readers since, and per memory the same for spans of rows (a
/// write covering a range retires its record). Only the edges that bind are
/// made: an instruction after a barrier depends on the latest barrier alone,
/// a wait on the signals since the previous wait on its semaphore.
pub(super) fn edges(infos: &[Info], lists: &Lists, mem_bytes: &[u64]) -> Vec<Edge> {
    let places = &lists.places;
    let mut out: Vec<Edge> = Vec::new();
    let mut accesses = Accesses {
        page_bits: mem_bytes
            .iter()
            .map(|&b| super::records::page_bits(b))
            .collect(),
        ..Accesses::default()
    };
    let mut last_barrier: Option<usize> = None;
    let mut since_all: Vec<usize> = Vec::new();
    let mut sems = Semaphores::default();
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
        let (completes, unknown) = sems.order(infos, lists, b, to, &mut need);
        let wait_barrier = unknown || completes.iter().any(|&f| !infos[f].asynchronous);
        accesses.order(infos, places, b, &mut need);
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
        accesses.record(to, &reads, &writes);
        sems.signal(lists, b, to);
        if b.before_all || wait_barrier {
            last_barrier = Some(to);
        }
        since_all.push(to);
        merge_edges(&mut out, &need, to, &mut stamp, &mut at);
    }
    out
}

/// Per semaphore: the instructions signalling it since the last wait on it,
/// that wait, the waits since its signals were last all consumed, and the
/// transfers those signals stand for.
#[derive(Default)]
struct Semaphores {
    signalers: HashMap<(usize, u32), Vec<usize>>,
    last_wait: HashMap<(usize, u32), usize>,
    consumed: HashMap<(usize, u32), usize>,
    pending: HashMap<(usize, u32), Vec<usize>>,
}

impl Semaphores {
    /// What instruction `to` (`b`) must follow by the semaphores it waits on
    /// and signals, into `need`; and the transfers its waits complete, and
    /// whether one of them waits on a semaphore with no signal pending.
    fn order(
        &mut self,
        infos: &[Info],
        lists: &Lists,
        b: &Info,
        to: usize,
        need: &mut Vec<(usize, u64, bool)>,
    ) -> (Vec<usize>, bool) {
        let Semaphores {
            signalers,
            last_wait,
            consumed,
            pending,
        } = self;
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
        (completes, unknown)
    }

    /// Instruction `to` (`b`) signals its semaphores.
    fn signal(&mut self, lists: &Lists, b: &Info, to: usize) {
        for sg in run_of(&lists.sems, b.signals) {
            self.signalers.entry(*sg).or_default().push(to);
            self.pending.entry(*sg).or_default().push(to);
        }
    }
}

/// Who last wrote each register and each span of memory, and who read it
/// since.
#[derive(Default)]
struct Accesses {
    regs: HashMap<(usize, u32), Record>,
    mems: HashMap<usize, MemRecords>,
    /// Each memory's index's page size ([`super::records::page_bits`]).
    page_bits: Vec<u32>,
}

/// Memory `mem`'s records, an index in its own page size made on first use.
fn records_of<'a>(
    mems: &'a mut HashMap<usize, MemRecords>,
    page_bits: &[u32],
    mem: usize,
) -> &'a mut MemRecords {
    mems.entry(mem).or_insert_with(|| {
        MemRecords::new(
            page_bits
                .get(mem)
                .copied()
                .unwrap_or(super::records::PAGE_BITS),
        )
    })
}

impl Accesses {
    /// What instruction `b` must follow by the places it reads and writes,
    /// into `need`.
    fn order(
        &mut self,
        infos: &[Info],
        places: &[Place],
        b: &Info,
        need: &mut Vec<(usize, u64, bool)>,
    ) {
        let Accesses { regs, mems, .. } = self;
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
                            _ => dep(rec, write, WHOLE, need),
                        }
                    }
                }
                Place::Mem { mem, span } => {
                    if let Some(recs) = mems.get_mut(&mem) {
                        recs.for_each_overlapping(span, |rec| dep(rec, write, span, need));
                    }
                }
            }
        }
    }

    /// Records instruction `to` as a reader of `reads` and then the writer
    /// of `writes`.
    fn record(&mut self, to: usize, reads: &[Place], writes: &[Place]) {
        let Accesses {
            regs,
            mems,
            page_bits,
        } = self;
        for place in reads {
            match *place {
                Place::Reg { file, reg } => {
                    regs.entry((file, reg))
                        .or_default()
                        .readers
                        .push((to, WHOLE));
                }
                Place::Mem { mem, span } => {
                    let recs = records_of(mems, page_bits, mem);
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
        for place in writes {
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
                    let recs = records_of(mems, page_bits, mem);
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
    }
}

/// Adds instruction `to`'s edges from what it needs: one edge per
/// predecessor (the longest delay, a signal if any asked for one), in the
/// order first needed; `at[from]` is where this instruction's edge from
/// `from` is, while `stamp[from]` says it was made for this instruction.
fn merge_edges(
    out: &mut Vec<Edge>,
    need: &[(usize, u64, bool)],
    to: usize,
    stamp: &mut [usize],
    at: &mut [usize],
) {
    let first = out.len();
    for &(from, delay, signal) in need {
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

/// Readers of a memory record beyond which a partial write stands in for them.
const MANY_READERS: usize = 64;
