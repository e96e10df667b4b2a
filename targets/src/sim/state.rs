//! Architectural state shared by every generated simulator: memories, register
//! files and semaphores sized from the machine in force, element access with
//! exact dtype behaviour, and the faults an access can raise.

use isa_specs::Machine;
use isa_specs::model::DType;

/// Something the program did that the machine does not allow; reported, never a panic.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// An access outside a memory.
    OutOfBounds {
        /// The memory.
        memory: String,
        /// The byte address.
        addr: i64,
        /// Bytes accessed.
        bytes: u64,
    },
    /// A tensor of the program placed at an address its element size does not divide.
    Unaligned {
        /// The tensor.
        tensor: String,
        /// The memory.
        memory: String,
        /// The byte address.
        addr: u64,
        /// The alignment required.
        align: u64,
    },
    /// A register index or element outside its register file.
    BadRegister {
        /// The register file.
        file: String,
        /// The register.
        reg: u32,
        /// The element.
        elem: i64,
    },
    /// A microcode word that decodes to no instruction.
    IllegalEncoding(String),
    /// On an exposed pipeline: a register read before the instruction writing it has finished.
    Hazard {
        /// The register file.
        file: String,
        /// The register.
        reg: u32,
        /// Cycle of the read.
        cycle: u64,
        /// Cycle the value becomes ready.
        ready: u64,
    },
    /// On an exposed pipeline: a register written while an earlier write to it is still in flight.
    WriteHazard {
        /// The register file.
        file: String,
        /// The register.
        reg: u32,
        /// Cycle of the new write.
        cycle: u64,
        /// Cycle the earlier write lands.
        ready: u64,
    },
    /// On an exposed pipeline: memory read before the instruction writing it has finished.
    MemoryHazard {
        /// The memory.
        memory: String,
        /// First byte of the overlap.
        addr: u64,
        /// Cycle of the read.
        cycle: u64,
        /// Cycle the value becomes ready.
        ready: u64,
    },
    /// An access to a memory region an asynchronous transfer is still writing (or reading, for writes).
    DmaConflict {
        /// The memory.
        memory: String,
        /// First byte of the overlap.
        addr: u64,
        /// Cycle of the access.
        cycle: u64,
        /// Cycle the transfer completes.
        until: u64,
    },
    /// A `wait` on a semaphore nothing will signal.
    Deadlock {
        /// The semaphore bank.
        bank: String,
        /// The semaphore.
        index: u32,
        /// Cycle of the wait.
        cycle: u64,
    },
    /// A semaphore counted above its maximum.
    SemaphoreOverflow {
        /// The bank.
        bank: String,
        /// The semaphore.
        index: u32,
    },
    /// The program ran longer than the cycle limit.
    CycleLimit(u64),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::OutOfBounds {
                memory,
                addr,
                bytes,
            } => write!(
                f,
                "access of {bytes} bytes at {addr:#x} is outside memory `{memory}`"
            ),
            Fault::BadRegister { file, reg, elem } => {
                write!(f, "register `{file}{reg}` element {elem} does not exist")
            }
            Fault::Unaligned {
                tensor,
                memory,
                addr,
                align,
            } => {
                write!(
                    f,
                    "tensor `{tensor}` at {addr:#x} in `{memory}` is not aligned to its {align}-byte elements"
                )
            }
            Fault::IllegalEncoding(e) => write!(f, "{e}"),
            Fault::Hazard {
                file,
                reg,
                cycle,
                ready,
            } => write!(
                f,
                "hazard: `{file}{reg}` read at cycle {cycle} but its new value is ready only at cycle {ready} (the pipeline is exposed: the schedule must wait)"
            ),
            Fault::MemoryHazard {
                memory,
                addr,
                cycle,
                ready,
            } => write!(
                f,
                "hazard: `{memory}` at {addr:#x} accessed at cycle {cycle} but the instruction writing it finishes only at cycle {ready} (the pipeline is exposed: the schedule must wait)"
            ),
            Fault::WriteHazard {
                file,
                reg,
                cycle,
                ready,
            } => write!(
                f,
                "hazard: `{file}{reg}` written at cycle {cycle} while an earlier write to it lands only at cycle {ready} (the pipeline is exposed: results could land out of order)"
            ),
            Fault::DmaConflict {
                memory,
                addr,
                cycle,
                until,
            } => write!(
                f,
                "`{memory}` at {addr:#x} accessed at cycle {cycle} while an asynchronous transfer uses it until cycle {until} (wait on its semaphore first)"
            ),
            Fault::Deadlock { bank, index, cycle } => write!(
                f,
                "deadlock: `wait {bank}{index}` at cycle {cycle}, and nothing in flight will signal it"
            ),
            Fault::SemaphoreOverflow { bank, index } => {
                write!(f, "semaphore `{bank}{index}` counted above its maximum")
            }
            Fault::CycleLimit(n) => write!(f, "the program did not finish within {n} cycles"),
        }
    }
}

impl std::error::Error for Fault {}

/// One memory's contents: flat for on-chip sizes, in 64 KiB pages allocated on first touch for large off-chip memories.
#[derive(Clone)]
enum Backing {
    Flat(Vec<u8>),
    Paged(std::collections::HashMap<u64, Box<[u8]>>),
}

const PAGE: u64 = 64 << 10;

impl Backing {
    fn read(&self, addr: u64, out: &mut [u8]) {
        match self {
            Backing::Flat(v) => out.copy_from_slice(&v[addr as usize..addr as usize + out.len()]),
            Backing::Paged(pages) => {
                for (i, b) in out.iter_mut().enumerate() {
                    let a = addr + i as u64;
                    *b = pages.get(&(a / PAGE)).map_or(0, |p| p[(a % PAGE) as usize]);
                }
            }
        }
    }

    fn write(&mut self, addr: u64, bytes: &[u8]) {
        match self {
            Backing::Flat(v) => {
                v[addr as usize..addr as usize + bytes.len()].copy_from_slice(bytes);
            }
            Backing::Paged(pages) => {
                for (i, b) in bytes.iter().enumerate() {
                    let a = addr + i as u64;
                    pages
                        .entry(a / PAGE)
                        .or_insert_with(|| vec![0; PAGE as usize].into_boxed_slice())
                        [(a % PAGE) as usize] = *b;
                }
            }
        }
    }
}

/// Memories, registers and semaphores.
#[derive(Clone)]
pub struct State {
    mems: Vec<Backing>,
    mem_names: Vec<String>,
    mem_sizes: Vec<i64>,
    /// Register contents as values (already rounded to the file's dtype), by file id.
    pub regs: Vec<Vec<f64>>,
    reg_elems: Vec<usize>,
    reg_names: Vec<String>,
    /// Semaphore counts, by bank id.
    pub sems: Vec<Vec<i64>>,
    /// Whether data is computed at all (timing-only runs skip it).
    pub functional: bool,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Memory contents are far too large to print.
        f.debug_struct("State")
            .field("memories", &self.mem_names)
            .field("semaphores", &self.sems)
            .finish_non_exhaustive()
    }
}

/// Largest memory kept flat; larger ones (off-chip DRAM of many GiB) are paged.
const FLAT_BYTES: i64 = 64 << 20;

impl State {
    /// Zeroed state for a machine.
    pub fn new(m: &Machine, functional: bool) -> State {
        let mems = m
            .memories
            .iter()
            .map(|x| {
                if functional && x.size.value <= FLAT_BYTES {
                    Backing::Flat(vec![0; x.size.value as usize])
                } else {
                    Backing::Paged(Default::default())
                }
            })
            .collect();
        let reg_elems: Vec<usize> = m
            .regfiles
            .iter()
            .map(|r| {
                r.shape
                    .iter()
                    .map(|d| d.value as usize)
                    .product::<usize>()
                    .max(1)
            })
            .collect();
        let regs = m
            .regfiles
            .iter()
            .zip(&reg_elems)
            .map(|(r, e)| {
                if functional {
                    vec![0.0; r.count.value as usize * e]
                } else {
                    Vec::new()
                }
            })
            .collect();
        State {
            mems,
            mem_names: m.memories.iter().map(|x| x.name.clone()).collect(),
            mem_sizes: m.memories.iter().map(|x| x.size.value).collect(),
            regs,
            reg_elems,
            reg_names: m.regfiles.iter().map(|r| r.name.clone()).collect(),
            sems: m
                .semaphores
                .iter()
                .map(|b| vec![0; b.count.value as usize])
                .collect(),
            functional,
        }
    }

    /// Faults unless `[addr, addr + bytes)` lies inside memory `mem`.
    fn bounds(&self, mem: usize, addr: i64, bytes: u64) -> Result<u64, Fault> {
        let end = addr.checked_add(bytes as i64).unwrap_or(i64::MAX);
        if addr < 0 || end > self.mem_sizes[mem] {
            return Err(Fault::OutOfBounds {
                memory: self.mem_names[mem].clone(),
                addr,
                bytes,
            });
        }
        Ok(addr as u64)
    }

    /// Reads bytes (for outputs).
    pub fn read_bytes(
        &mut self,
        _m: &Machine,
        mem: usize,
        addr: u64,
        len: u64,
    ) -> Result<Vec<u8>, Fault> {
        let a = self.bounds(mem, addr as i64, len)?;
        let mut out = vec![0; len as usize];
        self.mems[mem].read(a, &mut out);
        Ok(out)
    }

    /// Reads a program tensor's elements, dense (rows gathered from their pitch).
    pub fn read_tensor(
        &mut self,
        m: &Machine,
        mem: usize,
        t: &isa_specs::program::TensorDesc,
    ) -> Result<Vec<u8>, Fault> {
        let mut out = Vec::with_capacity(t.bytes() as usize);
        for (addr, _, len) in t.row_spans() {
            out.extend(self.read_bytes(m, mem, addr, len as u64)?);
        }
        Ok(out)
    }

    /// Writes bytes (for constant data and inputs).
    pub fn write_bytes(
        &mut self,
        _m: &Machine,
        mem: usize,
        addr: u64,
        bytes: &[u8],
    ) -> Result<(), Fault> {
        let a = self.bounds(mem, addr as i64, bytes.len() as u64)?;
        self.mems[mem].write(a, bytes);
        Ok(())
    }

    /// Loads one element.
    pub fn load(&mut self, _m: &Machine, mem: usize, addr: i64, dt: DType) -> Result<f64, Fault> {
        let a = self.bounds(mem, addr, dt.bytes())?;
        let mut buf = [0u8; 8];
        self.mems[mem].read(a, &mut buf[..dt.bytes() as usize]);
        Ok(from_bytes(dt, &buf[..dt.bytes() as usize]))
    }

    /// Stores one element, rounded to the dtype.
    pub fn store(
        &mut self,
        _m: &Machine,
        mem: usize,
        addr: i64,
        dt: DType,
        v: f64,
    ) -> Result<(), Fault> {
        let a = self.bounds(mem, addr, dt.bytes())?;
        self.mems[mem].write(a, &to_bytes(dt, v)[..dt.bytes() as usize]);
        Ok(())
    }

    fn reg_slot(&self, file: usize, reg: u32, elem: i64) -> Result<usize, Fault> {
        let per = self.reg_elems[file];
        let idx = (reg as usize).checked_mul(per).and_then(|b| {
            usize::try_from(elem)
                .ok()
                .filter(|e| *e < per)
                .map(|e| b + e)
        });
        match idx {
            Some(i) if i < self.regs[file].len() => Ok(i),
            _ => Err(Fault::BadRegister {
                file: self.reg_names[file].clone(),
                reg,
                elem,
            }),
        }
    }

    /// Reads one register element.
    pub fn reg(&self, file: usize, reg: u32, elem: i64) -> Result<f64, Fault> {
        Ok(self.regs[file][self.reg_slot(file, reg, elem)?])
    }

    /// Writes one register element (the value is already rounded to the file's dtype).
    pub fn set_reg(&mut self, file: usize, reg: u32, elem: i64, v: f64) -> Result<(), Fault> {
        let i = self.reg_slot(file, reg, elem)?;
        self.regs[file][i] = v;
        Ok(())
    }
}

/// The value of one element from its little-endian bytes.
pub fn from_bytes(dt: DType, bytes: &[u8]) -> f64 {
    let mut raw = [0u8; 8];
    let n = bytes.len().min(8);
    raw[..n].copy_from_slice(&bytes[..n]);
    let v = u64::from_le_bytes(raw);
    match dt {
        DType::I8 => f64::from(v as u8 as i8),
        DType::U8 => f64::from(v as u8),
        DType::I16 => f64::from(v as u16 as i16),
        DType::I32 => f64::from(v as u32 as i32),
        _ => f64::from(isa_specs::dtype::decode_real(dt, v)),
    }
}

/// The little-endian bytes of one element (rounded to nearest even; saturated into integers).
pub fn to_bytes(dt: DType, x: f64) -> [u8; 8] {
    let q = isa_specs::dtype::quantize(dt, x);
    let raw: u64 = match dt {
        DType::I8 | DType::I16 | DType::I32 => q as i64 as u64,
        DType::U8 => q as u64,
        _ => isa_specs::dtype::encode_real(dt, q as f32),
    };
    raw.to_le_bytes()
}

/// The result of an arithmetic operation in `dt`: floats round to nearest even;
/// integers wrap around as two's complement hardware does.
pub fn arith(dt: DType, x: f64) -> f64 {
    let wrap = |bits: u32, signed: bool| {
        if !x.is_finite() {
            return 0.0;
        }
        let modulus = 2f64.powi(bits as i32);
        let mut r = x.trunc().rem_euclid(modulus);
        if signed && r >= modulus / 2.0 {
            r -= modulus;
        }
        r
    };
    match dt {
        DType::I8 => wrap(8, true),
        DType::U8 => wrap(8, false),
        DType::I16 => wrap(16, true),
        DType::I32 => wrap(32, true),
        _ => isa_specs::dtype::quantize(dt, x),
    }
}

/// A conversion to `dt`: round to nearest even, saturate into integers.
pub fn cast(dt: DType, x: f64) -> f64 {
    isa_specs::dtype::quantize(dt, x)
}

/// Element-wise functions of semantics, in f64 (the caller rounds to the dtype).
pub mod func {
    /// e^x
    pub fn exp(x: f64) -> f64 {
        x.exp()
    }
    /// natural logarithm
    pub fn log(x: f64) -> f64 {
        x.ln()
    }
    /// hyperbolic tangent
    pub fn tanh(x: f64) -> f64 {
        x.tanh()
    }
    /// error function
    pub fn erf(x: f64) -> f64 {
        libm::erf(x)
    }
    /// square root
    pub fn sqrt(x: f64) -> f64 {
        x.sqrt()
    }
    /// 1/sqrt(x)
    pub fn rsqrt(x: f64) -> f64 {
        1.0 / x.sqrt()
    }
    /// 1/x
    pub fn recip(x: f64) -> f64 {
        1.0 / x
    }
    /// |x|
    pub fn abs(x: f64) -> f64 {
        x.abs()
    }
    /// 1/(1+e^-x)
    pub fn sigmoid(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }
    /// larger of two (NaN-propagating)
    pub fn max(a: f64, b: f64) -> f64 {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else {
            a.max(b)
        }
    }
    /// smaller of two (NaN-propagating)
    pub fn min(a: f64, b: f64) -> f64 {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else {
            a.min(b)
        }
    }
    /// round half to even
    pub fn round(x: f64) -> f64 {
        let r = x.round();
        if (x - x.trunc()).abs() == 0.5 {
            2.0 * (x / 2.0).round()
        } else {
            r
        }
    }
    /// 1 where `a < b`, else 0
    pub fn lt(a: f64, b: f64) -> f64 {
        f64::from(u8::from(a < b))
    }
    /// 1 where `a <= b`, else 0
    pub fn le(a: f64, b: f64) -> f64 {
        f64::from(u8::from(a <= b))
    }
    /// 1 where `a == b`, else 0
    pub fn eq(a: f64, b: f64) -> f64 {
        f64::from(u8::from(a == b))
    }
    /// `a` where `c` is non-zero, else `b`
    pub fn select(c: f64, a: f64, b: f64) -> f64 {
        if c != 0.0 { a } else { b }
    }
}
