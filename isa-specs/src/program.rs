//! The program file (`.tsr`): a versioned container of microcode, constant
//! data and I/O tensor descriptors, stamped with the target and a hash of the
//! machine model (with its parameter values) it was built for.
//!
//! Layout: the magic `TSRPROG\0`, the format version (u32, little-endian), the
//! body length (u64), a CRC-32 of the body (u32), then the body (postcard).
//! Loading refuses a wrong magic, another version, a truncated or corrupted
//! file, and (via [`Program::check_machine`]) a file built for another
//! machine or other parameter values.

use crate::Machine;
use crate::model::DType;
use serde::{Deserialize, Serialize};

/// The first bytes of every program file.
pub const MAGIC: &[u8; 8] = b"TSRPROG\0";
/// The format version this build writes and reads.
pub const VERSION: u32 = 4;
const HEADER: usize = 8 + 4 + 8 + 4;

/// A tensor the program reads or writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorDesc {
    /// Its name (an ONNX input or output name, or an assembly label).
    pub name: String,
    /// Element type in memory.
    pub dtype: DType,
    /// Shape, row-major.
    pub shape: Vec<u64>,
    /// The memory it lives in.
    pub memory: String,
    /// Its byte address there.
    pub addr: u64,
    /// Elements from the start of one row (last dimension) to the next; 0
    /// for dense. Rows padded for alignment have a pitch above the row length.
    pub pitch: u64,
    /// Rows in batches: `(rows per batch, elements from the start of one
    /// batch to the next)`, rows within a batch `pitch` apart; `None` when
    /// every row follows the one before. A key cache laid out for a
    /// memory that computes starts each head's rows aligned, and leaves
    /// room after them for the rows a step appends.
    pub batch: Option<(u64, u64)>,
    /// Stored transposed, where `Some`: see [`Columns`]. `pitch` and
    /// `batch` then describe the stored rows.
    pub columns: Option<Columns>,
}

/// A tensor stored transposed, in chunks: each batch's matrix (the last two
/// dimensions, `[n, d]`) is held as `d` stored rows of `n` elements, and
/// each stored row in chunks of `chunk` elements, `stride` elements apart.
/// Stored column `c` of a row lies `((c + skip) / chunk) * stride + (c +
/// skip) % chunk` elements after the row's start. A value cache laid out
/// for a memory that computes dot products with its rows (pim-dram's
/// `mac`) is stored so: a row per channel, a chunk as long as one
/// instruction's reduction, the `skip` leading columns left empty so the
/// column a step appends starts a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Columns {
    /// Empty columns before the first.
    pub skip: u64,
    /// Columns in a chunk.
    pub chunk: u64,
    /// Elements from one chunk to the next.
    pub stride: u64,
}

impl Columns {
    /// Elements from a stored row's start to its column `c`.
    pub fn offset(&self, c: u64) -> u64 {
        let at = c + self.skip;
        (at / self.chunk.max(1)) * self.stride + at % self.chunk.max(1)
    }
}

impl TensorDesc {
    /// Bytes of its elements (without row padding).
    pub fn bytes(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.dtype.bytes()
    }

    /// Elements in a stored row: the last dimension (1 for scalars), or
    /// the one before it where stored transposed.
    pub fn row_len(&self) -> u64 {
        match (self.columns, self.shape.len()) {
            (Some(_), r) if r >= 2 => self.shape[r - 2],
            _ => self.shape.last().copied().unwrap_or(1),
        }
    }

    /// Stored rows: the product of the leading dimensions, or of all but
    /// the one before the last where stored transposed.
    pub fn rows(&self) -> u64 {
        let r = self.shape.len();
        match self.columns {
            Some(_) if r >= 2 => self.shape[..r - 2].iter().product::<u64>() * self.shape[r - 1],
            _ => self.shape[..r.saturating_sub(1)].iter().product(),
        }
    }

    /// Elements from a stored row's start to its column `c`.
    fn col_offset(&self, c: u64) -> u64 {
        self.columns.map_or(c, |cs| cs.offset(c))
    }

    /// Elements from one row to the next.
    pub fn row_pitch(&self) -> u64 {
        if self.pitch == 0 {
            self.row_len()
        } else {
            self.pitch
        }
    }

    /// Elements from the tensor's start to row `r`'s.
    pub fn row_offset(&self, r: u64) -> u64 {
        match self.batch {
            Some((rows, stride)) if rows > 0 => (r % rows) * self.row_pitch() + (r / rows) * stride,
            _ => r * self.row_pitch(),
        }
    }

    /// Elements from its start to the end of its last row (0 if empty).
    pub fn extent(&self) -> u64 {
        match self.rows() {
            0 => 0,
            n if self.row_len() == 0 => self.row_offset(n - 1),
            n => self.row_offset(n - 1) + self.col_offset(self.row_len() - 1) + 1,
        }
    }

    /// Where each row's bytes go: `(address, offset in the dense bytes, length)`.
    pub fn row_spans(&self) -> Vec<(u64, usize, usize)> {
        let eb = self.dtype.bytes();
        if self.columns.is_some() {
            return self.element_spans();
        }
        let len = (self.row_len() * eb) as usize;
        if self.row_pitch() == self.row_len() && self.batch.is_none() {
            return vec![(self.addr, 0, (self.rows() * self.row_len() * eb) as usize)];
        }
        (0..self.rows())
            .map(|r| (self.addr + self.row_offset(r) * eb, r as usize * len, len))
            .collect()
    }

    /// [`Self::row_spans`] of a tensor stored transposed: one span per
    /// element, dense offsets in the tensor's own (untransposed) order.
    fn element_spans(&self) -> Vec<(u64, usize, usize)> {
        let eb = self.dtype.bytes();
        let r = self.shape.len();
        if r < 2 {
            return Vec::new();
        }
        let (n, d) = (self.shape[r - 2], self.shape[r - 1]);
        let batches: u64 = self.shape[..r - 2].iter().product();
        let mut out = Vec::with_capacity((batches * n * d) as usize);
        for b in 0..batches {
            for t in 0..n {
                for j in 0..d {
                    let at = self.row_offset(b * d + j) + self.col_offset(t);
                    let dense = ((b * n + t) * d + j) * eb;
                    out.push((self.addr + at * eb, dense as usize, eb as usize));
                }
            }
        }
        out
    }
}

/// Bytes to place in a memory before the program runs (weights, constants).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataSegment {
    /// The memory.
    pub memory: String,
    /// Byte address.
    pub addr: u64,
    /// Contents (serialized as one run of bytes: postcard writes the same
    /// bytes either way, this way in one copy).
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// A program for one machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// The target's name.
    pub target: String,
    /// [`model_hash`] of the machine (with parameter values) it was built for.
    pub model_hash: u64,
    /// The parameter values it was built with.
    pub params: Vec<(String, i64)>,
    /// Microcode: whole words, little-endian.
    #[serde(with = "serde_bytes")]
    pub code: Vec<u8>,
    /// Constant data.
    pub data: Vec<DataSegment>,
    /// Inputs.
    pub inputs: Vec<TensorDesc>,
    /// Outputs.
    pub outputs: Vec<TensorDesc>,
}

/// Why a program file cannot be used.
#[derive(Debug)]
pub enum ProgramError {
    /// Reading or writing failed.
    Io(std::io::Error),
    /// Not a program file.
    BadMagic,
    /// Written by another version of the format.
    Version(u32),
    /// Shorter than its header says.
    Truncated {
        /// Bytes expected.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The body does not match its checksum.
    Corrupt,
    /// The body does not decode.
    Body(String),
    /// Built for another target.
    WrongTarget {
        /// The file's target.
        file: String,
        /// The target asked for.
        expected: String,
    },
    /// Built for another version of the machine description or other parameter values.
    WrongModel {
        /// The target.
        target: String,
        /// Parameter values that differ: `(name, in the file, in force)`.
        differing: Vec<(String, Option<i64>, Option<i64>)>,
    },
}

impl std::fmt::Display for ProgramError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProgramError::Io(e) => write!(f, "{e}"),
            ProgramError::BadMagic => write!(f, "not a Tessera program file (bad magic number)"),
            ProgramError::Version(v) => write!(
                f,
                "program file format version {v}; this tessera reads version {VERSION}"
            ),
            ProgramError::Truncated { expected, found } => {
                write!(f, "program file is truncated: {found} bytes of {expected}")
            }
            ProgramError::Corrupt => write!(f, "program file is corrupted (checksum mismatch)"),
            ProgramError::Body(e) => write!(f, "program file body is malformed: {e}"),
            ProgramError::WrongTarget { file, expected } => {
                write!(
                    f,
                    "the program was built for target `{file}`, not `{expected}`"
                )
            }
            ProgramError::WrongModel { target, differing } if differing.is_empty() => write!(
                f,
                "the program was built for a different version of the `{target}` description (its machine-model hash differs); rebuild it"
            ),
            ProgramError::WrongModel { target, differing } => {
                let show =
                    |v: &Option<i64>| v.map_or_else(|| "unset".to_owned(), |v| v.to_string());
                let list: Vec<String> = differing
                    .iter()
                    .map(|(n, a, b)| format!("{n} = {} in the file, {} now", show(a), show(b)))
                    .collect();
                write!(
                    f,
                    "the program was built for `{target}` with other parameter values ({}); pass the same --set values or rebuild it",
                    list.join("; ")
                )
            }
        }
    }
}

impl std::error::Error for ProgramError {}

impl From<std::io::Error> for ProgramError {
    fn from(e: std::io::Error) -> Self {
        ProgramError::Io(e)
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A hash of everything in a machine model, parameter values included.
pub fn model_hash(m: &Machine) -> u64 {
    // RON of plain data with ordered fields is deterministic.
    fnv1a(ron::to_string(m).unwrap_or_default().as_bytes())
}

/// A writer that counts and checksums what passes through it.
struct Checksummed<W> {
    out: W,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<W: std::io::Write> std::io::Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.crc.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl Program {
    /// An empty program for a machine.
    pub fn new(m: &Machine) -> Program {
        Program {
            target: m.name.clone(),
            model_hash: model_hash(m),
            params: m.params.iter().map(|p| (p.name.clone(), p.value)).collect(),
            code: Vec::new(),
            data: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ProgramError> {
        let data: usize = self.data.iter().map(|d| d.bytes.len()).sum();
        let mut out = Vec::with_capacity(HEADER + self.code.len() + data + 4096);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.resize(HEADER, 0); // length and checksum, once the body is written
        let mut out =
            postcard::to_extend(self, out).map_err(|e| ProgramError::Body(e.to_string()))?;
        let body = out.len() - HEADER;
        let crc = crc32fast::hash(&out[HEADER..]);
        out[12..20].copy_from_slice(&(body as u64).to_le_bytes());
        out[20..24].copy_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Reads a program from the file's bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Program, ProgramError> {
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            return Err(ProgramError::BadMagic);
        }
        let found = bytes.len() as u64;
        let header = bytes.get(..HEADER).ok_or(ProgramError::Truncated {
            expected: HEADER as u64,
            found,
        })?;
        let u32_at = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().unwrap_or_default());
        let u64_at = |i: usize| u64::from_le_bytes(header[i..i + 8].try_into().unwrap_or_default());
        let version = u32_at(8);
        if version != VERSION {
            return Err(ProgramError::Version(version));
        }
        let len = u64_at(12);
        let crc = u32_at(20);
        let expected = (HEADER as u64).saturating_add(len);
        if found < expected {
            return Err(ProgramError::Truncated { expected, found });
        }
        let body = &bytes[HEADER..HEADER + len as usize];
        if crc32fast::hash(body) != crc || found > expected {
            return Err(ProgramError::Corrupt);
        }
        postcard::from_bytes(body).map_err(|e| ProgramError::Body(e.to_string()))
    }

    /// Writes the file.
    pub fn save(&self, path: &std::path::Path) -> Result<(), ProgramError> {
        // The same bytes as `to_bytes`, streamed (a program is mostly its
        // weights): the header's length and checksum are filled in last.
        // Written beside the file and renamed over it when complete, so a
        // failure leaves any earlier file as it was.
        let mut part = path.as_os_str().to_owned();
        part.push(".part");
        let part = std::path::PathBuf::from(part);
        let written = self.write_file(&part);
        if written.is_err() {
            let _ = std::fs::remove_file(&part);
        }
        written?;
        Ok(std::fs::rename(&part, path)?)
    }

    fn write_file(&self, path: &std::path::Path) -> Result<(), ProgramError> {
        self.write_to(std::io::BufWriter::new(std::fs::File::create(path)?))?;
        Ok(())
    }

    /// Streams the bytes [`Program::to_bytes`] gives into `out` (at its
    /// start), without holding them all: the body as it is serialized, then
    /// the header's length and checksum. Returns `out`, flushed.
    pub fn write_to<W: std::io::Write + std::io::Seek>(
        &self,
        mut out: W,
    ) -> Result<W, ProgramError> {
        use std::io::SeekFrom;
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&[0; HEADER - 12])?;
        let mut body = Checksummed {
            out,
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        postcard::to_io(self, &mut body).map_err(|e| ProgramError::Body(e.to_string()))?;
        let Checksummed { mut out, crc, len } = body;
        out.seek(SeekFrom::Start(12))?;
        out.write_all(&len.to_le_bytes())?;
        out.write_all(&crc.finalize().to_le_bytes())?;
        out.flush()?;
        Ok(out)
    }

    /// Reads a file.
    pub fn load(path: &std::path::Path) -> Result<Program, ProgramError> {
        Program::from_bytes(&std::fs::read(path)?)
    }

    /// Refuses the program unless it was built for exactly this machine and these parameter values.
    pub fn check_machine(&self, m: &Machine) -> Result<(), ProgramError> {
        if self.target != m.name {
            return Err(ProgramError::WrongTarget {
                file: self.target.clone(),
                expected: m.name.clone(),
            });
        }
        if self.model_hash == model_hash(m) {
            return Ok(());
        }
        let now: Vec<(String, i64)> = m.params.iter().map(|p| (p.name.clone(), p.value)).collect();
        let mut names: Vec<&String> = self.params.iter().chain(&now).map(|(n, _)| n).collect();
        names.sort();
        names.dedup();
        let get =
            |list: &[(String, i64)], n: &str| list.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        let differing = names
            .into_iter()
            .filter_map(|n| {
                let (a, b) = (get(&self.params, n), get(&now, n));
                (a != b).then(|| (n.clone(), a, b))
            })
            .collect();
        Err(ProgramError::WrongModel {
            target: m.name.clone(),
            differing,
        })
    }
}
