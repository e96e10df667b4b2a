//! The event-driven timing engine, the same for every target.
//!
//! One bundle issues per cycle at most; a bundle issues when every
//! instruction in it can: a copy of its unit is free, the semaphores it waits
//! for are positive, and — on interlocked machines — the registers it reads
//! or writes are ready. Time jumps straight to the next cycle at which that
//! holds, so idle cycles cost nothing. On exposed machines a register read
//! before it is ready is a [`Fault::Hazard`]. Asynchronous units (DMA) run in
//! the background: each transfer books bandwidth on the memories it touches
//! (transfers on one memory share it, first come first served), completes
//! after its latency, and signals its semaphores then; touching a region an
//! unfinished transfer writes (or writing one it reads) is a
//! [`Fault::DmaConflict`]. Data effects are applied at issue; the conflict
//! checks guarantee nothing can observe the difference.

use super::{Effects, Fault, Place, Span, State, Trace};
use isa_specs::Machine;
use isa_specs::model::{Hazards, SlotId, UnitId};
use isa_specs::program::Program;
use isa_specs::target::DecodeError;
use std::collections::HashMap;

/// What the generated code of one target provides to the engine.
pub trait SimIsa {
    /// The typed instruction.
    type Inst;
    /// Decodes one slot's bits.
    fn decode(m: &Machine, slot: SlotId, w: &[u64]) -> Result<Option<Self::Inst>, DecodeError>;
    /// Executes its data semantics.
    fn exec(st: &mut State, m: &Machine, inst: &Self::Inst) -> Result<(), Fault>;
    /// Fills in what it reads, writes, signals and waits for.
    fn effects(m: &Machine, inst: &Self::Inst, fx: &mut Effects);
    /// Its unit.
    fn unit(inst: &Self::Inst) -> UnitId;
    /// Its latency in cycles.
    fn latency(m: &Machine, inst: &Self::Inst) -> i64;
    /// Its occupancy in cycles.
    fn occupancy(m: &Machine, inst: &Self::Inst) -> i64;
    /// Cycles after issue from which another accumulating instruction may
    /// accumulate into the register it writes (0: no forwarding).
    fn accumulate(m: &Machine, inst: &Self::Inst) -> i64;
    /// Its dynamic energy in pJ.
    fn energy(m: &Machine, inst: &Self::Inst) -> f64;
    /// Its mnemonic.
    fn mnemonic(inst: &Self::Inst) -> &'static str;
}

/// How to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Compute data (false: timing only, much faster).
    pub functional: bool,
    /// Record a trace.
    pub trace: bool,
    /// Give up after this many cycles.
    pub max_cycles: u64,
    /// Record the cycle each bundle issues at ([`Report::issue_cycles`]).
    pub record_issue: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            functional: true,
            trace: false,
            max_cycles: 1 << 40,
            record_issue: false,
        }
    }
}

/// A fault, with where and when it happened.
#[derive(Debug)]
pub struct SimError {
    /// What went wrong.
    pub fault: Fault,
    /// The microcode word (bundle index).
    pub pc: usize,
    /// The cycle.
    pub cycle: u64,
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bundle {} (cycle {}): {}",
            self.pc, self.cycle, self.fault
        )
    }
}

impl std::error::Error for SimError {}

/// Statistics of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// The target.
    pub target: String,
    /// Total cycles, until the last operation completed.
    pub cycles: u64,
    /// Seconds at the target's clock.
    pub seconds: f64,
    /// Bundles issued.
    pub bundles: u64,
    /// Instructions issued.
    pub instructions: u64,
    /// Per unit: copies, busy cycles, utilisation (busy / (cycles × copies)).
    pub units: Vec<UnitReport>,
    /// Per memory: bytes read and written.
    pub memories: Vec<MemoryReport>,
    /// Energy of the instructions' datapaths, pJ.
    pub dynamic_energy_pj: f64,
    /// Energy of memory and register traffic, pJ.
    pub access_energy_pj: f64,
    /// Static energy (leakage) over the run, pJ.
    pub static_energy_pj: f64,
    /// Total energy, pJ.
    pub energy_pj: f64,
    /// The cycle each bundle issued at, in program order, when asked for
    /// ([`Config::record_issue`]); bundles after a halt are absent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub issue_cycles: Vec<u64>,
}

/// One unit's statistics.
#[derive(Clone, Debug, serde::Serialize)]
pub struct UnitReport {
    /// Unit name.
    pub name: String,
    /// Copies.
    pub count: i64,
    /// Cycles busy (summed over copies).
    pub busy_cycles: u64,
    /// busy / (cycles × count).
    pub utilisation: f64,
}

/// One memory's traffic.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MemoryReport {
    /// Memory name.
    pub name: String,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
}

/// The end of a run.
#[derive(Debug)]
pub struct Outcome {
    /// Statistics.
    pub report: Report,
    /// Final state (memories hold the outputs).
    pub state: State,
    /// The trace, if asked for.
    pub trace: Option<Trace>,
}

struct InFlight {
    end: u64,
    mem: usize,
    span: Span,
    write: bool,
}

struct Engine<'m> {
    m: &'m Machine,
    now: u64,
    unit_free: Vec<Vec<u64>>,
    reg_ready: HashMap<(usize, u32), u64>,
    /// Registers last written by an instruction with accumulation
    /// forwarding: from when the next accumulating instruction may use them.
    acc_ready: HashMap<(usize, u32), u64>,
    /// Memory regions a synchronous unit is still writing: (memory, bytes, ready cycle).
    mem_ready: Vec<(usize, Span, u64)>,
    mem_booked: Vec<u64>,
    inflight: Vec<InFlight>,
    /// Pending semaphore increments: (cycle, bank, index).
    pending: Vec<(u64, usize, u32)>,
    busy: Vec<u64>,
    bytes_read: Vec<u64>,
    bytes_written: Vec<u64>,
    energy: f64,
    access_energy: f64,
    last_done: u64,
    /// Completion of the latest-finishing instruction issued so far.
    max_end: u64,
}

impl Engine<'_> {
    /// When an instruction with accumulation forwarding `acc` (0: none)
    /// may access register `(file, reg)` on an interlocked machine.
    fn reg_time(&self, file: usize, reg: u32, acc: i64) -> u64 {
        match self.acc_ready.get(&(file, reg)) {
            Some(t) if acc > 0 => *t,
            _ => self.reg_ready.get(&(file, reg)).copied().unwrap_or(0),
        }
    }

    fn err(&self, fault: Fault, pc: usize) -> SimError {
        SimError {
            fault,
            pc,
            cycle: self.now,
        }
    }

    /// Applies semaphore increments that have happened by `t`.
    fn settle(&mut self, st: &mut State, t: u64) -> Result<(), Fault> {
        let mut keep = Vec::new();
        for (when, bank, idx) in self.pending.drain(..) {
            if when <= t {
                let max = self.m.semaphores[bank].max.value;
                let c = &mut st.sems[bank][idx as usize];
                *c += 1;
                if *c > max {
                    return Err(Fault::SemaphoreOverflow {
                        bank: self.m.semaphores[bank].name.clone(),
                        index: idx,
                    });
                }
            } else {
                keep.push((when, bank, idx));
            }
        }
        self.pending = keep;
        Ok(())
    }

    /// Earliest cycle at which semaphore `(bank, idx)` can be positive.
    fn sem_ready(&self, st: &State, bank: usize, idx: u32, from: u64) -> Option<u64> {
        if st.sems[bank].get(idx as usize).is_some_and(|c| *c > 0) {
            return Some(from);
        }
        self.pending
            .iter()
            .filter(|(_, b, i)| *b == bank && *i == idx)
            .map(|(t, ..)| (*t).max(from))
            .min()
    }
}

/// Runs a program: loads its data and `inputs` (`(name, bytes)`), then issues its bundles.
pub fn run<T: SimIsa>(
    m: &Machine,
    program: &Program,
    inputs: &[(String, Vec<u8>)],
    cfg: &Config,
) -> Result<Outcome, SimError> {
    let fail = |fault, pc| SimError {
        fault,
        pc,
        cycle: 0,
    };
    program
        .check_machine(m)
        .map_err(|e| fail(Fault::IllegalEncoding(e.to_string()), 0))?;
    // Instruction addresses are aligned by their encoding; the program's tensors are placed by its descriptors.
    for t in program.inputs.iter().chain(&program.outputs) {
        if t.addr % t.dtype.bytes() != 0 {
            let fault = Fault::Unaligned {
                tensor: t.name.clone(),
                memory: t.memory.clone(),
                addr: t.addr,
                align: t.dtype.bytes(),
            };
            return Err(fail(fault, 0));
        }
    }
    let mut st = State::new(m, cfg.functional);
    let mem_id = |name: &str| m.memories.iter().position(|x| x.name == name);
    if cfg.functional {
        for seg in &program.data {
            let mi = mem_id(&seg.memory).ok_or_else(|| {
                fail(
                    Fault::IllegalEncoding(format!("unknown memory `{}`", seg.memory)),
                    0,
                )
            })?;
            st.write_bytes(m, mi, seg.addr, &seg.bytes)
                .map_err(|f| fail(f, 0))?;
        }
        for (name, bytes) in inputs {
            let Some(desc) = program.inputs.iter().find(|t| &t.name == name) else {
                continue;
            };
            let mi = mem_id(&desc.memory).ok_or_else(|| {
                fail(
                    Fault::IllegalEncoding(format!("unknown memory `{}`", desc.memory)),
                    0,
                )
            })?;
            for (addr, off, len) in desc.row_spans() {
                let Some(row) = bytes.get(off..off + len) else {
                    break;
                };
                st.write_bytes(m, mi, addr, row).map_err(|f| fail(f, 0))?;
            }
        }
    }
    // Decode everything first: an illegal word is reported before anything runs.
    let wb = isa_specs::target::word_bytes(m);
    if !program.code.len().is_multiple_of(wb) {
        return Err(fail(
            Fault::IllegalEncoding(format!(
                "{} bytes of microcode is not a whole number of {wb}-byte words",
                program.code.len()
            )),
            0,
        ));
    }
    let mut bundles: Vec<Vec<T::Inst>> = Vec::with_capacity(program.code.len() / wb);
    for (pc, chunk) in program.code.chunks(wb).enumerate() {
        let mut word = vec![0u64; isa_specs::target::bits::words(m.word_bits)];
        for (i, b) in chunk.iter().enumerate() {
            word[i / 8] |= u64::from(*b) << ((i % 8) * 8);
        }
        let mut bundle = Vec::new();
        for (si, s) in m.slots.iter().enumerate() {
            let w = isa_specs::target::bits::extract(&word, s.lo, s.width());
            match T::decode(m, SlotId::from_index(si), &w) {
                Ok(Some(i)) => bundle.push(i),
                Ok(None) => {}
                Err(e) => return Err(fail(Fault::IllegalEncoding(e.to_string()), pc)),
            }
        }
        bundles.push(bundle);
    }

    let mut e = Engine {
        m,
        now: 0,
        unit_free: m
            .units
            .iter()
            .map(|u| vec![0; u.count.value.max(1) as usize])
            .collect(),
        reg_ready: HashMap::new(),
        acc_ready: HashMap::new(),
        mem_ready: Vec::new(),
        mem_booked: vec![0; m.memories.len()],
        inflight: Vec::new(),
        pending: Vec::new(),
        busy: vec![0; m.units.len()],
        bytes_read: vec![0; m.memories.len()],
        bytes_written: vec![0; m.memories.len()],
        energy: 0.0,
        access_energy: 0.0,
        last_done: 0,
        max_end: 0,
    };
    let mut trace = cfg.trace.then(Trace::default);
    let (mut issued_bundles, mut issued) = (0u64, 0u64);
    let mut issue_cycles = Vec::new();
    let mut fx: Vec<Effects> = Vec::new();
    for (pc, bundle) in bundles.iter().enumerate() {
        fx.resize_with(bundle.len(), Effects::default);
        for (i, inst) in bundle.iter().enumerate() {
            T::effects(m, inst, &mut fx[i]);
        }
        let t = issue_time::<T>(&e, &st, m, bundle, &fx, pc)?;
        e.now = t;
        if e.now > cfg.max_cycles {
            return Err(e.err(Fault::CycleLimit(cfg.max_cycles), pc));
        }
        e.settle(&mut st, e.now).map_err(|f| e.err(f, pc))?;
        if cfg.record_issue {
            issue_cycles.push(e.now);
        }
        let mut halt = false;
        for (inst, f) in bundle.iter().zip(&fx) {
            for (bank, idx) in &f.waits {
                st.sems[*bank][*idx as usize] -= 1;
            }
            check_hazards(&e, m, f, T::accumulate(m, inst)).map_err(|fault| e.err(fault, pc))?;
            issue::<T>(&mut e, &mut st, m, inst, f, trace.as_mut())
                .map_err(|fault| e.err(fault, pc))?;
            issued += 1;
            halt |= f.halt;
        }
        issued_bundles += 1;
        e.now += 1;
        e.last_done = e.last_done.max(e.now);
        if halt {
            break;
        }
    }
    // Everything in flight completes.
    let end = e
        .inflight
        .iter()
        .map(|f| f.end)
        .chain(e.pending.iter().map(|p| p.0))
        .fold(e.last_done, u64::max);
    e.now = end;
    e.settle(&mut st, end)
        .map_err(|f| e.err(f, bundles.len()))?;
    let cycles = end;
    let units = m
        .units
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let count = u.count.value.max(1);
            let denom = (cycles.max(1) as f64) * count as f64;
            UnitReport {
                name: u.name.clone(),
                count,
                busy_cycles: e.busy[i],
                utilisation: e.busy[i] as f64 / denom,
            }
        })
        .collect();
    let memories = m
        .memories
        .iter()
        .enumerate()
        .map(|(i, x)| MemoryReport {
            name: x.name.clone(),
            bytes_read: e.bytes_read[i],
            bytes_written: e.bytes_written[i],
        })
        .collect();
    let seconds = cycles as f64 / (m.clock_mhz.value as f64 * 1e6);
    // Static power in mW over the run: mW · s = mJ = 1e9 pJ.
    let static_mw: f64 = m
        .units
        .iter()
        .map(|u| u.static_power.value * u.count.value as f64)
        .sum::<f64>()
        + m.memories.iter().map(|x| x.static_power.value).sum::<f64>();
    let static_energy_pj = static_mw * seconds * 1e9;
    let report = Report {
        target: m.name.clone(),
        cycles,
        seconds,
        bundles: issued_bundles,
        instructions: issued,
        units,
        memories,
        dynamic_energy_pj: e.energy,
        access_energy_pj: e.access_energy,
        static_energy_pj,
        energy_pj: e.energy + e.access_energy + static_energy_pj,
        issue_cycles,
    };
    Ok(Outcome {
        report,
        state: st,
        trace,
    })
}

/// The earliest cycle at which every instruction of the bundle can issue.
fn issue_time<T: SimIsa>(
    e: &Engine<'_>,
    st: &State,
    m: &Machine,
    bundle: &[T::Inst],
    fx: &[Effects],
    pc: usize,
) -> Result<u64, SimError> {
    let mut t = e.now;
    // Copies asked for per unit within this bundle.
    let mut wanted: HashMap<usize, usize> = HashMap::new();
    for (inst, f) in bundle.iter().zip(fx) {
        let u = T::unit(inst).index();
        let k = wanted.entry(u).or_insert(0);
        let mut free = e.unit_free[u].clone();
        free.sort_unstable();
        let copy_free = free.get(*k).copied().unwrap_or(u64::MAX);
        *k += 1;
        if copy_free == u64::MAX {
            return Err(e.err(
                Fault::IllegalEncoding(format!(
                    "bundle uses more copies of unit `{}` than exist",
                    m.units[u].name
                )),
                pc,
            ));
        }
        t = t.max(copy_free);
        if m.hazards == Hazards::Interlocked {
            for a in &f.accesses {
                match a.place {
                    Place::Reg { file, reg } => {
                        t = t.max(e.reg_time(file, reg, T::accumulate(m, inst)));
                    }
                    Place::Mem { mem, span } => {
                        for &(_, _, ready) in e
                            .mem_ready
                            .iter()
                            .filter(|w| w.0 == mem && span.overlaps(&w.1))
                        {
                            t = t.max(ready);
                        }
                    }
                }
            }
        }
        if f.fence {
            // Every earlier instruction, synchronous or not, has completed.
            t = e
                .inflight
                .iter()
                .map(|x| x.end)
                .chain(e.pending.iter().map(|p| p.0))
                .fold(t.max(e.max_end), u64::max);
        }
        for (bank, idx) in &f.waits {
            match e.sem_ready(st, *bank, *idx, t) {
                Some(ready) => t = t.max(ready),
                None => {
                    let fault = Fault::Deadlock {
                        bank: m.semaphores[*bank].name.clone(),
                        index: *idx,
                        cycle: t,
                    };
                    return Err(SimError {
                        fault,
                        pc,
                        cycle: t,
                    });
                }
            }
        }
    }
    Ok(t)
}

/// On exposed machines: registers read before they are ready. On every machine: regions an unfinished transfer owns.
/// `acc` is the instruction's accumulation forwarding (0: none).
fn check_hazards(e: &Engine<'_>, m: &Machine, f: &Effects, acc: i64) -> Result<(), Fault> {
    for a in &f.accesses {
        match a.place {
            // Accumulating into what an accumulating instruction writes, late enough.
            Place::Reg { file, reg }
                if acc > 0 && e.acc_ready.get(&(file, reg)).is_some_and(|t| *t <= e.now) => {}
            Place::Reg { file, reg } if a.write && m.hazards == Hazards::Exposed => {
                if let Some(ready) = e
                    .reg_ready
                    .get(&(file, reg))
                    .copied()
                    .filter(|r| *r > e.now)
                {
                    return Err(Fault::WriteHazard {
                        file: m.regfiles[file].name.clone(),
                        reg,
                        cycle: e.now,
                        ready,
                    });
                }
            }
            Place::Reg { file, reg } if !a.write && m.hazards == Hazards::Exposed => {
                if let Some(ready) = e
                    .reg_ready
                    .get(&(file, reg))
                    .copied()
                    .filter(|r| *r > e.now)
                {
                    return Err(Fault::Hazard {
                        file: m.regfiles[file].name.clone(),
                        reg,
                        cycle: e.now,
                        ready,
                    });
                }
            }
            Place::Mem { mem, span } => {
                if m.hazards == Hazards::Exposed
                    && let Some(w) = e
                        .mem_ready
                        .iter()
                        .find(|w| w.0 == mem && w.2 > e.now && span.overlaps(&w.1))
                {
                    return Err(Fault::MemoryHazard {
                        memory: m.memories[mem].name.clone(),
                        addr: span.start.max(w.1.start) as u64,
                        cycle: e.now,
                        ready: w.2,
                    });
                }
                for x in e
                    .inflight
                    .iter()
                    .filter(|x| x.end > e.now && x.mem == mem && span.overlaps(&x.span))
                {
                    if x.write || a.write {
                        return Err(Fault::DmaConflict {
                            memory: m.memories[mem].name.clone(),
                            addr: span.start.max(x.span.start) as u64,
                            cycle: e.now,
                            until: x.end,
                        });
                    }
                }
            }
            Place::Reg { .. } => {}
        }
    }
    Ok(())
}

fn issue<T: SimIsa>(
    e: &mut Engine<'_>,
    st: &mut State,
    m: &Machine,
    inst: &T::Inst,
    f: &Effects,
    trace: Option<&mut Trace>,
) -> Result<(), Fault> {
    let u = T::unit(inst).index();
    let unit = &m.units[u];
    let lat = T::latency(m, inst).max(1) as u64;
    let occ = T::occupancy(m, inst).max(1) as u64;
    let copy = e.unit_free[u]
        .iter()
        .enumerate()
        .min_by_key(|(_, t)| **t)
        .map_or(0, |(i, _)| i);
    let mut start = e.now;
    if unit.asynchronous {
        // Transfers on one memory share its bandwidth: each books its bytes / bandwidth in turn.
        for a in &f.accesses {
            if let Place::Mem { mem, .. } = a.place {
                start = start.max(e.mem_booked[mem]);
            }
        }
        for a in &f.accesses {
            if let Place::Mem { mem, .. } = a.place {
                let bw = m.memories[mem].bandwidth.value.max(1) as u64;
                e.mem_booked[mem] = start + a.bytes.div_ceil(bw);
            }
        }
    }
    let end = start + lat;
    // A copy is busy from when it starts (a transfer may wait for bandwidth) for its occupancy, or until it finishes if not pipelined.
    let busy = if unit.pipelined {
        occ
    } else {
        occ.max(end - start)
    };
    e.unit_free[u][copy] = start + busy;
    e.max_end = e.max_end.max(end);
    e.busy[u] += busy;
    e.energy += T::energy(m, inst);
    for a in &f.accesses {
        match a.place {
            Place::Mem { mem, span } => {
                let x = &m.memories[mem];
                // A unit computing inside the memory reads and writes it
                // without crossing its interface: the instruction's own
                // energy is the access's (pim-dram's `mac`).
                let inside = x.compute.iter().any(|c| c.index() == u);
                if a.write {
                    e.bytes_written[mem] += a.bytes;
                    if !inside {
                        e.access_energy += a.bytes as f64 * x.write_energy.value;
                    }
                } else {
                    e.bytes_read[mem] += a.bytes;
                    if !inside {
                        e.access_energy += a.bytes as f64 * x.read_energy.value;
                    }
                }
                if unit.asynchronous {
                    e.inflight.push(InFlight {
                        end,
                        mem,
                        span,
                        write: a.write,
                    });
                } else if a.write && end > e.now + 1 {
                    e.mem_ready.push((mem, span, end));
                }
            }
            Place::Reg { file, reg } => {
                e.access_energy += a.bytes as f64 * m.regfiles[file].energy.value;
                if a.write {
                    e.reg_ready.insert((file, reg), end);
                    let acc = T::accumulate(m, inst);
                    if acc > 0 {
                        e.acc_ready.insert((file, reg), start + acc as u64);
                    } else {
                        e.acc_ready.remove(&(file, reg));
                    }
                }
            }
        }
    }
    for (bank, idx) in &f.signals {
        e.pending.push((end, *bank, *idx));
    }
    e.inflight.retain(|x| x.end > e.now);
    let now = e.now;
    e.mem_ready.retain(|w| w.2 > now);
    e.last_done = e.last_done.max(end);
    if let Some(tr) = trace {
        let tid = (u as u64) * 1000 + copy as u64;
        tr.track(
            tid,
            if unit.count.value > 1 {
                format!("{}[{copy}]", unit.name)
            } else {
                unit.name.clone()
            },
        );
        tr.span(
            tid,
            T::mnemonic(inst),
            start,
            end - start,
            serde_json::json!({ "issue": e.now, "latency": lat, "occupancy": occ }),
        );
    }
    if st.functional {
        T::exec(st, m, inst)?;
    }
    Ok(())
}
