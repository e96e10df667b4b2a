//! Convolution windows read in place: tiles of the windows an `Im2Row`
//! would write, brought together from the rows of the channels-last image
//! (for the products reading them, [`super::layout::Layout::windows`]),
//! and the depthwise window sum (`WindowSum`) on the vector units.

use super::emit::{MemTile, Pad, Val};
use super::machine::{Loc, Place};
use super::ops::{self, Ew, Step};
use super::{LowerError, Lowerer, PackKey, err};
use crate::ir::{Node, Op, ValueId, Window};
use isa_specs::model::DType;

impl Lowerer<'_> {
    /// Rows `r0..r0 + h`, columns `c0..c0 + w` of the windows `Im2Row`
    /// node `wi` would write ([`super::layout::Layout::windows`]), brought
    /// together in a fresh buffer at `at` (the image's type, laid out as
    /// `pad` says): one transfer per run of a window position's pixels
    /// inside one output row (whole rows of the channels-last image, so
    /// however the window is shifted), and one per run outside from a
    /// block of the fill value (on chip where it can be, see
    /// [`Self::fill_on_chip`]).
    pub(super) fn window_tile(
        &mut self,
        wi: usize,
        (r0, c0): (i64, i64),
        (h, w): (i64, i64),
        at: Loc,
        pad: Pad,
    ) -> Result<MemTile, LowerError> {
        let g = self.g;
        let n = &g.nodes[wi];
        let Op::Im2Row { window, fill } = &n.op else {
            return Err(err("windows without their Im2Row"));
        };
        self.windows_of(n.inputs[0], window, *fill, (r0, c0), (h, w), at, pad)
            .map_err(|e| Self::at_node(n, e))
    }

    /// [`Self::window_tile`] of the windows `window` places over image `x`
    /// (`fill` outside it).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn windows_of(
        &mut self,
        x: ValueId,
        window: &Window,
        fill: f64,
        (r0, c0): (i64, i64),
        (h, w): (i64, i64),
        at: Loc,
        pad: Pad,
    ) -> Result<MemTile, LowerError> {
        let g = self.g;
        let geo =
            Windows::new(&g.ty(x).shape, window).ok_or_else(|| err("the window does not fit"))?;
        let src = self.home_of(x)?;
        let Place::Mem(am) = at.place else {
            return Err(err("windows brought into registers"));
        };
        let c = geo.c;
        let buf = self.e.buffer_padded(am, at.dtype, h, w, pad);
        let mut loaded = Vec::new();
        for p in (c0 / c)..=((c0 + w - 1) / c).min(geo.positions() - 1) {
            // This position's columns in the tile, and in the image's rows.
            let (lo, hi) = ((p * c).max(c0), ((p + 1) * c).min(c0 + w));
            let (cols, from_col, to_col) = (hi - lo, lo - p * c, lo - c0);
            let mut r = r0;
            while r < r0 + h {
                // The run from `r`: inside, evenly spaced in the image; or
                // outside; within one output row either way.
                let row_end = ((r / geo.ow) + 1) * geo.ow;
                let first = geo.source(r, p);
                let mut e = r + 1;
                while e < (r0 + h).min(row_end)
                    && match (first, geo.source(e, p)) {
                        (Some(f), Some(s)) => s - f == (e - r) * geo.sw,
                        (None, None) => true,
                        _ => false,
                    }
                {
                    e += 1;
                }
                let len = e - r;
                let from = match first {
                    Some(f) => self.rows_tile(&src, f, geo.sw, from_col, len, cols),
                    None => self
                        .fill_on_chip(fill, geo.ow.min(h), c, src.dtype, at)?
                        .view(0, from_col, len, cols),
                };
                let into = buf.view(r - r0, to_col, len, cols);
                let widest = self.register_row(from.loc(), at);
                for (from, into) in wider_rows(from, into, widest) {
                    loaded.push(
                        self.e
                            .to_loc(Val::Mem(from), at, Some(&into), Pad::Dense)
                            .map_err(err)?,
                    );
                }
                r = e;
            }
        }
        // Columns past the last window position (a reduction step wider
        // than the windows, whose rows of `B` are zero) are zero: whatever
        // an earlier tile left in the buffer there could be a NaN or an
        // infinity, and 0 · NaN is NaN.
        let k = geo.positions() * c;
        if c0 + w > k {
            let lo = c0.max(k);
            let zeros = self
                .fill_block(0.0, h, c0 + w - lo, src.dtype)
                .view(0, 0, h, c0 + w - lo);
            let into = buf.view(0, lo - c0, h, c0 + w - lo);
            loaded.push(
                self.e
                    .to_loc(Val::Mem(zeros), at, Some(&into), Pad::Dense)
                    .map_err(err)?,
            );
        }
        self.all_ready(&loaded)?;
        Ok(buf)
    }

    /// The elements of a register's row where copies from `from` to `to`
    /// pass through registers (the first on the way), else 0.
    fn register_row(&self, from: Loc, to: Loc) -> i64 {
        let path = if from == to {
            self.info.round_trip(to)
        } else {
            self.info.path(&[from], to)
        };
        path.and_then(|(_, chain)| {
            chain
                .iter()
                .find_map(|&ci| match self.info.copies[ci].to.place {
                    Place::Reg(f) => Some(self.e.granule(f).1),
                    Place::Mem(_) => None,
                })
        })
        .unwrap_or(0)
    }

    /// Waits for the transfers that brought `loaded` on chip.
    fn all_ready(&mut self, loaded: &[Val]) -> Result<(), LowerError> {
        for v in loaded {
            if let Val::Mem(t) = v {
                self.e.ready(t).map_err(err)?;
            }
        }
        Ok(())
    }

    /// A `rows` x `cols` block of `value` for windows landing at `at`: on
    /// chip, there, brought once per region (a copy within the memory
    /// instead of a transfer from home, and its wait, for every run of
    /// windows outside the image); else the block at home, in `dt`.
    fn fill_on_chip(
        &mut self,
        value: f64,
        rows: i64,
        cols: i64,
        dt: DType,
        at: Loc,
    ) -> Result<MemTile, LowerError> {
        let home = self.fill_block(value, rows, cols, dt);
        if at.place == Place::Mem(self.home_mem())
            || self.info.path(&[home.loc()], at).is_none()
            || self.info.round_trip(at).is_none()
        {
            return Ok(home);
        }
        let key = (value.to_bits(), rows, cols, at);
        if let Some(t) = self.cache.fills.get(&key) {
            return Ok(t.clone());
        }
        let Val::Mem(t) = self
            .e
            .to_loc(Val::Mem(home), at, None, Pad::Dense)
            .map_err(err)?
        else {
            return Err(err("a block of the fill value staged outside memory"));
        };
        self.e.ready(&t).map_err(err)?;
        self.cache.fills.insert(key, t.clone());
        Ok(t)
    }

    /// A `rows` x `cols` block of `value` at home, in `dt` (cached).
    pub(super) fn fill_block(&mut self, value: f64, rows: i64, cols: i64, dt: DType) -> MemTile {
        let key = super::PackKey::Fill {
            bits: value.to_bits(),
            rows,
            cols,
            dt,
        };
        if let Some(t) = self.pool.packed.get(&key) {
            return t.clone();
        }
        let t = self
            .padded(&vec![value; (rows * cols) as usize], rows, cols, dt)
            .tile(0, 0, rows, cols);
        self.pool.packed.insert(key, t.clone());
        t
    }

    /// Row `row` of constant `v` repeated `rows` times at home (cached), for
    /// machines that cannot broadcast a row down a register.
    fn repeated_row(&mut self, v: ValueId, row: i64, rows: i64) -> Result<MemTile, LowerError> {
        let key = PackKey::RowRepeated {
            value: v,
            row,
            rows,
        };
        if let Some(t) = self.pool.packed.get(&key) {
            return Ok(t.clone());
        }
        let k = self
            .g
            .constants
            .get(&v)
            .ok_or_else(|| err("not a constant"))?;
        let c = *k.ty.shape.last().unwrap_or(&1) as i64;
        let line = &k.data[(row * c) as usize..((row + 1) * c) as usize];
        let data: Vec<f64> = (0..rows).flat_map(|_| line.iter().copied()).collect();
        let t = self
            .padded(&data, rows, c, self.layout.act)
            .tile(0, 0, rows, c);
        self.pool.packed.insert(key, t.clone());
        Ok(t)
    }

    /// `WindowSum`: per tile of output pixels and channels, each window
    /// position's tile of the image ([`Self::windows_of`]) times that
    /// position's row of weights, accumulated by multiply-adds in the
    /// vector registers; tiles of half the rows while the buffers
    /// overflow a memory.
    pub(super) fn window_sum(&mut self, n: &Node, window: &Window) -> Result<(), LowerError> {
        let g = self.g;
        let (x, wv, out) = (n.inputs[0], n.inputs[1], n.outputs[0]);
        let k = g
            .constants
            .get(&wv)
            .ok_or_else(|| Self::node_err(n, "depthwise weights that are not constant"))?;
        let out_home = self.home_of(out)?;
        let (kk, c) = (k.ty.shape[0] as i64, k.ty.shape[1] as i64);
        let key = PackKey::Own(wv);
        let weights = match self.pool.packed.get(&key) {
            Some(t) => t.clone(),
            None => {
                let t = self
                    .padded(&k.data, kk, c, self.layout.act)
                    .tile(0, 0, kk, c);
                self.pool.packed.insert(key, t.clone());
                t
            }
        };
        let image = self.home_of(x)?;
        let land = self.landing_of(image.dtype)?;
        let to = Loc {
            place: Place::Mem(out_home.mem),
            dtype: out_home.dtype,
        };
        let (rows, cols) = (out_home.rows, out_home.cols);
        if let Some(geo) = self.wide_windows(x, window, &out_home)
            && self.window_sum_wide(x, wv, &geo, &out_home)?
        {
            return Ok(());
        }
        // Every window position's tile may be in flight at once.
        let mut most = self.ew_tile(&out_home, kk as usize + 2).0;
        loop {
            let attempt = self.attempt();
            let bufs = self.e.bufs.len();
            let (th, tw) = (most.min(rows).max(1), cols.min(512));
            self.cache.new_region();
            let done = (|| {
                for r in (0..rows).step_by(th as usize) {
                    let h = th.min(rows - r);
                    for c0 in (0..cols).step_by(tw as usize) {
                        let w = tw.min(cols - c0);
                        let mut acc: Option<Val> = None;
                        for p in 0..kk {
                            let t = self.windows_of(
                                x,
                                window,
                                0.0,
                                (r, p * c + c0),
                                (h, w),
                                land,
                                Pad::Registers,
                            )?;
                            let row = if ops::can_broadcast_rows(&self.e) {
                                self.staged_row(wv, &weights, p, c0, w)?
                            } else {
                                Val::Mem(self.repeated_row(wv, p, th)?.view(0, c0, h, w))
                            };
                            acc = Some(self.multiply_add(t, row, acc.take())?);
                        }
                        let acc = acc.ok_or_else(|| err("an empty window"))?;
                        let dst = out_home.tile(r, c0, h, w);
                        self.e
                            .to_loc(acc, to, Some(&dst), Pad::Dense)
                            .map_err(err)?;
                    }
                }
                self.fits_on_chip(bufs)
            })();
            match done {
                Err(e) if e.is_overflow() && most > 1 => {
                    self.undo(attempt);
                    most /= 2;
                }
                done => return done,
            }
        }
    }
}

impl Lowerer<'_> {
    /// `tile · row + acc` (or `tile · row` for the first window position).
    fn multiply_add(
        &mut self,
        tile: MemTile,
        row: Val,
        acc: Option<Val>,
    ) -> Result<Val, LowerError> {
        let step = |ew, other| Step {
            ew,
            other: Some(other),
            swapped: false,
            third: None,
        };
        let mut steps = vec![step(Ew::Mul, row)];
        steps.extend(acc.map(|a| step(Ew::Add, a)));
        ops::chain(&mut self.e, Val::Mem(tile), &steps).map_err(err)
    }

    /// The windows' geometry where `WindowSum` takes whole rows of output
    /// pixels at once ([`Self::window_sum_wide`]): stride 1 along the
    /// width, channels that would fill at most a quarter of a register's
    /// row (the transfers, one per output row and window position, cost
    /// more than the lanes save above that: PP-OCR's classifier, with 88
    /// to 200 channels, took 16% more cycles), homes without batches, and
    /// rows broadcast down a register.
    fn wide_windows(
        &self,
        x: ValueId,
        window: &Window,
        out_home: &super::layout::Home,
    ) -> Option<Windows> {
        let geo = Windows::new(&self.g.ty(x).shape, window)?;
        let image = self.home_of(x).ok()?;
        let plain = |h: &super::layout::Home| h.batch.is_none() && h.first == 0;
        (self.opts.wide_windows
            && geo.sw == 1
            && geo.c * 4 <= self.info.pitch_granule
            && geo.ow > 1
            && plain(&image)
            && plain(out_home)
            && ops::can_broadcast_rows(&self.e))
        .then_some(geo)
    }

    /// `WindowSum` with stride 1 along the width, over tiles of whole rows
    /// of output pixels: a tile is `h` output rows by the channels of `w/C`
    /// consecutive pixels, laid side by side (`OW·C` per row). Window
    /// position `(dy, dx)`'s tile of output row `i` is the pixels of image
    /// row `i·sh + dy·dh - pt` from `j + dx·dw - pl` on: consecutive
    /// pixels, which one transfer brings side by side (their rows of `C`
    /// at home, however padded, land dense on chip), with zeros where they
    /// fall outside. The weights' rows are repeated along the pixels. With
    /// few channels (16, say) each vector instruction then covers a
    /// register's whole width, not `C` lanes of each pixel. Where a
    /// transfer cannot take such rows (their alignment on chip), the
    /// narrow form is used instead: `Ok(false)`.
    fn window_sum_wide(
        &mut self,
        x: ValueId,
        wv: ValueId,
        geo: &Windows,
        out_home: &super::layout::Home,
    ) -> Result<bool, LowerError> {
        let g = self.g;
        let k = g
            .constants
            .get(&wv)
            .ok_or_else(|| err("depthwise weights that are not constant"))?;
        let c = geo.c;
        let image = self.home_of(x)?;
        let land = self.landing_of(image.dtype)?;
        let Place::Mem(am) = land.place else {
            return Ok(false);
        };
        // Tiles `tw` wide: whole pixels, so the repeated weights line up.
        let tw = (WIDE_COLS / c * c).min(geo.ow * c);
        let key = PackKey::Tiled {
            value: wv,
            width: tw,
        };
        let weights = match self.pool.packed.get(&key) {
            Some(t) => t.clone(),
            None => {
                let data: Vec<f64> = (0..geo.kk)
                    .flat_map(|p| (0..tw).map(move |j| (p, j % c)))
                    .map(|(p, j)| k.data[(p * c + j) as usize])
                    .collect();
                let t = self
                    .padded(&data, geo.kk, tw, self.layout.act)
                    .tile(0, 0, geo.kk, tw);
                self.pool.packed.insert(key, t.clone());
                t
            }
        };
        let to = Loc {
            place: Place::Mem(out_home.mem),
            dtype: out_home.dtype,
        };
        // The result's rows of pixels side by side on chip, before they go home.
        let staged = Loc {
            dtype: out_home.dtype,
            ..land
        };
        let (rows, cols) = (geo.images * geo.oh, geo.ow * c);
        let mut most = self.ew_tile(out_home, geo.kk as usize + 2).0;
        loop {
            let attempt = self.attempt();
            let bufs = self.e.bufs.len();
            let th = most.min(rows).max(1);
            self.cache.new_region();
            let done = (|| {
                for r in (0..rows).step_by(th as usize) {
                    let h = th.min(rows - r);
                    for c0 in (0..cols).step_by(tw as usize) {
                        let w = tw.min(cols - c0);
                        let mut acc: Option<Val> = None;
                        for p in 0..geo.kk {
                            let t = self.wide_tile(geo, &image, p, (r, c0), (h, w), land, am)?;
                            let row = self.staged_row(wv, &weights, p, 0, w)?;
                            acc = Some(self.multiply_add(t, row, acc.take())?);
                        }
                        let acc = acc.ok_or_else(|| err("an empty window"))?;
                        let Place::Mem(sm) = staged.place else {
                            return Err(err("no staging memory"));
                        };
                        let side = self.e.buffer_padded(sm, staged.dtype, h, w, Pad::Registers);
                        let v = self
                            .e
                            .to_loc(acc, staged, Some(&side), Pad::Dense)
                            .map_err(err)?;
                        if let Val::Mem(t) = &v {
                            self.e.ready(t).map_err(err)?;
                        }
                        // Each output row's pixels to their rows at home.
                        let (j0, wp) = (c0 / c, w / c);
                        for i in 0..h {
                            let from = MemTile {
                                rows: wp,
                                cols: c,
                                pitch: c,
                                ..side.view(i, 0, 1, w)
                            };
                            let dst = out_home.tile((r + i) * geo.ow + j0, 0, wp, c);
                            self.e
                                .to_loc(Val::Mem(from), to, Some(&dst), Pad::Dense)
                                .map_err(err)?;
                        }
                    }
                }
                self.fits_on_chip(bufs)
            })();
            match done {
                Err(e) if e.is_overflow() && most > 1 => {
                    self.undo(attempt);
                    most /= 2;
                }
                Err(_) => {
                    self.undo(attempt);
                    return Ok(false);
                }
                Ok(()) => return Ok(true),
            }
        }
    }

    /// Window position `p`'s tile of the output rows `r..r + h`, columns
    /// `c0..c0 + w` (whole pixels of `OW·C`), in a fresh buffer at `land`:
    /// per output row, one transfer of the pixels inside the image, and
    /// zeros around them and for the rows outside.
    #[allow(clippy::too_many_arguments)]
    fn wide_tile(
        &mut self,
        geo: &Windows,
        image: &super::layout::Home,
        p: i64,
        (r, c0): (i64, i64),
        (h, w): (i64, i64),
        land: Loc,
        am: isa_specs::model::MemId,
    ) -> Result<MemTile, LowerError> {
        let c = geo.c;
        let (dy, dx) = (p / geo.kw, p % geo.kw);
        let buf = self.e.buffer_padded(am, land.dtype, h, w, Pad::Registers);
        let (j0, wp) = (c0 / c, w / c);
        // Output pixel `j` reads input column `j + off`: those inside are `jlo..jhi`.
        let off = dx * geo.dw - geo.pl;
        let (jlo, jhi) = (j0.max(-off), (j0 + wp).min(geo.w - off));
        let zeros = self.fill_on_chip(0.0, 1, w, image.dtype, land)?;
        let mut loaded = Vec::new();
        for i in 0..h {
            let (img, oi) = ((r + i) / geo.oh, (r + i) % geo.oh);
            let ih = oi * geo.sh + dy * geo.dh - geo.pt;
            let inside = img < geo.images && (0..geo.h).contains(&ih) && jlo < jhi;
            // (source, column in the tile, columns)
            let mut parts: Vec<(Option<MemTile>, i64, i64)> = Vec::new();
            if inside {
                let pixel = (img * geo.h + ih) * geo.w + jlo + off;
                let n = jhi - jlo;
                parts.push((Some(image.tile(pixel, 0, n, c)), (jlo - j0) * c, n * c));
                if jlo > j0 {
                    parts.push((None, 0, (jlo - j0) * c));
                }
                if jhi < j0 + wp {
                    parts.push((None, (jhi - j0) * c, (j0 + wp - jhi) * c));
                }
            } else {
                parts.push((None, 0, w));
            }
            for (from, col, n) in parts {
                let into = buf.view(i, col, 1, n);
                let (from, into) = match from {
                    // Rows of `C` at home, side by side on chip.
                    Some(f) => (
                        f,
                        MemTile {
                            rows: n / c,
                            cols: c,
                            pitch: c,
                            ..into
                        },
                    ),
                    None => (zeros.view(0, 0, 1, n), into),
                };
                loaded.push(
                    self.e
                        .to_loc(Val::Mem(from), land, Some(&into), Pad::Dense)
                        .map_err(err)?,
                );
            }
        }
        self.all_ready(&loaded)?;
        Ok(buf)
    }
}

/// A copy from `from` to `into` (tiles of one shape) as copies of rows
/// up to `widest` elements (a register's row on the way): where both are contiguous (each row's end is
/// the next one's start: a run of pixels' channels, dense on both sides)
/// `q` rows at a time as one, the rows left over as they are; else as is.
/// A register holds whole rows of `widest`, so `C = 64` channels filled
/// half of vliw-systolic's 128 lanes per load and store.
fn wider_rows(from: MemTile, into: MemTile, widest: i64) -> Vec<(MemTile, MemTile)> {
    let (rows, cols) = (from.rows, from.cols);
    let q = widest / cols.max(1);
    if q < 2 || rows < q || from.pitch != cols || into.pitch != cols {
        return vec![(from, into)];
    }
    let whole = rows / q * q;
    let wide = |t: &MemTile| MemTile {
        rows: whole / q,
        cols: cols * q,
        pitch: cols * q,
        ..t.clone()
    };
    let mut out = vec![(wide(&from), wide(&into))];
    if whole < rows {
        let rest = |t: &MemTile| t.view(whole, 0, rows - whole, cols);
        out.push((rest(&from), rest(&into)));
    }
    out
}

/// The widest row of pixels' channels [`Lowerer::window_sum_wide`] takes
/// as one tile row.
const WIDE_COLS: i64 = 512;

/// Where the windows of an `Im2Row` read: row `r` of the windows is output
/// pixel `(image, i, j)`, its columns `p·C..(p + 1)·C` window position `p`.
pub(super) struct Windows {
    h: i64,
    w: i64,
    pub(super) c: i64,
    oh: i64,
    ow: i64,
    images: i64,
    kw: i64,
    kk: i64,
    sh: i64,
    sw: i64,
    dh: i64,
    dw: i64,
    pt: i64,
    pl: i64,
}

impl Windows {
    /// The windows `window` places over a channels-last image `[N, H, W, C]`.
    pub(super) fn new(shape: &[usize], window: &crate::ir::Window) -> Option<Windows> {
        let [nb, h, w, c] = <[usize; 4]>::try_from(shape).ok()?;
        let [oh, ow] = window.output([h, w])?;
        let i = |v: usize| v as i64;
        Some(Windows {
            h: i(h),
            w: i(w),
            c: i(c),
            oh: i(oh),
            ow: i(ow),
            images: i(nb),
            kw: i(window.kernel[1]),
            kk: i(window.kernel[0] * window.kernel[1]),
            sh: i(window.strides[0]),
            sw: i(window.strides[1]),
            dh: i(window.dilations[0]),
            dw: i(window.dilations[1]),
            pt: i(window.pads[0]),
            pl: i(window.pads[1]),
        })
    }

    /// Rows of the windows: output pixels of every image.
    pub(super) fn rows(&self) -> i64 {
        self.images * self.oh * self.ow
    }

    /// Window positions.
    pub(super) fn positions(&self) -> i64 {
        self.kk
    }

    /// The image's row (`(image·H + ih)·W + iw`) that window position `p`
    /// of output pixel `r` reads, or `None` where that is outside (or `r`
    /// is past the last pixel).
    pub(super) fn source(&self, r: i64, p: i64) -> Option<i64> {
        let (img, q) = (r / (self.oh * self.ow), r % (self.oh * self.ow));
        if img >= self.images {
            // A row of a whole tile past the last output pixel.
            return None;
        }
        let (i, j) = (q / self.ow, q % self.ow);
        let ih = i * self.sh + (p / self.kw) * self.dh - self.pt;
        let iw = j * self.sw + (p % self.kw) * self.dw - self.pl;
        ((0..self.h).contains(&ih) && (0..self.w).contains(&iw))
            .then_some((img * self.h + ih) * self.w + iw)
    }
}
