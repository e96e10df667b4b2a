//! The `tessera` command line: exit codes, JSON forms, dumps, the target list.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("tessera runs")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

const TOY: &str = "isa-specs/tests/specs/ok/toy.isa";

fn shipped() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root().join("targets"))
        .expect("targets folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "isa"))
        .map(|p| {
            format!(
                "targets/{}",
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn clean_file_exits_zero() {
    let out = tessera(&["check", TOY]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("machine `toy` checked"), "{err}");
}

#[test]
fn every_shipped_target_checks_without_errors() {
    let files = shipped();
    assert!(files.len() >= 4, "four machines ship: {files:?}");
    let mut args = vec!["check", "--format", "json"];
    args.extend(files.iter().map(String::as_str));
    let out = tessera(&args);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    for f in json["files"].as_array().expect("files") {
        assert_eq!(f["errors"], 0, "{f}");
        assert_eq!(f["ok"], true, "{f}");
    }
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn errors_exit_one_with_located_json() {
    let out = tessera(&[
        "check",
        "--format",
        "json",
        "isa-specs/tests/specs/err/undefined_unit.isa",
        TOY,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let bad = &json["files"][0];
    assert_eq!(bad["ok"], false);
    let d = &bad["diagnostics"][0];
    assert_eq!(d["code"], "E0501");
    assert!(d["primary"]["line"].as_u64().is_some_and(|l| l > 1));
    assert!(d["primary"]["column"].as_u64().is_some());
    assert_eq!(json["files"][1]["ok"], true);
}

#[test]
fn human_errors_show_code_place_caret_and_help() {
    let out = tessera(&["check", "isa-specs/tests/specs/err/undefined_unit.isa"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error[E0501]: unknown unit `alux`"), "{err}");
    assert!(err.contains("undefined_unit.isa:9:"), "{err}");
    assert!(err.contains("^^^^"), "{err}");
    assert!(err.contains("help: did you mean `alu`?"), "{err}");
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(tessera(&["check"]).status.code(), Some(2));
    assert_eq!(
        tessera(&["check", TOY, "--set", "novalue"]).status.code(),
        Some(2)
    );
    assert_eq!(
        tessera(&["check", TOY, "--format", "xml"]).status.code(),
        Some(2)
    );
    assert_eq!(tessera(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn set_overrides_parameters_and_unknown_ones_fail() {
    let out = tessera(&[
        "check",
        TOY,
        "--set",
        "SRAM=32KiB",
        "--dump",
        "json",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mems = json["files"][0]["model"]["memories"]
        .as_array()
        .expect("memories")
        .clone();
    let sram = mems.iter().find(|m| m["name"] == "sram").expect("sram");
    assert_eq!(sram["size"]["value"], 32 * 1024);
    let out = tessera(&["check", TOY, "--set", "SRAMX=1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("E0207"));
}

#[test]
fn ron_dump_is_the_model() {
    let out = tessera(&["check", TOY, "--dump", "ron"]);
    assert_eq!(out.status.code(), Some(0));
    let m: isa_specs::Machine =
        ron::from_str(&String::from_utf8_lossy(&out.stdout)).expect("RON model on stdout");
    assert_eq!(m.name, "toy");
}

#[test]
fn targets_lists_every_shipped_machine() {
    let out = tessera(&["targets", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(rows.len(), shipped().len());
    for r in &rows {
        assert!(
            r["peak_macs_per_cycle"].as_i64().is_some_and(|v| v > 0),
            "{r}"
        );
        assert!(r["sram_bytes"].as_i64().is_some_and(|v| v > 0), "{r}");
        assert!(
            r["offchip_bytes_per_cycle"].as_i64().is_some_and(|v| v > 0),
            "{r}"
        );
        assert!(r["clock_mhz"].as_i64().is_some_and(|v| v > 0), "{r}");
    }
    let human = tessera(&["targets"]);
    let text = String::from_utf8_lossy(&human.stdout);
    for r in &rows {
        assert!(text.contains(r["name"].as_str().unwrap_or("?")), "{text}");
    }
}

#[test]
fn help_documents_exit_codes() {
    let out = tessera(&["check", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Exit codes:") && text.contains("1  the input has errors"),
        "{text}"
    );
}
