//! Transposes of computed tensors, tile by tile through a transposing copy
//! instruction of the machine (`d[j, i] = src[i, j]`).

use super::emit::{Emitter, MemTile, Pad, Ref, Val};
use super::machine::{self, Loc, Place};
use super::{LowerError, Lowerer, err};
use isa_specs::select::{TileAccess, TileExpr, TileOp, TilePlace, TileTensor};

impl Lowerer<'_> {
    /// A transpose of the last two dimensions (the leading ones kept), tile by
    /// tile through a transposing copy instruction (`d[j, i] = src[i, j]`).
    pub(super) fn transpose(
        &mut self,
        n: &crate::ir::Node,
        perm: &[usize],
    ) -> Result<(), LowerError> {
        let g = self.g;
        let rank = perm.len();
        let swaps_last_two = crate::ir::swaps_last_two(perm);
        let (x, y) = (n.inputs[0], n.outputs[0]);
        let (xin, yout) = (
            self.layout
                .homes
                .get(&x)
                .cloned()
                .ok_or_else(|| err("input without a home"))?,
            self.layout
                .homes
                .get(&y)
                .cloned()
                .ok_or_else(|| err("output without a home"))?,
        );
        if rank >= 1 && perm[rank - 1] == rank - 1 {
            return self.permute_rows(n, perm);
        }
        if !swaps_last_two {
            return Err(Self::node_err(
                n,
                format!(
                    "Transpose with perm {perm:?} is not supported yet (only swapping the last two dimensions)"
                ),
            ));
        }
        let shape = &g.ty(x).shape;
        let (r, c) = (shape[rank - 2] as i64, shape[rank - 1] as i64);
        let batches: i64 = shape[..rank - 2].iter().product::<usize>() as i64;
        if !self.transpose_tiles(n, &xin, &yout, batches, r, c)? {
            return self.transpose_by_elements(n, &xin, &yout, batches, r, c);
        }
        Ok(())
    }

    /// `batches` matrices `r` x `c` of `xin` (row `b·r + i`) transposed
    /// into `yout` (row `b·c + j`), tile by tile through a transposing copy
    /// instruction; `false` (nothing emitted) where the machine has none
    /// the data can reach and come back from.
    pub(super) fn transpose_tiles(
        &mut self,
        n: &crate::ir::Node,
        xin: &super::Home,
        yout: &super::Home,
        batches: i64,
        r: i64,
        c: i64,
    ) -> Result<bool, LowerError> {
        let home = Loc {
            place: Place::Mem(xin.mem),
            dtype: xin.dtype,
        };
        let back = Loc {
            place: Place::Mem(yout.mem),
            dtype: yout.dtype,
        };
        // A transposing instruction the data can reach and come back from.
        let cands: Vec<machine::Copy> = self
            .info
            .transposes
            .iter()
            .filter(|t| {
                self.info.path(&[home], t.from).is_some() && self.info.path(&[t.to], back).is_some()
            })
            .cloned()
            .collect();
        let Some(tc) = cands
            .iter()
            .find(|t| t.cast.is_none())
            .or(cands.first())
            .cloned()
        else {
            return Ok(false);
        };
        // The largest square tile the instruction takes whose source and
        // result each fit an eighth of their memory (tiles in flight
        // overlap: the next lands while this one is copied back).
        let fits = |l: Loc, h: i64, w: i64| match l.place {
            Place::Mem(mem) => {
                h * w * l.dtype.bytes() as i64 <= self.e.m.memories[mem.index()].size.value / 8
            }
            Place::Reg(_) => true,
        };
        let mut t = 1i64;
        for size in [128i64, 64, 32, 16, 8, 4, 2, 1] {
            let (h, w) = (size.min(r), size.min(c));
            let op = self.transpose_op(&tc, h, w, None, None);
            if size > 1 && !(fits(tc.from, h, w) && fits(tc.to, w, h)) {
                continue;
            }
            if self.e.check(&op.0, tc.inst).is_ok() {
                t = size;
                break;
            }
        }
        let flight_most = match tc.to.place {
            Place::Mem(mem) => self.e.m.memories[mem.index()].size.value / 4,
            Place::Reg(_) => i64::MAX,
        };
        let mut in_flight: std::collections::VecDeque<(MemTile, i64)> = Default::default();
        for b in 0..batches {
            let mut i = 0;
            while i < r {
                let h = t.min(r - i);
                let mut j = 0;
                while j < c {
                    let w = t.min(c - j);
                    let src = xin.tile(b * r + i, j, h, w);
                    let Val::Mem(mut src) = self
                        .e
                        .to_loc(Val::Mem(src), tc.from, None, Pad::Dense)
                        .map_err(err)?
                    else {
                        return Err(err("a transpose operand landed in a register"));
                    };
                    let Place::Mem(dm) = tc.to.place else {
                        return Err(err("a transposing copy into registers"));
                    };
                    let dst = self.e.buffer(dm, tc.to.dtype, w, h);
                    // A tile of a wider matrix already in place (a value kept
                    // on chip) is copied dense first where the instruction
                    // reads only dense tiles.
                    if src.pitch != w
                        && self
                            .e
                            .check(
                                &self.transpose_op(&tc, h, w, Some(&src), Some(&dst)).0,
                                tc.inst,
                            )
                            .is_err()
                    {
                        let Place::Mem(sm) = tc.from.place else {
                            return Err(err("a transposing copy from registers"));
                        };
                        let dense = self.e.buffer(sm, tc.from.dtype, h, w);
                        self.e
                            .to_loc(Val::Mem(src), tc.from, Some(&dense), Pad::Dense)
                            .map_err(err)?;
                        src = dense;
                    }
                    self.e.ready(&src).map_err(err)?;
                    let (op, refs) = self.transpose_op(&tc, h, w, Some(&src), Some(&dst));
                    self.e
                        .emit(&op, &refs, Some(tc.inst))
                        .map_err(|e| Self::node_err(n, e))?;
                    let out = yout.tile(b * c + j, i, w, h);
                    let stored = self
                        .e
                        .to_loc(Val::Mem(dst), back, Some(&out), Pad::Dense)
                        .map_err(err)?;
                    // Tiles on their way back hold their buffers: at most a
                    // quarter of the memory in flight.
                    if let Val::Mem(t) = stored {
                        in_flight.push_back((t, w * h * tc.to.dtype.bytes() as i64));
                    }
                    while in_flight.iter().map(|f| f.1).sum::<i64>() > flight_most {
                        if let Some((t, _)) = in_flight.pop_front() {
                            self.e.ready(&t).map_err(err)?;
                        }
                    }
                    j += w;
                }
                i += h;
            }
        }
        Ok(true)
    }

    /// A transpose without a transposing copy: tiles land on chip and move
    /// element by element through scalar registers (two instructions per
    /// element), then go back whole.
    fn transpose_by_elements(
        &mut self,
        n: &crate::ir::Node,
        xin: &super::Home,
        yout: &super::Home,
        batches: i64,
        r: i64,
        c: i64,
    ) -> Result<(), LowerError> {
        let lacks = "cannot compile: the target lacks a transposing copy `d[j, i] = a[i, j]`";
        let missing = |message: String| LowerError::MissingOperation {
            semantics: "d[j, i] = a[i, j]".to_owned(),
            message,
        };
        let land = self
            .landing_of(xin.dtype)
            .map_err(|_| Self::node_err(n, missing(lacks.to_owned())))?;
        let Place::Mem(lm) = land.place else {
            return Err(Self::node_err(n, missing(lacks.to_owned())));
        };
        let Some(mv) = super::scalar::moves_near(self.info, self.e.m, lm, land.dtype) else {
            return Err(Self::node_err(
                n,
                missing(format!(
                    "{lacks}, and scalar loads and stores of {} in `{}`",
                    land.dtype.name(),
                    self.e.m.memories[lm.index()].name
                )),
            ));
        };
        // Tiles go where the scalar moves are.
        let work = Loc {
            place: Place::Mem(mv.mem),
            dtype: land.dtype,
        };
        let t = 32i64;
        for b in 0..batches {
            let mut i = 0;
            while i < r {
                let h = t.min(r - i);
                let mut j = 0;
                while j < c {
                    let w = t.min(c - j);
                    let rows: Vec<i64> = (b * r + i..b * r + i + h).collect();
                    let a = self.load_rows(xin, &rows, j, w, work, Pad::Aligned)?;
                    let out = self.e.buffer_padded(mv.mem, land.dtype, w, h, Pad::Aligned);
                    for y in 0..h {
                        for x in 0..w {
                            super::scalar::move_element(&mut self.e, &mv, &a, y, x, &out, x, y)
                                .map_err(err)?;
                        }
                    }
                    let rows: Vec<i64> = (b * c + j..b * c + j + w).collect();
                    self.store_rows(&out, yout, &rows, i, h)?;
                    j += w;
                }
                i += h;
            }
        }
        Ok(())
    }

    /// `dst[j, i] = src[i, j]` over an `h` x `w` source tile (placeholders when no tiles are given).
    fn transpose_op(
        &self,
        tc: &machine::Copy,
        h: i64,
        w: i64,
        src: Option<&MemTile>,
        dst: Option<&MemTile>,
    ) -> (TileOp, Vec<Ref>) {
        let place = |loc: Loc, shape: &[i64]| match loc.place {
            Place::Mem(mem) => TilePlace::Mem {
                mem,
                addr: 0,
                strides: isa_specs::select::dense(shape),
            },
            Place::Reg(file) => TilePlace::Reg { file, reg: 0 },
        };
        let (s, sr) = match src {
            Some(t) => Emitter::mem_tensor(t, vec![h, w]),
            None => (
                TileTensor {
                    dtype: tc.from.dtype,
                    shape: vec![h, w],
                    place: place(tc.from, &[h, w]),
                },
                Ref::Fixed,
            ),
        };
        let (d, dr) = match dst {
            Some(t) => Emitter::mem_tensor(t, vec![w, h]),
            None => (
                TileTensor {
                    dtype: tc.to.dtype,
                    shape: vec![w, h],
                    place: place(tc.to, &[w, h]),
                },
                Ref::Fixed,
            ),
        };
        let ix = |i: u32| isa_specs::model::Affine {
            terms: vec![(isa_specs::model::IndexId(i), 1)],
            constant: 0,
            offsets: Vec::new(),
        };
        let read = TileExpr::Access(TileAccess {
            tensor: 1,
            indices: vec![ix(0), ix(1)],
        });
        let value = match tc.cast {
            Some(dt) => TileExpr::Cast(dt, Box::new(read)),
            None => read,
        };
        (
            TileOp {
                tensors: vec![d, s],
                extents: vec![h, w],
                target: TileAccess {
                    tensor: 0,
                    indices: vec![ix(1), ix(0)],
                },
                op: isa_specs::model::AssignOp::Set,
                value,
            },
            vec![dr, sr],
        )
    }
}
