//! Every generated Rust file of the toy target, as snapshots (each generator
//! change is reviewed as a diff), and generation is deterministic. The
//! co-design test (a new instruction reaches every artifact) is in
//! `simulator-gen/tests/codesign.rs`, which sees both generators.

use std::path::Path;

fn root() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .display()
        .to_string()
}

fn load(text: Option<&str>) -> isa_specs::Loaded {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/toy.isa");
    match text {
        None => isa_specs::load_file(&path, &[]).unwrap_or_else(|f| panic!("{f}")),
        Some(t) => isa_specs::load_source(&path.display().to_string(), t, &[])
            .unwrap_or_else(|f| panic!("{f}")),
    }
}

fn generate(loaded: &isa_specs::Loaded) -> Vec<codegen_gen::GeneratedFile> {
    let root = root();
    let ctx = codegen_gen::Ctx::new(loaded, "codegen-gen/tests/toy.isa", &root);
    codegen_gen::generate_all(&ctx)
}

#[test]
fn toy_generated_files() {
    let loaded = load(None);
    for file in generate(&loaded) {
        assert!(
            file.text
                .starts_with("// @generated from codegen-gen/tests/toy.isa"),
            "{}",
            file.artifact
        );
        assert!(
            !file.text.contains(&root()),
            "{}: absolute path in generated code",
            file.artifact
        );
        insta::assert_snapshot!(format!("toy_{}", file.artifact), file.text);
    }
}

#[test]
fn generation_is_deterministic() {
    let (a, b) = (generate(&load(None)), generate(&load(None)));
    assert_eq!(a, b);
}
