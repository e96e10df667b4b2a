//! Helpers shared by the tests that run the hand-written programs.

use isa_specs::program::Program;
use std::path::{Path, PathBuf};

/// Every hand-written program of every target: `(target name, file)`.
pub fn programs() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../targets/tests/programs");
    let mut out = Vec::new();
    for t in targets::all() {
        let dir = root.join(t.name());
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "s"))
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|f| (t.name().to_owned(), f)));
    }
    out
}

/// Seeded pseudo-random values for every input of a program.
pub fn inputs(p: &Program) -> Vec<(String, Vec<u8>)> {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    p.inputs
        .iter()
        .map(|t| {
            let n = t.shape.iter().product::<u64>();
            let bytes = (0..n)
                .flat_map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let x = (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                    targets::sim::to_bytes(t.dtype, x)[..t.dtype.bytes() as usize].to_vec()
                })
                .collect();
            (t.name.clone(), bytes)
        })
        .collect()
}

/// The bytes of every output of a program after a run.
pub fn outputs(t: &targets::Target, p: &Program, o: &mut targets::sim::Outcome) -> Vec<Vec<u8>> {
    let m = t.machine();
    p.outputs
        .iter()
        .map(|d| {
            let mem = m
                .memories
                .iter()
                .position(|x| x.name == d.memory)
                .expect("memory");
            o.state
                .read_bytes(m, mem, d.addr, d.bytes())
                .expect("output readable")
        })
        .collect()
}
