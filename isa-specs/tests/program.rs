//! The program file: round trip, and every way a bad file is refused with its reason.

use isa_specs::program::{DataSegment, Program, ProgramError, TensorDesc};
use std::path::Path;

fn toy(overrides: &[(String, i64)]) -> isa_specs::Machine {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs/ok/toy.isa");
    isa_specs::load_file(path, overrides)
        .expect("toy checks")
        .machine
}

fn sample() -> Program {
    let mut p = Program::new(&toy(&[]));
    p.code = vec![1, 2, 3, 4, 5, 6, 7, 8];
    p.data.push(DataSegment {
        memory: "sram".into(),
        addr: 64,
        bytes: vec![9; 10],
    });
    p.inputs.push(TensorDesc {
        name: "x".into(),
        dtype: isa_specs::model::DType::F32,
        shape: vec![2, 3],
        memory: "sram".into(),
        addr: 0,
        pitch: 4,
        batch: None,
        columns: None,
    });
    p.inputs.push(TensorDesc {
        name: "cache".into(),
        dtype: isa_specs::model::DType::Bf16,
        shape: vec![2, 3, 2],
        memory: "sram".into(),
        addr: 128,
        pitch: 4,
        batch: Some((3, 16)),
        columns: None,
    });
    p.outputs.push(TensorDesc {
        name: "values".into(),
        dtype: isa_specs::model::DType::Bf16,
        shape: vec![2, 3, 2],
        memory: "sram".into(),
        addr: 512,
        pitch: 4,
        batch: Some((2, 32)),
        columns: Some(isa_specs::program::Columns {
            skip: 1,
            chunk: 2,
            stride: 8,
        }),
    });
    p
}

/// Stored transposed in chunks: element `(b, t, j)` is stored row `b * 2 +
/// j`, column `t`, the column one place on (`skip`) and two to a chunk.
#[test]
fn transposed_columns_are_placed_element_by_element() {
    let t = sample().outputs[0].clone();
    assert_eq!((t.rows(), t.row_len()), (4, 3));
    let spans = t.row_spans();
    assert_eq!(spans.len(), 12);
    // Element (0, t, 0): stored row 0 at 0; columns 0, 1, 2 -> 1, 8, 9.
    let at = |e: u64| 512 + 2 * e;
    assert_eq!(spans[0], (at(1), 0, 2));
    assert_eq!(spans[2], (at(8), 4, 2));
    assert_eq!(spans[4], (at(9), 8, 2));
    // Element (0, 0, 1): stored row 1, 4 elements on.
    assert_eq!(spans[1], (at(5), 2, 2));
    // Element (1, 2, 1): stored row 3 = batch 1 (32 on), row 1 (4 on), column 2 (9 on).
    assert_eq!(spans[11], (at(32 + 4 + 9), 22, 2));
    assert_eq!(t.extent(), 32 + 4 + 9 + 1);
}

/// Rows in batches: each batch's rows `pitch` apart, batches `stride` apart.
#[test]
fn batched_rows_are_placed_batch_by_batch() {
    let t = sample().inputs[1].clone();
    // Rows 0..6 start 0, 4, 8 | 16, 20, 24 elements in; 2 bytes each.
    let at = |e: u64| 128 + 2 * e;
    assert_eq!(
        t.row_spans(),
        vec![
            (at(0), 0, 4),
            (at(4), 4, 4),
            (at(8), 8, 4),
            (at(16), 12, 4),
            (at(20), 16, 4),
            (at(24), 20, 4)
        ]
    );
    assert_eq!(t.extent(), 26);
}

#[test]
fn round_trips_and_matches_its_machine() {
    let p = sample();
    let bytes = p.to_bytes().expect("serialises");
    assert_eq!(Program::from_bytes(&bytes).expect("reads back"), p);
    p.check_machine(&toy(&[])).expect("same machine");
}

/// `write_to` streams the bytes `to_bytes` gives into any seekable writer.
#[test]
fn streamed_programs_hold_the_same_bytes() {
    let p = sample();
    let out = p
        .write_to(std::io::Cursor::new(Vec::new()))
        .expect("streams");
    assert_eq!(out.into_inner(), p.to_bytes().expect("serialises"));
}

/// `save` streams the bytes `to_bytes` gives, replacing an earlier file
/// only once the new one is whole.
#[test]
fn saved_files_hold_the_same_bytes() {
    let dir = std::env::temp_dir().join(format!("tessera-program-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("p.tsr");
    std::fs::write(&path, b"an earlier file").expect("writes");
    let p = sample();
    p.save(&path).expect("saves");
    assert_eq!(
        std::fs::read(&path).expect("reads"),
        p.to_bytes().expect("serialises")
    );
    assert_eq!(Program::load(&path).expect("loads"), p);
    assert!(!dir.join("p.tsr.part").exists());
    // A directory in the way: an error, nothing left behind.
    let blocked = dir.join("blocked.tsr");
    std::fs::create_dir_all(blocked.with_extension("tsr.part")).expect("dir");
    assert!(p.save(&blocked).is_err());
    assert!(!blocked.exists());
    std::fs::remove_dir_all(&dir).expect("cleans up");
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    let bytes = sample().to_bytes().expect("serialises");
    assert!(matches!(
        Program::from_bytes(b"hello world, not a program"),
        Err(ProgramError::BadMagic)
    ));
    assert!(matches!(
        Program::from_bytes(&bytes[..bytes.len() - 3]),
        Err(ProgramError::Truncated { .. })
    ));
    assert!(matches!(
        Program::from_bytes(&bytes[..10]),
        Err(ProgramError::Truncated { .. })
    ));
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    assert!(matches!(
        Program::from_bytes(&flipped),
        Err(ProgramError::Corrupt)
    ));
    let mut version = bytes.clone();
    version[8] = 99;
    assert!(matches!(
        Program::from_bytes(&version),
        Err(ProgramError::Version(99))
    ));
    let mut longer = bytes;
    longer.push(0);
    assert!(matches!(
        Program::from_bytes(&longer),
        Err(ProgramError::Corrupt)
    ));
}

#[test]
fn another_machine_or_other_parameters_are_refused() {
    let p = sample();
    let mut other = toy(&[]);
    other.name = "other".into();
    let e = p.check_machine(&other).expect_err("wrong target");
    assert!(
        e.to_string()
            .contains("built for target `toy`, not `other`"),
        "{e}"
    );
    let e = p
        .check_machine(&toy(&[("SRAM".into(), 32 << 10)]))
        .expect_err("other parameters");
    assert!(
        e.to_string()
            .contains("SRAM = 65536 in the file, 32768 now"),
        "{e}"
    );
    let mut edited = toy(&[]);
    edited.instructions[0].energy = isa_specs::model::Expr::Real(1.0);
    let e = p.check_machine(&edited).expect_err("edited description");
    assert!(e.to_string().contains("different version"), "{e}");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any bytes: an error or a program, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = Program::from_bytes(&bytes);
        }

        /// A valid file with bytes flipped, cut or appended: refused (the checksum covers the body).
        #[test]
        fn damaged_files_are_refused(flips in prop::collection::vec((any::<usize>(), 1u8..=255), 1..4), cut in any::<usize>()) {
            let good = sample().to_bytes().expect("serialises");
            let mut bad = good.clone();
            for (at, x) in &flips {
                let i = at % bad.len();
                bad[i] ^= x;
            }
            // Two equal flips of one byte cancel out.
            prop_assume!(bad != good);
            prop_assert!(Program::from_bytes(&bad).is_err());
            let cut = cut % good.len();
            prop_assert!(Program::from_bytes(&good[..cut]).is_err());
        }
    }
}
