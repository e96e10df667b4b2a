//! `Constant`: a constant value from the node's one value attribute.

use super::{Lowered, arity};
use crate::ir::{ElemType, Tensor, TensorType};
use crate::onnx::ImportError;
use crate::onnx::import::Importer;
use crate::onnx::node::NodeCx;
use crate::onnx::tensor::tensor_from_proto;

/// The attributes a `Constant` may carry.
const CONSTANT_ATTRIBUTES: &[&str] = &[
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
    "sparse_value",
];

/// `Constant`: a constant value named by the node's output.
pub(super) fn constant(imp: &mut Importer, cx: &NodeCx) -> Result<Lowered, ImportError> {
    arity(cx, 0, 0)?;
    cx.check_attributes(CONSTANT_ATTRIBUTES)?;
    let [attr] = cx.proto.attribute.as_slice() else {
        let n = cx.proto.attribute.len();
        return Err(cx.attr_err(
            "value",
            format!("a Constant needs exactly one value attribute, it has {n}"),
        ));
    };
    let tensor = constant_value(cx, &attr.name)?;
    let name = cx.proto.output.first().cloned().unwrap_or_default();
    Ok(Lowered::Value(imp.g.add_constant(name, tensor)))
}

fn constant_value(cx: &NodeCx, attr: &str) -> Result<Tensor, ImportError> {
    let list = |elem, data: Vec<f64>| {
        let shape = vec![data.len()];
        Tensor::new(TensorType { elem, shape }, data)
    };
    let scalar = |elem, x| {
        Tensor::new(
            TensorType {
                elem,
                shape: vec![],
            },
            vec![x],
        )
    };
    Ok(match attr {
        "value" => constant_tensor(cx)?,
        "value_float" => scalar(ElemType::F32, f64::from(cx.float(attr, 0.0)?)),
        "value_int" => scalar(ElemType::I64, cx.int(attr, 0)? as f64),
        "value_floats" => {
            let v = cx.floats(attr)?.unwrap_or_default();
            list(ElemType::F32, v.iter().map(|x| f64::from(*x)).collect())
        }
        "value_ints" => {
            let v = cx.ints(attr)?.unwrap_or_default();
            list(ElemType::I64, v.iter().map(|x| *x as f64).collect())
        }
        _ => return Err(cx.attr_err(attr, "string and sparse constants are not supported")),
    })
}

fn constant_tensor(cx: &NodeCx) -> Result<Tensor, ImportError> {
    let t = cx
        .tensor("value")?
        .ok_or_else(|| cx.attr_err("value", "required, missing"))?;
    tensor_from_proto(t).map_err(|e| match e {
        ImportError::Tensor { message, .. } => cx.attr_err("value", message),
        other => other,
    })
}
