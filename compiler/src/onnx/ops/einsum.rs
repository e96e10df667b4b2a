//! `Einsum` of one or two operands, where the equation is a batched matrix
//! product after transposes and reshapes: the labels of one operand only
//! that the output drops are summed first (`Reduce`); then each operand is
//! transposed to `[batch, kept, contracted]` (the other to `[batch,
//! contracted, kept]`), reshaped into matrices, multiplied (`MatMul`
//! broadcasts the batch dimensions), reshaped back and transposed into the
//! output's order. One operand is a sum and a transpose. `...` stands for
//! the same broadcast dimensions in every term; without `->` the output is
//! those, then the labels used once, in alphabetical order. A label
//! repeated within a term (a diagonal or trace) is refused.

use super::{Lowered, add, input};
use crate::ir::{Op, ReduceKind, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;

/// A dimension's label: a letter, or the `i`-th dimension `...` stands for
/// (counted from the first of the longest `...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Label {
    Broadcast(usize),
    Letter(char),
}

/// The equation with every `...` spelled out: the operands' labels and the output's.
#[derive(Debug, PartialEq)]
struct Equation {
    terms: Vec<Vec<Label>>,
    output: Vec<Label>,
}

/// A term's letters and where its `...` is (if any), from its text.
fn term(text: &str) -> Result<(Vec<char>, Option<usize>), String> {
    let mut letters = Vec::new();
    let mut dots = None;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("...") {
            if dots.replace(letters.len()).is_some() {
                return Err(format!("`{text}` has `...` twice"));
            }
            rest = after;
        } else if c.is_ascii_alphabetic() {
            letters.push(c);
            rest = &rest[1..];
        } else {
            return Err(format!("`{text}` has `{c}`, not a letter or `...`"));
        }
    }
    Ok((letters, dots))
}

/// `letters` with `n` broadcast labels at `dots` (the last `n` of `total`).
fn spelled(letters: &[char], dots: Option<usize>, n: usize, total: usize) -> Vec<Label> {
    let mut out: Vec<Label> = letters.iter().map(|c| Label::Letter(*c)).collect();
    if let Some(at) = dots {
        let b = (total - n..total).map(Label::Broadcast);
        out.splice(at..at, b);
    }
    out
}

/// Parses `equation` for operands of these ranks.
fn parse(equation: &str, ranks: &[usize]) -> Result<Equation, String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let texts: Vec<&str> = lhs.split(',').collect();
    if texts.len() != ranks.len() {
        return Err(format!(
            "{} terms for {} operands",
            texts.len(),
            ranks.len()
        ));
    }
    let parsed: Vec<(Vec<char>, Option<usize>)> =
        texts.iter().map(|t| term(t)).collect::<Result<_, _>>()?;
    let mut spans = Vec::new();
    for ((letters, dots), &rank) in parsed.iter().zip(ranks) {
        let n = rank
            .checked_sub(letters.len())
            .filter(|n| dots.is_some() || *n == 0);
        spans.push(
            n.ok_or_else(|| format!("{} labels for an operand of rank {rank}", letters.len()))?,
        );
    }
    let total = spans.iter().copied().max().unwrap_or(0);
    let terms: Vec<Vec<Label>> = parsed
        .iter()
        .zip(&spans)
        .map(|((l, d), n)| spelled(l, *d, *n, total))
        .collect();
    let output = match rhs {
        Some(r) => {
            let (letters, dots) = term(r)?;
            if dots.is_none() && total > 0 {
                return Err("the output leaves out the dimensions of `...`".to_owned());
            }
            spelled(&letters, dots, total, total)
        }
        None => implicit_output(&terms, total),
    };
    check_labels(&terms, &output)?;
    Ok(Equation { terms, output })
}

/// Without `->`: the broadcast dimensions, then the letters used once, sorted.
fn implicit_output(terms: &[Vec<Label>], total: usize) -> Vec<Label> {
    let all: Vec<Label> = terms.iter().flatten().copied().collect();
    let mut once: Vec<Label> = all
        .iter()
        .copied()
        .filter(|l| matches!(l, Label::Letter(_)) && all.iter().filter(|m| *m == l).count() == 1)
        .collect();
    once.sort_unstable();
    (0..total).map(Label::Broadcast).chain(once).collect()
}

/// Refuses a label repeated within a term (diagonals) and an output label
/// that is no operand's.
fn check_labels(terms: &[Vec<Label>], output: &[Label]) -> Result<(), String> {
    for t in terms.iter().chain(std::iter::once(&output.to_vec())) {
        if (1..t.len()).any(|i| t[..i].contains(&t[i])) {
            return Err("a label repeated within a term (a diagonal) is not supported".to_owned());
        }
    }
    match output.iter().find(|l| !terms.iter().any(|t| t.contains(l))) {
        Some(l) => Err(format!("the output label {l:?} is no operand's")),
        None => Ok(()),
    }
}

/// `Einsum` (see the module doc).
pub(super) fn einsum(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    let n = cx.proto.input.len();
    if !(1..=2).contains(&n) || cx.proto.output.len() != 1 {
        return Err(cx.arity_err(format!("has {n} operands: only one or two are supported")));
    }
    cx.check_attributes(&["equation"])?;
    let equation = cx.string("equation", "")?;
    let xs: Vec<ValueId> = (0..n)
        .map(|i| input(imp, cx, i))
        .collect::<Result<_, _>>()?;
    let ranks: Vec<usize> = xs.iter().map(|x| imp.g.ty(*x).shape.len()).collect();
    let refuse = |why: String| cx.attr_err("equation", format!("\"{equation}\": {why}"));
    let eq = parse(&equation, &ranks).map_err(refuse)?;
    let sizes = label_sizes(imp, &xs, &eq).map_err(refuse)?;
    let mut ops = Plan {
        imp,
        cx,
        sizes: &sizes,
    };
    let y = if n == 1 {
        ops.single(xs[0], &eq.terms[0], &eq.output)?
    } else {
        ops.product([xs[0], xs[1]], [&eq.terms[0], &eq.terms[1]], &eq.output)?
    };
    Ok(Lowered::Value(y))
}

/// Each label's size (a broadcast label's largest).
fn label_sizes(
    imp: &Importer,
    xs: &[ValueId],
    eq: &Equation,
) -> Result<Vec<(Label, usize)>, String> {
    let mut sizes: Vec<(Label, usize)> = Vec::new();
    for (x, t) in xs.iter().zip(&eq.terms) {
        for (l, &d) in t.iter().zip(&imp.g.ty(*x).shape) {
            match sizes.iter_mut().find(|(m, _)| m == l) {
                None => sizes.push((*l, d)),
                Some((_, s)) if *s == d => {}
                Some((Label::Broadcast(_), s)) if *s == 1 || d == 1 => *s = (*s).max(d),
                Some((_, s)) => return Err(format!("label {l:?} has sizes {s} and {d}")),
            }
        }
    }
    Ok(sizes)
}

/// Adds the IR nodes of an equation.
struct Plan<'a, 'i, 'n> {
    imp: &'a mut Importer,
    cx: &'a NodeCx<'n>,
    sizes: &'i [(Label, usize)],
}

impl Plan<'_, '_, '_> {
    fn size(&self, l: Label) -> usize {
        self.sizes
            .iter()
            .find(|(m, _)| *m == l)
            .map_or(1, |(_, s)| *s)
    }

    fn add(&mut self, step: &str, op: Op, x: Vec<ValueId>) -> Result<ValueId, ImportError> {
        add(self.imp, self.cx, step, op, x)
    }

    /// `x` (labelled `from`) summed over the labels `keep` lacks.
    fn sum_out(
        &mut self,
        step: &str,
        x: ValueId,
        from: &[Label],
        keep: impl Fn(&Label) -> bool,
    ) -> Result<(ValueId, Vec<Label>), ImportError> {
        let axes: Vec<usize> = (0..from.len()).filter(|i| !keep(&from[*i])).collect();
        let kept: Vec<Label> = from.iter().copied().filter(|l| keep(l)).collect();
        if axes.is_empty() {
            return Ok((x, kept));
        }
        let op = Op::Reduce {
            kind: ReduceKind::Sum,
            axes,
            keepdims: false,
        };
        Ok((self.add(step, op, vec![x])?, kept))
    }

    /// `x` (labelled `from`) with its dimensions in the order of `to`.
    fn permute(
        &mut self,
        step: &str,
        x: ValueId,
        from: &[Label],
        to: &[Label],
    ) -> Result<ValueId, ImportError> {
        let perm: Vec<usize> = to
            .iter()
            .map(|l| from.iter().position(|m| m == l).unwrap_or(0))
            .collect();
        if perm.iter().enumerate().all(|(i, p)| i == *p) {
            return Ok(x);
        }
        self.add(step, Op::Transpose { perm }, vec![x])
    }

    /// `x` reshaped to `shape` (unless it has it).
    fn reshape(
        &mut self,
        step: &str,
        x: ValueId,
        shape: Vec<usize>,
    ) -> Result<ValueId, ImportError> {
        super::reshape_to(self.imp, self.cx, step, x, shape)
    }

    /// One operand: a sum over the labels the output drops, then a transpose.
    fn single(&mut self, x: ValueId, t: &[Label], out: &[Label]) -> Result<ValueId, ImportError> {
        let (s, kept) = self.sum_out("sum", x, t, |l| out.contains(l))?;
        let y = self.permute("transpose", s, &kept, out)?;
        if y == x {
            return self.add("", Op::Identity, vec![x]);
        }
        Ok(y)
    }

    /// Two operands: a batched matrix product (see the module doc).
    fn product(
        &mut self,
        [a, b]: [ValueId; 2],
        [ta, tb]: [&[Label]; 2],
        out: &[Label],
    ) -> Result<ValueId, ImportError> {
        let (a, ta) = self.sum_out("sum_a", a, ta, |l| out.contains(l) || tb.contains(l))?;
        let (b, tb) = self.sum_out("sum_b", b, tb, |l| out.contains(l) || ta.contains(l))?;
        let in_both = |l: &Label| ta.contains(l) && tb.contains(l);
        let batch: Vec<Label> = out.iter().copied().filter(in_both).collect();
        let m: Vec<Label> = out
            .iter()
            .copied()
            .filter(|l| ta.contains(l) && !tb.contains(l))
            .collect();
        let n: Vec<Label> = out
            .iter()
            .copied()
            .filter(|l| tb.contains(l) && !ta.contains(l))
            .collect();
        let k: Vec<Label> = ta
            .iter()
            .copied()
            .filter(|l| in_both(l) && !out.contains(l))
            .collect();
        let cat = |p: &[Label], q: &[Label], r: &[Label]| [p, q, r].concat();
        let a = self.permute("transpose_a", a, &ta, &cat(&batch, &m, &k))?;
        let b = self.permute("transpose_b", b, &tb, &cat(&batch, &k, &n))?;
        let prod = |s: &Self, ls: &[Label]| ls.iter().map(|l| s.size(*l)).product::<usize>();
        let (mm, kk, nn) = (prod(self, &m), prod(self, &k), prod(self, &n));
        let batch_of = |x: ValueId, s: &Self| s.imp.g.ty(x).shape[..batch.len()].to_vec();
        let a_shape = [batch_of(a, self), vec![mm, kk]].concat();
        let b_shape = [batch_of(b, self), vec![kk, nn]].concat();
        let a = self.reshape("matrix_a", a, a_shape)?;
        let b = self.reshape("matrix_b", b, b_shape)?;
        let y = self.add("matmul", Op::MatMul, vec![a, b])?;
        let labels = cat(&batch, &m, &n);
        let shape = labels.iter().map(|l| self.size(*l)).collect();
        let y = self.reshape("unflatten", y, shape)?;
        let y = self.permute("", y, &labels, out)?;
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{close, import, run};
    use super::{Label, parse};
    use crate::onnx::proto::{AttributeProto, NodeProto, TensorProto};

    fn letters(s: &str) -> Vec<Label> {
        s.chars().map(Label::Letter).collect()
    }

    #[test]
    fn parses_explicit_implicit_and_broadcast_forms() {
        let eq = parse("bij, bjk -> bik", &[3, 3]).expect("parses");
        assert_eq!(eq.terms, [letters("bij"), letters("bjk")]);
        assert_eq!(eq.output, letters("bik"));
        // Implicit: the labels used once, sorted.
        assert_eq!(
            parse("ij,jk", &[2, 2]).expect("parses").output,
            letters("ik")
        );
        assert_eq!(parse("ba", &[2]).expect("parses").output, letters("ab"));
        assert_eq!(parse("i,i", &[1, 1]).expect("parses").output, []);
        // `...` right-aligned: the shorter operand has the later dimensions.
        let eq = parse("...ij,...jk->...ik", &[4, 3]).expect("parses");
        let b = Label::Broadcast;
        let l = Label::Letter;
        assert_eq!(eq.terms[0], [b(0), b(1), l('i'), l('j')]);
        assert_eq!(eq.terms[1], [b(1), l('j'), l('k')]);
        assert_eq!(eq.output, [b(0), b(1), l('i'), l('k')]);
        assert_eq!(parse("->", &[0]).expect("parses").output, []);
    }

    #[test]
    fn refuses_diagonals_and_malformed_equations() {
        let err = |eq: &str, ranks: &[usize]| parse(eq, ranks).expect_err("refused");
        assert!(err("ii->i", &[2]).contains("diagonal"));
        assert!(err("bii->bi", &[3]).contains("diagonal"));
        assert!(err("ij->k", &[2]).contains("no operand's"));
        assert!(err("ij,jk", &[2]).contains("2 terms for 1 operands"));
        assert!(err("ijk", &[2]).contains("rank 2"));
        assert!(err("i.j", &[2]).contains("not a letter"));
        assert!(err("...ij->ij", &[3]).contains("`...`"));
    }

    fn values(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 5) % 7) as f32 - 3.0).collect()
    }

    /// `x` (the graph input) and `w` (a constant) through `equation`.
    fn einsum(equation: &str, xs: &[i64], ws: &[i64]) -> (Vec<usize>, Vec<f64>) {
        let node = NodeProto::new("Einsum", "e", &["x", "w"], &["y"])
            .with(AttributeProto::string("equation", equation));
        let n = |s: &[i64]| s.iter().product::<i64>() as usize;
        let w = TensorProto::from_f32("w", ws, &values(n(ws)));
        run(node, 12, (xs, &values(n(xs))), vec![w])
    }

    #[test]
    fn matmul_like_equations_match_their_sums() {
        let (x, w) = (values(24), values(12));
        let (xv, wv) = (|i: usize| f64::from(x[i]), |i: usize| f64::from(w[i]));
        // bid,nd->bin: x [2, 3, 4], w [3, 4].
        let (shape, got) = einsum("bid,nd->bin", &[2, 3, 4], &[3, 4]);
        assert_eq!(shape, [2, 3, 3]);
        let mut want = vec![0.0; 18];
        for (o, slot) in want.iter_mut().enumerate() {
            let (b, i, n) = (o / 9, (o / 3) % 3, o % 3);
            *slot = (0..4)
                .map(|d| xv((b * 3 + i) * 4 + d) * wv(n * 4 + d))
                .sum();
        }
        assert!(close(&got, &want, 1e-4), "{got:?}");
        // bhid,bhjd->bhij: x [1, 2, 3, 4], w [1, 2, 1, 4] (j of size 1, h a batch).
        let (shape, got) = einsum("bhid,bhjd->bhij", &[1, 2, 3, 4], &[1, 2, 1, 4]);
        assert_eq!(shape, [1, 2, 3, 1]);
        let want: Vec<f64> = (0..6)
            .map(|o| {
                let (h, i) = (o / 3, o % 3);
                (0..4)
                    .map(|d| xv((h * 3 + i) * 4 + d) * wv(h * 4 + d))
                    .sum()
            })
            .collect();
        assert!(close(&got, &want, 1e-4), "{got:?}");
        // ...ij,...jk->...ik with a broadcast batch: x [2, 3, 2], w [1, 2, 6] -> [2, 3, 6].
        let (shape, got) = einsum("...ij,...jk->...ik", &[2, 3, 2], &[1, 2, 6]);
        assert_eq!(shape, [2, 3, 6]);
        let want: Vec<f64> = (0..36)
            .map(|o| {
                let (b, i, k) = (o / 18, (o / 6) % 3, o % 6);
                (0..2)
                    .map(|j| xv((b * 3 + i) * 2 + j) * wv(j * 6 + k))
                    .sum()
            })
            .collect();
        assert!(close(&got, &want, 1e-4), "{got:?}");
    }

    #[test]
    fn one_operand_sums_and_transposes() {
        let node = NodeProto::new("Einsum", "e", &["x"], &["y"])
            .with(AttributeProto::string("equation", "ijk->ki"));
        let x = values(24);
        let (shape, got) = run(node, 12, (&[2, 3, 4], &x), vec![]);
        assert_eq!(shape, [4, 2]);
        let want: Vec<f64> = (0..8)
            .map(|o| {
                let (k, i) = (o / 2, o % 2);
                (0..3).map(|j| f64::from(x[(i * 3 + j) * 4 + k])).sum()
            })
            .collect();
        assert!(close(&got, &want, 1e-5), "{got:?}");
    }

    #[test]
    fn refusals_name_the_equation() {
        let node = NodeProto::new("Einsum", "e", &["x"], &["y"])
            .with(AttributeProto::string("equation", "ii->i"));
        let err = import(node, 12, &[3, 3], vec![]).expect_err("refused");
        assert!(
            err.contains("\"ii->i\"") && err.contains("diagonal"),
            "{err}"
        );
    }
}
