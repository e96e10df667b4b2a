//! The code emitter of the lowering: instructions with virtual registers and
//! not yet placed on-chip buffers, chosen by matching tile operations against
//! the generated patterns; tiles and their movement between places.

use super::machine::{Info, Loc, Place};
pub use super::types::Pad;
use crate::regalloc::{VInst, VOperand};
use isa_specs::Machine;
use isa_specs::model::{AssignOp, DType, InstId, MemId, OperandKind, RegFileId, SemExpr, Stmt};
use isa_specs::select::{self, TileAccess, TileExpr, TileOp, TilePlace, TileTensor};
use isa_specs::target::{Isa, OpValue};

/// Where a memory tile's bytes are: a fixed address, or an on-chip buffer placed later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// An address in its memory.
    Fixed(u64),
    /// A buffer (index into [`Emitter::bufs`]).
    Buf(usize),
}

/// [`Emitter::sides`]: no half preferred.
pub const NO_SIDE: u8 = u8::MAX;

/// Bytes from which a transfer is spread over the copies of its unit
/// (`Emitter::spread_transfer`): below, one engine's latency dominates.
pub const SPREAD_TRANSFER_BYTES: i64 = 64 * 1024;

/// A 2-D tile in a memory: `rows` x `cols` elements, rows `pitch` elements apart.
#[derive(Clone, Debug, PartialEq)]
pub struct MemTile {
    /// The memory.
    pub mem: MemId,
    /// Element type.
    pub dtype: DType,
    /// Buffer or address.
    pub base: Base,
    /// Byte offset of element `[0, 0]` from the base.
    pub offset: u64,
    /// Rows.
    pub rows: i64,
    /// Columns.
    pub cols: i64,
    /// Elements between rows.
    pub pitch: i64,
    /// The asynchronous transfer that fills it: `(bank, semaphore, generation)`.
    pub ready: Option<(usize, usize, u64)>,
}

impl MemTile {
    /// The sub-tile at `(r, c)` of `rows` x `cols`.
    pub fn view(&self, r: i64, c: i64, rows: i64, cols: i64) -> MemTile {
        MemTile {
            offset: self.offset + ((r * self.pitch + c) as u64) * self.dtype.bytes(),
            rows,
            cols,
            ..self.clone()
        }
    }

    /// Where it is.
    pub fn loc(&self) -> Loc {
        Loc {
            place: Place::Mem(self.mem),
            dtype: self.dtype,
        }
    }
}

/// A tile held in one (virtual) register.
#[derive(Clone, Debug, PartialEq)]
pub struct RegTile {
    /// Register file.
    pub file: RegFileId,
    /// Element type.
    pub dtype: DType,
    /// Virtual register.
    pub reg: u32,
    /// Rows of the tile (1 for one-dimensional registers).
    pub rows: i64,
    /// Columns.
    pub cols: i64,
}

/// A tile somewhere.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// In memory.
    Mem(MemTile),
    /// In a register.
    Reg(RegTile),
    /// A register holding one value in every element: a uniform constant,
    /// standing for a tile of any shape in the chains of its register file
    /// (it never moves to memory).
    Splat(RegTile),
}

impl Val {
    /// Where it is.
    pub fn loc(&self) -> Loc {
        match self {
            Val::Mem(t) => t.loc(),
            Val::Reg(r) | Val::Splat(r) => Loc {
                place: Place::Reg(r.file),
                dtype: r.dtype,
            },
        }
    }

    /// Its tensor for a tile operation, seen with `shape`.
    pub fn tensor(&self, shape: Vec<i64>) -> (TileTensor, Ref) {
        match self {
            Val::Mem(t) => Emitter::mem_tensor(t, shape),
            Val::Reg(r) | Val::Splat(r) => Emitter::reg_tensor(r.file, r.dtype, r.reg, shape),
        }
    }

    /// `(rows, cols)`.
    pub fn dims(&self) -> (i64, i64) {
        match self {
            Val::Mem(t) => (t.rows, t.cols),
            Val::Reg(r) | Val::Splat(r) => (r.rows, r.cols),
        }
    }
}

/// An on-chip buffer to be placed by the memory planner.
#[derive(Clone, Debug, PartialEq)]
pub struct BufInfo {
    /// Its memory.
    pub mem: MemId,
    /// Bytes.
    pub size: u64,
    /// Alignment.
    pub align: u64,
    /// First and last instruction touching it; a buffer never touched yet
    /// (see [`Emitter::shared_buffer`]) has its first after its last.
    pub live: (usize, usize),
    /// Holds a value across regions (written by one, read by later ones).
    pub shared: bool,
}

impl BufInfo {
    /// Whether any instruction touches it.
    pub fn used(&self) -> bool {
        self.live.0 <= self.live.1
    }
}

/// How a tensor of a tile operation is bound in the emitted code.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ref {
    /// Nothing to rewrite (fixed address, immediate).
    Fixed,
    /// A virtual register.
    VReg(RegFileId, u32),
    /// Inside a buffer.
    Buf(usize),
}

/// The state of an [`Emitter`] to return to when an attempt fails.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    code: usize,
    bufs: usize,
    fixups: usize,
    next_vreg: Vec<u32>,
    sem_next: Vec<usize>,
    pending: Vec<Vec<Option<Pending>>>,
    generation: u64,
}

/// A transfer in flight on a semaphore.
#[derive(Clone, Debug, PartialEq)]
struct Pending {
    generation: u64,
    /// Transfers signalling the semaphore (one wait each).
    count: u32,
    /// Buffers it reads or writes (kept alive until the wait).
    bufs: Vec<usize>,
    /// Byte ranges it touches: `(where, start, end, writes)`.
    ranges: Vec<(Span, u64, u64, bool)>,
}

/// Where a byte range lies: at fixed addresses of a memory, or inside a
/// buffer (whose address the planner chooses later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    Mem(MemId),
    Buf(usize),
}

impl MemTile {
    /// The bytes from its first element to its last (rows in between
    /// included): two transfers into different columns of one buffer
    /// overlap here, and are ordered, because a transfer may start later
    /// than issued (waiting for bandwidth) and the machine checks whole
    /// ranges.
    fn range(&self) -> (Span, u64, u64) {
        let (span, start) = match self.base {
            Base::Fixed(a) => (Span::Mem(self.mem), a + self.offset),
            Base::Buf(b) => (Span::Buf(b), self.offset),
        };
        let n = ((self.rows - 1).max(0) * self.pitch + self.cols).max(0) as u64;
        (span, start, start + n * self.dtype.bytes())
    }
}

/// The instruction stream being built.
#[allow(missing_debug_implementations)]
pub struct Emitter<'a> {
    /// The machine.
    pub m: &'a Machine,
    /// Its generated instruction set.
    pub isa: &'static dyn Isa,
    /// What the lowering knows about it.
    pub info: &'a Info,
    /// Large transfers go as one piece per copy of their unit (`Emitter::spread_transfer`).
    pub spread_transfers: bool,
    /// Code so far.
    pub code: Vec<VInst>,
    /// The half of each register file new virtual registers prefer
    /// ([`crate::regalloc::allocate_sided`]), while set.
    pub side: Option<u8>,
    /// The half each virtual register prefers, by file and number
    /// ([`NO_SIDE`] for none).
    pub sides: Vec<Vec<u8>>,
    /// Buffers so far.
    pub bufs: Vec<BufInfo>,
    /// `(instruction, operand, buffer)`: addresses relative to a buffer's base.
    pub fixups: Vec<(usize, usize, usize)>,
    next_vreg: Vec<u32>,
    sem_next: Vec<usize>,
    /// Per bank and semaphore: the transfer in flight (generation, buffers it touches).
    pending: Vec<Vec<Option<Pending>>>,
    generation: u64,
    /// Instruction forms of element-wise operations, found once.
    pub ew_cache:
        std::cell::RefCell<std::collections::HashMap<super::types::Ew, Vec<super::types::EwForm>>>,
    /// Operand derivations of selected instructions, per tile shape.
    finish_cache: std::cell::RefCell<select::FinishCache>,
}

use super::machine::rup as round_up;

impl<'a> Emitter<'a> {
    /// An empty stream.
    pub fn new(m: &'a Machine, isa: &'static dyn Isa, info: &'a Info) -> Emitter<'a> {
        Emitter {
            m,
            isa,
            info,
            spread_transfers: true,
            code: Vec::new(),
            side: None,
            sides: vec![Vec::new(); m.regfiles.len()],
            bufs: Vec::new(),
            fixups: Vec::new(),
            next_vreg: vec![0; m.regfiles.len()],
            sem_next: vec![0; m.semaphores.len()],
            pending: m
                .semaphores
                .iter()
                .map(|b| vec![None; b.count.value.max(0) as usize])
                .collect(),
            generation: 0,
            ew_cache: Default::default(),
            finish_cache: Default::default(),
        }
    }

    /// Where the stream is now.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            code: self.code.len(),
            bufs: self.bufs.len(),
            fixups: self.fixups.len(),
            next_vreg: self.next_vreg.clone(),
            sem_next: self.sem_next.clone(),
            pending: self.pending.clone(),
            generation: self.generation,
        }
    }

    /// Forgets everything emitted since `cp`.
    pub fn rollback(&mut self, cp: Checkpoint) {
        self.code.truncate(cp.code);
        self.bufs.truncate(cp.bufs);
        self.fixups.truncate(cp.fixups);
        let last = cp.code.saturating_sub(1);
        for b in &mut self.bufs {
            b.live.1 = b.live.1.min(last);
        }
        self.next_vreg = cp.next_vreg;
        self.sem_next = cp.sem_next;
        self.pending = cp.pending;
        self.generation = cp.generation;
    }

    /// A fresh virtual register.
    pub fn vreg(&mut self, file: RegFileId) -> u32 {
        let v = self.next_vreg[file.index()];
        self.next_vreg[file.index()] += 1;
        let sides = &mut self.sides[file.index()];
        let s = self.side.unwrap_or(NO_SIDE);
        if let Some(x) = sides.get_mut(v as usize) {
            *x = s;
        } else if self.side.is_some() {
            sides.resize(v as usize, NO_SIDE);
            sides.push(s);
        }
        v
    }

    /// A fresh on-chip buffer for a dense `rows` x `cols` tile.
    pub fn buffer(&mut self, mem: MemId, dtype: DType, rows: i64, cols: i64) -> MemTile {
        self.buffer_padded(mem, dtype, rows, cols, Pad::Dense)
    }

    /// A fresh on-chip buffer for a `rows` x `cols` tile laid out as `pad` says.
    pub fn buffer_padded(
        &mut self,
        mem: MemId,
        dtype: DType,
        rows: i64,
        cols: i64,
        pad: Pad,
    ) -> MemTile {
        let (pitch, rows_alloc) = match pad {
            Pad::Dense => (cols, rows),
            Pad::Registers => (
                round_up(cols, self.info.pitch_granule),
                round_up(rows, self.info.row_granule),
            ),
            Pad::Aligned => {
                let align = (self.info.mem_align[mem.index()] / dtype.bytes()).max(1) as i64;
                let g = super::machine::lcm(self.info.pitch_granule, align);
                (round_up(cols, g), round_up(rows, self.info.row_granule))
            }
        };
        let align = self.info.mem_align[mem.index()].max(dtype.bytes());
        let at = self.code.len();
        self.bufs.push(BufInfo {
            mem,
            size: (rows_alloc * pitch) as u64 * dtype.bytes(),
            align,
            live: (at, at),
            shared: false,
        });
        MemTile {
            mem,
            dtype,
            base: Base::Buf(self.bufs.len() - 1),
            offset: 0,
            rows,
            cols,
            pitch,
            ready: None,
        }
    }

    /// A buffer holding a value across regions: live from the first
    /// instruction that touches it to the last, wherever it is created.
    pub fn shared_buffer(
        &mut self,
        mem: MemId,
        dtype: DType,
        rows: i64,
        cols: i64,
        pad: Pad,
    ) -> MemTile {
        let t = self.buffer_padded(mem, dtype, rows, cols, pad);
        if let Base::Buf(b) = t.base {
            self.bufs[b].live = (usize::MAX, 0);
            self.bufs[b].shared = true;
        }
        t
    }

    /// Waits for every transfer in flight that touches buffer `buf`.
    pub fn settle_buffer(&mut self, buf: usize) -> Result<(), String> {
        let mut hits = Vec::new();
        for (bank, sems) in self.pending.iter().enumerate() {
            for (sem, p) in sems.iter().enumerate() {
                if p.as_ref().is_some_and(|p| p.bufs.contains(&buf)) {
                    hits.push((bank, sem));
                }
            }
        }
        for (bank, sem) in hits {
            self.wait(bank, sem)?;
        }
        Ok(())
    }

    fn touch(&mut self, buf: usize) {
        let at = self.code.len().saturating_sub(1);
        let b = &mut self.bufs[buf];
        b.live.0 = b.live.0.min(at);
        b.live.1 = b.live.1.max(at);
    }

    /// The tensor of a tile operation for a memory tile of the given shape.
    pub fn mem_tensor(t: &MemTile, shape: Vec<i64>) -> (TileTensor, Ref) {
        let strides = if shape.len() == 2 {
            vec![t.pitch, 1]
        } else {
            vec![1]
        };
        let addr = match t.base {
            Base::Fixed(a) => a + t.offset,
            Base::Buf(_) => t.offset,
        };
        let r = match t.base {
            Base::Fixed(_) => Ref::Fixed,
            Base::Buf(b) => Ref::Buf(b),
        };
        (
            TileTensor {
                dtype: t.dtype,
                shape,
                place: TilePlace::Mem {
                    mem: t.mem,
                    addr,
                    strides,
                },
            },
            r,
        )
    }

    /// The tensor of a tile operation for a register of the given shape.
    pub fn reg_tensor(
        file: RegFileId,
        dtype: DType,
        reg: u32,
        shape: Vec<i64>,
    ) -> (TileTensor, Ref) {
        (
            TileTensor {
                dtype,
                shape,
                place: TilePlace::Reg { file, reg: 0 },
            },
            Ref::VReg(file, reg),
        )
    }

    /// The cheapest instruction computing `op` (only `only`, if given), checked against the machine.
    pub fn choose(
        &self,
        op: &TileOp,
        only: Option<InstId>,
    ) -> Result<(isa_specs::target::MInst, select::Binder), String> {
        let mut best: Option<(i64, isa_specs::target::MInst, select::Binder)> = None;
        let mut why = Vec::new();
        let matches = match only {
            Some(id) => self
                .isa
                .match_inst(self.m, id, op)
                .map(|b| (id, b))
                .into_iter()
                .collect(),
            None => self.isa.match_op(self.m, op),
        };
        for (id, b) in matches {
            match self.finish_cache.borrow_mut().finish(self.m, id, &b, op) {
                Ok(mi) => {
                    let cost = self.isa.occupancy(self.m, &mi);
                    if best.as_ref().is_none_or(|(c, _, _)| cost < *c) {
                        best = Some((cost, mi, b));
                    }
                }
                Err(e) => why.push(format!("`{}`: {e}", self.m.instructions[id.index()].name)),
            }
        }
        match best {
            Some((_, mi, b)) => Ok((mi, b)),
            None if why.is_empty() => Err("no instruction has these semantics".to_owned()),
            None => Err(why.join("; ")),
        }
    }

    /// The transfer of `rows` x `cols` from `src` into `out` by copy `c` as
    /// one block of rows per copy of its unit, when the unit is asynchronous
    /// with several copies, the transfer is large (at least
    /// [`SPREAD_TRANSFER_BYTES`]) and every block is a transfer the
    /// instruction takes.
    fn spread_transfer(
        &self,
        c: &super::machine::Copy,
        rows: i64,
        cols: i64,
        src: &MemTile,
        out: &MemTile,
    ) -> Option<Vec<(TileOp, Vec<Ref>)>> {
        let unit = &self.m.units[self.m.instructions[c.inst.index()].timing.unit.index()];
        let copies = unit.count.value.max(1);
        let bytes = rows * cols * c.to.dtype.bytes() as i64;
        if !self.spread_transfers
            || !unit.asynchronous
            || copies < 2
            || rows < copies
            || bytes < SPREAD_TRANSFER_BYTES
        {
            return None;
        }
        let block = (rows + copies - 1) / copies;
        let mut ops = Vec::new();
        let mut r = 0;
        while r < rows {
            let h = block.min(rows - r);
            let op = self.copy_op(
                c,
                &Val::Mem(src.view(r, 0, h, cols)),
                vec![h, cols],
                Self::mem_tensor(&out.view(r, 0, h, cols), vec![h, cols]),
            );
            self.check(&op.0, c.inst).ok()?;
            ops.push(op);
            r += h;
        }
        Some(ops)
    }

    /// Whether instruction `inst` can compute `op`.
    pub fn check(&self, op: &TileOp, inst: InstId) -> Result<(), String> {
        self.choose(op, Some(inst)).map(|_| ())
    }

    /// Emits the cheapest instruction computing `op` (only `only`, if given).
    /// Registers are virtual, buffers relative. Returns the instruction's index.
    pub fn emit(
        &mut self,
        op: &TileOp,
        refs: &[Ref],
        only: Option<InstId>,
    ) -> Result<usize, String> {
        let (mi, b) = self.choose(op, only)?;
        let at = self.code.len();
        let mut operands = Vec::with_capacity(mi.operands.len());
        let mut touched = Vec::new();
        for (oi, v) in mi.operands.iter().enumerate() {
            let r = b.operand[oi]
                .and_then(|t| refs.get(t))
                .copied()
                .unwrap_or(Ref::Fixed);
            operands.push(match r {
                Ref::VReg(f, v) => VOperand::Virtual(f, v),
                Ref::Buf(buf) => {
                    self.fixups.push((at, oi, buf));
                    touched.push(buf);
                    VOperand::Fixed(*v)
                }
                Ref::Fixed => VOperand::Fixed(*v),
            });
        }
        self.code.push(VInst {
            inst: mi.inst,
            operands,
        });
        for buf in touched {
            self.touch(buf);
        }
        Ok(at)
    }

    /// Waits for the transfer filling `t`, if it is still in flight.
    pub fn ready(&mut self, t: &MemTile) -> Result<(), String> {
        if let Some((bank, sem, generation)) = t.ready
            && matches!(&self.pending[bank][sem], Some(p) if p.generation == generation)
        {
            self.wait(bank, sem)?;
        }
        Ok(())
    }

    fn wait(&mut self, bank: usize, sem: usize) -> Result<(), String> {
        let Some(Pending { count, bufs, .. }) = self.pending[bank][sem].take() else {
            return Ok(());
        };
        let (inst, oi) = self.info.wait_for(bank).ok_or_else(|| {
            format!(
                "no instruction waits on semaphore bank `{}`",
                self.m.semaphores[bank].name
            )
        })?;
        let n = self.m.instructions[inst.index()].operands.len();
        let mut operands = vec![VOperand::Fixed(OpValue::Imm(0)); n];
        operands[oi] = VOperand::Fixed(OpValue::Sem(sem as u32));
        for _ in 0..count {
            self.code.push(VInst {
                inst,
                operands: operands.clone(),
            });
        }
        for b in bufs {
            self.touch(b);
        }
        Ok(())
    }

    /// Waits for transfers in flight that conflict with an access to a range.
    fn settle(&mut self, (mem, lo, hi): (Span, u64, u64), write: bool) -> Result<(), String> {
        let mut conflicts = Vec::new();
        for (bank, sems) in self.pending.iter().enumerate() {
            for (sem, p) in sems.iter().enumerate() {
                if let Some(p) = p
                    && p.ranges
                        .iter()
                        .any(|(m, a, b, w)| *m == mem && *a < hi && lo < *b && (*w || write))
                {
                    conflicts.push((bank, sem));
                }
            }
        }
        for (bank, sem) in conflicts {
            self.wait(bank, sem)?;
        }
        Ok(())
    }

    /// The buffers of the transfers still in flight: each is live at least
    /// until its wait, which is emitted later.
    pub fn in_flight_buffers(&self) -> std::collections::HashSet<usize> {
        self.pending
            .iter()
            .flatten()
            .flatten()
            .flat_map(|p| p.bufs.iter().copied())
            .collect()
    }

    /// Waits for every transfer still in flight.
    pub fn drain(&mut self) -> Result<(), String> {
        for bank in 0..self.pending.len() {
            for sem in 0..self.pending[bank].len() {
                self.wait(bank, sem)?;
            }
        }
        Ok(())
    }

    /// A semaphore of `bank` for a new transfer (waiting for the one in flight on it, if any).
    fn semaphore(&mut self, bank: usize) -> Result<(usize, u64), String> {
        let n = self.pending[bank].len();
        if n == 0 {
            return Err(format!(
                "semaphore bank `{}` is empty",
                self.m.semaphores[bank].name
            ));
        }
        let sem = self.sem_next[bank] % n;
        self.sem_next[bank] = (sem + 1) % n;
        self.wait(bank, sem)?;
        self.generation += 1;
        Ok((sem, self.generation))
    }

    /// Applies copy instruction `ci` to `v`: into `dst` when given (a memory
    /// tile of the copy's destination place), else into a fresh buffer or register.
    pub fn copy(
        &mut self,
        v: &Val,
        ci: usize,
        dst: Option<&MemTile>,
        pad: Pad,
    ) -> Result<Val, String> {
        let c = self.info.copies[ci].clone();
        let (rows, cols) = v.dims();
        if let Val::Mem(t) = v {
            self.ready(t)?;
            self.settle(t.range(), false)?;
        }
        if let Some(d) = dst {
            self.settle(d.range(), true)?;
        }
        match c.to.place {
            Place::Reg(file) => {
                let reg = self.vreg(file);
                let dims = &self.m.regfiles[file.index()].shape;
                let full: Vec<i64> = dims.iter().map(|d| d.value).collect();
                let exact = if c.rank == 2 {
                    vec![rows, cols]
                } else {
                    vec![cols]
                };
                if c.rank == 1 && rows != 1 {
                    return Err("a one-dimensional copy of a multi-row tile".to_owned());
                }
                let mut last = String::new();
                for shape in [exact, full] {
                    let (op, refs) = self.copy_op(
                        &c,
                        v,
                        shape.clone(),
                        Self::reg_tensor(file, c.to.dtype, reg, shape),
                    );
                    match self.emit(&op, &refs, Some(c.inst)) {
                        Ok(_) => {
                            return Ok(Val::Reg(RegTile {
                                file,
                                dtype: c.to.dtype,
                                reg,
                                rows,
                                cols,
                            }));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
            Place::Mem(mem) => {
                let out = match (dst, v) {
                    (Some(d), _) => d.clone(),
                    (None, Val::Reg(r)) if !c.narrow => {
                        // A register store may have to write the whole register.
                        let (gr, gc) = self.granule(r.file);
                        let mut t = self.buffer_padded(
                            mem,
                            c.to.dtype,
                            rows.max(gr),
                            cols.max(gc),
                            pad.max(Pad::Registers),
                        );
                        t.rows = rows;
                        t.cols = cols;
                        t
                    }
                    (None, _) => self.buffer_padded(mem, c.to.dtype, rows, cols, pad),
                };
                let bank = match c.sem {
                    Some(oi) => {
                        let OperandKind::Sem { bank } =
                            self.m.instructions[c.inst.index()].operands[oi].kind
                        else {
                            return Err("semaphore operand of another kind".to_owned());
                        };
                        Some(bank.index())
                    }
                    None => None,
                };
                // The transfers: the whole tile when both sides allow it, else row by row.
                let mut ops: Vec<(TileOp, Vec<Ref>)> = Vec::new();
                match v {
                    Val::Reg(_) | Val::Splat(_) => {
                        let full: Vec<i64> = match c.from.place {
                            Place::Reg(f) => self.m.regfiles[f.index()]
                                .shape
                                .iter()
                                .map(|d| d.value)
                                .collect(),
                            Place::Mem(_) => Vec::new(),
                        };
                        let exact = if c.rank == 2 {
                            vec![rows, cols]
                        } else {
                            vec![cols]
                        };
                        let mut last = String::new();
                        for shape in [exact, full] {
                            let op =
                                self.copy_op(&c, v, shape.clone(), Self::mem_tensor(&out, shape));
                            match self.check(&op.0, c.inst) {
                                Ok(()) => {
                                    ops.push(op);
                                    break;
                                }
                                Err(e) => last = e,
                            }
                        }
                        if ops.is_empty() {
                            return Err(last);
                        }
                    }
                    Val::Mem(src) => {
                        // A row wider than one transfer takes goes in column
                        // chunks of the widest power of two that does.
                        let row_fits = |e: &Self, w: i64| {
                            let shape = if c.rank == 2 { vec![1, w] } else { vec![w] };
                            let op = e.copy_op(
                                &c,
                                &Val::Mem(src.view(0, 0, 1, w)),
                                shape.clone(),
                                Self::mem_tensor(&out.view(0, 0, 1, w), shape),
                            );
                            e.check(&op.0, c.inst).is_ok()
                        };
                        let mut chunk = cols;
                        if !row_fits(self, cols) {
                            chunk = 1i64 << (63 - (cols - 1).max(1).leading_zeros());
                            while chunk > 1 && !row_fits(self, chunk) {
                                chunk /= 2;
                            }
                        }
                        let mut c0 = 0;
                        while c0 < cols {
                            let w = chunk.min(cols - c0);
                            ops.extend(self.mem_copy_ops(
                                &c,
                                &src.view(0, c0, rows, w),
                                &out.view(0, c0, rows, w),
                            ));
                            c0 += w;
                        }
                    }
                }
                let mut bufs = Vec::new();
                if let Val::Mem(MemTile {
                    base: Base::Buf(b), ..
                }) = v
                {
                    bufs.push(*b);
                }
                if let Base::Buf(b) = out.base {
                    bufs.push(b);
                }
                let mut out = out;
                let mut ranges = Vec::new();
                if let Val::Mem(t) = v {
                    let (m, a, b) = t.range();
                    ranges.push((m, a, b, false));
                }
                let (m, a, b) = out.range();
                ranges.push((m, a, b, true));
                let mut current: Option<(usize, u64)> = None;
                for (op, refs) in ops {
                    if let (Some(bank), Some(oi)) = (bank, c.sem) {
                        // Several transfers may signal one semaphore, up to its maximum count.
                        let max = self.m.semaphores[bank].max.value.max(1) as u32;
                        let (sem, generation) = match current {
                            Some((s, g)) if matches!(&self.pending[bank][s], Some(p) if p.count < max) => {
                                (s, g)
                            }
                            _ => {
                                if let Some((full, _)) = current {
                                    self.wait(bank, full)?;
                                }
                                let (s, g) = self.semaphore(bank)?;
                                self.pending[bank][s] = Some(Pending {
                                    generation: g,
                                    count: 0,
                                    bufs: bufs.clone(),
                                    ranges: ranges.clone(),
                                });
                                (s, g)
                            }
                        };
                        let i = self.emit(&op, &refs, Some(c.inst))?;
                        self.code[i].operands[oi] = VOperand::Fixed(OpValue::Sem(sem as u32));
                        if let Some(p) = &mut self.pending[bank][sem] {
                            p.count += 1;
                        }
                        current = Some((sem, generation));
                        out.ready = Some((bank, sem, generation));
                    } else {
                        self.emit(&op, &refs, Some(c.inst))?;
                    }
                }
                Ok(Val::Mem(out))
            }
        }
    }

    /// The transfers of copy `c` from `src` into `out` (memory to memory,
    /// rows at most as wide as one transfer takes): the whole tile when both
    /// sides allow it (spread over the unit's copies when large), else
    /// blocks of as many rows as one transfer takes, else row by row.
    fn mem_copy_ops(
        &self,
        c: &super::machine::Copy,
        src: &MemTile,
        out: &MemTile,
    ) -> Vec<(TileOp, Vec<Ref>)> {
        let (rows, cols) = (src.rows, src.cols);
        let v = &Val::Mem(src.clone());
        let mut ops: Vec<(TileOp, Vec<Ref>)> = Vec::new();
        let whole = c.rank == 2;
        if whole {
            let op = self.copy_op(
                c,
                v,
                vec![rows, cols],
                Self::mem_tensor(out, vec![rows, cols]),
            );
            if self.check(&op.0, c.inst).is_ok() {
                ops.push(op);
                // A large transfer on an asynchronous unit with
                // several copies goes as one piece per copy, so
                // the copies share it (one engine alone may be
                // slower than the memory).
                if let Some(pieces) = self.spread_transfer(c, rows, cols, src, out) {
                    ops = pieces;
                }
            }
        }
        // Else blocks of as many rows as one transfer takes
        // (the largest power of two that checks), else row by row.
        let mut block = if whole {
            1i64 << (63 - (rows / 2).max(1).leading_zeros())
        } else {
            1
        };
        while ops.is_empty() && block > 1 {
            let probe = self.copy_op(
                c,
                &Val::Mem(src.view(0, 0, block, cols)),
                vec![block, cols],
                Self::mem_tensor(&out.view(0, 0, block, cols), vec![block, cols]),
            );
            if self.check(&probe.0, c.inst).is_ok() {
                break;
            }
            block /= 2;
        }
        if ops.is_empty() {
            let mut r = 0;
            while r < rows {
                let h = block.min(rows - r);
                let s = Val::Mem(src.view(r, 0, h, cols));
                let d = out.view(r, 0, h, cols);
                let shape = if c.rank == 2 {
                    vec![h, cols]
                } else {
                    vec![cols]
                };
                let op = self.copy_op(c, &s, shape.clone(), Self::mem_tensor(&d, shape));
                if h > 1 && self.check(&op.0, c.inst).is_err() {
                    // The last, shorter block: row by row.
                    for q in r..rows {
                        let s = Val::Mem(src.view(q, 0, 1, cols));
                        let d = out.view(q, 0, 1, cols);
                        let shape = vec![1, cols];
                        ops.push(self.copy_op(c, &s, shape.clone(), Self::mem_tensor(&d, shape)));
                    }
                    break;
                }
                ops.push(op);
                r += h;
            }
        }
        ops
    }

    /// The tile operation of copy `c` from `v` (given shape) into `dst`.
    fn copy_op(
        &self,
        c: &super::machine::Copy,
        v: &Val,
        shape: Vec<i64>,
        dst: (TileTensor, Ref),
    ) -> (TileOp, Vec<Ref>) {
        let src = v.tensor(shape.clone());
        let idx = identity_indices(shape.len());
        let read = TileExpr::Access(TileAccess {
            tensor: 1,
            indices: idx.clone(),
        });
        let value = match c.cast {
            Some(dt) => TileExpr::Cast(dt, Box::new(read)),
            None => read,
        };
        (
            TileOp {
                tensors: vec![dst.0, src.0],
                extents: shape,
                target: TileAccess {
                    tensor: 0,
                    indices: idx,
                },
                op: AssignOp::Set,
                value,
            },
            vec![dst.1, src.1],
        )
    }

    /// Moves `v` to `to` along the cheapest chain of copies; the last copy
    /// writes into `dst` when given. Stretches through a register file go
    /// granule by granule, landing in the next memory.
    pub fn to_loc(
        &mut self,
        v: Val,
        to: Loc,
        dst: Option<&MemTile>,
        pad: Pad,
    ) -> Result<Val, String> {
        if let Val::Splat(_) = v {
            return Err(
                "a uniform constant in a register stands for no particular tile".to_owned(),
            );
        }
        if v.loc() == to && dst.is_none_or(|d| matches!(&v, Val::Mem(t) if t == d)) {
            return Ok(v);
        }
        // Into another tile of the same place: there and back again.
        let found = if v.loc() == to {
            self.info.round_trip(to)
        } else {
            self.info.path(&[v.loc()], to)
        };
        let (_, chain) = found.ok_or_else(|| {
            format!(
                "no instruction sequence moves {} data from {} to {}",
                v.loc().dtype.name(),
                self.place_name(v.loc().place),
                self.place_name(to.place)
            )
        })?;
        let mut v = v;
        let n = chain.len();
        let mut k = 0;
        while k < n {
            let c = self.info.copies[chain[k]].clone();
            let last_dst = |j: usize| if j + 1 == n { dst } else { None };
            // A buffer is padded when whole registers will be loaded from it.
            let pad_here = if k + 1 == n {
                pad
            } else {
                self.info.copies[chain[k + 1]].pad()
            };
            let Place::Reg(file) = c.to.place else {
                v = self.copy(&v, chain[k], last_dst(k), pad_here)?;
                k += 1;
                continue;
            };
            let (gr, gc) = self.granule(file);
            let (rows, cols) = v.dims();
            if rows <= gr && cols <= gc {
                v = self.copy(&v, chain[k], last_dst(k), pad_here)?;
                k += 1;
                continue;
            }
            // Through the registers block by block, into the memory after them.
            let Val::Mem(src) = v.clone() else {
                return Err("a tile larger than its register".to_owned());
            };
            let Some(j) =
                (k..n).find(|&j| matches!(self.info.copies[chain[j]].to.place, Place::Mem(_)))
            else {
                return Err(format!(
                    "a {rows} x {cols} tile does not fit one register of {}",
                    self.place_name(c.to.place)
                ));
            };
            let land = self.info.copies[chain[j]].to;
            let Place::Mem(lm) = land.place else {
                unreachable!()
            };
            // Padded when the stores into it write whole registers, or the loads from it read them.
            let whole_stores = if self.info.copies[chain[j]].narrow {
                Pad::Dense
            } else {
                Pad::Registers
            };
            let pad_j = whole_stores.max(if j + 1 == n {
                pad
            } else {
                self.info.copies[chain[j + 1]].pad()
            });
            let out = match last_dst(j) {
                Some(d) => d.clone(),
                None => self.buffer_padded(lm, land.dtype, rows, cols, pad_j),
            };
            let mut r = 0;
            while r < rows {
                let h = gr.min(rows - r);
                let mut cc = 0;
                while cc < cols {
                    let w = gc.min(cols - cc);
                    let mut x = Val::Mem(src.view(r, cc, h, w));
                    for (q, &ci) in chain.iter().enumerate().take(j + 1).skip(k) {
                        let d = (q == j).then(|| out.view(r, cc, h, w));
                        x = self.copy(&x, ci, d.as_ref(), Pad::Dense)?;
                    }
                    cc += w;
                }
                r += h;
            }
            v = Val::Mem(out);
            k = j + 1;
        }
        Ok(v)
    }

    /// The block one register of a file holds: `(rows, cols)`.
    pub fn granule(&self, file: RegFileId) -> (i64, i64) {
        let dims: Vec<i64> = self.m.regfiles[file.index()]
            .shape
            .iter()
            .map(|d| d.value)
            .collect();
        match dims.as_slice() {
            [c] => (1, *c),
            [r, c] => (*r, *c),
            _ => (1, 1),
        }
    }

    /// A place's name.
    pub fn place_name(&self, p: Place) -> String {
        match p {
            Place::Mem(m) => format!("memory `{}`", self.m.memories[m.index()].name),
            Place::Reg(f) => format!("register file `{}`", self.m.regfiles[f.index()].name),
        }
    }

    /// Ends the program: waits for every transfer, then halts.
    pub fn finish(&mut self) -> Result<(), String> {
        self.drain()?;
        let halt = self
            .info
            .halt
            .ok_or("the machine has no `halt` instruction")?;
        let n = self.m.instructions[halt.index()].operands.len();
        self.code.push(VInst {
            inst: halt,
            operands: vec![VOperand::Fixed(OpValue::Imm(0)); n],
        });
        Ok(())
    }
}

/// The index list `[i0, i1, ...]` of an element-wise access of rank `n`.
pub fn identity_indices(n: usize) -> Vec<isa_specs::model::Affine> {
    (0..n)
        .map(|i| isa_specs::model::Affine {
            terms: vec![(isa_specs::model::IndexId(i as u32), 1)],
            constant: 0,
            offsets: Vec::new(),
        })
        .collect()
}

/// The semantics' single assignment of an instruction, if it has exactly one.
pub fn single_assign(
    m: &Machine,
    inst: InstId,
) -> Option<(&isa_specs::model::Access, AssignOp, &SemExpr)> {
    let mut it = m.instructions[inst.index()]
        .semantics
        .stmts
        .iter()
        .filter_map(|s| match s {
            Stmt::Assign { target, op, value } => Some((target, *op, value)),
            Stmt::Action(_) => None,
        });
    match (it.next(), it.next()) {
        (Some(a), None) => Some(a),
        _ => None,
    }
}
