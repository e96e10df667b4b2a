//! The lowering pipeline: a graph to a program for any described machine.
//!
//! 1. **Layout.** Every tensor gets a dense row-major region of the machine's
//!    largest off-chip memory (its *home*), viewed as a matrix
//!    `[product of leading dims, last dim]`; `Reshape`, `Flatten` and
//!    `Identity` are aliases. Activations are kept in the first of f32, bf16,
//!    f16 the home memory can both load and store; constants are packed at
//!    compile time in whatever type and layout their consumer needs (weights
//!    transposed, padded or pre-converted; broadcast operands expanded).
//! 2. **Regions.** A `MatMul` or an element-wise node starts a region; the
//!    element-wise nodes that only consume its result follow it as an
//!    epilogue (fusion), so intermediate tiles never go back to the home memory.
//! 3. **Tiles.** Each region's output is cut into tiles. A matrix product uses
//!    a *contraction* instruction found by its semantics
//!    (`T = Σ cast(X) · cast(Y)`, overwriting or accumulating); its tile sizes
//!    come from a search over sizes the instruction accepts, minimising the
//!    instruction's own occupancy over the whole product. Element-wise steps
//!    use the instruction whose semantics match, in registers granule by
//!    granule when a register file has all of a run of steps, else on memory
//!    tiles. Data moves along the cheapest chain of copy instructions
//!    (DMA, loads, stores, conversions) between the places operands must be.
//! 4. **Back end.** On-chip buffers are placed by liveness ([`crate::memplan`]),
//!    registers allocated ([`crate::regalloc`]), instructions scheduled into
//!    bundles ([`crate::sched`]), each checked by its independent checker;
//!    then encoded into a [`Program`].
//!
//! Nothing here names a target: every choice comes from the machine model
//! and the generated tables.

pub mod emit;
pub mod machine;
pub mod ops;

use crate::ir::{Graph, Op, ValueId};
use crate::{memplan, regalloc, sched};
use emit::{Base, Emitter, MemTile, Pad, Ref, Val};
use isa_specs::Machine;
use isa_specs::model::{DType, MemId, OperandKind};
use isa_specs::program::{DataSegment, Program, TensorDesc};
use isa_specs::select::{TileAccess, TileExpr, TileOp, TilePlace, TileTensor};
use isa_specs::target::{Bundle, MInst};
use machine::{Info, Loc, Place};
use ops::{Contraction, Ew, Role, Step};
use std::collections::HashMap;

/// Why a graph cannot be compiled for a machine.
#[derive(Debug, Clone, PartialEq)]
pub struct LowerError {
    /// The node, when one is to blame.
    pub node: Option<String>,
    /// The op.
    pub op: Option<String>,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for LowerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.op, &self.node) {
            (Some(op), Some(node)) => write!(f, "{op} node `{node}`: {}", self.message),
            _ => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for LowerError {}

fn err(message: impl Into<String>) -> LowerError {
    LowerError {
        node: None,
        op: None,
        message: message.into(),
    }
}

/// What compiling produced, stage by stage.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The program.
    pub program: Program,
    /// The scheduled bundles.
    pub bundles: Vec<Bundle>,
    /// Instructions after register allocation, in program order.
    pub insts: Vec<MInst>,
    /// Fused regions: `(description, instructions emitted)`.
    pub regions: Vec<(String, usize)>,
    /// The selected instructions before register allocation and scheduling,
    /// one per line (virtual registers `%file.N`, buffers placed).
    pub selected: Vec<String>,
    /// Peak bytes of each on-chip memory the plan uses: `(memory, bytes, capacity)`.
    pub buffers: Vec<(String, u64, u64)>,
    /// Multiply-accumulates the model performs.
    pub macs: u64,
    /// Bytes of each tensor that must cross the home memory at least once.
    pub min_home_bytes: u64,
}

/// The roofline bound of a compiled model: neither the compute units nor the
/// home memory can do better.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Roofline {
    /// MACs over the machine's peak MACs per cycle (all units, all copies).
    pub compute_cycles: u64,
    /// Bytes that must cross the home memory over its bandwidth.
    pub memory_cycles: u64,
    /// The larger of the two.
    pub cycles: u64,
}

impl Compiled {
    /// The roofline bound on machine `m`.
    pub fn roofline(&self, m: &Machine) -> Roofline {
        let peak: i64 = m
            .units
            .iter()
            .map(|u| u.macs_per_cycle.value * u.count.value.max(1))
            .sum();
        let home = m
            .memories
            .iter()
            .filter(|x| x.kind.off_chip())
            .max_by_key(|x| x.size.value);
        let bw = home.map_or(1, |x| x.bandwidth.value.max(1)) as u64;
        let compute_cycles = if peak > 0 {
            self.macs.div_ceil(peak as u64)
        } else {
            0
        };
        let memory_cycles = self.min_home_bytes.div_ceil(bw);
        Roofline {
            compute_cycles,
            memory_cycles,
            cycles: compute_cycles.max(memory_cycles).max(1),
        }
    }
}

/// Where a value lives in the home memory.
#[derive(Clone, Debug, PartialEq)]
struct Home {
    addr: u64,
    dtype: DType,
    rows: i64,
    cols: i64,
    /// Elements between rows: the row length, or more so rows start aligned.
    pitch: i64,
}

impl Home {
    fn tile(&self, mem: MemId, r: i64, c: i64, h: i64, w: i64) -> MemTile {
        MemTile {
            mem,
            dtype: self.dtype,
            base: Base::Fixed(self.addr),
            offset: ((r * self.pitch + c) as u64) * self.dtype.bytes(),
            rows: h,
            cols: w,
            pitch: self.pitch,
            ready: None,
        }
    }
}

/// The matrix view `[rows, cols]` of a shape.
fn view(shape: &[usize]) -> (i64, i64) {
    match shape.split_last() {
        Some((c, rest)) => (rest.iter().product::<usize>() as i64, *c as i64),
        None => (1, 1),
    }
}

/// Bytes of `data` in element type `dt`.
pub fn encode(dt: DType, data: impl IntoIterator<Item = f64>) -> Vec<u8> {
    let n = dt.bytes() as usize;
    let mut out = Vec::new();
    for x in data {
        out.extend_from_slice(&targets::sim::to_bytes(dt, x)[..n]);
    }
    out
}

struct Lowerer<'a> {
    g: &'a Graph,
    e: Emitter<'a>,
    info: &'a Info,
    homes: HashMap<ValueId, Home>,
    /// The dtype activations are kept in at home.
    act: DType,
    next_addr: u64,
    data: Vec<DataSegment>,
    regions: Vec<(String, usize)>,
    packed: HashMap<(ValueId, String), MemTile>,
    packed_panels: HashMap<(ValueId, String), (Vec<MemTile>, i64)>,
    contractions: Vec<Contraction>,
}

/// Compiles a graph for machine `m` of target `t`.
pub fn compile(t: &targets::Target, m: &Machine, g: &Graph) -> Result<Compiled, LowerError> {
    crate::ir::verify(g)
        .map_err(|e| err(format!("the graph fails the IR verifier: {}", e.join("; "))))?;
    let info = Info::new(m).map_err(err)?;
    let home_mem = info.home;
    let loadable = |dt: DType| {
        let here = Loc {
            place: Place::Mem(home_mem),
            dtype: dt,
        };
        info.copies.iter().any(|c| c.from == here) && info.copies.iter().any(|c| c.to == here)
    };
    let act = [DType::F32, DType::Bf16, DType::F16]
        .into_iter()
        .find(|d| loadable(*d))
        .ok_or_else(|| {
            err(format!(
                "no instruction loads or stores floating-point tensors of memory `{}`",
                m.memories[home_mem.index()].name
            ))
        })?;
    let mut l = Lowerer {
        g,
        e: Emitter::new(m, t.isa(), &info),
        info: &info,
        homes: HashMap::new(),
        act,
        next_addr: 0,
        data: Vec::new(),
        regions: Vec::new(),
        packed: HashMap::new(),
        packed_panels: HashMap::new(),
        contractions: Vec::new(),
    };
    l.contractions = ops::contractions(&l.e);
    l.layout()?;
    l.lower_nodes()?;
    l.e.finish().map_err(err)?;
    l.back_end(t, m)
}

impl Lowerer<'_> {
    fn alloc_home(&mut self, bytes: u64, align: u64) -> u64 {
        let a = align.max(64);
        let at = self.next_addr.next_multiple_of(a);
        // Slack after every tensor: padded tiles may read a little past the end.
        self.next_addr = at + bytes + 4096;
        at
    }

    fn home_mem(&self) -> MemId {
        self.info.home
    }

    /// The row pitch of a `cols`-wide matrix of `dt` at home: rows start aligned.
    fn home_pitch(&self, cols: i64, dt: DType) -> i64 {
        let per = (self.info.home_align / dt.bytes()).max(1) as i64;
        if (cols * dt.bytes() as i64) % self.info.home_align as i64 == 0 {
            cols
        } else {
            machine::rup(cols, per)
        }
    }

    /// Places every value at home; views alias their input.
    fn layout(&mut self) -> Result<(), LowerError> {
        let g = self.g;
        let outputs: Vec<ValueId> = g.outputs.clone();
        let out_dtype = {
            let f32home = Loc {
                place: Place::Mem(self.info.home),
                dtype: DType::F32,
            };
            if self.info.copies.iter().any(|c| c.to == f32home) {
                DType::F32
            } else {
                self.act
            }
        };
        // Aliases first: a view's output shares its input's bytes.
        let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
        for n in &g.nodes {
            let is_view = match &n.op {
                Op::Reshape { .. } | Op::Identity => true,
                Op::Transpose { perm } => perm.iter().enumerate().all(|(i, p)| i == *p),
                Op::Cast { to } => g.ty(n.inputs[0]).elem == *to,
                _ => false,
            };
            if is_view && !g.constants.contains_key(&n.inputs[0]) {
                let root = *alias.get(&n.inputs[0]).unwrap_or(&n.inputs[0]);
                alias.insert(n.outputs[0], root);
            }
        }
        let mut order: Vec<ValueId> = g.inputs.clone();
        for n in &g.nodes {
            order.extend(n.outputs.iter().copied());
        }
        // A graph output that folding made constant is placed as data: nothing to compute.
        for &v in &outputs {
            if let Some(t) = g.constants.get(&v)
                && !self.homes.contains_key(&v)
            {
                let (rows, cols) = view(&t.ty.shape);
                let home = self.padded(t.data.clone(), rows, cols, out_dtype);
                self.homes.insert(v, home);
            }
        }
        for v in order {
            if g.constants.contains_key(&v) || self.homes.contains_key(&v) {
                continue;
            }
            let ty = g.ty(v);
            if !ty.elem.is_float() {
                return Err(err(format!(
                    "value `{}` is {}: only floating-point models compile today",
                    g.values[v.index()].name,
                    ty.elem.name()
                )));
            }
            let (rows, cols) = view(&ty.shape);
            if let Some(root) = alias.get(&v)
                && let Some(h) = self.homes.get(root).cloned()
            {
                if h.pitch != h.cols && cols != h.cols {
                    return Err(err(format!(
                        "`{}` reshapes a tensor whose rows are padded for alignment ({} elements, pitch {}); not supported yet",
                        g.values[v.index()].name,
                        h.cols,
                        h.pitch
                    )));
                }
                self.homes.insert(
                    v,
                    Home {
                        rows,
                        cols,
                        pitch: if cols == h.cols { h.pitch } else { cols },
                        ..h
                    },
                );
                continue;
            }
            // A graph output produced through an alias needs its own bytes only if it is not the root.
            let dtype = if outputs.contains(&v)
                || alias.iter().any(|(a, r)| *r == v && outputs.contains(a))
            {
                out_dtype
            } else {
                self.act
            };
            let pitch = self.home_pitch(cols, dtype);
            let addr = self.alloc_home((rows * pitch) as u64 * dtype.bytes(), 64);
            self.homes.insert(
                v,
                Home {
                    addr,
                    dtype,
                    rows,
                    cols,
                    pitch,
                },
            );
        }
        Ok(())
    }

    fn node_err(n: &crate::ir::Node, message: impl Into<String>) -> LowerError {
        LowerError {
            node: Some(n.name.clone()),
            op: Some(n.op.name().to_owned()),
            message: message.into(),
        }
    }

    fn ew_of(op: &Op) -> Option<Ew> {
        Some(match op {
            Op::Add => Ew::Add,
            Op::Sub => Ew::Sub,
            Op::Mul => Ew::Mul,
            Op::Div => Ew::Div,
            Op::Relu => Ew::Relu,
            _ => return None,
        })
    }

    fn lower_nodes(&mut self) -> Result<(), LowerError> {
        let g = self.g;
        let mut uses: HashMap<ValueId, usize> = HashMap::new();
        for n in &g.nodes {
            for i in &n.inputs {
                *uses.entry(*i).or_default() += 1;
            }
        }
        let mut done = vec![false; g.nodes.len()];
        for ni in 0..g.nodes.len() {
            if done[ni] {
                continue;
            }
            let n = &g.nodes[ni];
            done[ni] = true;
            if g.constants.contains_key(&n.outputs[0]) {
                continue;
            }
            match &n.op {
                Op::Reshape { .. } | Op::Identity => {
                    if g.constants.contains_key(&n.inputs[0]) {
                        return Err(Self::node_err(n, "a view of a constant was not folded"));
                    }
                    continue;
                }
                Op::Cast { to } if g.ty(n.inputs[0]).elem == *to => continue,
                Op::Cast { to } => {
                    return Err(Self::node_err(
                        n,
                        format!("Cast to {} is not supported by the lowering yet", to.name()),
                    ));
                }
                Op::Transpose { perm } if perm.iter().enumerate().all(|(i, p)| i == *p) => continue,
                Op::Transpose { perm } => {
                    let before = self.e.code.len();
                    self.transpose(n, perm)?;
                    self.regions
                        .push((format!("Transpose({})", n.name), self.e.code.len() - before));
                    continue;
                }
                _ => {}
            }
            // The region: this node, then element-wise nodes consuming only its result.
            let mut members = vec![ni];
            let mut last = n.outputs[0];
            let out_shape = g.ty(last).shape.clone();
            for (nj, m) in g.nodes.iter().enumerate().skip(ni + 1) {
                if done[nj] || Self::ew_of(&m.op).is_none() {
                    continue;
                }
                if !m.inputs.contains(&last) {
                    continue;
                }
                let others_ready = m.inputs.iter().all(|i| {
                    *i == last
                        || g.constants.contains_key(i)
                        || g.inputs.contains(i)
                        || g.nodes[..ni].iter().any(|p| p.outputs.contains(i))
                });
                if uses.get(&last) != Some(&1)
                    || g.outputs.contains(&last)
                    || g.ty(m.outputs[0]).shape != out_shape
                    || !others_ready
                    || m.inputs.iter().filter(|i| **i == last).count() != 1
                {
                    break;
                }
                members.push(nj);
                done[nj] = true;
                last = m.outputs[0];
            }
            let before = self.e.code.len();
            self.region(&members).map_err(|e| {
                let n = &g.nodes[members[0]];
                if e.node.is_some() {
                    e
                } else {
                    Self::node_err(n, e.message)
                }
            })?;
            let names: Vec<String> = members
                .iter()
                .map(|&k| format!("{}({})", g.nodes[k].op.name(), g.nodes[k].name))
                .collect();
            self.regions
                .push((names.join(" -> "), self.e.code.len() - before));
        }
        Ok(())
    }

    /// Lowers one region: a root node and its element-wise epilogue.
    fn region(&mut self, members: &[usize]) -> Result<(), LowerError> {
        let g = self.g;
        let root = &g.nodes[members[0]];
        let out = g.nodes[*members.last().unwrap_or(&0)].outputs[0];
        let out_home = self
            .homes
            .get(&out)
            .cloned()
            .ok_or_else(|| err("output without a home"))?;
        let (rows, cols) = (out_home.rows, out_home.cols);
        // Steps: (op, other operand, running value is the second operand).
        let mut steps: Vec<(Ew, Option<ValueId>, bool)> = Vec::new();
        let mut running = root.outputs[0];
        let root_input: Option<ValueId>;
        if let Op::MatMul = root.op {
            root_input = None;
        } else {
            let ew = Self::ew_of(&root.op)
                .ok_or_else(|| Self::node_err(root, "not an element-wise op"))?;
            if ew.binary() {
                let (a, b) = (root.inputs[0], root.inputs[1]);
                let full = |v: ValueId| {
                    g.ty(v).shape == g.ty(root.outputs[0]).shape && !g.constants.contains_key(&v)
                };
                if full(a) {
                    root_input = Some(a);
                    steps.push((ew, Some(b), false));
                } else if full(b) {
                    root_input = Some(b);
                    steps.push((ew, Some(a), true));
                } else {
                    return Err(Self::node_err(
                        root,
                        "neither operand has the output's shape (both broadcast or constant); not supported yet",
                    ));
                }
            } else {
                root_input = Some(root.inputs[0]);
                steps.push((ew, None, false));
            }
        }
        for &k in &members[1..] {
            let m = &g.nodes[k];
            let ew = Self::ew_of(&m.op).ok_or_else(|| Self::node_err(m, "not element-wise"))?;
            let swapped = m.inputs.len() == 2 && m.inputs[1] == running;
            let other = m.inputs.iter().copied().find(|i| *i != running);
            steps.push((ew, other, swapped));
            running = m.outputs[0];
        }
        // Rewrites for missing instructions: relu as max with zeros, division as a reciprocal times.
        let mut plan: Vec<(Ew, Option<Operand>, bool)> = Vec::new();
        for (ew, other, swapped) in steps {
            let other = other.map(Operand::Value);
            match ew {
                Ew::Relu if ops::ew_forms(&self.e, Ew::Relu).is_empty() => {
                    plan.push((Ew::Max, Some(Operand::Zeros), false));
                }
                Ew::Div if ops::ew_forms(&self.e, Ew::Div).is_empty() => {
                    if swapped {
                        return Err(err(
                            "cannot compile: the target lacks `d = a / b`, and `b / x` needs it",
                        ));
                    }
                    if ops::ew_forms(&self.e, Ew::Recip).is_empty() {
                        return Err(err(
                            "cannot compile: the target lacks `d = a / b` and `d = recip(a)`",
                        ));
                    }
                    plan.push((Ew::Mul, other.map(|o| Operand::Recip(Box::new(o))), false));
                }
                _ => plan.push((ew, other, swapped)),
            }
        }
        let mm = match root.op {
            Op::MatMul => Some(self.plan_matmul(root)?),
            _ => None,
        };
        // Tile sizes: the contraction's, or a budget of the smallest on-chip memory.
        let (th, tw) = match &mm {
            Some(p) => (p.tm, p.tn),
            None => {
                let budget = self.tile_budget();
                let tw = cols.min(512);
                let th = (budget / (tw * 4 * (plan.len() as i64 + 2) * 2))
                    .clamp(1, 256)
                    .min(rows);
                (th, tw)
            }
        };
        let batch_rows = match &mm {
            Some(p) => p.m,
            None => rows,
        };
        let batches = rows / batch_rows.max(1);
        for b in 0..batches {
            let mut r = 0;
            while r < batch_rows {
                let h = th.min(batch_rows - r);
                let mut c = 0;
                while c < cols {
                    let w = tw.min(cols - c);
                    let row0 = b * batch_rows + r;
                    let input = match (&mm, root_input) {
                        (Some(p), _) if p.decomposed.is_some() => {
                            self.scaled_rows_tile(p, b as usize, r, c, w)?
                        }
                        (Some(p), _) => self.matmul_tile(p, b as usize, r, c, h, w)?,
                        (None, Some(v)) => self.operand_tile(v, out, row0, c, h, w)?,
                        (None, None) => return Err(err("region without input")),
                    };
                    let mut chain = Vec::new();
                    for (ew, other, swapped) in &plan {
                        let other = match other {
                            Some(o) => Some(self.operand(o, out, row0, c, h, w)?),
                            None => None,
                        };
                        chain.push(Step {
                            ew: *ew,
                            other,
                            swapped: *swapped,
                            third: None,
                        });
                    }
                    let v = ops::chain(&mut self.e, input, &chain).map_err(err)?;
                    let dst = out_home.tile(self.home_mem(), row0, c, h, w);
                    let to = Loc {
                        place: Place::Mem(self.home_mem()),
                        dtype: out_home.dtype,
                    };
                    self.e.to_loc(v, to, Some(&dst), Pad::Dense).map_err(err)?;
                    c += w;
                }
                r += h;
            }
        }
        Ok(())
    }

    /// A transpose of the last two dimensions (the leading ones kept), tile by
    /// tile through a transposing copy instruction (`d[j, i] = src[i, j]`).
    fn transpose(&mut self, n: &crate::ir::Node, perm: &[usize]) -> Result<(), LowerError> {
        let g = self.g;
        let rank = perm.len();
        let swaps_last_two = rank >= 2
            && perm[..rank - 2].iter().enumerate().all(|(i, p)| i == *p)
            && perm[rank - 2] == rank - 1
            && perm[rank - 1] == rank - 2;
        let (x, y) = (n.inputs[0], n.outputs[0]);
        let (xin, yout) = (
            self.homes
                .get(&x)
                .cloned()
                .ok_or_else(|| err("input without a home"))?,
            self.homes
                .get(&y)
                .cloned()
                .ok_or_else(|| err("output without a home"))?,
        );
        if !swaps_last_two {
            return Err(Self::node_err(
                n,
                format!(
                    "Transpose with perm {perm:?} is not supported yet (only swapping the last two dimensions)"
                ),
            ));
        }
        let shape = &g.ty(x).shape;
        let (r, c) = (shape[rank - 2] as i64, shape[rank - 1] as i64);
        let batches: i64 = shape[..rank - 2].iter().product::<usize>() as i64;
        let home = Loc {
            place: Place::Mem(self.home_mem()),
            dtype: xin.dtype,
        };
        let back = Loc {
            place: Place::Mem(self.home_mem()),
            dtype: yout.dtype,
        };
        // A transposing instruction the data can reach and come back from.
        let cands: Vec<machine::Copy> = self
            .info
            .transposes
            .iter()
            .filter(|t| {
                self.info.path(&[home], t.from).is_some() && self.info.path(&[t.to], back).is_some()
            })
            .cloned()
            .collect();
        let Some(tc) = cands
            .iter()
            .find(|t| t.cast.is_none())
            .or(cands.first())
            .cloned()
        else {
            return Err(Self::node_err(
                n,
                "cannot compile: the target lacks a transposing copy `d[j, i] = a[i, j]`",
            ));
        };
        // The largest square tile the instruction takes.
        let mut t = 1i64;
        for size in [128i64, 64, 32, 16, 8, 4, 2, 1] {
            let op = self.transpose_op(&tc, size.min(r), size.min(c), None, None);
            if self.e.check(&op.0, tc.inst).is_ok() {
                t = size;
                break;
            }
        }
        for b in 0..batches {
            let mut i = 0;
            while i < r {
                let h = t.min(r - i);
                let mut j = 0;
                while j < c {
                    let w = t.min(c - j);
                    let src = xin.tile(self.home_mem(), b * r + i, j, h, w);
                    let Val::Mem(src) = self
                        .e
                        .to_loc(Val::Mem(src), tc.from, None, Pad::Dense)
                        .map_err(err)?
                    else {
                        return Err(err("a transpose operand landed in a register"));
                    };
                    let Place::Mem(dm) = tc.to.place else {
                        return Err(err("a transposing copy into registers"));
                    };
                    let dst = self.e.buffer(dm, tc.to.dtype, w, h);
                    self.e.ready(&src).map_err(err)?;
                    let (op, refs) = self.transpose_op(&tc, h, w, Some(&src), Some(&dst));
                    self.e
                        .emit(&op, &refs, Some(tc.inst))
                        .map_err(|e| Self::node_err(n, e))?;
                    let out = yout.tile(self.home_mem(), b * c + j, i, w, h);
                    self.e
                        .to_loc(Val::Mem(dst), back, Some(&out), Pad::Dense)
                        .map_err(err)?;
                    j += w;
                }
                i += h;
            }
        }
        Ok(())
    }

    /// `dst[j, i] = src[i, j]` over an `h` x `w` source tile (placeholders when no tiles are given).
    fn transpose_op(
        &self,
        tc: &machine::Copy,
        h: i64,
        w: i64,
        src: Option<&MemTile>,
        dst: Option<&MemTile>,
    ) -> (TileOp, Vec<Ref>) {
        let place = |loc: Loc, shape: &[i64]| match loc.place {
            Place::Mem(mem) => TilePlace::Mem {
                mem,
                addr: 0,
                strides: isa_specs::select::dense(shape),
            },
            Place::Reg(file) => TilePlace::Reg { file, reg: 0 },
        };
        let (s, sr) = match src {
            Some(t) => Emitter::mem_tensor(t, vec![h, w]),
            None => (
                TileTensor {
                    dtype: tc.from.dtype,
                    shape: vec![h, w],
                    place: place(tc.from, &[h, w]),
                },
                Ref::Fixed,
            ),
        };
        let (d, dr) = match dst {
            Some(t) => Emitter::mem_tensor(t, vec![w, h]),
            None => (
                TileTensor {
                    dtype: tc.to.dtype,
                    shape: vec![w, h],
                    place: place(tc.to, &[w, h]),
                },
                Ref::Fixed,
            ),
        };
        let ix = |i: u32| isa_specs::model::Affine {
            terms: vec![(isa_specs::model::IndexId(i), 1)],
            constant: 0,
            offsets: Vec::new(),
        };
        let read = TileExpr::Access(TileAccess {
            tensor: 1,
            indices: vec![ix(0), ix(1)],
        });
        let value = match tc.cast {
            Some(dt) => TileExpr::Cast(dt, Box::new(read)),
            None => read,
        };
        (
            TileOp {
                tensors: vec![d, s],
                extents: vec![h, w],
                target: TileAccess {
                    tensor: 0,
                    indices: vec![ix(1), ix(0)],
                },
                op: isa_specs::model::AssignOp::Set,
                value,
            },
            vec![dr, sr],
        )
    }

    fn tile_budget(&self) -> i64 {
        let m = self.e.m;
        m.memories
            .iter()
            .filter(|x| !x.kind.off_chip())
            .map(|x| x.size.value)
            .min()
            .unwrap_or(1 << 20)
    }

    /// A tile of an operand of the region's element-wise steps.
    fn operand(
        &mut self,
        o: &Operand,
        out: ValueId,
        r: i64,
        c: i64,
        h: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        match o {
            Operand::Value(v) => self.operand_tile(*v, out, r, c, h, w),
            Operand::Zeros => {
                let t = self.packed_const(None, out, "zeros")?;
                Ok(Val::Mem(t.view(r, c, h, w)))
            }
            Operand::Recip(inner) => {
                let x = self.operand(inner, out, r, c, h, w)?;
                ops::chain(
                    &mut self.e,
                    x,
                    &[Step {
                        ew: Ew::Recip,
                        other: None,
                        swapped: false,
                        third: None,
                    }],
                )
                .map_err(err)
            }
        }
    }

    /// The `[r.., c..]` tile of value `v` broadcast to the shape of `out`.
    fn operand_tile(
        &mut self,
        v: ValueId,
        out: ValueId,
        r: i64,
        c: i64,
        h: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        let g = self.g;
        let (vs, os) = (&g.ty(v).shape, &g.ty(out).shape);
        if g.constants.contains_key(&v) {
            let t = self.packed_const(Some(v), out, "expanded")?;
            return Ok(Val::Mem(t.view(r, c, h, w)));
        }
        let home = self
            .homes
            .get(&v)
            .cloned()
            .ok_or_else(|| err("operand without a home"))?;
        if vs == os {
            return Ok(Val::Mem(home.tile(self.home_mem(), r, c, h, w)));
        }
        // Broadcast: output row i reads input row f(i); the last dimension must not broadcast.
        if vs.last() != os.last() {
            return Err(err(format!(
                "broadcasting computed tensor `{}` along its last dimension is not supported yet",
                g.values[v.index()].name
            )));
        }
        let src_row = |i: i64| -> i64 {
            let lead = &os[..os.len() - 1];
            let vlead = &vs[..vs.len().saturating_sub(1)];
            let mut idx = Vec::with_capacity(lead.len());
            let mut rest = i;
            for d in lead.iter().rev() {
                idx.push(rest % *d as i64);
                rest /= *d as i64;
            }
            idx.reverse();
            let off = lead.len() - vlead.len();
            let mut row = 0;
            for (k, d) in vlead.iter().enumerate() {
                let x = if *d == 1 { 0 } else { idx[off + k] };
                row = row * *d as i64 + x;
            }
            row
        };
        let land = self
            .info
            .copies
            .iter()
            .find(|cp| {
                cp.from
                    == Loc {
                        place: Place::Mem(self.home_mem()),
                        dtype: home.dtype,
                    }
                    && matches!(cp.to.place, Place::Mem(_))
            })
            .map(|cp| cp.to)
            .ok_or_else(|| err("nothing loads from the home memory"))?;
        let Place::Mem(lm) = land.place else {
            unreachable!()
        };
        let buf = self.e.buffer_padded(lm, land.dtype, h, w, Pad::Registers);
        for i in 0..h {
            let src = home.tile(self.home_mem(), src_row(r + i), c, 1, w);
            self.e
                .to_loc(Val::Mem(src), land, Some(&buf.view(i, 0, 1, w)), Pad::Dense)
                .map_err(err)?;
        }
        Ok(Val::Mem(buf))
    }

    /// A constant (or zeros) expanded to the shape of `out`, packed at home in the activation type.
    fn packed_const(
        &mut self,
        v: Option<ValueId>,
        out: ValueId,
        kind: &str,
    ) -> Result<MemTile, LowerError> {
        let key = (v.unwrap_or(out), format!("{kind}:{}", out.index()));
        if let Some(t) = self.packed.get(&key) {
            return Ok(t.clone());
        }
        let g = self.g;
        let os = g.ty(out).shape.clone();
        let (rows, cols) = view(&os);
        let n = (rows * cols) as usize;
        let data: Vec<f64> = match v {
            None => vec![0.0; n],
            Some(v) => {
                let t = &g.constants[&v];
                let vs = &t.ty.shape;
                let mut out_data = Vec::with_capacity(n);
                for flat in 0..n {
                    // numpy broadcasting: align trailing dimensions.
                    let mut rest = flat;
                    let mut idx = vec![0usize; os.len()];
                    for d in (0..os.len()).rev() {
                        idx[d] = rest % os[d];
                        rest /= os[d];
                    }
                    let off = os.len() - vs.len();
                    let mut src = 0usize;
                    for (k, d) in vs.iter().enumerate() {
                        src = src * d + if *d == 1 { 0 } else { idx[off + k] };
                    }
                    out_data.push(t.data.get(src).copied().unwrap_or(0.0));
                }
                out_data
            }
        };
        let dt = self.act;
        let home = self.padded(data, rows, cols, dt);
        let t = home.tile(self.home_mem(), 0, 0, rows, cols);
        self.packed.insert(key, t.clone());
        Ok(t)
    }

    /// Places a dense `rows` x `cols` matrix at home as constant data, rows aligned.
    fn padded(&mut self, data: Vec<f64>, rows: i64, cols: i64, dt: DType) -> Home {
        let pitch = self.home_pitch(cols, dt);
        let mut out = vec![0.0; (rows * pitch) as usize];
        for r in 0..rows as usize {
            let (p, c) = (pitch as usize, cols as usize);
            out[r * p..r * p + c].copy_from_slice(&data[r * c..r * c + c]);
        }
        let addr = self.alloc_home(out.len() as u64 * dt.bytes(), 64);
        self.data.push(DataSegment {
            memory: self.e.m.memories[self.home_mem().index()].name.clone(),
            addr,
            bytes: encode(dt, out),
        });
        Home {
            addr,
            dtype: dt,
            rows,
            cols,
            pitch,
        }
    }

    /// Back end: buffers, registers, schedule, encoding.
    fn back_end(mut self, t: &targets::Target, m: &Machine) -> Result<Compiled, LowerError> {
        // On-chip buffers, per memory.
        let mut buffers = Vec::new();
        let mut bases = vec![0u64; self.e.bufs.len()];
        for (mi, mem) in m.memories.iter().enumerate() {
            let ids: Vec<usize> = (0..self.e.bufs.len())
                .filter(|&b| self.e.bufs[b].mem.index() == mi)
                .collect();
            if ids.is_empty() {
                continue;
            }
            let bs: Vec<memplan::Buffer> = ids
                .iter()
                .map(|&b| memplan::Buffer {
                    size: self.e.bufs[b].size,
                    align: self.e.bufs[b].align,
                    live: self.e.bufs[b].live,
                })
                .collect();
            let cap = mem.size.value as u64;
            let plan =
                memplan::plan(&bs, cap).map_err(|e| err(format!("memory `{}`: {e}", mem.name)))?;
            memplan::check(&bs, &plan, cap).map_err(|e| {
                err(format!(
                    "memory plan of `{}` is invalid: {}",
                    mem.name,
                    e.join("; ")
                ))
            })?;
            for (k, &b) in ids.iter().enumerate() {
                bases[b] = plan.offsets[k];
            }
            buffers.push((mem.name.clone(), plan.peak, cap));
        }
        for &(i, oi, b) in &self.e.fixups {
            if let regalloc::VOperand::Fixed(isa_specs::target::OpValue::Addr(a)) =
                &mut self.e.code[i].operands[oi]
            {
                *a += bases[b];
            }
        }
        let code = std::mem::take(&mut self.e.code);
        let selected = code.iter().map(|vi| print_virtual(m, vi)).collect();
        let insts = regalloc::allocate(m, &code).map_err(|e| err(e.to_string()))?;
        regalloc::check(m, &code, &insts)
            .map_err(|e| err(format!("register allocation is invalid: {}", e.join("; "))))?;
        for mi in &insts {
            isa_specs::target::check_constraints(m, mi)
                .map_err(|e| err(format!("after placement: {e}")))?;
        }
        let bundles = sched::schedule(t, m, &insts);
        sched::check(t, m, &insts, &bundles)
            .map_err(|e| err(format!("schedule is invalid: {}", e.join("; "))))?;
        let mut program = Program::new(m);
        for b in &bundles {
            let word =
                isa_specs::target::encode_bundle(t.isa(), m, b).map_err(|e| err(e.to_string()))?;
            program.code.extend_from_slice(&word);
        }
        program.data = std::mem::take(&mut self.data);
        let home_name = m.memories[self.home_mem().index()].name.clone();
        let desc = |v: ValueId, h: &Home| TensorDesc {
            name: self.g.values[v.index()].name.clone(),
            dtype: h.dtype,
            shape: self.g.ty(v).shape.iter().map(|d| *d as u64).collect(),
            memory: home_name.clone(),
            addr: h.addr,
            pitch: if h.pitch == h.cols { 0 } else { h.pitch as u64 },
        };
        for v in &self.g.inputs {
            let h = &self.homes[v];
            program.inputs.push(desc(*v, h));
        }
        for v in &self.g.outputs {
            let h = self
                .homes
                .get(v)
                .ok_or_else(|| err("a graph output has no place at home"))?;
            program.outputs.push(desc(*v, h));
        }
        let macs = self
            .g
            .nodes
            .iter()
            .filter(|n| matches!(n.op, Op::MatMul))
            .map(|n| {
                let o = &self.g.ty(n.outputs[0]).shape;
                let k = *self.g.ty(n.inputs[0]).shape.last().unwrap_or(&1);
                o.iter().product::<usize>() as u64 * k as u64
            })
            .sum();
        let min_home_bytes = self
            .g
            .inputs
            .iter()
            .chain(&self.g.outputs)
            .map(|v| self.g.ty(*v).numel() as u64 * self.homes[v].dtype.bytes())
            .chain(
                self.g
                    .constants
                    .values()
                    .map(|t| t.ty.numel() as u64 * self.act.bytes()),
            )
            .sum();
        Ok(Compiled {
            program,
            bundles,
            insts,
            regions: self.regions,
            selected,
            buffers,
            macs,
            min_home_bytes,
        })
    }
}

/// One instruction with virtual registers, as text: `vadd %v.3, %v.1, %v.2`.
pub fn print_virtual(m: &Machine, vi: &regalloc::VInst) -> String {
    use isa_specs::target::OpValue;
    let def = &m.instructions[vi.inst.index()];
    let ops: Vec<String> = vi
        .operands
        .iter()
        .zip(&def.operands)
        .map(|(v, o)| match (v, &o.kind) {
            (regalloc::VOperand::Virtual(f, n), _) => {
                format!("%{}.{n}", m.regfiles[f.index()].name)
            }
            (regalloc::VOperand::Fixed(OpValue::Reg(r)), OperandKind::Reg { file, .. }) => {
                format!("{}{r}", m.regfiles[file.index()].name)
            }
            (regalloc::VOperand::Fixed(OpValue::Sem(s)), OperandKind::Sem { bank }) => {
                format!("{}{s}", m.semaphores[bank.index()].name)
            }
            (regalloc::VOperand::Fixed(OpValue::Addr(a)), _) => format!("@{a:#x}"),
            (regalloc::VOperand::Fixed(OpValue::Imm(i)), _) => i.to_string(),
            (regalloc::VOperand::Fixed(OpValue::Real(x)), _) => format!("{x:?}"),
            (regalloc::VOperand::Fixed(x), _) => format!("{x:?}"),
        })
        .collect();
    if ops.is_empty() {
        def.name.clone()
    } else {
        format!("{} {}", def.name, ops.join(", "))
    }
}

/// An operand of an element-wise step.
#[derive(Clone, Debug)]
enum Operand {
    /// A value of the graph.
    Value(ValueId),
    /// Zeros (relu as `max(x, 0)`).
    Zeros,
    /// The reciprocal of an operand (division as multiplication).
    Recip(Box<Operand>),
}

/// A run of a contraction operand staged on chip.
#[derive(Clone, Debug)]
struct Staged {
    /// First reduction index it holds.
    k0: i64,
    /// Reduction indices it holds.
    len: i64,
    /// First index and extent of the other dimension.
    other0: i64,
    other: i64,
    /// Where.
    tile: MemTile,
}

/// How a matrix product is computed.
#[derive(Clone, Debug)]
struct MatMulPlan {
    /// Overwriting form, if any.
    set: Option<Contraction>,
    /// Accumulating form, if any.
    acc: Option<Contraction>,
    /// Tile sizes.
    tm: i64,
    tn: i64,
    tk: i64,
    /// Rows (per batch), columns, reduction.
    m: i64,
    k: i64,
    n: i64,
    a: ValueId,
    b: ValueId,
    /// Batches of `a` and `b` for each output batch: row offsets.
    a_batch: Vec<i64>,
    b_batch: Vec<i64>,
    /// When no contraction instruction fits: the product as a sum of rows of
    /// `B` scaled by elements of `A`, on vector registers.
    decomposed: Option<ops::Scaled>,
}

impl Lowerer<'_> {
    fn plan_matmul(&mut self, n: &crate::ir::Node) -> Result<MatMulPlan, LowerError> {
        let g = self.g;
        let (a, b) = (n.inputs[0], n.inputs[1]);
        let (sa, sb, so) = (&g.ty(a).shape, &g.ty(b).shape, &g.ty(n.outputs[0]).shape);
        if sa.len() < 2 || sb.len() < 2 {
            return Err(Self::node_err(
                n,
                "one-dimensional MatMul operands are not supported yet",
            ));
        }
        let (m, k) = (sa[sa.len() - 2] as i64, sa[sa.len() - 1] as i64);
        let nn = sb[sb.len() - 1] as i64;
        // Batch offsets (numpy broadcasting of leading dimensions).
        let lead = &so[..so.len() - 2];
        let nb: usize = lead.iter().product();
        let offsets = |s: &[usize], rows: i64| -> Vec<i64> {
            let sl = &s[..s.len() - 2];
            (0..nb)
                .map(|bi| {
                    let mut rest = bi;
                    let mut idx = vec![0usize; lead.len()];
                    for d in (0..lead.len()).rev() {
                        idx[d] = rest % lead[d];
                        rest /= lead[d];
                    }
                    let off = lead.len() - sl.len();
                    let mut x = 0usize;
                    for (q, d) in sl.iter().enumerate() {
                        x = x * d + if *d == 1 { 0 } else { idx[off + q] };
                    }
                    x as i64 * rows
                })
                .collect()
        };
        let a_batch = offsets(sa, m);
        let b_batch = offsets(sb, k);
        let a_const = g.constants.contains_key(&a);
        let b_const = g.constants.contains_key(&b);
        let mut best: Option<(i64, MatMulPlan)> = None;
        let mut why = Vec::new();
        let cs = self.contractions.clone();
        for c in &cs {
            // Activations are row-major at home: they cannot be read transposed.
            if !a_const && c.a_dims.first() == Some(&Role::K) && c.a_dims.len() == 2 {
                why.push(format!(
                    "`{}` reads A transposed",
                    self.e.m.instructions[c.inst.index()].name
                ));
                continue;
            }
            if !b_const && c.b_dims.first() == Some(&Role::N) {
                why.push(format!(
                    "`{}` reads B transposed and B is computed",
                    self.e.m.instructions[c.inst.index()].name
                ));
                continue;
            }
            let Some(locs) = c.locs(&self.e) else {
                continue;
            };
            if !a_const && locs[1].place == Place::Mem(self.info.home) {
                why.push(format!(
                    "`{}` needs A resident in memory and A is computed",
                    self.e.m.instructions[c.inst.index()].name
                ));
                continue;
            }
            if !b_const && locs[2].place == Place::Mem(self.info.home) {
                why.push(format!(
                    "`{}` needs B resident in memory and B is computed",
                    self.e.m.instructions[c.inst.index()].name
                ));
                continue;
            }
            let partner = cs.iter().find(|d| {
                d.set != c.set
                    && d.locs(&self.e) == Some(locs)
                    && d.t_dims == c.t_dims
                    && d.a_dims == c.a_dims
                    && d.b_dims == c.b_dims
            });
            if !c.set && partner.is_some() {
                continue; // considered from the overwriting form
            }
            let (set, acc) = if c.set {
                (Some(c.clone()), partner.cloned())
            } else {
                (None, Some(c.clone()))
            };
            let Some((cost, tm, tn, tk)) = self.tile_search(c, m, nn, k) else {
                why.push(format!(
                    "`{}` accepts no tile size",
                    self.e.m.instructions[c.inst.index()].name
                ));
                continue;
            };
            if set.is_some() && acc.is_none() && tk < k {
                why.push(format!(
                    "`{}` cannot accumulate a reduction of {k}",
                    self.e.m.instructions[c.inst.index()].name
                ));
                continue;
            }
            if best.as_ref().is_none_or(|(bc, _)| cost < *bc) {
                best = Some((
                    cost,
                    MatMulPlan {
                        set,
                        acc,
                        tm,
                        tn,
                        tk,
                        m,
                        k,
                        n: nn,
                        a,
                        b,
                        a_batch: a_batch.clone(),
                        b_batch: b_batch.clone(),
                        decomposed: None,
                    },
                ));
            }
        }
        if let Some((_, p)) = best {
            return Ok(p);
        }
        // Decomposition: C[m, :] = Σ_k A[m, k] · B[k, :] with a vector times a
        // scalar and a vector add, where the machine has them.
        if let Some(sc) = ops::scaled_rows(&self.e) {
            let tn = sc.width.min(nn).max(1);
            return Ok(MatMulPlan {
                set: None,
                acc: None,
                tm: 1,
                tn,
                tk: k,
                m,
                k,
                n: nn,
                a,
                b,
                a_batch,
                b_batch,
                decomposed: Some(sc),
            });
        }
        Err(Self::node_err(
            n,
            if why.is_empty() {
                "cannot compile: the target lacks a matrix product (`d[i, j] = sum(k) a[i, k] * b[k, j]`, or a `+=` form) and a vector-times-scalar `d[i] = a[i] * s` with a scalar load to decompose it".to_owned()
            } else {
                format!(
                    "no contraction instruction fits ({}), and the target lacks a vector-times-scalar `d[i] = a[i] * s` with a scalar load to decompose the product",
                    why.join("; ")
                )
            },
        ))
    }

    /// The tile sizes `(m, n, k)` minimising the contraction's estimated time:
    /// its occupancy per step from the generated timing tables, plus the
    /// latency and transfer time of its operands from the home memory.
    fn tile_search(&self, c: &Contraction, m: i64, n: i64, k: i64) -> Option<(i64, i64, i64, i64)> {
        let gran = self.info.col_granule;
        // Register shapes (an instruction may need whole registers, even past the
        // matrix's edge), and powers of two up to the dimension.
        let fixed: Vec<i64> = self
            .e
            .m
            .regfiles
            .iter()
            .flat_map(|r| r.shape.iter().map(|d| d.value))
            .collect();
        let cands = |dim: i64| -> Vec<i64> {
            let top = machine::rup(dim, gran).max(1);
            let mut v: Vec<i64> = (0..13).map(|p| 1i64 << p).filter(|x| *x <= top).collect();
            v.extend(fixed.iter().copied());
            v.push(dim);
            v.push(machine::rup(dim, gran));
            v.sort_unstable();
            v.dedup();
            v.retain(|x| *x >= 1 && *x <= 4096);
            v
        };
        let ms = if c.has(Role::M) { cands(m) } else { vec![1] };
        let ns = if c.has(Role::N) { cands(n) } else { vec![1] };
        let ks = cands(k);
        let budget = |mem: MemId| self.e.m.memories[mem.index()].size.value / 4;
        let locs = c.locs(&self.e)?;
        let home = &self.e.m.memories[self.info.home.index()];
        let (home_lat, home_bw) = (home.latency.value.max(0), home.bandwidth.value.max(1));
        let mut best: Option<(i64, i64, i64, i64)> = None;
        for &tm in &ms {
            for &tn in &ns {
                for &tk in &ks {
                    let mnk = (tm, tn, tk);
                    let bytes_ok = [
                        (&c.t_dims, locs[0]),
                        (&c.a_dims, locs[1]),
                        (&c.b_dims, locs[2]),
                    ]
                    .iter()
                    .all(|(d, l)| match l.place {
                        Place::Mem(mem) if mem != self.info.home => {
                            Contraction::shape(d, mnk).iter().product::<i64>()
                                * l.dtype.bytes() as i64
                                <= budget(mem)
                        }
                        _ => true,
                    });
                    if !bytes_ok {
                        continue;
                    }
                    let Some(op) = c.probe(&self.e, mnk) else {
                        continue;
                    };
                    let Ok((mi, _)) = self.e.choose(&op, Some(c.inst)) else {
                        continue;
                    };
                    let occ = self.e.isa.occupancy(self.e.m, &mi).max(1);
                    let (mt, nt, kt) = (
                        machine::cdiv(m, tm),
                        machine::cdiv(n, tn),
                        machine::cdiv(k, tk),
                    );
                    // Each step: the instruction's occupancy, plus bringing its
                    // operands from home (latency and bytes over the home
                    // memory's bandwidth; operands resident at home are read by
                    // the instruction itself); each output tile goes back home.
                    let moved = |dims: &[Role], l: Loc| match l.place {
                        Place::Mem(x) if x == self.info.home => 0,
                        _ => {
                            Contraction::shape(dims, mnk).iter().product::<i64>()
                                * l.dtype.bytes() as i64
                        }
                    };
                    let step_bytes = moved(&c.a_dims, locs[1]) + moved(&c.b_dims, locs[2]);
                    let out_bytes = tm * tn * 4;
                    let cost = mt * nt * kt * (occ + home_lat + step_bytes / home_bw)
                        + mt * nt * (home_lat + out_bytes / home_bw);
                    if best.is_none_or(|(bc, ..)| cost < bc) {
                        best = Some((cost, tm, tn, tk));
                    }
                }
            }
        }
        best
    }

    /// A constant operand of a contraction packed at home for tile access:
    /// in dimension order `dims` (roles), element type `dt`, padded with zeros
    /// to whole tiles.
    /// `B` in its natural layout is cut into column panels one tile wide, each
    /// a dense matrix starting aligned, so every tile's rows start aligned:
    /// returns the panels and their width (0: one piece).
    fn packed_matrix(
        &mut self,
        v: ValueId,
        batch_row0: i64,
        dims: &[Role],
        dt: DType,
        p: &MatMulPlan,
    ) -> Result<(Vec<MemTile>, i64), LowerError> {
        let key = (
            v,
            format!(
                "mm:{batch_row0}:{dims:?}:{}:{}:{}:{}",
                dt.name(),
                p.tm,
                p.tn,
                p.tk
            ),
        );
        if let Some(t) = self.packed_panels.get(&key) {
            return Ok(t.clone());
        }
        let t = &self.g.constants[&v];
        let cols_src = *t.ty.shape.last().unwrap_or(&1) as i64;
        let is_a = v == p.a;
        // Logical matrix [r, c] of this operand and its padded extents.
        let (r, c) = if is_a { (p.m, p.k) } else { (p.k, p.n) };
        let pad = |x: i64, role: Role| match role {
            Role::M => machine::rup(x, p.tm),
            Role::N => machine::rup(x, p.tn),
            Role::K => machine::rup(x, p.tk),
        };
        let (rr, cr) = if is_a {
            (Role::M, Role::K)
        } else {
            (Role::K, Role::N)
        };
        let (rp, cp) = (pad(r, rr), pad(c, cr));
        let transposed = dims.first() == Some(&cr) && dims.len() == 2;
        let (orows, ocols) = if transposed { (cp, rp) } else { (rp, cp) };
        let mut data = vec![0.0; (orows * ocols) as usize];
        for i in 0..r {
            for j in 0..c {
                let x = t.data[((batch_row0 + i) * cols_src + j) as usize];
                let (oi, oj) = if transposed { (j, i) } else { (i, j) };
                data[(oi * ocols + oj) as usize] = x;
            }
        }
        let pw = if !is_a && !transposed && ocols > p.tn {
            p.tn
        } else {
            0
        };
        let panels = if pw == 0 {
            vec![
                self.padded(data, orows, ocols, dt)
                    .tile(self.home_mem(), 0, 0, orows, ocols),
            ]
        } else {
            (0..ocols / pw)
                .map(|j| {
                    let part: Vec<f64> = (0..orows)
                        .flat_map(|i| {
                            data[(i * ocols + j * pw) as usize..(i * ocols + (j + 1) * pw) as usize]
                                .to_vec()
                        })
                        .collect();
                    self.padded(part, orows, pw, dt)
                        .tile(self.home_mem(), 0, 0, orows, pw)
                })
                .collect()
        };
        self.packed_panels.insert(key, (panels.clone(), pw));
        Ok((panels, pw))
    }

    /// The tile `[r.., c..]` (`h` x `w`) of batch `b` of a matrix product, in the contraction's result place.
    fn matmul_tile(
        &mut self,
        p: &MatMulPlan,
        b: usize,
        r: i64,
        c: i64,
        h: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        let form = p
            .set
            .clone()
            .or_else(|| p.acc.clone())
            .ok_or_else(|| err("no contraction form"))?;
        let locs = form
            .locs(&self.e)
            .ok_or_else(|| err("contraction operands without places"))?;
        // Exact rows and columns if the instruction takes them, else whole (zero-padded) tiles.
        let exact = (
            if form.has(Role::M) { h } else { 1 },
            if form.has(Role::N) { w } else { 1 },
        );
        let fits = |e: &Emitter, f: &Contraction, mnk| {
            f.probe(e, mnk)
                .is_some_and(|op| e.check(&op, f.inst).is_ok())
        };
        let (mr, nr) = if fits(&self.e, &form, (exact.0, exact.1, p.tk)) {
            exact
        } else {
            (p.tm, p.tn)
        };
        let t_val = match locs[0].place {
            Place::Reg(file) => Val::Reg(emit::RegTile {
                file,
                dtype: locs[0].dtype,
                reg: self.e.vreg(file),
                rows: h,
                cols: w,
            }),
            Place::Mem(mem) => {
                let mut t = self.e.buffer(mem, locs[0].dtype, mr.max(h), nr.max(w));
                t.rows = h;
                t.cols = w;
                Val::Mem(t)
            }
        };
        if p.set.is_none() {
            let shape = Contraction::shape(&form.t_dims, (mr, nr, p.tk));
            self.zero(&t_val, &shape, locs[0])?;
        }
        let mut staged: [Option<Staged>; 2] = [None, None];
        let mut kk = 0;
        let mut first = true;
        // Reduction steps of the chosen size; a step whose operands cannot be
        // brought into place (alignment of a conversion through registers, say)
        // is retried without staging, then in halves.
        let mut kw = p.tk.min(p.k);
        let mut stage = true;
        while kk < p.k {
            kw = kw.min(p.k - kk);
            let cp = self.e.checkpoint();
            let staged_before = staged.clone();
            if !stage {
                staged = [None, None];
            }
            match self.contraction_step(
                p,
                &form,
                &locs,
                &t_val,
                first,
                b,
                (r, c),
                (mr, nr),
                (kk, kw),
                stage,
                &mut staged,
            ) {
                Ok(()) => {
                    first = false;
                    kk += kw;
                }
                Err(e) if stage || kw > 1 => {
                    let _ = e;
                    self.e.rollback(cp);
                    staged = staged_before;
                    if stage {
                        stage = false;
                    } else {
                        stage = true;
                        // The largest power of two below: offsets stay aligned.
                        kw = 1i64 << (63 - (kw - 1).max(1).leading_zeros());
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(t_val)
    }

    /// One reduction step `kk..kk + kw` of a contraction tile.
    #[allow(clippy::too_many_arguments)]
    fn contraction_step(
        &mut self,
        p: &MatMulPlan,
        form: &Contraction,
        locs: &[Loc; 3],
        t_val: &Val,
        first: bool,
        b: usize,
        (r, c): (i64, i64),
        (mr, nr): (i64, i64),
        (kk, kw): (i64, i64),
        stage: bool,
        staged: &mut [Option<Staged>; 2],
    ) -> Result<(), LowerError> {
        let fits = |e: &Emitter, f: &Contraction, mnk| {
            f.probe(e, mnk)
                .is_some_and(|op| e.check(&op, f.inst).is_ok())
        };
        let inst_form = if first {
            p.set.clone().unwrap_or_else(|| form.clone())
        } else {
            p.acc.clone().ok_or_else(|| err("no accumulating form"))?
        };
        let mnk = if fits(&self.e, &inst_form, (mr, nr, kw)) {
            (mr, nr, kw)
        } else {
            (mr, nr, p.tk)
        };
        let [sa, sb] = staged;
        let a_t = self.contraction_operand(
            p,
            &inst_form,
            true,
            b,
            (r, kk),
            mnk,
            locs[1],
            stage.then_some(sa),
        )?;
        let b_t = self.contraction_operand(
            p,
            &inst_form,
            false,
            b,
            (kk, c),
            mnk,
            locs[2],
            stage.then_some(sb),
        )?;
        let tens = |v: &Val, shape: Vec<i64>| match v {
            Val::Reg(x) => Emitter::reg_tensor(x.file, x.dtype, x.reg, shape),
            Val::Mem(x) => Emitter::mem_tensor(x, shape),
        };
        for v in [&a_t, &b_t, t_val] {
            if let Val::Mem(x) = v {
                self.e.ready(x).map_err(err)?;
            }
        }
        let (ts, refs): (Vec<TileTensor>, Vec<Ref>) = [
            tens(t_val, Contraction::shape(&inst_form.t_dims, mnk)),
            tens(&a_t, Contraction::shape(&inst_form.a_dims, mnk)),
            tens(&b_t, Contraction::shape(&inst_form.b_dims, mnk)),
        ]
        .into_iter()
        .unzip();
        let op = inst_form
            .op(&self.e, ts, mnk)
            .ok_or_else(|| err("contraction pattern"))?;
        self.e.emit(&op, &refs, Some(inst_form.inst)).map_err(|e| {
            err(format!(
                "`{}`: {e}",
                self.e.m.instructions[inst_form.inst.index()].name
            ))
        })?;
        Ok(())
    }

    /// Row `r`, columns `c..c + w` of a decomposed product: Σ_k A[r, k] · B[k, c..c + w].
    fn scaled_rows_tile(
        &mut self,
        p: &MatMulPlan,
        b: usize,
        r: i64,
        c: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        let sc = p.decomposed.clone().ok_or_else(|| err("not decomposed"))?;
        let (ha, hb) = (
            self.operand_home(p.a, p.a_batch[b], p.m, p.k)?,
            self.operand_home(p.b, p.b_batch[b], p.k, p.n)?,
        );
        // A's row where the scalar loads read, B's columns where vector loads read.
        let a_row = match self
            .e
            .to_loc(
                Val::Mem(ha.view(r, 0, 1, p.k)),
                sc.scalar_src,
                None,
                Pad::Dense,
            )
            .map_err(err)?
        {
            Val::Mem(t) => t,
            Val::Reg(_) => return Err(err("a row landed in a register")),
        };
        let land = self
            .info
            .path(&[hb.loc()], sc.vector)
            .and_then(|(_, ch)| {
                ch.iter()
                    .rev()
                    .map(|&ci| self.info.copies[ci].from)
                    .find(|l| matches!(l.place, Place::Mem(_)))
            })
            .ok_or_else(|| err("no way to bring B's rows to the vector registers"))?;
        let pad = self
            .info
            .path(&[land], sc.vector)
            .and_then(|(_, ch)| ch.first().map(|&ci| self.info.copies[ci].pad()))
            .unwrap_or(Pad::Dense);
        let b_cols = match self
            .e
            .to_loc(Val::Mem(hb.view(0, c, p.k, w)), land, None, pad)
            .map_err(err)?
        {
            Val::Mem(t) => t,
            Val::Reg(_) => return Err(err("B landed in a register")),
        };
        let mut acc: Option<Val> = None;
        for k in 0..p.k {
            self.e.ready(&a_row).map_err(err)?;
            let s = ops::scalar_load(&mut self.e, &sc, &a_row.view(0, k, 1, 1)).map_err(err)?;
            let row = self
                .e
                .to_loc(
                    Val::Mem(b_cols.view(k, 0, 1, w)),
                    sc.vector,
                    None,
                    Pad::Dense,
                )
                .map_err(err)?;
            let t = ops::scale(&mut self.e, &sc, row, s, w).map_err(err)?;
            acc = Some(match acc {
                None => t,
                Some(a) => ops::add_vectors(&mut self.e, &sc, a, t, w).map_err(err)?,
            });
        }
        acc.ok_or_else(|| err("an empty reduction"))
    }

    /// The matrix `[rows, cols]` of a matrix-product operand at home (a constant packed as is).
    fn operand_home(
        &mut self,
        v: ValueId,
        row0: i64,
        rows: i64,
        cols: i64,
    ) -> Result<MemTile, LowerError> {
        if let Some(t) = self.g.constants.get(&v) {
            let cols_src = *t.ty.shape.last().unwrap_or(&1) as i64;
            let data: Vec<f64> = (0..rows)
                .flat_map(|i| (0..cols).map(move |j| (i, j)))
                .map(|(i, j)| t.data[((row0 + i) * cols_src + j) as usize])
                .collect();
            let key = (v, format!("rows:{row0}:{rows}:{cols}"));
            if let Some(t) = self.packed.get(&key) {
                return Ok(t.clone());
            }
            let dt = self.act;
            let tile = self
                .padded(data, rows, cols, dt)
                .tile(self.home_mem(), 0, 0, rows, cols);
            self.packed.insert(key, tile.clone());
            return Ok(tile);
        }
        let h = self
            .homes
            .get(&v)
            .cloned()
            .ok_or_else(|| err("operand without a home"))?;
        Ok(h.tile(self.home_mem(), row0, 0, rows, cols))
    }

    /// Clears an accumulator with an instruction `d = 0`.
    fn zero(&mut self, t: &Val, shape: &[i64], loc: Loc) -> Result<(), LowerError> {
        let idx: Vec<isa_specs::model::Affine> = (0..shape.len())
            .map(|i| isa_specs::model::Affine {
                terms: vec![(isa_specs::model::IndexId(i as u32), 1)],
                constant: 0,
                offsets: Vec::new(),
            })
            .collect();
        let (tensor, r) = match t {
            Val::Reg(x) => Emitter::reg_tensor(x.file, x.dtype, x.reg, shape.to_vec()),
            Val::Mem(x) => Emitter::mem_tensor(x, shape.to_vec()),
        };
        let op = TileOp {
            tensors: vec![tensor],
            extents: shape.to_vec(),
            target: TileAccess {
                tensor: 0,
                indices: idx,
            },
            op: isa_specs::model::AssignOp::Set,
            value: TileExpr::Const(0.0),
        };
        self.e.emit(&op, &[r], None).map(|_| ()).map_err(|e| {
            err(format!(
                "cannot clear the accumulator in {}: no instruction `d = 0.0` fits ({e})",
                self.e.place_name(loc.place)
            ))
        })
    }

    /// Operand `A` (rows `r0..`, reduction `k0..`) or `B` (reduction `r0..`,
    /// columns `k0..`) of one contraction step, at `loc`. Where the operand
    /// reaches `loc` through registers or a strided memory operand, a whole
    /// run of the reduction is first staged on chip (one transfer instead of
    /// one per step) and each step takes its slice from there.
    #[allow(clippy::too_many_arguments)]
    fn contraction_operand(
        &mut self,
        p: &MatMulPlan,
        form: &Contraction,
        is_a: bool,
        b: usize,
        (r0, c0): (i64, i64),
        mnk: (i64, i64, i64),
        loc: Loc,
        staged: Option<&mut Option<Staged>>,
    ) -> Result<Val, LowerError> {
        let (v, dims) = if is_a {
            (p.a, &form.a_dims)
        } else {
            (p.b, &form.b_dims)
        };
        let (rows, cols) = if is_a { (mnk.0, mnk.2) } else { (mnk.2, mnk.1) };
        let batch_row0 = if is_a { p.a_batch[b] } else { p.b_batch[b] };
        let shape = Contraction::shape(dims, mnk);
        let transposed = dims.len() == 2 && dims[0] == if is_a { Role::K } else { Role::N };
        let whole: MemTile = if self.g.constants.contains_key(&v) {
            // Pack in the type the operand wants if the home memory can hold it, else the activation type.
            let here = Loc {
                place: Place::Mem(self.home_mem()),
                dtype: loc.dtype,
            };
            let dt = if loc.place == Place::Mem(self.home_mem())
                || self.info.path(&[here], loc).is_some()
            {
                loc.dtype
            } else {
                self.act
            };
            if loc.place == Place::Mem(self.home_mem()) {
                return self.resident_tile(v, batch_row0, dims, dt, p, r0, c0, mnk, form, is_a);
            }
            let (panels, pw) = self.packed_matrix(v, batch_row0, dims, dt, p)?;
            if pw > 0 {
                // Column `c0` of B is column `c0 % pw` of its panel.
                let panel = panels
                    .get((c0 / pw) as usize)
                    .cloned()
                    .ok_or_else(|| err("panel out of range"))?;
                return self.contraction_slice(
                    p,
                    panel,
                    is_a,
                    (r0, c0 % pw),
                    (rows, cols),
                    transposed,
                    loc,
                    form,
                    staged,
                );
            }
            panels[0].clone()
        } else {
            let home = self
                .homes
                .get(&v)
                .cloned()
                .ok_or_else(|| err("operand without a home"))?;
            let (hr, hc) = if is_a { (p.m, p.k) } else { (p.k, p.n) };
            home.tile(self.home_mem(), batch_row0, 0, hr, hc)
        };
        if shape.len() == 1 && rows != 1 && cols != 1 {
            return Err(err(
                "a one-dimensional contraction operand with two dimensions",
            ));
        }
        self.contraction_slice(
            p,
            whole,
            is_a,
            (r0, c0),
            (rows, cols),
            transposed,
            loc,
            form,
            staged,
        )
    }

    /// The `(r0, c0)` slice of `rows` x `cols` of operand matrix `whole` at `loc`, staged (see [`Self::contraction_operand`]).
    #[allow(clippy::too_many_arguments)]
    fn contraction_slice(
        &mut self,
        p: &MatMulPlan,
        whole: MemTile,
        is_a: bool,
        (r0, c0): (i64, i64),
        (rows, cols): (i64, i64),
        transposed: bool,
        loc: Loc,
        form: &Contraction,
        staged: Option<&mut Option<Staged>>,
    ) -> Result<Val, LowerError> {
        // Where the slices are taken from: the last memory on the way to `loc`, or `loc` itself if strided.
        let def = &self.e.m.instructions[form.inst.index()];
        let strided = matches!(
            &def.operands[if is_a { form.a } else { form.b }].kind,
            OperandKind::Mem {
                stride: Some(_),
                ..
            }
        );
        let stage_loc = match loc.place {
            _ if transposed => None,
            Place::Reg(_) => self.info.path(&[whole.loc()], loc).and_then(|(_, chain)| {
                chain
                    .iter()
                    .rev()
                    .map(|&ci| self.info.copies[ci].from)
                    .find(|l| matches!(l.place, Place::Mem(_)))
            }),
            Place::Mem(_) if strided => Some(loc),
            Place::Mem(_) => None,
        }
        .filter(|l| *l != whole.loc());
        let (Some(stage_loc), Some(staged)) = (stage_loc, staged) else {
            let src = if transposed {
                whole.view(c0, r0, cols, rows)
            } else {
                whole.view(r0, c0, rows, cols)
            };
            // A strided operand takes a buffer with aligned rows.
            return self
                .e
                .to_loc(
                    Val::Mem(src),
                    loc,
                    None,
                    if strided { Pad::Aligned } else { Pad::Dense },
                )
                .map_err(err);
        };
        // The reduction offset of this step and the extent of the other dimension.
        let (k0, other0, other) = if is_a { (c0, r0, rows) } else { (r0, c0, cols) };
        let kstep = if is_a { cols } else { rows };
        let fresh = staged.as_ref().is_none_or(|s| {
            k0 < s.k0 || k0 + kstep > s.k0 + s.len || s.other0 != other0 || s.other != other
        });
        if fresh {
            let Place::Mem(sm) = stage_loc.place else {
                unreachable!()
            };
            let esz = 4i64.max(stage_loc.dtype.bytes() as i64);
            let budget = self.e.m.memories[sm.index()].size.value / 8 / (other.max(1) * esz);
            let step = p.tk.max(1);
            let run = (budget / step).max(1) * step;
            let len = machine::rup(p.k - k0, step).min(run).max(kstep);
            let src = if is_a {
                whole.view(r0, k0, rows, len)
            } else {
                whole.view(k0, c0, len, cols)
            };
            let pad = if strided {
                Pad::Aligned
            } else {
                self.info
                    .path(&[stage_loc], loc)
                    .and_then(|(_, ch)| ch.first().map(|&ci| self.info.copies[ci].pad()))
                    .unwrap_or(Pad::Dense)
            };
            let tile = match self
                .e
                .to_loc(Val::Mem(src), stage_loc, None, pad)
                .map_err(err)?
            {
                Val::Mem(t) => t,
                Val::Reg(_) => return Err(err("staged operand landed in a register")),
            };
            *staged = Some(Staged {
                k0,
                len,
                other0,
                other,
                tile,
            });
        }
        let s = staged.as_ref().ok_or_else(|| err("staging"))?;
        let slice = if is_a {
            s.tile.view(0, k0 - s.k0, rows, cols)
        } else {
            s.tile.view(k0 - s.k0, 0, rows, cols)
        };
        if Place::Mem(slice.mem) == loc.place && slice.dtype == loc.dtype {
            return Ok(Val::Mem(slice));
        }
        self.e
            .to_loc(Val::Mem(slice), loc, None, Pad::Dense)
            .map_err(err)
    }

    /// A tile of a constant operand kept resident at home in the exact layout
    /// (strides, alignment) the contraction instruction reads it in.
    #[allow(clippy::too_many_arguments)]
    fn resident_tile(
        &mut self,
        v: ValueId,
        batch_row0: i64,
        dims: &[Role],
        dt: DType,
        p: &MatMulPlan,
        r0: i64,
        c0: i64,
        mnk: (i64, i64, i64),
        form: &Contraction,
        is_a: bool,
    ) -> Result<Val, LowerError> {
        let key = (
            v,
            format!("res:{batch_row0}:{r0}:{c0}:{mnk:?}:{}", form.inst.index()),
        );
        if let Some(t) = self.packed.get(&key) {
            return Ok(Val::Mem(t.clone()));
        }
        let m = self.e.m;
        let op = &m.instructions[form.inst.index()].operands[if is_a { form.a } else { form.b }];
        let OperandKind::Mem { align, stride, .. } = &op.kind else {
            return Err(err("resident operand is not in memory"));
        };
        let params: Vec<i64> = m.params.iter().map(|q| q.value).collect();
        let shape = Contraction::shape(dims, mnk);
        let strides: Vec<i64> = match stride {
            Some(s) => s
                .iter()
                .map(|e| isa_specs::eval::eval_int(e, &isa_specs::eval::Params(&params)))
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    err(format!(
                        "stride of a resident operand depends on immediates: {e}"
                    ))
                })?,
            None => isa_specs::select::dense(&shape),
        };
        let t = &self.g.constants[&v];
        let cols_src = *t.ty.shape.last().unwrap_or(&1) as i64;
        let (lr, lc) = if is_a { (p.m, p.k) } else { (p.k, p.n) };
        let extent: i64 = shape
            .iter()
            .zip(&strides)
            .map(|(n, s)| (n - 1) * s)
            .sum::<i64>()
            + 1;
        let mut data = vec![0.0f64; extent as usize];
        let rows_role = if is_a { Role::M } else { Role::K };
        for flat in 0..shape.iter().product::<i64>() {
            // Multi-index over the operand's dims.
            let mut rest = flat;
            let mut idx = vec![0i64; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = rest % shape[d];
                rest /= shape[d];
            }
            let (mut i, mut j) = (0, 0);
            for (d, role) in dims.iter().enumerate() {
                if *role == rows_role {
                    i = idx[d];
                } else {
                    j = idx[d];
                }
            }
            let (gi, gj) = (r0 + i, c0 + j);
            if gi < lr && gj < lc {
                let off: i64 = idx.iter().zip(&strides).map(|(x, s)| x * s).sum();
                data[off as usize] = t.data[((batch_row0 + gi) * cols_src + gj) as usize];
            }
        }
        let addr = self.alloc_home(extent as u64 * dt.bytes(), *align);
        self.data.push(DataSegment {
            memory: m.memories[self.home_mem().index()].name.clone(),
            addr,
            bytes: encode(dt, data),
        });
        let pitch = if strides.len() == 2 {
            strides[0]
        } else {
            shape.last().copied().unwrap_or(1)
        };
        let (rows, cols) = if shape.len() == 2 {
            (shape[0], shape[1])
        } else {
            (1, shape[0])
        };
        let tile = MemTile {
            mem: self.home_mem(),
            dtype: dt,
            base: Base::Fixed(addr),
            offset: 0,
            rows,
            cols,
            pitch,
            ready: None,
        };
        self.packed.insert(key, tile.clone());
        Ok(Val::Mem(tile))
    }
}
