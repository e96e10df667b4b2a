//! The scheduler's unit tests: reversed successors, the checker's use of
//! a claimed placement, and the memory records' page index.

use super::chains::Chains;
use super::checker::{check_deps, claimed_placement};
use super::edges::Edge;
use super::facts::Info;
use super::list::Successors;
use super::records::{MemRecords, Record};
use super::{Deps, Rules, flatten, schedule_placed};
use isa_specs::Machine;
use isa_specs::target::{Bundle, MInst};
use proptest::prelude::*;
use targets::sim::Span;

fn span((start, len, pitch, width): (i64, i64, i64, i64)) -> Span {
    if pitch == 0 || width >= pitch {
        Span::dense(start, start + len)
    } else {
        // Whole rows: `len` rounded down to rows of `pitch`, plus the last row's width.
        let rows = (len / pitch).max(1);
        Span {
            start,
            end: start + (rows - 1) * pitch + width,
            pitch,
            width,
        }
    }
}

/// vliw-systolic, and the instructions of an assembly text for it.
fn vliw_program(text: &str) -> (&'static targets::Target, &'static Machine, Vec<MInst>) {
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let p = isa_specs::assembly::assemble(t.isa(), m, "t.s", text).expect("assembles");
    let insts = flatten(&isa_specs::target::decode_program(t.isa(), m, &p.code).expect("decodes"));
    (t, m, insts)
}

/// The reversed successors read straight from the edges are those of
/// the program with every edge turned round and every index mirrored.
#[test]
fn reversed_successors_are_the_edges_turned_round() {
    let (t, m, insts) = vliw_program(
        "vexp vreg1, vreg0\nvadd vreg2, vreg1, vreg1\nvmul vreg3, vreg2, vreg1\nvexp vreg1, vreg3\nhalt\n",
    );
    let deps = Deps::new(t, m, &insts, Rules::default());
    let n = deps.infos.len();
    assert!(deps.edges.len() >= 4, "{:?}", deps.edges);
    let turned = Deps {
        edges: deps
            .edges
            .iter()
            .map(|e| Edge {
                from: (n - 1 - e.to()) as u32,
                to: (n - 1 - e.from()) as u32,
                ..*e
            })
            .collect(),
        infos: deps.infos.iter().rev().map(|i| Info { ..*i }).collect(),
        rules: deps.rules,
        bookings: Vec::new(),
        chains: Chains::default(),
    };
    let (fast, slow) = (Successors::reversed(&deps), turned.successors());
    for i in 0..n {
        let mut a: Vec<_> = fast.of(i).collect();
        let mut b: Vec<_> = slow.of(i).collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "instruction {i}");
    }
}

/// The checker takes the scheduler's word for where each instruction
/// went only as far as it holds: a true claim passes, a false claim of a
/// good schedule falls back to matching by bits and passes, and a bad
/// schedule fails under its own true claim.
#[test]
fn a_claimed_placement_is_checked_not_trusted() {
    let (t, m, insts) =
        vliw_program("vexp vreg1, vreg0\nvadd vreg2, vreg1, vreg1\nvexp vreg1, vreg0\nhalt\n");
    let rules = Rules::default();
    let deps = Deps::new(t, m, &insts, rules);
    let (good, placed) = schedule_placed(t, m, &insts, rules);
    assert!(claimed_placement(&insts, &good, &placed).is_some());
    check_deps(m, &insts, &good, &deps, Some(&placed)).expect("true claim");
    // Both `vexp`s claimed in each other's bundle, and everything in bundle 0.
    let mut swapped = placed;
    swapped.swap(0, 2);
    let all_first = vec![0; insts.len()];
    for claim in [&swapped, &all_first] {
        check_deps(m, &insts, &good, &deps, Some(claim)).expect("false claim, good schedule");
    }
    assert!(claimed_placement(&insts, &good, &all_first).is_none());
    // Back to back: the `vadd` issues before the first `vexp`'s result.
    let bad: Vec<Bundle> = insts
        .iter()
        .map(|i| Bundle {
            ops: vec![(m.instructions[i.inst.index()].timing.slots[0], i.clone())],
        })
        .collect();
    let in_order: Vec<usize> = (0..insts.len()).collect();
    assert!(claimed_placement(&insts, &bad, &in_order).is_some());
    let errors = check_deps(m, &insts, &bad, &deps, Some(&in_order)).expect_err("too early");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("depends on instruction 0")),
        "{errors:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// The page index finds exactly the live records a scan of all of
    /// them finds, through pushes and retirements of small, strided and
    /// large (over 4 MiB) spans.
    #[test]
    fn the_page_index_finds_what_a_scan_finds(
        ops in prop::collection::vec(
            (0u8..3, 0i64..(1 << 23), 1i64..(1 << 23), 0i64..4096, 1i64..4096),
            1..60,
        ),
        page_bits in 8u32..=15,
    ) {
        let mut index = MemRecords::new(page_bits);
        // What was pushed: the op that made it, its span, whether live.
        let mut all: Vec<(usize, Span, bool)> = Vec::new();
        for (k, (op, start, len, pitch, width)) in ops.into_iter().enumerate() {
            let len = if k % 3 == 0 { len } else { len % 300_000 + 1 };
            let s = span((start, len, pitch, width));
            match op {
                0 => {
                    index.push(Record { span: s, writer: Some(k), readers: Vec::new() });
                    all.push((k, s, true));
                }
                1 => {
                    index.retire_within(s);
                    for r in all.iter_mut().filter(|r| s.covers(&r.1)) {
                        r.2 = false;
                    }
                }
                _ => {}
            }
            let mut found: Vec<usize> = Vec::new();
            index.for_each_overlapping(s, |r| found.extend(r.writer));
            found.sort_unstable();
            let want: Vec<usize> = all
                .iter()
                .filter(|r| r.2 && r.1.overlaps(&s))
                .map(|r| r.0)
                .collect();
            prop_assert_eq!(found, want);
        }
    }
}
