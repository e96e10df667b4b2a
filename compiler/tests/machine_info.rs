//! What the lowering derives from each shipped machine: its home memory,
//! copy instructions, the chains between places, transposing copies.

use compiler::lower::machine::{Info, Loc, Place};
use isa_specs::Machine;
use isa_specs::model::{DType, MemId, RegFileId};

fn loc(m: &Machine, place: &str, dtype: DType) -> Loc {
    let place = match m.memories.iter().position(|x| x.name == place) {
        Some(i) => Place::Mem(MemId(i as u32)),
        None => Place::Reg(RegFileId(
            m.regfiles
                .iter()
                .position(|r| r.name == place)
                .expect("a place") as u32,
        )),
    };
    Loc { place, dtype }
}

#[test]
fn every_target_has_a_home_and_copies_to_and_from_it() {
    for t in targets::all() {
        let m = t.machine();
        let info = Info::new(m).expect("analysable");
        let home = Place::Mem(info.home);
        assert!(m.memories[info.home.index()].kind.off_chip(), "{}", m.name);
        assert!(
            info.copies.iter().any(|c| c.from.place == home),
            "{}: nothing loads",
            m.name
        );
        assert!(
            info.copies.iter().any(|c| c.to.place == home),
            "{}: nothing stores",
            m.name
        );
        assert!(info.copies.iter().all(|c| c.rank == 1 || c.rank == 2));
        assert!(info.halt.is_some() && !info.waits.is_empty(), "{}", m.name);
    }
}

#[test]
fn the_cheapest_chain_converts_on_the_way() {
    // vliw-systolic: f32 at home reaches a bf16 matrix operand through the vector registers.
    let t = targets::by_name("vliw-systolic").expect("shipped");
    let m = t.machine();
    let info = Info::new(m).expect("analysable");
    let (start, chain) = info
        .path(&[loc(m, "hbm", DType::F32)], loc(m, "sram", DType::Bf16))
        .expect("a chain");
    assert_eq!(start, loc(m, "hbm", DType::F32));
    let names: Vec<&str> = chain
        .iter()
        .map(|&c| m.instructions[info.copies[c].inst.index()].name.as_str())
        .collect();
    assert_eq!(names, ["dma_ld_f32", "vld", "vst_bf16"]);
    // Asynchronous copies signal; synchronous ones do not.
    assert!(info.copies[chain[0]].sem.is_some() && info.copies[chain[1]].sem.is_none());
    // No chain into a place nothing writes.
    let acc = loc(m, "acc", DType::F32);
    assert!(info.path(&[loc(m, "hbm", DType::F32)], acc).is_none());
}

#[test]
fn transposing_copies_are_found_where_they_exist() {
    let with: Vec<&str> = targets::all()
        .iter()
        .filter(|t| {
            !Info::new(t.machine())
                .expect("analysable")
                .transposes
                .is_empty()
        })
        .map(|t| t.name())
        .collect();
    assert!(
        with.contains(&"vliw-systolic") && with.contains(&"systolic-os"),
        "{with:?}"
    );
}
