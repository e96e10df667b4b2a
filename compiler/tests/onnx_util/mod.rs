//! Building ONNX models in tests with the prost messages, and looking into
//! the graphs the importer makes and the registers compiled programs name.
//! Shared by the ONNX test files.

#![allow(dead_code, reason = "each test file uses a part")]

use compiler::ir::{Graph, ValueId, verify};
use compiler::onnx::proto::tensor_proto::DataType;
use compiler::onnx::proto::{GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto};
use compiler::onnx::{ImportError, import};
use prost::Message;

pub const F32: DataType = DataType::Float;

pub fn input(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto::tensor(name, F32, dims)
}

/// An output declared by name only.
pub fn output(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.to_owned(),
        ..ValueInfoProto::default()
    }
}

pub fn graph(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: &[&str],
    inits: Vec<TensorProto>,
) -> GraphProto {
    GraphProto {
        node: nodes,
        name: "test".to_owned(),
        initializer: inits,
        input: inputs,
        output: outputs.iter().map(|o| output(o)).collect(),
        ..GraphProto::default()
    }
}

pub fn encode(g: GraphProto) -> Vec<u8> {
    ModelProto::with_graph(g, 17).encode_to_vec()
}

/// A float tensor counting up from `start` by `step`.
pub fn ramp(name: &str, dims: &[i64], start: f32, step: f32) -> TensorProto {
    let n: i64 = dims.iter().product();
    let data: Vec<f32> = (0..n).map(|i| start + step * i as f32).collect();
    TensorProto::from_f32(name, dims, &data)
}

pub fn import_ok(bytes: &[u8]) -> Graph {
    let g = import(bytes).unwrap_or_else(|e| panic!("import failed: {e}"));
    verify(&g).unwrap_or_else(|e| panic!("verify failed: {e:?}"));
    g
}

pub fn import_err(bytes: &[u8]) -> ImportError {
    import(bytes).expect_err("the import should fail")
}

pub fn ops(g: &Graph) -> Vec<&'static str> {
    g.nodes.iter().map(|n| n.op.name()).collect()
}

pub fn by_name(g: &Graph, name: &str) -> ValueId {
    let i = g
        .values
        .iter()
        .position(|v| v.name == name)
        .unwrap_or_else(|| panic!("no value `{name}`"));
    ValueId(u32::try_from(i).expect("small graph"))
}

pub fn shape(g: &Graph, name: &str) -> Vec<usize> {
    g.ty(by_name(g, name)).shape.clone()
}

/// A model of one node reading a float input `x` and writing `y`.
pub fn one_node(node: NodeProto, x_dims: &[i64]) -> Vec<u8> {
    encode(graph(vec![node], vec![input("x", x_dims)], &["y"], vec![]))
}

/// The graph of `nodes` over one input `x` of shape `x_dims`, constants folded.
pub fn folded(
    nodes: Vec<NodeProto>,
    x_dims: &[i64],
    outs: &[&str],
    inits: Vec<TensorProto>,
) -> Graph {
    let mut g = import_ok(&encode(graph(nodes, vec![input("x", x_dims)], outs, inits)));
    compiler::interp::fold_constants(&mut g);
    g
}

/// Compiles and runs `g` on every shipped target with seeded inputs and
/// asserts every output matches the interpreter. A target may refuse only
/// with an error containing one of `may_refuse`. Returns the targets that ran.
pub fn run_everywhere(g: &Graph, seed: u64, what: &str, may_refuse: &[&str]) -> Vec<&'static str> {
    let inputs = compiler::run::random_inputs(g, seed);
    let mut ran = Vec::new();
    for t in targets::all() {
        match compiler::run::run(t, t.machine(), g, &inputs, None) {
            Ok(r) => {
                assert!(
                    r.checks.iter().all(|c| c.ok),
                    "{what} on {}: {:?}",
                    t.name(),
                    r.checks
                );
                ran.push(t.name());
            }
            Err(compiler::run::RunError::Lower(e))
                if may_refuse.iter().any(|s| e.to_string().contains(s)) => {}
            Err(e) => panic!("{what} on {}: {e}", t.name()),
        }
    }
    ran
}

/// The registers of file `file` that instructions `insts` name, in order.
pub fn registers_of(
    m: &isa_specs::Machine,
    insts: &[isa_specs::target::MInst],
    file: &str,
) -> Vec<u32> {
    let f = m
        .regfiles
        .iter()
        .position(|r| r.name == file)
        .expect("a register file of that name");
    let mut regs = Vec::new();
    for i in insts {
        let def = &m.instructions[i.inst.index()];
        for (o, x) in def.operands.iter().zip(&i.operands) {
            if let (
                isa_specs::model::OperandKind::Reg { file, .. },
                isa_specs::target::OpValue::Reg(p),
            ) = (&o.kind, x)
                && file.index() == f
            {
                regs.push(*p);
            }
        }
    }
    regs
}

/// Runs `g` on target `target` (default options, seeded random inputs),
/// asserting that every output matches the interpreter's.
pub fn run_checked(target: &str, g: &Graph) -> compiler::run::RunResult {
    let t = targets::by_name(target).expect("target");
    let inputs = compiler::run::random_inputs(g, 3);
    let r = compiler::run::run(t, t.machine(), g, &inputs, None)
        .unwrap_or_else(|e| panic!("{target}: {e}"));
    assert!(r.checks.iter().all(|c| c.ok), "{target}: {:?}", r.checks);
    r
}
