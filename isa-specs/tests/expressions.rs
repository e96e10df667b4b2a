//! Expressions and constraints written alone, outside a description
//! (`parse_expr`, `parse_constraint`, `eval::resolve`, `eval::holds`): the
//! language of descriptions' expressions, whole-text parsing with located
//! errors, and names resolved to integer variables.

use isa_specs::ast::{BinOp, CmpOp, ExprKind};
use isa_specs::eval::{EvalError, Num, Params, eval, eval_int, holds, resolve, resolve_constraint};
use isa_specs::{Code, Diagnostic, parse_constraint, parse_expr};

/// The value of `text` with the variables `A`, `B`, `C` at `values`.
fn value(text: &str, values: [i64; 3]) -> Result<Num, EvalError> {
    let e = parse_expr(text).unwrap_or_else(|d| panic!("{text}: {}", d.message));
    let e = resolve(&e, &["A", "B", "C"]).unwrap_or_else(|d| panic!("{text}: {}", d.message));
    eval(&e, &Params(&values))
}

fn int(text: &str) -> i64 {
    match value(text, [0, 0, 0]) {
        Ok(Num::Int(v)) => v,
        other => panic!("{text}: {other:?}"),
    }
}

/// Where an error points: the byte range in the text.
fn at(d: &Diagnostic) -> std::ops::Range<usize> {
    d.primary.as_ref().expect("located").span.range()
}

#[test]
fn an_expression_parses_whole_with_its_spans() {
    let e = parse_expr(" A + B * 2 ").expect("parses");
    let ExprKind::Binary(BinOp::Add, a, bc) = &e.kind else {
        panic!("{e:?}");
    };
    assert_eq!(a.kind, ExprKind::Name("A".into()));
    assert_eq!(a.span.range(), 1..2);
    let ExprKind::Binary(BinOp::Mul, b, two) = &bc.kind else {
        panic!("{bc:?}");
    };
    assert_eq!(b.kind, ExprKind::Name("B".into()));
    assert_eq!(two.kind, ExprKind::Int(2));
    assert_eq!(e.span.range(), 1..10);
    let r = resolve(&e, &["A", "B"]).expect("resolves");
    assert_eq!(eval_int(&r, &Params(&[5, 7])), Ok(19));
}

#[test]
fn precedence_and_associativity_are_those_of_descriptions() {
    assert_eq!(int("2 * 3 + 4"), 10);
    assert_eq!(int("2 + 3 * 4"), 14);
    assert_eq!(int("(2 + 3) * 4"), 20);
    assert_eq!(int("10 - 4 - 3"), 3);
    assert_eq!(int("100 / 7 / 2"), 7);
    assert_eq!(int("7 % 4 * 2"), 6);
    assert_eq!(int("2 * 7 % 4"), 2);
    assert_eq!(int("-2 * 3"), -6);
    assert_eq!(int("- -2 - 3"), -1);
    assert_eq!(int("-7 / 2"), -3);
    assert_eq!(int("1 KiB / 4 + 0x10 + 0b11 + 1_000"), 256 + 16 + 3 + 1000);
    assert_eq!(
        int("max(2, 3) * min(4, 5) + log2(64) + pow2(3) + ceil_div(7, 2)"),
        12 + 6 + 8 + 4
    );
    assert_eq!(value("A * 0.5", [5, 0, 0]), Ok(Num::Real(2.5)));
    assert_eq!(
        value("A / (B - C)", [1, 2, 2]),
        Err(EvalError::DivisionByZero)
    );
    assert_eq!(
        value("A * 9223372036854775807", [2, 0, 0]),
        Err(EvalError::Overflow)
    );
}

#[test]
fn trailing_text_and_bad_syntax_are_located_errors() {
    let d = parse_expr("A + B )").expect_err("trailing `)`");
    assert_eq!(d.code, Code::Syntax);
    assert_eq!(at(&d), 6..7);
    assert!(d.message.contains("found `)`"), "{}", d.message);
    let d = parse_expr("A + B C").expect_err("trailing name");
    assert_eq!(at(&d), 6..7);
    assert!(d.message.contains("found `C`"), "{}", d.message);
    let d = parse_expr("A +").expect_err("no right side");
    assert_eq!(at(&d), 3..3);
    assert!(
        d.message
            .contains("expected an expression, found the end of the expression"),
        "{}",
        d.message
    );
    // A comparison is not an expression; an empty text is nothing.
    assert_eq!(at(&parse_expr("A <= 3").expect_err("comparison")), 2..3);
    assert!(parse_expr("").is_err());
    assert!(
        parse_expr("(A + 1")
            .expect_err("unclosed")
            .message
            .contains("`)`")
    );
}

#[test]
fn a_constraint_is_one_comparison_of_two_expressions() {
    let k = parse_constraint("A * B <= 256").expect("parses");
    assert_eq!(k.op, CmpOp::Le);
    assert_eq!(k.lhs.span.range(), 0..5);
    assert_eq!(k.rhs.kind, ExprKind::Int(256));
    let k = resolve_constraint(&k, &["A", "B"]).expect("resolves");
    assert_eq!(holds(&k, &Params(&[64, 4])), Ok(true));
    assert_eq!(holds(&k, &Params(&[128, 4])), Ok(false));
    for (text, op) in [
        ("A < B", CmpOp::Lt),
        ("A > B", CmpOp::Gt),
        ("A >= B", CmpOp::Ge),
        ("A == B", CmpOp::Eq),
        ("A != B", CmpOp::Ne),
    ] {
        assert_eq!(parse_constraint(text).expect(text).op, op);
    }
    // Not a comparison; more than one; trailing text.
    let d = parse_constraint("A * B").expect_err("no comparison");
    assert_eq!(at(&d), 5..5);
    assert!(d.message.contains("a comparison"), "{}", d.message);
    assert!(
        d.message.contains("found the end of the constraint"),
        "{}",
        d.message
    );
    assert_eq!(
        at(&parse_constraint("A < B < C").expect_err("chained")),
        6..7
    );
    assert_eq!(
        at(&parse_constraint("A < 1 && B < 2").expect_err("&&")),
        6..7
    );
    assert_eq!(at(&parse_constraint("A < 1;").expect_err("`;`")), 5..6);
}

#[test]
fn integers_compare_exactly() {
    // 2^60 and 2^60 + 1 are the same 64-bit real.
    let k = parse_constraint("A == A + 1").expect("parses");
    let k = resolve_constraint(&k, &["A"]).expect("resolves");
    assert_eq!(holds(&k, &Params(&[1 << 60])), Ok(false));
    let k = resolve_constraint(&parse_constraint("A * 0.5 >= 2").expect("parses"), &["A"])
        .expect("resolves");
    assert_eq!(holds(&k, &Params(&[4])), Ok(true));
    assert_eq!(holds(&k, &Params(&[3])), Ok(false));
    let k = resolve_constraint(&parse_constraint("A / B > 0").expect("parses"), &["A", "B"])
        .expect("resolves");
    assert_eq!(holds(&k, &Params(&[1, 0])), Err(EvalError::DivisionByZero));
}

#[test]
fn names_resolve_to_the_variables_given_and_nothing_else() {
    let names = ["SA_ROWS", "MXUS"];
    let r = |text: &str| resolve(&parse_expr(text).expect(text), &names);
    let d = r("MXUS + FOO").expect_err("unknown name");
    assert_eq!(d.code, Code::Undefined);
    assert_eq!(d.message, "no parameter `FOO`");
    assert_eq!(at(&d), 7..10);
    assert_eq!(d.help.as_deref(), Some("the parameters are SA_ROWS, MXUS"));
    let d = r("SA_ROW * 2").expect_err("misspelt");
    assert_eq!(d.help.as_deref(), Some("did you mean `SA_ROWS`?"));
    let d = r("MXUS + foo(SA_ROWS)").expect_err("unknown function");
    assert_eq!(d.code, Code::UnknownFunction);
    assert_eq!(at(&d), 7..10);
    assert_eq!(r("log2(MXUS, 2)").expect_err("arity").code, Code::Arity);
    assert_eq!(r("hbm.size").expect_err("member").code, Code::WrongKind);
    assert_eq!(r("MXUS[1]").expect_err("element").code, Code::WrongKind);
    assert_eq!(
        r("sum(k) MXUS").expect_err("reduction").code,
        Code::WrongKind
    );
    // A reduction where a call minus something was meant says how to write it.
    let d = r("min(SA_ROWS, MXUS) - 1").expect_err("reduction of -1");
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("write `(min(SA_ROWS, MXUS)) - ...`")),
        "{d:?}"
    );
    let e = r("(min(SA_ROWS, MXUS)) - 1").expect("resolves");
    assert_eq!(eval_int(&e, &Params(&[128, 4])), Ok(3));
    // Variable `i` is parameter `i`.
    let e = r("SA_ROWS - MXUS").expect("resolves");
    assert_eq!(eval_int(&e, &Params(&[128, 4])), Ok(124));
}
