//! The register plan of a row group: the steps a group computes for one
//! register file, their operands and the slots their results take. The
//! lowering (`rows`) and the skipping of masked work (`masked`) both read it.

use crate::ir::{ReduceKind, ValueId};
use crate::lower::ops::{self, Ew};

/// An operand of a step of the plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Arg {
    /// A slot of the plan: a source or a step's result.
    Slot(usize),
    /// One value everywhere.
    Uniform(f64),
    /// A constant row (`[C]`), the same for every row.
    ConstRow(ValueId),
    /// A constant of the full shape, or repeated to it along leading dimensions.
    Const(ValueId),
    /// A computed row result from outside (`[.., 1]`).
    OuterRow(ValueId),
}

/// What a step computes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Calc {
    /// An element-wise operation.
    Ew(Ew, Vec<Arg>),
    /// A reduction over the row.
    Reduce(ReduceKind, usize),
    /// `x · m + b` with `m`, `b` a causal mask ([`MaskByPosition`]),
    /// computed by an instruction that masks by element position: the
    /// mask is never loaded. Operands `[x, m, b]`, as the multiply-add's.
    Causal(Vec<Arg>, MaskByPosition),
}

impl Calc {
    /// The element-wise operation it computes and its operands (a mask by
    /// position is the multiply-add it replaces), if not a reduction.
    pub(crate) fn elementwise(&self) -> Option<(Ew, &[Arg])> {
        match self {
            Calc::Ew(ew, args) => Some((*ew, args)),
            Calc::Causal(args, _) => Some((Ew::MulAdd, args)),
            Calc::Reduce(..) => None,
        }
    }
}

/// A causal mask `x · m + b` computed from positions: row `i` of the
/// mask's own rows keeps columns `0..=i + off` (`m = 1`, `b = 0`) and
/// masks the rest (`m = 0`, `b` at most [`super::masked::MASKED`]); the full
/// shape reads row `r` of it as row `r` modulo `own`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MaskByPosition {
    /// The last column row 0 keeps.
    pub(crate) off: i64,
    /// The mask's own rows.
    pub(crate) own: i64,
    /// The instruction that masks.
    pub(crate) form: ops::CausalForm,
}

/// The diagonal offset of a causal mask `x · m + b` over `cols` columns
/// ([`MaskByPosition`]): every row keeps a prefix of its columns, one
/// column more than the row before (up to the whole row), row 0 at least
/// one. None for any other mask.
pub(crate) fn causal_offset(
    m: &crate::ir::Tensor,
    b: &crate::ir::Tensor,
    cols: usize,
) -> Option<i64> {
    if cols == 0 || m.data.len() != b.data.len() || !m.data.len().is_multiple_of(cols) {
        return None;
    }
    let mut off = None;
    for (i, (mr, br)) in m.data.chunks(cols).zip(b.data.chunks(cols)).enumerate() {
        let kept = mr
            .iter()
            .zip(br)
            .take_while(|(m, b)| **m == 1.0 && **b == 0.0)
            .count();
        if !mr[kept..]
            .iter()
            .zip(&br[kept..])
            .all(|(m, b)| *m == 0.0 && *b <= super::masked::MASKED)
        {
            return None;
        }
        let off = *off.get_or_insert(kept as i64 - 1);
        if kept == 0 || kept as i64 != (i as i64 + off + 1).min(cols as i64) {
            return None;
        }
    }
    off
}

/// One step of the plan: its result goes to `slot`; `row` when it is a row result.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PlanStep {
    pub(crate) slot: usize,
    pub(crate) row: bool,
    pub(crate) calc: Calc,
}

/// The steps of a group for one register file, in order.
pub(crate) struct Plan {
    /// The computed full-shape values read from outside, and their slots.
    pub(crate) sources: Vec<(ValueId, usize)>,
    /// The constants read at the full shape (staged by bands after the sources).
    pub(crate) consts: Vec<ValueId>,
    pub(crate) steps: Vec<PlanStep>,
    /// The slot of the output.
    pub(crate) output: usize,
    /// Slots in all.
    pub(crate) slots: usize,
}
