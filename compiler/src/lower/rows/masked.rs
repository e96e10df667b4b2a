//! Work a constant mask makes dead: a causal softmax's upper triangle.
//!
//! A row group (`rows`) whose steps read a constant mask, as attention's
//! softmax does after `canon` (`x · m + b`, with `m = 0` and `b = -1e9`
//! above the diagonal), has elements whose result is exactly zero whatever
//! its source holds there: `x · 0 + b` is at most [`MASKED`], so after the
//! row's maximum is subtracted its exponential underflows to 0, and so does
//! the quotient by the row's sum. Those elements neither add to the row's
//! maximum (a masked value is below every unmasked one) nor to its sum (a
//! zero). The group then computes each block of rows only up to the last
//! column any of its rows needs (whole register chunks), and stores zeros
//! beyond; the product making its source skips the output tiles no
//! computed chunk reads; and a product reading the group's result as `A`
//! stops its reduction where all the rows of its tile are zero. For a
//! causal mask at seq 512 in tiles of 128, 6 of 16 tiles of each.
//!
//! The analysis (`skip`) evaluates the group's plan on an abstract value
//! per element (unknown, a known constant, or some value at most
//! [`MASKED`]), once per row of the mask's period. It assumes, as the
//! hardware's floating point makes true of any real attention, that the
//! products' values are finite and that each row's unmasked values exceed
//! the masked ones by more than 104 (so `exp` of their difference is below
//! f32's smallest subnormal); a row with no unmasked element is computed
//! whole. `--no-skip-masked` switches it off.

use super::plan::{Arg, Calc, Plan};
use crate::ir::{Graph, ReduceKind, ValueId};
use crate::lower::ops::Ew;
pub use crate::lower::types::MASKED;
use crate::passes::rowgroups::RowGroup;
use isa_specs::model::{Func, RegFileId};

/// The most elements (a mask's period of rows times the row) analysed.
const MOST: usize = 1 << 22;

/// What a row group may skip, for the register file it is lowered in.
#[derive(Clone, Debug, PartialEq)]
pub struct Skip {
    /// The node that started the group.
    pub seed: usize,
    /// The file the group is lowered in (its granule fixes the widths).
    pub file: RegFileId,
    /// The group's result.
    pub output: ValueId,
    /// Its computed sources read by nothing else: their producers may skip
    /// what the group does not read.
    pub sources: Vec<ValueId>,
    /// Rows per block (the file's row granule).
    pub gr: i64,
    /// Columns computed for each block of rows (whole chunks), by block
    /// index modulo its length; the rest of the block's row is zero.
    pub need: Vec<i64>,
}

impl Skip {
    /// Columns computed for any of rows `r0..r0 + h` (the result is zero
    /// beyond, and the sources are not read there).
    pub fn need_rows(&self, r0: i64, h: i64) -> i64 {
        let n = self.need.len() as i64;
        let (first, last) = (r0 / self.gr, (r0 + h.max(1) - 1) / self.gr);
        (first..=last.min(first + n - 1))
            .map(|b| self.need[(b % n) as usize])
            .max()
            .unwrap_or(0)
    }
}

/// What of a matrix product a mask makes dead: its result read only by a
/// row group that skips some of it, or its `A` a row group's result that
/// is zero past some column. For the tile search's estimate.
#[derive(Debug)]
pub struct Work {
    /// The skips of the group reading the result, if any.
    out: Option<Skip>,
    /// The skips of the group making `A`, if any.
    a: Option<Skip>,
    /// Per batch: its first row of the result and of `A`.
    rows: Vec<(i64, i64)>,
}

impl Work {
    /// The product's `Work`, if a mask makes any of it dead: result `out`,
    /// `A` = `a`, `m` rows per batch, `a_batch` its batches' first rows of `A`.
    pub(crate) fn of(
        skips: &[Skip],
        out: ValueId,
        a: ValueId,
        m: i64,
        a_batch: &[i64],
    ) -> Option<Work> {
        let out = skips.iter().find(|s| s.sources.contains(&out)).cloned();
        let a = skips.iter().find(|s| s.output == a).cloned();
        (out.is_some() || a.is_some()).then(|| Work {
            out,
            a,
            rows: a_batch
                .iter()
                .enumerate()
                .map(|(b, &a0)| (b as i64 * m, a0))
                .collect(),
        })
    }

    /// The shares of output tiles and of reduction steps that run, for a
    /// product of `(m, n, k)` in tiles of `(tm, tn, tk)` (as the tile loop
    /// and `Lowerer::matmul_tile` skip them).
    pub fn share(&self, (m, n, k): (i64, i64, i64), (tm, tn, tk): (i64, i64, i64)) -> (f64, f64) {
        let (mut tiles, mut steps, mut all_tiles, mut all_steps) = (0i64, 0i64, 0i64, 0i64);
        let kt = crate::lower::machine::cdiv(k, tk.max(1));
        for &(o0, a0) in &self.rows {
            for r in (0..m).step_by(tm.max(1) as usize) {
                let h = tm.min(m - r);
                let run = self.a.as_ref().map_or(kt, |s| {
                    let need = s.need_rows(a0 + r, h).max(1);
                    crate::lower::machine::cdiv(need, tk.max(1)).min(kt)
                });
                let nt = crate::lower::machine::cdiv(n, tn.max(1));
                // The column tiles starting before the columns the reader needs.
                let read = self.out.as_ref().map_or(nt, |s| {
                    crate::lower::machine::cdiv(s.need_rows(o0 + r, h).min(n), tn.max(1))
                });
                all_tiles += nt;
                all_steps += nt * kt;
                tiles += read;
                steps += read * run;
            }
        }
        let f = |x: i64, all: i64| if all == 0 { 1.0 } else { x as f64 / all as f64 };
        (f(tiles, all_tiles), f(steps, all_steps))
    }
}

/// An element's abstract value.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Abs {
    /// Depends on the data.
    Live,
    /// This constant.
    Known(f64),
    /// Some value at most [`MASKED`].
    Below,
}

impl Abs {
    fn masked(self) -> bool {
        match self {
            Abs::Known(v) => v <= MASKED,
            Abs::Below => true,
            Abs::Live => false,
        }
    }

    fn zero(self) -> bool {
        self == Abs::Known(0.0)
    }
}

/// `a + b`.
fn add(a: Abs, b: Abs) -> Abs {
    match (a, b) {
        (Abs::Known(x), Abs::Known(y)) => Abs::Known(x + y),
        (Abs::Below, Abs::Known(y)) | (Abs::Known(y), Abs::Below) if y <= 0.0 => Abs::Below,
        _ => Abs::Live,
    }
}

/// `a · b` (the data finite: zero times anything is zero).
fn mul(a: Abs, b: Abs) -> Abs {
    match (a, b) {
        _ if a.zero() || b.zero() => Abs::Known(0.0),
        (Abs::Known(x), Abs::Known(y)) => Abs::Known(x * y),
        _ => Abs::Live,
    }
}

/// The columns each block of `gr` rows of group `grp` must compute in `file`
/// (chunks of `gc`), or None where nothing can be skipped.
pub(crate) fn skip(
    g: &Graph,
    grp: &RowGroup,
    plan: &Plan,
    file: RegFileId,
    (gr, gc): (i64, i64),
) -> Option<Skip> {
    let full = &g.ty(grp.output).shape;
    let cols = *full.last()?;
    let rows: usize = full[..full.len() - 1].iter().product();
    // A row of one chunk is computed whole.
    if cols as i64 <= gc {
        return None;
    }
    // The rows after which every constant the plan reads repeats.
    let mut period = 1usize;
    let mut consts = Vec::new();
    for st in &plan.steps {
        if let Some((_, args)) = st.calc.elementwise() {
            for a in args {
                if let Arg::Const(v) = a {
                    let t = g.constants.get(v)?;
                    let own = t.data.len() / cols.max(1);
                    if own == 0 {
                        return None;
                    }
                    period = lcm(period, own);
                    consts.push((*v, own));
                }
            }
        }
    }
    let gr_u = usize::try_from(gr).ok().filter(|&g| g > 0)?;
    period = lcm(period, gr_u);
    if consts.is_empty() || period > rows || !rows.is_multiple_of(period) || period * cols > MOST {
        return None;
    }
    // (the maximum's slot, the slot it reduces)
    let maxima: Vec<(usize, usize)> = plan
        .steps
        .iter()
        .filter_map(|s| match s.calc {
            Calc::Reduce(ReduceKind::Max, x) => Some((s.slot, x)),
            _ => None,
        })
        .collect();
    let mut vals = vec![Abs::Live; plan.slots];
    // Per row of the period: one past the last column it needs.
    let mut live = vec![0usize; period];
    for (r, lr) in live.iter_mut().enumerate() {
        let mut unmasked = vec![false; plan.steps.len()];
        for c in 0..cols {
            vals.fill(Abs::Live);
            let mut skippable = true;
            for (i, st) in plan.steps.iter().enumerate() {
                let v = match (&st.calc, st.calc.elementwise()) {
                    (Calc::Reduce(kind, s), _) => {
                        let x = vals[*s];
                        skippable &= match kind {
                            ReduceKind::Max => x.masked(),
                            ReduceKind::Sum => x.zero(),
                            _ => false,
                        };
                        unmasked[i] |= !x.masked();
                        Abs::Live
                    }
                    (_, Some((ew, args))) => {
                        let arg = |a: &Arg| match a {
                            Arg::Slot(s) => vals[*s],
                            Arg::Uniform(k) => Abs::Known(*k),
                            Arg::ConstRow(v) => g
                                .constants
                                .get(v)
                                .and_then(|t| t.data.get(c))
                                .map_or(Abs::Live, |x| Abs::Known(*x)),
                            Arg::Const(v) => {
                                let own = consts.iter().find(|x| x.0 == *v);
                                own.zip(g.constants.get(v))
                                    .and_then(|(&(_, own), t)| t.data.get((r % own) * cols + c))
                                    .map_or(Abs::Live, |x| Abs::Known(*x))
                            }
                            Arg::OuterRow(_) => Abs::Live,
                        };
                        // Operands (at most three: a multiply-add).
                        let mut ops = [Abs::Live; 3];
                        for (o, x) in ops.iter_mut().zip(args) {
                            *o = arg(x);
                        }
                        let a = &ops[..args.len().min(3)];
                        // `x - max(x)`.
                        let less_max = matches!(args,
                            [Arg::Slot(x), Arg::Slot(m)] if maxima.contains(&(*m, *x)));
                        match (ew, a) {
                            (Ew::Add, [x, y]) => add(*x, *y),
                            (Ew::Mul, [x, y]) => mul(*x, *y),
                            (Ew::MulAdd, [x, y, z]) => add(mul(*x, *y), *z),
                            (Ew::Sub, [Abs::Known(x), Abs::Known(y)]) => Abs::Known(x - y),
                            // A masked value less its row's maximum.
                            (Ew::Sub, [x, _]) if x.masked() && less_max => Abs::Below,
                            (Ew::Div, [x, y]) if x.zero() && !y.zero() => Abs::Known(0.0),
                            (Ew::Call(Func::Exp), [x]) if x.masked() => Abs::Known(0.0),
                            (Ew::Neg, [Abs::Known(x)]) => Abs::Known(-x),
                            _ => Abs::Live,
                        }
                    }
                    (_, None) => Abs::Live,
                };
                vals[st.slot] = v;
            }
            if !(skippable && vals[plan.output].zero()) {
                *lr = c + 1;
            }
        }
        // A maximum over masked values only is no bound on them: the
        // row is computed whole.
        let all_masked = plan
            .steps
            .iter()
            .zip(&unmasked)
            .any(|(s, u)| matches!(s.calc, Calc::Reduce(ReduceKind::Max, _)) && !u);
        if all_masked {
            *lr = cols;
        }
    }
    let gc = usize::try_from(gc.max(1)).ok()?;
    let need: Vec<i64> = live
        .chunks(gr_u)
        .map(|b| {
            let n = b.iter().copied().max().unwrap_or(cols);
            (n.div_ceil(gc) * gc).min(cols) as i64
        })
        .collect();
    if need.iter().all(|&n| n as usize >= cols) {
        return None;
    }
    let members: Vec<usize> = grp.nodes.clone();
    let sources = plan
        .sources
        .iter()
        .map(|(v, _)| *v)
        .filter(|v| {
            !g.outputs.contains(v)
                && g.nodes
                    .iter()
                    .enumerate()
                    .all(|(k, n)| !n.inputs.contains(v) || members.contains(&k))
        })
        .collect();
    Some(Skip {
        seed: grp.seed,
        file,
        output: grp.output,
        sources,
        gr,
        need,
    })
}

fn lcm(a: usize, b: usize) -> usize {
    if a == 0 || b == 0 {
        return a.max(b);
    }
    crate::lower::machine::lcm(a as i64, b as i64) as usize
}
