//! The loader never panics or hangs, whatever it is given; its JSON
//! diagnostics carry places; checked models survive a RON round trip.

use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn toy() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs/ok/toy.isa"))
        .expect("toy spec exists")
}

/// Loads text and checks the outcome is coherent: a machine, or at least one error.
fn load_never_panics(text: &str) {
    match isa_specs::load_source("fuzz.isa", text, &[]) {
        Ok(l) => assert_eq!(l.warnings.error_count(), 0),
        Err(f) => {
            assert!(f.diagnostics.has_errors());
            // Rendering must not panic either, in both forms.
            let _ = f.diagnostics.render_plain(&f.sources);
            let _ = f.diagnostics.to_json(&f.sources);
        }
    }
}

const TOKENS: &[&str] = &[
    "machine",
    "\"m\"",
    "memory",
    "regfile",
    "unit",
    "slot",
    "semaphore",
    "format",
    "inst",
    "param",
    "include",
    "operands",
    "semantics",
    "timing",
    "encoding",
    "constraints",
    "reg",
    "mem",
    "imm",
    "sem",
    "align",
    "stride",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ";",
    ":",
    ",",
    "=",
    "+=",
    "max=",
    "..=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "<=",
    "x",
    "y",
    "i",
    "k",
    "sum",
    "max",
    "exp",
    "f32",
    "bf16",
    "0",
    "1",
    "64",
    "0x1f",
    "2.5",
    "4 KiB",
    "\n",
    " ",
    "//c\n",
    "/*",
    "*/",
    "\"",
];

fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..200).prop_map(|t| t.join(" "))
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, String),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), prop::sample::select(TOKENS))
            .prop_map(|(a, t)| Mutation::Insert(a, t.to_owned())),
        (any::<usize>(), 1usize..200).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
    ]
}

fn apply(text: &str, m: &Mutation) -> String {
    let bytes = text.as_bytes();
    let at = |a: usize| a % (bytes.len() + 1);
    let mut out = bytes.to_vec();
    match m {
        Mutation::Delete(a, n) => {
            let s = at(*a);
            out.drain(s..(s + n).min(bytes.len()));
        }
        Mutation::Insert(a, t) => {
            let s = at(*a);
            out.splice(s..s, t.bytes());
        }
        Mutation::Duplicate(a, n) => {
            let s = at(*a);
            let e = (s + n).min(bytes.len());
            let piece = bytes[s..e].to_vec();
            out.splice(e..e, piece);
        }
    }
    // Mutations may split a UTF-8 sequence; the loader reads text, so keep it text.
    String::from_utf8_lossy(&out).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(s in ".{0,400}") {
        load_never_panics(&s);
    }

    #[test]
    fn token_soup_never_panics(s in token_soup()) {
        load_never_panics(&s);
    }

    #[test]
    fn mutated_toy_never_panics(ms in prop::collection::vec(mutation(), 1..6)) {
        let text = ms.iter().fold(toy(), |t, m| apply(&t, m));
        load_never_panics(&text);
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    for depth in [100, 10_000, 200_000] {
        let text = format!("param p = {}1{};", "(".repeat(depth), ")".repeat(depth));
        let f = isa_specs::load_source("deep.isa", &text, &[]).expect_err("too deep");
        assert!(
            f.diagnostics
                .0
                .iter()
                .any(|d| matches!(d.code, isa_specs::Code::TooDeep)),
            "depth {depth}: {f}"
        );
        let reductions = format!(
            "inst x {{ semantics {{ y = {} x[k]; }} }}",
            "sum(k) ".repeat(depth)
        );
        let _ = isa_specs::load_source("deep.isa", &reductions, &[]).expect_err("invalid");
    }
}

#[test]
fn extreme_immediate_ranges_do_not_overflow() {
    for range in [
        "-9223372036854775807..=9223372036854775807",
        "-9223372036854775808..=-1",
        "0..=9223372036854775807",
    ] {
        let text = toy().replace("rows : imm 1..=7", &format!("rows : imm {range}"));
        let f = isa_specs::load_source("wide.isa", &text, &[]).expect_err("too wide for its field");
        assert!(f.diagnostics.has_errors());
    }
}

#[test]
fn device_files_are_read_with_a_limit() {
    let dev_zero = Path::new("/dev/zero");
    if dev_zero.exists() {
        let f = isa_specs::load_file(dev_zero, &[]).expect_err("endless");
        assert_eq!(f.diagnostics.0[0].code, isa_specs::Code::TooLarge);
    }
}

#[test]
fn enormous_and_binary_files_are_refused() {
    let dir = std::env::temp_dir().join(format!("tessera-robust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let big = dir.join("big.isa");
    let line = "// padding padding padding padding padding padding padding padding\n";
    std::fs::write(
        &big,
        line.repeat((isa_specs::MAX_FILE_BYTES as usize / line.len()) + 2),
    )
    .expect("write");
    let f = isa_specs::load_file(&big, &[]).expect_err("too large");
    assert_eq!(f.diagnostics.0[0].code, isa_specs::Code::TooLarge);
    let bin = dir.join("bin.isa");
    std::fs::write(&bin, [0x6d, 0x61, 0x00, 0xff, 0xfe, 0x80, 0x01]).expect("write");
    let f = isa_specs::load_file(&bin, &[]).expect_err("binary");
    assert_eq!(f.diagnostics.0[0].code, isa_specs::Code::NotText);
    let missing = isa_specs::load_file(dir.join("missing.isa"), &[]).expect_err("missing");
    assert_eq!(missing.diagnostics.0[0].code, isa_specs::Code::Unreadable);
    let folder = isa_specs::load_file(&dir, &[]).expect_err("a folder");
    assert_eq!(folder.diagnostics.0[0].code, isa_specs::Code::Unreadable);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_diagnostics_carry_line_and_column() {
    let text = toy().replace(
        "timing { unit = valu; latency = 6; }",
        "timing { unit = valux; latency = 6; }",
    );
    let f = isa_specs::load_source("toy.isa", &text, &[]).expect_err("unknown unit");
    let json = serde_json::to_string(&f.diagnostics.to_json(&f.sources)).expect("serialises");
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let d = &parsed[0];
    assert_eq!(d["code"], "E0501");
    assert_eq!(d["severity"], "error");
    let line = text
        .lines()
        .position(|l| l.contains("valux"))
        .expect("line")
        + 1;
    let col = text
        .lines()
        .nth(line - 1)
        .and_then(|l| l.find("valux"))
        .expect("col")
        + 1;
    assert_eq!(d["primary"]["file"], "toy.isa");
    assert_eq!(d["primary"]["line"], line);
    assert_eq!(d["primary"]["column"], col);
    assert!(
        d["help"].as_str().is_some_and(|h| h.contains("valu")),
        "help suggests the right unit: {d}"
    );
}

fn shipped_specs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../targets");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "isa"))
                .collect()
        })
        .unwrap_or_default();
    v.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs/ok/toy.isa"));
    v.sort();
    v
}

#[test]
fn models_round_trip_through_ron_and_json() {
    for path in shipped_specs() {
        let loaded =
            isa_specs::load_file(&path, &[]).unwrap_or_else(|f| panic!("{}:\n{f}", path.display()));
        let ron = ron::to_string(&loaded.machine).expect("to RON");
        let back: isa_specs::Machine = ron::from_str(&ron).expect("from RON");
        assert_eq!(back, loaded.machine, "{}", path.display());
        let json = serde_json::to_string(&loaded.machine).expect("to JSON");
        let back: isa_specs::Machine = serde_json::from_str(&json).expect("from JSON");
        assert_eq!(back, loaded.machine, "{}", path.display());
    }
}

#[test]
fn overrides_change_values_and_unknown_ones_are_errors() {
    let base = isa_specs::load_file(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs/ok/toy.isa"),
        &[],
    )
    .expect("toy");
    let sram = |m: &isa_specs::Machine| {
        m.memories
            .iter()
            .find(|x| x.name == "sram")
            .map(|x| x.size.value)
    };
    assert_eq!(sram(&base.machine), Some(64 << 10));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs/ok/toy.isa");
    let big = isa_specs::load_file(&path, &[("SRAM".into(), 32 << 10)]).expect("override");
    assert_eq!(sram(&big.machine), Some(32 << 10));
    // A dependent parameter follows the override.
    let wide = isa_specs::load_file(&path, &[("N".into(), 2)]).expect("override N");
    let vlen = wide
        .machine
        .params
        .iter()
        .find(|p| p.name == "VLEN")
        .map(|p| p.value);
    assert_eq!(vlen, Some(4));
    let err = isa_specs::load_file(&path, &[("SRAMM".into(), 1)]).expect_err("unknown");
    assert!(
        err.diagnostics
            .0
            .iter()
            .any(|d| d.code == isa_specs::Code::UnknownOverride
                && d.help.as_deref() == Some("did you mean `SRAM`?"))
    );
}

#[test]
fn accumulation_forwarding_is_an_expression_and_must_be_positive() {
    let base = toy();
    let line = "timing { unit = mxu; slot = s0; occupancy = N; latency = 2 * N + 1; }";
    assert!(base.contains(line));
    let with = |acc: &str| {
        base.replace(line, &format!("timing {{ unit = mxu; slot = s0; occupancy = N; latency = 2 * N + 1; accumulate = {acc}; }}"))
    };
    let ok = isa_specs::load_source("acc.isa", &with("N"), &[]).expect("loads");
    let timed: Vec<_> = ok
        .machine
        .instructions
        .iter()
        .filter(|i| i.timing.accumulate.is_some())
        .collect();
    assert_eq!(timed.len(), 1);
    // It survives the RON round trip the registry uses.
    let ron = ron::to_string(&ok.machine).expect("ron");
    let back: isa_specs::Machine = ron::from_str(&ron).expect("reads back");
    assert_eq!(back, ok.machine);
    let bad = isa_specs::load_source("acc.isa", &with("0"), &[]).expect_err("refused");
    let text = bad.diagnostics.render_plain(&bad.sources);
    assert!(text.contains("accumulate"), "{text}");
}
