//! The ISA manual: snapshots of the toy target's Markdown and HTML, determinism,
//! escaping, every shipped target, and the expression and semantics printers.

use codegen_gen::Ctx;
use codegen_gen::gen_docs::{expr_text, manual_html, manual_markdown, semantics_text};
use isa_specs::model::{
    Access, Affine, AssignOp, BinOp, Builtin, DType, Expr, Func, IndexId, Instruction, OperandId,
    ParamId, ReduceOp, SemExpr, Stmt,
};
use isa_specs::{Loaded, Machine};
use std::path::{Path, PathBuf};

const TOY: &str = "codegen-gen/tests/toy.isa";

fn workspace() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .expect("the crate is inside the workspace")
        .to_path_buf()
}

fn root() -> String {
    workspace().display().to_string()
}

fn load(rel: &str) -> Loaded {
    let path = workspace().join(rel);
    isa_specs::load_file(&path, &[]).unwrap_or_else(|f| panic!("{rel} does not check:\n{f}"))
}

/// Both manuals of a description, after checking they hold no absolute path.
fn manuals(loaded: &Loaded, rel: &str) -> (String, String) {
    let root = root();
    let ctx = Ctx::new(loaded, rel, &root);
    let md = manual_markdown(&ctx).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let html = manual_html(&ctx).unwrap_or_else(|e| panic!("{rel}: {e}"));
    for (what, text) in [("markdown", &md), ("html", &html)] {
        assert!(
            !text.contains(&root),
            "{rel}: the {what} manual holds the absolute path {root}"
        );
    }
    (md, html)
}

#[test]
fn toy_markdown() {
    let (md, _) = manuals(&load(TOY), TOY);
    insta::assert_snapshot!(md);
}

#[test]
fn toy_html() {
    let (_, html) = manuals(&load(TOY), TOY);
    insta::assert_snapshot!(html);
}

#[test]
fn rendering_twice_gives_identical_bytes() {
    let first = manuals(&load(TOY), TOY);
    let second = manuals(&load(TOY), TOY);
    assert_eq!(first.0.as_bytes(), second.0.as_bytes());
    assert_eq!(first.1.as_bytes(), second.1.as_bytes());
}

#[test]
fn every_shipped_target_renders_every_instruction() {
    let dir = workspace().join("targets");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("targets/ is readable")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".isa"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "expected the shipped targets, found {files:?}"
    );
    for file in files {
        let rel = format!("targets/{file}");
        let loaded = load(&rel);
        let (md, html) = manuals(&loaded, &rel);
        assert_balanced(&rel, &html);
        assert_links_resolve(&rel, &md, "](#", ")", SECTIONS);
        assert_links_resolve(&rel, &html, "href=\"#", "\"", &[]);
        for inst in &loaded.machine.instructions {
            let anchor = format!("id=\"inst-{}\"", inst.name);
            assert!(
                md.contains(&anchor),
                "{rel}: `{}` missing from the markdown manual",
                inst.name
            );
            assert!(
                html.contains(&anchor),
                "{rel}: `{}` missing from the html manual",
                inst.name
            );
            let heading = format!("`{}`\n", inst.name);
            assert!(
                md.contains(&heading),
                "{rel}: no markdown heading for `{}`",
                inst.name
            );
        }
        for text in [&md, &html] {
            assert!(!text.contains("Expr("), "{rel}: debug text in the manual");
            assert!(
                !text.contains("OperandId"),
                "{rel}: debug text in the manual"
            );
        }
    }
}

/// Headings of the markdown manual, linked through the slugs GitHub gives them.
const SECTIONS: &[&str] = &[
    "summary",
    "conventions",
    "parameters",
    "memories",
    "register-files",
    "units",
    "issue-slots",
    "semaphores",
    "formats",
    "instruction-index",
    "instructions",
];

/// Every link `#x` inside the page (between `open` and `close`) has an `id="x"` or is a known heading.
fn assert_links_resolve(rel: &str, text: &str, open: &str, close: &str, headings: &[&str]) {
    let mut rest = text;
    let mut links = 0;
    while let Some(at) = rest.find(open) {
        rest = &rest[at + open.len()..];
        let target = &rest[..rest.find(close).expect("a closed link")];
        let defined = text.contains(&format!("id=\"{target}\"")) || headings.contains(&target);
        assert!(defined, "{rel}: link to #{target}, which nothing defines");
        links += 1;
    }
    assert!(links > 0, "{rel}: no links found with {open}");
}

/// Every element the HTML template opens is closed as often.
fn assert_balanced(rel: &str, html: &str) {
    for tag in [
        "table", "tr", "section", "article", "ol", "li", "pre", "dl", "code", "p",
    ] {
        let opens =
            html.matches(&format!("<{tag}>")).count() + html.matches(&format!("<{tag} ")).count();
        let closes = html.matches(&format!("</{tag}>")).count();
        assert_eq!(
            opens, closes,
            "{rel}: <{tag}> opened {opens} times, closed {closes} times"
        );
    }
}

#[test]
fn text_from_the_description_is_escaped() {
    let text = std::fs::read_to_string(workspace().join(TOY)).expect("the toy target is readable");
    let text = text.replace(
        "doc = \"acc += a x b",
        "doc = \"<script>alert('x')</script> a | b & `c < d` acc += a x b",
    );
    let loaded = isa_specs::load_source(TOY, &text, &[]).unwrap_or_else(|f| panic!("{f}"));
    let (md, html) = manuals(&loaded, TOY);
    assert!(
        !html.contains("<script>"),
        "raw markup from a doc string reached the html"
    );
    assert!(html.contains(
        "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; a | b &amp; <code>c &lt; d</code>"
    ));
    assert!(
        md.contains("a \\| b &"),
        "a pipe in a doc string must not split a markdown table cell"
    );
}

// --- expr_text and semantics_text -------------------------------------------

fn toy() -> Machine {
    load(TOY).machine
}

fn inst<'a>(m: &'a Machine, name: &str) -> &'a Instruction {
    &m.instructions[m.instruction(name).expect("a toy instruction").index()]
}

fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::Binary(op, Box::new(a), Box::new(b))
}

fn param(m: &Machine, name: &str) -> Expr {
    Expr::Param(m.param(name).expect("a toy parameter"))
}

#[test]
fn expressions_take_the_fewest_parentheses() {
    let m = toy();
    let (n, vlen) = (param(&m, "N"), param(&m, "VLEN"));
    let cases = [
        (
            bin(
                BinOp::Mul,
                bin(BinOp::Add, n.clone(), vlen.clone()),
                Expr::Int(3),
            ),
            "(N + VLEN) * 3",
        ),
        (
            bin(
                BinOp::Add,
                n.clone(),
                bin(BinOp::Mul, vlen.clone(), Expr::Int(3)),
            ),
            "N + VLEN * 3",
        ),
        (
            bin(
                BinOp::Add,
                bin(BinOp::Add, n.clone(), vlen.clone()),
                Expr::Int(2),
            ),
            "N + VLEN + 2",
        ),
        (
            bin(
                BinOp::Sub,
                n.clone(),
                bin(BinOp::Sub, vlen.clone(), Expr::Int(2)),
            ),
            "N - (VLEN - 2)",
        ),
        (
            bin(
                BinOp::Div,
                n.clone(),
                bin(BinOp::Mul, vlen.clone(), Expr::Int(2)),
            ),
            "N / (VLEN * 2)",
        ),
        (Expr::Neg(Box::new(n.clone())), "-N"),
        (
            Expr::Neg(Box::new(bin(BinOp::Add, n.clone(), Expr::Int(1)))),
            "-(N + 1)",
        ),
        (
            bin(BinOp::Mul, Expr::Neg(Box::new(n.clone())), vlen.clone()),
            "-N * VLEN",
        ),
        (
            Expr::Call(
                Builtin::CeilDiv,
                vec![bin(BinOp::Mul, n.clone(), Expr::Int(16)), Expr::Int(2)],
            ),
            "ceil_div(N * 16, 2)",
        ),
        (
            Expr::Call(Builtin::Max, vec![n.clone(), vlen, Expr::Real(0.5)]),
            "max(N, VLEN, 0.5)",
        ),
        (bin(BinOp::Mul, Expr::Real(20.0), n), "20.0 * N"),
        (Expr::Param(ParamId(99)), "param#99"),
    ];
    for (e, want) in cases {
        assert_eq!(expr_text(&m, None, &e), want);
    }
}

#[test]
fn expressions_name_operands_of_their_instruction() {
    let m = toy();
    let load = inst(&m, "load");
    assert_eq!(
        expr_text(&m, Some(load), &load.timing.latency),
        "100 + ceil_div(rows * 16, 16)"
    );
    assert_eq!(expr_text(&m, Some(load), &load.energy), "20.0 * rows * 16");
    assert_eq!(
        expr_text(&m, None, &Expr::Operand(OperandId(1))),
        "operand#1"
    );
}

#[test]
fn semantics_read_as_written() {
    let m = toy();
    assert_eq!(
        semantics_text(&m, inst(&m, "mma")),
        "d[i, j] += f32(a[i, k]) * f32(b[k, j]);"
    );
    assert_eq!(semantics_text(&m, inst(&m, "vmax")), "d[0] max= a[k];");
    assert_eq!(
        semantics_text(&m, inst(&m, "load")),
        "dst[i, j] = src[i, j];\nsignal(s);"
    );
    assert_eq!(semantics_text(&m, inst(&m, "wait")), "wait(s);");
}

fn access(operand: u32, terms: &[(u32, i64)], constant: i64) -> SemExpr {
    let terms = terms.iter().map(|&(i, c)| (IndexId(i), c)).collect();
    SemExpr::Access(Access {
        operand: OperandId(operand),
        indices: vec![Affine {
            terms,
            constant,
            ..Affine::default()
        }],
    })
}

fn sbin(op: BinOp, a: SemExpr, b: SemExpr) -> SemExpr {
    SemExpr::Binary(op, Box::new(a), Box::new(b))
}

#[test]
fn semantics_bracket_reductions_and_sums() {
    let m = toy();
    // vexp: operands d, a; index i.
    let mut v = inst(&m, "vexp").clone();
    let x = || access(1, &[(0, 1)], 0);
    let reduce = |body| SemExpr::Reduce(ReduceOp::Sum, vec![IndexId(0)], Box::new(body));
    let cases = [
        (
            sbin(BinOp::Mul, sbin(BinOp::Add, x(), x()), x()),
            "(a[i] + a[i]) * a[i]",
        ),
        (
            SemExpr::Neg(Box::new(sbin(BinOp::Sub, x(), x()))),
            "-(a[i] - a[i])",
        ),
        (reduce(sbin(BinOp::Mul, x(), x())), "sum(i) a[i] * a[i]"),
        (reduce(sbin(BinOp::Add, x(), x())), "sum(i) (a[i] + a[i])"),
        (sbin(BinOp::Mul, reduce(x()), x()), "(sum(i) a[i]) * a[i]"),
        (sbin(BinOp::Add, reduce(x()), x()), "sum(i) a[i] + a[i]"),
        (
            SemExpr::Cast(DType::Bf16, Box::new(SemExpr::Call(Func::Exp, vec![x()]))),
            "bf16(exp(a[i]))",
        ),
        (access(1, &[(0, 2)], -1), "a[2*i - 1]"),
        (access(1, &[(0, -1)], 3), "a[-i + 3]"),
        (
            SemExpr::Call(
                Func::Select,
                vec![x(), x(), SemExpr::Const(Expr::Real(0.0))],
            ),
            "select(a[i], a[i], 0.0)",
        ),
    ];
    for (value, want) in cases {
        v.semantics.stmts = vec![Stmt::Assign {
            target: Access {
                operand: OperandId(0),
                indices: vec![],
            },
            op: AssignOp::Set,
            value,
        }];
        assert_eq!(semantics_text(&m, &v), format!("d = {want};"));
    }
}
