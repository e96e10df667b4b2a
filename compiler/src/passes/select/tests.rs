use super::*;
use crate::ir::{ElemType, TensorType};
use egg::ENodeOrVar;

/// A pattern as an expression, `?a` as input `a`.
fn expr_of(p: &Pattern<Alg>) -> RecExpr<Alg> {
    let mut out = RecExpr::default();
    for n in p.ast.as_ref() {
        out.add(match n {
            ENodeOrVar::ENode(n) => n.clone(),
            ENodeOrVar::Var(v) => Alg::Var(Symbol::from(v.to_string().trim_start_matches('?'))),
        });
    }
    out
}

/// `expr` with its helpers expanded by the `def` rules.
fn expand(expr: &RecExpr<Alg>) -> RecExpr<Alg> {
    let defs: Vec<Rule> = rules()
        .into_iter()
        .filter(|r| r.kind == Kind::Def)
        .collect();
    let (egraph, classes) = saturate(expr, &rewrites(&defs, false));
    let root = *classes.last().expect("root");
    let costs = Costs::all();
    let ex = Extractor::new(&egraph, MachineCost::new(&costs, &egraph, expr, &classes));
    assert!(
        ex.find_best_cost(root).is_finite(),
        "helpers of {expr} expand"
    );
    ex.find_best(root).1
}

fn input(g: &mut Graph, name: &str, ty: TensorType) -> ValueId {
    let v = g.add_value(name, ty);
    g.inputs.push(v);
    v
}

/// `expr` as a graph of inputs `a` (and `b`) of `n` elements.
fn graph_of(expr: &RecExpr<Alg>, n: usize, vars: &[&str]) -> Graph {
    let mut g = Graph::default();
    let ty = TensorType {
        elem: ElemType::F32,
        shape: vec![n],
    };
    let inputs: HashMap<Symbol, ValueId> = vars
        .iter()
        .map(|v| (Symbol::from(*v), input(&mut g, v, ty.clone())))
        .collect();
    let mut ids: Vec<ValueId> = Vec::new();
    for (k, node) in expr.as_ref().iter().enumerate() {
        let v = match node {
            Alg::Num(r) => g.add_constant(format!("k{k}"), scalar(r.get())),
            Alg::Var(s) => inputs[s],
            n => {
                let op = n.op().expect("no helpers left");
                let args = n.children().iter().map(|c| ids[usize::from(*c)]).collect();
                g.add_node(format!("n{k}"), op, args).expect("typed")[0]
            }
        };
        ids.push(v);
    }
    let out = *ids.last().expect("not empty");
    g.outputs.push(out);
    g
}

/// Points spread over `[lo, hi]`: evenly, evenly near 0 (halves
/// included), and evenly in the logarithm where the domain spans decades.
fn points(lo: f64, hi: f64) -> Vec<f64> {
    let mut v: Vec<f64> = (0..=2000)
        .map(|i| lo + (hi - lo) * f64::from(i) / 2000.0)
        .collect();
    if lo <= 0.0 && hi >= 0.0 {
        v.extend((0..=160).map(|i| (-10.0 + f64::from(i) * 0.125).clamp(lo, hi)));
    }
    if lo >= 0.0 && hi / lo.max(1e-38) > 1e3 {
        let (a, b) = (lo.max(1e-30).ln(), hi.ln());
        v.extend((0..=2000).map(|i| (a + (b - a) * f64::from(i) / 2000.0).exp()));
    }
    v.into_iter().map(|x| ElemType::F32.round(x)).collect()
}

/// The largest error of `got` against `want` beyond the bound, if any.
fn worst(want: &[f64], got: &[f64], at: &[Vec<f64>], c: Check) -> Option<String> {
    let mut bad = None;
    let mut most = 0.0f64;
    for (i, (&w, &r)) in want.iter().zip(got).enumerate() {
        if (w.is_nan() && r.is_nan()) || w == r {
            continue;
        }
        let err = (r - w).abs();
        let over = err - (c.abs + c.rel * w.abs());
        if over.is_nan() || (over > 0.0 && over > most) {
            most = over;
            let x: Vec<f64> = at.iter().map(|a| a[i]).collect();
            bad = Some(format!("at {x:?}: lhs {w}, rhs {r}"));
        }
    }
    bad
}

#[test]
fn the_rules_parse_and_every_identity_has_its_bound() {
    let rules = parse_rules(RULES).expect("select.rules parses");
    assert!(rules.len() >= 20);
    for r in &rules {
        assert_eq!(r.check.is_some(), r.kind != Kind::Def, "{}", r.name);
    }
    let err = parse_rules("exact broken (exp ?a) =>").expect_err("no right side");
    assert!(err.contains("select.rules:1"), "{err}");
    let err = parse_rules("exact x (exp ?a) => (exp ?a)").expect_err("no check");
    assert!(err.contains("no `check`"), "{err}");
}

#[test]
fn every_rule_holds_its_bound_on_the_interpreter() {
    for r in rules() {
        let Some(c) = r.check else { continue };
        let lhs = expr_of(&r.lhs);
        let rhs = expand(&expr_of(&r.rhs));
        let vars: Vec<&str> = if r.lhs.vars().len() == 2 {
            vec!["a", "b"]
        } else {
            vec!["a"]
        };
        // One input: the points; two: a grid of fewer points each.
        let at: Vec<Vec<f64>> = if vars.len() == 1 {
            vec![points(c.lo, c.hi)]
        } else {
            let p: Vec<f64> = points(c.lo, c.hi).into_iter().step_by(40).collect();
            let a = p.iter().flat_map(|&x| p.iter().map(move |_| x)).collect();
            let b = p.iter().flat_map(|_| p.iter().copied()).collect();
            vec![a, b]
        };
        let n = at[0].len();
        let inputs: Vec<Tensor> = at
            .iter()
            .map(|xs| {
                let ty = TensorType {
                    elem: ElemType::F32,
                    shape: vec![n],
                };
                Tensor::new(ty, xs.clone())
            })
            .collect();
        let run = |e: &RecExpr<Alg>| {
            interp::run(&graph_of(e, n, &vars), &inputs).expect("runs")[0]
                .data
                .to_vec()
        };
        let (want, got) = (run(&lhs), run(&rhs));
        let (mut rel, mut abs) = (0.0f64, 0.0f64);
        for (w, r) in want.iter().zip(&got) {
            if w.is_finite() && r.is_finite() {
                abs = abs.max((w - r).abs());
                if w.abs() > 1e-30 {
                    rel = rel.max((w - r).abs() / w.abs());
                }
            }
        }
        eprintln!(
            "{:<16} {n:>5} points: largest error rel {rel:.2e} abs {abs:.2e}",
            r.name
        );
        if let Some(bad) = worst(&want, &got, &at, c) {
            panic!(
                "rule `{}` exceeds rel {} abs {} {bad}",
                r.name, c.rel, c.abs
            );
        }
    }
}

/// A graph `y = f(x)` of one unary op over `[n]`.
fn unary_graph(op: Op, n: usize) -> Graph {
    let mut g = Graph::default();
    let ty = TensorType {
        elem: ElemType::F32,
        shape: vec![n],
    };
    let x = input(&mut g, "x", ty);
    let y = g.add_node("y", op, vec![x]).expect("typed")[0];
    g.outputs.push(y);
    g
}

/// Costs of every operation but `missing`.
fn without(missing: &[&'static str]) -> Costs {
    let mut c = Costs::all();
    for m in missing {
        c.ops.remove(m);
    }
    c
}

fn run_on(g: &Graph, xs: &[f64]) -> Vec<f64> {
    let ty = TensorType {
        elem: ElemType::F32,
        shape: vec![xs.len()],
    };
    interp::run(g, &[Tensor::new(ty, xs.to_vec())]).expect("runs")[0]
        .data
        .to_vec()
}

fn ops(g: &Graph) -> Vec<&'static str> {
    g.nodes.iter().map(|n| n.op.name()).collect()
}

#[test]
fn every_operation_of_the_language_is_a_graph_op() {
    let ops = operations();
    assert_eq!(ops.len(), OPS.len());
    assert!(ops.contains(&("exp", Op::Unary(Unary::Exp))));
    assert!(ops.contains(&("lt", Op::Less)));
}

#[test]
fn a_machine_with_every_operation_keeps_the_graph() {
    let g = unary_graph(Op::Unary(Unary::Tanh), 8);
    assert_eq!(select(&g, &Costs::all(), true).nodes, g.nodes);
}

#[test]
fn exp_without_an_exp_instruction_is_computed_within_its_bound_and_refused_under_strict() {
    let xs: Vec<f64> = (0..=200).map(|i| -40.0 + f64::from(i) * 0.4).collect();
    let g = unary_graph(Op::Unary(Unary::Exp), xs.len());
    let costs = without(&["exp", "tanh", "sigmoid", "erf", "log"]);
    let s = select(&g, &costs, true);
    assert!(!ops(&s).contains(&"Exp"), "{:?}", ops(&s));
    let (want, got) = (run_on(&g, &xs), run_on(&s, &xs));
    for (w, r) in want.iter().zip(&got) {
        assert!((w - r).abs() <= 1e-4 * w.abs(), "{w} vs {r}");
    }
    // Strict: no identity of real arithmetic makes e^x from + * / max min.
    assert_eq!(select(&g, &costs, false).nodes, g.nodes);
}

#[test]
fn a_reciprocal_square_root_without_sqrt_is_one_rsqrt() {
    let mut g = Graph::default();
    let ty = TensorType {
        elem: ElemType::F32,
        shape: vec![4],
    };
    let x = input(&mut g, "x", ty);
    let s = g
        .add_node("s", Op::Unary(Unary::Sqrt), vec![x])
        .expect("typed")[0];
    let r = g
        .add_node("r", Op::Unary(Unary::Reciprocal), vec![s])
        .expect("typed")[0];
    g.outputs.push(r);
    let out = select(&g, &without(&["sqrt"]), true);
    assert_eq!(ops(&out), ["Rsqrt"]);
    assert_eq!(out.nodes[0].outputs, [r], "the result keeps its value");
    let xs = [0.25, 1.0, 4.0, 1e6];
    assert_eq!(run_on(&out, &xs), run_on(&g, &xs));
}

#[test]
fn sigmoid_and_tanh_come_from_exp_where_only_exp_is_had() {
    let xs: Vec<f64> = (0..=100).map(|i| -12.0 + f64::from(i) * 0.24).collect();
    for (u, bound) in [(Unary::Sigmoid, 1e-6), (Unary::Tanh, 3e-7)] {
        let g = unary_graph(Op::Unary(u), xs.len());
        let s = select(&g, &without(&["tanh", "sigmoid"]), true);
        assert!(ops(&s).contains(&"Exp"), "{u:?}: {:?}", ops(&s));
        for (w, r) in run_on(&g, &xs).iter().zip(run_on(&s, &xs)) {
            assert!((w - r).abs() <= bound + 1e-6 * w.abs(), "{u:?}: {w} vs {r}");
        }
    }
}

#[test]
fn an_operation_no_rule_reaches_is_left_for_the_lowering_to_refuse() {
    // No multiplication: e^x has no expansion.
    let g = unary_graph(Op::Unary(Unary::Exp), 4);
    let costs = without(&["exp", "*", "tanh", "sigmoid"]);
    assert_eq!(select(&g, &costs, true).nodes, g.nodes);
}
