//! Algebraic instruction selection: an element-wise expression that uses an
//! operation the machine has no instruction for is rewritten into the
//! cheapest equivalent expression of operations it has.
//!
//! **What is rewritten.** Each maximal tree of element-wise nodes (inner
//! values read once, by the tree, and not graph outputs; all of one float
//! type) that holds a node the machine lacks. Trees the machine computes
//! as they are stay untouched, so a machine with every operation gets the
//! graph it was given.
//!
//! **How.** The tree goes into an e-graph ([`egg`]), the identities of
//! `select.rules` (rules as data: `sqrt(x) = 1/rsqrt(x)`, `sigmoid(x) =
//! 1/(1+e^-x)`, `tanh` from `exp`, `exp` by squaring a polynomial, `log`
//! from square roots, `erf` by Abramowitz and Stegun 7.1.26, ...) are
//! applied to saturation (within fixed iteration and node limits, so the
//! result never depends on the clock), and the cheapest term is extracted
//! under the machine's own costs ([`Costs`]: each operation's occupancy,
//! from the description; one it has no instruction for costs infinity).
//! Shared subterms are emitted once. Where no term avoids every missing
//! operation the tree is left as it is and the lowering refuses it, naming
//! the operation. Constant subterms are folded.
//!
//! **Exactness.** `exact` rules are identities of real arithmetic; their
//! results differ by rounding. `approx` rules (polynomials, range-limited
//! tricks) have the error bounds their `check` lines state, which the
//! tests hold them to on the reference interpreter; `strict` leaves them
//! out, so an operation only an approximation reaches stays refused.

use crate::interp;
use crate::ir::{Graph, Node, Op, Tensor, TensorType, Unary, ValueId};
use egg::{
    Analysis, CostFunction, DidMerge, EGraph, Extractor, Id, Language, Pattern, RecExpr, Rewrite,
    Runner, SimpleScheduler, Symbol, define_language,
};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// The rules, as data.
pub const RULES: &str = include_str!("select.rules");

/// A real constant of an expression (an `f64`, by its bits, so it can be
/// hashed and ordered).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Real(u64);

impl Real {
    /// The value.
    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }

    fn of(x: f64) -> Real {
        // One zero: -0 and 0 are the same constant to every rule.
        Real(if x == 0.0 { 0 } else { x.to_bits() })
    }
}

impl FromStr for Real {
    type Err = std::num::ParseFloatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<f64>().map(Real::of)
    }
}

impl fmt::Display for Real {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.get())
    }
}

define_language! {
    /// Element-wise expressions: the operations a machine may have an
    /// instruction for, constants, inputs, and helpers (names no machine
    /// has, defined by `def` rules).
    pub enum Alg {
        Num(Real),
        "+" = Add([Id; 2]),
        "-" = Sub([Id; 2]),
        "*" = Mul([Id; 2]),
        "/" = Div([Id; 2]),
        "max" = Max([Id; 2]),
        "min" = Min([Id; 2]),
        "neg" = Neg([Id; 1]),
        "relu" = Relu([Id; 1]),
        "recip" = Recip([Id; 1]),
        "sqrt" = Sqrt([Id; 1]),
        "rsqrt" = Rsqrt([Id; 1]),
        "exp" = Exp([Id; 1]),
        "log" = Log([Id; 1]),
        "tanh" = Tanh([Id; 1]),
        "erf" = Erf([Id; 1]),
        "abs" = Abs([Id; 1]),
        "sigmoid" = Sigmoid([Id; 1]),
        "round" = Round([Id; 1]),
        "lt" = Lt([Id; 2]),
        "le" = Le([Id; 2]),
        Var(Symbol),
        Helper(Symbol, Vec<Id>),
    }
}

impl Alg {
    /// The graph op of an operation (not of a constant, input or helper).
    pub fn op(&self) -> Option<Op> {
        Some(match self {
            Alg::Add(_) => Op::Add,
            Alg::Sub(_) => Op::Sub,
            Alg::Mul(_) => Op::Mul,
            Alg::Div(_) => Op::Div,
            Alg::Max(_) => Op::Max,
            Alg::Min(_) => Op::Min,
            Alg::Relu(_) => Op::Relu,
            Alg::Neg(_) => Op::Unary(Unary::Neg),
            Alg::Recip(_) => Op::Unary(Unary::Reciprocal),
            Alg::Sqrt(_) => Op::Unary(Unary::Sqrt),
            Alg::Rsqrt(_) => Op::Unary(Unary::Rsqrt),
            Alg::Exp(_) => Op::Unary(Unary::Exp),
            Alg::Log(_) => Op::Unary(Unary::Log),
            Alg::Tanh(_) => Op::Unary(Unary::Tanh),
            Alg::Erf(_) => Op::Unary(Unary::Erf),
            Alg::Abs(_) => Op::Unary(Unary::Abs),
            Alg::Sigmoid(_) => Op::Unary(Unary::Sigmoid),
            Alg::Round(_) => Op::Unary(Unary::Round),
            Alg::Lt(_) => Op::Less,
            Alg::Le(_) => Op::LessOrEqual,
            Alg::Num(_) | Alg::Var(_) | Alg::Helper(..) => return None,
        })
    }

    /// The expression node of a graph op applied to `args`, if it is an
    /// element-wise op of the language.
    fn of(op: &Op, args: &[Id]) -> Option<Alg> {
        let two = || -> Option<[Id; 2]> { args.try_into().ok() };
        let one = || -> Option<[Id; 1]> { args.try_into().ok() };
        Some(match op {
            Op::Add => Alg::Add(two()?),
            Op::Sub => Alg::Sub(two()?),
            Op::Mul => Alg::Mul(two()?),
            Op::Div => Alg::Div(two()?),
            Op::Max => Alg::Max(two()?),
            Op::Min => Alg::Min(two()?),
            Op::Less => Alg::Lt(two()?),
            Op::LessOrEqual => Alg::Le(two()?),
            Op::Relu => Alg::Relu(one()?),
            Op::Unary(u) => {
                let a = one()?;
                match u {
                    Unary::Neg => Alg::Neg(a),
                    Unary::Reciprocal => Alg::Recip(a),
                    Unary::Sqrt => Alg::Sqrt(a),
                    Unary::Rsqrt => Alg::Rsqrt(a),
                    Unary::Exp => Alg::Exp(a),
                    Unary::Log => Alg::Log(a),
                    Unary::Tanh => Alg::Tanh(a),
                    Unary::Erf => Alg::Erf(a),
                    Unary::Abs => Alg::Abs(a),
                    Unary::Sigmoid => Alg::Sigmoid(a),
                    Unary::Round => Alg::Round(a),
                }
            }
            _ => return None,
        })
    }
}

/// Folds constant subterms: a class whose value is known gets that
/// constant as a member.
#[derive(Default)]
struct Fold;

impl Analysis<Alg> for Fold {
    type Data = Option<Real>;

    fn make(egraph: &mut EGraph<Alg, Self>, enode: &Alg, _id: Id) -> Self::Data {
        if let Alg::Num(r) = enode {
            return Some(*r);
        }
        let op = enode.op()?;
        let args: Option<Vec<Tensor>> = enode
            .children()
            .iter()
            .map(|c| egraph[*c].data.map(|r| scalar(r.get())))
            .collect();
        let args = args?;
        let refs: Vec<&Tensor> = args.iter().collect();
        let got = interp::eval_node(&op, &refs).ok()?;
        let x = *got.first()?.data.first()?;
        x.is_finite().then(|| Real::of(x))
    }

    fn merge(&mut self, a: &mut Self::Data, b: Self::Data) -> DidMerge {
        egg::merge_option(a, b, |_, _| DidMerge(false, false))
    }

    fn modify(egraph: &mut EGraph<Alg, Self>, id: Id) {
        if let Some(r) = egraph[id].data {
            let c = egraph.add(Alg::Num(r));
            egraph.union(id, c);
        }
    }
}

/// An f32 scalar tensor.
fn scalar(x: f64) -> Tensor {
    let ty = TensorType {
        elem: crate::ir::ElemType::F32,
        shape: vec![],
    };
    Tensor::new(ty, vec![crate::ir::ElemType::F32.round(x)])
}

/// What a rule may do to a program's results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An identity of real arithmetic (rounding differs).
    Exact,
    /// A truncated series or a range-limited identity.
    Approx,
    /// A helper's definition.
    Def,
}

/// The bound the numerical test holds a rule to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Check {
    /// Relative error.
    pub rel: f64,
    /// Absolute error.
    pub abs: f64,
    /// Lowest point of the domain.
    pub lo: f64,
    /// Highest point.
    pub hi: f64,
}

/// One rule of `select.rules`.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// The left side.
    pub lhs: Pattern<Alg>,
    /// The right side.
    pub rhs: Pattern<Alg>,
    /// Its bound (not for `def`).
    pub check: Option<Check>,
}

/// The rules of `text` (the syntax of `select.rules`), or the first line
/// that does not parse.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, String> {
    let mut rules: Vec<Rule> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = |m: String| format!("select.rules:{}: {m}", i + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        if first == "check" {
            let rule = rules
                .last_mut()
                .ok_or_else(|| at("a check before any rule".to_owned()))?;
            let w: Vec<&str> = words.collect();
            let num = |k: usize| -> Result<f64, String> {
                w.get(k)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| at(format!("a number expected at word {}", k + 2)))
            };
            if w.len() != 7 || w[0] != "rel" || w[2] != "abs" || w[4] != "over" {
                return Err(at("expected `check rel R abs A over LO HI`".to_owned()));
            }
            rule.check = Some(Check {
                rel: num(1)?,
                abs: num(3)?,
                lo: num(5)?,
                hi: num(6)?,
            });
            continue;
        }
        let kind = match first {
            "exact" => Kind::Exact,
            "approx" => Kind::Approx,
            "def" => Kind::Def,
            k => {
                return Err(at(format!(
                    "unknown kind `{k}` (exact, approx, def, check)"
                )));
            }
        };
        let name = words
            .next()
            .ok_or_else(|| at("a rule needs a name".to_owned()))?
            .to_owned();
        let rest: Vec<&str> = words.collect();
        let rest = rest.join(" ");
        let (lhs, rhs) = rest
            .split_once("=>")
            .ok_or_else(|| at(format!("rule `{name}` needs `LHS => RHS`")))?;
        let pat = |s: &str| {
            s.trim()
                .parse::<Pattern<Alg>>()
                .map_err(|e| at(format!("rule `{name}`: {e}")))
        };
        let (lhs, rhs) = (pat(lhs)?, pat(rhs)?);
        rules.push(Rule {
            name,
            kind,
            lhs,
            rhs,
            check: None,
        });
    }
    for r in &rules {
        if r.kind != Kind::Def && r.check.is_none() {
            return Err(format!(
                "select.rules: rule `{}` has no `check` line",
                r.name
            ));
        }
    }
    Ok(rules)
}

/// The rules shipped, parsed (the file is checked by the tests).
pub fn rules() -> Vec<Rule> {
    parse_rules(RULES).unwrap_or_default()
}

/// What each operation costs on the machine: its name in the language
/// (`+`, `exp`, ...) to the cycles its cheapest instruction occupies its
/// unit. An operation not listed has no instruction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Costs {
    /// Cost by operation name.
    pub ops: HashMap<&'static str, f64>,
}

impl Costs {
    /// Every operation of the language at cost 1.
    pub fn all() -> Costs {
        Costs {
            ops: OPS.iter().map(|&o| (o, 1.0)).collect(),
        }
    }

    fn of(&self, node: &Alg) -> f64 {
        match node {
            Alg::Num(_) | Alg::Var(_) => 0.0,
            Alg::Helper(..) => f64::INFINITY,
            n => self
                .ops
                .get(n.to_string().as_str())
                .copied()
                .unwrap_or(f64::INFINITY),
        }
    }

    /// Whether the machine has graph op `op` (ops outside the language
    /// count as had: they are not this pass's to replace).
    fn has(&self, op: &Op) -> bool {
        node_of(op).is_none_or(|n| self.of(&n).is_finite())
    }
}

/// The language's node for graph op `op` (children all class 0), if it is
/// an operation of the language.
fn node_of(op: &Op) -> Option<Alg> {
    let ids = [Id::from(0usize); 2];
    Alg::of(op, &ids[..1]).or_else(|| Alg::of(op, &ids))
}

/// Whether graph op `op` is an operation of the language.
fn element_wise(op: &Op) -> bool {
    node_of(op).is_some()
}

/// The operation names of the language.
pub const OPS: [&str; 20] = [
    "+", "-", "*", "/", "max", "min", "neg", "relu", "recip", "sqrt", "rsqrt", "exp", "log",
    "tanh", "erf", "abs", "sigmoid", "round", "lt", "le",
];

/// Each operation of the language with the graph op it is (`("exp",
/// Exp)`, ...): what a machine's costs are found for.
pub fn operations() -> Vec<(&'static str, Op)> {
    use egg::FromOp;
    OPS.iter()
        .filter_map(|&name| {
            // (A name with the wrong number of children parses as a helper.)
            let op = (1..=2).find_map(|n| {
                let node = Alg::from_op(name, vec![Id::from(0usize); n]).ok()?;
                node.op()
            })?;
            Some((name, op))
        })
        .collect()
}

/// Tree cost under [`Costs`], a shared child counted once per node. An
/// operation the expression did not have costs [`NOVELTY`] more, so among
/// terms of equal cost the one written stays.
struct MachineCost<'a> {
    costs: &'a Costs,
    egraph: &'a EGraph<Alg, Fold>,
    /// The original expression's nodes, their children as classes.
    original: std::collections::HashSet<Alg>,
}

/// What a node the expression did not have adds to a term's cost.
const NOVELTY: f64 = 1e-3;

impl CostFunction<Alg> for MachineCost<'_> {
    type Cost = f64;
    fn cost<C: FnMut(Id) -> f64>(&mut self, enode: &Alg, mut costs: C) -> f64 {
        let mut kids: Vec<Id> = enode.children().to_vec();
        kids.sort_unstable();
        kids.dedup();
        let canonical = enode.clone().map_children(|c| self.egraph.find(c));
        let novelty = if self.original.contains(&canonical) {
            0.0
        } else {
            NOVELTY
        };
        self.costs.of(enode) + novelty + kids.into_iter().map(&mut costs).sum::<f64>()
    }
}

impl<'a> MachineCost<'a> {
    /// Costs of terms of `egraph`, made from `expr` whose nodes are in `classes`.
    fn new(
        costs: &'a Costs,
        egraph: &'a EGraph<Alg, Fold>,
        expr: &RecExpr<Alg>,
        classes: &[Id],
    ) -> Self {
        let original = expr
            .as_ref()
            .iter()
            .map(|n| n.clone().map_children(|c| classes[usize::from(c)]))
            .collect();
        MachineCost {
            costs,
            egraph,
            original,
        }
    }
}

/// The rewrites of `rules` (approximations only where `approximate`).
fn rewrites(rules: &[Rule], approximate: bool) -> Vec<Rewrite<Alg, Fold>> {
    rules
        .iter()
        .filter(|r| approximate || r.kind != Kind::Approx)
        .filter_map(|r| Rewrite::new(r.name.clone(), r.lhs.clone(), r.rhs.clone()).ok())
        .collect()
}

/// Saturation limits: fixed counts, never the clock.
const ITERATIONS: usize = 24;
const NODES: usize = 20_000;

/// The e-graph of `expr` after the rewrites, and the class of each of its
/// nodes (the last is the root's).
fn saturate(expr: &RecExpr<Alg>, rewrites: &[Rewrite<Alg, Fold>]) -> (EGraph<Alg, Fold>, Vec<Id>) {
    let mut egraph = EGraph::new(Fold);
    let mut classes: Vec<Id> = Vec::new();
    for node in expr.as_ref() {
        let n = node.clone().map_children(|c| classes[usize::from(c)]);
        classes.push(egraph.add(n));
    }
    let runner = Runner::default()
        .with_scheduler(SimpleScheduler)
        .with_iter_limit(ITERATIONS)
        .with_node_limit(NODES)
        .with_time_limit(std::time::Duration::from_secs(3600))
        .with_egraph(egraph)
        .run(rewrites);
    let egraph = runner.egraph;
    let classes = classes.into_iter().map(|c| egraph.find(c)).collect();
    (egraph, classes)
}

/// The graph with every element-wise tree the machine cannot compute as it
/// is rewritten into one it can, where the rules reach one (see the module
/// doc). Approximations are used only where `approximate`.
pub fn select(g: &Graph, costs: &Costs, approximate: bool) -> Graph {
    if g.nodes.iter().all(|n| costs.has(&n.op)) {
        return g.clone();
    }
    let rewrites = rewrites(&rules(), approximate);
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    let mut reads: HashMap<ValueId, usize> = HashMap::new();
    let mut first_reader: HashMap<ValueId, usize> = HashMap::new();
    for (k, n) in g.nodes.iter().enumerate() {
        for &o in &n.outputs {
            producer.insert(o, k);
        }
        for &i in &n.inputs {
            *reads.entry(i).or_default() += 1;
            first_reader.entry(i).or_insert(k);
        }
    }
    let elem = |v: ValueId| g.ty(v).elem;
    let in_language = |k: usize| element_wise(&g.nodes[k].op);
    // An inner node of a tree: element-wise, read once by an element-wise
    // node of the same float type, not an output.
    let inner = |k: usize| {
        let o = g.nodes[k].outputs[0];
        in_language(k) && reads.get(&o) == Some(&1) && !g.outputs.contains(&o) && elem(o).is_float()
    };
    let reader = |v: ValueId| first_reader.get(&v).copied();
    let mut replaced: HashMap<usize, Vec<Node>> = HashMap::new();
    let mut dropped: Vec<bool> = vec![false; g.nodes.len()];
    let mut scratch = g.clone();
    let mut done: Vec<bool> = vec![false; g.nodes.len()];
    let mut saturated: HashMap<String, (EGraph<Alg, Fold>, Vec<Id>)> = HashMap::new();
    for k in 0..g.nodes.len() {
        if done[k] || costs.has(&g.nodes[k].op) || !elem(g.nodes[k].outputs[0]).is_float() {
            continue;
        }
        // Up to the tree's root.
        let mut root = k;
        while inner(root) {
            match reader(g.nodes[root].outputs[0]) {
                Some(r)
                    if in_language(r)
                        && elem(g.nodes[r].outputs[0]) == elem(g.nodes[k].outputs[0]) =>
                {
                    root = r;
                }
                _ => break,
            }
        }
        let mut tree = Tree::default();
        tree.build(g, root, &producer, &inner);
        for &(m, _) in &tree.members {
            done[m] = true;
        }
        // Trees of one shape (an LSTM's gates, step after step) saturate once.
        let (egraph, classes) = saturated
            .entry(tree.expr.to_string())
            .or_insert_with(|| saturate(&tree.expr, &rewrites));
        let (egraph, classes) = (&*egraph, &*classes);
        let class = *classes.last().expect("a tree has a root");
        let extractor =
            Extractor::new(egraph, MachineCost::new(costs, egraph, &tree.expr, classes));
        if !extractor.find_best_cost(class).is_finite() {
            continue;
        }
        let before = scratch.nodes.len();
        let mut emit = Emit {
            extractor: &extractor,
            originals: tree
                .members
                .iter()
                .map(|&(m, _)| (Emit::key(&g.nodes[m].op, &g.nodes[m].inputs), m))
                .collect(),
            // The first member of each class lends a new node its name and value.
            named: tree
                .members
                .iter()
                .rev()
                .map(|&(m, e)| (classes[usize::from(e)], m))
                .collect(),
            constants: &tree.constants,
            graph: g,
            leaves: &tree.leaves,
            made: HashMap::new(),
            name: g.nodes[root].name.clone(),
            count: 0,
        };
        let Ok(v) = emit.value(&mut scratch, class) else {
            scratch.nodes.truncate(before);
            continue;
        };
        let out = g.nodes[root].outputs[0];
        if scratch.ty(v) != g.ty(out) {
            scratch.nodes.truncate(before);
            continue;
        }
        let mut nodes: Vec<Node> = scratch.nodes.drain(before..).collect();
        match nodes.last_mut() {
            Some(last) if last.outputs == [v] => {
                last.name = g.nodes[root].name.clone();
                last.outputs = vec![out];
            }
            _ => nodes.push(Node {
                name: g.nodes[root].name.clone(),
                op: Op::Identity,
                inputs: vec![v],
                outputs: vec![out],
            }),
        }
        for &(m, _) in &tree.members {
            dropped[m] = true;
        }
        replaced.insert(root, nodes);
    }
    let mut out = Graph {
        values: scratch.values,
        nodes: Vec::with_capacity(g.nodes.len()),
        inputs: g.inputs.clone(),
        outputs: g.outputs.clone(),
        constants: scratch.constants,
    };
    for (k, n) in g.nodes.iter().enumerate() {
        if let Some(new) = replaced.remove(&k) {
            out.nodes.extend(new);
        } else if !dropped[k] {
            out.nodes.push(n.clone());
        }
    }
    out
}

/// An element-wise tree of the graph as an expression.
#[derive(Default)]
struct Tree {
    expr: RecExpr<Alg>,
    /// The graph's nodes it covers, each with its node of `expr`.
    members: Vec<(usize, Id)>,
    /// Its inputs, by the variable naming them.
    leaves: HashMap<Symbol, ValueId>,
    /// Its uniform constants, by value (the first of each).
    constants: HashMap<Real, ValueId>,
}

impl Tree {
    /// Adds the tree of node `k` (its inner operands expanded), returning its id.
    fn build(
        &mut self,
        g: &Graph,
        k: usize,
        producer: &HashMap<ValueId, usize>,
        inner: &dyn Fn(usize) -> bool,
    ) -> Id {
        let n = &g.nodes[k];
        let args: Vec<Id> = n
            .inputs
            .iter()
            .map(|&v| match producer.get(&v) {
                Some(&p) if inner(p) => self.build(g, p, producer, inner),
                _ => self.leaf(g, v),
            })
            .collect();
        let node = Alg::of(&n.op, &args).unwrap_or_else(|| Alg::Var(Symbol::from("?")));
        let id = self.expr.add(node);
        self.members.push((k, id));
        id
    }

    fn leaf(&mut self, g: &Graph, v: ValueId) -> Id {
        if let Some(t) = g.constants.get(&v)
            && let Some(&k) = t.data.first()
            && t.data.iter().all(|x| x.to_bits() == k.to_bits())
            && t.ty.shape.iter().all(|&d| d == 1)
        {
            self.constants.entry(Real::of(k)).or_insert(v);
            return self.expr.add(Alg::Num(Real::of(k)));
        }
        // Inputs named by order of first use, so trees of one shape are one
        // expression (saturated once, `select`).
        let s = match self.leaves.iter().find(|(_, x)| **x == v) {
            Some((s, _)) => *s,
            None => {
                let s = Symbol::from(format!("x{}", self.leaves.len()));
                self.leaves.insert(s, v);
                s
            }
        };
        self.expr.add(Alg::Var(s))
    }
}

/// Writes the extracted term as graph nodes, each class once.
struct Emit<'a, 'c> {
    extractor: &'a Extractor<'a, MachineCost<'c>, Alg, Fold>,
    /// The tree's nodes by what they compute: one the term keeps is
    /// emitted as it was (its name and value kept).
    originals: HashMap<String, usize>,
    /// Classes holding a node of the tree, to the first such node.
    named: HashMap<Id, usize>,
    /// The tree's constants, reused where the term keeps them.
    constants: &'a HashMap<Real, ValueId>,
    graph: &'a Graph,
    leaves: &'a HashMap<Symbol, ValueId>,
    made: HashMap<Id, ValueId>,
    name: String,
    count: usize,
}

impl Emit<'_, '_> {
    fn key(op: &Op, args: &[ValueId]) -> String {
        format!("{op:?}{args:?}")
    }

    fn value(&mut self, g: &mut Graph, class: Id) -> Result<ValueId, String> {
        if let Some(&v) = self.made.get(&class) {
            return Ok(v);
        }
        let node = self.extractor.find_best_node(class).clone();
        let v = match &node {
            Alg::Num(r) => match self.constants.get(r) {
                Some(&v) => v,
                None => {
                    let name = self.fresh("k");
                    g.add_constant(name, scalar(r.get()))
                }
            },
            Alg::Var(s) => *self
                .leaves
                .get(s)
                .ok_or_else(|| format!("no input `{s}`"))?,
            Alg::Helper(h, _) => return Err(format!("helper `{h}` left unexpanded")),
            n => {
                let op = n.op().ok_or("not an operation")?;
                let mut args = Vec::new();
                for &c in n.children() {
                    args.push(self.value(g, c)?);
                }
                if let Some(&k) = self.originals.get(&Self::key(&op, &args)) {
                    let n = self.graph.nodes[k].clone();
                    let v = n.outputs[0];
                    g.nodes.push(n);
                    self.made.insert(class, v);
                    return Ok(v);
                }
                // A new node computing what a node of the tree did takes its
                // name and value (where the type is the same).
                let lender = self.named.remove(&class).map(|m| &self.graph.nodes[m]);
                let name = match lender {
                    Some(m) => m.name.clone(),
                    None => self.fresh(&op.name().to_lowercase()),
                };
                let known: Option<Vec<&Tensor>> = args.iter().map(|a| g.constants.get(a)).collect();
                match known {
                    // Constant operands (a tensor's reciprocal): folded.
                    Some(ts) => {
                        let t = interp::eval_node(&op, &ts)
                            .map_err(|e| e.to_string())?
                            .swap_remove(0);
                        g.add_constant(name, t)
                    }
                    None => {
                        let v = g.add_node(name, op, args)?[0];
                        match lender {
                            Some(m) if g.ty(v) == self.graph.ty(m.outputs[0]) => {
                                let last = g.nodes.len() - 1;
                                g.nodes[last].outputs = m.outputs.clone();
                                m.outputs[0]
                            }
                            _ => v,
                        }
                    }
                }
            }
        };
        self.made.insert(class, v);
        Ok(v)
    }

    /// A new node's name: the root's, then what it is and a number.
    fn fresh(&mut self, what: &str) -> String {
        self.count += 1;
        format!("{}/{what}{}", self.name, self.count - 1)
    }
}

#[cfg(test)]
mod tests;
