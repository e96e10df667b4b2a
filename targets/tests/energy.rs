//! Access energy: what crosses a memory's interface is charged its
//! `read_energy`/`write_energy`; what a unit computing inside the memory
//! (`compute = [...]`) reads there is not, since the instruction's own
//! `energy` prices it (pim-dram's `mac`: sense amplifiers to the bank's
//! multipliers).

use isa_specs::assembly::assemble;
use targets::sim::Config;

fn report(text: &str) -> targets::sim::Report {
    let t = targets::by_name("pim-dram").expect("shipped target");
    let m = t.machine();
    let program =
        assemble(t.isa(), m, "energy.s", text).unwrap_or_else(|e| panic!("assembles: {e:?}"));
    t.simulate(m, &program, &[], &Config::default())
        .expect("runs")
        .report
}

fn pim_read(r: &targets::sim::Report) -> u64 {
    r.memories
        .iter()
        .find(|x| x.name == "pim")
        .expect("pim-dram's banks")
        .bytes_read
}

#[test]
fn reads_inside_a_computing_memory_cost_no_interface_energy() {
    // One all-bank MAC over whole rows: 512 banks x 2 KiB read in the banks.
    let mac = report("clracc macc0\nmac macc0, 64, xgb0, @0x0\nhalt\n");
    assert_eq!(pim_read(&mac), 512 * 2048);
    // Only the accumulator and broadcast-buffer registers: far below the
    // 1 MiB at the interface's 56 pJ/B (58.7 uJ).
    assert!(
        mac.access_energy_pj < 1.0e5,
        "{} pJ of access energy for one mac",
        mac.access_energy_pj
    );
    // The same bytes brought over the interface are charged there.
    let dma = report("dmald dsem0, 128, 1024, 64, @0x0, @0x0\nwait dsem0\nhalt\n");
    assert_eq!(pim_read(&dma), 128 * 2048);
    assert!(dma.access_energy_pj >= 128.0 * 2048.0 * 56.0);
}
