//! The constant pool: bytes at home for every value and constant, constants
//! packed in the type and layout their readers need, and the undo of a
//! failed attempt.

use super::Lowerer;
use super::emit::{self, Base, MemTile};
use super::error::LowerError;
use super::layout::{Home, view};
use crate::ir::ValueId;
use isa_specs::model::DType;
use isa_specs::program::DataSegment;
use std::collections::HashMap;

/// What a constant packed at home is, for the pool's cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum PackKey {
    /// Constant `value` (or zeros where `zeros`) expanded to the shape of `out`.
    Expanded { value: ValueId, out: ValueId },
    /// Rows `row0..row0 + rows` of constant `value`, `cols` wide.
    Rows {
        value: ValueId,
        row0: i64,
        rows: i64,
        cols: i64,
    },
    /// Constant `value` in its own shape.
    Own(ValueId),
    /// A tile `mnk` at `(r0, c0)` of constant `value`, read by instruction `inst`.
    Residue {
        value: ValueId,
        batch_row0: i64,
        at: (i64, i64),
        mnk: (i64, i64, i64),
        inst: isa_specs::model::InstId,
    },
    /// One register granule `(rows, cols)` of copies of the number whose bits are `bits`.
    Uniform { bits: u64, granule: (i64, i64) },
    /// A column of `rows` copies of the number whose bits are `bits`.
    Column { bits: u64, rows: i64 },
    /// A `rows` x `cols` block of a reduction's identity.
    Identity {
        kind: crate::ir::ReduceKind,
        rows: i64,
        cols: i64,
    },
    /// Row `row` of constant `value` repeated `rows` times.
    RowRepeated { value: ValueId, row: i64, rows: i64 },
    /// Each row of constant `value` repeated along itself to `width` columns.
    Tiled { value: ValueId, width: i64 },
    /// A `rows` x `cols` block of the number whose bits are `bits`, in `dt`.
    Fill {
        bits: u64,
        rows: i64,
        cols: i64,
        dt: DType,
    },
}

/// A constant operand of a contraction packed into tile panels
/// ([`Lowerer::packed_matrix`]), for the pool's cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct PanelKey {
    pub(super) value: ValueId,
    pub(super) batch_row0: i64,
    pub(super) dims: Vec<super::ops::Role>,
    pub(super) dtype: DType,
    pub(super) tile: (i64, i64, i64),
}

/// The constant pool: bytes at home, data segments and the constants packed into them.
pub(super) struct Pool {
    pub(super) next_addr: u64,
    pub(super) data: Vec<DataSegment>,
    pub(super) packed: HashMap<PackKey, MemTile>,
    pub(super) packed_panels: HashMap<PanelKey, (Vec<MemTile>, i64)>,
    /// Constants packed for products in a type narrower than activations
    /// (weights as bf16): the fewest bytes per element each is held in at
    /// home, for the roofline's minimum traffic.
    pub(super) packed_elem_bytes: HashMap<ValueId, u64>,
    /// Constants a contraction reads where they lie at home (resident in
    /// the layout it reads them in): the roofline counts their bytes at
    /// the rate it reads them there, not across the interface.
    pub(super) read_in_place: std::collections::HashSet<ValueId>,
    /// Time spent packing constants into the program's data.
    pub(super) packing: std::time::Duration,
}

/// What a lowering attempt may change, and a failed one must undo (see
/// [`Lowerer::attempt`]): the code and buffers emitted, the data placed at
/// home, and the caches of constants packed there, which would otherwise
/// point at data undone.
pub(super) struct Attempt {
    pub(super) cp: emit::Checkpoint,
    pub(super) data: usize,
    pub(super) packed: HashMap<PackKey, MemTile>,
    pub(super) packed_panels: HashMap<PanelKey, (Vec<MemTile>, i64)>,
}

/// For every element of a tensor of shape `to` (row-major), the flat index of
/// the element of a tensor of shape `from` that numpy broadcasting reads.
pub fn broadcast_offsets(from: &[usize], to: &[usize]) -> Vec<usize> {
    crate::interp::offsets(to, &crate::interp::broadcast_strides(from, to))
}

/// Bytes of `data` in element type `dt`.
pub fn encode(dt: DType, data: impl IntoIterator<Item = f64>) -> Vec<u8> {
    let data: Vec<f64> = data.into_iter().collect();
    let mut out = vec![0; data.len() * dt.bytes() as usize];
    encode_into(dt, &data, &mut out);
    out
}

/// Elements `start..` of `data` encoded as `dt` into `out` (as many as it
/// holds): straight from the model file's `f32` bytes where they are what
/// `data` holds and `dt` is `f32` or `bf16`, else through `f64`s.
pub fn encode_elements(data: &crate::ir::Data, start: usize, dt: DType, out: &mut [u8]) {
    let n = out.len() / dt.bytes() as usize;
    match (data.f32_bytes(), dt) {
        (Some(b), DType::F32) => out.copy_from_slice(&b[4 * start..4 * (start + n)]),
        (Some(b), DType::Bf16) => {
            // As arrays, so that a word is one load and the loop vectorises
            // (byte by byte it did not: a sixth of compiling GPT-2).
            let (words, _) = b[4 * start..4 * (start + n)].as_chunks::<4>();
            let (halves, _) = out.as_chunks_mut::<2>();
            for (w, o) in words.iter().zip(halves) {
                *o = isa_specs::dtype::bf16_bits(u32::from_le_bytes(*w)).to_le_bytes();
            }
        }
        _ => {
            let mut buf = vec![0.0; n];
            data.read(start, &mut buf);
            encode_into(dt, &buf, out);
        }
    }
}

/// Writes `data` in element type `dt` into `out` (exactly as long): the bytes
/// [`targets::sim::to_bytes`] gives, with the common float types converted
/// directly (constant packing converts every weight of a model).
pub fn encode_into(dt: DType, data: &[f64], out: &mut [u8]) {
    match dt {
        DType::F32 => {
            for (x, o) in data.iter().zip(out.chunks_exact_mut(4)) {
                o.copy_from_slice(&(*x as f32).to_le_bytes());
            }
        }
        DType::Bf16 => {
            for (x, o) in data.iter().zip(out.chunks_exact_mut(2)) {
                let b = isa_specs::dtype::bf16_from_f64(*x);
                o.copy_from_slice(&b.to_bits().to_le_bytes());
            }
        }
        _ => {
            let n = dt.bytes() as usize;
            for (x, o) in data.iter().zip(out.chunks_exact_mut(n)) {
                o.copy_from_slice(&targets::sim::to_bytes(dt, *x)[..n]);
            }
        }
    }
}

impl Lowerer<'_> {
    pub(super) fn alloc_home(&mut self, bytes: u64, align: u64) -> u64 {
        let a = align.max(64);
        let at = self.pool.next_addr.next_multiple_of(a);
        // Slack after every tensor: padded tiles may read a little past the end.
        self.pool.next_addr = at + bytes + 4096;
        at
    }

    /// The state a failed lowering attempt goes back to ([`Self::undo`]).
    pub(super) fn attempt(&self) -> Attempt {
        Attempt {
            cp: self.e.checkpoint(),
            data: self.pool.data.len(),
            packed: self.pool.packed.clone(),
            packed_panels: self.pool.packed_panels.clone(),
        }
    }

    /// Undoes everything emitted, placed and packed since `a` was taken.
    pub(super) fn undo(&mut self, a: Attempt) {
        self.e.rollback(a.cp);
        self.pool.data.truncate(a.data);
        self.pool.packed = a.packed;
        self.pool.packed_panels = a.packed_panels;
        // Blocks staged on chip by the code undone.
        self.cache.fills.clear();
    }

    /// A constant expanded to the shape of `out`, packed at home in the activation type.
    pub(super) fn packed_const(&mut self, v: ValueId, out: ValueId) -> Result<MemTile, LowerError> {
        let key = PackKey::Expanded { value: v, out };
        if let Some(t) = self.pool.packed.get(&key) {
            return Ok(t.clone());
        }
        let g = self.g;
        let os = g.ty(out).shape.clone();
        let (rows, cols) = view(&os);
        let t = &g.constants[&v];
        let data: Vec<f64> = broadcast_offsets(&t.ty.shape, &os)
            .into_iter()
            .map(|o| t.data.get(o).copied().unwrap_or(0.0))
            .collect();
        let dt = self.layout.act;
        let home = self.padded(&data, rows, cols, dt);
        let t = home.tile(0, 0, rows, cols);
        self.pool.packed.insert(key, t.clone());
        Ok(t)
    }

    /// Notes that constant `v` is held at home in `dt` ([`Compiled::min_home_bytes`]).
    pub(super) fn note_packed(&mut self, v: ValueId, dt: DType) {
        let b = self.pool.packed_elem_bytes.entry(v).or_insert(u64::MAX);
        *b = (*b).min(dt.bytes());
    }

    /// Places a dense `rows` x `cols` matrix at home as constant data, rows aligned.
    pub(super) fn padded(&mut self, data: &[f64], rows: i64, cols: i64, dt: DType) -> Home {
        self.padded_from(data, cols, rows, cols, dt)
    }

    /// [`Lowerer::padded`] of the first `cols` columns of the rows of `src`,
    /// `src_pitch` elements apart.
    pub(super) fn padded_from(
        &mut self,
        src: &[f64],
        src_pitch: i64,
        rows: i64,
        cols: i64,
        dt: DType,
    ) -> Home {
        let (sp, c) = (src_pitch as usize, cols as usize);
        self.padded_rows(rows, cols, dt, |r, row| {
            row.copy_from_slice(&src[r * sp..r * sp + c]);
        })
    }

    /// [`Lowerer::padded`] of the rows `row(r, buffer)` writes into a buffer
    /// of `cols` elements (zeros when called), one at a time.
    pub(super) fn padded_rows(
        &mut self,
        rows: i64,
        cols: i64,
        dt: DType,
        mut row: impl FnMut(usize, &mut [f64]),
    ) -> Home {
        let mut buf = vec![0.0; cols as usize];
        self.padded_bytes(rows, cols, dt, |r, out| {
            buf.fill(0.0);
            row(r, &mut buf);
            encode_into(dt, &buf, out);
        })
    }

    /// [`Lowerer::padded_rows`] with the rows written as `dt`'s bytes
    /// (`cols` elements' worth, zeros when called).
    pub(super) fn padded_bytes(
        &mut self,
        rows: i64,
        cols: i64,
        dt: DType,
        mut row: impl FnMut(usize, &mut [u8]),
    ) -> Home {
        let mut homes = self.padded_panels(rows, cols, 1, dt, |r, _, out| row(r, out));
        homes.remove(0)
    }

    /// `count` panels like [`Lowerer::padded_bytes`], filled together:
    /// `row(r, panel, buffer)` for every row, then every panel (a matrix
    /// cut into panels of columns is read once, row by row, not once per
    /// panel).
    pub(super) fn padded_panels(
        &mut self,
        rows: i64,
        cols: i64,
        count: usize,
        dt: DType,
        mut row: impl FnMut(usize, usize, &mut [u8]),
    ) -> Vec<Home> {
        let started = std::time::Instant::now();
        let pitch = self.home_pitch(cols, dt);
        let el = dt.bytes() as usize;
        let (c, line) = (cols as usize, pitch as usize * el);
        let mut panels: Vec<Vec<u8>> = (0..count)
            .map(|_| vec![0u8; rows as usize * line])
            .collect();
        for r in 0..rows as usize {
            for (j, bytes) in panels.iter_mut().enumerate() {
                row(r, j, &mut bytes[r * line..r * line + c * el]);
            }
        }
        self.pool.packing += started.elapsed();
        panels
            .into_iter()
            .map(|bytes| {
                let addr = self.alloc_home(bytes.len() as u64, 64);
                self.pool.data.push(DataSegment {
                    memory: self.e.m.memories[self.home_mem().index()].name.clone(),
                    addr,
                    bytes,
                });
                Home {
                    mem: self.info.home,
                    base: Base::Fixed(addr),
                    dtype: dt,
                    rows,
                    cols,
                    pitch,
                    batch: None,
                    first: 0,
                    columns: None,
                }
            })
            .collect()
    }
}
