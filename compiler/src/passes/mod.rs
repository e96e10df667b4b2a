//! Graph-to-graph passes before lowering, independent of any machine but
//! for the capabilities they are told of: the rewrites into forms the tile
//! lowering handles (`canon`), instruction selection by algebraic
//! identities for operations a machine lacks (`select`, told the machine's
//! costs), and the fusion decisions made on the graph —
//! attention as one region (`fuse`), layout changes that undo each other
//! across element-wise operations (`layout`) and row groups (`rowgroups`: layer
//! normalisations, softmaxes, GELUs).

pub mod canon;
pub mod fuse;
pub mod layout;
pub mod rowgroups;
pub mod select;

/// Why a pass cannot rewrite a graph: the node and what it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct PassError {
    /// The node's name.
    pub node: String,
    /// Its op.
    pub op: String,
    /// What cannot be done.
    pub message: String,
}

impl std::fmt::Display for PassError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} node `{}`: {}", self.op, self.node, self.message)
    }
}

impl std::error::Error for PassError {}
