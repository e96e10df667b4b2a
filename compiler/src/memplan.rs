//! On-chip buffer planning by liveness, and its independent checker.
//!
//! Buffers that are never live at the same time may share addresses. The
//! planner places buffers largest first, each at the lowest aligned offset that
//! overlaps no already placed buffer whose lifetime overlaps its own (a
//! best-fit offset assignment). [`check`] verifies a plan independently: every
//! offset aligned, no two simultaneously live buffers overlapping, everything
//! within capacity.

/// A buffer to place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// Bytes.
    pub size: u64,
    /// Required alignment of its offset (a power of two or any positive number).
    pub align: u64,
    /// First and last step (inclusive) at which it holds live data.
    pub live: (usize, usize),
}

/// Where each buffer goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Byte offset of each buffer, in input order.
    pub offsets: Vec<u64>,
    /// Bytes the plan uses (the highest end).
    pub peak: u64,
}

/// The buffers do not fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoesNotFit {
    /// Bytes the best plan found needs.
    pub needed: u64,
    /// Bytes available.
    pub capacity: u64,
}

impl std::fmt::Display for DoesNotFit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the buffers need {} bytes at their peak, but only {} are available",
            self.needed, self.capacity
        )
    }
}

impl std::error::Error for DoesNotFit {}

fn lives_overlap(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

fn align_up(x: u64, a: u64) -> u64 {
    let a = a.max(1);
    x.div_ceil(a) * a
}

/// Places the buffers within `capacity` bytes, largest first. Where that
/// leaves a buffer beyond the capacity (a greedy placement can need more
/// than the most bytes ever live at once), the buffer that ends highest is
/// moved to the front of the order and all are placed again, up to
/// [`PROMOTIONS`] times; failing that, earliest first. The error gives
/// what the largest-first plan needs.
pub fn plan(buffers: &[Buffer], capacity: u64) -> Result<Plan, DoesNotFit> {
    let mut order = largest_first(buffers);
    let mut p = place(buffers, &order, u64::MAX);
    let needed = p.peak;
    for _ in 0..PROMOTIONS {
        if p.peak <= capacity {
            return Ok(p);
        }
        let Some(top) = (0..buffers.len()).max_by_key(|&i| (p.offsets[i] + buffers[i].size, i))
        else {
            break;
        };
        let at = order.iter().position(|&i| i == top).unwrap_or(0);
        if at == 0 {
            break;
        }
        order[..=at].rotate_right(1);
        p = place(buffers, &order, u64::MAX);
    }
    if p.peak <= capacity {
        return Ok(p);
    }
    let mut earliest: Vec<usize> = (0..buffers.len()).collect();
    earliest.sort_by_key(|&i| (buffers[i].live.0, std::cmp::Reverse(buffers[i].size), i));
    let p = place(buffers, &earliest, capacity);
    if p.peak <= capacity {
        return Ok(p);
    }
    Err(DoesNotFit { needed, capacity })
}

/// How many times [`plan`] moves the buffer that ends highest to the front.
pub const PROMOTIONS: usize = 32;

/// [`plan`] without its second tries: largest first, giving up as soon as
/// a buffer lands beyond `capacity` (for trying variants of a set of
/// buffers quickly).
pub fn plan_within(buffers: &[Buffer], capacity: u64) -> Option<Plan> {
    let p = place(buffers, &largest_first(buffers), capacity);
    (p.peak <= capacity).then_some(p)
}

fn largest_first(buffers: &[Buffer]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].size), buffers[i].live.0, i));
    order
}

/// Each buffer in `order` at the lowest aligned offset free throughout its
/// lifetime; stops (with the peak so far) once a buffer ends beyond
/// `give_up_above`.
fn place(buffers: &[Buffer], order: &[usize], give_up_above: u64) -> Plan {
    let mut offsets = vec![0u64; buffers.len()];
    // Placed buffers by address: (start, end, lifetime).
    let mut placed: Vec<(u64, u64, (usize, usize))> = Vec::with_capacity(buffers.len());
    let mut peak = 0;
    for &i in order {
        let b = &buffers[i];
        // The lowest aligned gap among the placed buffers alive at the same
        // time, visited by address.
        let mut at = 0u64;
        for &(start, end, live) in &placed {
            if !lives_overlap(live, b.live) {
                continue;
            }
            if align_up(at, b.align) + b.size <= start {
                break;
            }
            at = at.max(end);
        }
        let o = align_up(at, b.align);
        offsets[i] = o;
        peak = peak.max(o + b.size);
        if peak > give_up_above {
            break;
        }
        let entry = (o, o + b.size, b.live);
        let k = placed.partition_point(|p| (p.0, p.1) <= (entry.0, entry.1));
        placed.insert(k, entry);
    }
    Plan { offsets, peak }
}

/// Pairs of buffers live together whose bytes overlap, by a sweep along
/// the program: the buffers live when one starts, kept by address, are
/// the only ones it can meet, and among them those just below its end.
/// Once two overlap, later pairs may go unreported: the list is complete
/// up to the first overlap, and empty exactly when there is none.
fn overlaps(buffers: &[Buffer], offsets: &[u64]) -> Vec<String> {
    use std::cmp::Reverse;
    use std::collections::{BTreeMap, BinaryHeap};
    let mut order: Vec<usize> = (0..buffers.len())
        .filter(|&i| buffers[i].size > 0)
        .collect();
    order.sort_by_key(|&i| (buffers[i].live.0, i));
    // Live buffers by (offset, index), and when each stops being live.
    let mut live: BTreeMap<(u64, usize), u64> = BTreeMap::new();
    let mut ends: BinaryHeap<Reverse<(usize, u64, usize)>> = BinaryHeap::new();
    let mut errors = Vec::new();
    for i in order {
        let (b, o) = (&buffers[i], offsets[i]);
        while let Some(&Reverse((end, p, j))) = ends.peek() {
            if end >= b.live.0 {
                break;
            }
            ends.pop();
            live.remove(&(p, j));
        }
        // Those starting below `o + size`, highest first, while they reach past `o`.
        for (&(_, j), &end) in live.range(..(o + b.size, 0)).rev() {
            if end <= o {
                break;
            }
            let (lo, hi) = if j < i { (j, i) } else { (i, j) };
            let at = |k: usize| (offsets[k], offsets[k] + buffers[k].size);
            errors.push(format!(
                "buffers {lo} [{}, {}) and {hi} [{}, {}) are live together and overlap",
                at(lo).0,
                at(lo).1,
                at(hi).0,
                at(hi).1
            ));
        }
        live.insert((o, i), o + b.size);
        ends.push(Reverse((b.live.1, o, i)));
    }
    errors
}

/// Every problem with a plan (empty: it is valid).
pub fn check(buffers: &[Buffer], plan: &Plan, capacity: u64) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    if plan.offsets.len() != buffers.len() {
        errors.push(format!(
            "{} offsets for {} buffers",
            plan.offsets.len(),
            buffers.len()
        ));
        return Err(errors);
    }
    for (i, (b, o)) in buffers.iter().zip(&plan.offsets).enumerate() {
        if o % b.align.max(1) != 0 {
            errors.push(format!("buffer {i} at {o} is not aligned to {}", b.align));
        }
        if o + b.size > capacity {
            errors.push(format!(
                "buffer {i} ends at {}, beyond the {capacity} bytes available",
                o + b.size
            ));
        }
    }
    errors.extend(overlaps(buffers, &plan.offsets));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn buf(size: u64, live: (usize, usize)) -> Buffer {
        Buffer {
            size,
            align: 64,
            live,
        }
    }

    #[test]
    fn buffers_with_disjoint_lifetimes_share_memory() {
        let bufs = [buf(1024, (0, 1)), buf(1024, (2, 3)), buf(512, (1, 2))];
        let p = plan(&bufs, 4096).expect("fits");
        assert_eq!(
            p.offsets[0], p.offsets[1],
            "0 and 1 are never live together"
        );
        assert_eq!(p.peak, 1536);
        check(&bufs, &p, 4096).expect("valid");
    }

    #[test]
    fn too_little_memory_is_an_error_with_the_need() {
        let bufs = [buf(1024, (0, 1)), buf(1024, (1, 2))];
        assert_eq!(
            plan(&bufs, 1500),
            Err(DoesNotFit {
                needed: 2048,
                capacity: 1500
            })
        );
    }

    /// Largest first needs 11 bytes here (the 3-byte buffer lands above
    /// two 4-byte ones placed apart); at most 8 are ever live at once, and
    /// placing the 3-byte one first fits them in 8.
    #[test]
    fn another_order_fits_where_largest_first_does_not() {
        let bufs: Vec<Buffer> = [(4, (2, 2)), (3, (4, 6)), (4, (2, 4)), (4, (5, 6))]
            .into_iter()
            .map(|(size, live)| Buffer {
                size,
                align: 1,
                live,
            })
            .collect();
        assert!(
            plan_within(&bufs, 10).is_none(),
            "largest first fits 10 bytes?"
        );
        assert_eq!(
            plan(&bufs, 7),
            Err(DoesNotFit {
                needed: 11,
                capacity: 7
            })
        );
        let p = plan(&bufs, 8).expect("placed again, 8 bytes fit");
        assert!(p.peak <= 8);
        check(&bufs, &p, 8).expect("valid");
    }

    #[test]
    fn the_checker_finds_overlaps_misalignment_and_overflow() {
        let bufs = [buf(100, (0, 5)), buf(100, (3, 4))];
        let bad = Plan {
            offsets: vec![0, 50],
            peak: 150,
        };
        let errors = check(&bufs, &bad, 120).expect_err("invalid");
        assert!(errors.iter().any(|e| e.contains("overlap")), "{errors:?}");
        assert!(
            errors.iter().any(|e| e.contains("not aligned")),
            "{errors:?}"
        );
        assert!(errors.iter().any(|e| e.contains("beyond")), "{errors:?}");
    }

    /// The planner as first written: for each buffer, the placed buffers
    /// alive with it collected and sorted by address.
    fn reference_plan(buffers: &[Buffer]) -> Vec<u64> {
        let mut order: Vec<usize> = (0..buffers.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].size), buffers[i].live.0, i));
        let mut offsets = vec![0u64; buffers.len()];
        let mut placed: Vec<usize> = Vec::new();
        for i in order {
            let b = &buffers[i];
            let mut busy: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&j| lives_overlap(buffers[j].live, b.live))
                .map(|&j| (offsets[j], offsets[j] + buffers[j].size))
                .collect();
            busy.sort_unstable();
            let mut at = 0u64;
            for (start, end) in busy {
                if align_up(at, b.align) + b.size <= start {
                    break;
                }
                at = at.max(end);
            }
            offsets[i] = align_up(at, b.align);
            placed.push(i);
        }
        offsets
    }

    /// Every pair of buffers, compared: what the sweep replaces.
    fn overlapping_pairs(buffers: &[Buffer], offsets: &[u64]) -> usize {
        let mut n = 0;
        for i in 0..buffers.len() {
            for j in i + 1..buffers.len() {
                let (b, c) = (&buffers[i], &buffers[j]);
                if lives_overlap(b.live, c.live)
                    && offsets[i] < offsets[j] + c.size
                    && offsets[j] < offsets[i] + b.size
                    && b.size > 0
                    && c.size > 0
                {
                    n += 1;
                }
            }
        }
        n
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

        /// Keeping the placed buffers sorted by address places every buffer
        /// where sorting the live ones each time did; giving up early only
        /// ever refuses plans that do not fit.
        #[test]
        fn plans_match_the_reference(raw in prop::collection::vec((1u64..5000, 0usize..20, 0usize..8, 0u32..4), 0..60), cap in 1000u64..40000) {
            let bufs: Vec<Buffer> = raw.iter().map(|(s, a, l, k)| Buffer { size: *s, align: 1 << k, live: (*a, a + l) }).collect();
            let want = reference_plan(&bufs);
            let p = plan(&bufs, u64::MAX / 4).expect("unbounded capacity");
            prop_assert_eq!(&p.offsets, &want);
            let fits = p.peak <= cap;
            prop_assert_eq!(plan_within(&bufs, cap).is_some(), fits);
            // The other orders may fit where largest-first does not.
            match plan(&bufs, cap) {
                Ok(q) => {
                    prop_assert!(check(&bufs, &q, cap).is_ok());
                    if fits {
                        prop_assert_eq!(&q.offsets, &want);
                    }
                }
                Err(e) => {
                    prop_assert!(!fits);
                    prop_assert_eq!(e.needed, p.peak);
                }
            }
        }

        /// The checker's sweep finds an overlap exactly where comparing every
        /// pair does, also in a valid plan with one buffer moved.
        #[test]
        fn the_sweep_finds_what_every_pair_finds(raw in prop::collection::vec((1u64..300, 0u64..1000, 0usize..20, 0usize..8), 0..40)) {
            let bufs: Vec<Buffer> = raw.iter().map(|(s, _, a, l)| Buffer { size: *s, align: 1, live: (*a, a + l) }).collect();
            let offsets: Vec<u64> = raw.iter().map(|r| r.1).collect();
            let pairs = overlapping_pairs(&bufs, &offsets);
            let found = overlaps(&bufs, &offsets).len();
            prop_assert_eq!(found == 0, pairs == 0);
            prop_assert!(found <= pairs);
            // A valid plan with one buffer moved onto others: every pair.
            let p = plan(&bufs, u64::MAX / 4).expect("unbounded capacity");
            if !bufs.is_empty() {
                let mut moved = p.offsets;
                moved[0] = raw[0].1;
                prop_assert_eq!(overlaps(&bufs, &moved).is_empty(), overlapping_pairs(&bufs, &moved) == 0);
            }
        }

        /// Every plan the planner returns passes the checker, and uses no less than the largest live set needs.
        #[test]
        fn plans_are_valid(raw in prop::collection::vec((1u64..5000, 0usize..20, 0usize..8, 0u32..4), 0..40)) {
            let bufs: Vec<Buffer> = raw.iter().map(|(s, a, l, k)| Buffer { size: *s, align: 1 << k, live: (*a, a + l) }).collect();
            let p = plan(&bufs, u64::MAX / 4).expect("unbounded capacity");
            prop_assert!(check(&bufs, &p, u64::MAX / 4).is_ok());
            let lower = (0..30).map(|t| bufs.iter().filter(|b| b.live.0 <= t && t <= b.live.1).map(|b| b.size).sum::<u64>()).max().unwrap_or(0);
            prop_assert!(p.peak >= lower);
        }
    }
}
