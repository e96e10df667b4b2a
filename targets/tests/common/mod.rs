//! Test support shared by the `targets` integration tests: legal random instruction instances.

#![allow(dead_code, reason = "each test binary uses a different part")]

use isa_specs::Machine;
use isa_specs::model::*;
use isa_specs::target::{self, MInst, OpValue};

/// A small deterministic generator (xorshift), so failures reproduce from the seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `lo..=hi`, with the ends and small values more likely.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (i128::from(hi) - i128::from(lo)) as u128 + 1;
        match self.next() % 4 {
            0 => lo,
            1 => hi,
            2 => lo + (self.next() as u128 % span.min(16)) as i64,
            _ => (i128::from(lo) + (self.next() as u128 % span) as i128) as i64,
        }
    }
}

pub fn field_width(m: &Machine, inst: &Instruction, index: usize) -> u32 {
    let format = &m.formats[inst.encoding.format.index()];
    inst.encoding
        .fields
        .iter()
        .find(|f| f.source == FieldSource::Operand(OperandId::from_index(index)))
        .map_or(0, |f| format.fields[f.field].width())
}

/// A random legal value for one operand.
pub fn operand(rng: &mut Rng, m: &Machine, inst: &Instruction, index: usize) -> OpValue {
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
pub fn instance(rng: &mut Rng, m: &Machine, id: InstId) -> Option<MInst> {
    let inst = &m.instructions[id.index()];
    (0..200).find_map(|_| {
        let operands = (0..inst.operands.len())
            .map(|i| operand(rng, m, inst, i))
            .collect();
        let mi = MInst { inst: id, operands };
        target::check_constraints(m, &mi).is_ok().then_some(mi)
    })
}
