//! The tuning space of matrix products: how each product may be mapped onto
//! the machine (which contraction instruction, which tile sizes, in which
//! order the output tiles are visited), the analytical estimate of each
//! mapping, and mappings chosen from outside the compiler (a file, or
//! `tessera::tune` measuring candidates on the simulator).
//!
//! The space is enumerable: [`SpaceEntry`] lists, per product, every
//! instruction with the tile sizes it accepts on each axis and the orders,
//! and the best few mappings by estimate. A script can pick any point of it
//! and hand it back through [`Mappings`] (`tessera compile --mapping FILE`);
//! a point the machine cannot take is refused with the reason.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The order output tiles of a product are visited in.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Row blocks outer, column blocks inner: a run of `A` staged on chip
    /// serves every tile of its rows (the input stays, the weights stream).
    #[default]
    Rows,
    /// Column blocks outer, row blocks inner: a run of `B` (the weights)
    /// staged on chip serves every tile of its columns (weight-stationary
    /// order: the weights stay, the inputs stream).
    Cols,
}

/// One point of a product's tuning space.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mapping {
    /// The contraction instruction (its overwriting form where it has one;
    /// the accumulating partner is used for later reduction steps).
    pub inst: String,
    /// Tile rows, columns and reduction depth of one instruction.
    pub tm: i64,
    pub tn: i64,
    pub tk: i64,
    /// Visiting order of the output tiles.
    #[serde(default)]
    pub order: Order,
}

impl std::fmt::Display for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let order = match self.order {
            Order::Rows => "rows",
            Order::Cols => "cols",
        };
        write!(
            f,
            "{} {}x{}x{} {order}-first",
            self.inst, self.tm, self.tn, self.tk
        )
    }
}

/// Mappings for some products of a model, by the `MatMul` node's name; the
/// products not named get the compiler's own choice.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Mappings {
    /// The machine they were chosen for (checked when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Node name to mapping.
    pub mappings: BTreeMap<String, Mapping>,
}

impl Mappings {
    /// Mappings read from JSON: the object itself, or the output of
    /// `tessera compile --emit mappings --format json` holding it.
    pub fn from_json(text: &str) -> Result<Mappings, String> {
        #[derive(Deserialize)]
        struct Emitted {
            mappings: Mappings,
        }
        serde_json::from_str(text)
            .or_else(|e| {
                serde_json::from_str::<Emitted>(text)
                    .map(|x| x.mappings)
                    .map_err(|_| e)
            })
            .map_err(|e| format!("line {}, column {}: {e}", e.line(), e.column()))
    }
}

/// The tile sizes one instruction accepts for a product, per axis (every
/// combination was probed: the instruction takes it and its operands fit).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Axes {
    pub inst: String,
    pub tm: Vec<i64>,
    pub tn: Vec<i64>,
    pub tk: Vec<i64>,
    /// How many `(tm, tn, tk)` combinations of the axes are valid.
    pub valid: usize,
}

/// A mapping with its analytical estimate (cycles).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    pub mapping: Mapping,
    pub estimate: i64,
}

/// One matrix product's tuning space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpaceEntry {
    /// The `MatMul` node.
    pub node: String,
    /// Rows (per batch), columns, reduction, batches.
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub batches: usize,
    /// The instructions and the tile sizes each accepts.
    pub axes: Vec<Axes>,
    /// The orders the tile loop can take.
    pub orders: Vec<Order>,
    /// The best mappings by estimate, best first.
    pub ranked: Vec<Ranked>,
    /// What was compiled (the compiler's choice, or the one given).
    pub chosen: Mapping,
    /// Whether `chosen` was given from outside.
    pub given: bool,
}

/// How many ranked mappings a space entry keeps.
pub const RANKED: usize = 16;
