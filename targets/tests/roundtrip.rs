//! For every instruction of every shipped target: encode/decode and
//! print/parse round trips over many operand values, and a snapshot table of
//! (instruction, hex, assembly) per target.

use isa_specs::model::*;
use isa_specs::target::{self, Bundle, OpValue};

mod common;

use common::{Rng, instance};

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
