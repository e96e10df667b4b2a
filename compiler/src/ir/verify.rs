//! The IR verifier, run after every pass in debug builds and tests: every
//! value has one definition before its uses, node types agree with the op
//! rules, constants match their values' types.

use super::{Graph, infer};

/// Every problem found (empty: the graph is well formed).
pub fn verify(g: &Graph) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    let mut defined = vec![false; g.values.len()];
    let mut define = |v: super::ValueId, what: &str, errors: &mut Vec<String>| match defined
        .get_mut(v.index())
    {
        None => errors.push(format!("{what}: value #{} does not exist", v.0)),
        Some(true) => errors.push(format!(
            "{what}: value `{}` is defined twice",
            g.values[v.index()].name
        )),
        Some(d) => *d = true,
    };
    for v in &g.inputs {
        define(*v, "graph input", &mut errors);
    }
    for (v, t) in &g.constants {
        define(*v, "constant", &mut errors);
        if let Some(val) = g.values.get(v.index()) {
            if val.ty != t.ty {
                errors.push(format!(
                    "constant `{}` is {} but its value is {}",
                    val.name, t.ty, val.ty
                ));
            }
            if t.data.len() != t.ty.numel() {
                errors.push(format!(
                    "constant `{}` has {} elements for type {}",
                    val.name,
                    t.data.len(),
                    t.ty
                ));
            }
        }
    }
    let mut available = vec![false; g.values.len()];
    for v in g.inputs.iter().chain(g.constants.keys()) {
        if let Some(a) = available.get_mut(v.index()) {
            *a = true;
        }
    }
    for n in &g.nodes {
        for i in &n.inputs {
            if !available.get(i.index()).copied().unwrap_or(false) {
                errors.push(format!(
                    "node `{}`: input #{} is used before it is defined",
                    n.name, i.0
                ));
            }
        }
        let tys: Vec<_> = n
            .inputs
            .iter()
            .filter_map(|i| g.values.get(i.index()).map(|v| v.ty.clone()))
            .collect();
        match infer(&n.op, &tys) {
            Ok(out) => {
                let have: Vec<_> = n
                    .outputs
                    .iter()
                    .filter_map(|o| g.values.get(o.index()).map(|v| v.ty.clone()))
                    .collect();
                if have != out {
                    errors.push(format!(
                        "node `{}` ({}): outputs typed {have:?}, the op gives {out:?}",
                        n.name,
                        n.op.name()
                    ));
                }
            }
            Err(e) => errors.push(format!("node `{}` ({}): {e}", n.name, n.op.name())),
        }
        for o in &n.outputs {
            define(*o, &format!("node `{}`", n.name), &mut errors);
            if let Some(a) = available.get_mut(o.index()) {
                *a = true;
            }
        }
    }
    for o in &g.outputs {
        if !available.get(o.index()).copied().unwrap_or(false) {
            errors.push(format!("graph output #{} is never defined", o.0));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}
