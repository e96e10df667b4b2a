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
//!    ([`rows`]); attention is one region ([`crate::passes::fuse`]). Values passed between
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
//! Each stage is a module owning the value it produces in the `Lowerer`:
//! `layout` (`Layout`: every value's home), `residency` (`Kept`: values kept
//! on chip across regions), `regions` (`RegionPlan`, `Fusion`, `Trials`: the
//! regions lowered in order), `tiles` (`TileCache`: tilings and operands on
//! chip), `pool` (`Pool`: constants packed at home) and `backend` (the
//! [`Compiled`] result). This file is the driver: [`compile_mapped`] runs a
//! compile and takes the fallback order of [`options`] when it fails.
//!
//! Nothing here names a target: every choice comes from the machine model
//! and the generated tables.

mod backend;
mod columns;
mod copy;
pub mod emit;
mod error;
pub mod gemv;
mod layout;
pub mod machine;
pub mod mapping;
mod matmul;
pub mod ops;
pub mod options;
mod pool;
mod reduce;
mod regions;
mod residency;
pub mod rows;
mod scalar;
mod stats;
mod tiles;
mod transpose;
pub mod types;
mod window;

use crate::ir::{Graph, Op};
use crate::passes::{canon, fuse, rowgroups, select};
use crate::regalloc;
use crate::timing::PassTimes;
pub use backend::print_virtual;
use emit::Emitter;
pub use error::LowerError;
use error::err;
use isa_specs::Machine;
use isa_specs::model::DType;
use isa_specs::program::Program;
use isa_specs::target::{Bundle, MInst};
use layout::{Home, Layout, view};
use machine::{Info, Loc, Place};
use mapping::{Mappings, SpaceEntry};
use ops::Ew;
pub use options::{Fallback, OPTIONS, Opt, OptionInfo, Options, When, fallbacks};
use pool::{PackKey, PanelKey, Pool};
pub use pool::{broadcast_offsets, encode, encode_elements, encode_into};
use regions::{Fusion, RegionPlan, Trials};
use residency::Kept;
pub use stats::{RegionStats, Roofline, roof};
use std::collections::HashMap;
use tiles::{Operand, TileCache};

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
    /// Bytes of the constants contractions read where they lie at home,
    /// at least once (not in `min_home_bytes`).
    pub min_in_place_bytes: u64,
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

/// One compile in progress: the graph, the emitter, and the value of each
/// stage so far.
struct Lowerer<'a> {
    g: &'a Graph,
    e: Emitter<'a>,
    info: &'a Info,
    /// [`Layout`].
    layout: Layout,
    /// [`Pool`].
    pool: Pool,
    /// [`RegionPlan`].
    plan: RegionPlan,
    /// [`Fusion`].
    fusion: Fusion,
    /// [`Trials`].
    trials: Trials,
    /// [`Kept`].
    kept: Kept<'a>,
    /// The node whose region is being lowered.
    lowering_node: usize,
    /// The optimisations asked for.
    opts: Options,
    /// [`TileCache`].
    cache: TileCache,
    /// Mappings of products given from outside.
    mappings: &'a Mappings,
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
        return Err(LowerError::InvalidInput {
            message: format!(
                "the mappings given were chosen for `{want}`, not `{}`",
                m.name
            ),
        });
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
            // the node that failed at home, a few times; then with the
            // optimisations of the fallback order switched off one by one.
            Err((e, Some(node))) if opts.residency && evicted.len() < MAX_EVICTIONS => {
                notes.push(format!(
                    "the values `{node}` reads and writes are kept at home: on chip, {e}"
                ));
                evicted.push(node);
            }
            Err((e, blamed)) => {
                let mut step = None;
                for (o, f) in fallbacks() {
                    if !opts.get(o) {
                        continue;
                    }
                    let applies = match f.when {
                        When::Always => true,
                        When::RowGroupsAndNoNodeBlamed => {
                            blamed.is_none()
                                && !rowgroups::row_groups(&canon_for(t, m, g, opts)?).is_empty()
                        }
                        When::Attention => !fuse::attention(&canon_for(t, m, g, opts)?).is_empty(),
                        When::ConvWindows => canon_for(t, m, g, opts)?
                            .nodes
                            .iter()
                            .any(|n| matches!(n.op, crate::ir::Op::Im2Row { .. })),
                    };
                    if applies {
                        step = Some((o, f));
                        break;
                    }
                }
                let Some((o, f)) = step else {
                    return Err(strict_hint(t, m, g, opts, e));
                };
                opts.set(o, false);
                notes.push(format!("{}: {e}", f.note));
            }
        }
    }
}

/// `e`, where it is a missing operation that an approximation would have
/// computed, saying so (the user asked for `--strict`).
fn strict_hint(
    t: &targets::Target,
    m: &Machine,
    g: &Graph,
    opts: Options,
    e: LowerError,
) -> LowerError {
    let LowerError::MissingOperation { semantics, .. } = e.cause() else {
        return e;
    };
    let relaxed = Options {
        approximations: true,
        ..opts
    };
    let reached = opts.identities
        && !opts.approximations
        && canon_for(t, m, g, relaxed).is_ok_and(|r| {
            !r.nodes
                .iter()
                .any(|n| Ew::of(&n.op).is_some_and(|ew| ew.text() == *semantics))
        });
    if !reached {
        return e;
    }
    e.reworded(|m| {
        format!(
            "{m}; an approximation would compute it from the instructions the machine has (within the bound `docs/compiler.md` states, \"Instruction selection\"), but `--strict` refuses approximations"
        )
    })
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
    let act = activation_dtype(m, &info)?;
    let caps = canon::Caps {
        min_reduction: !reduce::forms(&probe, crate::ir::ReduceKind::Min).is_empty(),
        lane_broadcast: opts.broadcast_rows && !ops::row_broadcast_files(&probe).is_empty(),
        row_chunk: ops::lane_broadcast_files(&probe)
            .first()
            .filter(|_| opts.fuse_rows && opts.broadcast_rows && opts.skip_masked)
            .map(|&f| probe.granule(f).1.max(1) as usize),
        mask_by_position: opts.mask_by_position
            && ops::lane_broadcast_files(&probe)
                .first()
                .is_some_and(|&f| ops::causal_form(&probe, f, (0, 0)).is_some()),
        conv_rows: Some((info.home_align / act.bytes().max(1)).max(1) as usize)
            .filter(|_| opts.conv_rows),
        b_as_rows: opts.layout_fusion
            && ops::contractions(&probe).iter().any(|c| {
                c.b_dims.len() == 2
                    && c.b_dims[0] == ops::Role::N
                    && c.locs(&probe)
                        .is_some_and(|l| l[2].place != Place::Mem(info.home))
            }),
        windows_in_place: opts.window_operands,
        narrow_products: !ops::contractions(&probe)
            .iter()
            .any(|c| c.locs(&probe).is_some_and(|l| l[1].dtype == DType::F32)),
    };
    let relaid = |g: Graph| match opts.cancel_transposes {
        true => crate::passes::layout::cancel_transposes(g),
        false => g,
    };
    if !opts.identities {
        return canon::prepare(g, caps)
            .map(relaid)
            .map_err(LowerError::from);
    }
    // Before the rewrites, so they see (and broadcast) the nodes selection
    // makes; and after, for the nodes they make (a negation).
    let costs = selection_costs(&probe);
    let compared = canon::widen_compared(g, caps).map_err(LowerError::from)?;
    let selected = select::select(&compared, &costs, opts.approximations);
    let prepared = canon::prepare(&selected, caps).map_err(LowerError::from)?;
    Ok(relaid(select::select(
        &prepared,
        &costs,
        opts.approximations,
    )))
}

/// What each operation of instruction selection's language costs on the
/// machine ([`select::Costs`]), from its instructions' occupancy. Division
/// counts as had wherever a reciprocal is: the lowering divides by a
/// reciprocal times itself, once per row for a row result and at compile
/// time for a constant, which a rewrite of the graph cannot express.
fn selection_costs(e: &Emitter) -> select::Costs {
    let mut ops = HashMap::new();
    for (name, op) in select::operations() {
        if let Some(c) = Ew::of(&op).and_then(|ew| ops::ew_cost(e, ew)) {
            ops.insert(name, c);
        }
    }
    if !ops.contains_key("/")
        && let (Some(r), Some(m)) = (ops.get("recip"), ops.get("*"))
    {
        ops.insert("/", r + m);
    }
    select::Costs { ops }
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
        plain(LowerError::InvalidInput {
            message: format!("the graph fails the IR verifier: {}", e.join("; ")),
        })
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
        return Err(plain(LowerError::InvalidInput {
            message: format!(
                "a mapping is given for `{missing}`, which is not a matrix product of the model (`--emit space` lists them)"
            ),
        }));
    }
    let act = activation_dtype(m, &info).map_err(plain)?;
    let build = |unfronted: &[usize], unskipped: &[usize]| {
        let mut l = Lowerer::new(t, m, g, &info, act, opts, mappings);
        l.decide_fusion(unfronted, unskipped);
        l.kept.evicted = evicted;
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
            Err(_) if l.trials.unskip.is_some() => unskipped.extend(l.trials.unskip),
            Err(_) if l.trials.unfront.is_some() => unfronted.extend(l.trials.unfront),
            Err(e) => {
                let blame = l
                    .touches_kept(&e)
                    .then(|| g.nodes[l.lowering_node].name.clone());
                times.add("lower", started.elapsed());
                return Err((e, blame));
            }
        }
    };
    times.add("lower", started.elapsed().saturating_sub(l.pool.packing));
    times.add("pack constants", l.pool.packing);
    l.back_end(t, m, times).map_err(plain)
}

/// The type activations are kept in at home: the first of f32, bf16 and f16
/// that the home memory can both load and store.
fn activation_dtype(m: &Machine, info: &Info) -> Result<DType, LowerError> {
    let home_mem = info.home;
    let loadable = |dt: DType| {
        let here = Loc {
            place: Place::Mem(home_mem),
            dtype: dt,
        };
        info.copies.iter().any(|c| c.from == here) && info.copies.iter().any(|c| c.to == here)
    };
    [DType::F32, DType::Bf16, DType::F16]
        .into_iter()
        .find(|d| loadable(*d))
        .ok_or_else(|| {
            err(format!(
                "no instruction loads or stores floating-point tensors of memory `{}`",
                m.memories[home_mem.index()].name
            ))
        })
}

impl<'a> Lowerer<'a> {
    /// A lowerer of `g` for machine `m` with nothing decided yet.
    fn new(
        t: &'a targets::Target,
        m: &'a Machine,
        g: &'a Graph,
        info: &'a Info,
        act: DType,
        opts: Options,
        mappings: &'a Mappings,
    ) -> Lowerer<'a> {
        let mut l = Lowerer {
            g,
            e: Emitter::new(m, t.isa(), info),
            info,
            layout: Layout {
                homes: HashMap::new(),
                act,
                relayouts: Default::default(),
                dot_transposes: Default::default(),
                transposed: Vec::new(),
                b_transposes: Default::default(),
                lowered_transposes: Default::default(),
                sliced: HashMap::new(),
                head_views: HashMap::new(),
                windows: HashMap::new(),
            },
            pool: Pool {
                next_addr: 0,
                data: Vec::new(),
                packed: HashMap::new(),
                packed_panels: HashMap::new(),
                packed_elem_bytes: HashMap::new(),
                read_in_place: std::collections::HashSet::new(),
                packing: std::time::Duration::ZERO,
            },
            plan: RegionPlan {
                regions: Vec::new(),
                region_parts: Vec::new(),
                region_side: Vec::new(),
                region_groups: Vec::new(),
                value_sides: HashMap::new(),
                space: Vec::new(),
            },
            fusion: Fusion {
                attentions: Vec::new(),
                row_groups: Vec::new(),
                skips: Vec::new(),
                contractions: Vec::new(),
            },
            kept: Kept {
                kept_until: HashMap::new(),
                residency_blocked: None,
                evicted: &[],
            },
            trials: Trials {
                unfront: None,
                unskip: None,
                group_trials: HashMap::new(),
                tile_share: 4,
            },
            cache: TileCache {
                kept_a: None,
                kept_b: HashMap::new(),
                staged_rows: HashMap::new(),
                fills: HashMap::new(),
            },
            lowering_node: 0,
            opts,
            mappings,
        };
        l.e.spread_transfers = opts.spread_transfers;
        l
    }

    /// The fusion decisions taken on the graph before layout: attentions,
    /// row groups (but those started at `unfronted` taking their
    /// producer's nodes), the masked work they skip (but for the groups
    /// `unskipped`), the contractions, and the transposes and slices the
    /// layout reads in place.
    fn decide_fusion(&mut self, unfronted: &[usize], unskipped: &[usize]) {
        if self.opts.fuse_attention {
            self.fusion.attentions = fuse::attention(self.g)
                .into_iter()
                .map(|a| (a, (0, 0)))
                .collect();
        }
        if self.opts.fuse_rows && self.opts.broadcast_rows {
            // Only groups the machine can compute: the others' values are
            // candidates for residency like any.
            self.fusion.row_groups =
                rowgroups::row_groups_with(self.g, unfronted, ops::can_broadcast_rows(&self.e))
                    .into_iter()
                    .filter(|r| !self.row_candidates(r).is_empty())
                    .collect();
            if self.opts.skip_masked {
                self.fusion.skips = self
                    .fusion
                    .row_groups
                    .iter()
                    .filter(|r| !unskipped.contains(&r.seed))
                    .filter_map(|r| {
                        let (file, plan) = self.row_candidates(r).into_iter().next()?;
                        rows::masked::skip(self.g, r, &plan, file, self.e.granule(file))
                    })
                    .collect();
            }
        }
        self.fusion.contractions = ops::contractions(&self.e);
        self.layout.dot_transposes = self.dot_transposes();
        if self.opts.layout_fusion {
            self.layout.transposed = Self::transposed_products(self.g);
            self.layout.b_transposes = self.b_transposes();
            self.layout.sliced = self.sliced_transposes();
            self.layout.head_views = self.head_views();
        }
        if self.opts.window_operands {
            self.layout.windows = self.window_operands();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tiles::widest_spread;
    use super::{DType, broadcast_offsets, encode_elements, encode_into};

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
