//! `lower/`, `sched/` and `onnx/ops/` import no module in a circle
//! (`scripts/module-graph.py` prints each graph and fails on a cycle).

use std::path::Path;
use std::process::Command;

#[test]
fn the_compilers_module_folders_have_no_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["src/lower", "src/sched", "src/onnx/ops"] {
        let out = Command::new("python3")
            .arg(root.join("../scripts/module-graph.py"))
            .arg(root.join(dir))
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "{dir}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("cycles: none"));
    }
}
