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

/// A real-model case whose inputs include an integer scalar (a sample
/// rate) that an `If` tests: the suite binds it to its test value, as a
/// deployment fixes it, so the program is the branch taken. Left at run
/// time, Silero VAD computed both branches and a select (twice the
/// cycles), and its `If` form did not import at all.
#[test]
fn the_real_suite_binds_an_integer_scalar_an_if_tests() {
    use compiler::onnx::proto::attribute_proto::AttributeType;
    use compiler::onnx::proto::tensor_proto::DataType;
    use compiler::onnx::proto::{
        AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
    };
    use prost::Message;
    let out = |name: &str| ValueInfoProto {
        name: name.to_owned(),
        ..ValueInfoProto::default()
    };
    let branch = |name: &str, k: f32| GraphProto {
        name: name.to_owned(),
        node: vec![NodeProto::new(
            "Mul",
            name,
            &["x", name],
            &[&format!("{name}_y")],
        )],
        initializer: vec![TensorProto::from_f32(name, &[], &[k])],
        output: vec![out(&format!("{name}_y"))],
        ..GraphProto::default()
    };
    let graph_attr = |name: &str, g: GraphProto| AttributeProto {
        name: name.to_owned(),
        r#type: AttributeType::Graph as i32,
        g: Some(g),
        ..AttributeProto::default()
    };
    let g = GraphProto {
        name: "vad".to_owned(),
        node: vec![
            NodeProto::new("Equal", "is16k", &["sr", "k16"], &["c"]),
            NodeProto::new("If", "rate", &["c"], &["y"])
                .with(graph_attr("then_branch", branch("twice", 2.0)))
                .with(graph_attr("else_branch", branch("halved", 0.5))),
        ],
        initializer: vec![TensorProto::from_i64("k16", &[], &[16000])],
        input: vec![
            ValueInfoProto::tensor("x", DataType::Float, &[4, 64]),
            ValueInfoProto::tensor("sr", DataType::Int64, &[]),
        ],
        output: vec![out("y")],
        ..GraphProto::default()
    };
    let dir = scratch("bench-real-bind");
    let case = dir.join("vad");
    let data = case.join("test_data_set_0");
    std::fs::create_dir_all(&data).expect("case folder");
    let write = |p: PathBuf, b: Vec<u8>| std::fs::write(p, b).expect("written");
    write(
        case.join("model.onnx"),
        ModelProto::with_graph(g, 17).encode_to_vec(),
    );
    let x: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) / 64.0).collect();
    let y: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
    write(
        data.join("input_0.pb"),
        TensorProto::from_f32("x", &[4, 64], &x).encode_to_vec(),
    );
    write(
        data.join("input_1.pb"),
        TensorProto::from_i64("sr", &[], &[16000]).encode_to_vec(),
    );
    write(
        data.join("output_0.pb"),
        TensorProto::from_f32("y", &[4, 64], &y).encode_to_vec(),
    );
    let o = tessera(&[
        "bench",
        "--suite",
        "real",
        "--real-dir",
        dir.to_str().expect("utf-8 path"),
        "-t",
        "vliw-systolic",
    ]);
    let stdout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}{}", text(&o.stderr));
    assert!(stdout.contains("bound when compiling: sr"), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("vad "))
        .unwrap_or_else(|| panic!("no row: {stdout}"));
    assert!(row.contains(" ok "), "{row}");
}
