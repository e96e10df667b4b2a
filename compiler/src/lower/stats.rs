//! What a compiled model and each of its regions must cost at least: the
//! roofline bound and the per-region work and traffic behind it.

use super::emit::Base;
use super::{Compiled, Lowerer};
use crate::ir::{Graph, Op, ValueId};
use isa_specs::Machine;
use isa_specs::model::MemId;

/// The roofline bound of a compiled model: neither the compute units nor the
/// memory can do better. Bytes of the home memory count at the rate the level
/// that serves them has: those moved by transfers at the home memory's
/// bandwidth, and those compute instructions read where they lie (weights
/// resident in the banks of a processing-in-memory machine) at the fastest
/// rate such an instruction reads them ([`in_place_rate`]).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Roofline {
    /// MACs over the machine's peak MACs per cycle (all units, all copies).
    pub compute_cycles: u64,
    /// Bytes that must cross the home memory's interface over its bandwidth.
    pub memory_cycles: u64,
    /// Bytes read in place (never crossing the interface) over the rate
    /// compute instructions read them there; 0 on a machine without.
    pub in_place_cycles: u64,
    /// The largest of the three.
    pub cycles: u64,
}

impl Compiled {
    /// The roofline bound on machine `m`.
    pub fn roofline(&self, m: &Machine) -> Roofline {
        Roofline::of(m, self.macs, self.min_home_bytes, self.min_in_place_bytes)
    }
}

impl Roofline {
    /// The bound of `macs` multiply-accumulates, `home_bytes` across the
    /// home memory's interface and `in_place_bytes` read where they lie, on
    /// machine `m`.
    pub fn of(m: &Machine, macs: u64, home_bytes: u64, in_place_bytes: u64) -> Roofline {
        let (peak, bw) = roof(m);
        let compute_cycles = if peak > 0 {
            macs.div_ceil(peak as u64)
        } else {
            0
        };
        let memory_cycles = home_bytes.div_ceil(bw);
        let in_place_cycles = match home_mem(m).and_then(|h| in_place_rate(m, h)) {
            Some(rate) => (in_place_bytes as f64 / rate).ceil() as u64,
            // Nothing reads in place: any such bytes crossed the interface.
            None => in_place_bytes.div_ceil(bw),
        };
        Roofline {
            compute_cycles,
            memory_cycles,
            in_place_cycles,
            cycles: compute_cycles
                .max(memory_cycles)
                .max(in_place_cycles)
                .max(1),
        }
    }
}

impl std::fmt::Display for Roofline {
    /// Its parts: `compute C, home memory M` and `, in place P` where
    /// anything is read in place.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "compute {}, home memory {}",
            self.compute_cycles, self.memory_cycles
        )?;
        if self.in_place_cycles > 0 {
            write!(f, ", in place {}", self.in_place_cycles)?;
        }
        Ok(())
    }
}

/// The home memory: the largest off-chip one.
fn home_mem(m: &Machine) -> Option<MemId> {
    m.memories
        .iter()
        .enumerate()
        .filter(|(_, x)| x.kind.off_chip())
        .max_by_key(|(_, x)| x.size.value)
        .map(|(i, _)| MemId(i as u32))
}

/// The peak MACs per cycle (every unit, every copy) and the home memory's
/// bandwidth (bytes per cycle, at least 1) of `m`: the two roofs of the
/// bound ([`Roofline`]).
pub fn roof(m: &Machine) -> (i64, u64) {
    let peak: i64 = m
        .units
        .iter()
        .map(|u| u.macs_per_cycle.value * u.count.value.max(1))
        .sum();
    let bw = home_mem(m).map_or(1, |h| m.memories[h.index()].bandwidth.value.max(1));
    (peak, bw as u64)
}

/// The fastest rate, in bytes per cycle over every copy of its unit, at
/// which an instruction that computes (not a copy: its semantics is more
/// than `dst = src`) reads a memory operand in `mem`, taken at its
/// immediates' largest values: its operand's bytes over its occupancy. A
/// processing-in-memory machine's all-bank MAC reads every bank's row at
/// once, far beyond the interface's bandwidth. `None` where no computing
/// instruction reads `mem`.
pub fn in_place_rate(m: &Machine, mem: MemId) -> Option<f64> {
    use isa_specs::model::{AssignOp, OperandKind, SemExpr, Stmt};
    let params: Vec<i64> = m.params.iter().map(|p| p.value).collect();
    let mut best: Option<f64> = None;
    for def in &m.instructions {
        let moves = |v: &SemExpr| match v {
            SemExpr::Access(_) => true,
            SemExpr::Cast(_, inner) => matches!(inner.as_ref(), SemExpr::Access(_)),
            _ => false,
        };
        let computes = def.semantics.stmts.iter().any(|st| match st {
            Stmt::Assign { op, value, .. } => *op != AssignOp::Set || !moves(value),
            Stmt::Action(_) => false,
        });
        if !computes {
            continue;
        }
        let imms: Vec<Option<i64>> = def
            .operands
            .iter()
            .map(|o| match o.kind {
                OperandKind::Imm { hi, .. } => Some(hi),
                _ => None,
            })
            .collect();
        let env = isa_specs::eval::WithOperands {
            params: &params,
            operands: &imms,
        };
        let occupancy = isa_specs::eval::eval_int(&def.timing.occupancy, &env)
            .ok()
            .filter(|o| *o > 0);
        let Some(occupancy) = occupancy else {
            continue;
        };
        let copies = m.units[def.timing.unit.index()].count.value.max(1);
        for o in &def.operands {
            let OperandKind::Mem {
                mem: at,
                shape,
                dtype,
                ..
            } = &o.kind
            else {
                continue;
            };
            if *at != mem {
                continue;
            }
            let elems: Option<i64> = shape
                .iter()
                .map(|d| isa_specs::eval::eval_int(d, &env).ok())
                .product();
            if let Some(n) = elems {
                let rate = (n * dtype.bytes() as i64 * copies) as f64 / occupancy as f64;
                best = Some(best.map_or(rate, |b| b.max(rate)));
            }
        }
    }
    best
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
    /// Bytes of its constant inputs a contraction reads where they lie at
    /// home (not in `home_bytes`).
    pub in_place_bytes: u64,
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
        Roofline::of(m, self.macs, self.home_bytes, self.in_place_bytes)
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

/// Multiply-accumulates of one node (matrix products only).
impl Lowerer<'_> {
    /// Whether `x`, joined into `out`, was written into `out`'s rows by
    /// the runner (an input laid out in place, `in_place_dot_homes`).
    pub(super) fn written_in_place(&self, x: ValueId, out: ValueId) -> bool {
        match (self.layout.homes.get(&x), self.layout.homes.get(&out)) {
            (Some(a), Some(b)) => {
                a.mem == b.mem && a.base == b.base && matches!(a.base, Base::Fixed(_))
            }
            _ => false,
        }
    }

    /// Whether input `v` lies where a contraction reads it in place: in
    /// the rows of a value read so (a key cache the runner writes into
    /// the layout the products read).
    pub(super) fn input_in_place(&self, v: ValueId) -> bool {
        self.pool
            .read_in_place
            .iter()
            .any(|&r| r != v && !self.g.constants.contains_key(&r) && self.written_in_place(v, r))
    }
}

pub(super) fn node_macs(g: &Graph, n: &crate::ir::Node) -> u64 {
    if !matches!(n.op, Op::MatMul) {
        return 0;
    }
    let o = &g.ty(n.outputs[0]).shape;
    let k = *g.ty(n.inputs[0]).shape.last().unwrap_or(&1);
    o.iter().product::<usize>() as u64 * k as u64
}

impl Lowerer<'_> {
    /// Per region: its work, its least home traffic, and its bundles, given
    /// the bundle each instruction went to.
    pub(super) fn region_stats(
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
            .plan
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
                // In the narrowest type it was packed in (as the whole
                // model's bound counts it).
                let packed = self.pool.packed_elem_bytes.get(&v).copied();
                return t.ty.numel() as u64
                    * packed.unwrap_or(u64::MAX).min(self.layout.act.bytes());
            }
            match self.layout.homes.get(&v) {
                Some(h) if matches!(h.base, Base::Fixed(_)) => {
                    g.ty(v).numel() as u64 * h.dtype.bytes()
                }
                _ => 0,
            }
        };
        // Parts of a join the runner wrote in place (`in_place_dot_homes`):
        // neither read nor written by the join.
        let mut joined_in_place: std::collections::HashMap<ValueId, u64> = Default::default();
        let mut lie_in_place: std::collections::HashSet<ValueId> = Default::default();
        for n in g.nodes.iter().filter(|n| matches!(n.op, Op::Concat { .. })) {
            for &x in &n.inputs {
                if self.written_in_place(x, n.outputs[0]) {
                    lie_in_place.insert(x);
                    *joined_in_place.entry(n.outputs[0]).or_default() += bytes(x);
                }
            }
        }
        self.plan
            .region_groups
            .iter()
            .map(|parts| {
                let members: std::collections::HashSet<usize> = parts
                    .iter()
                    .flat_map(|&k| self.plan.region_parts[k].0.iter().copied())
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
                        let (a, b) = self.plan.region_parts[k].1;
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
                let in_place = |v: &ValueId| self.pool.read_in_place.contains(v);
                let written = |v: ValueId| {
                    bytes(v).saturating_sub(joined_in_place.get(&v).copied().unwrap_or(0))
                };
                RegionStats {
                    macs,
                    in_place_bytes: inputs.iter().copied().filter(in_place).map(read).sum(),
                    home_bytes: inputs
                        .into_iter()
                        .filter(|v| !in_place(v) && !lie_in_place.contains(v))
                        .map(read)
                        .chain(outputs.into_iter().map(written))
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
}
