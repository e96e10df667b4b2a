//! One ONNX node being lowered: its name, its attributes read with their
//! types checked, and the errors that name it.

use super::ImportError;
use super::error::NodeRef;
use super::proto::attribute_proto::AttributeType;
use super::proto::{AttributeProto, GraphProto, NodeProto, TensorProto};

/// A node with what errors about it need.
pub(super) struct NodeCx<'n> {
    /// The node.
    pub proto: &'n NodeProto,
    /// How errors name it.
    pub node: NodeRef,
    /// The name of its IR node(s): the ONNX name, or `{op_type}_{index}`.
    pub name: String,
}

impl<'n> NodeCx<'n> {
    /// The context of the node at `index`.
    pub fn new(proto: &'n NodeProto, index: usize) -> NodeCx<'n> {
        let name = if proto.name.is_empty() {
            format!("{}_{index}", proto.op_type)
        } else {
            proto.name.clone()
        };
        NodeCx {
            proto,
            node: NodeRef {
                name: proto.name.clone(),
                index,
            },
            name,
        }
    }

    /// The op type.
    pub fn op_type(&self) -> String {
        self.proto.op_type.clone()
    }

    /// An error about one of its attributes.
    pub fn attr_err(&self, attribute: &str, message: impl Into<String>) -> ImportError {
        ImportError::Attribute {
            node: self.node.clone(),
            op_type: self.op_type(),
            attribute: attribute.to_owned(),
            message: message.into(),
        }
    }

    /// An error about shapes or types.
    pub fn shape_err(&self, message: impl Into<String>) -> ImportError {
        ImportError::Shape {
            node: self.node.clone(),
            op_type: self.op_type(),
            message: message.into(),
        }
    }

    /// An error about its number of inputs or outputs.
    pub fn arity_err(&self, message: impl Into<String>) -> ImportError {
        ImportError::Arity {
            node: self.node.clone(),
            op_type: self.op_type(),
            message: message.into(),
        }
    }

    /// Refuses attributes the op does not have, repeated ones and references
    /// to a calling function's attributes.
    pub fn check_attributes(&self, known: &[&str]) -> Result<(), ImportError> {
        for (i, a) in self.proto.attribute.iter().enumerate() {
            if !known.contains(&a.name.as_str()) {
                return Err(self.attr_err(&a.name, "unknown attribute of this op"));
            }
            if self.proto.attribute[..i].iter().any(|b| b.name == a.name) {
                return Err(self.attr_err(&a.name, "given more than once"));
            }
            if !a.ref_attr_name.is_empty() {
                return Err(
                    self.attr_err(&a.name, "refers to a function attribute outside a function")
                );
            }
        }
        Ok(())
    }

    /// The attribute of this name, checked to be of type `ty`.
    fn attr(
        &self,
        name: &str,
        ty: AttributeType,
    ) -> Result<Option<&'n AttributeProto>, ImportError> {
        let Some(a) = self.proto.attribute.iter().find(|a| a.name == name) else {
            return Ok(None);
        };
        if a.r#type == ty as i32 {
            return Ok(Some(a));
        }
        let found = AttributeType::try_from(a.r#type).map_or("an unknown type", |t| t.name());
        Err(self.attr_err(name, format!("expected {}, found {found}", ty.name())))
    }

    /// A float attribute, or its default.
    pub fn float(&self, name: &str, default: f32) -> Result<f32, ImportError> {
        Ok(self
            .attr(name, AttributeType::Float)?
            .map_or(default, |a| a.f))
    }

    /// A string attribute (UTF-8), or its default.
    pub fn string(&self, name: &str, default: &str) -> Result<String, ImportError> {
        match self.attr(name, AttributeType::String)? {
            None => Ok(default.to_owned()),
            Some(a) => {
                String::from_utf8(a.s.clone()).map_err(|_| self.attr_err(name, "is not UTF-8"))
            }
        }
    }

    /// An integer attribute, or its default.
    pub fn int(&self, name: &str, default: i64) -> Result<i64, ImportError> {
        Ok(self
            .attr(name, AttributeType::Int)?
            .map_or(default, |a| a.i))
    }

    /// A required integer attribute.
    pub fn required_int(&self, name: &str) -> Result<i64, ImportError> {
        match self.attr(name, AttributeType::Int)? {
            Some(a) => Ok(a.i),
            None => Err(self.attr_err(name, "required, missing")),
        }
    }

    /// A 0/1 integer attribute (default 0) as a flag.
    pub fn flag(&self, name: &str) -> Result<bool, ImportError> {
        match self.int(name, 0)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.attr_err(name, format!("must be 0 or 1, is {v}"))),
        }
    }

    /// An integer list attribute, if present.
    pub fn ints(&self, name: &str) -> Result<Option<&'n [i64]>, ImportError> {
        Ok(self
            .attr(name, AttributeType::Ints)?
            .map(|a| a.ints.as_slice()))
    }

    /// A string list attribute (UTF-8), if present.
    pub fn strings(&self, name: &str) -> Result<Option<Vec<String>>, ImportError> {
        let Some(a) = self.attr(name, AttributeType::Strings)? else {
            return Ok(None);
        };
        (a.strings.iter())
            .map(|b| String::from_utf8(b.clone()).map_err(|_| self.attr_err(name, "is not UTF-8")))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// A float list attribute, if present.
    pub fn floats(&self, name: &str) -> Result<Option<&'n [f32]>, ImportError> {
        Ok(self
            .attr(name, AttributeType::Floats)?
            .map(|a| a.floats.as_slice()))
    }

    /// A graph attribute (a branch or a loop body), if present.
    pub fn graph(&self, name: &str) -> Result<Option<&'n GraphProto>, ImportError> {
        match self.attr(name, AttributeType::Graph)? {
            None => Ok(None),
            Some(a) => {
                a.g.as_ref()
                    .map(Some)
                    .ok_or_else(|| self.attr_err(name, "of type GRAPH but holds no graph"))
            }
        }
    }

    /// A tensor attribute, if present.
    pub fn tensor(&self, name: &str) -> Result<Option<&'n TensorProto>, ImportError> {
        match self.attr(name, AttributeType::Tensor)? {
            None => Ok(None),
            Some(a) => {
                a.t.as_ref()
                    .map(Some)
                    .ok_or_else(|| self.attr_err(name, "of type TENSOR but holds no tensor"))
            }
        }
    }
}
