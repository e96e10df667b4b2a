//! The simulators report — never panic on — what a program does wrong:
//! out-of-bounds accesses, illegal encodings, hazards an exposed pipeline's
//! schedule violated, DMA conflicts, deadlocks, unaligned tensors; and the
//! assembler refuses instruction addresses its fields cannot hold (fields
//! store address / alignment, so unaligned instruction addresses cannot exist).

use isa_specs::assembly::assemble;
use targets::sim::{Config, Fault};

fn run(target: &str, text: &str) -> Result<targets::sim::Outcome, targets::sim::SimError> {
    let t = targets::by_name(target).expect("shipped target");
    let m = t.machine();
    let program =
        assemble(t.isa(), m, "test.s", text).unwrap_or_else(|e| panic!("assembles: {e:?}"));
    t.simulate(m, &program, &[], &Config::default())
}

#[test]
fn out_of_bounds_access_is_a_fault() {
    // A 2-row tile whose second row (pitch 2^17 elements) lies past the end of the 4 GiB DRAM.
    let dram = targets::by_name("systolic-os")
        .expect("target")
        .machine()
        .memories[0]
        .size
        .value;
    let near_end = dram - 4;
    let e = run(
        "systolic-os",
        &format!("ld_ifmap sem0, 2, 1, 131071, @{near_end:#x}, @0x0\nwait sem0\nhalt\n"),
    )
    .expect_err("out of bounds");
    assert!(matches!(e.fault, Fault::OutOfBounds { .. }), "{e}");
    assert_eq!(e.pc, 0);
}

#[test]
fn illegal_encoding_is_a_fault() {
    let t = targets::by_name("systolic-os").expect("target");
    let m = t.machine();
    let mut program = assemble(t.isa(), m, "t.s", "halt\n").expect("assembles");
    let wb = isa_specs::target::word_bytes(m);
    // The first top-byte value that no instruction's fixed bits match.
    let word = (1..=255u8)
        .map(|top| {
            let mut w = vec![0u8; wb];
            w[wb - 1] = top;
            w
        })
        .find(|w| isa_specs::target::decode_bundle(t.isa(), m, w).is_err())
        .expect("some opcode is unused");
    program.code.extend(word);
    let e = t
        .simulate(m, &program, &[], &Config::default())
        .expect_err("illegal");
    assert!(matches!(e.fault, Fault::IllegalEncoding(_)), "{e}");
    assert_eq!(e.pc, 1);
}

#[test]
fn exposed_pipeline_hazard_is_a_fault() {
    // vliw-systolic exposes latencies: `vadd` takes 2 cycles, so reading its result in the next bundle is too early.
    let e = run(
        "vliw-systolic",
        "vadd vreg1, vreg0, vreg0\nvadd vreg2, vreg1, vreg1\nhalt\n",
    )
    .expect_err("hazard");
    assert!(
        matches!(e.fault, Fault::Hazard { ref file, reg: 1, cycle: 1, ready: 2 } if file == "vreg"),
        "{e}"
    );
    // One empty bundle in between is enough.
    run(
        "vliw-systolic",
        "vadd vreg1, vreg0, vreg0\n{}\nvadd vreg2, vreg1, vreg1\nhalt\n",
    )
    .expect("scheduled correctly");
}

#[test]
fn interlocked_machine_stalls_instead() {
    // systolic-os interlocks: reading the ofmap the array is still writing waits for it.
    let ok = run(
        "systolic-os",
        "mmul 4, 8, 4, @0x0, @0x0, @0x0\nvrelu 4, 4, @0x100, @0x0\nhalt\n",
    );
    let o = ok.expect("interlocked");
    // mmul latency 32 + 32 + 8 - 2 = 70: vrelu issues at 70, after the 70-cycle fold.
    assert!(o.report.cycles > 70, "{}", o.report.cycles);
}

#[test]
fn dma_conflict_is_a_fault() {
    // Using the ifmap tile while the DMA is still writing it (no wait on its semaphore).
    let e = run(
        "systolic-os",
        "ld_ifmap sem0, 4, 8, 8, @0x0, @0x0\nmmul 4, 8, 4, @0x0, @0x0, @0x0\nhalt\n",
    )
    .expect_err("conflict");
    assert!(
        matches!(e.fault, Fault::DmaConflict { ref memory, .. } if memory == "ifmap"),
        "{e}"
    );
}

#[test]
fn waiting_for_nothing_is_a_deadlock() {
    let e = run("systolic-os", "wait sem3\nhalt\n").expect_err("deadlock");
    assert!(matches!(e.fault, Fault::Deadlock { index: 3, .. }), "{e}");
}

#[test]
fn unaligned_tensors_are_a_fault() {
    let e = run("systolic-os", ".input x ofmap @0x2 f32 [4]\nhalt\n").expect_err("unaligned");
    assert!(
        matches!(
            e.fault,
            Fault::Unaligned {
                addr: 2,
                align: 4,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn unaligned_addresses_cannot_be_assembled() {
    let t = targets::by_name("systolic-os").expect("target");
    let errors = assemble(
        t.isa(),
        t.machine(),
        "t.s",
        "mmul 4, 8, 4, @0x2, @0x0, @0x0\n",
    )
    .expect_err("unaligned");
    assert!(
        errors[0].to_string().contains("not a multiple of 4"),
        "{errors:?}"
    );
}

#[test]
fn timing_only_runs_skip_data_but_keep_the_cycles() {
    let text =
        "ld_ifmap sem0, 4, 8, 8, @0x0, @0x0\nwait sem0\nmmul 4, 8, 4, @0x0, @0x0, @0x0\nhalt\n";
    let t = targets::by_name("systolic-os").expect("target");
    let m = t.machine();
    let program = assemble(t.isa(), m, "t.s", text).expect("assembles");
    let full = t
        .simulate(m, &program, &[], &Config::default())
        .expect("runs");
    let fast = t
        .simulate(
            m,
            &program,
            &[],
            &Config {
                functional: false,
                ..Config::default()
            },
        )
        .expect("runs");
    assert_eq!(full.report.cycles, fast.report.cycles);
    assert_eq!(full.report.energy_pj, fast.report.energy_pj);
}

#[test]
fn fence_waits_for_synchronous_instructions_too() {
    // Before the fix, `fence` waited only for DMA: the `mpop` read the accumulator 280 cycles early.
    let mut text = String::from("mmul_z 8, 16, 16, 16, acc0, @0x0, @0x1000\nfence\n");
    text.push_str(&sample_mpop());
    text.push_str("halt\n");
    let o = run("vliw-systolic", &text).expect("fence orders the read after the matmul");
    assert!(o.report.cycles > 280, "{}", o.report.cycles);
}

fn sample_mpop() -> String {
    let program = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/programs/vliw-systolic/matmul.s"),
    )
    .expect("program");
    program
        .lines()
        .find(|l| l.starts_with("mpop"))
        .map(|l| format!("{l}\n"))
        .expect("the matmul program pops the accumulator")
}

#[test]
fn overlapping_writes_on_an_exposed_pipeline_are_a_fault() {
    // `vexp` lands at cycle 12, the later `vadd` to the same register at cycle 3: out of order.
    let e = run(
        "vliw-systolic",
        "vexp vreg1, vreg0\nvadd vreg1, vreg0, vreg0\nhalt\n",
    )
    .expect_err("write after write");
    assert!(matches!(e.fault, Fault::WriteHazard { reg: 1, .. }), "{e}");
}

#[test]
fn dma_engines_are_busy_while_their_transfer_waits_for_bandwidth() {
    // Four 8 KiB loads on systolic-os's two DMA engines; DRAM moves 128 B/cycle, so each transfer
    // books 64 cycles of it: they start at 0, 64, 128, 192. An engine is busy from its transfer's
    // start for those 64 cycles, so the third load issues at 64 (engine 0 frees) and the fourth at
    // 128 (engine 1 frees), not as soon as 64 cycles after their own issue (cycles 64 and 65).
    let t = targets::by_name("systolic-os").expect("target");
    let m = t.machine();
    let text = "ld_ifmap sem0, 64, 64, 64, @0x0, @0x0\nld_ifmap sem1, 64, 64, 64, @0x2000, @0x2000\nld_filter sem2, 64, 64, 64, @0x4000, @0x0\nld_filter sem3, 64, 64, 64, @0x6000, @0x2000\nhalt\n";
    let program = assemble(t.isa(), m, "t.s", text).expect("assembles");
    let o = t
        .simulate(
            m,
            &program,
            &[],
            &Config {
                trace: true,
                ..Config::default()
            },
        )
        .expect("runs");
    let trace = o.trace.expect("trace").to_json(&m.name);
    let loads: Vec<(u64, u64)> = trace["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"].as_str().is_some_and(|n| n.starts_with("ld_")))
        .map(|e| {
            (
                e["args"]["issue"].as_u64().expect("issue"),
                e["ts"].as_u64().expect("start"),
            )
        })
        .collect();
    assert_eq!(loads, vec![(0, 0), (1, 64), (64, 128), (128, 192)]);
}

#[test]
fn immediate_offsets_in_indices_reach_the_simulator() {
    // `mpop_v r, d, a` is `d[i, j] = a[i + r, j]`: rows 8..16 of a 16 x 16 product.
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let text = ".input a hbm @0x0 bf16 [16, 16]\n.input b hbm @0x1000 bf16 [16, 16]\n\
        dma_ld_bf16 sem0, 16, 16, 16, @0x0, @0x0\ndma_ld_bf16 sem1, 16, 16, 16, @0x1000, @0x1000\n\
        wait sem0\nwait sem1\nmmul_z 16, 16, 16, 16, acc0, @0x0, @0x1000\nfence\nmpop_v 8, vreg3, acc0\nfence\nhalt\n";
    let program = assemble(t.isa(), m, "t.s", text).expect("assembles");
    let ones = |n: usize, x: f32| {
        (0..n)
            .flat_map(|_| {
                targets::sim::to_bytes(isa_specs::model::DType::Bf16, f64::from(x))[..2].to_vec()
            })
            .collect::<Vec<u8>>()
    };
    // a = all 1, b = all 2: every element of the product is 16 * 2 = 32.
    let inputs = vec![
        ("a".to_owned(), ones(256, 1.0)),
        ("b".to_owned(), ones(256, 2.0)),
    ];
    let o = t
        .simulate(m, &program, &inputs, &Config::default())
        .expect("runs");
    let vreg = m
        .regfiles
        .iter()
        .position(|r| r.name == "vreg")
        .expect("vreg");
    let acc = m
        .regfiles
        .iter()
        .position(|r| r.name == "acc")
        .expect("acc");
    let (sub, vl) = (
        m.regfiles[vreg].shape[0].value as usize,
        m.regfiles[vreg].shape[1].value as usize,
    );
    let acc_cols = m.regfiles[acc].shape[1].value as usize;
    let per_vreg = sub * vl;
    let per_acc: usize = m.regfiles[acc]
        .shape
        .iter()
        .map(|d| d.value as usize)
        .product();
    for i in 0..sub {
        for j in 0..16 {
            let got = o.state.regs[vreg][3 * per_vreg + i * vl + j];
            let want = o.state.regs[acc][(8 + i) * acc_cols + j];
            assert_eq!(got, want, "vreg3[{i}, {j}]");
            assert_eq!(got, if 8 + i < 16 { 32.0 } else { 0.0 });
        }
    }
    assert!(per_acc > 0);
}

#[test]
fn masks_computed_from_index_values_reach_the_simulator() {
    // `vcausal r, c, d, a`: d[i, j] = a[i, j] where j + c <= i + r, else -3e38.
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let program =
        assemble(t.isa(), m, "t.s", "vcausal 2, 0, vreg1, vreg1\n{}\nhalt\n").expect("assembles");
    let o = t
        .simulate(m, &program, &[], &Config::default())
        .expect("runs");
    let vreg = m
        .regfiles
        .iter()
        .position(|r| r.name == "vreg")
        .expect("vreg");
    let vl = m.regfiles[vreg].shape[1].value as usize;
    let sub = m.regfiles[vreg].shape[0].value as usize;
    // The register started at 0: kept elements stay 0, masked ones become -3e38 (rounded to f32).
    let masked = f64::from(-3.0e38_f32);
    for i in 0..sub {
        for j in 0..vl {
            let want = if j <= i + 2 { 0.0 } else { masked };
            assert_eq!(
                o.state.regs[vreg][vl * sub + i * vl + j],
                want,
                "[{i}, {j}]"
            );
        }
    }
}
