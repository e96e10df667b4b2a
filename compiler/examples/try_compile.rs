//! Scratch: compile and run every bundled example on every target, printing the outcome.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let filter_t = args.get(1).cloned();
    let filter_m = args.get(2).cloned();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut models: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(Result::ok).map(|e| e.path()).filter(|p| p.join("model.onnx").exists()).collect();
    models.sort();
    for t in targets::all() {
        if filter_t.as_ref().is_some_and(|f| f != t.name()) { continue; }
        for p in &models {
            if filter_m.as_ref().is_some_and(|f| !p.to_string_lossy().contains(f.as_str())) { continue; }
            let mut g = compiler::onnx::import_file(p.join("model.onnx")).unwrap();
            compiler::interp::fold_constants(&mut g);
            let inputs = compiler::run::random_inputs(&g, 1);
            let t0 = std::time::Instant::now();
            match compiler::run::run(t, t.machine(), &g, &inputs, None) {
                Ok(r) => println!("{} {}: cycles {} insts {} checks {:?} ({:?})", t.name(), p.file_name().unwrap().to_string_lossy(), r.report.cycles, r.compiled.insts.len(), r.checks, t0.elapsed()),
                Err(e) => println!("{} {}: ERROR {e}", t.name(), p.file_name().unwrap().to_string_lossy()),
            }
        }
    }
}
