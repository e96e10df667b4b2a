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
//!    A layer normalisation, a softmax or a GELU is one region of its own
//!    ([`rows`]); attention is one region ([`fuse`]). Values passed between
//!    regions stay on chip where they fit (residency), in the type their
//!    matrix products read; a product whose result only a transpose back
//!    to rows of tokens reads writes it in place, and a transposed matrix
//!    a product can read untransposed is never transposed.
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

mod canon;
mod copy;
pub mod emit;
pub mod fuse;
pub mod gemv;
pub mod machine;
pub mod mapping;
pub mod masked;
mod matmul;
pub mod ops;
mod reduce;
pub mod rows;
mod scalar;
mod transpose;

use crate::ir::{Graph, Op, ValueId};
use crate::timing::PassTimes;
use crate::{memplan, regalloc, sched};
use emit::{Base, BufInfo, Emitter, MemTile, Pad, Val};
use isa_specs::Machine;
use isa_specs::model::Func;
use isa_specs::model::{DType, MemId, OperandKind};
use isa_specs::program::{DataSegment, Program, TensorDesc};
use isa_specs::target::{Bundle, MInst};
use machine::{Info, Loc, Place};
use mapping::{Mappings, Order, SpaceEntry};
use ops::{Contraction, Ew, Step};
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
    /// The selected instructions before register allocation and scheduling
    /// (virtual registers, buffers placed); [`Compiled::selected_text`]
    /// prints them.
    pub selected: Vec<regalloc::VInst>,
    /// Peak bytes of each on-chip memory the plan uses: `(memory, bytes, capacity)`.
    pub buffers: Vec<(String, u64, u64)>,
    /// Multiply-accumulates the model performs.
    pub macs: u64,
    /// Bytes of each tensor that must cross the home memory at least once.
    pub min_home_bytes: u64,
    /// Per region (beside `regions`): its work, traffic and bundles.
    pub region_stats: Vec<RegionStats>,
    /// What the compiler chose not to do, and why (an attention not kept on chip).
    pub notes: Vec<String>,
    /// Each matrix product's tuning space and the mapping compiled ([`mapping`]).
    pub space: Vec<SpaceEntry>,
    /// Values kept in on-chip memory across regions ([`Options::residency`]).
    pub kept_on_chip: usize,
    /// Time spent in each pass, fallbacks' attempts included.
    pub passes: PassTimes,
}

impl Compiled {
    /// [`Compiled::selected`], one instruction per line (virtual registers
    /// `%file.N`).
    pub fn selected_text(&self, m: &Machine) -> Vec<String> {
        self.selected
            .iter()
            .map(|vi| print_virtual(m, vi))
            .collect()
    }
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
        Roofline::of(m, self.macs, self.min_home_bytes)
    }
}

impl Roofline {
    /// The bound of `macs` multiply-accumulates and `home_bytes` across the
    /// home memory on machine `m`.
    pub fn of(m: &Machine, macs: u64, home_bytes: u64) -> Roofline {
        let (peak, bw) = roof(m);
        let compute_cycles = if peak > 0 {
            macs.div_ceil(peak as u64)
        } else {
            0
        };
        let memory_cycles = home_bytes.div_ceil(bw);
        Roofline {
            compute_cycles,
            memory_cycles,
            cycles: compute_cycles.max(memory_cycles).max(1),
        }
    }
}

/// The peak MACs per cycle (every unit, every copy) and the home memory's
/// bandwidth (bytes per cycle, at least 1) of `m`: the two roofs of the
/// bound ([`compiler::lower::Roofline`]).
pub fn roof(m: &Machine) -> (i64, u64) {
    let peak: i64 = m
        .units
        .iter()
        .map(|u| u.macs_per_cycle.value * u.count.value.max(1))
        .sum();
    let bw = m
        .memories
        .iter()
        .filter(|x| x.kind.off_chip())
        .max_by_key(|x| x.size.value)
        .map_or(1, |x| x.bandwidth.value.max(1));
    (peak, bw as u64)
}

/// What a lowering attempt may change, and a failed one must undo (see
/// [`Lowerer::attempt`]): the code and buffers emitted, the data placed at
/// home, and the caches of constants packed there, which would otherwise
/// point at data undone.
struct Attempt {
    cp: emit::Checkpoint,
    data: usize,
    packed: HashMap<(ValueId, String), MemTile>,
    packed_panels: HashMap<(ValueId, String), (Vec<MemTile>, i64)>,
}

/// A slice of columns (and the reshape splitting it into heads) not
/// lowered: the transpose reading it reads the slice's input as rows of
/// the transpose's last dimension ([`Lowerer::sliced_transposes`]). Row
/// `i` of the transpose's input is row `(i / pieces) * per_row + first +
/// i % pieces` of that view.
#[derive(Clone, Debug)]
struct Sliced {
    /// The slice's input.
    input: ValueId,
    /// The slice node, and the reshape's if any.
    nodes: Vec<usize>,
    /// The slice's first column, its columns and its input's columns, in
    /// rows of the transpose's last dimension.
    first: i64,
    pieces: i64,
    per_row: i64,
}

/// A split of a slice of a matrix into heads, read in place
/// ([`Lowerer::head_views`]).
#[derive(Clone, Debug)]
struct HeadView {
    /// The matrix sliced.
    matrix: ValueId,
    /// The slice's first column.
    first: i64,
}

/// Where a value lives: in the home memory, or kept on chip in a buffer
/// (an intermediate of a fused region, see [`fuse`]).
#[derive(Clone, Debug, PartialEq)]
struct Home {
    mem: MemId,
    base: Base,
    dtype: DType,
    rows: i64,
    cols: i64,
    /// Elements between rows: the row length, or more so rows start aligned.
    pitch: i64,
    /// Rows in batches of `.0`, each `.1` elements after the one before,
    /// rows within a batch `pitch` apart: a product's result written
    /// straight into the layout of the transpose that reads it (see
    /// [`Lowerer::transposed_products`]), or the heads of a product's
    /// result read in place ([`Lowerer::head_views`]). A tile never spans
    /// two batches.
    batch: Option<(i64, i64)>,
    /// Elements before the first row: the columns a head view skips.
    first: i64,
}

impl Home {
    fn tile(&self, r: i64, c: i64, h: i64, w: i64) -> MemTile {
        let start = self.first
            + match self.batch {
                Some((rows, stride)) => (r % rows) * self.pitch + (r / rows) * stride + c,
                None => r * self.pitch + c,
            };
        MemTile {
            mem: self.mem,
            dtype: self.dtype,
            base: self.base,
            offset: (start as u64) * self.dtype.bytes(),
            rows: h,
            cols: w,
            pitch: self.pitch,
            ready: None,
        }
    }

    /// Its address in the home memory, for data written at load time; a value
    /// kept on chip has none.
    fn addr(&self) -> Result<u64, LowerError> {
        match self.base {
            Base::Fixed(a) => Ok(a),
            Base::Buf(_) => Err(err(
                "a value kept on chip cannot be initialised as data (compiled again without on-chip residency)",
            )),
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

/// For every element of a tensor of shape `to` (row-major), the flat index of
/// the element of a tensor of shape `from` that numpy broadcasting reads.
pub fn broadcast_offsets(from: &[usize], to: &[usize]) -> Vec<usize> {
    crate::interp::offsets(to, &crate::interp::broadcast_strides(from, to))
}

/// Bytes of `data` in element type `dt`.
pub fn encode(dt: DType, data: impl IntoIterator<Item = f64>) -> Vec<u8> {
    let data: Vec<f64> = data.into_iter().collect();
    let mut out = vec![0; data.len() * dt.bytes() as usize];
    encode_into(dt, &data, &mut out);
    out
}

/// Elements `start..` of `data` encoded as `dt` into `out` (as many as it
/// holds): straight from the model file's `f32` bytes where they are what
/// `data` holds and `dt` is `f32` or `bf16`, else through `f64`s.
pub fn encode_elements(data: &crate::ir::Data, start: usize, dt: DType, out: &mut [u8]) {
    let n = out.len() / dt.bytes() as usize;
    match (data.f32_bytes(), dt) {
        (Some(b), DType::F32) => out.copy_from_slice(&b[4 * start..4 * (start + n)]),
        (Some(b), DType::Bf16) => {
            // As arrays, so that a word is one load and the loop vectorises
            // (byte by byte it did not: a sixth of compiling GPT-2).
            let (words, _) = b[4 * start..4 * (start + n)].as_chunks::<4>();
            let (halves, _) = out.as_chunks_mut::<2>();
            for (w, o) in words.iter().zip(halves) {
                *o = isa_specs::dtype::bf16_bits(u32::from_le_bytes(*w)).to_le_bytes();
            }
        }
        _ => {
            let mut buf = vec![0.0; n];
            data.read(start, &mut buf);
            encode_into(dt, &buf, out);
        }
    }
}

/// Writes `data` in element type `dt` into `out` (exactly as long): the bytes
/// [`targets::sim::to_bytes`] gives, with the common float types converted
/// directly (constant packing converts every weight of a model).
pub fn encode_into(dt: DType, data: &[f64], out: &mut [u8]) {
    match dt {
        DType::F32 => {
            for (x, o) in data.iter().zip(out.chunks_exact_mut(4)) {
                o.copy_from_slice(&(*x as f32).to_le_bytes());
            }
        }
        DType::Bf16 => {
            for (x, o) in data.iter().zip(out.chunks_exact_mut(2)) {
                let b = isa_specs::dtype::bf16_from_f64(*x);
                o.copy_from_slice(&b.to_bits().to_le_bytes());
            }
        }
        _ => {
            let n = dt.bytes() as usize;
            for (x, o) in data.iter().zip(out.chunks_exact_mut(n)) {
                o.copy_from_slice(&targets::sim::to_bytes(dt, *x)[..n]);
            }
        }
    }
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
    /// Constants packed for products in a type narrower than activations
    /// (weights as bf16): the fewest bytes per element each is held in at
    /// home, for the roofline's minimum traffic.
    packed_elem_bytes: HashMap<ValueId, u64>,
    contractions: Vec<Contraction>,
    /// Views that cannot alias their input (its rows are padded): copied.
    relayouts: std::collections::HashSet<ValueId>,
    /// The attentions recognised, and how many of their intermediates are
    /// kept on chip, of how many.
    attentions: Vec<(fuse::Attention, (usize, usize))>,
    /// The row groups recognised ([`rows`]), by their first node.
    row_groups: Vec<rows::RowGroup>,
    /// Set when a row group that took its producer's nodes does not lower:
    /// the node that started it ([`rows::row_groups_with`]).
    unfront: Option<usize>,
    /// What row groups skip where a constant mask makes work dead ([`masked`]).
    skips: Vec<masked::Skip>,
    /// Set when a row group with skips does not lower: the node that
    /// started it (the compile starts again without its skips).
    unskip: Option<usize>,
    /// The share of an on-chip memory one operand tile of a product may
    /// take: `1 / tile_share` (a quarter; less while a product's region is
    /// tried again after its buffers overflowed a memory).
    tile_share: i64,
    /// Row group forms tried ([`Lowerer::group_lowers`]).
    group_trials: HashMap<String, bool>,
    /// Transposes read only by one-row products that take the matrix
    /// untransposed ([`Lowerer::vector_dots`]): not lowered.
    dot_transposes: std::collections::HashSet<usize>,
    /// [`Lowerer::transposed_products`].
    transposed: Vec<(usize, ValueId)>,
    /// Transposes read only as `B` of products of several rows, which read
    /// the transpose's input by a form taking `B` transposed instead: not
    /// lowered ([`Lowerer::b_transposes`]).
    b_transposes: std::collections::HashSet<usize>,
    /// Those lowered after all (a product could not read the input so).
    lowered_transposes: std::collections::HashSet<usize>,
    /// Slices of columns read only by a transpose that moves rows
    /// ([`Lowerer::sliced_transposes`]): not lowered; the transpose reads
    /// the slice's input. By the transpose's input.
    sliced: HashMap<ValueId, Sliced>,
    /// Transposes splitting a slice of a product's result into heads that
    /// are not lowered: the heads are read in place ([`Lowerer::head_views`]).
    /// By the transpose's result.
    head_views: HashMap<ValueId, HeadView>,
    /// Buffers holding values kept on chip across regions, and the last
    /// node reading each.
    kept_until: HashMap<usize, usize>,
    /// The node whose region is being lowered.
    lowering_node: usize,
    /// Why the machine cannot keep values on chip, if it cannot.
    residency_blocked: Option<String>,
    /// Nodes whose values are kept at home (a first attempt failed there).
    evicted: &'a [String],
    /// The nodes of each region and its instructions `[start, end)`.
    region_parts: Vec<(Vec<usize>, (usize, usize))>,
    /// The region producing each value and the half of the register files
    /// it preferred ([`Options::pipeline_tiles`]).
    value_sides: HashMap<ValueId, (usize, u8)>,
    /// The half each region preferred, if any, in the order of `regions`.
    region_side: Vec<Option<u8>>,
    /// The parts (indices into `region_parts`) of each region after merging.
    region_groups: Vec<Vec<usize>>,
    /// The optimisations asked for.
    opts: Options,
    /// The run of a product's `A` staged for the last tile, by `(batch, row, rows)`:
    /// the next tile of the same rows reads it again instead of loading it.
    kept_a: Option<((usize, i64, i64), matmul::Staged)>,
    /// The runs of its `B` staged for earlier tiles, by `(batch, column, columns)`.
    kept_b: HashMap<(usize, i64, i64), matmul::Staged>,
    /// Constant rows broadcast down the tiles of the current region, staged
    /// on chip once for all its tiles.
    staged_rows: HashMap<(ValueId, i64), MemTile>,
    /// Mappings of products given from outside.
    mappings: &'a Mappings,
    /// The tuning space of each product compiled, in program order.
    space: Vec<SpaceEntry>,
    /// Time spent packing constants into the program's data.
    packing: std::time::Duration,
}

/// What one fused region does: the work and the traffic its roofline bound
/// counts, and where its code went.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RegionStats {
    /// Multiply-accumulates.
    pub macs: u64,
    /// Bytes it must move across the home memory at least: its inputs that
    /// live at home (constants included), read once, and its results that
    /// live at home, written once.
    pub home_bytes: u64,
    /// Its code as ranges of bundles `[first, end)`, in program order (a
    /// region merged from parts has several); each range runs to the first
    /// bundle of the next region, so together they cover the program.
    pub bundles: Vec<(usize, usize)>,
    /// The first and the last bundle holding any of its instructions (the
    /// scheduler moves instructions across regions, so regions' spans
    /// overlap where the ranges of [`RegionStats::bundles`] do not).
    pub span: Option<(usize, usize)>,
    /// Its instructions that may complete after its last bundle issues:
    /// `(bundle, latency)` where the latency exceeds the bundles left.
    pub late: Vec<(usize, u64)>,
}

impl RegionStats {
    /// The roofline bound of the region alone on machine `m` (see [`Roofline`]).
    pub fn roofline(&self, m: &Machine) -> Roofline {
        Roofline::of(m, self.macs, self.home_bytes)
    }

    /// The cycles its bundles took, given the cycle each bundle issued at
    /// and the program's total (the end of the last range).
    pub fn cycles(&self, issue: &[u64], total: u64) -> u64 {
        let at = |b: usize| issue.get(b).copied().unwrap_or(total);
        self.bundles
            .iter()
            .map(|&(a, b)| at(b).saturating_sub(at(a)))
            .sum()
    }

    /// The cycles from its first instruction's issue to its last one's
    /// completion, given the cycle each bundle issued at.
    pub fn span_cycles(&self, issue: &[u64], total: u64) -> u64 {
        let Some((first, last)) = self.span else {
            return 0;
        };
        let at = |b: usize| issue.get(b).copied().unwrap_or(total);
        let end = self
            .late
            .iter()
            .map(|&(b, l)| at(b) + l)
            .fold(at(last) + 1, u64::max);
        end.saturating_sub(at(first))
    }
}

/// Instructions of slack around each buffer's lifetime when buffers are
/// spread ([`Options::spread_buffers`]), widest first: the widest that
/// fits the memory is used, then widened by bisection (four steps) towards
/// the next wider one while it still fits (decode's weights need about
/// 15 k: its products are thousands of instructions long).
const SPREAD: [usize; 6] = [65536, 16384, 4096, 1024, 256, 64];

/// The plan with the widest slack that fits: the widest of [`SPREAD`]
/// whose plan `plan_at` finds, widened by four bisection steps towards the
/// next wider one while a plan is found.
fn widest_spread<P>(plan_at: impl Fn(usize) -> Option<P>) -> Option<P> {
    let mut wider = None;
    let (mut lo, mut best) = SPREAD.iter().find_map(|&slack| {
        let p = plan_at(slack).map(|p| (slack, p));
        if p.is_none() {
            wider = Some(slack);
        }
        p
    })?;
    if let Some(mut hi) = wider {
        for _ in 0..4 {
            let mid = lo + (hi - lo) / 2;
            match plan_at(mid) {
                Some(p) => (lo, best) = (mid, p),
                None => hi = mid,
            }
        }
    }
    Some(best)
}

/// Optimisations that can be switched off (all on by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Options {
    /// Attention as one region with its intermediates kept on chip ([`fuse`]).
    pub fuse_attention: bool,
    /// A matrix product's `A` operand, staged on chip (and converted) for one
    /// output tile, is read again by the next tiles of the same rows instead
    /// of being loaded from home each time.
    pub operand_reuse: bool,
    /// A run of the reduction of a product's operand is brought on chip in
    /// one transfer (and one wait) even where the instruction reads it
    /// straight from memory, rather than one transfer per reduction step.
    pub stage_runs: bool,
    /// A staged run comes on chip in bands of the reduction that grow (one
    /// step, one, two, four…), each with its own transfer and wait, so the
    /// first steps of a product start before the whole run has landed (and
    /// been converted) rather than after it; and a row group's first bands
    /// of rows grow from an eighth of its band, so its first block waits
    /// for a short transfer.
    pub band_runs: bool,
    /// Products of the next output tiles are computed before the epilogue of
    /// a tile (software pipelining of the tile loop, as deep as the
    /// contraction's unit has copies), so they overlap; and consecutive
    /// blocks of rows of a row group prefer alternate halves (and quarters)
    /// of the register file, and a region the other half than the region
    /// producing its inputs ([`crate::regalloc::allocate_sided`]), so they
    /// overlap too.
    pub pipeline_tiles: bool,
    /// On-chip buffers whose lifetimes are close do not share bytes when the
    /// memory has room, so their transfers and uses can overlap.
    pub spread_buffers: bool,
    /// The scheduler lets what follows an asynchronous transfer move above
    /// it where nothing depends on it ([`sched::Rules`]).
    pub overlap_transfers: bool,
    /// The tile search also weighs visiting output tiles column block by
    /// column block (the weights' runs stay on chip, the inputs stream)
    /// against row block by row block ([`mapping::Order`]).
    pub order_search: bool,
    /// A large transfer on an asynchronous unit with several copies (DMA
    /// engines) goes as one block of rows per copy, so they share it.
    pub spread_transfers: bool,
    /// Values passed between regions stay in on-chip memory from their
    /// producer to their last reader, instead of a round trip through the
    /// home memory, as many as fit beside the tiles (`docs/compiler.md`, "Regions").
    pub residency: bool,
    /// A row result (softmax's maximum and sum, layer normalisation's mean
    /// and scale) meets its row in registers through the machine's lane
    /// broadcast, instead of being widened to the full row by a product
    /// with a row of ones and read back.
    pub broadcast_rows: bool,
    /// A product of one row (per batch) by constant weights, or by a
    /// computed matrix already on chip, runs on the vector unit (sublanes as
    /// partial sums) where it can, instead of the matrix unit streaming one
    /// row per weight tile ([`gemv`]).
    pub vector_gemv: bool,
    /// A layer normalisation, a softmax, a GELU (element-wise nodes and
    /// reductions over the last dimension of one shape) is one region that
    /// reads each row once and keeps everything in between in registers
    /// ([`rows`]), instead of a region per reduction and per chain. Needs
    /// [`Options::broadcast_rows`].
    pub fuse_rows: bool,
    /// Values are written in the layout and type their consumers read:
    /// kept values read only by matrix products stored in the products'
    /// operand type; a product's result read only by the transpose back to
    /// rows of tokens written in place of it; a transposed computed `B`
    /// read untransposed by a form taking `B` as rows of `N`. Without it,
    /// conversions and transposes are separate passes.
    pub layout_fusion: bool,
    /// A row group without reductions (GELU) computes its result a column
    /// chunk at a time down all the rows of a band, rather than row block by
    /// row block across all the columns, so a product reading it as its `A`
    /// may start its first reduction steps while the rest is computed.
    pub column_chunks: bool,
    /// A join (`Concat`) kept on chip is laid out in dense rows, where its
    /// rows meet the transfer alignment, so the parts coming from home
    /// (a KV cache) are transferred straight into it instead of landing
    /// and being copied through the registers.
    pub dense_joins: bool,
    /// A product visits its column tiles in the order their readers are
    /// lowered ([`Lowerer::column_needs`]): attention's projection makes
    /// the keys and values, which the head splits copy, before the queries,
    /// which the scores read in place, so the copies overlap the rest of
    /// the product instead of following it.
    pub reader_order: bool,
    /// The scheduler ranks instructions by their critical path plus their
    /// distance from the end in a list schedule of the reversed program
    /// under the machine's units and bandwidth
    /// ([`sched::Rules::reverse_priorities`]), so the work the end waits for
    /// behind a busy unit or memory (the last output tiles' pops and
    /// stores) comes first, rather than by the critical path alone.
    pub reverse_priorities: bool,
    /// The scheduler finishes chains of accumulations one after another on
    /// each copy of a unit rather than advancing them all together
    /// ([`sched::Rules::finish_chains`]), so their registers free, and their
    /// results drain, while the unit goes on.
    pub finish_chains: bool,
    /// Work a constant mask makes dead is skipped ([`masked`]): a causal
    /// softmax computes each block of rows up to its diagonal's chunk and
    /// stores zeros beyond, the product making the scores skips the tiles
    /// above the diagonal, and the product reading the probabilities stops
    /// its reduction there. Attention's power-of-two scale goes into the
    /// query projection's epilogue (`canon`), so the mask holds 0 and 1 and
    /// the chunks it keeps whole cost no operation.
    pub skip_masked: bool,
    /// A causal mask is computed from element positions by an instruction
    /// that masks by position, where the machine has one
    /// ([`rows::MaskByPosition`]), instead of loaded as two constants
    /// (which mask, which bias) and applied by a multiply-add.
    pub mask_by_position: bool,
    /// A product visiting its tiles row block by row block computes its
    /// last block of rows in two halves where two steps of half the rows
    /// take the contraction's unit no longer than one of all
    /// ([`Lowerer::halves_cost_nothing`]): the output tiles finishing
    /// together at the end, whose drain and store nothing overlaps, are
    /// half as large.
    pub split_last_rows: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            fuse_attention: true,
            operand_reuse: true,
            stage_runs: true,
            band_runs: true,
            pipeline_tiles: true,
            spread_buffers: true,
            overlap_transfers: true,
            order_search: true,
            spread_transfers: true,
            residency: true,
            broadcast_rows: true,
            vector_gemv: true,
            fuse_rows: true,
            layout_fusion: true,
            column_chunks: true,
            dense_joins: true,
            reader_order: true,
            reverse_priorities: true,
            finish_chains: true,
            skip_masked: true,
            mask_by_position: true,
            split_last_rows: true,
        }
    }
}

/// How many of a product's next-best mappings are tried when the best fails.
const FALLBACK_MAPPINGS: usize = 3;

/// Compiles a graph for machine `m` of target `t` with every optimisation on.
pub fn compile(t: &targets::Target, m: &Machine, g: &Graph) -> Result<Compiled, LowerError> {
    compile_with(t, m, g, Options::default())
}

/// Compiles a graph for machine `m` of target `t` with the optimisations `opts`.
///
/// Keeping values on chip across regions can fail where plain regions
/// succeed (a copy the machine lacks for an on-chip operand of that shape,
/// the buffers not fitting beside the tiles); the graph is then compiled
/// again with the failing node's values at home, or without residency, or
/// without attention fusion, and the notes say so.
pub fn compile_with(
    t: &targets::Target,
    m: &Machine,
    g: &Graph,
    opts: Options,
) -> Result<Compiled, LowerError> {
    compile_mapped(t, m, g, opts, &Mappings::default())
}

/// [`compile_with`], with the mappings of some matrix products given (by
/// node name; see [`mapping`]): a mapping the machine cannot take is an
/// error naming the node and the reason.
pub fn compile_mapped(
    t: &targets::Target,
    m: &Machine,
    g: &Graph,
    opts: Options,
    mappings: &Mappings,
) -> Result<Compiled, LowerError> {
    if let Some(want) = &mappings.target
        && *want != m.name
    {
        return Err(err(format!(
            "the mappings given were chosen for `{want}`, not `{}`",
            m.name
        )));
    }
    let mut opts = opts;
    let mut notes = Vec::new();
    let mut evicted: Vec<String> = Vec::new();
    let mut times = PassTimes::default();
    loop {
        match compile_once(t, m, g, opts, mappings, &evicted, &mut times) {
            Ok(mut c) => {
                c.notes.extend(notes);
                c.passes = times;
                return Ok(c);
            }
            // Keeping values on chip across regions can fail where plain
            // regions succeed (an op whose lowering cannot take an on-chip
            // operand of that shape): compiled again with the values of
            // the node that failed at home, a few times; then without
            // residency, then without attention's on-chip intermediates.
            Err((e, Some(node))) if opts.residency && evicted.len() < MAX_EVICTIONS => {
                notes.push(format!(
                    "the values `{node}` reads and writes are kept at home: on chip, {e}"
                ));
                evicted.push(node);
            }
            Err((e, None))
                if opts.fuse_rows && !rows::row_groups(&canon_for(t, m, g, opts)?).is_empty() =>
            {
                opts.fuse_rows = false;
                notes.push(format!(
                    "layer norms and softmaxes not fused into row regions: {e}"
                ));
            }
            Err((e, _)) if opts.residency => {
                opts.residency = false;
                notes.push(format!("values not kept on chip across regions: {e}"));
            }
            Err((e, _)) if opts.broadcast_rows => {
                opts.broadcast_rows = false;
                notes.push(format!(
                    "row results widened by products instead of broadcast in registers: {e}"
                ));
            }
            Err((e, _))
                if opts.fuse_attention
                    && !fuse::attention(&canon_for(t, m, g, opts)?).is_empty() =>
            {
                opts.fuse_attention = false;
                notes.push(format!("attention not kept on chip: {e}"));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Nodes whose values residency gives up on before it gives up entirely.
const MAX_EVICTIONS: usize = 4;

/// The graph after the rewrites before lowering, for machine `m`.
fn canon_for(
    t: &targets::Target,
    m: &Machine,
    g: &Graph,
    opts: Options,
) -> Result<Graph, LowerError> {
    let info = Info::new(m).map_err(err)?;
    let probe = Emitter::new(m, t.isa(), &info);
    let caps = canon::Caps {
        min_reduction: !reduce::forms(&probe, crate::ir::ReduceKind::Min).is_empty(),
        round: !ops::ew_forms(&probe, Ew::Call(Func::Round)).is_empty(),
        lane_broadcast: opts.broadcast_rows && !ops::lane_broadcast_files(&probe).is_empty(),
        row_chunk: ops::lane_broadcast_files(&probe)
            .first()
            .filter(|_| opts.fuse_rows && opts.broadcast_rows && opts.skip_masked)
            .map(|&f| probe.granule(f).1.max(1) as usize),
        mask_by_position: opts.mask_by_position
            && ops::lane_broadcast_files(&probe)
                .first()
                .is_some_and(|&f| ops::causal_form(&probe, f, (0, 0)).is_some()),
    };
    canon::prepare(g, caps)
}

/// [`compile_mapped`] without its fallbacks, the values of the nodes
/// `evicted` kept at home. A failure in a region that reads or writes a
/// value kept on chip names the region's node.
fn compile_once(
    t: &targets::Target,
    m: &Machine,
    g: &Graph,
    opts: Options,
    mappings: &Mappings,
    evicted: &[String],
    times: &mut PassTimes,
) -> Result<Compiled, (LowerError, Option<String>)> {
    let plain = |e: LowerError| (e, None);
    times.time("verify", || crate::ir::verify(g)).map_err(|e| {
        plain(err(format!(
            "the graph fails the IR verifier: {}",
            e.join("; ")
        )))
    })?;
    let info = Info::new(m).map_err(|e| plain(err(e)))?;
    let prepared = times
        .time("prepare", || canon_for(t, m, g, opts))
        .map_err(plain)?;
    let g = &prepared;
    if let Some(missing) = mappings.mappings.keys().find(|k| {
        !g.nodes
            .iter()
            .any(|n| n.name == **k && matches!(n.op, Op::MatMul))
    }) {
        return Err(plain(err(format!(
            "a mapping is given for `{missing}`, which is not a matrix product of the model (`--emit space` lists them)"
        ))));
    }
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
            plain(err(format!(
                "no instruction loads or stores floating-point tensors of memory `{}`",
                m.memories[home_mem.index()].name
            )))
        })?;
    let build = |unfronted: &[usize], unskipped: &[usize]| {
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
            packed_elem_bytes: HashMap::new(),
            packed_panels: HashMap::new(),
            contractions: Vec::new(),
            relayouts: Default::default(),
            attentions: Vec::new(),
            row_groups: Vec::new(),
            unfront: None,
            skips: Vec::new(),
            unskip: None,
            tile_share: 4,
            group_trials: HashMap::new(),
            dot_transposes: Default::default(),
            transposed: Vec::new(),
            b_transposes: Default::default(),
            lowered_transposes: Default::default(),
            sliced: HashMap::new(),
            head_views: HashMap::new(),
            kept_until: HashMap::new(),
            lowering_node: 0,
            residency_blocked: None,
            evicted: &[],
            region_parts: Vec::new(),
            value_sides: HashMap::new(),
            region_side: Vec::new(),
            region_groups: Vec::new(),
            opts,
            kept_a: None,
            kept_b: HashMap::new(),
            staged_rows: HashMap::new(),
            mappings,
            space: Vec::new(),
            packing: std::time::Duration::ZERO,
        };
        l.e.spread_transfers = opts.spread_transfers;
        if opts.fuse_attention {
            l.attentions = fuse::attention(g)
                .into_iter()
                .map(|a| (a, (0, 0)))
                .collect();
        }
        if opts.fuse_rows && opts.broadcast_rows {
            // Only groups the machine can compute: the others' values are
            // candidates for residency like any.
            l.row_groups = rows::row_groups_with(g, unfronted, ops::can_broadcast_rows(&l.e))
                .into_iter()
                .filter(|r| !l.row_candidates(r).is_empty())
                .collect();
            if opts.skip_masked {
                l.skips = l
                    .row_groups
                    .iter()
                    .filter(|r| !unskipped.contains(&r.seed))
                    .filter_map(|r| {
                        let (file, plan) = l.row_candidates(r).into_iter().next()?;
                        masked::skip(g, r, &plan, file, l.e.granule(file))
                    })
                    .collect();
            }
        }
        l.contractions = ops::contractions(&l.e);
        l.dot_transposes = l.dot_transposes();
        if opts.layout_fusion {
            l.transposed = Lowerer::transposed_products(g);
            l.b_transposes = l.b_transposes();
            l.sliced = l.sliced_transposes();
            l.head_views = l.head_views();
        }
        l.evicted = evicted;
        l
    };
    let started = std::time::Instant::now();
    // A row group that took its producer's element-wise nodes must lower as
    // one region: it is tried (then undone) where its producer is lowered.
    // Where it does not lower, the groups are formed again without that,
    // and the layout made again, so its producer keeps the nodes in its
    // epilogue and residency weighs their values like any others.
    let mut unfronted: Vec<usize> = Vec::new();
    let mut unskipped: Vec<usize> = Vec::new();
    let l = loop {
        let mut l = build(&unfronted, &unskipped);
        let front = (|| {
            l.layout()?;
            l.lower_nodes()?;
            l.merge_attention_regions();
            l.e.finish().map_err(err)
        })();
        match front {
            Ok(()) => break l,
            Err(_) if l.unskip.is_some() => unskipped.extend(l.unskip),
            Err(_) if l.unfront.is_some() => unfronted.extend(l.unfront),
            Err(e) => {
                let blame = l
                    .touches_kept(&e)
                    .then(|| g.nodes[l.lowering_node].name.clone());
                times.add("lower", started.elapsed());
                return Err((e, blame));
            }
        }
    };
    times.add("lower", started.elapsed().saturating_sub(l.packing));
    times.add("pack constants", l.packing);
    l.back_end(t, m, times).map_err(plain)
}

impl Lowerer<'_> {
    fn alloc_home(&mut self, bytes: u64, align: u64) -> u64 {
        let a = align.max(64);
        let at = self.next_addr.next_multiple_of(a);
        // Slack after every tensor: padded tiles may read a little past the end.
        self.next_addr = at + bytes + 4096;
        at
    }

    /// The state a failed lowering attempt goes back to ([`Self::undo`]).
    fn attempt(&self) -> Attempt {
        Attempt {
            cp: self.e.checkpoint(),
            data: self.data.len(),
            packed: self.packed.clone(),
            packed_panels: self.packed_panels.clone(),
        }
    }

    /// Undoes everything emitted, placed and packed since `a` was taken.
    fn undo(&mut self, a: Attempt) {
        self.e.rollback(a.cp);
        self.data.truncate(a.data);
        self.packed = a.packed;
        self.packed_panels = a.packed_panels;
    }

    fn home_mem(&self) -> MemId {
        self.info.home
    }

    /// Fresh bytes at home for a `rows` x `cols` matrix of `dtype`, rows aligned.
    fn new_home(&mut self, rows: i64, cols: i64, dtype: DType) -> Home {
        let pitch = self.home_pitch(cols, dtype);
        let addr = self.alloc_home((rows * pitch) as u64 * dtype.bytes(), 64);
        Home {
            mem: self.info.home,
            base: Base::Fixed(addr),
            dtype,
            rows,
            cols,
            pitch,
            batch: None,
            first: 0,
        }
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
                Op::Cast { .. } => cast_is_view(g, n),
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
                let home = self.padded(&t.data, rows, cols, out_dtype);
                self.homes.insert(v, home);
            }
        }
        // A head view is read where its matrix is: that lives until then.
        let mut lives = alias.clone();
        for (&y, h) in &self.head_views {
            let x = h.matrix;
            for root in lives.values_mut().filter(|r| **r == y) {
                *root = x;
            }
            lives.insert(y, x);
        }
        let mut kept = self.residency(&lives)?;
        // A product writes into its transpose's layout where that is kept
        // on chip, or where its result would not be (a round trip through
        // home saved); not from a result kept on chip to a layout at home
        // (the copy reads on chip, and measured faster than the product's
        // strided stores to home).
        self.transposed
            .retain(|&(t, x)| kept.contains_key(&g.nodes[t].outputs[0]) || !kept.contains_key(&x));
        for &(_, x) in &self.transposed {
            kept.remove(&x);
        }
        for v in order {
            if g.constants.contains_key(&v) || self.homes.contains_key(&v) {
                continue;
            }
            let ty = g.ty(v);
            // Integers live in floating-point containers: exact in f32 up to 2^24.
            let int = !ty.elem.is_float();
            if ty.elem == crate::ir::ElemType::Bool || (int && out_dtype != DType::F32) {
                return Err(err(format!(
                    "value `{}` is {}: only floating-point tensors, and integers where the home memory holds f32, compile today",
                    g.values[v.index()].name,
                    ty.elem.name()
                )));
            }
            let (rows, cols) = view(&ty.shape);
            if let Some(hv) = self.head_views.get(&v)
                && let Some(h) = self.homes.get(&hv.matrix).cloned()
            {
                let heads = ty.shape[ty.shape.len() - 3] as i64;
                self.homes.insert(
                    v,
                    Home {
                        rows,
                        cols,
                        batch: Some((rows / heads.max(1), cols)),
                        first: h.first + hv.first,
                        ..h
                    },
                );
                continue;
            }
            if let Some(root) = alias.get(&v)
                && let Some(h) = self.homes.get(root).cloned()
            {
                // A view aliases its root when its rows are the root's, or
                // the root is dense and the view's rows start aligned too.
                let aligned_rows = rows <= 1
                    || (cols as u64 * h.dtype.bytes()).is_multiple_of(self.info.home_align);
                if cols != h.cols && (h.pitch != h.cols || !aligned_rows) {
                    // The view gets its own bytes and a copy (see `copy::relayout`).
                    self.relayouts.insert(v);
                    let home = self.new_home(rows, cols, h.dtype);
                    self.homes.insert(v, home);
                    continue;
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
            if let Some(&(mem, until)) = kept.get(&v)
                && let Some((tokens, width)) = self.token_rows(v, self.info.pitch_granule.max(1))
            {
                // Rows of tokens, dense: `[S * H, D]` is `[S, H * D]`.
                let t = self
                    .e
                    .shared_buffer(mem, self.act, tokens, width, Pad::Aligned);
                if let Base::Buf(b) = t.base {
                    self.kept_until.insert(b, until);
                }
                if t.pitch == width {
                    self.homes.insert(
                        v,
                        Home {
                            mem,
                            base: t.base,
                            dtype: self.act,
                            rows,
                            cols,
                            pitch: cols,
                            batch: None,
                            first: 0,
                        },
                    );
                    continue;
                }
            }
            if let Some(&(mem, until)) = kept.get(&v) {
                let dtype = self.product_operand_dtype(v, mem).unwrap_or(self.act);
                // A join (a KV cache with its new row) kept in dense rows
                // where transfers take them: the parts from home land in
                // place, with no copy on chip (rows padded to whole
                // registers are not a tile a transfer can write).
                let joined = g
                    .nodes
                    .iter()
                    .any(|n| matches!(n.op, Op::Concat { .. }) && n.outputs.first() == Some(&v));
                // Read transposed by products, whose instructions read
                // operands dense (rows of `N` padded past `K` would be summed).
                let read_transposed = dtype != self.act
                    && g.nodes
                        .iter()
                        .enumerate()
                        .all(|(k, n)| !n.inputs.contains(&v) || self.b_transposes.contains(&k));
                let pad = if read_transposed
                    || (joined
                        && self.opts.dense_joins
                        && (cols as u64 * dtype.bytes()).is_multiple_of(self.info.home_align))
                {
                    Pad::Dense
                } else {
                    Pad::Aligned
                };
                let t = self.e.shared_buffer(mem, dtype, rows, cols, pad);
                if let Base::Buf(b) = t.base {
                    self.kept_until.insert(b, until);
                }
                self.homes.insert(
                    v,
                    Home {
                        mem,
                        base: t.base,
                        dtype,
                        rows,
                        cols,
                        pitch: t.pitch,
                        batch: None,
                        first: 0,
                    },
                );
                continue;
            }
            // A graph output produced through an alias needs its own bytes only if it is not the root.
            let dtype = if int
                || outputs.contains(&v)
                || alias.iter().any(|(a, r)| *r == v && outputs.contains(a))
            {
                out_dtype
            } else {
                self.act
            };
            let home = self.new_home(rows, cols, dtype);
            self.homes.insert(v, home);
        }
        // Products written straight into the layout of their transpose.
        for &(t, x) in &self.transposed {
            let y = g.nodes[t].outputs[0];
            let (Some(hy), shape) = (self.homes.get(&y).cloned(), g.ty(x).shape.clone()) else {
                continue;
            };
            let r = shape.len();
            let (heads, rows) = (shape[r - 3] as i64, shape[r - 2] as i64);
            self.homes.insert(
                x,
                Home {
                    rows: heads * rows,
                    cols: shape[r - 1] as i64,
                    pitch: heads * hy.pitch,
                    batch: Some((rows, hy.pitch)),
                    ..hy
                },
            );
        }
        Ok(())
    }

    /// For the result `y` (`[1, S, H, D]`) of a transpose its product
    /// writes in place ([`Self::transposed_products`]): `(S, H * D)`, where
    /// `H * D` is a multiple of `granule`, so that `y` can be kept on chip
    /// as `S` dense rows of tokens, which its views `[S, H * D]` read.
    fn token_rows(&self, y: ValueId, granule: i64) -> Option<(i64, i64)> {
        let g = self.g;
        self.transposed
            .iter()
            .find(|&&(t, _)| g.nodes[t].outputs[0] == y)?;
        let shape = &g.ty(y).shape;
        let r = shape.len();
        let (tokens, width) = (shape[r - 3] as i64, (shape[r - 2] * shape[r - 1]) as i64);
        (width % granule.max(1) == 0).then_some((tokens, width))
    }

    /// Transposes swapping the last two dimensions of a computed value and
    /// read only as `B` by products of several rows, where some
    /// contraction reads `B` transposed (stored `N` x `K`) from on-chip
    /// memory: those products read the transpose's input instead.
    fn b_transposes(&self) -> std::collections::HashSet<usize> {
        use ops::Role;
        let g = self.g;
        let mut out = std::collections::HashSet::new();
        let takes_bt = self.contractions.iter().any(|c| {
            c.b_dims.len() == 2
                && c.b_dims[0] == Role::N
                && c.locs(&self.e)
                    .is_some_and(|l| l[2].place != Place::Mem(self.info.home))
        });
        if !takes_bt {
            return out;
        }
        for (ti, t) in g.nodes.iter().enumerate() {
            let Op::Transpose { perm } = &t.op else {
                continue;
            };
            let swaps_last_two = transpose::swaps_last_two(perm);
            let y = t.outputs[0];
            if !swaps_last_two
                || g.constants.contains_key(&t.inputs[0])
                || g.outputs.contains(&y)
                || self.dot_transposes.contains(&ti)
            {
                continue;
            }
            // Its readers, through views of the same shape.
            let mut names = vec![y];
            let mut readers: Vec<&crate::ir::Node> = Vec::new();
            let mut k = 0;
            while k < names.len() {
                let v = names[k];
                for n in g.nodes.iter().filter(|n| n.inputs.contains(&v)) {
                    if same_shape_view(n) && !g.outputs.contains(&n.outputs[0]) {
                        names.push(n.outputs[0]);
                    } else {
                        readers.push(n);
                    }
                }
                k += 1;
            }
            let several_rows = |n: &&crate::ir::Node| {
                let sa = &g.ty(n.inputs[0]).shape;
                sa.len() >= 2 && sa[sa.len() - 2] > 1
            };
            if !readers.is_empty()
                && readers.iter().all(|n| {
                    matches!(n.op, Op::MatMul)
                        && names.contains(&n.inputs[1])
                        && !names.contains(&n.inputs[0])
                        && several_rows(n)
                })
            {
                out.insert(ti);
            }
        }
        out
    }

    /// Slices of the last dimension only (step 1), maybe split by a
    /// reshape into rows of `w` (heads), whose one reader is a transpose
    /// keeping the last dimension that is lowered as a copy of rows (not
    /// left to the products reading it): the transpose reads the slice's
    /// input as rows of `w`, so the columns are copied once, not twice
    /// (attention's split of the projection's result into q, k and v, each
    /// then into heads).
    fn sliced_transposes(&self) -> HashMap<ValueId, Sliced> {
        let g = self.g;
        let readers = |v: ValueId| -> Vec<usize> {
            (0..g.nodes.len())
                .filter(|&k| g.nodes[k].inputs.contains(&v))
                .collect()
        };
        let mut out = HashMap::new();
        for (si, n) in g.nodes.iter().enumerate() {
            let Op::Slice { starts, steps, .. } = &n.op else {
                continue;
            };
            let (x, y) = (n.inputs[0], n.outputs[0]);
            let (xs, ys) = (&g.ty(x).shape, &g.ty(y).shape);
            let r = xs.len();
            if r == 0
                || xs[..r - 1] != ys[..r - 1]
                || steps.iter().any(|&s| s != 1)
                || g.outputs.contains(&y)
                || g.constants.contains_key(&x)
            {
                continue;
            }
            let (width, sw) = (xs[r - 1] as i64, ys[r - 1] as i64);
            let mut nodes = vec![si];
            let (mut v, mut w) = (y, sw);
            // A reshape splitting the last dimension into pieces of `w`.
            if let [k] = readers(y).as_slice()
                && matches!(g.nodes[*k].op, Op::Reshape { .. })
            {
                let o = g.nodes[*k].outputs[0];
                let os = &g.ty(o).shape;
                let pw = *os.last().unwrap_or(&0) as i64;
                let split = os.len() == r + 1
                    && os[..r - 1] == ys[..r - 1]
                    && pw > 0
                    && os[r - 1] as i64 * pw == sw;
                if !split || g.outputs.contains(&o) {
                    continue;
                }
                nodes.push(*k);
                (v, w) = (o, pw);
            }
            let after = readers(v);
            let [t] = after.as_slice() else {
                continue;
            };
            let rank = g.ty(v).shape.len();
            let moves_rows = matches!(&g.nodes[*t].op,
                Op::Transpose { perm } if perm.last() == Some(&(rank - 1))
                    && perm.iter().enumerate().any(|(i, p)| i != *p));
            let skipped = self.dot_transposes.contains(t)
                || self.b_transposes.contains(t)
                || self.transposed.iter().any(|&(k, _)| k == *t);
            let c0 = starts[r - 1];
            if moves_rows && !skipped && w > 0 && sw > 0 && width % w == 0 && c0 % w == 0 {
                out.insert(
                    v,
                    Sliced {
                        input: x,
                        nodes,
                        first: c0 / w,
                        pieces: sw / w,
                        per_row: width / w,
                    },
                );
            }
        }
        out
    }

    /// Transposes of [`Self::sliced_transposes`] that split a slice of a
    /// computed matrix `[S, W]` into heads (`[1, S, H, D]` to `[1, H, S,
    /// D]`), read only as `A` by products of several rows, where every
    /// contraction takes `A` strided from memory or loads it into
    /// registers: not lowered. The
    /// heads are read where the matrix holds them, head `h` as `S` rows of
    /// `D` columns from column `first + h * D`, each the matrix's pitch
    /// apart ([`Home::batch`]): attention's queries cost no copy. By the
    /// transpose's result.
    fn head_views(&self) -> HashMap<ValueId, HeadView> {
        let g = self.g;
        let m = self.e.m;
        // Every contraction takes `A` strided from memory, or loads it into
        // registers: a head's rows, a row of the matrix apart, read as they are.
        let a_in_place = self.contractions.iter().all(|c| {
            matches!(
                &m.instructions[c.inst.index()].operands[c.a].kind,
                OperandKind::Mem {
                    stride: Some(_),
                    ..
                } | OperandKind::Reg { .. }
            )
        });
        let mut out = HashMap::new();
        for (v, sl) in &self.sliced {
            let readers: Vec<usize> = (0..g.nodes.len())
                .filter(|&k| g.nodes[k].inputs.contains(v))
                .collect();
            let [t] = readers.as_slice() else {
                continue;
            };
            let Op::Transpose { perm } = &g.nodes[*t].op else {
                continue;
            };
            let y = g.nodes[*t].outputs[0];
            let shape = &g.ty(y).shape;
            let r = perm.len();
            let splits = swaps_before_last(perm) && shape[..r - 3].iter().product::<usize>() == 1;
            // Read as `A`, which the contractions take strided: no copy at
            // all. Read as `B` (dense), each product would copy its heads
            // where it runs; the transpose copies them once instead.
            let as_a = (0..g.nodes.len())
                .filter(|&k| g.nodes[k].inputs.contains(&y))
                .all(|k| {
                    let n = &g.nodes[k];
                    matches!(n.op, Op::MatMul) && n.inputs[0] == y && n.inputs.get(1) != Some(&y)
                });
            if splits
                && as_a
                && a_in_place
                && self.read_by_products(y)
                && !g.inputs.contains(&sl.input)
                && shape[r - 2] > 1
            {
                let w = shape[r - 1] as i64;
                out.insert(
                    y,
                    HeadView {
                        matrix: sl.input,
                        first: sl.first * w,
                    },
                );
            }
        }
        out
    }

    /// Whether only products of several rows read `y`, as `A` or `B`, or as
    /// `B` through a transpose of [`Self::b_transposes`].
    fn read_by_products(&self, y: ValueId) -> bool {
        let g = self.g;
        let several_rows = |n: &crate::ir::Node| {
            let sa = &g.ty(n.inputs[0]).shape;
            sa.len() >= 2 && sa[sa.len() - 2] > 1
        };
        let mut readers = (0..g.nodes.len())
            .filter(|&k| g.nodes[k].inputs.contains(&y))
            .peekable();
        readers.peek().is_some()
            && !g.outputs.contains(&y)
            && readers.all(|k| {
                let n = &g.nodes[k];
                (matches!(n.op, Op::MatMul) && several_rows(n)) || self.b_transposes.contains(&k)
            })
    }

    /// The transpose in [`Self::b_transposes`] (not lowered after all) that
    /// makes `b`, through views of the same shape.
    fn b_transpose_of(&self, b: ValueId) -> Option<usize> {
        let g = self.g;
        let mut v = b;
        loop {
            let p = g.nodes.iter().position(|x| x.outputs.first() == Some(&v))?;
            if self.b_transposes.contains(&p) {
                return (!self.lowered_transposes.contains(&p)).then_some(p);
            }
            if !same_shape_view(&g.nodes[p]) {
                return None;
            }
            v = g.nodes[p].inputs[0];
        }
    }

    /// Products whose result only a transpose swapping the two dimensions
    /// before the last reads (`[1, H, S, D]` to `[1, S, H, D]`: attention's
    /// context back to rows of tokens): the product writes its result
    /// straight into the transpose's layout (a home in batches of `S` rows,
    /// [`Home::batch`]) and the transpose is not lowered. `(transpose node,
    /// product result)`.
    fn transposed_products(g: &Graph) -> Vec<(usize, ValueId)> {
        let mut out = Vec::new();
        for (ti, t) in g.nodes.iter().enumerate() {
            let Op::Transpose { perm } = &t.op else {
                continue;
            };
            let r = perm.len();
            let swaps = swaps_before_last(perm);
            let x = t.inputs[0];
            let shape = &g.ty(x).shape;
            let product = g
                .nodes
                .iter()
                .any(|n| matches!(n.op, Op::MatMul) && n.outputs.first() == Some(&x));
            let only_reader = g.nodes.iter().filter(|n| n.inputs.contains(&x)).count() == 1;
            if swaps
                && product
                && only_reader
                && !g.outputs.contains(&x)
                && shape[..r - 3].iter().product::<usize>() == 1
            {
                out.push((ti, x));
            }
        }
        out
    }

    /// The type the matrix products reading `v` want their operands in (in
    /// memory `mem`), where `v` is made by a node that can write it in that
    /// type at no cost (a row group, or a transpose keeping the last
    /// dimension: a copy through the registers either way) and only
    /// products of several rows read it, as `A` or as `B` (or as `B`
    /// through a transpose of [`Self::b_transposes`]): written so, it
    /// needs no conversion pass before each product. So too a matrix read
    /// only through its splits into heads (attention's projection: its
    /// epilogue stores it in that type, for the head views read in place
    /// and the splits copied alike). None otherwise, or where that is the
    /// activation type.
    fn product_operand_dtype(&self, v: ValueId, mem: MemId) -> Option<DType> {
        let g = self.g;
        if !self.opts.layout_fusion {
            return None;
        }
        let want = |operand: usize| {
            self.contractions
                .iter()
                .filter_map(|c| c.locs(&self.e))
                .map(|l| l[operand])
                .find(|a| a.place == Place::Mem(mem) && a.dtype.is_float())
                .map(|a| a.dtype)
        };
        if g.outputs.contains(&v) {
            return None;
        }
        // A matrix read only through splits into heads that products read.
        let readers: Vec<&crate::ir::Node> =
            g.nodes.iter().filter(|n| n.inputs.contains(&v)).collect();
        let split_for_products = |n: &&crate::ir::Node| {
            self.sliced.iter().any(|(w, sl)| {
                sl.input == v
                    && sl
                        .nodes
                        .first()
                        .is_some_and(|&k| g.nodes[k].outputs[0] == n.outputs[0])
                    && g.nodes.iter().enumerate().any(|(t, tn)| {
                        tn.inputs.first() == Some(w)
                            && matches!(tn.op, Op::Transpose { .. })
                            && self.read_by_products(g.nodes[t].outputs[0])
                    })
            })
        };
        if !readers.is_empty() && readers.iter().all(split_for_products) {
            let (a, b) = (want(1)?, want(2)?);
            return (a == b && a != self.act).then_some(a);
        }
        let made_by_copy = g.nodes.iter().any(|n| {
            n.outputs.first() == Some(&v)
                && matches!(&n.op, Op::Transpose { perm } if perm.last() == Some(&(perm.len() - 1)))
        });
        if !(made_by_copy || self.row_groups.iter().any(|r| r.output == v)) {
            return None;
        }
        let shape = &g.ty(v).shape;
        let several_rows = shape.len() >= 2 && shape[shape.len() - 2] > 1;
        let readers: Vec<&crate::ir::Node> =
            g.nodes.iter().filter(|n| n.inputs.contains(&v)).collect();
        let as_a = |n: &&crate::ir::Node| {
            matches!(n.op, Op::MatMul) && n.inputs[0] == v && n.inputs[1] != v
        };
        if readers.is_empty() || !several_rows || !self.read_by_products(v) {
            return None;
        }
        let operand = if readers.iter().all(as_a) {
            1
        } else if readers.iter().all(|n| !as_a(n)) {
            2
        } else {
            return None;
        };
        let want = want(operand)?;
        (want != self.act).then_some(want)
    }

    /// The values kept on chip, where, and the last node reading each
    /// (through its views).
    ///
    /// Candidates are the values made by one node and read by later ones
    /// that are neither graph outputs nor views: with
    /// [`Options::residency`], every value passed between regions; without
    /// it, only the intermediates of each recognised attention (fused
    /// regions), in program order. Each lives from its producer to its last reader; a candidate is kept
    /// when, at every node it is live across, the values kept come to at
    /// most 9/16 of the memory tiles from home land in (the rest is the
    /// tiles'; measured in `docs/compiler.md`). Among the others, values with the shortest lives and
    /// the most readers per byte go first: those save the most home
    /// traffic per byte of on-chip memory held. The rest live at home
    /// (evicted for their whole life, not spilled part-way).
    fn residency(
        &mut self,
        alias: &HashMap<ValueId, ValueId>,
    ) -> Result<HashMap<ValueId, (MemId, usize)>, LowerError> {
        let mut kept = HashMap::new();
        if self.attentions.is_empty() && !self.opts.residency {
            return Ok(kept);
        }
        let land = self.landing_of(self.act)?;
        // Results are written into a kept value's buffer from that memory:
        // through registers and back, writing just the tile.
        let (mem, cap) = match land.place {
            Place::Mem(mem) if self.info.round_trip(land).is_some() => {
                (mem, self.e.m.memories[mem.index()].size.value.max(0) as u64)
            }
            _ => {
                self.residency_blocked = Some(format!(
                    "no instruction sequence writes a tile of {} into a buffer of {} (through registers and back)",
                    land.dtype.name(),
                    self.e.place_name(land.place)
                ));
                (self.home_mem(), 0)
            }
        };
        let g = self.g;
        // As `Pad::Aligned` lays them out.
        let per = (self.info.mem_align[mem.index()] / self.act.bytes()).max(1) as i64;
        let granule = machine::lcm(self.info.pitch_granule.max(1), per);
        let row_granule = self.info.row_granule.max(1);
        let act = self.act;
        // In the type it is kept in where products read it so.
        let bytes = |v: ValueId| {
            let (r, c) = view(&g.ty(v).shape);
            let dt = self.product_operand_dtype(v, mem).unwrap_or(act);
            (machine::rup(r, row_granule) * machine::rup(c, granule)) as u64 * dt.bytes()
        };
        // Lifetimes over node positions, views reading for their roots.
        let mut made: HashMap<ValueId, usize> = HashMap::new();
        let mut last: HashMap<ValueId, usize> = HashMap::new();
        let mut readers: HashMap<ValueId, usize> = HashMap::new();
        for (k, n) in g.nodes.iter().enumerate() {
            // Im2Col's padding is written as data at load time: at home.
            if matches!(n.op, Op::Im2Col { .. }) {
                continue;
            }
            for &o in &n.outputs {
                made.insert(o, k);
            }
            for i in &n.inputs {
                // A slice its transpose reads through is read as its input.
                let i = self.sliced.get(i).map_or(i, |s| &s.input);
                let root = *alias.get(i).unwrap_or(i);
                last.insert(root, k);
                *readers.entry(root).or_default() += 1;
            }
        }
        let out_root = |v: ValueId| {
            g.outputs.contains(&v) || alias.iter().any(|(a, r)| *r == v && g.outputs.contains(a))
        };
        // A view with other columns than a padded root would need a copy;
        // but a transpose's result written by its product in place is laid
        // out as its rows of tokens ([`Self::token_rows`]), and a head view
        // reads its matrix's rows as they are.
        let mut excluded: std::collections::HashSet<ValueId> = alias
            .iter()
            .filter(|(a, r)| {
                let c = view(&g.ty(**r).shape).1;
                !self.head_views.contains_key(*a)
                    && view(&g.ty(**a).shape).1 != c
                    && machine::rup(c, granule) != c
                    && self.token_rows(**r, granule).is_none()
            })
            .map(|(_, r)| *r)
            .collect();
        for n in g.nodes.iter().filter(|n| self.evicted.contains(&n.name)) {
            for v in n.inputs.iter().chain(&n.outputs) {
                excluded.insert(*alias.get(v).unwrap_or(v));
            }
        }
        // Values inside a row group live in registers.
        let in_rows: std::collections::HashSet<ValueId> = self
            .row_groups
            .iter()
            .flat_map(|r| r.inner(g))
            .chain(self.dot_transposes.iter().map(|&t| g.nodes[t].outputs[0]))
            .chain(self.b_transposes.iter().map(|&t| g.nodes[t].outputs[0]))
            .chain(self.sliced.values().map(|s| g.nodes[s.nodes[0]].outputs[0]))
            .collect();
        let in_epilogue = self.fused_into_epilogues(alias);
        let candidate = |v: ValueId| {
            !excluded.contains(&v)
                && !in_rows.contains(&v)
                && !in_epilogue.contains(&v)
                && made.contains_key(&v)
                && last.contains_key(&v)
                && !alias.contains_key(&v)
                && !g.constants.contains_key(&v)
                && !out_root(v)
                && g.ty(v).elem.is_float()
        };
        let budget = cap * 9 / 16;
        let mut load = vec![0u64; g.nodes.len() + 1];
        let mut try_keep = |v: ValueId, kept: &mut HashMap<ValueId, (MemId, usize)>| -> bool {
            if kept.contains_key(&v) {
                return true;
            }
            let (a, b) = (made[&v], last[&v]);
            let size = bytes(v);
            if budget == 0 || load[a..=b].iter().any(|&x| x + size > budget) {
                return false;
            }
            for x in &mut load[a..=b] {
                *x += size;
            }
            kept.insert(v, (mem, b));
            true
        };
        // Without residency, attention's intermediates are the only
        // candidates; with it, they compete with the others on the same
        // terms (first-come kept the large scores of a long sequence and
        // left no room for values that save more traffic per byte).
        if !self.opts.residency {
            for (a, _) in &self.attentions {
                for v in a.inner.iter().copied().filter(|v| candidate(*v)) {
                    try_keep(v, &mut kept);
                }
            }
        }
        if self.opts.residency {
            let mut rest: Vec<ValueId> = made
                .keys()
                .copied()
                .filter(|v| candidate(*v) && !kept.contains_key(v))
                .collect();
            // Most readers per byte-node held first; then program order.
            let score = |v: &ValueId| {
                let span = (last[v] - made[v] + 1) as f64;
                readers[v] as f64 / (span * bytes(*v).max(1) as f64)
            };
            rest.sort_by(|x, y| {
                score(y)
                    .total_cmp(&score(x))
                    .then(made[x].cmp(&made[y]))
                    .then(x.index().cmp(&y.index()))
            });
            for v in rest {
                try_keep(v, &mut kept);
            }
        }
        for (a, keep) in &mut self.attentions {
            let own = a.inner.iter().filter(|v| candidate(**v));
            let n = own.clone().filter(|v| kept.contains_key(*v)).count();
            *keep = (n, own.count());
        }
        Ok(kept)
    }

    /// Whether element-wise node `m`, reading `last` (read `uses` times in
    /// the graph), joins the epilogue that makes `last`: `last` is read
    /// there alone, once, and is no graph output; `m` keeps the region's
    /// `shape`; its other operands are `ready` before the region starts.
    fn extends_epilogue(
        g: &Graph,
        m: &crate::ir::Node,
        last: ValueId,
        uses: usize,
        shape: &[usize],
        ready: impl Fn(&ValueId) -> bool,
    ) -> bool {
        Self::ew_of(&m.op).is_some()
            && uses == 1
            && !g.outputs.contains(&last)
            && g.ty(m.outputs[0]).shape == shape
            && m.inputs.iter().filter(|i| **i == last).count() == 1
            && m.inputs.iter().all(|i| *i == last || ready(i))
    }

    /// Values that never reach memory because the region lowering makes
    /// (`lower_nodes`) computes them in a product's or an element-wise
    /// node's epilogue, in registers: made by a product or an element-wise
    /// node, read once, by an element-wise node of the same shape outside
    /// any row group whose other operands are constants or graph inputs.
    /// (The lowering also fuses nodes whose other operands were computed
    /// earlier; those are left out here, so the values it keeps for them
    /// are at worst kept in vain, as before.) Keeping them on chip would
    /// hold memory for nothing.
    fn fused_into_epilogues(
        &self,
        alias: &HashMap<ValueId, ValueId>,
    ) -> std::collections::HashSet<ValueId> {
        let g = self.g;
        let mut readers: HashMap<ValueId, Vec<usize>> = HashMap::new();
        for (k, n) in g.nodes.iter().enumerate() {
            for &i in &n.inputs {
                readers.entry(i).or_default().push(k);
            }
        }
        let in_rows: std::collections::HashSet<usize> = self
            .row_groups
            .iter()
            .flat_map(|r| r.nodes.iter().copied())
            .collect();
        let aliased: std::collections::HashSet<ValueId> = alias.values().copied().collect();
        g.nodes
            .iter()
            .enumerate()
            .filter(|(k, n)| {
                !in_rows.contains(k) && (matches!(n.op, Op::MatMul) || Self::ew_of(&n.op).is_some())
            })
            .filter_map(|(_, n)| {
                let v = *n.outputs.first()?;
                let [c] = readers.get(&v)?.as_slice() else {
                    return None;
                };
                let ready = |i: &ValueId| g.constants.contains_key(i) || g.inputs.contains(i);
                let fused = !in_rows.contains(c)
                    && !aliased.contains(&v)
                    && !alias.contains_key(&v)
                    && Self::extends_epilogue(g, &g.nodes[*c], v, 1, &g.ty(v).shape, ready);
                fused.then_some(v)
            })
            .collect()
    }

    /// Whether the node being lowered, or the one error `e` names, reads or
    /// writes a value kept on chip.
    fn touches_kept(&self, e: &LowerError) -> bool {
        let g = self.g;
        let named = e
            .node
            .as_ref()
            .and_then(|name| g.nodes.iter().find(|n| n.name == *name));
        let on_chip = |v: &ValueId| {
            self.homes
                .get(v)
                .is_some_and(|h| matches!(h.base, Base::Buf(_)))
        };
        g.nodes
            .get(self.lowering_node)
            .into_iter()
            .chain(named)
            .any(|n| n.inputs.iter().chain(&n.outputs).any(on_chip))
    }

    /// Records a region of nodes `members` (the first started it) and its
    /// instruction count; values it wrote on chip are complete before the
    /// next region reads them.
    fn push_region(
        &mut self,
        members: &[usize],
        region: (String, usize),
    ) -> Result<(), LowerError> {
        let end = self.e.code.len();
        self.region_parts
            .push((members.to_vec(), (end - region.1, end)));
        if let Some(side) = self.e.side {
            for &k in members {
                for &v in &self.g.nodes[k].outputs {
                    self.value_sides.insert(v, (self.regions.len(), side));
                }
            }
        }
        self.region_side.push(self.e.side);
        self.regions.push(region);
        let shared: Vec<usize> = (0..self.e.bufs.len())
            .filter(|&b| self.e.bufs[b].shared && self.e.bufs[b].used())
            .collect();
        for b in shared {
            self.e.settle_buffer(b).map_err(err)?;
        }
        Ok(())
    }

    /// Merges the regions of each attention into one, named after it.
    fn merge_attention_regions(&mut self) {
        let g = self.g;
        let mut merged: Vec<(String, usize)> = Vec::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut at: HashMap<usize, usize> = HashMap::new();
        for (k, (name, n)) in std::mem::take(&mut self.regions).into_iter().enumerate() {
            let root = self
                .region_parts
                .get(k)
                .and_then(|(ms, _)| ms.first().copied());
            let which = root.and_then(|r| {
                self.attentions
                    .iter()
                    .position(|(a, _)| a.nodes.contains(&r))
            });
            match which.map(|w| (w, at.get(&w).copied())) {
                Some((_, Some(i))) => {
                    merged[i].0.push_str(&format!(" | {name}"));
                    merged[i].1 += n;
                    groups[i].push(k);
                }
                Some((w, None)) => {
                    let (a, (kept, of)) = &self.attentions[w];
                    let head = format!(
                        "Attention({} .. {}, {}): {name}",
                        g.nodes[a.scores].name,
                        g.nodes[a.context].name,
                        if let Some(why) = &self.residency_blocked {
                            format!("intermediates at home: {why}")
                        } else if kept == of {
                            "intermediates on chip".to_owned()
                        } else if *kept == 0 {
                            "intermediates at home: they do not fit on chip".to_owned()
                        } else {
                            format!(
                                "{kept} of {of} intermediates on chip, the others at home: they do not fit on chip together"
                            )
                        }
                    );
                    at.insert(w, merged.len());
                    merged.push((head, n));
                    groups.push(vec![k]);
                }
                None => {
                    merged.push((name, n));
                    groups.push(vec![k]);
                }
            }
        }
        self.regions = merged;
        self.region_groups = groups;
    }

    /// Per region: its work, its least home traffic, and its bundles, given
    /// the bundle each instruction went to.
    fn region_stats(
        &self,
        placed: &[usize],
        latency: &[u64],
        n_bundles: usize,
    ) -> Vec<RegionStats> {
        let g = self.g;
        // First bundle of each part; a part runs to the next part's first bundle.
        // Parts whose first bundles coincide (the scheduler mixed them): the
        // first in program order takes the span.
        let mut taken = std::collections::HashSet::new();
        let starts: Vec<Option<usize>> = self
            .region_parts
            .iter()
            .map(|(_, (a, b))| {
                placed
                    .get(*a..*b)
                    .and_then(|p| p.iter().min().copied())
                    .filter(|s| taken.insert(*s))
            })
            .collect();
        let mut sorted: Vec<usize> = starts.iter().flatten().copied().collect();
        sorted.sort_unstable();
        sorted.dedup();
        let end_of = |s: usize| {
            sorted
                .iter()
                .find(|&&x| x > s)
                .copied()
                .unwrap_or(n_bundles)
        };
        let bytes = |v: ValueId| -> u64 {
            if let Some(t) = g.constants.get(&v) {
                return t.ty.numel() as u64 * self.act.bytes();
            }
            match self.homes.get(&v) {
                Some(h) if matches!(h.base, Base::Fixed(_)) => {
                    g.ty(v).numel() as u64 * h.dtype.bytes()
                }
                _ => 0,
            }
        };
        self.region_groups
            .iter()
            .map(|parts| {
                let members: std::collections::HashSet<usize> = parts
                    .iter()
                    .flat_map(|&k| self.region_parts[k].0.iter().copied())
                    .collect();
                let made: std::collections::HashSet<ValueId> = members
                    .iter()
                    .flat_map(|&k| g.nodes[k].outputs.iter().copied())
                    .collect();
                let mut inputs: Vec<ValueId> = members
                    .iter()
                    .flat_map(|&k| g.nodes[k].inputs.iter().copied())
                    .filter(|v| !made.contains(v))
                    .collect();
                inputs.sort_unstable_by_key(|v| v.index());
                inputs.dedup();
                let used_outside = |v: &ValueId| {
                    g.outputs.contains(v)
                        || g.nodes
                            .iter()
                            .enumerate()
                            .any(|(k, n)| !members.contains(&k) && n.inputs.contains(v))
                };
                let outputs: Vec<ValueId> = made.iter().copied().filter(used_outside).collect();
                let macs = members.iter().map(|&k| node_macs(g, &g.nodes[k])).sum();
                let insts = || {
                    parts.iter().flat_map(|&k| {
                        let (a, b) = self.region_parts[k].1;
                        a.min(placed.len())..b.min(placed.len())
                    })
                };
                let span = insts()
                    .map(|i| placed[i])
                    .fold(None, |s: Option<(usize, usize)>, b| {
                        Some(s.map_or((b, b), |(lo, hi)| (lo.min(b), hi.max(b))))
                    });
                let late = span.map_or_else(Vec::new, |(_, last)| {
                    insts()
                        .filter(|&i| latency[i] > (last - placed[i]) as u64)
                        .map(|i| (placed[i], latency[i]))
                        .collect()
                });
                // An input only sliced in the region is read only in part.
                let read = |v: ValueId| {
                    let full = bytes(v);
                    let numel = g.ty(v).numel() as u64;
                    let slices: Option<u64> = members
                        .iter()
                        .map(|&k| &g.nodes[k])
                        .filter(|n| n.inputs.contains(&v))
                        .map(|n| {
                            matches!(n.op, Op::Slice { .. })
                                .then(|| g.ty(n.outputs[0]).numel() as u64)
                        })
                        .sum();
                    match slices {
                        Some(e) if numel > 0 => full.min(full / numel * e),
                        _ => full,
                    }
                };
                RegionStats {
                    macs,
                    home_bytes: inputs
                        .into_iter()
                        .map(read)
                        .chain(outputs.into_iter().map(bytes))
                        .sum(),
                    bundles: parts
                        .iter()
                        .filter_map(|&k| starts[k].map(|s| (s, end_of(s))))
                        .collect(),
                    span,
                    late,
                }
            })
            .collect()
    }

    /// `e`, naming node `n` unless it names one already.
    fn at_node(n: &crate::ir::Node, e: LowerError) -> LowerError {
        if e.node.is_some() {
            e
        } else {
            Self::node_err(n, e.message)
        }
    }

    fn node_err(n: &crate::ir::Node, message: impl Into<String>) -> LowerError {
        LowerError {
            node: Some(n.name.clone()),
            op: Some(n.op.name().to_owned()),
            message: message.into(),
        }
    }

    fn ew_of(op: &Op) -> Option<Ew> {
        use crate::ir::Unary;
        use isa_specs::model::Func;
        Some(match op {
            Op::Add => Ew::Add,
            Op::Sub => Ew::Sub,
            Op::Mul => Ew::Mul,
            Op::Div => Ew::Div,
            Op::Max => Ew::Max,
            Op::Min => Ew::Min,
            Op::Relu => Ew::Relu,
            Op::Unary(u) => match u {
                Unary::Exp => Ew::Call(Func::Exp),
                Unary::Log => Ew::Call(Func::Log),
                Unary::Tanh => Ew::Call(Func::Tanh),
                Unary::Erf => Ew::Call(Func::Erf),
                Unary::Sqrt => Ew::Call(Func::Sqrt),
                Unary::Reciprocal => Ew::Recip,
                Unary::Neg => Ew::Neg,
                Unary::Abs => Ew::Call(Func::Abs),
                Unary::Sigmoid => Ew::Call(Func::Sigmoid),
                Unary::Round => Ew::Call(Func::Round),
            },
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
        let producers: HashMap<ValueId, usize> = g
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(k, n)| n.outputs.iter().map(move |&v| (v, k)))
            .collect();
        for ni in 0..g.nodes.len() {
            if done[ni] {
                continue;
            }
            let n = &g.nodes[ni];
            done[ni] = true;
            self.lowering_node = ni;
            if self.opts.pipeline_tiles {
                self.e.side = self.side_for(ni, &producers);
            }
            if g.constants.contains_key(&n.outputs[0]) {
                continue;
            }
            if let Some(grp) = self.row_groups.iter().find(|r| r.nodes[0] == ni).cloned() {
                let before = self.e.code.len();
                if self.row_group(&grp)? {
                    for &k in &grp.nodes {
                        done[k] = true;
                    }
                    let names: Vec<String> = grp
                        .nodes
                        .iter()
                        .map(|&k| format!("{}({})", g.nodes[k].op.name(), g.nodes[k].name))
                        .collect();
                    self.push_region(
                        &grp.nodes,
                        (
                            format!("Rows: {}", names.join(" -> ")),
                            self.e.code.len() - before,
                        ),
                    )?;
                    continue;
                }
            }
            match &n.op {
                // A slice's reshape its transpose reads through.
                Op::Reshape { .. } if self.sliced.values().any(|s| s.nodes.contains(&ni)) => {
                    continue;
                }
                Op::Reshape { .. } | Op::Identity => {
                    if g.constants.contains_key(&n.inputs[0]) {
                        return Err(Self::node_err(n, "a view of a constant was not folded"));
                    }
                    if self.relayouts.contains(&n.outputs[0]) {
                        let before = self.e.code.len();
                        self.relayout(n).map_err(|e| Self::at_node(n, e))?;
                        self.push_region(
                            &[ni],
                            (format!("Relayout({})", n.name), self.e.code.len() - before),
                        )?;
                    }
                    continue;
                }
                Op::Cast { .. } if cast_is_view(g, n) => continue,
                Op::Cast { to } => {
                    let from = g.ty(n.inputs[0]).elem;
                    return Err(Self::node_err(
                        n,
                        format!(
                            "Cast from {} to {} is not supported by the lowering yet (integers are held in f32: casts that keep the values compile)",
                            from.name(),
                            to.name()
                        ),
                    ));
                }
                Op::Div if !g.ty(n.outputs[0]).elem.is_float() => {
                    return Err(Self::node_err(n, "integer division is not supported yet"));
                }
                Op::Transpose { perm } if perm.iter().enumerate().all(|(i, p)| i == *p) => continue,
                // Its transpose reads its input.
                Op::Slice { .. } if self.sliced.values().any(|s| s.nodes.contains(&ni)) => {
                    continue;
                }
                Op::Slice { starts, steps, .. } => {
                    let before = self.e.code.len();
                    self.slice(n, starts, steps)
                        .map_err(|e| Self::at_node(n, e))?;
                    self.push_region(
                        &[ni],
                        (format!("Slice({})", n.name), self.e.code.len() - before),
                    )?;
                    continue;
                }
                Op::Im2Col { window, fill } => {
                    let before = self.e.code.len();
                    self.im2col(n, window, *fill)
                        .map_err(|e| Self::at_node(n, e))?;
                    self.push_region(
                        &[ni],
                        (format!("Im2Col({})", n.name), self.e.code.len() - before),
                    )?;
                    continue;
                }
                Op::Concat { axis } => {
                    let before = self.e.code.len();
                    self.concat(n, *axis).map_err(|e| Self::at_node(n, e))?;
                    self.push_region(
                        &[ni],
                        (format!("Concat({})", n.name), self.e.code.len() - before),
                    )?;
                    continue;
                }
                Op::Reduce { kind, axes, .. } => {
                    let before = self.e.code.len();
                    self.reduce(n, *kind, axes)
                        .map_err(|e| Self::at_node(n, e))?;
                    self.push_region(
                        &[ni],
                        (
                            format!("{}({})", n.op.name(), n.name),
                            self.e.code.len() - before,
                        ),
                    )?;
                    continue;
                }
                // Read untransposed by its one-row products (or lowered there).
                Op::Transpose { .. } if self.dot_transposes.contains(&ni) => continue,
                Op::Transpose { .. } if self.b_transposes.contains(&ni) => continue,
                // Its product wrote its result in place.
                Op::Transpose { .. } if self.transposed.iter().any(|&(t, _)| t == ni) => continue,
                // Its readers read its input's heads in place.
                Op::Transpose { .. } if self.head_views.contains_key(&n.outputs[0]) => continue,
                Op::Transpose { perm } => {
                    let before = self.e.code.len();
                    self.transpose(n, perm).map_err(|e| Self::at_node(n, e))?;
                    self.push_region(
                        &[ni],
                        (format!("Transpose({})", n.name), self.e.code.len() - before),
                    )?;
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
                let ready = |i: &ValueId| {
                    g.constants.contains_key(i)
                        || g.inputs.contains(i)
                        || g.nodes[..ni].iter().any(|p| p.outputs.contains(i))
                };
                let read = uses.get(&last).copied().unwrap_or(0);
                // A row group that took this node from its producer computes
                // it (see `rows`), if the group lowers as one region (else
                // the compile starts again without the group taking it).
                if let Some(gi) = self
                    .row_groups
                    .iter()
                    .position(|r| r.nodes[0] != r.seed && r.nodes.contains(&nj))
                {
                    if !self.group_lowers(gi)? {
                        self.unfront = Some(self.row_groups[gi].seed);
                        return Err(err("a row group does not lower with its producer's nodes"));
                    }
                    break;
                }
                if !Self::extends_epilogue(g, m, last, read, &out_shape, ready) {
                    break;
                }
                members.push(nj);
                done[nj] = true;
                last = m.outputs[0];
            }
            let before = self.e.code.len();
            // Element-wise regions read their producer's result chunk by
            // chunk: a half would only turn their registers over faster.
            if !matches!(n.op, Op::MatMul) {
                self.e.side = None;
            }
            self.region(&members).map_err(|e| {
                if e.node.is_some() {
                    return e;
                }
                // A missing operation is blamed on the node that needs it.
                let needs = |k: &usize| {
                    Self::ew_of(&g.nodes[*k].op)
                        .is_some_and(|ew| e.message.contains(&format!("lacks `{}`", ew.text())))
                };
                let k = members.iter().find(|k| needs(k)).unwrap_or(&members[0]);
                Self::node_err(&g.nodes[*k], e.message)
            })?;
            let names: Vec<String> = members
                .iter()
                .map(|&k| format!("{}({})", g.nodes[k].op.name(), g.nodes[k].name))
                .collect();
            self.push_region(&members, (names.join(" -> "), self.e.code.len() - before))?;
        }
        Ok(())
    }

    /// The half of the register files a region starting at node `n`
    /// prefers: the other half than the latest region producing its inputs
    /// (through views), so its first instructions need not wait for the
    /// registers that region's last ones read, and the scheduler may move
    /// it up beside that region (a transpose beside the product before it).
    /// A quarter of that half when the region just before is a sibling
    /// reading the same producer and already took the half or a quarter of
    /// it (the other quarter): the two would otherwise run one after the
    /// other through the registers they share.
    fn side_for(&self, ni: usize, producers: &HashMap<ValueId, usize>) -> Option<u8> {
        let g = self.g;
        let n = &g.nodes[ni];
        // The region that made `v` and its side, through views (and nodes
        // lowered with their readers).
        let made = |v: ValueId| {
            let mut v = v;
            for _ in 0..8 {
                if let Some(&rs) = self.value_sides.get(&v) {
                    return Some(rs);
                }
                v = *producers.get(&v).and_then(|&p| g.nodes[p].inputs.first())?;
            }
            None
        };
        let latest = n
            .inputs
            .iter()
            .filter_map(|&v| made(v))
            .max_by_key(|(r, _)| *r);
        let Some((r, side)) = latest else {
            return Some((self.regions.len() % 2) as u8);
        };
        // A quarter stands for the half holding it.
        let half_of = |x: u8| {
            if x >= regalloc::QUARTERS {
                (x - regalloc::QUARTERS) / 2
            } else {
                x
            }
        };
        let half = 1 - half_of(side);
        let last = self.region_side.last().copied().flatten();
        let sibling = r + 1 < self.regions.len() && last.is_some_and(|x| half_of(x) == half);
        if !sibling {
            // The first of siblings to come (transposes copying the same
            // result, lowered each as a region) takes a quarter already.
            let copies = |k: usize| {
                matches!(g.nodes[k].op, Op::Transpose { .. })
                    && !self.head_views.contains_key(&g.nodes[k].outputs[0])
                    && !self.b_transposes.contains(&k)
                    && !self.dot_transposes.contains(&k)
                    && !self.transposed.iter().any(|&(t, _)| t == k)
            };
            let first_of_siblings = copies(ni)
                && (ni + 1..g.nodes.len())
                    .any(|k| copies(k) && made(g.nodes[k].inputs[0]).is_some_and(|(q, _)| q == r));
            return Some(if first_of_siblings {
                regalloc::QUARTERS + 2 * half
            } else {
                half
            });
        }
        // A sibling after one that took the half (or a quarter of it) takes
        // the other quarter of it, so siblings (the head splits of `q`, `k`
        // and `v`) overlap rather than run one after the other.
        let quarter = match last {
            Some(x) if x >= regalloc::QUARTERS => 1 - (x - regalloc::QUARTERS) % 2,
            _ => 1,
        };
        Some(regalloc::QUARTERS + 2 * half + quarter)
    }

    /// The skips of the row group started by node `seed` ([`masked`]).
    fn skip_of(&self, seed: usize) -> Option<masked::Skip> {
        self.skips.iter().find(|s| s.seed == seed).cloned()
    }

    /// Whether row group `gi` lowers as one region on this machine: tried,
    /// then undone, once per form (its operations and shapes: the layers of
    /// a model repeat theirs). A group that then fails after all is lowered
    /// node by node, as any.
    fn group_lowers(&mut self, gi: usize) -> Result<bool, LowerError> {
        let g = self.g;
        let grp = self.row_groups[gi].clone();
        let form: Vec<(&str, Vec<Vec<usize>>)> = grp
            .nodes
            .iter()
            .map(|&k| {
                let n = &g.nodes[k];
                let shapes = n
                    .inputs
                    .iter()
                    .chain(&n.outputs)
                    .map(|v| g.ty(*v).shape.clone());
                (n.op.name(), shapes.collect())
            })
            .collect();
        let key = format!("{form:?}");
        if let Some(&ok) = self.group_trials.get(&key) {
            return Ok(ok);
        }
        let attempt = self.attempt();
        let ok = self.row_group(&grp)?;
        self.undo(attempt);
        self.group_trials.insert(key, ok);
        Ok(ok)
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
        if rows == 0 || cols == 0 {
            return Ok(()); // an empty result: nothing to compute
        }
        if matches!(root.op, Op::MatMul) && g.ty(root.inputs[0]).shape.last() == Some(&0) {
            // An empty reduction: the product is zeros, placed as data.
            if members.len() > 1 {
                return Err(err(
                    "an empty reduction followed by element-wise ops is not supported yet",
                ));
            }
            let bytes = encode(
                out_home.dtype,
                std::iter::repeat_n(0.0, (rows * out_home.pitch) as usize),
            );
            self.data.push(DataSegment {
                memory: self.e.m.memories[self.home_mem().index()].name.clone(),
                addr: out_home.addr()?,
                bytes,
            });
            return Ok(());
        }
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
                let computed = |v: ValueId| !g.constants.contains_key(&v);
                // The running value: a computed operand of the output's shape, else
                // a computed operand to broadcast (rows repeat as the tile is loaded).
                if full(a) || (!full(b) && computed(a)) {
                    root_input = Some(a);
                    steps.push((ew, Some(b), false));
                } else if full(b) || computed(b) {
                    root_input = Some(b);
                    steps.push((ew, Some(a), true));
                } else {
                    return Err(Self::node_err(
                        root,
                        "both operands are constants; the op should have been folded",
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
        // A constant with one value in every element is a register written
        // once per tile where the machine has an immediate splat, instead of
        // a tile of the output's shape read from home.
        let uniform = |v: ValueId, ew: Ew| -> Option<Operand> {
            let t = g.constants.get(&v)?;
            let k = *t.data.first()?;
            if !t.data.iter().all(|x| x.to_bits() == k.to_bits()) {
                return None;
            }
            ops::splat_file(&self.e, ew).map(|f| Operand::Uniform(k, f))
        };
        let zeros = |ew: Ew| {
            ops::splat_file(&self.e, ew).map_or(Operand::Zeros, |f| Operand::Uniform(0.0, f))
        };
        // Rewrites for missing instructions: relu as max with zeros, division as a reciprocal times.
        let mut plan: Vec<(Ew, Option<Operand>, bool)> = Vec::new();
        for (ew, other, swapped) in steps {
            let as_operand = |ew: Ew| other.map(|v| uniform(v, ew).unwrap_or(Operand::Value(v)));
            let other = as_operand(ew);
            match ew {
                Ew::Relu if ops::ew_forms(&self.e, Ew::Relu).is_empty() => {
                    plan.push((Ew::Max, Some(zeros(Ew::Max)), false));
                }
                // -x as 0 - x.
                Ew::Neg if ops::ew_forms(&self.e, Ew::Neg).is_empty() => {
                    plan.push((Ew::Sub, Some(zeros(Ew::Sub)), true));
                }
                Ew::Div if ops::ew_forms(&self.e, Ew::Div).is_empty() => {
                    if ops::ew_forms(&self.e, Ew::Recip).is_empty() {
                        return Err(err(
                            "cannot compile: the target lacks `d = a / b` and `d = recip(a)`",
                        ));
                    }
                    let other = as_operand(Ew::Mul);
                    if swapped {
                        // b / x as recip(x) * b.
                        plan.push((Ew::Recip, None, false));
                        plan.push((Ew::Mul, other, false));
                    } else {
                        plan.push((
                            Ew::Mul,
                            other.map(|o| match o {
                                // 1/k once, at compile time.
                                Operand::Uniform(k, f) => Operand::Uniform(1.0 / k, f),
                                o => Operand::Recip(Box::new(o)),
                            }),
                            false,
                        ));
                    }
                }
                // recip(sqrt(x)) as rsqrt(x), one instruction (and the only way without sqrt).
                Ew::Recip
                    if matches!(plan.last(), Some((Ew::Call(Func::Sqrt), None, _)))
                        && !ops::ew_forms(&self.e, Ew::Call(Func::Rsqrt)).is_empty() =>
                {
                    plan.pop();
                    plan.push((Ew::Call(Func::Rsqrt), None, false));
                }
                _ => plan.push((ew, other, swapped)),
            }
        }
        if !matches!(root.op, Op::MatMul) {
            return self.region_tiles(&None, &plan, root_input, out, &out_home);
        }
        // One row (per batch) by a transposed matrix that was not
        // transposed: dot products with its rows; failing that, the
        // transpose is lowered here and the product goes on as any.
        if let Some(ti) = g
            .nodes
            .iter()
            .position(|n| n.outputs.contains(&root.inputs[1]))
            .filter(|t| self.dot_transposes.contains(t))
        {
            let attempt = self.attempt();
            let bufs = self.e.bufs.len();
            let k = g.nodes[ti].inputs[0];
            // Dot products stream through the whole register file.
            let side = self.e.side.take();
            match self
                .vector_dots(root, &plan, out, &out_home, k)
                .and_then(|()| self.fits_on_chip(bufs))
            {
                Ok(()) => return Ok(()),
                Err(_) => {
                    self.undo(attempt);
                    self.e.side = side;
                    let t = &g.nodes[ti];
                    let Op::Transpose { perm } = &t.op else {
                        return Err(err("not a transpose"));
                    };
                    self.transpose(t, perm).map_err(|e| Self::at_node(t, e))?;
                }
            }
        }
        // One row (per batch) by a matrix: on the vector unit where it can.
        {
            let attempt = self.attempt();
            let bufs = self.e.bufs.len();
            let side = self.e.side.take();
            match self
                .vector_gemv(root, &plan, out, &out_home)
                .and_then(|done| self.fits_on_chip(bufs).map(|()| done))
            {
                Ok(true) => return Ok(()),
                Ok(false) => self.e.side = side,
                Err(_) => {
                    self.undo(attempt);
                    self.e.side = side;
                }
            }
        }
        // B made by a transpose that was not lowered: read as its rows of `N`
        // by a form taking B transposed; failing that, the transpose is
        // lowered here and the product goes on as any.
        if let Some(ti) = self.b_transpose_of(root.inputs[1]) {
            let attempt = self.attempt();
            let space = self.space.len();
            match self.matmul_tiles(root, &plan, root_input, out, &out_home) {
                Ok(()) => return Ok(()),
                Err(_) => {
                    self.undo(attempt);
                    self.space.truncate(space);
                    self.lowered_transposes.insert(ti);
                    let t = &g.nodes[ti];
                    let Op::Transpose { perm } = &t.op else {
                        return Err(err("not a transpose"));
                    };
                    self.transpose(t, perm).map_err(|e| Self::at_node(t, e))?;
                }
            }
        }
        self.matmul_tiles(root, &plan, root_input, out, &out_home)
    }

    /// The tile loop of a product's region, trying tilings and mappings (see
    /// [`Self::region`]). Where every one lowered but its buffers overflowed
    /// an on-chip memory (a tile's share of a memory leaves no room for the
    /// staging and the tiles in flight beside it), all are tried again with
    /// operand tiles of half the share, down to a sixteenth.
    fn matmul_tiles(
        &mut self,
        root: &crate::ir::Node,
        plan: &[(Ew, Option<Operand>, bool)],
        root_input: Option<ValueId>,
        out: ValueId,
        out_home: &Home,
    ) -> Result<(), LowerError> {
        let share = self.tile_share;
        let mut first = None;
        let done = loop {
            match self.matmul_tilings(root, plan, root_input, out, out_home) {
                Ok(()) => break Ok(()),
                Err((e, overflowed)) => {
                    let e = first.get_or_insert(e).clone();
                    if !overflowed || self.tile_share >= 16 {
                        break Err(e);
                    }
                    self.tile_share *= 2;
                }
            }
        };
        self.tile_share = share;
        done
    }

    /// One pass of [`Self::matmul_tiles`]: the error, and whether a tiling
    /// lowered whose buffers then overflowed a memory.
    fn matmul_tilings(
        &mut self,
        root: &crate::ir::Node,
        plan: &[(Ew, Option<Operand>, bool)],
        root_input: Option<ValueId>,
        out: ValueId,
        out_home: &Home,
    ) -> Result<(), (LowerError, bool)> {
        // Tiles of the exact matrix size may leave operand rows the machine's
        // copies cannot align; whole aligned tiles (zero-padded) can; failing
        // that, the decomposed product. Where the best mapping by estimate
        // fails, the next few of the tuning space are tried before giving up
        // on a tiling (unless the mapping was given).
        let mut first: Option<LowerError> = None;
        let mut overflowed = false;
        let mut tried: Vec<(i64, i64, i64, bool, Order)> = Vec::new();
        for tiling in [
            matmul::Tiling::Exact,
            matmul::Tiling::Aligned,
            matmul::Tiling::Decomposed,
        ] {
            let Ok(best) = self.plan_matmul(root, tiling, None) else {
                continue;
            };
            let alternatives: Vec<mapping::Mapping> = match &best.space {
                Some(s) if !s.given => s
                    .ranked
                    .iter()
                    .map(|r| r.mapping.clone())
                    .filter(|x| *x != s.chosen)
                    .take(FALLBACK_MAPPINGS)
                    .collect(),
                _ => Vec::new(),
            };
            let mut next = Some(best);
            let mut alternatives = alternatives.into_iter();
            while let Some(p) = next.take().or_else(|| {
                alternatives.find_map(|x| {
                    self.plan_matmul(root, tiling, Some(&x)).ok().map(|mut p| {
                        if let Some(s) = &mut p.space {
                            s.given = false;
                        }
                        p
                    })
                })
            }) {
                let key = (p.tm, p.tn, p.tk, p.decomposed.is_some(), p.order);
                if tried.contains(&key) && !p.whole_tiles {
                    continue;
                }
                tried.push(key);
                let attempt = self.attempt();
                let bufs = self.e.bufs.len();
                let space = p.space.clone();
                // Products summed in a register file the halves apply to
                // take registers anywhere in it.
                let side = self.e.side;
                if self.in_sided_file(&p) {
                    self.e.side = None;
                }
                let result = self
                    .region_tiles(&Some(p), plan, root_input, out, out_home)
                    .and_then(|()| self.fits_on_chip(bufs).inspect_err(|_| overflowed = true));
                match result {
                    Ok(()) => {
                        self.space.extend(space);
                        return Ok(());
                    }
                    Err(e) => {
                        self.undo(attempt);
                        self.e.side = side;
                        first.get_or_insert(e);
                    }
                }
            }
        }
        match first {
            Some(e) => Err((e, overflowed)),
            None => self
                .plan_matmul(root, matmul::Tiling::Exact, None)
                .map(|_| ())
                .map_err(|e| (e, false)),
        }
    }

    /// Whether a product is summed in registers of a file of 16 or more
    /// (where [`regalloc::allocate_sided`]'s halves apply): a decomposed
    /// product, or a contraction whose result is such a register.
    fn in_sided_file(&self, p: &matmul::MatMulPlan) -> bool {
        let m = self.e.m;
        p.decomposed.is_some()
            || p.set.iter().chain(&p.acc).any(|c| {
                matches!(
                    machine::operand_loc(m, c.inst, c.t),
                    Some(Loc { place: Place::Reg(f), .. })
                        if m.regfiles[f.index()].count.value >= 16
                )
            })
    }

    /// The tile loop of a region (see [`Self::region`]).
    fn region_tiles(
        &mut self,
        mm: &Option<matmul::MatMulPlan>,
        plan: &[(Ew, Option<Operand>, bool)],
        root_input: Option<ValueId>,
        out: ValueId,
        out_home: &Home,
    ) -> Result<(), LowerError> {
        let (rows, cols) = (out_home.rows, out_home.cols);
        self.kept_a = None;
        self.kept_b.clear();
        self.staged_rows.clear();
        // Tile sizes: the contraction's, or a budget of the smallest on-chip memory.
        let (th, tw) = match &mm {
            Some(p) => (p.tm, p.tn),
            None => {
                let budget = self.tile_budget();
                let tw = cols.min(512);
                // Buffers of fixed-width registers are padded to whole registers.
                let pitch = machine::rup(tw, self.info.pitch_granule.max(1));
                let th = (budget / (pitch * 4 * (plan.len() as i64 + 2) * 2))
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
        // Products of later tiles are emitted before the epilogues of earlier
        // ones (software pipelining of the tile loop): the epilogue's
        // transfers are barriers to the scheduler, so this is what lets
        // independent products overlap on the unit's copies.
        let lag = match &mm {
            Some(p) if p.decomposed.is_none() && self.opts.pipeline_tiles => self.tile_lag(p),
            _ => 1,
        };
        let mut pending: std::collections::VecDeque<(Val, i64, i64, i64, i64)> = Default::default();
        // Output tiles `(row, rows, column, columns)` of one batch, in the
        // product's visiting order.
        let blocks = |total: i64, size: i64| -> Vec<(i64, i64)> {
            (0..total)
                .step_by(size.max(1) as usize)
                .map(|x| (x, size.min(total - x)))
                .collect()
        };
        let (mut row_blocks, mut col_blocks) = (blocks(batch_rows, th), blocks(cols, tw));
        if mm.is_some() && self.opts.reader_order {
            let needs = self.column_needs(out, cols);
            let first = |&(c, w): &(i64, i64)| {
                needs
                    .iter()
                    .filter(|(s, e, _)| *s < c + w && c < *e)
                    .map(|(_, _, at)| *at)
                    .min()
                    .unwrap_or(usize::MAX)
            };
            col_blocks.sort_by_key(first);
        }
        // The last block of rows in two halves where that costs the
        // contraction no time: the results the end waits for (their drain
        // and store) are half as many. Not in batched products (attention's
        // heads), where the halves were measured slower (the last head's
        // scores: GPT-2 block at seq 128 +31 cycles, at seq 512 +104).
        if let Some(p) = mm.as_ref().filter(|p| {
            self.opts.split_last_rows
                && p.order == Order::Rows
                && p.decomposed.is_none()
                && batches == 1
        }) && let Some(&(r, h)) = row_blocks.last()
            && self.halves_cost_nothing(p, h)
        {
            row_blocks.pop();
            row_blocks.extend([(r, h / 2), (r + h / 2, h - h / 2)]);
        }
        let tiles: Vec<(i64, i64, i64, i64)> = match mm.as_ref().map(|p| p.order) {
            Some(Order::Cols) => col_blocks
                .iter()
                .flat_map(|&(c, w)| row_blocks.iter().map(move |&(r, h)| (r, h, c, w)))
                .collect(),
            _ => row_blocks
                .iter()
                .flat_map(|&(r, h)| col_blocks.iter().map(move |&(c, w)| (r, h, c, w)))
                .collect(),
        };
        for b in 0..batches {
            for &(r, h, c, w) in &tiles {
                let row0 = b * batch_rows + r;
                // Columns its one reader, a row group, does not read ([`masked`]).
                if self
                    .skips
                    .iter()
                    .any(|s| s.sources.contains(&out) && c >= s.need_rows(row0, h))
                {
                    continue;
                }
                let input = match (&mm, root_input) {
                    (Some(p), _) if p.decomposed.is_some() => {
                        self.scaled_rows_tile(p, b as usize, r, c, w)?
                    }
                    (Some(p), _) => self.matmul_tile(p, b as usize, r, c, h, w)?,
                    (None, Some(v)) => self.operand_tile(v, out, row0, c, h, w)?,
                    (None, None) => return Err(err("region without input")),
                };
                pending.push_back((input, row0, c, h, w));
                while pending.len() > lag {
                    if let Some(t) = pending.pop_front() {
                        self.tile_epilogue(plan, out, out_home, t)?;
                    }
                }
            }
        }
        while let Some(t) = pending.pop_front() {
            self.tile_epilogue(plan, out, out_home, t)?;
        }
        Ok(())
    }

    /// The columns of a product's result `out` (`cols` wide) each reader
    /// needs, and where in the program that need arises: `(first column,
    /// end, node)`. A slice of the last dimension needs its columns where
    /// they are first read: at the transpose copying them into heads, or,
    /// for heads read in place ([`Self::head_views`]), at the first product
    /// reading them; any other reader needs every column where it is.
    fn column_needs(&self, out: ValueId, cols: i64) -> Vec<(i64, i64, usize)> {
        let g = self.g;
        let readers_of =
            |v: ValueId| (0..g.nodes.len()).filter(move |&k| g.nodes[k].inputs.contains(&v));
        let mut needs = Vec::new();
        for k in readers_of(out) {
            let Some((c0, c1)) = canon::slice_columns(g, &g.nodes[k]) else {
                needs.push((0, cols, k));
                continue;
            };
            let at = self
                .sliced
                .iter()
                .find(|(_, sl)| sl.nodes.first() == Some(&k))
                .and_then(|(w, _)| readers_of(*w).next())
                .map_or(k, |t| {
                    let y = g.nodes[t].outputs[0];
                    if self.head_views.contains_key(&y) {
                        readers_of(y).next().unwrap_or(t)
                    } else {
                        t
                    }
                });
            needs.push((c0 as i64, c1 as i64, at));
        }
        needs
    }

    /// How many tiles' products may wait for their epilogues: one per extra
    /// copy of the contraction's unit, as long as its result registers last.
    fn tile_lag(&self, p: &matmul::MatMulPlan) -> usize {
        let Some(form) = p.set.as_ref().or(p.acc.as_ref()) else {
            return 0;
        };
        let m = self.e.m;
        let unit = &m.units[m.instructions[form.inst.index()].timing.unit.index()];
        let copies = unit.count.value.max(1) as usize;
        let regs = match form.locs(&self.e).map(|l| l[0].place) {
            Some(Place::Reg(file)) => m.regfiles[file.index()].count.value.max(1) as usize,
            _ => copies,
        };
        // Half the result registers: the epilogue needs some of its own.
        (copies - 1).min(regs / 2)
    }

    /// The element-wise steps of a region on one computed tile, and the store.
    fn tile_epilogue(
        &mut self,
        plan: &[(Ew, Option<Operand>, bool)],
        out: ValueId,
        out_home: &Home,
        (input, row0, c, h, w): (Val, i64, i64, i64, i64),
    ) -> Result<(), LowerError> {
        let mut chain = Vec::new();
        for (ew, other, swapped) in plan {
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
        let dst = out_home.tile(row0, c, h, w);
        let v = ops::chain_into(&mut self.e, input, &chain, Some(&dst)).map_err(err)?;
        let to = Loc {
            place: Place::Mem(out_home.mem),
            dtype: out_home.dtype,
        };
        self.e.to_loc(v, to, Some(&dst), Pad::Dense).map_err(err)?;
        Ok(())
    }

    /// Whether the on-chip buffers from `first` on fit their memories (placed
    /// by liveness, as the back end will).
    fn fits_on_chip(&self, first: usize) -> Result<(), LowerError> {
        let now = self.e.code.len();
        // A transfer still in flight keeps its buffers until its wait, which
        // comes later: live until now at least (their last touch so far
        // would let the check place later buffers in their bytes, where the
        // back end, seeing the wait, cannot).
        let flying = self.e.in_flight_buffers();
        let until_now = |b: &BufInfo| BufInfo {
            live: (b.live.0.min(now), b.live.1.max(now)),
            ..b.clone()
        };
        for (mi, mem) in self.e.m.memories.iter().enumerate() {
            // Values kept on chip from earlier regions and read by this one
            // or later ones are live throughout.
            let held = self.e.bufs[..first]
                .iter()
                .enumerate()
                .filter(|(k, b)| b.used() && (b.shared || flying.contains(k)))
                .map(|(k, b)| {
                    let read_later = flying.contains(&k)
                        || self
                            .kept_until
                            .get(&k)
                            .is_none_or(|&u| u >= self.lowering_node);
                    if read_later { until_now(b) } else { b.clone() }
                });
            let fresh = self.e.bufs[first..]
                .iter()
                .enumerate()
                .filter(|(_, b)| b.used())
                .map(|(k, b)| {
                    if flying.contains(&(first + k)) {
                        until_now(b)
                    } else {
                        b.clone()
                    }
                });
            let bs: Vec<memplan::Buffer> = held
                .chain(fresh)
                .filter(|b| b.mem.index() == mi)
                .map(|b| memplan::Buffer {
                    size: b.size,
                    align: b.align,
                    live: b.live,
                })
                .collect();
            if !bs.is_empty() {
                memplan::plan(&bs, mem.size.value as u64)
                    .map_err(|e| err(format!("memory `{}`: {e}", mem.name)))?;
            }
        }
        Ok(())
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
            Operand::Uniform(k, file) => ops::splat(&mut self.e, *file, *k).map_err(err),
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
        if let Some(k) = g.constants.get(&v) {
            // Broadcast along leading dimensions only (a mask over heads):
            // the constant's own rows, where the tile's rows are consecutive
            // rows of it; otherwise expanded to the output's shape.
            if vs.len() <= os.len() && vs.last() == os.last() && !vs.is_empty() {
                let rows_of = broadcast_offsets(&vs[..vs.len() - 1], &os[..os.len() - 1]);
                let src = |i: i64| rows_of[i as usize] as i64;
                let consecutive = (0..h).all(|i| src(r + i) == src(r) + i);
                // One row for the whole tile (a bias or scale vector): loaded
                // into every row of a register where the machine can.
                let one_row = h > 1
                    && (0..h).all(|i| src(r + i) == src(r))
                    && ops::can_broadcast_rows(&self.e);
                if consecutive || one_row {
                    let key = (v, "own".to_owned());
                    let t = match self.packed.get(&key) {
                        Some(t) => t.clone(),
                        None => {
                            let (rows, cols) = view(vs);
                            let t = self
                                .padded(&k.data, rows, cols, self.act)
                                .tile(0, 0, rows, cols);
                            self.packed.insert(key, t.clone());
                            t
                        }
                    };
                    if one_row {
                        return self.staged_row(v, &t, src(r), c, w);
                    }
                    return Ok(Val::Mem(t.view(src(r), c, h, w)));
                }
            }
            let t = self.packed_const(Some(v), out, "expanded")?;
            return Ok(Val::Mem(t.view(r, c, h, w)));
        }
        let home = self
            .homes
            .get(&v)
            .cloned()
            .ok_or_else(|| err("operand without a home"))?;
        if vs == os {
            return Ok(Val::Mem(home.tile(r, c, h, w)));
        }
        // Broadcast: output row i reads input row f(i). A last dimension of
        // 1 is a row result, read as one column and broadcast along the
        // lanes in registers (`ops::broadcast_lanes`).
        let lanes = vs.last() == Some(&1) && os.last() > Some(&1);
        if vs.last() != os.last() && !lanes {
            return Err(err(format!(
                "broadcasting computed tensor `{}` along its last dimension is not supported yet",
                g.values[v.index()].name
            )));
        }
        let (c, w) = if lanes { (0, 1) } else { (c, w) };
        let rows_of = broadcast_offsets(&vs[..vs.len() - 1], &os[..os.len() - 1]);
        let src_row = |i: i64| rows_of[i as usize] as i64;
        if (0..h).all(|i| src_row(r + i) == src_row(r) + i) {
            return Ok(Val::Mem(home.tile(src_row(r), c, h, w)));
        }
        let land = self.landing_of(home.dtype)?;
        let Place::Mem(lm) = land.place else {
            unreachable!()
        };
        let buf = self.e.buffer_padded(lm, land.dtype, h, w, Pad::Registers);
        // One transfer per row (all issued, then all waited for: the tile is
        // used as a whole, and each row's transfer has its own semaphore).
        let mut rows = Vec::with_capacity(h as usize);
        for i in 0..h {
            let src = home.tile(src_row(r + i), c, 1, w);
            rows.push(
                self.e
                    .to_loc(Val::Mem(src), land, Some(&buf.view(i, 0, 1, w)), Pad::Dense)
                    .map_err(err)?,
            );
        }
        for row in &rows {
            if let Val::Mem(t) = row {
                self.e.ready(t).map_err(err)?;
            }
        }
        Ok(Val::Mem(buf))
    }

    /// Columns `c..c + w` of row `row` of constant `v` (packed at home as
    /// `t`), on chip: the whole row is brought on chip once per region (one
    /// transfer and one wait), since every row of tiles of the region reads
    /// the same row.
    fn staged_row(
        &mut self,
        v: ValueId,
        t: &MemTile,
        row: i64,
        c: i64,
        w: i64,
    ) -> Result<Val, LowerError> {
        let key = (v, row);
        if let Some(s) = self.staged_rows.get(&key) {
            return Ok(Val::Mem(s.view(0, c, 1, w)));
        }
        let land = self.landing_of(t.dtype)?;
        let Place::Mem(lm) = land.place else {
            return Ok(Val::Mem(t.view(row, c, 1, w)));
        };
        let buf = self
            .e
            .buffer_padded(lm, land.dtype, 1, t.cols, Pad::Aligned);
        let (s, pending) = self.stage_pieces(&t.view(row, 0, 1, t.cols), land, &buf)?;
        for p in &pending {
            self.e.ready(p).map_err(err)?;
        }
        self.staged_rows.insert(key, s.clone());
        Ok(Val::Mem(s.view(0, c, 1, w)))
    }

    /// Tile `src` (at home) copied into on-chip buffer `buf` at `land`: in
    /// one transfer, or pieces of columns as wide as the transfer
    /// instruction takes. The tile, and the pieces to wait for before it is read.
    fn stage_pieces(
        &mut self,
        src: &MemTile,
        land: Loc,
        buf: &MemTile,
    ) -> Result<(MemTile, Vec<MemTile>), LowerError> {
        let mut last = None;
        let mut width = src.cols;
        while width >= 1 {
            let cp = self.e.checkpoint();
            let mut moved = Vec::new();
            let mut c = 0;
            let attempt = loop {
                if c >= src.cols {
                    break Ok(());
                }
                let w = width.min(src.cols - c);
                let to = buf.view(0, c, src.rows, w);
                match self.e.to_loc(
                    Val::Mem(src.view(0, c, src.rows, w)),
                    land,
                    Some(&to),
                    Pad::Dense,
                ) {
                    Ok(Val::Mem(t)) => moved.push(t),
                    Ok(_) => break Err("a tile landed in a register".to_owned()),
                    Err(e) => break Err(e),
                }
                c += w;
            };
            match attempt {
                Ok(()) => return Ok((buf.view(0, 0, src.rows, src.cols), moved)),
                Err(e) => {
                    self.e.rollback(cp);
                    last = Some(e);
                    width = if width > 1024 { 1024 } else { width / 2 };
                }
            }
        }
        Err(err(last.unwrap_or_else(|| "nothing to stage".to_owned())))
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
                broadcast_offsets(vs, &os)
                    .into_iter()
                    .map(|o| t.data.get(o).copied().unwrap_or(0.0))
                    .collect()
            }
        };
        let dt = self.act;
        let home = self.padded(&data, rows, cols, dt);
        let t = home.tile(0, 0, rows, cols);
        self.packed.insert(key, t.clone());
        Ok(t)
    }

    /// Notes that constant `v` is held at home in `dt` ([`Compiled::min_home_bytes`]).
    fn note_packed(&mut self, v: ValueId, dt: DType) {
        let b = self.packed_elem_bytes.entry(v).or_insert(u64::MAX);
        *b = (*b).min(dt.bytes());
    }

    /// Places a dense `rows` x `cols` matrix at home as constant data, rows aligned.
    fn padded(&mut self, data: &[f64], rows: i64, cols: i64, dt: DType) -> Home {
        self.padded_from(data, cols, rows, cols, dt)
    }

    /// [`Lowerer::padded`] of the first `cols` columns of the rows of `src`,
    /// `src_pitch` elements apart.
    fn padded_from(
        &mut self,
        src: &[f64],
        src_pitch: i64,
        rows: i64,
        cols: i64,
        dt: DType,
    ) -> Home {
        let (sp, c) = (src_pitch as usize, cols as usize);
        self.padded_rows(rows, cols, dt, |r, row| {
            row.copy_from_slice(&src[r * sp..r * sp + c]);
        })
    }

    /// [`Lowerer::padded`] of the rows `row(r, buffer)` writes into a buffer
    /// of `cols` elements (zeros when called), one at a time.
    fn padded_rows(
        &mut self,
        rows: i64,
        cols: i64,
        dt: DType,
        mut row: impl FnMut(usize, &mut [f64]),
    ) -> Home {
        let mut buf = vec![0.0; cols as usize];
        self.padded_bytes(rows, cols, dt, |r, out| {
            buf.fill(0.0);
            row(r, &mut buf);
            encode_into(dt, &buf, out);
        })
    }

    /// [`Lowerer::padded_rows`] with the rows written as `dt`'s bytes
    /// (`cols` elements' worth, zeros when called).
    fn padded_bytes(
        &mut self,
        rows: i64,
        cols: i64,
        dt: DType,
        mut row: impl FnMut(usize, &mut [u8]),
    ) -> Home {
        let mut homes = self.padded_panels(rows, cols, 1, dt, |r, _, out| row(r, out));
        homes.remove(0)
    }

    /// `count` panels like [`Lowerer::padded_bytes`], filled together:
    /// `row(r, panel, buffer)` for every row, then every panel (a matrix
    /// cut into panels of columns is read once, row by row, not once per
    /// panel).
    fn padded_panels(
        &mut self,
        rows: i64,
        cols: i64,
        count: usize,
        dt: DType,
        mut row: impl FnMut(usize, usize, &mut [u8]),
    ) -> Vec<Home> {
        let started = std::time::Instant::now();
        let pitch = self.home_pitch(cols, dt);
        let el = dt.bytes() as usize;
        let (c, line) = (cols as usize, pitch as usize * el);
        let mut panels: Vec<Vec<u8>> = (0..count)
            .map(|_| vec![0u8; rows as usize * line])
            .collect();
        for r in 0..rows as usize {
            for (j, bytes) in panels.iter_mut().enumerate() {
                row(r, j, &mut bytes[r * line..r * line + c * el]);
            }
        }
        self.packing += started.elapsed();
        panels
            .into_iter()
            .map(|bytes| {
                let addr = self.alloc_home(bytes.len() as u64, 64);
                self.data.push(DataSegment {
                    memory: self.e.m.memories[self.home_mem().index()].name.clone(),
                    addr,
                    bytes,
                });
                Home {
                    mem: self.info.home,
                    base: Base::Fixed(addr),
                    dtype: dt,
                    rows,
                    cols,
                    pitch,
                    batch: None,
                    first: 0,
                }
            })
            .collect()
    }

    /// Back end: buffers, registers, schedule, encoding.
    fn back_end(
        mut self,
        t: &targets::Target,
        m: &Machine,
        times: &mut PassTimes,
    ) -> Result<Compiled, LowerError> {
        // On-chip buffers, per memory.
        let mut buffers = Vec::new();
        let mut bases = vec![0u64; self.e.bufs.len()];
        for (mi, mem) in m.memories.iter().enumerate() {
            let ids: Vec<usize> = (0..self.e.bufs.len())
                .filter(|&b| self.e.bufs[b].mem.index() == mi && self.e.bufs[b].used())
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
            // Where there is room, buffers close in program order do not
            // share bytes either: a transfer into the next one need not wait
            // for the last one's readers (the scheduler sees no false
            // dependence), so it can overlap them.
            // The widest slack that fits: the further apart reused bytes
            // are, the earlier the scheduler may issue a transfer into them.
            let spread = |slack: usize| -> Vec<memplan::Buffer> {
                bs.iter()
                    .map(|b| memplan::Buffer {
                        live: (b.live.0.saturating_sub(slack), b.live.1 + slack),
                        ..b.clone()
                    })
                    .collect()
            };
            let spread_plan = times.time("buffers", || {
                self.opts
                    .spread_buffers
                    .then(|| widest_spread(|slack| memplan::plan_within(&spread(slack), cap)))
                    .flatten()
            });
            let plan = match spread_plan {
                Some(p) => p,
                None => times
                    .time("buffers", || memplan::plan(&bs, cap))
                    .map_err(|e| err(format!("memory `{}`: {e}", mem.name)))?,
            };
            times
                .time("check buffers", || memplan::check(&bs, &plan, cap))
                .map_err(|e| {
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
        let insts = times
            .time("registers", || {
                let sides = &self.e.sides;
                regalloc::allocate_sided(m, &code, |f, v| {
                    sides[f]
                        .get(v as usize)
                        .copied()
                        .filter(|&s| s != emit::NO_SIDE)
                })
            })
            .map_err(|e| err(e.to_string()))?;
        times.time("check registers", || {
            regalloc::check(m, &code, &insts)
                .map_err(|e| err(format!("register allocation is invalid: {}", e.join("; "))))?;
            insts.iter().try_for_each(|mi| {
                isa_specs::target::check_constraints(m, mi)
                    .map_err(|e| err(format!("after placement: {e}")))
            })
        })?;
        let rules = sched::Rules {
            transfers_are_barriers: !self.opts.overlap_transfers,
            reverse_priorities: self.opts.reverse_priorities,
            finish_chains: self.opts.finish_chains,
        };
        let (bundles, placed) = sched::schedule_checked(t, m, &insts, rules, times)
            .map_err(|e| err(format!("schedule is invalid: {}", e.join("; "))))?;
        let mut program = Program::new(m);
        times.time("encode", || {
            bundles.iter().try_for_each(|b| {
                let word = isa_specs::target::encode_bundle(t.isa(), m, b)
                    .map_err(|e| err(e.to_string()))?;
                if program.code.is_empty() {
                    // Bundles are mostly of one size: grow once, not by doubling.
                    program.code.reserve(word.len() * bundles.len());
                }
                program.code.extend_from_slice(&word);
                Ok::<_, LowerError>(())
            })
        })?;
        program.data = std::mem::take(&mut self.data);
        let home_name = m.memories[self.home_mem().index()].name.clone();
        let desc = |v: ValueId, h: &Home| -> Result<TensorDesc, LowerError> {
            Ok(TensorDesc {
                name: self.g.values[v.index()].name.clone(),
                dtype: h.dtype,
                shape: self.g.ty(v).shape.iter().map(|d| *d as u64).collect(),
                memory: home_name.clone(),
                addr: h.addr()?,
                pitch: if h.pitch == h.cols { 0 } else { h.pitch as u64 },
            })
        };
        for v in &self.g.inputs {
            let h = &self.homes[v];
            program.inputs.push(desc(*v, h)?);
        }
        for v in &self.g.outputs {
            let h = self
                .homes
                .get(v)
                .ok_or_else(|| err("a graph output has no place at home"))?;
            program.outputs.push(desc(*v, h)?);
        }
        let macs = self.g.nodes.iter().map(|n| node_macs(self.g, n)).sum();
        let region_stats = times.time("statistics", || {
            let latency: Vec<u64> = insts
                .iter()
                .map(|i| t.isa().latency(m, i).max(0) as u64)
                .collect();
            self.region_stats(&placed, &latency, bundles.len())
        });
        let min_home_bytes = self
            .g
            .inputs
            .iter()
            .chain(&self.g.outputs)
            .map(|v| self.g.ty(*v).numel() as u64 * self.homes[v].dtype.bytes())
            .chain(self.g.constants.iter().map(|(v, t)| {
                let packed = self.packed_elem_bytes.get(v).copied();
                t.ty.numel() as u64 * packed.unwrap_or(u64::MAX).min(self.act.bytes())
            }))
            .sum();
        Ok(Compiled {
            program,
            bundles,
            insts,
            regions: self.regions,
            selected: code,
            buffers,
            macs,
            min_home_bytes,
            region_stats,
            notes: match &self.residency_blocked {
                Some(why) if self.opts.residency => {
                    vec![format!("values not kept on chip across regions: {why}")]
                }
                _ => Vec::new(),
            },
            space: self.space,
            kept_on_chip: self.kept_until.len(),
            passes: PassTimes::default(),
        })
    }
}

/// Multiply-accumulates of one node (matrix products only).
fn node_macs(g: &Graph, n: &crate::ir::Node) -> u64 {
    if !matches!(n.op, Op::MatMul) {
        return 0;
    }
    let o = &g.ty(n.outputs[0]).shape;
    let k = *g.ty(n.inputs[0]).shape.last().unwrap_or(&1);
    o.iter().product::<usize>() as u64 * k as u64
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

/// Whether a `Cast` keeps every value, so its result can share its input's
/// bytes (integers are held in floating-point containers): the same type; an
/// integer widened or made floating-point; or values known to be integers
/// made integer.
/// An Identity, or a Transpose that keeps every dimension: its output is
/// its input, same shape.
/// Whether `perm` swaps the two dimensions before the last, and only those
/// (`[1, S, H, D]` to `[1, H, S, D]` and back).
fn swaps_before_last(perm: &[usize]) -> bool {
    let r = perm.len();
    r >= 3
        && perm.iter().enumerate().all(|(i, p)| {
            *p == if i == r - 3 {
                r - 2
            } else if i == r - 2 {
                r - 3
            } else {
                i
            }
        })
}

fn same_shape_view(n: &crate::ir::Node) -> bool {
    match &n.op {
        Op::Identity => true,
        Op::Transpose { perm } => perm.iter().enumerate().all(|(i, p)| i == *p),
        _ => false,
    }
}

fn cast_is_view(g: &Graph, n: &crate::ir::Node) -> bool {
    use crate::ir::ElemType::{I8, I32, I64, U8};
    let (Op::Cast { to }, Some(&x)) = (&n.op, n.inputs.first()) else {
        return false;
    };
    let from = g.ty(x).elem;
    match (from, *to) {
        (a, b) if a == b => true,
        (I8 | U8, I32 | I64) | (I32, I64) => true,
        (a, b) if !a.is_float() && b.is_float() => {
            b != crate::ir::ElemType::F16 && b != crate::ir::ElemType::Bf16
        }
        (a, b) if a.is_float() && !b.is_float() => integral(g, x, 16),
        _ => false,
    }
}

/// Whether every element of `v` is an integer: an integer type, a constant
/// of integers, a rounding, or exact arithmetic of integers (up to `depth`
/// producers back).
fn integral(g: &Graph, v: ValueId, depth: usize) -> bool {
    if !g.ty(v).elem.is_float() {
        return true;
    }
    if let Some(t) = g.constants.get(&v) {
        return t.data.iter().all(|x| x.fract() == 0.0);
    }
    let Some(n) = g.nodes.iter().find(|n| n.outputs.contains(&v)) else {
        return false;
    };
    // `(x + 1.5·2^23) - 1.5·2^23` is how `canon` rounds without a rounding instruction.
    let magic = |c: ValueId| {
        g.constants
            .get(&c)
            .is_some_and(|t| t.data[..] == [12582912.0])
    };
    let rounds = matches!(n.op, Op::Sub)
        && magic(n.inputs[1])
        && g.nodes.iter().any(|p| {
            p.outputs.contains(&n.inputs[0]) && matches!(p.op, Op::Add) && magic(p.inputs[1])
        });
    rounds
        || depth > 0
            && match &n.op {
                Op::Unary(crate::ir::Unary::Round) => true,
                Op::Add
                | Op::Sub
                | Op::Mul
                | Op::Max
                | Op::Min
                | Op::Relu
                | Op::Unary(crate::ir::Unary::Neg | crate::ir::Unary::Abs)
                | Op::Reshape { .. }
                | Op::Identity
                | Op::Transpose { .. }
                | Op::Cast { .. } => n.inputs.iter().all(|i| integral(g, *i, depth - 1)),
                _ => false,
            }
}

/// An operand of an element-wise step.
#[derive(Clone, Debug)]
enum Operand {
    /// A value of the graph.
    Value(ValueId),
    /// Zeros (relu as `max(x, 0)`).
    Zeros,
    /// A constant with one value in every element, splatted into a register
    /// of the file ([`ops::splat`]).
    Uniform(f64, isa_specs::model::RegFileId),
    /// The reciprocal of an operand (division as multiplication).
    Recip(Box<Operand>),
}

#[cfg(test)]
mod tests {
    use super::{DType, broadcast_offsets, encode_elements, encode_into, widest_spread};

    /// The widest listed slack that fits, then bisected towards the next
    /// wider one: a memory that fits 15 000 instructions of slack gets
    /// 14 848 (from 4096, four halvings of the gap to 16384), one that fits
    /// 100 gets 100, one that fits only 64 gets 64, one that fits everything
    /// 65536, one that fits nothing none.
    #[test]
    fn spread_slack_is_widened_by_bisection() {
        let fits = |max: usize| move |slack: usize| (slack <= max).then_some(slack);
        assert_eq!(widest_spread(fits(15_000)), Some(14_848));
        assert_eq!(widest_spread(fits(100)), Some(100));
        assert_eq!(widest_spread(fits(64)), Some(64));
        assert_eq!(widest_spread(fits(1 << 20)), Some(65_536));
        assert_eq!(widest_spread(fits(10)), None);
    }

    /// The direct conversions give the simulator's bytes: f32-exact values,
    /// values between f32s (no double rounding), halfway cases, subnormals,
    /// infinities, NaN, and every type's generic path.
    #[test]
    fn encoding_matches_the_simulators_bytes() {
        let mut xs = vec![
            0.0,
            -0.0,
            1.0,
            -2.5,
            1.0 + 2f64.powi(-8),                  // halfway between two bf16s
            1.0 + 2f64.powi(-8) + 2f64.powi(-40), // just above: rounds up
            1.0 + 2f64.powi(-8) - 2f64.powi(-40), // just below: rounds down
            1e-40,                                // an f32 subnormal
            1e-300,
            3.4e38,
            1e39,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            0.1,
            -123456.789,
        ];
        let mut x = 0.37f64;
        for _ in 0..2000 {
            x = (x * 7919.0 + 0.123).rem_euclid(1000.0) - 500.0;
            xs.push(x);
            xs.push(f64::from(x as f32));
            xs.push(x * 1e-30);
        }
        for dt in [
            DType::F32,
            DType::Bf16,
            DType::F16,
            DType::Fp8E4M3,
            DType::I8,
            DType::I32,
        ] {
            let n = dt.bytes() as usize;
            let mut got = vec![0u8; xs.len() * n];
            encode_into(dt, &xs, &mut got);
            for (i, x) in xs.iter().enumerate() {
                let want = &targets::sim::to_bytes(dt, *x)[..n];
                assert_eq!(&got[i * n..(i + 1) * n], want, "{} of {x:e}", dt.name());
            }
        }
    }

    /// Encoding straight from a weight's f32 bytes gives the bytes the
    /// f64 route gives, for every type packing writes, NaN and rounding
    /// ties included, from any start.
    #[test]
    fn encoding_from_f32_bytes_matches_the_f64_route() {
        let values: Vec<f32> = vec![
            1.0,
            -2.5,
            365.0,
            367.0,
            1.0 + 1.0 / 256.0,
            f32::NAN,
            f32::INFINITY,
            -0.0,
            3.3e-39,
            65504.0,
            1e-8,
            -7.75,
        ];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = crate::ir::Tensor::f32_bytes(vec![values.len()], bytes.into());
        let wide: Vec<f64> = values.iter().map(|v| f64::from(*v)).collect();
        for dt in [DType::F32, DType::Bf16, DType::F16] {
            for start in [0, 3] {
                let n = values.len() - start;
                let mut direct = vec![0u8; n * dt.bytes() as usize];
                encode_elements(&t.data, start, dt, &mut direct);
                let mut via = vec![0u8; direct.len()];
                encode_into(dt, &wide[start..], &mut via);
                assert_eq!(direct, via, "{}", dt.name());
            }
        }
        assert!(!t.data.is_decoded(), "read from the bytes");
    }

    #[test]
    fn broadcast_offsets_follow_numpy() {
        // [3] to [2, 3]: rows repeat.
        assert_eq!(broadcast_offsets(&[3], &[2, 3]), [0, 1, 2, 0, 1, 2]);
        // [2, 1] to [2, 3]: columns repeat.
        assert_eq!(broadcast_offsets(&[2, 1], &[2, 3]), [0, 0, 0, 1, 1, 1]);
        // [1, 2, 1] to [2, 2, 2], and a scalar.
        assert_eq!(
            broadcast_offsets(&[1, 2, 1], &[2, 2, 2]),
            [0, 0, 1, 1, 0, 0, 1, 1]
        );
        assert_eq!(broadcast_offsets(&[], &[2]), [0, 0]);
        // Same shape: the identity.
        assert_eq!(broadcast_offsets(&[2, 2], &[2, 2]), [0, 1, 2, 3]);
        // A scalar to a scalar, and an empty target.
        assert_eq!(broadcast_offsets(&[], &[]), [0]);
        assert!(broadcast_offsets(&[3], &[0, 3]).is_empty());
    }

    /// Against the flat index taken apart digit by digit, on shapes with
    /// every mix of broadcast dimensions.
    #[test]
    fn broadcast_offsets_match_digit_by_digit() {
        let reference = |from: &[usize], to: &[usize]| -> Vec<usize> {
            let lead = to.len() - from.len();
            let n: usize = to.iter().product();
            (0..n)
                .map(|flat| {
                    let (mut rest, mut at, mut stride) = (flat, 0, 1);
                    let mut digits = vec![0; to.len()];
                    for d in (0..to.len()).rev() {
                        digits[d] = rest % to[d];
                        rest /= to[d];
                    }
                    for j in (0..from.len()).rev() {
                        if from[j] != 1 {
                            at += digits[lead + j] * stride;
                        }
                        stride *= from[j];
                    }
                    at
                })
                .collect()
        };
        let to = [2, 3, 1, 4];
        for mask in 0..16u32 {
            for keep in 0..=to.len() {
                let from: Vec<usize> = to[to.len() - keep..]
                    .iter()
                    .enumerate()
                    .map(|(k, &d)| if mask >> k & 1 == 1 { 1 } else { d })
                    .collect();
                assert_eq!(
                    broadcast_offsets(&from, &to),
                    reference(&from, &to),
                    "{from:?}"
                );
            }
        }
    }
}
