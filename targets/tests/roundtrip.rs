//! For every instruction of every shipped target: encode/decode and
//! print/parse round trips over many operand values, and a snapshot table of
//! (instruction, hex, assembly) per target.

use isa_specs::Machine;
use isa_specs::model::*;
use isa_specs::target::{self, Bundle, MInst, OpValue};

/// A small deterministic generator (xorshift), so failures reproduce from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `lo..=hi`, with the ends and small values more likely.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (i128::from(hi) - i128::from(lo)) as u128 + 1;
        match self.next() % 4 {
            0 => lo,
            1 => hi,
            2 => lo + (self.next() as u128 % span.min(16)) as i64,
            _ => (i128::from(lo) + (self.next() as u128 % span) as i128) as i64,
        }
    }
}

fn field_width(m: &Machine, inst: &Instruction, index: usize) -> u32 {
    let format = &m.formats[inst.encoding.format.index()];
    inst.encoding
        .fields
        .iter()
        .find(|f| f.source == FieldSource::Operand(OperandId::from_index(index)))
        .map_or(0, |f| format.fields[f.field].width())
}

/// A random legal value for one operand.
fn operand(rng: &mut Rng, m: &Machine, inst: &Instruction, index: usize) -> OpValue {
    let width = field_width(m, inst, index);
    match &inst.operands[index].kind {
        OperandKind::Reg { file, .. } => {
            OpValue::Reg(rng.range(0, m.regfiles[file.index()].count.value - 1) as u32)
        }
        OperandKind::Sem { bank } => {
            OpValue::Sem(rng.range(0, m.semaphores[bank.index()].count.value - 1) as u32)
        }
        OperandKind::Imm { lo, hi } => OpValue::Imm(rng.range(*lo, *hi)),
        OperandKind::Mem { mem, align, .. } => {
            let size = m.memories[mem.index()].size.value as u128;
            let reach = if width >= 64 {
                u128::MAX
            } else {
                (1u128 << width) * u128::from(*align)
            };
            let units = (size.min(reach) / u128::from(*align)).max(1) as i64;
            OpValue::Addr(rng.range(0, units - 1) as u64 * align)
        }
        OperandKind::ImmReal { dtype } => loop {
            let bits = rng.next()
                & if dtype.bytes() >= 4 {
                    u64::from(u32::MAX)
                } else {
                    (1 << (dtype.bytes() * 8)) - 1
                };
            let x = isa_specs::dtype::decode_real(*dtype, bits);
            if x.is_finite() {
                break OpValue::Real(x);
            }
        },
    }
}

/// A random instance that satisfies the instruction's constraints (`None` if none was found).
fn instance(rng: &mut Rng, m: &Machine, id: InstId) -> Option<MInst> {
    let inst = &m.instructions[id.index()];
    (0..200).find_map(|_| {
        let operands = (0..inst.operands.len())
            .map(|i| operand(rng, m, inst, i))
            .collect();
        let mi = MInst { inst: id, operands };
        target::check_constraints(m, &mi).is_ok().then_some(mi)
    })
}

fn is_nop(inst: &Instruction) -> bool {
    inst.semantics
        .stmts
        .iter()
        .all(|s| matches!(s, Stmt::Action(Action::Nop)))
}

#[test]
fn every_instruction_round_trips() {
    for t in targets::all() {
        let (m, isa) = (t.machine(), t.isa());
        for (i, def) in m.instructions.iter().enumerate() {
            let id = InstId::from_index(i);
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
            let mut tried = 0;
            for _ in 0..64 {
                let Some(inst) = instance(&mut rng, m, id) else {
                    continue;
                };
                tried += 1;
                let slot = def.timing.slots[0];
                let bundle = Bundle {
                    ops: vec![(slot, inst.clone())],
                };
                let word = target::encode_bundle(isa, m, &bundle)
                    .unwrap_or_else(|e| panic!("{}: encode {inst:?}: {e}", t.name()));
                let back = target::decode_bundle(isa, m, &word)
                    .unwrap_or_else(|e| panic!("{}: decode {}: {e}", t.name(), def.name));
                if is_nop(def) && back.ops.is_empty() {
                    // An all-zero nop decodes as the empty slot: the same machine behaviour.
                } else {
                    assert_eq!(
                        back,
                        bundle,
                        "{}: decode(encode(x)) for `{}`",
                        t.name(),
                        def.name
                    );
                }
                let text = isa.print_inst(m, &inst);
                let parsed = isa
                    .parse_inst(m, &text)
                    .unwrap_or_else(|e| panic!("{}: parse `{text}`: {e}", t.name()));
                assert_eq!(parsed, inst, "{}: parse(print(x)) for `{text}`", t.name());
                let line = target::print_bundle(isa, m, &back);
                let reparsed = target::parse_bundle(isa, m, &line)
                    .unwrap_or_else(|e| panic!("{}: parse bundle `{line}`: {e}", t.name()));
                assert_eq!(reparsed, back, "{}: bundle text `{line}`", t.name());
            }
            assert!(
                tried > 0,
                "{}: no legal instance of `{}` found",
                t.name(),
                def.name
            );
        }
    }
}

#[test]
fn out_of_range_operands_are_refused_not_truncated() {
    for t in targets::all() {
        let (m, isa) = (t.machine(), t.isa());
        for (i, def) in m.instructions.iter().enumerate() {
            let mut rng = Rng(7 + i as u64);
            let Some(good) = instance(&mut rng, m, InstId::from_index(i)) else {
                continue;
            };
            for (oi, o) in def.operands.iter().enumerate() {
                let bad = match &o.kind {
                    OperandKind::Reg { file, .. } => {
                        OpValue::Reg(m.regfiles[file.index()].count.value as u32)
                    }
                    OperandKind::Sem { bank } => {
                        OpValue::Sem(m.semaphores[bank.index()].count.value as u32)
                    }
                    OperandKind::Imm { hi, .. } if *hi < i64::MAX => OpValue::Imm(hi + 1),
                    OperandKind::Mem { align, .. } if *align > 1 => OpValue::Addr(*align / 2),
                    _ => continue,
                };
                let mut inst = good.clone();
                inst.operands[oi] = bad;
                let bundle = Bundle {
                    ops: vec![(def.timing.slots[0], inst)],
                };
                assert!(
                    target::encode_bundle(isa, m, &bundle).is_err(),
                    "{}: `{}` accepted a bad `{}`",
                    t.name(),
                    def.name,
                    o.name
                );
            }
        }
    }
}

/// One line per instruction: a deterministic instance, its microcode word in hex, its assembly.
#[test]
fn encoding_tables() {
    for t in targets::all() {
        let (m, isa) = (t.machine(), t.isa());
        let mut table = format!(
            "{:<14} {:<width$}  assembly\n",
            "instruction",
            "hex (slot bits)",
            width = 34
        );
        for (i, def) in m.instructions.iter().enumerate() {
            let mut rng = Rng(0xC0FFEE + i as u64);
            let Some(inst) = instance(&mut rng, m, InstId::from_index(i)) else {
                continue;
            };
            let slot = &m.slots[def.timing.slots[0].index()];
            let mut w = vec![0u64; target::bits::words(slot.width())];
            isa.encode_inst(m, &inst, &mut w)
                .expect("legal instance encodes");
            let hex = target::bits::hex(&w, slot.width());
            table.push_str(&format!(
                "{:<14} {:<width$}  {}\n",
                def.name,
                hex,
                isa.print_inst(m, &inst),
                width = 34
            ));
        }
        insta::assert_snapshot!(format!("encoding_table_{}", t.name()), table);
    }
}
