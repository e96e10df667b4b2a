//! What can go wrong importing a model: every variant names what it is about
//! (the node, its op type, the opset, the value or the attribute).

use std::fmt;
use std::path::PathBuf;

/// A node of the ONNX graph, as errors name it: by name, or by position when unnamed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    /// The node's name (may be empty).
    pub name: String,
    /// Its position in the graph's node list.
    pub index: usize,
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name.is_empty() {
            write!(f, "node #{}", self.index)
        } else {
            write!(f, "node `{}`", self.name)
        }
    }
}

/// The nodes of one op the importer does not know ([`ImportError::UnsupportedOps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedGroup {
    /// The op type.
    pub op_type: String,
    /// Its domain (empty for the default one).
    pub domain: String,
    /// The nodes using it.
    pub nodes: Vec<NodeRef>,
}

impl fmt::Display for UnsupportedGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`", self.op_type)?;
        if !self.domain.is_empty() {
            write!(f, " of domain `{}`", self.domain)?;
        }
        const SHOWN: usize = 3;
        let names: Vec<String> = self
            .nodes
            .iter()
            .take(SHOWN)
            .map(|n| n.to_string())
            .collect();
        write!(f, " ({}", names.join(", "))?;
        if self.nodes.len() > SHOWN {
            write!(f, " and {} more", self.nodes.len() - SHOWN)?;
        }
        write!(f, ")")
    }
}

/// A graph input dimension with no size ([`ImportError::UnboundDims`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnboundDim {
    /// The input's name.
    pub input: String,
    /// The dimension's position.
    pub index: usize,
    /// Its symbol, if it has one (else it is `-1` or has neither size nor name).
    pub param: Option<String>,
    /// The input's shape as declared, `?` for each dimension without a size.
    pub declared: String,
}

impl fmt::Display for UnboundDim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (input, index, declared) = (&self.input, self.index, &self.declared);
        match &self.param {
            Some(p) => write!(
                f,
                "`{input}` {declared}: dimension #{index} is the symbol `{p}`"
            ),
            None => write!(f, "`{input}` {declared}: dimension #{index} has no size"),
        }
    }
}

/// An import failure. None of these is a bug of the importer: each says what
/// in the model is wrong or unsupported.
#[derive(Debug)]
pub enum ImportError {
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The bytes are not a protobuf message of the expected kind.
    Decode(prost::DecodeError),
    /// The model has no graph.
    NoGraph,
    /// The model imports no version of the default (`ai.onnx`) operator set.
    NoOpset,
    /// The model imports a version of the default operator set outside 7..=25.
    UnsupportedOpset {
        /// The version.
        version: i64,
    },
    /// A node of an operator domain other than the default one.
    UnsupportedDomain {
        /// The node.
        node: NodeRef,
        /// Its op type.
        op_type: String,
        /// Its domain.
        domain: String,
    },
    /// An op the importer does not know.
    UnsupportedOp {
        /// The node.
        node: NodeRef,
        /// Its op type.
        op_type: String,
        /// The default-domain opset in force.
        opset: i64,
    },
    /// Ops the importer does not know at more than one node, every one
    /// found in the graph, grouped by op (so that one run reports them all).
    UnsupportedOps {
        /// Each op (and its domain, where not the default one) with its nodes,
        /// in the order they first occur.
        groups: Vec<UnsupportedGroup>,
        /// The default-domain opset in force.
        opset: i64,
    },
    /// An attribute that is missing, of the wrong type, unknown, or has a value
    /// the importer does not support.
    Attribute {
        /// The node.
        node: NodeRef,
        /// Its op type.
        op_type: String,
        /// The attribute.
        attribute: String,
        /// What is wrong with it.
        message: String,
    },
    /// A node has too few or too many inputs or outputs.
    Arity {
        /// The node.
        node: NodeRef,
        /// Its op type.
        op_type: String,
        /// What is wrong.
        message: String,
    },
    /// A node reads a value no earlier node, input or initializer defines
    /// (or leaves a required input empty).
    MissingInput {
        /// The node.
        node: NodeRef,
        /// Its op type.
        op_type: String,
        /// The input's position.
        position: usize,
        /// The value name (empty when the input itself is left empty).
        value: String,
    },
    /// An input that must be a constant (e.g. the shape of `Reshape`) is computed.
    NotConstant {
        /// The node.
        node: NodeRef,
        /// Its op type.
        op_type: String,
        /// The value name.
        value: String,
    },
    /// Shapes or element types that do not fit the op.
    Shape {
        /// The node.
        node: NodeRef,
        /// Its op type.
        op_type: String,
        /// What does not fit.
        message: String,
    },
    /// A graph input whose type the importer cannot use.
    Input {
        /// The input's name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// Graph input dimensions without a size: symbols the caller did not
    /// bind, `-1`s and dimensions with neither size nor name. Every one of
    /// the model's is listed.
    UnboundDims {
        /// Each dimension, in input order.
        dims: Vec<UnboundDim>,
    },
    /// An op evaluated when compiling (a comparison, `Range`, `If`'s
    /// condition, ...) reads a value only known at run time.
    NotStatic {
        /// The node.
        node: NodeRef,
        /// Its op type.
        op_type: String,
        /// The value name.
        value: String,
    },
    /// A tensor (initializer, attribute, test data) whose data is malformed or unsupported.
    Tensor {
        /// The tensor's name (or where it is).
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A value name is defined twice.
    DuplicateValue {
        /// The name.
        name: String,
    },
    /// A graph output no node, input or initializer defines.
    UndefinedOutput {
        /// The name.
        name: String,
    },
    /// A graph output whose declared type contradicts the inferred one.
    OutputType {
        /// The name.
        name: String,
        /// What differs.
        message: String,
    },
}

impl ImportError {
    /// What to do about it, where there is something to say.
    pub fn help(&self) -> Option<&'static str> {
        Some(match self {
            ImportError::Decode(_) => "is the file an ONNX model (a serialized ModelProto)?",
            ImportError::UnsupportedOpset { .. } => {
                "convert the model to an opset in 7..=25 (onnx.version_converter)"
            }
            ImportError::UnsupportedOp { .. }
            | ImportError::UnsupportedDomain { .. }
            | ImportError::UnsupportedOps { .. } => {
                static LIST: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!("supported ops: {}", super::SUPPORTED_OPS.join(", "))
                });
                LIST.as_str()
            }
            ImportError::UnboundDims { .. } => {
                "give each input's shape (`--input-shape NAME=1x3x224x224`) or bind each symbol (`--dim NAME=SIZE`)"
            }
            ImportError::NotStatic { .. } => {
                "these ops run when compiling: their inputs must be constants or computed from shapes and constants"
            }
            ImportError::NotConstant { .. } => {
                "fold the shape computation into a constant (e.g. with onnx-simplifier)"
            }
            _ => return None,
        })
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportError::Io { path, source } => {
                write!(f, "cannot read `{}`: {source}", path.display())
            }
            ImportError::Decode(e) => write!(f, "malformed protobuf: {e}"),
            ImportError::NoGraph => write!(f, "the model has no graph"),
            ImportError::NoOpset => {
                write!(
                    f,
                    "the model imports no version of the default operator set"
                )
            }
            ImportError::UnsupportedOpset { version } => write!(
                f,
                "unsupported opset {version} of the default domain (supported: 7 to 25)"
            ),
            ImportError::UnsupportedDomain {
                node,
                op_type,
                domain,
            } => write!(
                f,
                "unsupported op `{op_type}` of domain `{domain}` ({node})"
            ),
            ImportError::UnsupportedOp {
                node,
                op_type,
                opset,
            } => write!(f, "unsupported op `{op_type}` ({node}, opset {opset})"),
            ImportError::UnsupportedOps { groups, opset } => {
                let nodes: usize = groups.iter().map(|g| g.nodes.len()).sum();
                write!(
                    f,
                    "{} unsupported op(s) at {nodes} nodes (opset {opset}): ",
                    groups.len()
                )?;
                for (k, g) in groups.iter().enumerate() {
                    if k > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{g}")?;
                }
                Ok(())
            }
            ImportError::Attribute {
                node,
                op_type,
                attribute,
                message,
            } => write!(f, "attribute `{attribute}` of {op_type} {node}: {message}"),
            ImportError::Arity {
                node,
                op_type,
                message,
            } => write!(f, "{op_type} {node}: {message}"),
            ImportError::MissingInput {
                node,
                op_type,
                position,
                value,
            } => fmt_missing(f, node, op_type, *position, value),
            ImportError::NotConstant {
                node,
                op_type,
                value,
            } => write!(
                f,
                "{op_type} {node}: input `{value}` must be a constant (an initializer or a Constant node)"
            ),
            ImportError::Shape {
                node,
                op_type,
                message,
            } => write!(f, "{op_type} {node}: {message}"),
            ImportError::Input { name, message } => write!(f, "graph input `{name}`: {message}"),
            ImportError::UnboundDims { dims } => {
                let plural = if dims.len() == 1 { "" } else { "s" };
                write!(f, "{} input dimension{plural} without a size:", dims.len())?;
                for d in dims {
                    write!(f, "\n  {d}")?;
                }
                Ok(())
            }
            ImportError::NotStatic {
                node,
                op_type,
                value,
            } => write!(
                f,
                "{op_type} {node}: input `{value}` is only known at run time; {op_type} is evaluated when compiling"
            ),
            ImportError::Tensor { name, message } if name.is_empty() => {
                write!(f, "unnamed tensor: {message}")
            }
            ImportError::Tensor { name, message } => write!(f, "tensor `{name}`: {message}"),
            ImportError::DuplicateValue { name } => {
                write!(f, "value `{name}` is defined more than once")
            }
            ImportError::UndefinedOutput { name } => {
                write!(f, "graph output `{name}` is never defined")
            }
            ImportError::OutputType { name, message } => {
                write!(f, "graph output `{name}`: {message}")
            }
        }
    }
}

fn fmt_missing(
    f: &mut fmt::Formatter<'_>,
    node: &NodeRef,
    op_type: &str,
    position: usize,
    value: &str,
) -> fmt::Result {
    if value.is_empty() {
        write!(f, "{op_type} {node}: required input #{position} is missing")
    } else {
        write!(
            f,
            "{op_type} {node}: input #{position} `{value}` is not defined before the node"
        )
    }
}

impl std::error::Error for ImportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ImportError::Io { source, .. } => Some(source),
            ImportError::Decode(e) => Some(e),
            _ => None,
        }
    }
}

impl From<prost::DecodeError> for ImportError {
    fn from(e: prost::DecodeError) -> ImportError {
        ImportError::Decode(e)
    }
}
