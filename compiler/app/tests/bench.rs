//! `tessera bench`: the listing, the JSON results, and `--compare`'s exit codes.

mod cli_util;
use cli_util::tessera;
use std::path::{Path, PathBuf};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh scratch folder under the target directory.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch folder");
    d
}

#[test]
fn the_small_set_is_listed() {
    let out = tessera(&["bench", "--list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list = text(&out.stdout);
    for w in [
        "mlp_small",
        "gpt2_block_small",
        "gemm_64x64x64",
        "gemm_128x128x128",
    ] {
        assert!(list.contains(w), "{w} missing from\n{list}");
    }
    assert!(!list.contains("gemm_1024"), "{list}");
    let full = text(&tessera(&["bench", "--list", "--size", "full"]).stdout);
    assert!(full.contains("gemm_1024x1024x1024"), "{full}");
    assert!(full.contains("cnn_small"), "{full}");
}

#[test]
fn usage_errors_exit_two() {
    let out = tessera(&["bench", "--workload", "no_such_workload"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = tessera(&["bench", "--target", "no-such-target", "-w", "gemm_64"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("unknown target"));
}

#[test]
fn results_are_written_as_json_and_compared() {
    let dir = scratch("bench");
    let json = dir.join("out.json");
    let json_s = json.to_str().expect("utf-8 path");
    let out = tessera(&[
        "bench",
        "--target",
        "vliw-systolic",
        "--workload",
        "mlp_small",
        "--workload",
        "gemm_64",
        "--ablate",
        "--json",
        json_s,
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("mlp_small") && stdout.contains("gemm_64x64x64"),
        "{stdout}"
    );

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("written")).expect("JSON");
    assert_eq!(report["version"], 1);
    assert_eq!(report["size"], "small");
    let results = report["results"].as_array().expect("results");
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["workload"].as_str().expect("workload"))
        .collect();
    assert_eq!(names, ["mlp_small", "gemm_64x64x64"]);
    for r in results {
        assert_eq!(r["target"], "vliw-systolic");
        assert_eq!(r["status"], "ok", "{r}");
        let cycles = r["cycles"].as_u64().expect("cycles");
        let roofline = r["roofline_cycles"].as_u64().expect("roofline");
        assert!(cycles > 0 && roofline > 0 && roofline <= cycles, "{r}");
        let eff = r["efficiency"].as_f64().expect("efficiency");
        assert!((eff - roofline as f64 / cycles as f64).abs() < 1e-12, "{r}");
        for f in ["compile_ms", "sim_ms"] {
            assert!(r[f].as_f64().expect(f) >= 0.0, "{r}");
        }
        for f in ["instructions", "bundles"] {
            assert!(r[f].as_u64().expect(f) > 0, "{r}");
        }
        // No attention here: the program is the same with fusion off.
        assert_eq!(r["ablation"]["fuse_attention"], 1.0, "{r}");
    }

    // The same file against itself: nothing changed.
    let out = tessera(&["bench", "--compare", json_s, "--new", json_s]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("0 regression(s)"));

    // An old run that took fewer cycles: the new one regressed.
    let mut doctored = report.clone();
    let first = &mut doctored["results"][0];
    let fewer = first["cycles"].as_u64().expect("cycles") * 9 / 10;
    first["cycles"] = fewer.into();
    let old = dir.join("old.json");
    std::fs::write(&old, doctored.to_string()).expect("written");
    let old_s = old.to_str().expect("utf-8 path");
    let out = tessera(&["bench", "--compare", old_s, "--new", json_s]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("REGRESSION"), "{stdout}");
    assert!(stdout.contains("1 regression(s)"), "{stdout}");

    // Running again and comparing with the stored results: the simulator
    // is deterministic, so the same cycles; against the doctored file, a regression.
    let run = |old: &str| {
        tessera(&[
            "bench",
            "-t",
            "vliw-systolic",
            "-w",
            "mlp_small",
            "--compare",
            old,
        ])
    };
    let out = run(json_s);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = run(old_s);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
}

/// `tessera bench ARGS --json FILE` in scratch folder `name`: it exits 0,
/// and the first result of the report.
fn first_result(name: &str, args: &[&str]) -> serde_json::Value {
    let json = scratch(name).join("out.json");
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend(["--json", json.to_str().expect("utf-8 path")]);
    let out = tessera(&all);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("written")).expect("JSON");
    report["results"][0].clone()
}

#[test]
fn a_target_that_cannot_compile_is_refused_not_failed() {
    // systolic-os has no exp: under --strict the GPT-2 block's softmax is refused.
    let r = first_result(
        "bench-refused",
        &["-t", "systolic-os", "-w", "gpt2_block_small", "--strict"],
    );
    assert_eq!(r["status"], "refused", "{r}");
    assert!(r["cycles"].is_null(), "{r}");
    let e = r["error"].as_str().expect("error");
    assert!(e.contains("exp"), "{e}");
}

#[test]
fn a_gemm_past_the_budget_is_skipped() {
    let r = first_result(
        "bench-skipped",
        &[
            "-t",
            "vliw-systolic",
            "-w",
            "gemm_64",
            "--max-bound-cycles",
            "1",
        ],
    );
    assert_eq!(r["status"], "skipped", "{r}");
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("compute bound")),
        "{r}"
    );
}
