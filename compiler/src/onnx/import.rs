//! Model to graph: decode the protobuf, check the opset, turn initializers into
//! constants and inputs into typed values, lower every node in order (see
//! `ops`), then find the outputs. Values keep their ONNX names.

use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;
use std::path::Path;

use prost::Message;

use super::error::UnboundDim;
use super::proto::tensor_shape_proto::Dimension;
use super::proto::tensor_shape_proto::dimension::Value as Dim;
use super::proto::{GraphProto, ModelProto, TensorProto, ValueInfoProto, type_proto};
use super::tensor::{checked_numel, data_type_name, elem_type, tensor_from_proto};
use super::{ImportError, ops};
use crate::ir::{Graph, Tensor, TensorType, ValueId};

/// The versions of the default operator set the importer supports.
pub const OPSETS: RangeInclusive<i64> = 7..=25;

/// Choices the model leaves to the caller.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Sizes of symbolic input dimensions (`dim_param`), e.g. `batch = 1`.
    pub dims: HashMap<String, usize>,
    /// Whole shapes of graph inputs, by name: they fix every dimension of
    /// the input (a symbol, a `-1`, an unnamed one) and must agree with its
    /// fixed sizes and rank. They take precedence over `dims`.
    pub shapes: HashMap<String, Vec<usize>>,
    /// Graph inputs known when compiling, by their values (row-major) only:
    /// like `constants`, with the type the input declares (its dimensions
    /// fixed as for any input).
    pub values: HashMap<String, Vec<f64>>,
    /// Graph inputs whose values are known when compiling (shape tensors,
    /// axes, slice bounds fed as inputs): they become constants and are no
    /// longer inputs of the graph. The value must have the input's type.
    pub constants: HashMap<String, Tensor>,
}

/// Imports a serialized ONNX model (`ModelProto`) with every input shape static.
pub fn import(bytes: &[u8]) -> Result<Graph, ImportError> {
    import_with(bytes, &ImportOptions::default())
}

/// Imports a serialized ONNX model, binding symbolic dimensions from `options`.
pub fn import_with(bytes: &[u8], options: &ImportOptions) -> Result<Graph, ImportError> {
    import_model(&ModelProto::decode(bytes)?, options)
}

/// [`import_with`] of a buffer it may keep: the tensors' `raw_data` are
/// views of it instead of copies (a model's weights are most of its bytes).
pub fn import_owned(bytes: Vec<u8>, options: &ImportOptions) -> Result<Graph, ImportError> {
    import_shared(prost::bytes::Bytes::from(bytes), options)
}

/// [`import_owned`] of a shared buffer (cloning a `Bytes` shares it): the
/// weights stay views of it.
pub fn import_shared(
    bytes: prost::bytes::Bytes,
    options: &ImportOptions,
) -> Result<Graph, ImportError> {
    import_model(&ModelProto::decode(bytes)?, options)
}

/// Imports an ONNX model file.
pub fn import_file(path: impl AsRef<Path>) -> Result<Graph, ImportError> {
    import_file_with(path, &ImportOptions::default())
}

/// Imports an ONNX model file, binding symbolic dimensions from `options`.
pub fn import_file_with(
    path: impl AsRef<Path>,
    options: &ImportOptions,
) -> Result<Graph, ImportError> {
    import_owned(read(path.as_ref())?, options)
}

/// Reads a file of the ONNX backend-test layout (`input_0.pb`, `output_0.pb`):
/// one serialized `TensorProto`. Returns its name (may be empty) and value.
pub fn read_tensor_file(path: impl AsRef<Path>) -> Result<(String, Tensor), ImportError> {
    let proto = TensorProto::decode(read(path.as_ref())?.as_slice())?;
    let tensor = tensor_from_proto(&proto)?;
    Ok((proto.name, tensor))
}

/// Decodes one serialized `TensorProto` (the contents of a backend-test `.pb` file).
pub fn read_tensor(bytes: &[u8]) -> Result<Tensor, ImportError> {
    tensor_from_proto(&TensorProto::decode(bytes)?)
}

fn read(path: &Path) -> Result<Vec<u8>, ImportError> {
    std::fs::read(path).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Imports a decoded model.
pub fn import_model(model: &ModelProto, options: &ImportOptions) -> Result<Graph, ImportError> {
    let opset = default_opset(model)?;
    let graph = model.graph.as_ref().ok_or(ImportError::NoGraph)?;
    let mut imp = Importer::new(opset, graph);
    imp.initializers(graph)?;
    imp.inputs(graph, options)?;
    unsupported_ops(graph, opset)?;
    for (index, node) in graph.node.iter().enumerate() {
        ops::lower(&mut imp, node, index)?;
    }
    imp.outputs(graph, options)?;
    imp.drop_unread_constants();
    Ok(imp.g)
}

/// Every node of an op the importer does not know, grouped by op: an error
/// listing them all where there are several (one is reported by the node's
/// own lowering, as before).
fn unsupported_ops(graph: &GraphProto, opset: i64) -> Result<(), ImportError> {
    let mut groups: Vec<super::error::UnsupportedGroup> = Vec::new();
    let mut count = 0;
    for (index, node) in graph.node.iter().enumerate() {
        let default = is_default_domain(&node.domain);
        if default && ops::SUPPORTED_OPS.contains(&node.op_type.as_str()) {
            continue;
        }
        count += 1;
        let domain = if default {
            String::new()
        } else {
            node.domain.clone()
        };
        let at = super::error::NodeRef {
            name: node.name.clone(),
            index,
        };
        match groups
            .iter_mut()
            .find(|g| g.op_type == node.op_type && g.domain == domain)
        {
            Some(g) => g.nodes.push(at),
            None => groups.push(super::error::UnsupportedGroup {
                op_type: node.op_type.clone(),
                domain,
                nodes: vec![at],
            }),
        }
    }
    if count < 2 {
        return Ok(());
    }
    Err(ImportError::UnsupportedOps { groups, opset })
}

/// Whether an operator domain is the default ONNX one.
pub(super) fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// The default-domain opset version, checked against [`OPSETS`].
fn default_opset(model: &ModelProto) -> Result<i64, ImportError> {
    let version = model
        .opset_import
        .iter()
        .filter(|o| is_default_domain(&o.domain))
        .map(|o| o.version)
        .max()
        .ok_or(ImportError::NoOpset)?;
    if OPSETS.contains(&version) {
        Ok(version)
    } else {
        Err(ImportError::UnsupportedOpset { version })
    }
}

/// The graph being built and the ONNX names in scope.
pub(super) struct Importer {
    /// The graph so far.
    pub g: Graph,
    /// The default-domain opset in force.
    pub opset: i64,
    /// ONNX value name to IR value.
    names: HashMap<String, ValueId>,
    /// Names of the graph outputs.
    graph_outputs: HashSet<String>,
}

impl Importer {
    fn new(opset: i64, graph: &GraphProto) -> Importer {
        Importer {
            g: Graph::default(),
            opset,
            names: HashMap::new(),
            graph_outputs: graph.output.iter().map(|o| o.name.clone()).collect(),
        }
    }

    /// The value an ONNX name refers to.
    pub fn value(&self, name: &str) -> Option<ValueId> {
        self.names.get(name).copied()
    }

    /// Imports a subgraph (the branch of an `If` known when compiling) into
    /// the graph: its initializers become constants and its nodes are
    /// imported in order; its names join the ones in scope.
    pub fn inline(&mut self, graph: &GraphProto) -> Result<(), ImportError> {
        self.initializers(graph)?;
        for (index, node) in graph.node.iter().enumerate() {
            ops::lower(self, node, index)?;
        }
        Ok(())
    }

    /// Drops the constants no node reads and no output is: the initializers
    /// and intermediate results of the shape computations folded away.
    fn drop_unread_constants(&mut self) {
        let read: HashSet<ValueId> = (self.g.nodes.iter())
            .flat_map(|n| n.inputs.iter().copied())
            .chain(self.g.outputs.iter().copied())
            .collect();
        self.g.constants.retain(|v, _| read.contains(v));
    }

    /// Whether a name is one of the graph's outputs.
    pub fn is_graph_output(&self, name: &str) -> bool {
        self.graph_outputs.contains(name)
    }

    /// Makes `name` refer to `v`, renaming the value to it when `rename`.
    pub fn bind(&mut self, name: &str, v: ValueId, rename: bool) -> Result<(), ImportError> {
        if self.names.contains_key(name) {
            return Err(ImportError::DuplicateValue {
                name: name.to_owned(),
            });
        }
        if let (true, Some(value)) = (rename, self.g.values.get_mut(v.index())) {
            value.name = name.to_owned();
        }
        self.names.insert(name.to_owned(), v);
        Ok(())
    }

    fn initializers(&mut self, graph: &GraphProto) -> Result<(), ImportError> {
        if let Some(s) = graph.sparse_initializer.first() {
            let name = s
                .values
                .as_ref()
                .map(|v| v.name.clone())
                .unwrap_or_default();
            return Err(ImportError::Tensor {
                name,
                message: "sparse initializers are not supported".to_owned(),
            });
        }
        for (i, t) in graph.initializer.iter().enumerate() {
            if t.name.is_empty() {
                return Err(ImportError::Tensor {
                    name: String::new(),
                    message: format!("initializer #{i} has no name"),
                });
            }
            let tensor = tensor_from_proto(t)?;
            let id = self.g.add_constant(t.name.clone(), tensor);
            self.bind(&t.name, id, false)?;
        }
        Ok(())
    }

    /// Graph inputs that are not initializers become typed input values.
    /// Every dimension left without a size is reported at once.
    fn inputs(&mut self, graph: &GraphProto, options: &ImportOptions) -> Result<(), ImportError> {
        let mut unbound = Vec::new();
        let mut typed = Vec::new();
        for vi in &graph.input {
            if self.value(&vi.name).is_some() {
                continue;
            }
            match input_type(vi, options) {
                Ok(ty) => typed.push(ty),
                Err(ImportError::UnboundDims { dims }) => unbound.extend(dims),
                Err(e) => return Err(e),
            }
        }
        if !unbound.is_empty() {
            return Err(ImportError::UnboundDims { dims: unbound });
        }
        if let Some(name) = (options.shapes.keys().chain(options.values.keys()))
            .find(|n| !graph.input.iter().any(|vi| &vi.name == *n))
        {
            return Err(ImportError::Input {
                name: name.clone(),
                message: format!(
                    "is given a shape or value but is not an input of the graph (its inputs: {})",
                    input_names(graph)
                ),
            });
        }
        let mut typed = typed.into_iter();
        for vi in &graph.input {
            if let Some(id) = self.value(&vi.name) {
                if self.g.constants.contains_key(&id) {
                    continue; // an initializer: a constant
                }
                return Err(ImportError::DuplicateValue {
                    name: vi.name.clone(),
                });
            }
            let Some(ty) = typed.next() else {
                return Err(ImportError::Input {
                    name: vi.name.clone(),
                    message: "has no type".to_owned(),
                });
            };
            if let Some(data) = options.values.get(&vi.name) {
                if data.len() != ty.numel() {
                    return Err(ImportError::Input {
                        name: vi.name.clone(),
                        message: format!("is {ty}, {} values are given for it", data.len()),
                    });
                }
                let id = self
                    .g
                    .add_constant(vi.name.clone(), Tensor::new(ty, data.clone()));
                self.bind(&vi.name, id, false)?;
                continue;
            }
            if let Some(t) = options.constants.get(&vi.name) {
                if t.ty != ty {
                    return Err(ImportError::Input {
                        name: vi.name.clone(),
                        message: format!("is {ty}, the value given for it is {}", t.ty),
                    });
                }
                let id = self.g.add_constant(vi.name.clone(), t.clone());
                self.bind(&vi.name, id, false)?;
                continue;
            }
            let id = self.g.add_value(vi.name.clone(), ty);
            self.g.inputs.push(id);
            self.bind(&vi.name, id, false)?;
        }
        Ok(())
    }

    fn outputs(&mut self, graph: &GraphProto, options: &ImportOptions) -> Result<(), ImportError> {
        for vi in &graph.output {
            let id = self
                .value(&vi.name)
                .ok_or_else(|| ImportError::UndefinedOutput {
                    name: vi.name.clone(),
                })?;
            check_declared(vi, self.g.ty(id), options).map_err(|message| {
                ImportError::OutputType {
                    name: vi.name.clone(),
                    message,
                }
            })?;
            self.g.outputs.push(id);
        }
        Ok(())
    }
}

/// The declared tensor type of a value, if it has one.
fn tensor_type(vi: &ValueInfoProto) -> Result<&type_proto::Tensor, String> {
    match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => Ok(t),
        None => Err("has no type".to_owned()),
        Some(other) => Err(format!(
            "is a {}; only tensors are supported",
            match other {
                type_proto::Value::SequenceType(_) => "sequence",
                type_proto::Value::MapType(_) => "map",
                type_proto::Value::OptionalType(_) => "optional",
                _ => "sparse tensor",
            }
        )),
    }
}

/// The static type of a graph input: symbols bound from `options`.
fn input_type(vi: &ValueInfoProto, options: &ImportOptions) -> Result<TensorType, ImportError> {
    let err = |message: String| ImportError::Input {
        name: vi.name.clone(),
        message,
    };
    let t = tensor_type(vi).map_err(err)?;
    let elem = elem_type(t.elem_type).ok_or_else(|| {
        err(format!(
            "unsupported element type {}",
            data_type_name(t.elem_type)
        ))
    })?;
    let dims = &t
        .shape
        .as_ref()
        .ok_or_else(|| err("has no shape (unknown rank)".to_owned()))?
        .dim;
    let shape = match options.shapes.get(&vi.name) {
        Some(given) => given_shape(vi, dims, given)?,
        None => declared_shape(vi, dims, options)?,
    };
    if checked_numel(&shape).is_none() {
        return Err(err(format!("shape {shape:?} is too large")));
    }
    Ok(TensorType { elem, shape })
}

/// The shape of an input from its declaration, symbols bound from
/// `options.dims`; every dimension left without a size is an error.
fn declared_shape(
    vi: &ValueInfoProto,
    dims: &[Dimension],
    options: &ImportOptions,
) -> Result<Vec<usize>, ImportError> {
    let mut shape = Vec::with_capacity(dims.len());
    let mut unbound = Vec::new();
    for (index, d) in dims.iter().enumerate() {
        if let Some(Dim::DimValue(v)) = d.value
            && v < -1
        {
            return Err(ImportError::Input {
                name: vi.name.clone(),
                message: format!("dimension #{index} is negative ({v})"),
            });
        }
        match declared_dim(d, options) {
            Some(n) => shape.push(n),
            None => unbound.push(UnboundDim {
                input: vi.name.clone(),
                index,
                param: match &d.value {
                    Some(Dim::DimParam(p)) if !p.is_empty() => Some(p.clone()),
                    _ => None,
                },
                declared: declared_text(dims),
            }),
        }
    }
    if unbound.is_empty() {
        Ok(shape)
    } else {
        Err(ImportError::UnboundDims { dims: unbound })
    }
}

/// A shape given for an input whole, checked against what it declares.
fn given_shape(
    vi: &ValueInfoProto,
    dims: &[Dimension],
    given: &[usize],
) -> Result<Vec<usize>, ImportError> {
    let err = |message: String| ImportError::Input {
        name: vi.name.clone(),
        message,
    };
    let declared = declared_text(dims);
    if given.len() != dims.len() {
        return Err(err(format!(
            "is declared {declared} (rank {}), the shape given for it has rank {}",
            dims.len(),
            given.len()
        )));
    }
    for (i, (d, &n)) in dims.iter().zip(given).enumerate() {
        if let Some(Dim::DimValue(v)) = d.value
            && v >= 0
            && usize::try_from(v).ok() != Some(n)
        {
            return Err(err(format!(
                "is declared {declared}: dimension #{i} is {v}, the shape given for it says {n}"
            )));
        }
    }
    Ok(given.to_vec())
}

/// A declared shape as text: sizes, symbols, `?` for the others.
fn declared_text(dims: &[Dimension]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| match &d.value {
            Some(Dim::DimValue(v)) if *v >= 0 => v.to_string(),
            Some(Dim::DimParam(p)) if !p.is_empty() => p.clone(),
            _ => "?".to_owned(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The names of a graph's inputs that are not initializers, for messages.
fn input_names(graph: &GraphProto) -> String {
    let inits: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let names: Vec<String> = (graph.input.iter())
        .filter(|vi| !inits.contains(vi.name.as_str()))
        .map(|vi| format!("`{}`", vi.name))
        .collect();
    names.join(", ")
}

/// Checks what a graph output declares (element type, known dimensions) against its type.
fn check_declared(
    vi: &ValueInfoProto,
    ty: &TensorType,
    options: &ImportOptions,
) -> Result<(), String> {
    let Ok(t) = tensor_type(vi) else {
        return Ok(()); // nothing declared: nothing to contradict
    };
    // A boolean computed at run time is 1 and 0 of a float type (`ops::logic`).
    let truth = elem_type(t.elem_type) == Some(crate::ir::ElemType::Bool) && ty.elem.is_float();
    if t.elem_type != 0 && elem_type(t.elem_type) != Some(ty.elem) && !truth {
        return Err(format!(
            "declared {}, computed {}",
            data_type_name(t.elem_type),
            ty
        ));
    }
    let Some(shape) = &t.shape else {
        return Ok(());
    };
    let declared: Vec<Option<usize>> = shape.dim.iter().map(|d| declared_dim(d, options)).collect();
    let matches = declared.len() == ty.shape.len()
        && declared
            .iter()
            .zip(&ty.shape)
            .all(|(d, s)| d.is_none_or(|d| d == *s));
    if matches {
        Ok(())
    } else {
        let dims: Vec<String> = declared
            .iter()
            .map(|d| d.map_or("?".to_owned(), |d| d.to_string()))
            .collect();
        Err(format!(
            "declared shape [{}], computed {ty}",
            dims.join(", ")
        ))
    }
}

/// A declared dimension's size, when it is known.
fn declared_dim(d: &Dimension, options: &ImportOptions) -> Option<usize> {
    match d.value.as_ref()? {
        Dim::DimValue(v) => usize::try_from(*v).ok(),
        Dim::DimParam(p) => options.dims.get(p).copied(),
    }
}
