//! The IR as text, for dumps (`--emit ir`) and filetest snapshots.
//!
//! ```text
//! graph(input: float[4, 16]) -> (output)
//!   const w: float[16, 32]
//!   h: float[4, 32] = MatMul(input, w)
//! ```

use super::{Graph, Op};
use std::fmt;

fn attrs(op: &Op) -> String {
    let list = |v: &[usize]| {
        v.iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match op {
        Op::Reshape { shape } => format!("[shape = [{}]]", list(shape)),
        Op::Transpose { perm } => format!("[perm = [{}]]", list(perm)),
        Op::Cast { to } => format!("[to = {}]", to.name()),
        Op::Reduce { axes, keepdims, .. } => {
            format!(
                "[axes = [{}], keepdims = {}]",
                list(axes),
                u8::from(*keepdims)
            )
        }
        Op::Slice {
            starts,
            ends,
            steps,
        } => {
            let l = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
            format!(
                "[starts = [{}], ends = [{}], steps = [{}]]",
                l(starts),
                l(ends),
                l(steps)
            )
        }
        Op::Concat { axis } => format!("[axis = {axis}]"),
        _ => String::new(),
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |v: &super::ValueId| self.values[v.index()].name.clone();
        let inputs: Vec<String> = self
            .inputs
            .iter()
            .map(|v| format!("{}: {}", name(v), self.ty(*v)))
            .collect();
        let outputs: Vec<String> = self.outputs.iter().map(name).collect();
        writeln!(
            f,
            "graph({}) -> ({})",
            inputs.join(", "),
            outputs.join(", ")
        )?;
        for (v, t) in &self.constants {
            // Narrow floats print as the f32 they are, not as the f64 that holds them.
            let show = |x: &f64| {
                if t.ty.elem == super::ElemType::F64 {
                    format!("{x}")
                } else {
                    format!("{}", *x as f32)
                }
            };
            let preview: Vec<String> = t.data.iter().take(4).map(show).collect();
            let more = if t.data.len() > 4 { ", ..." } else { "" };
            writeln!(
                f,
                "  const {}: {} = [{}{more}]",
                name(v),
                t.ty,
                preview.join(", ")
            )?;
        }
        for n in &self.nodes {
            let outs: Vec<String> = n
                .outputs
                .iter()
                .map(|o| format!("{}: {}", name(o), self.ty(*o)))
                .collect();
            let ins: Vec<String> = n.inputs.iter().map(name).collect();
            writeln!(
                f,
                "  {} = {}{}({})  # {}",
                outs.join(", "),
                n.op.name(),
                attrs(&n.op),
                ins.join(", "),
                n.name
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::{ElemType, Graph, Op, Tensor, TensorType};

    #[test]
    fn prints_inputs_constants_and_nodes() {
        let mut g = Graph::default();
        let x = g.add_value(
            "x",
            TensorType {
                elem: ElemType::F32,
                shape: vec![2, 3],
            },
        );
        g.inputs.push(x);
        let w = g.add_constant(
            "w",
            Tensor::new(
                TensorType {
                    elem: ElemType::F32,
                    shape: vec![3, 2],
                },
                vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            ),
        );
        let y = g.add_node("mm", Op::MatMul, vec![x, w]).expect("typed");
        let z = g
            .add_node("t", Op::Transpose { perm: vec![1, 0] }, y)
            .expect("typed");
        g.outputs = z;
        let text = g.to_string();
        assert_eq!(
            text,
            "graph(x: float[2, 3]) -> (t:0)\n  const w: float[3, 2] = [1, 2, 3, 4, ...]\n  mm:0: float[2, 2] = MatMul(x, w)  # mm\n  t:0: float[2, 2] = Transpose[perm = [1, 0]](mm:0)  # t\n"
        );
    }
}
