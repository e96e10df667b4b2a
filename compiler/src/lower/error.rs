//! Why a graph cannot be compiled for a machine, as a value the compiler's
//! own decisions match on (never on message text).

/// Why a graph cannot be compiled for a machine.
///
/// Each kind keeps the message it prints; [`LowerError::AtNode`] adds the
/// node to blame around any of them.
#[derive(Debug, Clone, PartialEq)]
pub enum LowerError {
    /// No instruction has the semantics an operation needs.
    MissingOperation {
        /// The semantics lacked, as a description writes them (`d = exp(a)`).
        semantics: String,
        /// What is printed.
        message: String,
    },
    /// On-chip buffers do not fit a memory.
    MemoryOverflow {
        /// The memory's name.
        memory: String,
        /// Bytes the buffers need, at least.
        needed: u64,
        /// Bytes the memory has.
        capacity: u64,
        /// What is printed.
        message: String,
    },
    /// What the compiler was given cannot be used: a graph failing the IR
    /// verifier, mappings for another machine or for no matrix product.
    InvalidInput {
        /// What is printed.
        message: String,
    },
    /// A form of an operation, or a combination of shapes, types and places,
    /// that the lowering does not handle on this machine.
    Unsupported {
        /// What is printed.
        message: String,
    },
    /// Any of the others, at a node of the graph.
    AtNode {
        /// The node's name.
        node: String,
        /// Its op.
        op: String,
        /// What went wrong there.
        cause: Box<LowerError>,
    },
}

impl LowerError {
    /// The node to blame, when one is.
    pub fn node(&self) -> Option<&str> {
        match self {
            LowerError::AtNode { node, .. } => Some(node),
            _ => None,
        }
    }

    /// The op of the node to blame, when one is.
    pub fn op(&self) -> Option<&str> {
        match self {
            LowerError::AtNode { op, .. } => Some(op),
            _ => None,
        }
    }

    /// The error without the node to blame.
    pub fn cause(&self) -> &LowerError {
        match self {
            LowerError::AtNode { cause, .. } => cause.cause(),
            e => e,
        }
    }

    /// [`LowerError::cause`], owned.
    pub fn into_cause(self) -> LowerError {
        match self {
            LowerError::AtNode { cause, .. } => cause.into_cause(),
            e => e,
        }
    }

    /// What went wrong, without the node.
    pub fn message(&self) -> &str {
        match self.cause() {
            LowerError::MissingOperation { message, .. }
            | LowerError::MemoryOverflow { message, .. }
            | LowerError::InvalidInput { message }
            | LowerError::Unsupported { message } => message,
            LowerError::AtNode { .. } => unreachable!("a cause has no node"),
        }
    }

    /// The same error, its message rewritten by `f` (the kind and the node kept).
    #[must_use]
    pub fn reworded(self, f: impl FnOnce(&str) -> String) -> LowerError {
        match self {
            LowerError::AtNode { node, op, cause } => LowerError::AtNode {
                node,
                op,
                cause: Box::new(cause.reworded(f)),
            },
            LowerError::MissingOperation { semantics, message } => LowerError::MissingOperation {
                semantics,
                message: f(&message),
            },
            LowerError::MemoryOverflow {
                memory,
                needed,
                capacity,
                message,
            } => LowerError::MemoryOverflow {
                memory,
                needed,
                capacity,
                message: f(&message),
            },
            LowerError::InvalidInput { message } => LowerError::InvalidInput {
                message: f(&message),
            },
            LowerError::Unsupported { message } => LowerError::Unsupported {
                message: f(&message),
            },
        }
    }

    /// The error at node `n`, unless it names a node already.
    #[must_use]
    pub fn at(self, n: &crate::ir::Node) -> LowerError {
        match self {
            e @ LowerError::AtNode { .. } => e,
            e => LowerError::AtNode {
                node: n.name.clone(),
                op: n.op.name().to_owned(),
                cause: Box::new(e),
            },
        }
    }

    /// The kind of error, as JSON reports name it: `missing_operation`,
    /// `memory_overflow`, `invalid_input` or `unsupported`.
    pub fn kind(&self) -> &'static str {
        match self.cause() {
            LowerError::MissingOperation { .. } => "missing_operation",
            LowerError::MemoryOverflow { .. } => "memory_overflow",
            LowerError::InvalidInput { .. } => "invalid_input",
            LowerError::Unsupported { .. } | LowerError::AtNode { .. } => "unsupported",
        }
    }

    /// Whether the machine lacks the element-wise operation `semantics`.
    pub fn lacks(&self, semantics: &str) -> bool {
        matches!(self.cause(), LowerError::MissingOperation { semantics: s, .. } if s == semantics)
    }

    /// Whether on-chip buffers overflowed a memory.
    pub fn is_overflow(&self) -> bool {
        matches!(self.cause(), LowerError::MemoryOverflow { .. })
    }
}

impl std::fmt::Display for LowerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LowerError::AtNode { node, op, cause } => write!(f, "{op} node `{node}`: {cause}"),
            e => f.write_str(e.message()),
        }
    }
}

impl std::error::Error for LowerError {}

impl From<String> for LowerError {
    fn from(message: String) -> LowerError {
        LowerError::Unsupported { message }
    }
}

impl From<&str> for LowerError {
    fn from(message: &str) -> LowerError {
        LowerError::Unsupported {
            message: message.to_owned(),
        }
    }
}

impl From<crate::passes::PassError> for LowerError {
    fn from(e: crate::passes::PassError) -> LowerError {
        LowerError::AtNode {
            node: e.node,
            op: e.op,
            cause: Box::new(LowerError::Unsupported { message: e.message }),
        }
    }
}

/// On-chip buffers overflowing memory `memory`, as the planner found.
pub(crate) fn overflow(memory: &str, e: &crate::memplan::DoesNotFit) -> LowerError {
    LowerError::MemoryOverflow {
        memory: memory.to_owned(),
        needed: e.needed,
        capacity: e.capacity,
        message: format!("memory `{memory}`: {e}"),
    }
}

/// An error of a kind no decision looks at ([`LowerError::Unsupported`]),
/// or `e` itself where it is a [`LowerError`] already.
pub(crate) fn err(e: impl Into<LowerError>) -> LowerError {
    e.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_wraps_once_and_the_text_is_the_old_form() {
        let n = crate::ir::Node {
            name: "n1".into(),
            op: crate::ir::Op::Add,
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        let e = LowerError::MissingOperation {
            semantics: "d = exp(a)".into(),
            message: "the target lacks `d = exp(a)`".into(),
        };
        let at = e.clone().at(&n).at(&n);
        assert_eq!(
            at.to_string(),
            "Add node `n1`: the target lacks `d = exp(a)`"
        );
        assert_eq!(at.node(), Some("n1"));
        assert!(at.lacks("d = exp(a)") && !at.lacks("d = a + b"));
        assert_eq!(at.cause(), &e);
        let r = at.reworded(|m| format!("x: {m}"));
        assert_eq!(
            r.to_string(),
            "Add node `n1`: x: the target lacks `d = exp(a)`"
        );
        assert!(r.lacks("d = exp(a)"));
        assert_eq!(err("plain").to_string(), "plain");
    }
}
