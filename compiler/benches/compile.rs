//! Compile latency of the bundled examples on every shipped target: import,
//! constant folding, lowering, memory planning, register allocation,
//! scheduling and encoding (everything `tessera compile` does after reading
//! the file). Figures are in `docs/performance.md`.
//!
//! With `TESSERA_LARGE=DIR` (the directory `scripts/make_examples.py --large
//! DIR` writes), also GPT-2 small (`gpt2_small_12`: twelve blocks, sequence
//! 128, 85 M weights) on vliw-systolic: the compile-latency goal, measured
//! from the file's bytes to the program's bytes.
//!
//! `cargo bench -p compiler --bench compile`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::path::Path;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut group = c.benchmark_group("compile");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    for name in [
        "mlp_small",
        "mlp_medium",
        "matmul_bias_relu_small",
        "matmul_bias_relu_large",
    ] {
        let bytes = std::fs::read(dir.join(name).join("model.onnx")).expect("example model");
        for t in targets::all() {
            group.bench_with_input(BenchmarkId::new(t.name(), name), &bytes, |b, bytes| {
                b.iter(|| {
                    let mut g = compiler::onnx::import(bytes).expect("imports");
                    compiler::interp::fold_constants(&mut g);
                    compiler::lower::compile(t, t.machine(), &g).expect("compiles")
                });
            });
        }
    }
    group.finish();
    large(c);
}

/// GPT-2 small, from the model file's bytes to the program file's bytes.
fn large(c: &mut Criterion) {
    let Some(dir) = std::env::var_os("TESSERA_LARGE") else {
        return;
    };
    let path = Path::new(&dir).join("gpt2_small_12/model.onnx");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // Shared, as `tessera compile` hands the file's buffer to the importer
    // (the weights stay views of it, not copies).
    let bytes = prost::bytes::Bytes::from(bytes);
    let t = targets::by_name("vliw-systolic").expect("shipped");
    let mut group = c.benchmark_group("compile_large");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .warm_up_time(Duration::from_millis(100));
    group.bench_function("vliw-systolic/gpt2_small_12", |b| {
        b.iter(|| {
            let options = compiler::onnx::ImportOptions::default();
            let mut g = compiler::onnx::import_shared(bytes.clone(), &options).expect("imports");
            compiler::interp::fold_constants(&mut g);
            let c = compiler::lower::compile(t, t.machine(), &g).expect("compiles");
            // Streamed as `tessera compile` writes its file, to nowhere.
            c.program
                .write_to(Discard::default())
                .expect("serializes")
                .end
        });
    });
    group.finish();
}

/// A writer that keeps nothing: where it is and how far it was written.
#[derive(Default)]
struct Discard {
    at: u64,
    end: u64,
}

impl std::io::Write for Discard {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.at += buf.len() as u64;
        self.end = self.end.max(self.at);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::io::Seek for Discard {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        match to {
            std::io::SeekFrom::Start(at) => self.at = at,
            _ => return Err(std::io::Error::other("only from the start")),
        }
        Ok(self.at)
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
