//! The register allocator on straight-line vector code of the `pim-dram`
//! target (32 vector registers), each result judged by the independent
//! checker, and the checker judged on allocations made wrong on purpose.

use compiler::regalloc::{VInst, VOperand, allocate, allocate_sided, check, in_place, roles};
use isa_specs::Machine;
use isa_specs::model::RegFileId;
use isa_specs::target::OpValue;
use proptest::prelude::*;

fn machine() -> &'static Machine {
    targets::by_name("pim-dram")
        .expect("pim-dram target")
        .machine()
}

fn file(m: &Machine, name: &str) -> RegFileId {
    RegFileId::from_index(
        m.regfiles
            .iter()
            .position(|r| r.name == name)
            .expect("register file"),
    )
}

fn inst(m: &Machine, name: &str, operands: Vec<VOperand>) -> VInst {
    VInst {
        inst: m.instruction(name).expect("instruction"),
        operands,
    }
}

fn v(m: &Machine, n: u32) -> VOperand {
    VOperand::Virtual(file(m, "v"), n)
}

fn addr(k: u64) -> VOperand {
    VOperand::Fixed(OpValue::Addr(k * 256))
}

/// Loads `n` vectors, then sums them pairwise into one, which is stored.
fn reduction(m: &Machine, n: u32) -> Vec<VInst> {
    let mut code: Vec<VInst> = (0..n)
        .map(|k| inst(m, "vld", vec![v(m, k), addr(u64::from(k))]))
        .collect();
    let mut live: Vec<u32> = (0..n).collect();
    let mut next = n;
    while live.len() > 1 {
        let (a, b) = (live.remove(0), live.remove(0));
        code.push(inst(m, "vadd", vec![v(m, next), v(m, a), v(m, b)]));
        live.push(next);
        next += 1;
    }
    code.push(inst(m, "vst", vec![addr(1000), v(m, live[0])]));
    code
}

#[test]
fn roles_follow_the_semantics() {
    let m = machine();
    let id = |n| m.instruction(n).expect("instruction");
    assert_eq!(
        roles(m, id("vadd")),
        (vec![false, true, true], vec![true, false, false])
    );
    assert_eq!(roles(m, id("vst")), (vec![false, true], vec![true, false]));
    // `mac` accumulates (`+=`): its accumulator is read as well as written.
    let (reads, writes) = roles(m, id("mac"));
    let acc = writes
        .iter()
        .position(|w| *w)
        .expect("mac writes something");
    assert!(reads[acc], "an accumulated operand is read");
}

#[test]
fn in_place_only_where_element_wise() {
    let m = machine();
    let id = |n| m.instruction(n).expect("instruction");
    assert!(in_place(m, id("vadd"), 1, 0) && in_place(m, id("vadd"), 2, 0));
    assert!(in_place(m, id("vexp"), 1, 0));
    assert!(
        !in_place(m, id("vredsum"), 1, 0),
        "a reduction reads every element"
    );
    assert!(
        !in_place(m, id("mac"), 0, 0) && !in_place(m, id("mac"), 1, 0),
        "an accumulation is not a plain write"
    );
}

#[test]
fn a_row_sum_never_overwrites_its_source() {
    // `vrsum` of vliw-systolic writes every lane of a row from all lanes of
    // that row: its result must not take its dying source's register.
    let m = targets::by_name("vliw-systolic")
        .expect("vliw-systolic target")
        .machine();
    let vreg = file(m, "vreg");
    let imm = |x| VOperand::Fixed(OpValue::Imm(x));
    let tile = |x: u64| VOperand::Fixed(OpValue::Addr(x * 4096));
    let code = vec![
        inst(
            m,
            "vld",
            vec![
                imm(8),
                imm(128),
                imm(128),
                VOperand::Virtual(vreg, 0),
                tile(0),
            ],
        ),
        inst(
            m,
            "vrsum",
            vec![
                imm(128),
                VOperand::Virtual(vreg, 1),
                VOperand::Virtual(vreg, 0),
            ],
        ),
        inst(
            m,
            "vst",
            vec![
                imm(8),
                imm(128),
                imm(128),
                VOperand::Virtual(vreg, 1),
                tile(1),
            ],
        ),
    ];
    let out = allocate(m, &code).expect("allocates");
    check(m, &code, &out).expect("checker accepts");
    assert_ne!(out[1].operands[1], out[1].operands[2], "vrsum in place");

    let mut wrong = out;
    wrong[1].operands[1] = wrong[1].operands[2];
    wrong[2].operands[3] = wrong[1].operands[2];
    let errors = check(m, &code, &wrong).expect_err("in-place row sum");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("does not read element-wise")),
        "{errors:?}"
    );
}

#[test]
fn fixed_registers_are_left_alone() {
    let m = machine();
    let fixed = |r| VOperand::Fixed(OpValue::Reg(r));
    // v0 holds a value live into the code, read again at the end.
    let code = vec![
        inst(m, "vexp", vec![v(m, 1), fixed(0)]),
        inst(m, "vadd", vec![v(m, 2), v(m, 1), fixed(0)]),
        inst(m, "vst", vec![addr(1), v(m, 2)]),
    ];
    let out = allocate(m, &code).expect("allocates");
    check(m, &code, &out).expect("checker accepts");
    assert!(
        out.iter().take(2).all(|i| i.operands[0] != OpValue::Reg(0)),
        "{out:?}"
    );

    let mut wrong = out;
    wrong[0].operands[0] = OpValue::Reg(0);
    wrong[1].operands[1] = OpValue::Reg(0);
    let errors = check(m, &code, &wrong).expect_err("live-in clobbered");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("fixed register v0 was overwritten")),
        "{errors:?}"
    );
}

#[test]
fn a_long_chain_fits_in_few_registers() {
    let m = machine();
    // 200 virtual registers, never more than 3 live at once.
    let mut code = vec![inst(m, "vld", vec![v(m, 0), addr(0)])];
    for k in 1..200 {
        code.push(inst(
            m,
            if k % 2 == 0 { "vexp" } else { "vtanh" },
            vec![v(m, k), v(m, k - 1)],
        ));
    }
    code.push(inst(m, "vst", vec![addr(1), v(m, 199)]));
    let out = allocate(m, &code).expect("allocates");
    check(m, &code, &out).expect("checker accepts");
    let used: std::collections::BTreeSet<_> = out
        .iter()
        .flat_map(|i| &i.operands)
        .filter_map(|o| {
            if let OpValue::Reg(r) = o {
                Some(*r)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        used.len(),
        1,
        "an element-wise chain runs in place, used {used:?}"
    );
}

#[test]
fn thirty_two_live_values_fit_thirty_three_do_not() {
    let m = machine();
    let code = reduction(m, 32);
    let out = allocate(m, &code).expect("32 live values fit 32 registers");
    check(m, &code, &out).expect("checker accepts");

    let err = allocate(m, &reduction(m, 33)).expect_err("33 live values do not fit");
    assert_eq!((err.file.as_str(), err.available, err.at), ("v", 32, 32));
    assert!(err.to_string().contains("registers of `v`"), "{err}");
}

#[test]
fn blocks_preferring_alternate_halves_take_registers_from_them() {
    let m = machine();
    let code = blocks(m);
    let side = |_: usize, x: u32| Some(((x / 7) % 2) as u8);
    let out = allocate_sided(m, &code, side).expect("allocates");
    check(m, &code, &out).expect("checker accepts");
    // Each block's registers lie in its half of the 32.
    for (vi, mi) in code.iter().zip(&out) {
        for (a, b) in vi.operands.iter().zip(&mi.operands) {
            if let (VOperand::Virtual(_, x), OpValue::Reg(r)) = (a, b) {
                assert_eq!(*r >= 16, (x / 7) % 2 == 1, "v{x} in r{r}");
            }
        }
    }
    // Without the preference, freed-longest-first spreads the blocks over
    // the whole file.
    let plain = allocate(m, &code).expect("allocates");
    let high = |out: &[isa_specs::target::MInst], block: usize| {
        out[block * 8..block * 8 + 8]
            .iter()
            .flat_map(|i| &i.operands)
            .any(|o| matches!(o, OpValue::Reg(r) if *r >= 16))
    };
    assert!(high(&plain, 4), "{:?}", &plain[32..40]);
}

/// Six blocks of four loads summed and stored, one after another; block
/// `b` uses virtual registers `7b .. 7b + 7`.
fn blocks(m: &isa_specs::Machine) -> Vec<VInst> {
    let mut code = Vec::new();
    for b in 0..6u32 {
        let base = b * 7;
        for k in 0..4 {
            code.push(inst(m, "vld", vec![v(m, base + k), addr(u64::from(k))]));
        }
        code.push(inst(
            m,
            "vadd",
            vec![v(m, base + 4), v(m, base), v(m, base + 1)],
        ));
        code.push(inst(
            m,
            "vadd",
            vec![v(m, base + 5), v(m, base + 2), v(m, base + 3)],
        ));
        code.push(inst(
            m,
            "vadd",
            vec![v(m, base + 6), v(m, base + 4), v(m, base + 5)],
        ));
        code.push(inst(m, "vst", vec![addr(1000), v(m, base + 6)]));
    }
    code
}

#[test]
fn blocks_preferring_quarters_take_registers_from_them_then_from_their_half() {
    let m = machine();
    let code = blocks(m);
    // Block b prefers quarter b % 4 of the 32 registers.
    let quarter = |x: u32| (x / 7) % 4;
    let side = |_: usize, x: u32| Some(compiler::regalloc::QUARTERS + quarter(x) as u8);
    let out = allocate_sided(m, &code, side).expect("allocates");
    check(m, &code, &out).expect("checker accepts");
    for (vi, mi) in code.iter().zip(&out) {
        for (a, b) in vi.operands.iter().zip(&mi.operands) {
            if let (VOperand::Virtual(_, x), OpValue::Reg(r)) = (a, b) {
                assert_eq!(*r / 8, quarter(*x), "v{x} in r{r}");
            }
        }
    }
    // Nine values live at once do not fit a quarter of 8: the ninth takes a
    // register of the same half.
    let mut wide = Vec::new();
    for k in 0..9u32 {
        wide.push(inst(m, "vld", vec![v(m, k), addr(u64::from(k))]));
    }
    for k in 1..9u32 {
        wide.push(inst(
            m,
            "vadd",
            vec![v(m, 8 + k), v(m, if k == 1 { 0 } else { 7 + k }), v(m, k)],
        ));
    }
    wide.push(inst(m, "vst", vec![addr(1000), v(m, 16)]));
    let out = allocate_sided(m, &wide, |_: usize, _: u32| {
        Some(compiler::regalloc::QUARTERS + 2)
    })
    .expect("allocates");
    check(m, &wide, &out).expect("checker accepts");
    for mi in &out[..9] {
        let OpValue::Reg(r) = mi.operands[0] else {
            panic!("a register")
        };
        assert!((16..32).contains(&r), "r{r} outside the upper half");
    }
}

#[test]
fn the_checker_catches_a_clobbered_register() {
    let m = machine();
    let code = reduction(m, 4);
    let mut out = allocate(m, &code).expect("allocates");
    // Make the second load overwrite the first one's register before it is read.
    let first = out[0].operands[0];
    out[1].operands[0] = first;
    let errors = check(m, &code, &out).expect_err("clobbered value");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("reads virtual register 1")),
        "{errors:?}"
    );
}

#[test]
fn the_checker_catches_bad_operands() {
    let m = machine();
    let code = reduction(m, 2);
    let good = allocate(m, &code).expect("allocates");

    let mut out = good.clone();
    out[2].operands[0] = OpValue::Reg(32);
    let errors = check(m, &code, &out).expect_err("no register 32");
    assert!(
        errors.iter().any(|e| e.contains("does not exist")),
        "{errors:?}"
    );

    let mut out = good.clone();
    out[0].operands[1] = OpValue::Addr(4096);
    let errors = check(m, &code, &out).expect_err("changed address");
    assert!(
        errors.iter().any(|e| e.contains("operand 1 changed")),
        "{errors:?}"
    );

    let errors = check(m, &code, &good[1..]).expect_err("missing instruction");
    assert!(errors[0].contains("allocated for"), "{errors:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random straight-line code that never holds more than 32 values: the
    /// allocator succeeds and the checker accepts; more than 32 live at once
    /// fails with the file named.
    #[test]
    fn random_code_allocates_and_checks(ops in prop::collection::vec((0u8..4, any::<u16>(), any::<u16>()), 1..120)) {
        let m = machine();
        let mut code = Vec::new();
        let mut live: Vec<u32> = Vec::new();
        let mut next = 0u32;
        for (kind, x, y) in ops {
            let pick = |s: u16, live: &Vec<u32>| live[usize::from(s) % live.len()];
            match kind {
                0 => {
                    code.push(inst(m, "vld", vec![v(m, next), addr(u64::from(x % 64))]));
                    live.push(next);
                    next += 1;
                }
                1 if !live.is_empty() => {
                    let (a, b) = (pick(x, &live), pick(y, &live));
                    code.push(inst(m, "vadd", vec![v(m, next), v(m, a), v(m, b)]));
                    live.push(next);
                    next += 1;
                }
                2 if !live.is_empty() => {
                    let a = pick(x, &live);
                    code.push(inst(m, "vexp", vec![v(m, next), v(m, a)]));
                    live.push(next);
                    next += 1;
                }
                _ if !live.is_empty() => {
                    // Last use: store and retire a value.
                    let k = usize::from(x) % live.len();
                    code.push(inst(m, "vst", vec![addr(100), v(m, live[k])]));
                    live.remove(k);
                }
                _ => {}
            }
            if live.len() > 31 {
                break;
            }
        }
        match allocate(m, &code) {
            Ok(out) => prop_assert!(check(m, &code, &out).is_ok(), "{:?}", check(m, &code, &out)),
            Err(e) => {
                // Only possible when some instruction needs a 33rd register.
                prop_assert_eq!(e.file.as_str(), "v");
                prop_assert!(e.needed > 32, "{}", e);
            }
        }
    }
}

mod common;

/// Renames every register a hand-written program writes into a fresh virtual
/// register per definition (registers read before any write, and operands
/// both read and written before a definition, stay fixed).
fn devirtualise(m: &Machine, code: &[isa_specs::target::MInst]) -> Vec<VInst> {
    use isa_specs::model::OperandKind;
    let mut current: std::collections::HashMap<(RegFileId, u32), u32> =
        std::collections::HashMap::new();
    let mut next = 0u32;
    code.iter()
        .map(|mi| {
            let def = &m.instructions[mi.inst.index()];
            let (reads, writes) = roles(m, mi.inst);
            let operands = mi
                .operands
                .iter()
                .enumerate()
                .map(|(k, op)| match (&def.operands[k].kind, op) {
                    (OperandKind::Reg { file, .. }, OpValue::Reg(p)) if reads[k] => {
                        match current.get(&(*file, *p)) {
                            Some(v) => VOperand::Virtual(*file, *v),
                            None => VOperand::Fixed(*op),
                        }
                    }
                    (OperandKind::Reg { file, .. }, OpValue::Reg(p)) if writes[k] => {
                        next += 1;
                        VOperand::Virtual(*file, next)
                    }
                    _ => VOperand::Fixed(*op),
                })
                .collect::<Vec<_>>();
            for (k, op) in operands.iter().enumerate() {
                if let (VOperand::Virtual(f, v), OpValue::Reg(p)) = (op, mi.operands[k])
                    && writes[k]
                {
                    current.insert((*f, p), *v);
                }
            }
            VInst {
                inst: mi.inst,
                operands,
            }
        })
        .collect()
}

/// Every hand-written program of every target, its registers renamed to
/// virtual ones, allocated again: the checker accepts it, and rescheduled it
/// runs on the simulator with bit-identical outputs.
#[test]
fn reallocated_programs_run_and_match() {
    use isa_specs::assembly::assemble;
    use isa_specs::target::{self, Bundle};
    let mut reallocated = 0;
    for (name, file) in common::programs() {
        let t = targets::by_name(&name).expect("target");
        let m = t.machine();
        let text = std::fs::read_to_string(&file).expect("program");
        let original = assemble(t.isa(), m, &file.display().to_string(), &text).expect("assembles");
        let insts = compiler::sched::flatten(
            &target::decode_program(t.isa(), m, &original.code).expect("decodes"),
        );
        let code = devirtualise(m, &insts);
        if !code
            .iter()
            .flat_map(|i| &i.operands)
            .any(|o| matches!(o, VOperand::Virtual(..)))
        {
            continue; // registers play no part (a program of memory-to-memory instructions)
        }
        reallocated += 1;
        let allocated = allocate(m, &code).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        check(m, &code, &allocated).unwrap_or_else(|e| panic!("{}: {e:#?}", file.display()));
        let scheduled: Vec<Bundle> = compiler::sched::schedule(t, m, &allocated);
        let mut rebuilt = original.clone();
        rebuilt.code = scheduled
            .iter()
            .flat_map(|b| target::encode_bundle(t.isa(), m, b).expect("encodes"))
            .collect();
        let data = common::inputs(&original);
        let config = targets::sim::Config::default();
        let mut before = t
            .simulate(m, &original, &data, &config)
            .expect("original runs");
        let mut after = t
            .simulate(m, &rebuilt, &data, &config)
            .unwrap_or_else(|e| panic!("{}: reallocated program faults: {e}", file.display()));
        assert_eq!(
            common::outputs(t, &original, &mut before),
            common::outputs(t, &rebuilt, &mut after),
            "{}: outputs",
            file.display()
        );
    }
    eprintln!("{reallocated} programs reallocated");
    assert!(reallocated >= 8, "{reallocated} programs reallocated");
}
