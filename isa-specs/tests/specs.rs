//! The spec corpus: `tests/specs/ok/*.isa` must check cleanly (snapshot: the
//! model as RON); `tests/specs/err/*.isa` must fail (snapshot: the plain
//! rendered diagnostics). A first line `// set: NAME=VALUE, ...` passes
//! parameter overrides, as `--set` does.

use std::path::Path;

fn relative(path: &Path) -> &Path {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(path)
}

fn overrides(path: &Path) -> Vec<(String, i64)> {
    let text = std::fs::read(path).unwrap_or_default();
    let first = String::from_utf8_lossy(&text).lines().next().unwrap_or("").to_owned();
    first
        .strip_prefix("// set:")
        .map(|list| list.split(',').map(|s| isa_specs::parse_override(s.trim()).expect("valid override in test header")).collect())
        .unwrap_or_default()
}

#[test]
fn ok_specs_check_cleanly() {
    insta::glob!("specs/ok/*.isa", |path| {
        let loaded = isa_specs::load_file(relative(path), &overrides(path))
            .unwrap_or_else(|failed| panic!("{} should check cleanly:\n{failed}", path.display()));
        assert_eq!(loaded.warnings.error_count(), 0);
        let model = ron::ser::to_string_pretty(&loaded.machine, ron::ser::PrettyConfig::default()).expect("model serialises");
        let warnings = loaded.warnings.render_plain(&loaded.sources);
        insta::assert_snapshot!(format!("{warnings}\n{model}"));
    });
}

#[test]
fn err_specs_report_errors() {
    insta::glob!("specs/err/*.isa", |path| {
        let failed = match isa_specs::load_file(relative(path), &overrides(path)) {
            Ok(_) => panic!("{} should have errors", path.display()),
            Err(f) => f,
        };
        assert!(failed.diagnostics.error_count() >= 1, "{}: no error reported", path.display());
        insta::assert_snapshot!(failed.diagnostics.render_plain(&failed.sources));
    });
}

/// Every diagnostic code except the coverage warnings is exercised by some error case.
#[test]
fn every_error_code_has_a_case() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs/err");
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("err corpus exists") {
        let path = entry.expect("readable dir").path();
        if path.extension().is_some_and(|e| e == "isa")
            && let Err(f) = isa_specs::load_file(relative(&path), &overrides(&path))
        {
            seen.extend(f.diagnostics.0.iter().map(|d| d.code));
        }
    }
    let missing: Vec<&str> = isa_specs::Code::ALL
        .iter()
        .filter(|c| c.severity() == isa_specs::Severity::Error && !seen.contains(c))
        .map(|c| c.as_str())
        .collect();
    assert!(missing.is_empty(), "error codes without a case in tests/specs/err: {missing:?}");
}

/// Every committed snapshot belongs to a corpus file that still exists.
#[test]
fn no_orphaned_snapshots() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut orphans = Vec::new();
    for entry in std::fs::read_dir(root.join("snapshots")).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((test, file)) = name.strip_suffix(".snap").and_then(|n| n.split_once('@')) else { continue };
        let dir = if test.contains("ok_specs") { "ok" } else { "err" };
        if !root.join("specs").join(dir).join(file).exists() {
            orphans.push(name);
        }
    }
    assert!(orphans.is_empty(), "snapshots without a corpus file (delete them): {orphans:?}");
}
