//! The `tessera` command line: exit codes, JSON forms, dumps, the target list.

mod cli_util;
use cli_util::{root, tessera};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// One bundle per instruction of a target, with operands taken from the target's encoding-table snapshot.
fn sample_program(target: &str) -> String {
    let snap = root().join(format!(
        "targets/tests/snapshots/roundtrip__encoding_table_{target}.snap"
    ));
    let text = std::fs::read_to_string(snap).expect("encoding table snapshot");
    text.lines()
        .skip_while(|l| !l.starts_with("instruction"))
        .skip(1)
        .map(|l| l.split_whitespace().skip(2).collect::<Vec<_>>().join(" "))
        .filter(|asm| !asm.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn asm_disasm_round_trip_on_every_target() {
    let dir = temp_dir("asm");
    for target in shipped().iter().map(|f| {
        f.trim_start_matches("targets/")
            .trim_end_matches(".isa")
            .to_owned()
    }) {
        let src = dir.join(format!("{target}.s"));
        std::fs::write(&src, sample_program(&target)).expect("write asm");
        let prog = dir.join(format!("{target}.tsr"));
        let out = tessera(&[
            "asm",
            src.to_str().expect("utf8"),
            "--target",
            &target,
            "-o",
            prog.to_str().expect("utf8"),
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{target}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dis = tessera(&["disasm", prog.to_str().expect("utf8")]);
        assert_eq!(
            dis.status.code(),
            Some(0),
            "{target}: {}",
            String::from_utf8_lossy(&dis.stderr)
        );
        let again = dir.join(format!("{target}-again.s"));
        std::fs::write(&again, &dis.stdout).expect("write");
        let prog2 = dir.join(format!("{target}-again.tsr"));
        let out = tessera(&[
            "asm",
            again.to_str().expect("utf8"),
            "--target",
            &target,
            "-o",
            prog2.to_str().expect("utf8"),
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{target}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read(&prog).expect("read"),
            std::fs::read(&prog2).expect("read"),
            "{target}: asm(disasm(p)) == p"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn asm_errors_are_located_and_bad_programs_refused() {
    let dir = temp_dir("asmerr");
    let src = dir.join("bad.s");
    std::fs::write(
        &src,
        "halt\nfrobnicate 1, 2\n.input x nowhere @0x0 f32 [2]\n",
    )
    .expect("write");
    let prog = dir.join("bad.tsr");
    let out = tessera(&[
        "asm",
        src.to_str().expect("utf8"),
        "--target",
        "systolic-os",
        "-o",
        prog.to_str().expect("utf8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.s:2: unknown instruction `frobnicate`"),
        "{err}"
    );
    assert!(err.contains("bad.s:3: unknown memory `nowhere`"), "{err}");
    assert!(!prog.exists(), "no program written on errors");
    let out = tessera(&[
        "asm",
        src.to_str().expect("utf8"),
        "--target",
        "no-such-target",
        "-o",
        "x.tsr",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown target `no-such-target`"));
    // A good program, then damaged copies of it.
    let (out, prog) = assemble(&dir, "good", "halt\n", "systolic-os", &["--set", "ROWS=16"]);
    ok(&out);
    let bytes = std::fs::read(&prog).expect("read");
    let truncated = dir.join("truncated.tsr");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let out = tessera(&["disasm", truncated.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("truncated"));
    let out = tessera(&["disasm", prog.to_str().expect("utf8"), "--set", "ROWS=32"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ROWS = 16 in the file, 32 now"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `text` to `dir/name.s` and assembles it for `target` (plus `extra` arguments) into `dir/name.tsr`.
fn assemble(dir: &Path, name: &str, text: &str, target: &str, extra: &[&str]) -> (Output, PathBuf) {
    let src = dir.join(format!("{name}.s"));
    std::fs::write(&src, text).expect("write assembly");
    let prog = dir.join(format!("{name}.tsr"));
    let mut args = vec![
        "asm",
        src.to_str().expect("utf8"),
        "--target",
        target,
        "-o",
        prog.to_str().expect("utf8"),
    ];
    args.extend_from_slice(extra);
    (tessera(&args), prog)
}

fn ok(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const MATMUL_SYSTOLIC_OS: &str = "\
.input  a dram @0x0    bf16 [4, 8]
.input  b dram @0x1000 bf16 [8, 4]
.output c dram @0x2000 f32  [4, 4]
ld_ifmap sem0, 4, 8, 8, @0x0, @0x0
ld_filter sem1, 8, 4, 4, @0x1000, @0x0
wait sem0
wait sem1
mmul 4, 8, 4, @0x0, @0x0, @0x0
st_ofmap sem2, 4, 4, 4, @0x0, @0x2000
wait sem2
halt
";

#[test]
fn sim_reports_cycles_utilisation_traffic_energy_and_a_trace() {
    let dir = temp_dir("sim");
    let (out, prog) = assemble(&dir, "mm", MATMUL_SYSTOLIC_OS, "systolic-os", &[]);
    ok(&out);
    let trace = dir.join("trace.json");
    let out = tessera(&[
        "sim",
        prog.to_str().expect("utf8"),
        "--format",
        "json",
        "--trace",
        trace.to_str().expect("utf8"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    // ld_ifmap 0..101, ld_filter 1..102, waits at 101 and 102, mmul at 103 (70 cycles), st_ofmap 173..274, wait 274, halt 275.
    assert_eq!(r["cycles"], 276, "{r}");
    assert!(
        r["utilisation"]["array"]
            .as_f64()
            .is_some_and(|u| (u - 70.0 / 276.0).abs() < 1e-9),
        "{r}"
    );
    assert_eq!(r["bytes"]["dram"]["read"], 128);
    assert_eq!(r["bytes"]["dram"]["written"], 64);
    assert!(r["energy_pj"].as_f64().is_some_and(|e| e > 0.0));
    assert_eq!(r["outputs"][0]["name"], "c");
    let t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).expect("trace written")).expect("trace JSON");
    let events = t["traceEvents"].as_array().expect("events");
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "M" && e["args"]["name"] == "array"),
        "a track per unit"
    );
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "X" && e["name"] == "mmul" && e["ts"] == 103 && e["dur"] == 70)
    );
    // Timing only: same cycles, no data.
    let fast = tessera(&[
        "sim",
        prog.to_str().expect("utf8"),
        "--format",
        "json",
        "--timing-only",
    ]);
    let f: serde_json::Value = serde_json::from_slice(&fast.stdout).expect("JSON");
    assert_eq!(f["cycles"], 276);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sim_reports_faults_with_exit_one() {
    let dir = temp_dir("simfault");
    let (out, prog) = assemble(&dir, "bad", "wait sem3\nhalt\n", "systolic-os", &[]);
    ok(&out);
    let out = tessera(&["sim", prog.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("deadlock"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn doc_writes_the_manual_for_every_target() {
    let dir = temp_dir("doc");
    for target in targets::names() {
        let out = tessera(&["doc", "--target", target, "-o", dir.to_str().expect("utf8")]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let md = std::fs::read_to_string(dir.join(format!("{target}.md"))).expect("markdown");
        let html = std::fs::read_to_string(dir.join(format!("{target}.html"))).expect("html");
        let m = targets::by_name(target).expect("target").machine();
        for inst in &m.instructions {
            assert!(
                md.contains(&inst.name) && html.contains(&inst.name),
                "{target}: {}",
                inst.name
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sim_reads_inputs_in_the_onnx_backend_test_layout() {
    use prost::Message as _;
    let dir = temp_dir("simpb");
    let (out, prog) = assemble(&dir, "mm", MATMUL_SYSTOLIC_OS, "systolic-os", &[]);
    ok(&out);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("dir");
    // a = all 1 (4 x 8), b = all 0.5 (8 x 4): every element of c is 8 * 0.5 = 4.
    let a = compiler::onnx::proto::TensorProto::from_f32("a", &[4, 8], &[1.0; 32]);
    let b = compiler::onnx::proto::TensorProto::from_f32("b", &[8, 4], &[0.5; 32]);
    std::fs::write(data.join("input_0.pb"), a.encode_to_vec()).expect("write");
    std::fs::write(data.join("input_1.pb"), b.encode_to_vec()).expect("write");
    let outs = dir.join("out");
    let out = tessera(&[
        "sim",
        prog.to_str().expect("utf8"),
        "--inputs",
        data.to_str().expect("utf8"),
        "--outputs",
        outs.to_str().expect("utf8"),
        "--format",
        "json",
    ]);
    ok(&out);
    let c = std::fs::read(outs.join("c.bin")).expect("output written");
    let values: Vec<f32> = c
        .chunks(4)
        .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        .collect();
    assert_eq!(values, vec![4.0; 16]);
    let _ = std::fs::remove_dir_all(&dir);
}

fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn run_checks_an_example_and_reports_in_json() {
    let out = tessera(&[
        "run",
        "examples/mlp_small/model.onnx",
        "--target",
        "systolic-os",
        "--data",
        "examples/mlp_small/test_data_set_0",
        "--format",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    for key in [
        "target",
        "cycles",
        "seconds",
        "roofline_cycles",
        "efficiency",
        "utilisation",
        "bytes",
        "energy_pj",
        "outputs",
    ] {
        assert!(v.get(key).is_some(), "missing `{key}` in {v}");
    }
    assert_eq!(v["target"], "systolic-os");
    let o = &v["outputs"][0];
    assert_eq!(o["name"], "output");
    assert_eq!(o["ok"], true);
    assert!(o["max_abs_err"].as_f64().is_some() && o["max_rel_err"].as_f64().is_some());
    let eff = v["efficiency"].as_f64().expect("efficiency");
    assert!(eff > 0.0 && eff <= 1.0, "efficiency {eff}");
}

#[test]
fn run_without_data_uses_seeded_inputs() {
    let out = tessera(&[
        "run",
        "examples/matmul_bias_relu_small/model.onnx",
        "-t",
        "pim-dram",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn run_exits_one_when_an_output_is_off() {
    // Expected outputs that do not match the model: the run must fail.
    let dir = std::env::temp_dir().join(format!("tessera-cli-wrong-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::copy(
        root().join("examples/mlp_small/test_data_set_0/input_0.pb"),
        dir.join("input_0.pb"),
    )
    .expect("copy");
    std::fs::copy(
        root().join("examples/matmul_bias_relu_small/test_data_set_0/output_0.pb"),
        dir.join("output_0.pb"),
    )
    .expect("copy");
    let out = tessera(&[
        "run",
        "examples/mlp_small/model.onnx",
        "-t",
        "vliw-systolic",
        "--data",
        &dir.display().to_string(),
        "--format",
        "json",
    ]);
    // The interpreter agrees with the program; the stored output is another model's (another shape).
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    assert_eq!(v["outputs"][0]["ok"], false, "{v}");
    assert!(
        v["outputs"][0]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("shape")),
        "{v}"
    );
    assert!(
        v["outputs"][0]["max_abs_err"]
            .as_f64()
            .is_some_and(|e| e < 0.1),
        "{v}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compile_writes_a_program_that_sim_runs() {
    let dir = std::env::temp_dir().join(format!("tessera-cli-compile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let prog = dir.join("mlp.tsr");
    let out = tessera(&[
        "compile",
        "examples/mlp_small/model.onnx",
        "-t",
        "simd-dsp",
        "-o",
        &prog.display().to_string(),
        "--emit",
        "ir,report",
        "--format",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    assert!(
        v["ir"]["nodes"].as_array().is_some_and(|n| !n.is_empty()),
        "{v}"
    );
    assert!(v["report"]["roofline"]["cycles"].as_u64().is_some(), "{v}");
    // The report times each pass, the back end's among them.
    let passes: Vec<&str> = v["report"]["passes"]
        .as_array()
        .map(|p| p.iter().filter_map(|x| x["pass"].as_str()).collect())
        .unwrap_or_default();
    for pass in ["lower", "registers", "schedule", "check schedule", "encode"] {
        assert!(passes.contains(&pass), "{pass} missing from {passes:?}");
    }
    let sim = tessera(&[
        "sim",
        &prog.display().to_string(),
        "--inputs",
        "examples/mlp_small/test_data_set_0",
    ]);
    assert_eq!(
        sim.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    // It reads back as assembly naming its inputs.
    let disasm = tessera(&["disasm", &prog.display().to_string()]);
    assert_eq!(disasm.status.code(), Some(0));
    let text = String::from_utf8_lossy(&disasm.stdout);
    assert!(text.contains(".input input"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compile_emits_every_stage_as_text() {
    let out = tessera(&[
        "compile",
        "examples/matmul_bias_relu_small/model.onnx",
        "-t",
        "vliw-systolic",
        "--emit",
        "ir,asm,schedule,report",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for section in ["== ir ==", "== asm ==", "== schedule ==", "== report =="] {
        assert!(text.contains(section), "missing {section}");
    }
    assert!(text.contains("mmul_z"), "{text}");
}

#[test]
fn time_passes_prints_each_pass_and_the_total_to_stderr() {
    let out = tessera(&[
        "compile",
        "examples/mlp_small/model.onnx",
        "-t",
        "vliw-systolic",
        "--time-passes",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    for pass in ["read", "import", "lower", "buffers", "dependences", "total"] {
        assert!(
            err.lines()
                .any(|l| l.starts_with(pass) && l.contains(" ms")),
            "{pass} missing:\n{err}"
        );
    }
    // Standard output keeps only what it had.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("total"));
}

#[test]
fn compile_refuses_a_missing_or_malformed_model() {
    let out = tessera(&["compile", "no/such/model.onnx", "-t", "vliw-systolic"]);
    assert_eq!(out.status.code(), Some(2));
    let out = tessera(&["compile", "README.md", "-t", "vliw-systolic"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tessera(&[
        "compile",
        "examples/mlp_small/model.onnx",
        "-t",
        "no-such-target",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn demo_runs_with_no_arguments() {
    let out = tessera(&["demo"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cycles") && text.contains("ok"), "{text}");
}

#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    // `tessera compile … --emit asm | head`: far more output than a pipe holds.
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/mlp_medium/model.onnx");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "compile",
            model.to_str().expect("path"),
            "-t",
            "vliw-systolic",
            "--emit",
            "asm",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    let mut first = [0u8; 64];
    std::io::Read::read_exact(child.stdout.as_mut().expect("stdout"), &mut first).expect("reads");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("waits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
}

#[test]
fn emitted_mappings_read_back_and_bad_ones_are_refused() {
    let dir = std::env::temp_dir().join(format!("tessera-cli-mappings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let model = "examples/mlp_small/model.onnx";
    let out = tessera(&[
        "compile",
        model,
        "-t",
        "vliw-systolic",
        "--emit",
        "mappings,space",
        "--format",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["space"]["products"].as_array().map(Vec::len), Some(2));
    let file = dir.join("m.json");
    std::fs::write(
        &file,
        serde_json::to_string(&json["mappings"]).expect("json"),
    )
    .expect("write");
    let f = file.to_string_lossy().into_owned();
    // Read back on the machine they were chosen for: the same program.
    let a = tessera(&["compile", model, "-t", "vliw-systolic", "--emit", "asm"]);
    let b = tessera(&[
        "compile",
        model,
        "-t",
        "vliw-systolic",
        "--emit",
        "asm",
        "--mapping",
        &f,
    ]);
    assert_eq!(
        b.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&b.stderr)
    );
    assert_eq!(a.stdout, b.stdout);
    // Another machine refuses them (exit 1, the reason given).
    let c = tessera(&["compile", model, "-t", "simd-dsp", "--mapping", &f]);
    assert_eq!(c.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&c.stderr).contains("chosen for `vliw-systolic`"));
    // Malformed JSON is a usage error, located.
    std::fs::write(&file, "{\"mappings\": {").expect("write");
    let d = tessera(&["compile", model, "-t", "vliw-systolic", "--mapping", &f]);
    assert_eq!(d.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&d.stderr).contains("line 1"));
    // --tune reports what it did.
    let e = tessera(&[
        "run",
        model,
        "-t",
        "simd-dsp",
        "--tune",
        "--tune-budget",
        "5",
    ]);
    assert_eq!(
        e.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
    assert!(String::from_utf8_lossy(&e.stdout).contains("tuned "));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn model_errors_carry_their_help_and_are_json_under_format_json() {
    use compiler::onnx::proto::{GraphProto, ModelProto, NodeProto, ValueInfoProto};
    use prost::Message as _;
    let dir = temp_dir("modelerr");
    let graph = GraphProto {
        node: vec![
            NodeProto::new("Hardmax", "hs1", &["x"], &["h"]),
            NodeProto::new("StringNormalizer", "up", &["h"], &["r"]),
            NodeProto::new("Hardmax", "hs2", &["r"], &["y"]),
        ],
        name: "g".to_owned(),
        input: vec![ValueInfoProto::tensor(
            "x",
            compiler::onnx::proto::tensor_proto::DataType::Float,
            &[1, 4],
        )],
        output: vec![ValueInfoProto {
            name: "y".to_owned(),
            ..ValueInfoProto::default()
        }],
        ..GraphProto::default()
    };
    let model = dir.join("m.onnx");
    std::fs::write(&model, ModelProto::with_graph(graph, 17).encode_to_vec()).expect("write");
    let path = model.to_str().expect("utf8");

    let out = tessera(&["compile", path, "-t", "vliw-systolic"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 unsupported op(s) at 3 nodes"), "{err}");
    assert!(err.contains("help: supported ops: "), "{err}");

    let out = tessera(&["compile", path, "-t", "vliw-systolic", "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let e = &v["error"];
    assert_eq!(e["stage"], "import");
    let ops: Vec<&str> = e["unsupported"]
        .as_array()
        .expect("the unsupported ops")
        .iter()
        .map(|g| g["op"].as_str().expect("op"))
        .collect();
    assert_eq!(ops, ["Hardmax", "StringNormalizer"]);
    assert_eq!(e["unsupported"][0]["nodes"][1]["name"], "hs2");
    assert!(
        e["help"]
            .as_str()
            .is_some_and(|h| h.starts_with("supported ops: "))
    );

    // A model the machine refuses (under --strict, as systolic-os has no
    // exp): the kind, node and op as fields.
    let gpt2 = root().join("examples/gpt2_block_small/model.onnx");
    let out = tessera(&[
        "compile",
        gpt2.to_str().expect("utf8"),
        "-t",
        "systolic-os",
        "--strict",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let e = &v["error"];
    assert_eq!(e["stage"], "compile");
    assert_eq!(e["kind"], "missing_operation");
    assert_eq!(e["op"], "Exp");
    assert!(
        e["node"].as_str().is_some_and(|n| n.ends_with("exp")),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
