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
            EncodeError::Arity {
                inst,
                expected,
                found,
            } => write!(f, "`{inst}` takes {expected} operands, not {found}"),
            EncodeError::Kind {
                inst,
                operand,
                expected,
            } => write!(f, "operand `{operand}` of `{inst}` must be {expected}"),
            EncodeError::Range {
                inst,
                operand,
                reason,
            } => write!(f, "operand `{operand}` of `{inst}`: {reason}"),
            EncodeError::Slot { inst, slot } => {
                write!(f, "`{inst}` cannot issue from slot `{slot}`")
            }
            EncodeError::SlotTaken { slot } => {
                write!(f, "two instructions in slot `{slot}` of one bundle")
            }
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
            DecodeError::Illegal { slot, bits } => {
                write!(f, "illegal encoding in slot `{slot}`: {bits}")
            }
            DecodeError::Operand {
                inst,
                operand,
                reason,
            } => write!(f, "`{inst}` operand `{operand}`: {reason}"),
            DecodeError::Length { bytes, word_bytes } => {
                write!(
                    f,
                    "{bytes} bytes of microcode is not a whole number of {word_bytes}-byte words"
                )
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

    /// Writes the low `width` (at most 64) bits of `value` at bit `lo`.
    pub fn put(w: &mut [u64], lo: u32, width: u32, value: u64) {
        let mut done = 0;
        while done < width {
            let pos = lo + done;
            let (word, shift) = ((pos / 64) as usize, pos % 64);
            let n = (64 - shift).min(width - done);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << shift
            };
            if let Some(slot) = w.get_mut(word) {
                *slot = (*slot & !mask) | (((value >> done) << shift) & mask);
            }
            done += n;
        }
    }

    /// Reads `width` (at most 64) bits at bit `lo`.
    pub fn get(w: &[u64], lo: u32, width: u32) -> u64 {
        let mut out = 0u64;
        let mut done = 0;
        while done < width {
            let pos = lo + done;
            let (word, shift) = ((pos / 64) as usize, pos % 64);
            let n = (64 - shift).min(width - done);
            let bits = w.get(word).map_or(0, |x| x >> shift);
            let bits = if n == 64 {
                bits
            } else {
                bits & ((1u64 << n) - 1)
            };
            out |= bits << done;
            done += n;
        }
        out
    }

    /// Whether every bit of `w` is zero.
    pub fn is_zero(w: &[u64]) -> bool {
        w.iter().all(|x| *x == 0)
    }

    /// Hex digits of a `width`-bit value, most significant first.
    pub fn hex(w: &[u64], width: u32) -> String {
        let digits = width.div_ceil(4);
        (0..digits)
            .rev()
            .map(|d| format!("{:x}", get(w, d * 4, 4.min(width - d * 4))))
            .collect()
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
pub fn operand_to_field(
    machine: &Machine,
    inst: &Instruction,
    index: usize,
    value: OpValue,
) -> Result<u64, EncodeError> {
    let op = &inst.operands[index];
    let range = |reason: String| EncodeError::Range {
        inst: inst.name.clone(),
        operand: op.name.clone(),
        reason,
    };
    let kind = |expected| EncodeError::Kind {
        inst: inst.name.clone(),
        operand: op.name.clone(),
        expected,
    };
    match (&op.kind, value) {
        (OperandKind::Reg { file, .. }, OpValue::Reg(r)) => {
            let rf = &machine.regfiles[file.index()];
            if i64::from(r) >= rf.count.value {
                return Err(range(format!(
                    "register {r} of `{}`, which has {}",
                    rf.name, rf.count.value
                )));
            }
            Ok(u64::from(r))
        }
        (OperandKind::Mem { mem, align, .. }, OpValue::Addr(a)) => {
            let m = &machine.memories[mem.index()];
            if a % align != 0 {
                return Err(range(format!(
                    "address {a:#x} is not a multiple of {align}"
                )));
            }
            if i128::from(a) >= i128::from(m.size.value) {
                return Err(range(format!(
                    "address {a:#x} is outside `{}` ({} bytes)",
                    m.name, m.size.value
                )));
            }
            Ok(a / align)
        }
        (OperandKind::Imm { lo, hi }, OpValue::Imm(v)) => {
            if v < *lo || v > *hi {
                return Err(range(format!("{v} is outside {lo}..={hi}")));
            }
            Ok(v as u64)
        }
        (OperandKind::ImmReal { dtype }, OpValue::Real(x)) => {
            Ok(crate::dtype::encode_real(*dtype, x))
        }
        (OperandKind::Sem { bank }, OpValue::Sem(s)) => {
            let b = &machine.semaphores[bank.index()];
            if i64::from(s) >= b.count.value {
                return Err(range(format!(
                    "semaphore {s} of `{}`, which has {}",
                    b.name, b.count.value
                )));
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
pub fn field_to_operand(
    machine: &Machine,
    inst: &Instruction,
    index: usize,
    raw: u64,
    width: u32,
) -> Result<OpValue, DecodeError> {
    let op = &inst.operands[index];
    let bad = |reason: String| DecodeError::Operand {
        inst: inst.name.clone(),
        operand: op.name.clone(),
        reason,
    };
    let value = match &op.kind {
        OperandKind::Reg { .. } => {
            OpValue::Reg(u32::try_from(raw).map_err(|_| bad(format!("register {raw}")))?)
        }
        OperandKind::Sem { .. } => {
            OpValue::Sem(u32::try_from(raw).map_err(|_| bad(format!("semaphore {raw}")))?)
        }
        OperandKind::Mem { align, .. } => OpValue::Addr(
            raw.checked_mul(*align)
                .ok_or_else(|| bad(format!("address {raw} overflows")))?,
        ),
        OperandKind::Imm { lo, .. } => {
            // Negative ranges are two's complement in their field.
            let v = if *lo < 0 && width < 64 && (raw >> (width - 1)) & 1 == 1 {
                (raw | (!0u64 << width)) as i64
            } else {
                raw as i64
            };
            OpValue::Imm(v)
        }
        OperandKind::ImmReal { dtype } => OpValue::Real(crate::dtype::decode_real(*dtype, raw)),
    };
    // Re-check as the encoder would: a field may hold a value the machine does not allow.
    operand_to_field(machine, inst, index, value).map_err(|e| bad(e.to_string()))?;
    Ok(value)
}

/// Typed operand decoding for generated decoders: the field's value as the operand's Rust type.
pub mod field {
    use super::{DecodeError, Instruction, Machine, OpValue, field_to_operand};

    fn mismatch(inst: &Instruction, index: usize) -> DecodeError {
        DecodeError::Operand {
            inst: inst.name.clone(),
            operand: inst
                .operands
                .get(index)
                .map_or_else(String::new, |o| o.name.clone()),
            reason: "operand kind does not match the generated decoder (a bug)".to_owned(),
        }
    }

    /// Typed accessors: the operand of one kind, or a mismatch error.
    macro_rules! accessor {
        ($($(#[$doc:meta])* $name:ident -> $t:ty = $variant:ident;)*) => {$(
            $(#[$doc])*
            pub fn $name(
                m: &Machine,
                inst: &Instruction,
                index: usize,
                raw: u64,
                width: u32,
            ) -> Result<$t, DecodeError> {
                match field_to_operand(m, inst, index, raw, width)? {
                    OpValue::$variant(v) => Ok(v),
                    _ => Err(mismatch(inst, index)),
                }
            }
        )*};
    }

    accessor! {
        /// A register index.
        reg -> u32 = Reg;
        /// A byte address.
        addr -> u64 = Addr;
        /// An integer immediate.
        imm -> i64 = Imm;
        /// A real immediate.
        real -> f32 = Real;
        /// A semaphore index.
        sem -> u32 = Sem;
    }
}

/// Arithmetic for generated timing and energy code, with the semantics of
/// [`crate::eval`] but total: it never panics (division by zero gives 0;
/// overflow wraps), since the checker already proved the expressions defined.
pub mod rt {
    /// Integer division truncating toward zero.
    pub fn div(a: i64, b: i64) -> i64 {
        a.checked_div(b).unwrap_or(0)
    }
    /// Integer remainder.
    pub fn rem(a: i64, b: i64) -> i64 {
        a.checked_rem(b).unwrap_or(0)
    }
    /// Real division.
    pub fn fdiv(a: f64, b: f64) -> f64 {
        if b == 0.0 { 0.0 } else { a / b }
    }
    /// Real remainder.
    pub fn frem(a: f64, b: f64) -> f64 {
        if b == 0.0 { 0.0 } else { a % b }
    }
    /// `a / b` rounded up.
    pub fn ceil_div(a: i64, b: i64) -> i64 {
        if b == 0 {
            return 0;
        }
        let q = a.wrapping_div(b);
        q + i64::from(a % b != 0 && ((a < 0) == (b < 0)))
    }
    /// `a` rounded up to a multiple of `b`.
    pub fn align_up(a: i64, b: i64) -> i64 {
        if b <= 0 {
            return a;
        }
        let r = a.rem_euclid(b);
        if r == 0 { a } else { a.wrapping_add(b - r) }
    }
    /// Floor of the base-2 logarithm (0 for non-positive arguments).
    pub fn log2(a: i64) -> i64 {
        if a > 0 { i64::from(a.ilog2()) } else { 0 }
    }
    /// Two to the power `a` (0 outside 0..63).
    pub fn pow2(a: i64) -> i64 {
        if (0..63).contains(&a) { 1 << a } else { 0 }
    }
    /// The `i`th choice (the last one when out of range).
    pub fn pick<T: Copy>(i: i64, choices: &[T]) -> T {
        let last = choices.len().saturating_sub(1);
        choices[usize::try_from(i).map_or(last, |i| i.min(last))]
    }
}

/// Operand syntax shared by every generated assembler: registers `acc3`,
/// addresses `@0x100`, immediates `42` / `-3` / `0x1f`, reals `1.5`, semaphores `tok2`.
pub mod asm {
    /// A problem in one line of assembly.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct AsmError(pub String);

    impl std::fmt::Display for AsmError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for AsmError {}

    fn number(text: &str) -> Option<i128> {
        let t = text.trim().replace('_', "");
        let (neg, t) = t
            .strip_prefix('-')
            .map_or((false, t.as_str()), |r| (true, r));
        let v = match t.strip_prefix("0x") {
            Some(h) => i128::from_str_radix(h, 16).ok()?,
            None => t.parse::<i128>().ok()?,
        };
        Some(if neg { -v } else { v })
    }

    /// `acc3` for register file `acc`.
    pub fn reg(text: &str, file: &str) -> Result<u32, AsmError> {
        let t = text.trim();
        t.strip_prefix(file)
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| AsmError(format!("expected a register `{file}N`, found `{t}`")))
    }

    /// `tok2` for semaphore bank `tok`.
    pub fn sem(text: &str, bank: &str) -> Result<u32, AsmError> {
        let t = text.trim();
        t.strip_prefix(bank)
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| AsmError(format!("expected a semaphore `{bank}N`, found `{t}`")))
    }

    /// `@0x100` or `@256`.
    pub fn addr(text: &str) -> Result<u64, AsmError> {
        let t = text.trim();
        t.strip_prefix('@')
            .and_then(number)
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| AsmError(format!("expected an address `@0x...`, found `{t}`")))
    }

    /// `42`, `-3`, `0x1f`.
    pub fn imm(text: &str) -> Result<i64, AsmError> {
        let t = text.trim();
        number(t)
            .and_then(|v| i64::try_from(v).ok())
            .ok_or_else(|| AsmError(format!("expected an integer, found `{t}`")))
    }

    /// `1.5`, `-0.25`, `1e-3`.
    pub fn real(text: &str) -> Result<f32, AsmError> {
        let t = text.trim();
        t.parse::<f32>()
            .map_err(|_| AsmError(format!("expected a real number, found `{t}`")))
    }

    /// Prints a real so that parsing it gives the same bits.
    pub fn real_text(x: f32) -> String {
        format!("{x:?}")
    }

    /// Splits `mnemonic a, b, c` into the mnemonic and its operands.
    pub fn split(line: &str) -> (&str, Vec<&str>) {
        let line = line.trim();
        match line.split_once(char::is_whitespace) {
            None => (line, Vec::new()),
            Some((m, rest)) => (
                m,
                rest.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
        }
    }

    /// Message for an unknown mnemonic, with the closest known one.
    pub fn unknown_mnemonic(mnemonic: &str, known: &[&str]) -> String {
        super::unknown_mnemonic_text(mnemonic, known)
    }

    /// Checks an operand count.
    pub fn arity(mnemonic: &str, args: &[&str], expected: usize) -> Result<(), AsmError> {
        if args.len() == expected {
            Ok(())
        } else {
            Err(AsmError(format!(
                "`{mnemonic}` takes {expected} operands, found {}",
                args.len()
            )))
        }
    }
}

/// Checks that raw field contents fit a `width`-bit field (two's complement
/// for immediates with negative ranges) and masks them to it.
pub fn fit(inst: &Instruction, index: usize, raw: u64, width: u32) -> Result<u64, EncodeError> {
    let op = &inst.operands[index];
    let signed = matches!(op.kind, OperandKind::Imm { lo, .. } if lo < 0);
    let mask = if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let fits = if width >= 64 {
        true
    } else if signed {
        let v = raw as i64;
        let half = 1i64 << (width - 1);
        (-half..half).contains(&v)
    } else {
        raw >> width == 0
    };
    if fits {
        Ok(raw & mask)
    } else {
        Err(EncodeError::Range {
            inst: inst.name.clone(),
            operand: op.name.clone(),
            reason: format!(
                "value {raw:#x} does not fit its {width}-bit field (the parameters in force allow more than the encoding can hold)"
            ),
        })
    }
}

/// What a generated target provides, through target-independent instruction instances.
pub trait Isa: Send + Sync + std::fmt::Debug {
    /// Encodes one instruction into its slot's bits (slot-local, bit 0 first).
    fn encode_inst(&self, m: &Machine, inst: &MInst, w: &mut [u64]) -> Result<(), EncodeError>;
    /// Decodes one slot's bits; `None` for the empty (all-zero) slot.
    fn decode_inst(
        &self,
        m: &Machine,
        slot: SlotId,
        w: &[u64],
    ) -> Result<Option<MInst>, DecodeError>;
    /// Assembly text of one instruction.
    fn print_inst(&self, m: &Machine, inst: &MInst) -> String;
    /// Parses the assembly text of one instruction.
    fn parse_inst(&self, m: &Machine, text: &str) -> Result<MInst, asm::AsmError>;
    /// Cycles from issue until results are visible.
    fn latency(&self, m: &Machine, inst: &MInst) -> i64;
    /// Cycles the unit stays busy.
    fn occupancy(&self, m: &Machine, inst: &MInst) -> i64;
    /// Cycles after issue from which another accumulating instruction may
    /// accumulate into the register this one writes (0: no forwarding; see
    /// [`crate::model::Timing::accumulate`]).
    fn accumulate(&self, _m: &Machine, _inst: &MInst) -> i64 {
        0
    }
    /// Dynamic energy in pJ.
    fn energy(&self, m: &Machine, inst: &MInst) -> f64;
    /// Instructions whose semantics match a tile operation structurally, with their bindings (see [`crate::select`]).
    fn match_op(
        &self,
        m: &Machine,
        op: &crate::select::TileOp,
    ) -> Vec<(InstId, crate::select::Binder)>;
    /// Whether instruction `id`'s semantics match `op`: [`Isa::match_op`]
    /// for one instruction, without trying the others.
    fn match_inst(
        &self,
        m: &Machine,
        id: InstId,
        op: &crate::select::TileOp,
    ) -> Option<crate::select::Binder> {
        self.match_op(m, op)
            .into_iter()
            .find_map(|(i, b)| (i == id).then_some(b))
    }
}

/// Bytes of one microcode word.
pub fn word_bytes(m: &Machine) -> usize {
    m.word_bits.div_ceil(8) as usize
}

/// Encodes a bundle into one microcode word (little-endian bytes).
pub fn encode_bundle(isa: &dyn Isa, m: &Machine, bundle: &Bundle) -> Result<Vec<u8>, EncodeError> {
    let mut word = vec![0u64; bits::words(m.word_bits)];
    let mut used = vec![false; m.slots.len()];
    for (slot, inst) in &bundle.ops {
        let s = &m.slots[slot.index()];
        let def = &m.instructions[inst.inst.index()];
        if !def.timing.slots.contains(slot) {
            return Err(EncodeError::Slot {
                inst: def.name.clone(),
                slot: s.name.clone(),
            });
        }
        if std::mem::replace(&mut used[slot.index()], true) {
            return Err(EncodeError::SlotTaken {
                slot: s.name.clone(),
            });
        }
        let mut w = vec![0u64; bits::words(s.width())];
        isa.encode_inst(m, inst, &mut w)?;
        check_constraints(m, inst)?;
        bits::insert(&mut word, s.lo, s.width(), &w);
    }
    let mut bytes: Vec<u8> = word.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes.truncate(word_bytes(m));
    Ok(bytes)
}

/// Decodes one microcode word (little-endian bytes) into a bundle.
pub fn decode_bundle(isa: &dyn Isa, m: &Machine, bytes: &[u8]) -> Result<Bundle, DecodeError> {
    let mut word = vec![0u64; bits::words(m.word_bits)];
    for (i, b) in bytes.iter().enumerate().take(word_bytes(m)) {
        word[i / 8] |= u64::from(*b) << ((i % 8) * 8);
    }
    let mut bundle = Bundle::default();
    let mut covered = vec![0u64; word.len()];
    for (si, s) in m.slots.iter().enumerate() {
        let w = bits::extract(&word, s.lo, s.width());
        bits::insert(
            &mut covered,
            s.lo,
            s.width(),
            &vec![u64::MAX; bits::words(s.width())],
        );
        if let Some(inst) = isa.decode_inst(m, SlotId::from_index(si), &w)? {
            check_constraints(m, &inst).map_err(|e| DecodeError::Operand {
                inst: m.instructions[inst.inst.index()].name.clone(),
                operand: "(constraint)".to_owned(),
                reason: e.to_string(),
            })?;
            bundle.ops.push((SlotId::from_index(si), inst));
        }
    }
    // Bits outside every slot must be zero.
    let stray: Vec<u64> = word.iter().zip(&covered).map(|(w, c)| w & !c).collect();
    if !bits::is_zero(&stray) {
        return Err(DecodeError::Illegal {
            slot: "(no slot)".to_owned(),
            bits: bits::hex(&stray, m.word_bits),
        });
    }
    Ok(bundle)
}

/// Splits microcode into words and decodes them all.
pub fn decode_program(
    isa: &dyn Isa,
    m: &Machine,
    code: &[u8],
) -> Result<Vec<Bundle>, (usize, DecodeError)> {
    let wb = word_bytes(m);
    if !code.len().is_multiple_of(wb) {
        return Err((
            0,
            DecodeError::Length {
                bytes: code.len(),
                word_bytes: wb,
            },
        ));
    }
    code.chunks(wb)
        .enumerate()
        .map(|(i, c)| decode_bundle(isa, m, c).map_err(|e| (i, e)))
        .collect()
}

/// Assembly of a bundle: its instructions separated by ` || `; `{}` for the empty bundle.
pub fn print_bundle(isa: &dyn Isa, m: &Machine, bundle: &Bundle) -> String {
    if bundle.ops.is_empty() {
        return "{}".to_owned();
    }
    bundle
        .ops
        .iter()
        .map(|(_, i)| isa.print_inst(m, i))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// Parses one line of bundle assembly (`a || b`, `{}` for an empty bundle, and
/// `nop` for one unless the machine has a `nop` instruction); each instruction
/// goes to the first free slot it may issue from.
pub fn parse_bundle(isa: &dyn Isa, m: &Machine, line: &str) -> Result<Bundle, asm::AsmError> {
    let mut bundle = Bundle::default();
    let mut used = vec![false; m.slots.len()];
    for text in line.split("||").map(str::trim).filter(|t| !t.is_empty()) {
        if text == "{}" || (text == "nop" && m.instruction("nop").is_none()) {
            continue;
        }
        let inst = isa.parse_inst(m, text)?;
        let def = &m.instructions[inst.inst.index()];
        let Some(slot) = def.timing.slots.iter().copied().find(|s| !used[s.index()]) else {
            let slots: Vec<&str> = def
                .timing
                .slots
                .iter()
                .map(|s| m.slots[s.index()].name.as_str())
                .collect();
            return Err(asm::AsmError(format!(
                "no free slot for `{}` in this bundle (it issues from {})",
                def.name,
                slots.join(", ")
            )));
        };
        used[slot.index()] = true;
        bundle.ops.push((slot, inst));
    }
    bundle.ops.sort_by_key(|(s, _)| *s);
    Ok(bundle)
}

impl asm::AsmError {
    /// Prefixes the message with a place, e.g. `prog.s:12`.
    pub fn at(self, place: &str) -> asm::AsmError {
        asm::AsmError(format!("{place}: {}", self.0))
    }
}

/// Message for an unknown mnemonic, with the closest known one.
pub fn unknown_mnemonic_text(mnemonic: &str, known: &[&str]) -> String {
    let best = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(mnemonic, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min();
    match best {
        Some((_, k)) => format!("unknown instruction `{mnemonic}`; did you mean `{k}`?"),
        None => format!("unknown instruction `{mnemonic}`"),
    }
}

/// The values an expression over an instruction's operands sees: immediates by operand id.
pub fn operand_env(inst: &MInst) -> Vec<Option<i64>> {
    inst.operands.iter().map(|v| v.as_int()).collect()
}

/// Checks an instruction instance's constraints (beyond operand ranges) against the machine in force.
pub fn check_constraints(m: &Machine, inst: &MInst) -> Result<(), EncodeError> {
    let def = &m.instructions[inst.inst.index()];
    let params: Vec<i64> = m.params.iter().map(|p| p.value).collect();
    let ops = operand_env(inst);
    let env = crate::eval::WithOperands {
        params: &params,
        operands: &ops,
    };
    for k in &def.constraints {
        let (a, b) = (
            crate::eval::eval(&k.lhs, &env),
            crate::eval::eval(&k.rhs, &env),
        );
        let holds = matches!((a, b), (Ok(a), Ok(b)) if k.op.holds(a.as_f64(), b.as_f64()));
        if !holds {
            let names: Vec<String> = def
                .operands
                .iter()
                .zip(&inst.operands)
                .filter_map(|(o, v)| v.as_int().map(|v| format!("{} = {v}", o.name)))
                .collect();
            return Err(EncodeError::Range {
                inst: def.name.clone(),
                operand: "(constraint)".to_owned(),
                reason: format!(
                    "a constraint of `{}` does not hold ({})",
                    def.name,
                    names.join(", ")
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::bits;

    /// The word-level field access agrees with a bit-by-bit reference everywhere.
    #[test]
    fn bit_fields_match_a_bitwise_reference() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let lo = (seed % 190) as u32;
            let width = 1 + ((seed >> 8) % 64) as u32;
            let value = seed.rotate_left(17);
            let mut w = [seed, !seed, seed.rotate_left(5), 0];
            let mut reference = w;
            bits::put(&mut w, lo, width, value);
            for bit in 0..width {
                let pos = (lo + bit) as usize;
                reference[pos / 64] &= !(1 << (pos % 64));
                reference[pos / 64] |= ((value >> bit) & 1) << (pos % 64);
            }
            assert_eq!(w, reference, "put lo={lo} width={width}");
            let mask = if width == 64 {
                u64::MAX
            } else {
                (1 << width) - 1
            };
            assert_eq!(
                bits::get(&w, lo, width),
                value & mask,
                "get lo={lo} width={width}"
            );
        }
    }
}
