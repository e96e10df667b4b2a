//! Compiler filetests: small graphs in `tests/filetests/*.tgraph`, compiled
//! for every target named in their header; each (file, target) is one insta
//! snapshot in Markdown sections, one per stage of the pipeline:
//! `## ir` (after folding), `## regions` (after fusion), `## selected`
//! (instructions chosen, virtual registers, buffers placed), `## buffers`
//! (the on-chip plan), `## asm` (after register allocation and scheduling).
//! The program is also run and checked against the reference interpreter.
//! Bless with `cargo insta review`.
//!
//! Format (one item per line, `;` starts a comment; `; target NAME` lines
//! choose the targets):
//!
//! ```text
//! input x: [3, 10]
//! const w: [10, 6]          deterministic values in [-1, 1)
//! node h = MatMul(x, w)     ops: MatMul Add Sub Mul Div Max Min Relu Exp Log Tanh Erf Sqrt
//!                           Reciprocal Neg Abs Sigmoid Round Identity Reshape[d, ..]
//!                           Transpose[p, ..] ReduceSum/Mean/Max/Min[axes, ..] (dimensions kept)
//! output h
//! ```

use compiler::ir::{ElemType, Graph, Op, ReduceKind, Tensor, TensorType, ValueId};
use std::collections::HashMap;
use std::path::Path;

fn dims(s: &str) -> Vec<usize> {
    s.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .filter(|d| !d.trim().is_empty())
        .map(|d| d.trim().parse().expect("dimension"))
        .collect()
}

fn fill(n: usize, name: &str) -> Vec<f64> {
    let seed = name.bytes().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
    });
    // Away from zero, so divisions stay tame.
    tests::values(n, seed, 0.5, 1.5)
}

/// Parses a `.tgraph` file: the graph and the targets of its header.
fn parse(text: &str) -> (Graph, Vec<String>) {
    let mut g = Graph::default();
    let mut names: HashMap<String, ValueId> = HashMap::new();
    let mut targets = Vec::new();
    let ty = |shape| TensorType {
        elem: ElemType::F32,
        shape,
    };
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix(';') {
            if let Some(t) = rest.trim().strip_prefix("target ") {
                targets.push(t.trim().to_owned());
            }
            continue;
        }
        let (kw, rest) = line.split_once(' ').expect("keyword");
        match kw {
            "input" => {
                let (name, shape) = rest.split_once(':').expect("name: shape");
                let v = g.add_value(name.trim(), ty(dims(shape)));
                g.inputs.push(v);
                names.insert(name.trim().to_owned(), v);
            }
            "const" => {
                let (name, shape) = rest.split_once(':').expect("name: shape");
                let shape = dims(shape);
                let n = shape.iter().product();
                let v = g.add_constant(name.trim(), Tensor::new(ty(shape), fill(n, name.trim())));
                names.insert(name.trim().to_owned(), v);
            }
            "node" => {
                let (name, call) = rest.split_once('=').expect("name = op(args)");
                let (head, args) = call.trim().split_once('(').expect("op(args)");
                let args: Vec<ValueId> = args
                    .trim_end_matches(')')
                    .split(',')
                    .map(|a| names[a.trim()])
                    .collect();
                let op = match head.split_once('[') {
                    Some(("Reshape", d)) => Op::Reshape { shape: dims(d) },
                    Some(("Transpose", d)) => Op::Transpose { perm: dims(d) },
                    Some((r, d)) if r.starts_with("Reduce") => Op::Reduce {
                        kind: match r {
                            "ReduceSum" => ReduceKind::Sum,
                            "ReduceMean" => ReduceKind::Mean,
                            "ReduceMax" => ReduceKind::Max,
                            "ReduceMin" => ReduceKind::Min,
                            other => panic!("unknown reduction `{other}`"),
                        },
                        axes: dims(d),
                        keepdims: true,
                    },
                    _ => match head {
                        "MatMul" => Op::MatMul,
                        "Add" => Op::Add,
                        "Sub" => Op::Sub,
                        "Mul" => Op::Mul,
                        "Div" => Op::Div,
                        "Relu" => Op::Relu,
                        "Max" => Op::Max,
                        "Min" => Op::Min,
                        "Identity" => Op::Identity,
                        other => compiler::ir::Unary::ALL
                            .into_iter()
                            .find(|u| u.name() == other)
                            .map(Op::Unary)
                            .unwrap_or_else(|| panic!("unknown op `{other}`")),
                    },
                };
                let out = g.add_node(name.trim(), op, args).expect("typed")[0];
                g.values[out.index()].name = name.trim().to_owned();
                names.insert(name.trim().to_owned(), out);
            }
            "output" => g.outputs.push(names[rest.trim()]),
            other => panic!("unknown item `{other}`"),
        }
    }
    (g, targets)
}

#[test]
fn filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("filetests folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tgraph"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        let (mut g, targets) = parse(&text);
        compiler::ir::verify(&g).expect("verified");
        compiler::interp::fold_constants(&mut g);
        let stem = file
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for name in targets {
            let t = targets::by_name(&name).expect("known target");
            let m = t.machine();
            let r = compiler::run::run(t, m, &g, &compiler::run::random_inputs(&g, 1), None)
                .unwrap_or_else(|e| panic!("{stem} on {name}: {e}"));
            assert!(
                r.checks.iter().all(|c| c.ok),
                "{stem} on {name}: {:?}",
                r.checks
            );
            let c = &r.compiled;
            let mut out = format!("# {stem} on {name}\n\n## ir\n\n```\n{g}```\n\n## regions\n\n");
            for (region, n) in &c.regions {
                out.push_str(&format!("- {region}: {n} instructions\n"));
            }
            for note in &c.notes {
                out.push_str(&format!("- note: {note}\n"));
            }
            out.push_str("\n## selected\n\n```\n");
            for line in c.selected_text(m) {
                out.push_str(&line);
                out.push('\n');
            }
            out.push_str("```\n\n## buffers\n\n");
            for (mem, peak, cap) in &c.buffers {
                out.push_str(&format!("- {mem}: {peak} of {cap} bytes\n"));
            }
            let asm =
                isa_specs::assembly::disassemble(t.isa(), m, &c.program).expect("disassembles");
            // Runs of empty bundles (exposed-pipeline padding) are shown as one line.
            let mut code: Vec<String> = Vec::new();
            let mut empty = 0;
            for line in asm
                .lines()
                .filter(|l| !l.starts_with(".data"))
                .chain(std::iter::once(""))
            {
                if line == "{}" {
                    empty += 1;
                    continue;
                }
                if empty > 0 {
                    code.push(if empty == 1 {
                        "{}".to_owned()
                    } else {
                        format!("{{}} x {empty}")
                    });
                    empty = 0;
                }
                if !line.is_empty() {
                    code.push(line.to_owned());
                }
            }
            out.push_str(&format!("\n## asm\n\n```\n{}\n```\n", code.join("\n")));
            insta::assert_snapshot!(format!("{stem}@{name}"), out);
        }
    }
}
