//! The back end: buffers placed, registers allocated, instructions
//! scheduled into bundles, each with its checker; then the program encoded.

use super::emit;
use super::error::{LowerError, err, overflow};
use super::layout::Home;
use super::stats::node_macs;
use super::tiles::widest_spread;
use super::{Compiled, Lowerer};
use crate::ir::ValueId;
use crate::timing::PassTimes;
use crate::{memplan, regalloc, sched};
use isa_specs::Machine;
use isa_specs::model::OperandKind;
use isa_specs::program::{Program, TensorDesc};
use isa_specs::target::{Bundle, MInst};

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

/// A memory's `(name, peak bytes, capacity)` in the buffer plan.
type BufferUse = (String, u64, u64);

impl Lowerer<'_> {
    /// Back end: buffers, registers, schedule, encoding.
    pub(super) fn back_end(
        mut self,
        t: &targets::Target,
        m: &Machine,
        times: &mut PassTimes,
    ) -> Result<Compiled, LowerError> {
        let (buffers, bases) = self.place_buffers(m, times)?;
        let (code, insts) = self.allocate_registers(m, times)?;
        times
            .time("check buffers", || {
                self.check_footprints(t, m, &insts, &bases)
            })
            .map_err(|e| err(format!("an instruction writes outside its buffer: {e}")))?;
        let rules = sched::Rules {
            transfers_are_barriers: !self.opts.overlap_transfers,
            reverse_priorities: self.opts.reverse_priorities,
            finish_chains: self.opts.finish_chains,
        };
        let (bundles, placed) = sched::schedule_checked(t, m, &insts, rules, times)
            .map_err(|e| err(format!("schedule is invalid: {}", e.join("; "))))?;
        let mut program = encode_program(t, m, &bundles, times)?;
        program.data = std::mem::take(&mut self.pool.data);
        let home_name = m.memories[self.home_mem().index()].name.clone();
        let desc = |v: ValueId, h: &Home| -> Result<TensorDesc, LowerError> {
            Ok(TensorDesc {
                name: self.g.values[v.index()].name.clone(),
                dtype: h.dtype,
                shape: self.g.ty(v).shape.iter().map(|d| *d as u64).collect(),
                memory: home_name.clone(),
                addr: h.addr()? + h.first as u64 * h.dtype.bytes(),
                pitch: if h.pitch == h.cols && h.columns.is_none() {
                    0
                } else {
                    h.pitch as u64
                },
                batch: h.batch.map(|(rows, stride)| (rows as u64, stride as u64)),
                columns: h.columns,
            })
        };
        for v in &self.g.inputs {
            let h = &self.layout.homes[v];
            program.inputs.push(desc(*v, h)?);
        }
        for v in &self.g.outputs {
            let h = self
                .layout
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
        let constant_bytes = |in_place: bool| -> u64 {
            self.g
                .constants
                .iter()
                .filter(|(v, _)| self.pool.read_in_place.contains(v) == in_place)
                .map(|(v, t)| {
                    let packed = self.pool.packed_elem_bytes.get(v).copied();
                    t.ty.numel() as u64 * packed.unwrap_or(u64::MAX).min(self.layout.act.bytes())
                })
                .sum()
        };
        let io_bytes = |in_place: bool| -> u64 {
            self.g
                .inputs
                .iter()
                .chain(&self.g.outputs)
                .filter(|v| self.input_in_place(**v) == in_place)
                .map(|v| self.g.ty(*v).numel() as u64 * self.layout.homes[v].dtype.bytes())
                .sum()
        };
        let min_home_bytes = io_bytes(false) + constant_bytes(false);
        let min_in_place_bytes = io_bytes(true) + constant_bytes(true);
        Ok(Compiled {
            program,
            bundles,
            insts,
            regions: self.plan.regions,
            selected: code,
            buffers,
            macs,
            min_home_bytes,
            min_in_place_bytes,
            region_stats,
            notes: match &self.kept.residency_blocked {
                Some(why) if self.opts.residency => {
                    vec![format!("values not kept on chip across regions: {why}")]
                }
                _ => Vec::new(),
            },
            space: self.plan.space,
            kept_on_chip: self.kept.kept_until.len(),
            passes: PassTimes::default(),
        })
    }

    /// Places the on-chip buffers of each memory by liveness (apart where
    /// there is room, `Options::spread_buffers`), checks each plan, and
    /// fixes the addresses of the instructions that name them: each memory's
    /// `(name, peak bytes, capacity)`, and each buffer's offset in its memory.
    fn place_buffers(
        &mut self,
        m: &Machine,
        times: &mut PassTimes,
    ) -> Result<(Vec<BufferUse>, Vec<u64>), LowerError> {
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
                    .map_err(|e| overflow(&mem.name, &e))?,
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
        Ok((buffers, bases))
    }

    /// Checks that every instruction naming on-chip buffers writes only
    /// within them (from the footprints the generated effects give, after
    /// the buffers are placed at `bases`): the memory plan's check sees
    /// buffers' sizes and lives, not a tile that runs past its buffer.
    fn check_footprints(
        &self,
        t: &targets::Target,
        m: &Machine,
        insts: &[MInst],
        bases: &[u64],
    ) -> Result<(), String> {
        if insts.len() != self.e.code.len() {
            return Ok(());
        }
        let mut named: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for &(i, _, b) in &self.e.fixups {
            named.entry(i).or_default().push(b);
        }
        let mut fx = targets::sim::Effects::default();
        for (i, bufs) in named {
            fx.clear();
            t.effects(m, &insts[i], &mut fx);
            for a in fx.accesses.iter().filter(|a| a.write) {
                let targets::sim::Place::Mem { mem, span } = a.place else {
                    continue;
                };
                let mut own = bufs
                    .iter()
                    .filter(|&&b| self.e.bufs[b].mem.index() == mem)
                    .peekable();
                if own.peek().is_none() {
                    continue;
                }
                let inside = own.any(|&b| {
                    let lo = bases[b] as i64;
                    span.start >= lo && span.end <= lo + self.e.bufs[b].size as i64
                });
                if !inside {
                    return Err(format!(
                        "instruction {i} (`{}`) writes bytes {}..{} of `{}`, outside its buffers",
                        m.instructions[insts[i].inst.index()].name,
                        span.start,
                        span.end,
                        m.memories[mem].name
                    ));
                }
            }
        }
        Ok(())
    }

    /// Allocates the registers of the code emitted (each virtual register
    /// within the side of its file it prefers) and checks the allocation
    /// and every instruction's constraints: the code and its instructions.
    fn allocate_registers(
        &mut self,
        m: &Machine,
        times: &mut PassTimes,
    ) -> Result<(Vec<regalloc::VInst>, Vec<MInst>), LowerError> {
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
        Ok((code, insts))
    }
}

/// The bundles encoded into a program's code.
fn encode_program(
    t: &targets::Target,
    m: &Machine,
    bundles: &[Bundle],
    times: &mut PassTimes,
) -> Result<Program, LowerError> {
    let mut program = Program::new(m);
    times.time("encode", || {
        bundles.iter().try_for_each(|b| {
            let word =
                isa_specs::target::encode_bundle(t.isa(), m, b).map_err(|e| err(e.to_string()))?;
            if program.code.is_empty() {
                // Bundles are mostly of one size: grow once, not by doubling.
                program.code.reserve(word.len() * bundles.len());
            }
            program.code.extend_from_slice(&word);
            Ok::<_, LowerError>(())
        })
    })?;
    Ok(program)
}
