//! Layout: where every value lives. Each value gets a home (a region of
//! the home memory, or a buffer kept on chip), views alias their input, and
//! the layout-fusion decisions (products written in their transpose's
//! layout, transposes and slices read in place) are taken here.

use super::Lowerer;
use super::emit::{Base, MemTile, Pad};
use super::error::{LowerError, err};
use super::machine::{self, Loc, Place};
use super::ops;
use crate::ir::{Graph, Op, ValueId};
use isa_specs::model::{DType, MemId, OperandKind};
use std::collections::HashMap;

/// Where every value lives, and the layout-fusion decisions: the layout stage's result.
pub(super) struct Layout {
    pub(super) homes: HashMap<ValueId, Home>,
    /// The dtype activations are kept in at home.
    pub(super) act: DType,
    /// Views that cannot alias their input (its rows are padded): copied.
    pub(super) relayouts: std::collections::HashSet<ValueId>,
    /// Transposes read only by one-row products that take the matrix
    /// untransposed ([`Lowerer::vector_dots`]): not lowered.
    pub(super) dot_transposes: std::collections::HashSet<usize>,
    /// [`Lowerer::transposed_products`].
    pub(super) transposed: Vec<(usize, ValueId)>,
    /// Transposes read only as `B` of products of several rows, which read
    /// the transpose's input by a form taking `B` transposed instead: not
    /// lowered ([`Lowerer::b_transposes`]).
    pub(super) b_transposes: std::collections::HashSet<usize>,
    /// Those lowered after all (a product could not read the input so).
    pub(super) lowered_transposes: std::collections::HashSet<usize>,
    /// Slices of columns read only by a transpose that moves rows
    /// ([`Lowerer::sliced_transposes`]): not lowered; the transpose reads
    /// the slice's input. By the transpose's input.
    pub(super) sliced: HashMap<ValueId, Sliced>,
    /// Transposes splitting a slice of a product's result into heads that
    /// are not lowered: the heads are read in place ([`Lowerer::head_views`]).
    /// By the transpose's result.
    pub(super) head_views: HashMap<ValueId, HeadView>,
    /// Convolution windows (`Im2Row`) read only by products, which take
    /// their tiles straight from the image ([`Lowerer::window_operands`]):
    /// not lowered. By the windows' value, the `Im2Row` node.
    pub(super) windows: HashMap<ValueId, usize>,
}

/// A slice of columns (and the reshape splitting it into heads) not
/// lowered: the transpose reading it reads the slice's input as rows of
/// the transpose's last dimension ([`Lowerer::sliced_transposes`]). Row
/// `i` of the transpose's input is row `(i / pieces) * per_row + first +
/// i % pieces` of that view.
#[derive(Clone, Debug)]
pub(super) struct Sliced {
    /// The slice's input.
    pub(super) input: ValueId,
    /// The slice node, and the reshape's if any.
    pub(super) nodes: Vec<usize>,
    /// The slice's first column, its columns and its input's columns, in
    /// rows of the transpose's last dimension.
    pub(super) first: i64,
    pub(super) pieces: i64,
    pub(super) per_row: i64,
}

/// A split of a slice of a matrix into heads, read in place
/// ([`Lowerer::head_views`]).
#[derive(Clone, Debug)]
pub(super) struct HeadView {
    /// The matrix sliced.
    pub(super) matrix: ValueId,
    /// The slice's first column.
    pub(super) first: i64,
}

/// Where a value lives: in the home memory, or kept on chip in a buffer
/// (an intermediate of a fused region, see [`fuse`]).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Home {
    pub(super) mem: MemId,
    pub(super) base: Base,
    pub(super) dtype: DType,
    pub(super) rows: i64,
    pub(super) cols: i64,
    /// Elements between rows: the row length, or more so rows start aligned.
    pub(super) pitch: i64,
    /// Rows in batches of `.0`, each `.1` elements after the one before,
    /// rows within a batch `pitch` apart: a product's result written
    /// straight into the layout of the transpose that reads it (see
    /// [`Lowerer::transposed_products`]), or the heads of a product's
    /// result read in place ([`Lowerer::head_views`]). A tile never spans
    /// two batches.
    pub(super) batch: Option<(i64, i64)>,
    /// Elements before the first row: the columns a head view skips.
    pub(super) first: i64,
    /// Stored transposed, in chunks of columns (a value cache laid out for
    /// a memory that computes, [`Lowerer::in_place_column_homes`]):
    /// `rows`, `cols`, `pitch` and `batch` describe the stored rows, and a
    /// tile never spans two chunks.
    pub(super) columns: Option<isa_specs::program::Columns>,
}

impl Home {
    pub(super) fn tile(&self, r: i64, c: i64, h: i64, w: i64) -> MemTile {
        let start = self.first
            + match self.batch {
                Some((rows, stride)) => (r % rows) * self.pitch + (r / rows) * stride,
                None => r * self.pitch,
            }
            + self.columns.map_or(c, |cs| cs.offset(c as u64) as i64);
        MemTile {
            mem: self.mem,
            dtype: self.dtype,
            base: self.base,
            offset: (start as u64) * self.dtype.bytes(),
            rows: h,
            cols: w,
            pitch: self.pitch,
            ready: None,
        }
    }

    /// The tile of `h` rows from stored row `r` and `w` columns from the
    /// start of chunk `chunk` (its empty columns included) of a home stored
    /// transposed ([`Self::columns`]).
    pub(super) fn chunk_tile(&self, r: i64, chunk: i64, h: i64, w: i64) -> MemTile {
        let skip = self.columns.map_or(0, |cs| cs.skip as i64);
        let stride = self.columns.map_or(0, |cs| cs.stride as i64);
        let at = self.tile(r, 0, h, w);
        MemTile {
            offset: at.offset - (skip * self.dtype.bytes() as i64) as u64
                + (chunk * stride) as u64 * self.dtype.bytes(),
            ..at
        }
    }

    /// Its address in the home memory, for data written at load time; a value
    /// kept on chip has none.
    pub(super) fn addr(&self) -> Result<u64, LowerError> {
        match self.base {
            Base::Fixed(a) => Ok(a),
            Base::Buf(_) => Err(err(
                "a value kept on chip cannot be initialised as data (compiled again without on-chip residency)",
            )),
        }
    }
}

/// The matrix view `[rows, cols]` of a shape.
pub(super) fn view(shape: &[usize]) -> (i64, i64) {
    match shape.split_last() {
        Some((c, rest)) => (rest.iter().product::<usize>() as i64, *c as i64),
        None => (1, 1),
    }
}

/// Whether a `Cast` keeps every value, so its result can share its input's
/// bytes (integers are held in floating-point containers): the same type; an
/// integer widened or made floating-point; or values known to be integers
/// made integer.
/// An Identity, or a Transpose that keeps every dimension: its output is
/// its input, same shape.
/// Whether `perm` swaps the two dimensions before the last, and only those
/// (`[1, S, H, D]` to `[1, H, S, D]` and back).
pub(super) fn swaps_before_last(perm: &[usize]) -> bool {
    let r = perm.len();
    r >= 3
        && perm.iter().enumerate().all(|(i, p)| {
            *p == if i == r - 3 {
                r - 2
            } else if i == r - 2 {
                r - 3
            } else {
                i
            }
        })
}

pub(super) fn same_shape_view(n: &crate::ir::Node) -> bool {
    match &n.op {
        Op::Identity => true,
        Op::Transpose { perm } => perm.iter().enumerate().all(|(i, p)| i == *p),
        _ => false,
    }
}

pub(super) fn cast_is_view(g: &Graph, n: &crate::ir::Node) -> bool {
    use crate::ir::ElemType::{I8, I32, I64, U8};
    let (Op::Cast { to }, Some(&x)) = (&n.op, n.inputs.first()) else {
        return false;
    };
    let from = g.ty(x).elem;
    match (from, *to) {
        (a, b) if a == b => true,
        (I8 | U8, I32 | I64) | (I32, I64) => true,
        // Booleans are held as 1 and 0.
        (crate::ir::ElemType::Bool, _) => true,
        (a, b) if !a.is_float() && b.is_float() => {
            b != crate::ir::ElemType::F16 && b != crate::ir::ElemType::Bf16
        }
        (a, crate::ir::ElemType::Bool) if a.is_float() => truth_value(g, x, 16),
        (a, b) if a.is_float() && !b.is_float() => integral(g, x, 16),
        _ => false,
    }
}

/// Whether every element of `v` is 1 or 0: a comparison's result (as the
/// lowering has it or as instruction selection writes it, see
/// [`clamped_sign`]), a constant of them, and products, maxima, minima,
/// `1 - t`, `|t - u|` and views of such values (up to `depth` producers
/// back).
pub(super) fn truth_value(g: &Graph, v: ValueId, depth: usize) -> bool {
    if let Some(t) = g.constants.get(&v) {
        return t.data.iter().all(|x| *x == 0.0 || *x == 1.0);
    }
    let Some(n) = g.nodes.iter().find(|n| n.outputs.contains(&v)) else {
        return false;
    };
    let all = |ins: &[ValueId]| depth > 0 && ins.iter().all(|i| truth_value(g, *i, depth - 1));
    let one = |c: ValueId| g.constants.get(&c).is_some_and(|t| t.data[..] == [1.0]);
    if clamped_sign(g, n) {
        return true;
    }
    match &n.op {
        Op::Less | Op::LessOrEqual => true,
        Op::Mul | Op::Max | Op::Min | Op::Identity | Op::Reshape { .. } | Op::Cast { .. } => {
            all(&n.inputs)
        }
        Op::Sub => one(n.inputs[0]) && all(&n.inputs[1..]),
        Op::Unary(crate::ir::Unary::Abs) => g
            .nodes
            .iter()
            .find(|p| p.outputs.contains(&n.inputs[0]))
            .is_some_and(|p| matches!(p.op, Op::Sub) && all(&p.inputs)),
        _ => false,
    }
}

/// Whether `n` is `min(max(v · k₁ · k₂ ⋯, 0), 1)` (or `min(relu(..), 1)`) with every factor at
/// least 1 and their product at least 2^150: a comparison as instruction
/// selection writes it (`lt-sign` in `select.rules`). Every finite nonzero
/// f32 `v` is at least 2^-149 in magnitude, so the scaled value is 0 or at
/// least 2 in magnitude, and the clamp leaves 0 or 1.
fn clamped_sign(g: &Graph, n: &crate::ir::Node) -> bool {
    let scalar = |v: ValueId| {
        g.constants
            .get(&v)
            .and_then(|t| (t.data.len() == 1).then(|| t.data[0]))
    };
    let producer = |v: ValueId| g.nodes.iter().find(|p| p.outputs.contains(&v));
    if !matches!(n.op, Op::Min) || scalar(n.inputs[1]) != Some(1.0) {
        return false;
    }
    // `max(v, 0)`, or `relu(v)` as selection may write it.
    let Some(max) = producer(n.inputs[0]) else {
        return false;
    };
    let clamped = match max.op {
        Op::Max => scalar(max.inputs[1]) == Some(0.0),
        Op::Relu => true,
        _ => false,
    };
    if !clamped {
        return false;
    }
    let (mut v, mut scale) = (max.inputs[0], 1.0f64);
    while let Some(p) = producer(v).filter(|p| matches!(p.op, Op::Mul)) {
        match scalar(p.inputs[1]) {
            Some(k) if k >= 1.0 => {
                scale *= k;
                v = p.inputs[0];
            }
            _ => break,
        }
    }
    scale >= 2f64.powi(150)
}

/// Whether every element of `v` is an integer: an integer type, a constant
/// of integers, a truth value ([`truth_value`]), a rounding, or arithmetic
/// of integers (sums, products, matrix products: rounding an integer to a
/// float type gives an integer, so even inexact arithmetic stays integral;
/// up to `depth` producers back).
pub(super) fn integral(g: &Graph, v: ValueId, depth: usize) -> bool {
    if !g.ty(v).elem.is_float() {
        return true;
    }
    if let Some(t) = g.constants.get(&v) {
        return t.data.iter().all(|x| x.fract() == 0.0);
    }
    let Some(n) = g.nodes.iter().find(|n| n.outputs.contains(&v)) else {
        return false;
    };
    // `(x + 1.5·2^23) - 1.5·2^23` (or `+ -1.5·2^23`) is how instruction
    // selection rounds without a rounding instruction (`select.rules`).
    let magic = |c: ValueId, k: f64| g.constants.get(&c).is_some_and(|t| t.data[..] == [k]);
    const M: f64 = 12582912.0;
    let down = match n.op {
        Op::Sub => magic(n.inputs[1], M),
        Op::Add => magic(n.inputs[1], -M),
        _ => false,
    };
    let rounds = down
        && g.nodes.iter().any(|p| {
            p.outputs.contains(&n.inputs[0]) && matches!(p.op, Op::Add) && magic(p.inputs[1], M)
        });
    rounds
        || truth_value(g, v, depth)
        || depth > 0
            && match &n.op {
                Op::Unary(crate::ir::Unary::Round) => true,
                // Maxima, minima and sums of integers (exact below 2^24).
                Op::Reduce { kind, .. } if *kind != crate::ir::ReduceKind::Mean => {
                    integral(g, n.inputs[0], depth - 1)
                }
                Op::Add
                | Op::Sub
                | Op::Mul
                | Op::Max
                | Op::Min
                | Op::Relu
                | Op::Unary(crate::ir::Unary::Neg | crate::ir::Unary::Abs)
                | Op::Reshape { .. }
                | Op::Identity
                | Op::Transpose { .. }
                | Op::Concat { .. }
                | Op::MatMul
                | Op::Cast { .. } => n.inputs.iter().all(|i| integral(g, *i, depth - 1)),
                _ => false,
            }
}

/// Views (reshapes, identities, identity transposes, casts that change no
/// bits) of computed values, each to the value whose bytes it shares.
fn view_aliases(g: &Graph) -> HashMap<ValueId, ValueId> {
    let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
    for n in &g.nodes {
        let is_view = match &n.op {
            Op::Reshape { .. } | Op::Identity => true,
            Op::Transpose { perm } => perm.iter().enumerate().all(|(i, p)| i == *p),
            Op::Cast { .. } => cast_is_view(g, n),
            _ => false,
        };
        if is_view && !g.constants.contains_key(&n.inputs[0]) {
            let root = *alias.get(&n.inputs[0]).unwrap_or(&n.inputs[0]);
            alias.insert(n.outputs[0], root);
        }
    }
    alias
}

impl Lowerer<'_> {
    pub(super) fn home_mem(&self) -> MemId {
        self.info.home
    }

    /// Fresh bytes at home for a `rows` x `cols` matrix of `dtype`, rows aligned.
    pub(super) fn new_home(&mut self, rows: i64, cols: i64, dtype: DType) -> Home {
        let pitch = self.home_pitch(cols, dtype);
        let addr = self.alloc_home((rows * pitch) as u64 * dtype.bytes(), 64);
        Home {
            mem: self.info.home,
            base: Base::Fixed(addr),
            dtype,
            rows,
            cols,
            pitch,
            batch: None,
            first: 0,
            columns: None,
        }
    }

    /// The row pitch of a `cols`-wide matrix of `dt` at home: rows start aligned.
    pub(super) fn home_pitch(&self, cols: i64, dt: DType) -> i64 {
        let per = (self.info.home_align / dt.bytes()).max(1) as i64;
        if (cols * dt.bytes() as i64) % self.info.home_align as i64 == 0 {
            cols
        } else {
            machine::rup(cols, per)
        }
    }

    /// Places every value at home; views alias their input.
    pub(super) fn layout(&mut self) -> Result<(), LowerError> {
        let g = self.g;
        let outputs: Vec<ValueId> = g.outputs.clone();
        let out_dtype = self.output_dtype();
        // Aliases first: a view's output shares its input's bytes.
        let alias = view_aliases(g);
        let mut order: Vec<ValueId> = g.inputs.clone();
        for n in &g.nodes {
            order.extend(n.outputs.iter().copied());
        }
        // A graph output that folding made constant is placed as data: nothing to compute.
        for &v in &outputs {
            if let Some(t) = g.constants.get(&v)
                && !self.layout.homes.contains_key(&v)
            {
                let (rows, cols) = view(&t.ty.shape);
                let home = self.padded(&t.data, rows, cols, out_dtype);
                self.layout.homes.insert(v, home);
            }
        }
        // A head view is read where its matrix is: that lives until then.
        let mut lives = alias.clone();
        for (&y, h) in &self.layout.head_views {
            let x = h.matrix;
            for root in lives.values_mut().filter(|r| **r == y) {
                *root = x;
            }
            lives.insert(y, x);
        }
        self.in_place_dot_homes();
        self.in_place_column_homes();
        let mut kept = self.residency(&lives)?;
        // Placed where a product reads them in place.
        kept.retain(|v, _| !self.layout.homes.contains_key(v));
        let narrow = self.window_images(&alias);
        if self.opts.append_in_place {
            self.joins_in_place(&kept, &narrow, out_dtype);
        }
        // A product writes into its transpose's layout where that is kept
        // on chip, or where its result would not be (a round trip through
        // home saved); not from a result kept on chip to a layout at home
        // (the copy reads on chip, and measured faster than the product's
        // strided stores to home).
        self.layout
            .transposed
            .retain(|&(t, x)| kept.contains_key(&g.nodes[t].outputs[0]) || !kept.contains_key(&x));
        for &(_, x) in &self.layout.transposed {
            kept.remove(&x);
        }
        for v in order {
            if g.constants.contains_key(&v) || self.layout.homes.contains_key(&v) {
                continue;
            }
            let ty = g.ty(v);
            // Integers live in floating-point containers: exact in f32 up to 2^24.
            // Booleans too, as 1 and 0.
            let int = !ty.elem.is_float();
            if int && out_dtype != DType::F32 {
                return Err(err(format!(
                    "value `{}` is {}: only floating-point tensors, and integers and booleans where the home memory holds f32, compile today",
                    g.values[v.index()].name,
                    ty.elem.name()
                )));
            }
            let (rows, cols) = view(&ty.shape);
            if let Some(hv) = self.layout.head_views.get(&v)
                && let Some(h) = self.layout.homes.get(&hv.matrix).cloned()
            {
                let heads = ty.shape[ty.shape.len() - 3] as i64;
                self.layout.homes.insert(
                    v,
                    Home {
                        rows,
                        cols,
                        batch: Some((rows / heads.max(1), cols)),
                        first: h.first + hv.first,
                        ..h
                    },
                );
                continue;
            }
            if let Some(root) = alias.get(&v)
                && let Some(h) = self.layout.homes.get(root).cloned()
            {
                // A view aliases its root when its rows are the root's, or
                // the root is dense and the view's rows start aligned too.
                let aligned_rows = rows <= 1
                    || (cols as u64 * h.dtype.bytes()).is_multiple_of(self.info.home_align);
                if cols != h.cols && (h.pitch != h.cols || !aligned_rows) {
                    // The view gets its own bytes and a copy (see `copy::relayout`).
                    self.layout.relayouts.insert(v);
                    let home = self.new_home(rows, cols, h.dtype);
                    self.layout.homes.insert(v, home);
                    continue;
                }
                self.layout.homes.insert(
                    v,
                    Home {
                        rows,
                        cols,
                        pitch: if cols == h.cols { h.pitch } else { cols },
                        ..h
                    },
                );
                continue;
            }
            if let Some(&(mem, until)) = kept.get(&v)
                && let Some((tokens, width)) = self.token_rows(v, self.info.pitch_granule.max(1))
            {
                // Rows of tokens, dense: `[S * H, D]` is `[S, H * D]`.
                let t = self
                    .e
                    .shared_buffer(mem, self.layout.act, tokens, width, Pad::Aligned);
                if let Base::Buf(b) = t.base {
                    self.kept.kept_until.insert(b, until);
                }
                if t.pitch == width {
                    self.layout.homes.insert(
                        v,
                        Home {
                            mem,
                            base: t.base,
                            dtype: self.layout.act,
                            rows,
                            cols,
                            pitch: cols,
                            batch: None,
                            first: 0,
                            columns: None,
                        },
                    );
                    continue;
                }
            }
            if let Some(&(mem, until)) = kept.get(&v) {
                let home = self.kept_home(v, mem, until, rows, cols, narrow.get(&v).copied());
                self.layout.homes.insert(v, home);
                continue;
            }
            // A graph output produced through an alias needs its own bytes only if it is not the root.
            let dtype = if int
                || outputs.contains(&v)
                || alias.iter().any(|(a, r)| *r == v && outputs.contains(a))
            {
                out_dtype
            } else {
                narrow.get(&v).copied().unwrap_or(self.layout.act)
            };
            let home = self.new_home(rows, cols, dtype);
            self.layout.homes.insert(v, home);
        }
        self.place_transposed_products();
        Ok(())
    }

    /// Joins along the rows (`Concat` on the axis before the last) kept at
    /// home, of graph inputs read by nothing else: each such input's home
    /// is its rows of the join's (in batches where the join has leading
    /// dimensions), so the runner writes it there and the join writes only
    /// the other parts. A decode step's cache (`Concat(past_v, v)`) is
    /// appended to, not copied. Joins kept on chip, or already placed
    /// ([`Self::in_place_dot_homes`]), are left as they are.
    fn joins_in_place(
        &mut self,
        kept: &HashMap<ValueId, (MemId, usize)>,
        narrow: &HashMap<ValueId, DType>,
        out_dtype: DType,
    ) {
        let g = self.g;
        for cn in &g.nodes {
            let v = cn.outputs[0];
            if !g.ty(v).elem.is_float()
                || kept.contains_key(&v)
                || self.layout.homes.contains_key(&v)
            {
                continue;
            }
            let lone = self.joined_inputs(cn);
            if lone.is_empty() {
                continue;
            }
            let (rows, cols) = view(&g.ty(v).shape);
            let dtype = if g.outputs.contains(&v) {
                out_dtype
            } else {
                narrow.get(&v).copied().unwrap_or(self.layout.act)
            };
            let home = self.new_home(rows, cols, dtype);
            self.place_joined_inputs(cn, &lone, &home);
            self.layout.homes.insert(v, home);
        }
    }

    /// The graph inputs a join along the rows (`Concat` on the axis before
    /// the last) takes that nothing else reads and that have no home yet:
    /// those the runner can write straight into their rows of the join.
    pub(super) fn joined_inputs(&self, cn: &crate::ir::Node) -> Vec<ValueId> {
        let g = self.g;
        let r = g.ty(cn.outputs[0]).shape.len();
        if r < 2 || cn.op != (Op::Concat { axis: r - 2 }) {
            return Vec::new();
        }
        cn.inputs
            .iter()
            .copied()
            .filter(|&x| {
                g.inputs.contains(&x)
                    && !g.outputs.contains(&x)
                    && !self.layout.homes.contains_key(&x)
                    && g.nodes.iter().filter(|m| m.inputs.contains(&x)).count() == 1
                    && cn.inputs.iter().filter(|&&y| y == x).count() == 1
            })
            .collect()
    }

    /// Homes for inputs `lone` of join `cn` ([`Self::joined_inputs`]):
    /// their rows of the join's `home`, in batches (heads) where the join
    /// has leading dimensions, each batch's rows followed by room for the
    /// rows joined after them. The join then writes only its other parts
    /// (`copy.rs`, `concat`).
    pub(super) fn place_joined_inputs(
        &mut self,
        cn: &crate::ir::Node,
        lone: &[ValueId],
        home: &Home,
    ) {
        let g = self.g;
        let s = &g.ty(cn.outputs[0]).shape;
        let r = s.len();
        let (n, batches) = (s[r - 2] as i64, s[..r - 2].iter().product::<usize>() as i64);
        let stride = home.batch.map_or(n * home.pitch, |(_, stride)| stride);
        let mut offset = 0;
        for &x in &cn.inputs {
            let xn = g.ty(x).shape[r - 2] as i64;
            if lone.contains(&x) {
                self.layout.homes.insert(
                    x,
                    Home {
                        rows: batches * xn,
                        batch: (batches > 1).then_some((xn, stride)),
                        first: offset * home.pitch,
                        ..home.clone()
                    },
                );
            }
            offset += xn;
        }
    }

    /// The home of value `v` (`rows` x `cols`) kept on chip in memory `mem`
    /// until node `until`: a buffer shared across regions, in the type its
    /// products read (`window_image`: the type products read its windows
    /// in, see `window_images`), dense where transfers land in it, products
    /// read it transposed or read its windows.
    fn kept_home(
        &mut self,
        v: ValueId,
        mem: MemId,
        until: usize,
        rows: i64,
        cols: i64,
        window_image: Option<DType>,
    ) -> Home {
        let g = self.g;
        let dtype = window_image
            .or_else(|| self.product_operand_dtype(v, mem))
            .unwrap_or(self.layout.act);
        // A join (a KV cache with its new row) kept in dense rows
        // where transfers take them: the parts from home land in
        // place, with no copy on chip (rows padded to whole
        // registers are not a tile a transfer can write).
        let joined = g
            .nodes
            .iter()
            .any(|n| matches!(n.op, Op::Concat { .. }) && n.outputs.first() == Some(&v));
        // Read transposed by products, whose instructions read
        // operands dense (rows of `N` padded past `K` would be summed).
        let read_transposed = dtype != self.layout.act
            && g.nodes
                .iter()
                .enumerate()
                .all(|(k, n)| !n.inputs.contains(&v) || self.layout.b_transposes.contains(&k));
        // An image whose windows products read as rows of its channels
        // (aligned, see `window_images`): dense, so that a run of pixels
        // is one block and moves in whole registers.
        let pad = if read_transposed
            || window_image.is_some()
            || (joined
                && self.opts.dense_joins
                && (cols as u64 * dtype.bytes()).is_multiple_of(self.info.home_align))
        {
            Pad::Dense
        } else {
            Pad::Aligned
        };
        let t = self.e.shared_buffer(mem, dtype, rows, cols, pad);
        if let Base::Buf(b) = t.base {
            self.kept.kept_until.insert(b, until);
        }
        Home {
            mem,
            base: t.base,
            dtype,
            rows,
            cols,
            pitch: t.pitch,
            batch: None,
            first: 0,
            columns: None,
        }
    }

    /// The type graph outputs are kept in at home: f32 where the home
    /// memory can take it, else the activations' type.
    fn output_dtype(&self) -> DType {
        let f32home = Loc {
            place: Place::Mem(self.info.home),
            dtype: DType::F32,
        };
        if self.info.copies.iter().any(|c| c.to == f32home) {
            DType::F32
        } else {
            self.layout.act
        }
    }

    /// Products written straight into the layout of the transpose reading
    /// them ([`Self::transposed_products`]): their homes are views of the
    /// transpose's, in batches of rows.
    fn place_transposed_products(&mut self) {
        let g = self.g;
        for &(t, x) in &self.layout.transposed {
            let y = g.nodes[t].outputs[0];
            let (Some(hy), shape) = (self.layout.homes.get(&y).cloned(), g.ty(x).shape.clone())
            else {
                continue;
            };
            let r = shape.len();
            let (heads, rows) = (shape[r - 3] as i64, shape[r - 2] as i64);
            self.layout.homes.insert(
                x,
                Home {
                    rows: heads * rows,
                    cols: shape[r - 1] as i64,
                    pitch: heads * hy.pitch,
                    batch: Some((rows, hy.pitch)),
                    ..hy
                },
            );
        }
    }

    /// For the result `y` (`[1, S, H, D]`) of a transpose its product
    /// writes in place ([`Self::transposed_products`]): `(S, H * D)`, where
    /// `H * D` is a multiple of `granule`, so that `y` can be kept on chip
    /// as `S` dense rows of tokens, which its views `[S, H * D]` read.
    pub(super) fn token_rows(&self, y: ValueId, granule: i64) -> Option<(i64, i64)> {
        let g = self.g;
        self.layout
            .transposed
            .iter()
            .find(|&&(t, _)| g.nodes[t].outputs[0] == y)?;
        let shape = &g.ty(y).shape;
        let r = shape.len();
        let (tokens, width) = (shape[r - 3] as i64, (shape[r - 2] * shape[r - 1]) as i64);
        (width % granule.max(1) == 0).then_some((tokens, width))
    }

    /// Transposes swapping the last two dimensions of a computed value and
    /// read only as `B` by products of several rows, where some
    /// contraction reads `B` transposed (stored `N` x `K`) from on-chip
    /// memory: those products read the transpose's input instead.
    pub(super) fn b_transposes(&self) -> std::collections::HashSet<usize> {
        use ops::Role;
        let g = self.g;
        let mut out = std::collections::HashSet::new();
        let takes_bt = self.fusion.contractions.iter().any(|c| {
            c.b_dims.len() == 2
                && c.b_dims[0] == Role::N
                && c.locs(&self.e)
                    .is_some_and(|l| l[2].place != Place::Mem(self.info.home))
        });
        if !takes_bt {
            return out;
        }
        for (ti, t) in g.nodes.iter().enumerate() {
            let Op::Transpose { perm } = &t.op else {
                continue;
            };
            let swaps_last_two = crate::ir::swaps_last_two(perm);
            let y = t.outputs[0];
            if !swaps_last_two
                || g.constants.contains_key(&t.inputs[0])
                || g.outputs.contains(&y)
                || self.layout.dot_transposes.contains(&ti)
            {
                continue;
            }
            // Its readers, through views of the same shape.
            let mut names = vec![y];
            let mut readers: Vec<&crate::ir::Node> = Vec::new();
            let mut k = 0;
            while k < names.len() {
                let v = names[k];
                for n in g.nodes.iter().filter(|n| n.inputs.contains(&v)) {
                    if same_shape_view(n) && !g.outputs.contains(&n.outputs[0]) {
                        names.push(n.outputs[0]);
                    } else {
                        readers.push(n);
                    }
                }
                k += 1;
            }
            let several_rows = |n: &&crate::ir::Node| {
                let sa = &g.ty(n.inputs[0]).shape;
                sa.len() >= 2 && sa[sa.len() - 2] > 1
            };
            if !readers.is_empty()
                && readers.iter().all(|n| {
                    matches!(n.op, Op::MatMul)
                        && names.contains(&n.inputs[1])
                        && !names.contains(&n.inputs[0])
                        && several_rows(n)
                })
            {
                out.insert(ti);
            }
        }
        out
    }

    /// Slices of the last dimension only (step 1), maybe split by a
    /// reshape into rows of `w` (heads), whose one reader is a transpose
    /// keeping the last dimension that is lowered as a copy of rows (not
    /// left to the products reading it): the transpose reads the slice's
    /// input as rows of `w`, so the columns are copied once, not twice
    /// (attention's split of the projection's result into q, k and v, each
    /// then into heads).
    pub(super) fn sliced_transposes(&self) -> HashMap<ValueId, Sliced> {
        let g = self.g;
        let readers = |v: ValueId| -> Vec<usize> {
            (0..g.nodes.len())
                .filter(|&k| g.nodes[k].inputs.contains(&v))
                .collect()
        };
        let mut out = HashMap::new();
        for (si, n) in g.nodes.iter().enumerate() {
            let Op::Slice { starts, steps, .. } = &n.op else {
                continue;
            };
            let (x, y) = (n.inputs[0], n.outputs[0]);
            let (xs, ys) = (&g.ty(x).shape, &g.ty(y).shape);
            let r = xs.len();
            if r == 0
                || xs[..r - 1] != ys[..r - 1]
                || steps.iter().any(|&s| s != 1)
                || g.outputs.contains(&y)
                || g.constants.contains_key(&x)
            {
                continue;
            }
            let (width, sw) = (xs[r - 1] as i64, ys[r - 1] as i64);
            let mut nodes = vec![si];
            let (mut v, mut w) = (y, sw);
            // A reshape splitting the last dimension into pieces of `w`.
            if let [k] = readers(y).as_slice()
                && matches!(g.nodes[*k].op, Op::Reshape { .. })
            {
                let o = g.nodes[*k].outputs[0];
                let os = &g.ty(o).shape;
                let pw = *os.last().unwrap_or(&0) as i64;
                let split = os.len() == r + 1
                    && os[..r - 1] == ys[..r - 1]
                    && pw > 0
                    && os[r - 1] as i64 * pw == sw;
                if !split || g.outputs.contains(&o) {
                    continue;
                }
                nodes.push(*k);
                (v, w) = (o, pw);
            }
            let after = readers(v);
            let [t] = after.as_slice() else {
                continue;
            };
            let rank = g.ty(v).shape.len();
            let moves_rows = matches!(&g.nodes[*t].op,
                Op::Transpose { perm } if perm.last() == Some(&(rank - 1))
                    && perm.iter().enumerate().any(|(i, p)| i != *p));
            let skipped = self.layout.dot_transposes.contains(t)
                || self.layout.b_transposes.contains(t)
                || self.layout.transposed.iter().any(|&(k, _)| k == *t);
            let c0 = starts[r - 1];
            if moves_rows && !skipped && w > 0 && sw > 0 && width % w == 0 && c0 % w == 0 {
                out.insert(
                    v,
                    Sliced {
                        input: x,
                        nodes,
                        first: c0 / w,
                        pieces: sw / w,
                        per_row: width / w,
                    },
                );
            }
        }
        out
    }

    /// Transposes of [`Self::sliced_transposes`] that split a slice of a
    /// computed matrix `[S, W]` into heads (`[1, S, H, D]` to `[1, H, S,
    /// D]`), read only as `A` by products of several rows, where every
    /// contraction takes `A` strided from memory or loads it into
    /// registers: not lowered. The
    /// heads are read where the matrix holds them, head `h` as `S` rows of
    /// `D` columns from column `first + h * D`, each the matrix's pitch
    /// apart ([`Home::batch`]): attention's queries cost no copy. By the
    /// transpose's result.
    pub(super) fn head_views(&self) -> HashMap<ValueId, HeadView> {
        let g = self.g;
        let m = self.e.m;
        // Every contraction takes `A` strided from memory, or loads it into
        // registers: a head's rows, a row of the matrix apart, read as they are.
        let a_in_place = self.fusion.contractions.iter().all(|c| {
            matches!(
                &m.instructions[c.inst.index()].operands[c.a].kind,
                OperandKind::Mem {
                    stride: Some(_),
                    ..
                } | OperandKind::Reg { .. }
            )
        });
        let mut out = HashMap::new();
        for (v, sl) in &self.layout.sliced {
            let readers: Vec<usize> = (0..g.nodes.len())
                .filter(|&k| g.nodes[k].inputs.contains(v))
                .collect();
            let [t] = readers.as_slice() else {
                continue;
            };
            let Op::Transpose { perm } = &g.nodes[*t].op else {
                continue;
            };
            let y = g.nodes[*t].outputs[0];
            let shape = &g.ty(y).shape;
            let r = perm.len();
            let splits = swaps_before_last(perm) && shape[..r - 3].iter().product::<usize>() == 1;
            // Read as `A`, which the contractions take strided: no copy at
            // all. Read as `B` (dense), each product would copy its heads
            // where it runs; the transpose copies them once instead.
            let as_a = (0..g.nodes.len())
                .filter(|&k| g.nodes[k].inputs.contains(&y))
                .all(|k| {
                    let n = &g.nodes[k];
                    matches!(n.op, Op::MatMul) && n.inputs[0] == y && n.inputs.get(1) != Some(&y)
                });
            if splits
                && as_a
                && a_in_place
                && self.read_by_products(y)
                && !g.inputs.contains(&sl.input)
                && shape[r - 2] > 1
            {
                let w = shape[r - 1] as i64;
                out.insert(
                    y,
                    HeadView {
                        matrix: sl.input,
                        first: sl.first * w,
                    },
                );
            }
        }
        out
    }

    /// Whether only products of several rows read `y`, as `A` or `B`, or as
    /// `B` through a transpose of [`Self::b_transposes`].
    pub(super) fn read_by_products(&self, y: ValueId) -> bool {
        let g = self.g;
        let several_rows = |n: &crate::ir::Node| {
            let sa = &g.ty(n.inputs[0]).shape;
            sa.len() >= 2 && sa[sa.len() - 2] > 1
        };
        let mut readers = (0..g.nodes.len())
            .filter(|&k| g.nodes[k].inputs.contains(&y))
            .peekable();
        readers.peek().is_some()
            && !g.outputs.contains(&y)
            && readers.all(|k| {
                let n = &g.nodes[k];
                (matches!(n.op, Op::MatMul) && several_rows(n))
                    || self.layout.b_transposes.contains(&k)
            })
    }

    /// `Im2Row` nodes whose result is read only as `A` by products, or as
    /// `B` through a transpose of [`Self::b_transposes`]: the products
    /// bring each tile of the windows together from the rows of the image
    /// ([`Lowerer::window_tile`]) instead of reading them from home, where
    /// they would take `KH·KW` times the image's bytes.
    pub(super) fn window_operands(&self) -> HashMap<ValueId, usize> {
        let g = self.g;
        let mut out = HashMap::new();
        for (ni, n) in g.nodes.iter().enumerate() {
            if !matches!(n.op, Op::Im2Row { .. }) || g.outputs.contains(&n.outputs[0]) {
                continue;
            }
            let y = n.outputs[0];
            let as_b = |t: usize| {
                self.layout.b_transposes.contains(&t)
                    && g.nodes
                        .iter()
                        .filter(|r| r.inputs.contains(&g.nodes[t].outputs[0]))
                        .all(|r| matches!(r.op, Op::MatMul) && r.inputs[0] != g.nodes[t].outputs[0])
            };
            let mut readers = (0..g.nodes.len())
                .filter(|&k| g.nodes[k].inputs.contains(&y))
                .peekable();
            // Products of one row (per batch) take other paths (`gemv`).
            let rows = g.ty(y).shape[1];
            let read_in_place = rows > 1
                && readers.peek().is_some()
                && readers.all(|k| {
                    let r = &g.nodes[k];
                    (matches!(r.op, Op::MatMul) && r.inputs[0] == y && r.inputs[1] != y) || as_b(k)
                });
            if read_in_place {
                out.insert(y, ni);
            }
        }
        out
    }

    /// The images whose windows products read in place
    /// ([`Self::window_operands`]), by their roots, and the narrower type
    /// the products' contractions read them in, where the home memory holds
    /// it and its rows of channels start aligned: written so, every tile of
    /// windows is transferred as the contraction reads it, with no
    /// conversion on chip (the one rounding happens once, as the image is
    /// written).
    fn window_images(&self, alias: &HashMap<ValueId, ValueId>) -> HashMap<ValueId, DType> {
        let g = self.g;
        let mut out = HashMap::new();
        let Some(land) = self.landing_of(self.layout.act).ok() else {
            return out;
        };
        let act = self.layout.act;
        let home = |dt: DType| Loc {
            place: Place::Mem(self.info.home),
            dtype: dt,
        };
        let Some(dt) = self
            .fusion
            .contractions
            .iter()
            .filter_map(|c| c.locs(&self.e))
            .flat_map(|l| [l[1], l[2]])
            .find(|a| {
                a.dtype.is_float()
                    && a.dtype.bytes() < act.bytes()
                    && self.info.path(&[home(a.dtype)], *a).is_some()
                    && self
                        .info
                        .path(
                            &[Loc {
                                place: land.place,
                                dtype: act,
                            }],
                            home(a.dtype),
                        )
                        .is_some()
            })
            .map(|a| a.dtype)
        else {
            return out;
        };
        for &wi in self.layout.windows.values() {
            let x = g.nodes[wi].inputs[0];
            let c = *g.ty(x).shape.last().unwrap_or(&1) as u64;
            if (c * dt.bytes()).is_multiple_of(self.info.home_align) {
                out.insert(*alias.get(&x).unwrap_or(&x), dt);
            }
        }
        out
    }

    /// The transpose in [`Self::b_transposes`] (not lowered after all) that
    /// makes `b`, through views of the same shape.
    pub(super) fn b_transpose_of(&self, b: ValueId) -> Option<usize> {
        let g = self.g;
        let mut v = b;
        loop {
            let p = g.nodes.iter().position(|x| x.outputs.first() == Some(&v))?;
            if self.layout.b_transposes.contains(&p) {
                return (!self.layout.lowered_transposes.contains(&p)).then_some(p);
            }
            if !same_shape_view(&g.nodes[p]) {
                return None;
            }
            v = g.nodes[p].inputs[0];
        }
    }

    /// Products whose result only a transpose swapping the two dimensions
    /// before the last reads (`[1, H, S, D]` to `[1, S, H, D]`: attention's
    /// context back to rows of tokens): the product writes its result
    /// straight into the transpose's layout (a home in batches of `S` rows,
    /// [`Home::batch`]) and the transpose is not lowered. `(transpose node,
    /// product result)`.
    pub(super) fn transposed_products(g: &Graph) -> Vec<(usize, ValueId)> {
        let mut out = Vec::new();
        for (ti, t) in g.nodes.iter().enumerate() {
            let Op::Transpose { perm } = &t.op else {
                continue;
            };
            let r = perm.len();
            let swaps = swaps_before_last(perm);
            let x = t.inputs[0];
            let shape = &g.ty(x).shape;
            let product = g
                .nodes
                .iter()
                .any(|n| matches!(n.op, Op::MatMul) && n.outputs.first() == Some(&x));
            let only_reader = g.nodes.iter().filter(|n| n.inputs.contains(&x)).count() == 1;
            if swaps
                && product
                && only_reader
                && !g.outputs.contains(&x)
                && shape[..r - 3].iter().product::<usize>() == 1
            {
                out.push((ti, x));
            }
        }
        out
    }

    /// The type the matrix products reading `v` want their operands in (in
    /// memory `mem`), where `v` is made by a node that can write it in that
    /// type at no cost (a row group, or a transpose keeping the last
    /// dimension: a copy through the registers either way) and only
    /// products of several rows read it, as `A` or as `B` (or as `B`
    /// through a transpose of [`Self::b_transposes`]): written so, it
    /// needs no conversion pass before each product. So too a matrix read
    /// only through its splits into heads (attention's projection: its
    /// epilogue stores it in that type, for the head views read in place
    /// and the splits copied alike). None otherwise, or where that is the
    /// activation type.
    pub(super) fn product_operand_dtype(&self, v: ValueId, mem: MemId) -> Option<DType> {
        let g = self.g;
        if !self.opts.layout_fusion {
            return None;
        }
        let want = |operand: usize| {
            self.fusion
                .contractions
                .iter()
                .filter_map(|c| c.locs(&self.e))
                .map(|l| l[operand])
                .find(|a| a.place == Place::Mem(mem) && a.dtype.is_float())
                .map(|a| a.dtype)
        };
        if g.outputs.contains(&v) {
            return None;
        }
        // A matrix read only through splits into heads that products read.
        let readers: Vec<&crate::ir::Node> =
            g.nodes.iter().filter(|n| n.inputs.contains(&v)).collect();
        let split_for_products = |n: &&crate::ir::Node| {
            self.layout.sliced.iter().any(|(w, sl)| {
                sl.input == v
                    && sl
                        .nodes
                        .first()
                        .is_some_and(|&k| g.nodes[k].outputs[0] == n.outputs[0])
                    && g.nodes.iter().enumerate().any(|(t, tn)| {
                        tn.inputs.first() == Some(w)
                            && matches!(tn.op, Op::Transpose { .. })
                            && self.read_by_products(g.nodes[t].outputs[0])
                    })
            })
        };
        if !readers.is_empty() && readers.iter().all(split_for_products) {
            let (a, b) = (want(1)?, want(2)?);
            return (a == b && a != self.layout.act).then_some(a);
        }
        let made_by_copy = g.nodes.iter().any(|n| {
            n.outputs.first() == Some(&v)
                && matches!(&n.op, Op::Transpose { perm } if perm.last() == Some(&(perm.len() - 1)))
        });
        if !(made_by_copy || self.fusion.row_groups.iter().any(|r| r.output == v)) {
            return None;
        }
        let shape = &g.ty(v).shape;
        let several_rows = shape.len() >= 2 && shape[shape.len() - 2] > 1;
        let readers: Vec<&crate::ir::Node> =
            g.nodes.iter().filter(|n| n.inputs.contains(&v)).collect();
        let as_a = |n: &&crate::ir::Node| {
            matches!(n.op, Op::MatMul) && n.inputs[0] == v && n.inputs[1] != v
        };
        if readers.is_empty() || !several_rows || !self.read_by_products(v) {
            return None;
        }
        let operand = if readers.iter().all(as_a) {
            1
        } else if readers.iter().all(|n| !as_a(n)) {
            2
        } else {
            return None;
        };
        let want = want(operand)?;
        (want != self.layout.act).then_some(want)
    }
}
