//! The interface every generated target implements, and the target-independent
//! pieces the generated code builds on: instruction instances, bundles, bit
//! fields, and the runtime operand checks.
//!
//! Generated code (from `codegen-gen`) holds what is structural — field
//! positions, opcodes, operand kinds, the expressions for timing and energy.
//! What parameters can change at run time — register counts, immediate ranges,
//! memory sizes — is checked here, against the [`Machine`] in force.

use crate::model::*;
use serde::{Deserialize, Serialize};

/// The value of one operand of an instruction instance.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum OpValue {
    /// A register index.
    Reg(u32),
    /// A byte address.
    Addr(u64),
    /// An integer immediate.
    Imm(i64),
    /// A real immediate (stored in its operand's dtype when encoded).
    Real(f32),
    /// A semaphore index.
    Sem(u32),
}

impl OpValue {
    /// The integer an expression sees for this operand (immediates only).
    pub fn as_int(self) -> Option<i64> {
        match self {
            OpValue::Imm(v) => Some(v),
            _ => None,
        }
    }
}

/// One instruction instance, target-independently: which instruction, and its operand values in declaration order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MInst {
    /// The instruction.
    pub inst: InstId,
    /// Operand values, one per operand of the instruction.
    pub operands: Vec<OpValue>,
}

/// One VLIW bundle: at most one instruction per slot.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    /// `(slot, instruction)` pairs, in slot order.
    pub ops: Vec<(SlotId, MInst)>,
}

/// Why an instruction instance cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The operand list does not match the instruction.
    Arity {
        /// Instruction name.
        inst: String,
        /// Operands it takes.
        expected: usize,
        /// Operands given.
        found: usize,
    },
    /// An operand of the wrong kind (an address where a register is needed, ...).
    Kind {
        /// Instruction name.
        inst: String,
        /// Operand name.
        operand: String,
        /// What it needs.
        expected: &'static str,
    },
    /// An operand value outside what the machine allows.
    Range {
        /// Instruction name.
        inst: String,
        /// Operand name.
        operand: String,
        /// Why.
        reason: String,
    },
    /// The instruction cannot issue from this slot.
    Slot {
        /// Instruction name.
        inst: String,
        /// Slot name.
        slot: String,
    },
    /// Two instructions in one slot of a bundle.
    SlotTaken {
        /// Slot name.
        slot: String,
    },
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::Arity { inst, expected, found } => write!(f, "`{inst}` takes {expected} operands, not {found}"),
            EncodeError::Kind { inst, operand, expected } => write!(f, "operand `{operand}` of `{inst}` must be {expected}"),
            EncodeError::Range { inst, operand, reason } => write!(f, "operand `{operand}` of `{inst}`: {reason}"),
            EncodeError::Slot { inst, slot } => write!(f, "`{inst}` cannot issue from slot `{slot}`"),
            EncodeError::SlotTaken { slot } => write!(f, "two instructions in slot `{slot}` of one bundle"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Why a microcode word cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// No instruction of the slot has these fixed bits.
    Illegal {
        /// Slot name.
        slot: String,
        /// The slot's bits, as hex, most significant first.
        bits: String,
    },
    /// An instruction whose operand field holds a value the machine does not allow.
    Operand {
        /// Instruction name.
        inst: String,
        /// Operand name.
        operand: String,
        /// Why.
        reason: String,
    },
    /// The microcode is not a whole number of words.
    Length {
        /// Bytes given.
        bytes: usize,
        /// Bytes per word.
        word_bytes: usize,
    },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Illegal { slot, bits } => write!(f, "illegal encoding in slot `{slot}`: {bits}"),
            DecodeError::Operand { inst, operand, reason } => write!(f, "`{inst}` operand `{operand}`: {reason}"),
            DecodeError::Length { bytes, word_bytes } => {
                write!(f, "{bytes} bytes of microcode is not a whole number of {word_bytes}-byte words")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Bit-field access on little-endian arrays of 64-bit words (bit 0 is the least significant bit of word 0).
pub mod bits {
    /// Number of 64-bit words for `width` bits.
    pub fn words(width: u32) -> usize {
        width.div_ceil(64) as usize
    }

    /// Writes the low `width` bits of `value` at bit `lo`.
    pub fn put(w: &mut [u64], lo: u32, width: u32, value: u64) {
        for bit in 0..width {
            let pos = (lo + bit) as usize;
            let (word, shift) = (pos / 64, pos % 64);
            if let Some(slot) = w.get_mut(word) {
                *slot &= !(1 << shift);
                *slot |= ((value >> bit) & 1) << shift;
            }
        }
    }

    /// Reads `width` bits at bit `lo`.
    pub fn get(w: &[u64], lo: u32, width: u32) -> u64 {
        (0..width).fold(0, |acc, bit| {
            let pos = (lo + bit) as usize;
            let b = w.get(pos / 64).map_or(0, |x| (x >> (pos % 64)) & 1);
            acc | (b << bit)
        })
    }

    /// Whether every bit of `w` is zero.
    pub fn is_zero(w: &[u64]) -> bool {
        w.iter().all(|x| *x == 0)
    }

    /// Hex digits of a `width`-bit value, most significant first.
    pub fn hex(w: &[u64], width: u32) -> String {
        let digits = width.div_ceil(4);
        (0..digits).rev().map(|d| format!("{:x}", get(w, d * 4, 4.min(width - d * 4)))).collect()
    }

    /// Copies `width` bits from `src` (starting at bit 0) into `dst` at bit `lo`.
    pub fn insert(dst: &mut [u64], lo: u32, width: u32, src: &[u64]) {
        let mut done = 0;
        while done < width {
            let n = 64.min(width - done);
            put(dst, lo + done, n, get(src, done, n));
            done += n;
        }
    }

    /// Extracts `width` bits at bit `lo` of `src` into a new array.
    pub fn extract(src: &[u64], lo: u32, width: u32) -> Vec<u64> {
        let mut out = vec![0; words(width)];
        let mut done = 0;
        while done < width {
            let n = 64.min(width - done);
            put(&mut out, done, n, get(src, lo + done, n));
            done += n;
        }
        out
    }
}

/// Checks an operand value against the machine in force and returns the raw field contents.
pub fn operand_to_field(machine: &Machine, inst: &Instruction, index: usize, value: OpValue) -> Result<u64, EncodeError> {
    let op = &inst.operands[index];
    let range = |reason: String| EncodeError::Range { inst: inst.name.clone(), operand: op.name.clone(), reason };
    let kind = |expected| EncodeError::Kind { inst: inst.name.clone(), operand: op.name.clone(), expected };
    match (&op.kind, value) {
        (OperandKind::Reg { file, .. }, OpValue::Reg(r)) => {
            let rf = &machine.regfiles[file.index()];
            if i64::from(r) >= rf.count.value {
                return Err(range(format!("register {r} of `{}`, which has {}", rf.name, rf.count.value)));
            }
            Ok(u64::from(r))
        }
        (OperandKind::Mem { mem, align, .. }, OpValue::Addr(a)) => {
            let m = &machine.memories[mem.index()];
            if a % align != 0 {
                return Err(range(format!("address {a:#x} is not a multiple of {align}")));
            }
            if i128::from(a) >= i128::from(m.size.value) {
                return Err(range(format!("address {a:#x} is outside `{}` ({} bytes)", m.name, m.size.value)));
            }
            Ok(a / align)
        }
        (OperandKind::Imm { lo, hi }, OpValue::Imm(v)) => {
            if v < *lo || v > *hi {
                return Err(range(format!("{v} is outside {lo}..={hi}")));
            }
            Ok(v as u64)
        }
        (OperandKind::ImmReal { dtype }, OpValue::Real(x)) => Ok(crate::dtype::encode_real(*dtype, x)),
        (OperandKind::Sem { bank }, OpValue::Sem(s)) => {
            let b = &machine.semaphores[bank.index()];
            if i64::from(s) >= b.count.value {
                return Err(range(format!("semaphore {s} of `{}`, which has {}", b.name, b.count.value)));
            }
            Ok(u64::from(s))
        }
        (OperandKind::Reg { .. }, _) => Err(kind("a register")),
        (OperandKind::Mem { .. }, _) => Err(kind("an address")),
        (OperandKind::Imm { .. }, _) => Err(kind("an integer")),
        (OperandKind::ImmReal { .. }, _) => Err(kind("a real number")),
        (OperandKind::Sem { .. }, _) => Err(kind("a semaphore")),
    }
}

/// Turns raw field contents back into an operand value, checking it against the machine in force.
pub fn field_to_operand(machine: &Machine, inst: &Instruction, index: usize, raw: u64, width: u32) -> Result<OpValue, DecodeError> {
    let op = &inst.operands[index];
    let bad = |reason: String| DecodeError::Operand { inst: inst.name.clone(), operand: op.name.clone(), reason };
    let value = match &op.kind {
        OperandKind::Reg { .. } => OpValue::Reg(u32::try_from(raw).map_err(|_| bad(format!("register {raw}")))?),
        OperandKind::Sem { .. } => OpValue::Sem(u32::try_from(raw).map_err(|_| bad(format!("semaphore {raw}")))?),
        OperandKind::Mem { align, .. } => OpValue::Addr(raw.checked_mul(*align).ok_or_else(|| bad(format!("address {raw} overflows")))?),
        OperandKind::Imm { lo, .. } => {
            // Negative ranges are two's complement in their field.
            let v = if *lo < 0 && width < 64 && (raw >> (width - 1)) & 1 == 1 { (raw | (!0u64 << width)) as i64 } else { raw as i64 };
            OpValue::Imm(v)
        }
        OperandKind::ImmReal { dtype } => OpValue::Real(crate::dtype::decode_real(*dtype, raw)),
    };
    // Re-check as the encoder would: a field may hold a value the machine does not allow.
    operand_to_field(machine, inst, index, value).map_err(|e| bad(e.to_string()))?;
    Ok(value)
}
