//! The simulator core of the toy target as a snapshot, determinism, and the
//! co-design test: an instruction added to a copy of a spec reaches the
//! generated enum, encoder, assembler, scheduling tables, selector patterns,
//! manual and simulator, with no Rust edit.

use std::path::Path;

fn root() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .display()
        .to_string()
}

fn toy_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../codegen-gen/tests/toy.isa")
}

fn load(text: Option<&str>) -> isa_specs::Loaded {
    let path = toy_path();
    match text {
        None => isa_specs::load_file(&path, &[]).unwrap_or_else(|f| panic!("{f}")),
        Some(t) => isa_specs::load_source(&path.display().to_string(), t, &[])
            .unwrap_or_else(|f| panic!("{f}")),
    }
}

#[test]
fn toy_simulator_core() {
    let loaded = load(None);
    let root = root();
    let ctx = codegen_gen::Ctx::new(&loaded, "codegen-gen/tests/toy.isa", &root);
    let file = simulator_gen::generate(&ctx);
    assert_eq!(file, simulator_gen::generate(&ctx), "deterministic");
    assert!(
        file.text
            .starts_with("// @generated from codegen-gen/tests/toy.isa")
    );
    insta::assert_snapshot!("toy_exec", file.text);
}

#[test]
fn a_new_instruction_reaches_every_artifact() {
    let base = std::fs::read_to_string(toy_path()).expect("toy");
    let added = format!(
        "{base}\ninst vtanh {{\n    doc = \"element-wise tanh\";\n    operands {{ d : reg v; a : reg v; }}\n    semantics {{ d[i] = tanh(a[i]); }}\n    timing {{ unit = valu; latency = 7; }}\n    encoding R {{ op = 0x04; d = d; a = a; }}\n    energy = 2.5 * VLEN;\n}}\n"
    );
    let loaded = load(Some(&added));
    let root = root();
    let ctx = codegen_gen::Ctx::new(&loaded, "codegen-gen/tests/toy.isa", &root);
    let files = codegen_gen::generate_all(&ctx);
    let text = |artifact: &str| {
        files
            .iter()
            .find(|f| f.artifact == artifact)
            .map(|f| f.text.clone())
            .unwrap_or_default()
    };
    assert!(text("inst").contains("Vtanh {"), "enum variant");
    assert!(text("inst").contains("\"vtanh\""), "mnemonic");
    assert!(
        text("encode").contains("Inst::Vtanh"),
        "encoder and decoder"
    );
    assert!(text("asm").contains("\"vtanh\" =>"), "assembly parser");
    assert!(text("sched").contains("Inst::Vtanh"), "scheduling tables");
    assert!(
        text("select").contains("`vtanh`: d\\[i\\] = tanh(a\\[i\\]);")
            && text("select").contains("Func::Tanh"),
        "selector pattern"
    );
    let exec = simulator_gen::generate(&ctx).text;
    assert!(
        exec.contains("Inst::Vtanh") && exec.contains("func::tanh"),
        "simulator"
    );
    let manual = codegen_gen::gen_docs::manual_markdown(&ctx).expect("manual renders");
    assert!(
        manual.contains("vtanh") && manual.contains("tanh(a[i])"),
        "manual"
    );
}
