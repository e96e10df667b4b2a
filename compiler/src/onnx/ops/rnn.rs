//! The recurrent ops `RNN`, `GRU` and `LSTM`, unrolled over their sequence
//! (static once the inputs' shapes are fixed) into products, sums,
//! activations and slices.
//!
//! Per direction, the input projection of every step is one product
//! (`X [seq·batch, input] × Wᵀ`) plus the biases; each step then adds the
//! recurrent product `H × Rᵀ`, slices the gates and combines them. Weights
//! that are constants (as exporters write them) have their slices and
//! transposes folded at import. `Y` stacks the steps' hidden states;
//! `Y_h` (and `Y_c` for LSTM) are the last ones.

use super::{Lowered, add, constant_of, input, optional_input, reshape_to, scalar};
use crate::ir::{ElemType, Op, Tensor, TensorType, Unary, ValueId};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;
use crate::onnx::tensor::MAX_CONSTANT_ELEMENTS;

/// Which recurrent op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    /// Gates per hidden unit.
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// The default activations of one direction.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }

    /// Outputs the op has.
    fn outputs(self) -> usize {
        if self == Cell::Lstm { 3 } else { 2 }
    }
}

/// An activation the cells may use.
#[derive(Clone, Copy, Debug)]
enum Act {
    Sigmoid,
    Tanh,
    Relu,
}

/// The node's attributes, checked.
struct Spec {
    cell: Cell,
    hidden: usize,
    /// Per direction: whether it walks the sequence backwards.
    reverse: Vec<bool>,
    /// Per direction, the cell's activations.
    acts: Vec<Vec<Act>>,
    clip: Option<f64>,
    /// GRU: the reset gate applies after the recurrent product.
    linear_before_reset: bool,
    /// LSTM: the forget gate is `1 - input gate`.
    input_forget: bool,
    /// `X` is `[batch, seq, input]` and the outputs batch-major.
    batch_major: bool,
}

fn spec(cx: &NodeCx, cell: Cell) -> Result<Spec, ImportError> {
    let mut known = vec![
        "activation_alpha",
        "activation_beta",
        "activations",
        "clip",
        "direction",
        "hidden_size",
        "layout",
    ];
    match cell {
        Cell::Gru => known.push("linear_before_reset"),
        Cell::Lstm => known.push("input_forget"),
        Cell::Rnn => {}
    }
    cx.check_attributes(&known)?;
    if cx.floats("activation_alpha")?.is_some() || cx.floats("activation_beta")?.is_some() {
        return Err(cx.attr_err(
            "activation_alpha",
            "activations with parameters are not supported (only Sigmoid, Tanh, Relu)",
        ));
    }
    let hidden = usize::try_from(cx.required_int("hidden_size")?)
        .ok()
        .filter(|h| (1..=MAX_CONSTANT_ELEMENTS).contains(h))
        .ok_or_else(|| {
            cx.attr_err(
                "hidden_size",
                format!("must be in 1..={MAX_CONSTANT_ELEMENTS}"),
            )
        })?;
    let direction = cx.string("direction", "forward")?;
    let reverse = match direction.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        d => return Err(cx.attr_err("direction", format!("unknown direction `{d}`"))),
    };
    let per = cell.default_activations().len();
    let names: Vec<String> = match cx.strings("activations")? {
        Some(list) => list,
        None => (reverse.iter())
            .flat_map(|_| cell.default_activations().iter().map(|s| (*s).to_owned()))
            .collect(),
    };
    if names.len() != per * reverse.len() {
        return Err(cx.attr_err(
            "activations",
            format!(
                "needs {} names ({per} per direction), has {}",
                per * reverse.len(),
                names.len()
            ),
        ));
    }
    let act = |n: &str| match n.to_ascii_lowercase().as_str() {
        "sigmoid" => Ok(Act::Sigmoid),
        "tanh" => Ok(Act::Tanh),
        "relu" => Ok(Act::Relu),
        _ => Err(cx.attr_err(
            "activations",
            format!("`{n}` is not supported (only Sigmoid, Tanh, Relu)"),
        )),
    };
    let acts = (names.chunks(per))
        .map(|c| c.iter().map(|n| act(n)).collect::<Result<Vec<_>, _>>())
        .collect::<Result<_, _>>()?;
    let clip = match cx.proto.attribute.iter().any(|a| a.name == "clip") {
        true => Some(f64::from(cx.float("clip", 0.0)?)),
        false => None,
    };
    Ok(Spec {
        cell,
        hidden,
        reverse,
        acts,
        clip,
        linear_before_reset: cell == Cell::Gru && cx.int("linear_before_reset", 0)? != 0,
        input_forget: cell == Cell::Lstm && cx.flag("input_forget")?,
        batch_major: cx.flag("layout")?,
    })
}

/// Builds the IR of one node: its values and the helpers that add ops.
struct Build<'a, 'n> {
    imp: &'a mut Importer,
    cx: &'a NodeCx<'n>,
    elem: ElemType,
}

impl Build<'_, '_> {
    fn op(&mut self, step: &str, op: Op, inputs: Vec<ValueId>) -> Result<ValueId, ImportError> {
        add(self.imp, self.cx, step, op, inputs)
    }

    fn shape(&self, v: ValueId) -> Vec<usize> {
        self.imp.g.ty(v).shape.clone()
    }

    /// `x[.., from..to]` along `axis`.
    fn slice(
        &mut self,
        step: &str,
        x: ValueId,
        axis: usize,
        from: usize,
        to: usize,
    ) -> Result<ValueId, ImportError> {
        let shape = self.shape(x);
        let mut starts = vec![0; shape.len()];
        let mut ends: Vec<i64> = shape.iter().map(|d| *d as i64).collect();
        starts[axis] = from as i64;
        ends[axis] = to as i64;
        let steps = vec![1; shape.len()];
        self.op(
            step,
            Op::Slice {
                starts,
                ends,
                steps,
            },
            vec![x],
        )
    }

    fn reshape(
        &mut self,
        step: &str,
        x: ValueId,
        shape: Vec<usize>,
    ) -> Result<ValueId, ImportError> {
        reshape_to(self.imp, self.cx, step, x, shape)
    }

    fn act(&mut self, step: &str, a: Act, x: ValueId) -> Result<ValueId, ImportError> {
        let op = match a {
            Act::Sigmoid => Op::Unary(Unary::Sigmoid),
            Act::Tanh => Op::Unary(Unary::Tanh),
            Act::Relu => Op::Relu,
        };
        self.op(step, op, vec![x])
    }

    fn constant(&mut self, step: &str, shape: Vec<usize>, x: f64) -> ValueId {
        let n = shape.iter().product();
        let ty = TensorType {
            elem: self.elem,
            shape,
        };
        let name = format!("{}/{step}", self.cx.name);
        self.imp.g.add_constant(name, Tensor::new(ty, vec![x; n]))
    }

    /// Direction `d` of a `[dirs, ..]` input, without its leading axis.
    fn direction(&mut self, step: &str, v: ValueId, d: usize) -> Result<ValueId, ImportError> {
        let s = self.slice(&format!("{step}_slice"), v, 0, d, d + 1)?;
        let rest = self.shape(v)[1..].to_vec();
        self.reshape(step, s, rest)
    }

    /// The clip of a pre-activation, where the node has one.
    fn clipped(
        &mut self,
        step: &str,
        x: ValueId,
        clip: Option<f64>,
    ) -> Result<ValueId, ImportError> {
        let Some(c) = clip else { return Ok(x) };
        let hi = scalar(
            self.imp,
            format!("{}/{step}_hi", self.cx.name),
            self.elem,
            c,
        );
        let lo = scalar(
            self.imp,
            format!("{}/{step}_lo", self.cx.name),
            self.elem,
            -c,
        );
        let x = self.op(&format!("{step}_min"), Op::Min, vec![x, hi])?;
        self.op(&format!("{step}_max"), Op::Max, vec![x, lo])
    }
}

/// The inputs of the node, by position.
struct Inputs {
    /// `[seq, batch, input]`.
    x: ValueId,
    w: ValueId,
    r: ValueId,
    b: Option<ValueId>,
    h0: Option<ValueId>,
    c0: Option<ValueId>,
    p: Option<ValueId>,
}

/// `RNN`, `GRU` or `LSTM`.
pub(super) fn recurrent(
    imp: &mut Importer,
    cx: &NodeCx,
    cell: Cell,
) -> Result<Lowered, ImportError> {
    let n_in = cx.proto.input.len();
    let max_in = if cell == Cell::Lstm { 8 } else { 6 };
    if !(3..=max_in).contains(&n_in) || cx.proto.output.len() > cell.outputs() {
        return Err(cx.arity_err(format!(
            "takes 3 to {max_in} inputs and at most {} outputs, has {n_in} and {}",
            cell.outputs(),
            cx.proto.output.len()
        )));
    }
    let s = spec(cx, cell)?;
    let x = input(imp, cx, 0)?;
    let xt = imp.g.ty(x).clone();
    if xt.shape.len() != 3 || !xt.elem.is_float() {
        return Err(cx.shape_err(format!("X must be a 3-D floating-point tensor, it is {xt}")));
    }
    let opt = |imp: &Importer, i| optional_input(imp, cx, i);
    let ins = Inputs {
        x,
        w: input(imp, cx, 1)?,
        r: input(imp, cx, 2)?,
        b: opt(imp, 3)?,
        h0: opt(imp, 5)?,
        c0: if cell == Cell::Lstm {
            opt(imp, 6)?
        } else {
            None
        },
        p: if cell == Cell::Lstm {
            opt(imp, 7)?
        } else {
            None
        },
    };
    let mut b = Build {
        imp,
        cx,
        elem: xt.elem,
    };
    let x = if s.batch_major {
        b.op(
            "x_seq_major",
            Op::Transpose {
                perm: vec![1, 0, 2],
            },
            vec![ins.x],
        )?
    } else {
        ins.x
    };
    let [seq, batch, width] = b.shape(x)[..] else {
        return Err(cx.shape_err("X must be 3-D"));
    };
    check_lengths(&mut b, seq, batch)?;
    check_shapes(&mut b, &s, &ins, batch, width)?;
    let mut ys = Vec::new();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for d in 0..s.reverse.len() {
        let (y, h, c) = direction(&mut b, &s, &ins, x, d, [seq, batch, width])?;
        ys.push(y);
        hs.push(h);
        cs.extend(c);
    }
    outputs(&mut b, &s, ys, hs, cs)
}

/// `sequence_lens`, when given, must be the whole sequence for every batch
/// entry (shorter ones are not supported).
fn check_lengths(b: &mut Build, seq: usize, batch: usize) -> Result<(), ImportError> {
    let Some(v) = optional_input(b.imp, b.cx, 4)? else {
        return Ok(());
    };
    let t = constant_of(b.imp, b.cx, v)?;
    if t.data.len() != batch || t.data.iter().any(|l| *l as usize != seq) {
        return Err(b.cx.shape_err(format!(
            "sequence_lens must be {seq} for every batch entry (shorter sequences are not supported), it is {:?}",
            &t.data[..]
        )));
    }
    Ok(())
}

/// Checks `W`, `R`, `B`, the initial states and the peepholes have the
/// shapes the spec gives.
fn check_shapes(
    b: &mut Build,
    s: &Spec,
    ins: &Inputs,
    batch: usize,
    width: usize,
) -> Result<(), ImportError> {
    let (dirs, h, g) = (s.reverse.len(), s.hidden, s.cell.gates());
    let want: [(&str, Option<ValueId>, Vec<usize>); 6] = [
        ("W", Some(ins.w), vec![dirs, g * h, width]),
        ("R", Some(ins.r), vec![dirs, g * h, h]),
        ("B", ins.b, vec![dirs, 2 * g * h]),
        ("initial_h", ins.h0, vec![dirs, batch, h]),
        ("initial_c", ins.c0, vec![dirs, batch, h]),
        ("P", ins.p, vec![dirs, 3 * h]),
    ];
    for (name, v, shape) in want {
        let Some(v) = v else { continue };
        let ty = b.imp.g.ty(v);
        if ty.shape != shape || ty.elem != b.elem {
            return Err(b.cx.shape_err(format!(
                "{name} must be {}{shape:?}, it is {ty}",
                b.elem.name()
            )));
        }
    }
    Ok(())
}

/// One direction: its stacked outputs `[seq, 1, batch, hidden]`, its last
/// hidden state and (LSTM) its last cell state, `[1, batch, hidden]` each.
fn direction(
    b: &mut Build,
    s: &Spec,
    ins: &Inputs,
    x: ValueId,
    d: usize,
    [seq, batch, width]: [usize; 3],
) -> Result<(ValueId, ValueId, Option<ValueId>), ImportError> {
    let (h, g) = (s.hidden, s.cell.gates());
    let p = format!("d{d}");
    let w = b.direction(&format!("{p}/w"), ins.w, d)?;
    let wt = b.op(
        &format!("{p}/w_t"),
        Op::Transpose { perm: vec![1, 0] },
        vec![w],
    )?;
    let r = b.direction(&format!("{p}/r"), ins.r, d)?;
    let rt = b.op(
        &format!("{p}/r_t"),
        Op::Transpose { perm: vec![1, 0] },
        vec![r],
    )?;
    // Biases: W's and R's, summed, except GRU's recurrent bias of the new
    // gate under linear_before_reset, which applies inside the reset.
    let (bias, rbh) = match ins.b {
        None => (None, None),
        Some(bv) => {
            let bd = b.direction(&format!("{p}/b"), bv, d)?;
            let wb = b.slice(&format!("{p}/wb"), bd, 0, 0, g * h)?;
            let rb = b.slice(&format!("{p}/rb"), bd, 0, g * h, 2 * g * h)?;
            if s.linear_before_reset {
                let rzr = b.slice(&format!("{p}/rb_zr"), rb, 0, 0, 2 * h)?;
                let zeros = b.constant(&format!("{p}/rb_h_zero"), vec![h], 0.0);
                let rb0 = b.op(
                    &format!("{p}/rb_outside"),
                    Op::Concat { axis: 0 },
                    vec![rzr, zeros],
                )?;
                let rbh = b.slice(&format!("{p}/rb_h"), rb, 0, 2 * h, 3 * h)?;
                (
                    Some(b.op(&format!("{p}/bias"), Op::Add, vec![wb, rb0])?),
                    Some(rbh),
                )
            } else {
                (
                    Some(b.op(&format!("{p}/bias"), Op::Add, vec![wb, rb])?),
                    None,
                )
            }
        }
    };
    let x2 = b.reshape(&format!("{p}/x_rows"), x, vec![seq * batch, width])?;
    let mut xp = b.op(&format!("{p}/x_proj"), Op::MatMul, vec![x2, wt])?;
    if let Some(bias) = bias {
        xp = b.op(&format!("{p}/x_proj_bias"), Op::Add, vec![xp, bias])?;
    }
    let state = |b: &mut Build, v: Option<ValueId>, name: &str| -> Result<ValueId, ImportError> {
        match v {
            Some(v) => b.direction(&format!("{p}/{name}"), v, d),
            None => Ok(b.constant(&format!("{p}/{name}_zero"), vec![batch, h], 0.0)),
        }
    };
    let mut hprev = state(b, ins.h0, "h0")?;
    let mut cprev = if s.cell == Cell::Lstm {
        Some(state(b, ins.c0, "c0")?)
    } else {
        None
    };
    let peep = match ins.p {
        Some(pv) => Some(b.direction(&format!("{p}/p"), pv, d)?),
        None => None,
    };
    let mut steps = vec![None; seq];
    for i in 0..seq {
        let t = if s.reverse[d] { seq - 1 - i } else { i };
        let q = format!("{p}/t{t}");
        let xt = b.slice(&format!("{q}/x"), xp, 0, t * batch, (t + 1) * batch)?;
        let st = Step {
            s,
            acts: &s.acts[d],
            q: &q,
            rt,
            rbh,
            peep,
        };
        let (hn, cn) = match s.cell {
            Cell::Rnn => (rnn_step(b, &st, xt, hprev)?, None),
            Cell::Gru => (gru_step(b, &st, xt, hprev)?, None),
            Cell::Lstm => {
                let c = cprev.ok_or_else(|| b.cx.shape_err("no cell state"))?;
                let (hn, cn) = lstm_step(b, &st, xt, hprev, c)?;
                (hn, Some(cn))
            }
        };
        steps[t] = Some(b.reshape(&format!("{q}/y"), hn, vec![1, 1, batch, h])?);
        hprev = hn;
        cprev = cn;
    }
    let steps: Vec<ValueId> = steps.into_iter().flatten().collect();
    let y = if steps.len() == 1 {
        steps[0]
    } else {
        b.op(&format!("{p}/y"), Op::Concat { axis: 0 }, steps)?
    };
    let hl = b.reshape(&format!("{p}/h_last"), hprev, vec![1, batch, h])?;
    let cl = match cprev {
        Some(c) => Some(b.reshape(&format!("{p}/c_last"), c, vec![1, batch, h])?),
        None => None,
    };
    Ok((y, hl, cl))
}

/// What every step of one direction uses.
struct Step<'a> {
    s: &'a Spec,
    acts: &'a [Act],
    /// The step's name prefix.
    q: &'a str,
    /// `Rᵀ`, `[hidden, gates·hidden]`.
    rt: ValueId,
    /// GRU under linear_before_reset: the new gate's recurrent bias.
    rbh: Option<ValueId>,
    /// LSTM: the peepholes `[3·hidden]` (input, output, forget).
    peep: Option<ValueId>,
}

/// `H = f(x + H·Rᵀ)`.
fn rnn_step(b: &mut Build, st: &Step, xt: ValueId, hprev: ValueId) -> Result<ValueId, ImportError> {
    let q = st.q;
    let hr = b.op(&format!("{q}/hr"), Op::MatMul, vec![hprev, st.rt])?;
    let pre = b.op(&format!("{q}/pre"), Op::Add, vec![xt, hr])?;
    let pre = b.clipped(&format!("{q}/clip"), pre, st.s.clip)?;
    b.act(&format!("{q}/h"), st.acts[0], pre)
}

/// GRU: update `z`, reset `r`, new `n`; `H = n + z ⊙ (H₋₁ - n)`.
fn gru_step(b: &mut Build, st: &Step, xt: ValueId, hprev: ValueId) -> Result<ValueId, ImportError> {
    let (q, h) = (st.q, st.s.hidden);
    let rzr = b.slice(&format!("{q}/r_zr"), st.rt, 1, 0, 2 * h)?;
    let rh = b.slice(&format!("{q}/r_h"), st.rt, 1, 2 * h, 3 * h)?;
    let xzr = b.slice(&format!("{q}/x_zr"), xt, 1, 0, 2 * h)?;
    let xh = b.slice(&format!("{q}/x_h"), xt, 1, 2 * h, 3 * h)?;
    let hzr = b.op(&format!("{q}/h_zr"), Op::MatMul, vec![hprev, rzr])?;
    let zr = b.op(&format!("{q}/zr_pre"), Op::Add, vec![xzr, hzr])?;
    let zr = b.clipped(&format!("{q}/zr_clip"), zr, st.s.clip)?;
    let zr = b.act(&format!("{q}/zr"), st.acts[0], zr)?;
    let z = b.slice(&format!("{q}/z"), zr, 1, 0, h)?;
    let r = b.slice(&format!("{q}/r"), zr, 1, h, 2 * h)?;
    let inner = if st.s.linear_before_reset {
        let mut hh = b.op(&format!("{q}/h_h"), Op::MatMul, vec![hprev, rh])?;
        if let Some(rbh) = st.rbh {
            hh = b.op(&format!("{q}/h_h_bias"), Op::Add, vec![hh, rbh])?;
        }
        b.op(&format!("{q}/reset"), Op::Mul, vec![r, hh])?
    } else {
        let reset = b.op(&format!("{q}/reset"), Op::Mul, vec![r, hprev])?;
        b.op(&format!("{q}/h_h"), Op::MatMul, vec![reset, rh])?
    };
    let pre = b.op(&format!("{q}/n_pre"), Op::Add, vec![xh, inner])?;
    let pre = b.clipped(&format!("{q}/n_clip"), pre, st.s.clip)?;
    let n = b.act(&format!("{q}/n"), st.acts[1], pre)?;
    let diff = b.op(&format!("{q}/h_minus_n"), Op::Sub, vec![hprev, n])?;
    let kept = b.op(&format!("{q}/kept"), Op::Mul, vec![z, diff])?;
    b.op(&format!("{q}/h"), Op::Add, vec![n, kept])
}

/// LSTM: gates input `i`, output `o`, forget `f`, cell `c` (ONNX's order);
/// `C = f ⊙ C₋₁ + i ⊙ g(c)`, `H = o ⊙ h(C)`, with peepholes where given.
fn lstm_step(
    b: &mut Build,
    st: &Step,
    xt: ValueId,
    hprev: ValueId,
    cprev: ValueId,
) -> Result<(ValueId, ValueId), ImportError> {
    let (q, h) = (st.q, st.s.hidden);
    let hr = b.op(&format!("{q}/hr"), Op::MatMul, vec![hprev, st.rt])?;
    let pre = b.op(&format!("{q}/pre"), Op::Add, vec![xt, hr])?;
    let gate = |b: &mut Build, k: usize, name: &str| {
        b.slice(&format!("{q}/{name}_pre"), pre, 1, k * h, (k + 1) * h)
    };
    let peep = |b: &mut Build,
                k: usize,
                x: ValueId,
                c: ValueId,
                name: &str|
     -> Result<ValueId, ImportError> {
        let Some(p) = st.peep else { return Ok(x) };
        let pk = b.slice(&format!("{q}/p_{name}"), p, 0, k * h, (k + 1) * h)?;
        let pc = b.op(&format!("{q}/p_{name}_c"), Op::Mul, vec![pk, c])?;
        b.op(&format!("{q}/{name}_peep"), Op::Add, vec![x, pc])
    };
    let (f_act, g_act, h_act) = (st.acts[0], st.acts[1], st.acts[2]);
    let i = gate(b, 0, "i")?;
    let i = peep(b, 0, i, cprev, "i")?;
    let i = b.clipped(&format!("{q}/i_clip"), i, st.s.clip)?;
    let i = b.act(&format!("{q}/i"), f_act, i)?;
    let f = if st.s.input_forget {
        let one = b.constant(&format!("{q}/one"), vec![], 1.0);
        b.op(&format!("{q}/f"), Op::Sub, vec![one, i])?
    } else {
        let f = gate(b, 2, "f")?;
        let f = peep(b, 2, f, cprev, "f")?;
        let f = b.clipped(&format!("{q}/f_clip"), f, st.s.clip)?;
        b.act(&format!("{q}/f"), f_act, f)?
    };
    let c = gate(b, 3, "c")?;
    let c = b.clipped(&format!("{q}/c_clip"), c, st.s.clip)?;
    let c = b.act(&format!("{q}/c"), g_act, c)?;
    let fc = b.op(&format!("{q}/f_c"), Op::Mul, vec![f, cprev])?;
    let ic = b.op(&format!("{q}/i_c"), Op::Mul, vec![i, c])?;
    let cn = b.op(&format!("{q}/cell"), Op::Add, vec![fc, ic])?;
    let o = gate(b, 1, "o")?;
    let o = peep(b, 1, o, cn, "o")?;
    let o = b.clipped(&format!("{q}/o_clip"), o, st.s.clip)?;
    let o = b.act(&format!("{q}/o"), f_act, o)?;
    let hc = b.act(&format!("{q}/h_cell"), h_act, cn)?;
    let hn = b.op(&format!("{q}/h"), Op::Mul, vec![o, hc])?;
    Ok((hn, cn))
}

/// `Y` (`[seq, dirs, batch, hidden]`, or `[batch, seq, dirs, hidden]`
/// batch-major), `Y_h` and `Y_c` (`[dirs, batch, hidden]`, or
/// `[batch, dirs, hidden]`).
fn outputs(
    b: &mut Build,
    s: &Spec,
    ys: Vec<ValueId>,
    hs: Vec<ValueId>,
    cs: Vec<ValueId>,
) -> Result<Lowered, ImportError> {
    let wanted = |i: usize| b.cx.proto.output.get(i).is_some_and(|n| !n.is_empty());
    let (want_y, want_h, want_c) = (wanted(0), wanted(1), wanted(2));
    let join = |b: &mut Build,
                vs: Vec<ValueId>,
                axis: usize,
                name: &str|
     -> Result<ValueId, ImportError> {
        if vs.len() == 1 {
            Ok(vs[0])
        } else {
            b.op(name, Op::Concat { axis }, vs)
        }
    };
    let mut out = Vec::new();
    out.push(if want_y {
        let y = join(b, ys, 1, "y_dirs")?;
        Some(if s.batch_major {
            b.op(
                "y",
                Op::Transpose {
                    perm: vec![2, 0, 1, 3],
                },
                vec![y],
            )?
        } else {
            y
        })
    } else {
        None
    });
    for (want, vs, name) in [(want_h, hs, "y_h"), (want_c, cs, "y_c")] {
        if !want || vs.is_empty() {
            out.push(None);
            continue;
        }
        let v = join(b, vs, 0, &format!("{name}_dirs"))?;
        out.push(Some(if s.batch_major {
            b.op(
                name,
                Op::Transpose {
                    perm: vec![1, 0, 2],
                },
                vec![v],
            )?
        } else {
            v
        }));
    }
    out.truncate(s.cell.outputs());
    Ok(Lowered::Many(out))
}
