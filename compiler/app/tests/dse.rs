//! Design-space exploration (`tessera dse`): sweep expansion and constraints,
//! determinism, resume after a killed run, shards merged into exactly a
//! single run's report, and the report itself (snapshot).

mod cli_util;
use cli_util::{root, tessera};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tessera::dse::{Results, Sweep, Values};

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-dse-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

const SMALL: &str = "targets/variants/vliw-systolic-small.ron";
const MODEL: &str = "examples/mlp_small/model.onnx";

fn small() -> Sweep {
    Sweep::parse(&std::fs::read_to_string(root().join(SMALL)).expect("sweep")).expect("parses")
}

#[test]
fn sweeps_expand_in_a_fixed_order_and_constraints_filter() {
    let x = small().expand().expect("expands");
    // 2 x 2 x 2 combinations, less SA_ROWS = 128 with MXUS = 4 (two
    // bandwidths), plus the alternative machine.
    assert_eq!(x.variants.len(), 7);
    assert_eq!(x.filtered, vec![("SA_ROWS * MXUS <= 256".to_owned(), 2)]);
    assert_eq!(
        x.variants[0].id,
        "vliw-systolic:HBM_GBPS=600,MXUS=2,SA_ROWS=64"
    );
    assert_eq!(
        x.variants[1].id,
        "vliw-systolic:HBM_GBPS=600,MXUS=2,SA_ROWS=128"
    );
    assert_eq!(x.variants[6].id, "pim-dram:");
    assert_eq!(small().expand().expect("again"), x);
    // The shipped big sweep has at least 200 variants.
    let big = Sweep::parse(
        &std::fs::read_to_string(root().join("targets/variants/vliw-systolic-gpt2.ron"))
            .expect("sweep"),
    )
    .expect("parses")
    .expand()
    .expect("expands");
    assert!(big.variants.len() >= 200, "{}", big.variants.len());
    // The decode sweep: 3 x 2 x 2 x 3 pim-dram variants and vliw-systolic
    // at three bandwidths.
    let decode = Sweep::parse(
        &std::fs::read_to_string(root().join("targets/variants/pim-dram-decode.ron"))
            .expect("sweep"),
    )
    .expect("parses")
    .expand()
    .expect("expands");
    assert_eq!(decode.variants.len(), 39);
    // Value forms.
    assert_eq!(
        Sweep {
            params: [(
                "SA_ROWS".to_owned(),
                Values::Range {
                    start: 32,
                    end: 128,
                    step: 48
                }
            )]
            .into(),
            ..small()
        }
        .expand()
        .expect("range")
        .variants
        .len(),
        // SA_ROWS 32, 80, 128 alone: the constraint reads MXUS's default,
        // 4, and keeps only 32; plus the alternative.
        1 + 1
    );
}

#[test]
fn bad_sweeps_are_errors_that_say_where() {
    let e = Sweep::parse("Sweep(name: \"x\", base: )").expect_err("bad RON");
    assert!(e.starts_with("1:"), "{e}");
    let with = |f: &dyn Fn(&mut Sweep)| {
        let mut s = small();
        f(&mut s);
        s.expand().expect_err("refused")
    };
    assert!(with(&|s| s.base = "nope".into()).contains("unknown base machine `nope`"));
    assert!(
        with(&|s| {
            s.params.insert("NOPE".into(), Values::List(vec![1]));
        })
        .contains("no parameter `NOPE`")
    );
    assert!(with(&|s| s.constraints = vec!["SA_ROWS <".into()]).contains("constraint `SA_ROWS <`"));
    assert!(with(&|s| s.constraints = vec!["FOO > 1".into()]).contains("no parameter `FOO`"));
    assert!(
        with(&|s| {
            s.params.insert(
                "MXUS".into(),
                Values::Range {
                    start: 1,
                    end: 4,
                    step: 0,
                },
            );
        })
        .contains("positive step")
    );
    // On the command line: exit 1 and the file named.
    let dir = temp("bad");
    std::fs::create_dir_all(&dir).expect("dir");
    let f = dir.join("bad.ron");
    std::fs::write(&f, "Sweep(name: 1)").expect("write");
    let out = tessera(&[
        "dse",
        &f.to_string_lossy(),
        "--model",
        MODEL,
        "-o",
        &dir.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.ron:1:"));
}

fn run(dir: &Path, extra: &[&str]) -> Output {
    let d = dir.to_string_lossy().into_owned();
    let mut args = vec![
        "dse", SMALL, "--model", MODEL, "-o", &d, "--jobs", "2", "--quiet",
    ];
    args.extend_from_slice(extra);
    let out = tessera(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn read(dir: &Path, f: &str) -> String {
    std::fs::read_to_string(dir.join(f)).expect("report file")
}

/// Every report file a run writes.
const REPORTS: [&str; 6] = [
    "report.md",
    "report.html",
    "results.csv",
    "results.json",
    "pareto-latency-energy.svg",
    "pareto-latency-area.svg",
];

#[test]
fn runs_are_deterministic_resume_and_shards_merge_into_the_same_report() {
    let one = temp("one");
    run(&one, &[]);
    let lines = read(&one, "results.jsonl").lines().count();
    assert_eq!(lines, 7);
    // The same sweep again elsewhere: the same reports.
    let two = temp("two");
    run(&two, &[]);
    for f in REPORTS {
        assert_eq!(read(&one, f), read(&two, f), "{f}");
    }
    // Rerunning resumes: nothing is evaluated twice.
    let again = run(&one, &[]);
    assert!(String::from_utf8_lossy(&again.stderr).starts_with("0 pair(s) evaluated"));
    assert_eq!(read(&one, "results.jsonl").lines().count(), 7);
    // A killed run: the last line torn in the middle. It is cut off and
    // that pair evaluated again; nothing else is lost or duplicated.
    let text = read(&two, "results.jsonl");
    let cut = text.len() - text.lines().last().expect("lines").len() / 2 - 1;
    std::fs::write(two.join("results.jsonl"), &text[..cut]).expect("tear");
    let r = Results::open(&two.join("results.jsonl")).expect("opens");
    assert_eq!(r.records.len(), 6);
    let resumed = run(&two, &[]);
    assert!(String::from_utf8_lossy(&resumed.stderr).starts_with("1 pair(s) evaluated"));
    assert_eq!(read(&two, "results.jsonl").lines().count(), 7);
    assert_eq!(read(&one, "report.md"), read(&two, "report.md"));
    // Two shards, merged: exactly the single run's reports.
    let (s0, s1, merged) = (temp("s0"), temp("s1"), temp("merged"));
    run(&s0, &["--shard", "0/2"]);
    run(&s1, &["--shard", "1/2"]);
    assert_eq!(
        read(&s0, "results.jsonl").lines().count() + read(&s1, "results.jsonl").lines().count(),
        7
    );
    let out = tessera(&[
        "dse",
        "merge",
        &s0.to_string_lossy(),
        &s1.to_string_lossy(),
        "-o",
        &merged.to_string_lossy(),
        "--model",
        MODEL,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in REPORTS {
        assert_eq!(read(&one, f), read(&merged, f), "{f}");
    }
    // The Pareto front was simulated in full and matches the interpreter.
    assert!(read(&one, "report.md").contains("| match |"));
    assert!(!read(&one, "report.md").contains("DIFFER"));
    insta::assert_snapshot!("dse_small_report", read(&one, "report.md"));
    for d in [one, two, s0, s1, merged] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_run_killed_with_sigkill_resumes_without_losing_or_repeating_a_pair() {
    // The 309-variant sweep on a small model, killed (SIGKILL) after a
    // second, then run again to the end: every pair exactly once.
    let dir = temp("killed");
    let d = dir.to_string_lossy().into_owned();
    let sweep = "targets/variants/vliw-systolic-gpt2.ron";
    let args = [
        "dse", sweep, "--model", MODEL, "-o", &d, "--jobs", "2", "--quiet",
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .current_dir(root())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.kill().expect("killed");
    let _ = child.wait();
    let before = std::fs::read_to_string(dir.join("results.jsonl")).unwrap_or_default();
    let out = tessera(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = read(&dir, "results.jsonl");
    let keys: Vec<String> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a whole line");
            format!("{} {}", v["variant"], v["model"])
        })
        .collect();
    let unique: std::collections::BTreeSet<&String> = keys.iter().collect();
    assert_eq!(
        keys.len(),
        309,
        "{} lines before the rerun",
        before.lines().count()
    );
    assert_eq!(unique.len(), 309);
    // What was written before the kill is still there, unchanged.
    let whole: String = before
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .collect();
    assert!(text.starts_with(&whole));
    let _ = std::fs::remove_dir_all(dir);
}
