//! 2-D convolutions, pooling and batch normalisation compile for every
//! shipped target, run on its simulator and match the reference interpreter
//! (a direct convolution).

mod onnx_util;

use compiler::onnx::proto::{AttributeProto, NodeProto, TensorProto};
use onnx_util::{folded, ramp, run_checked, run_everywhere};

fn build(nodes: Vec<NodeProto>, x: &[i64], inits: Vec<TensorProto>) -> compiler::ir::Graph {
    folded(nodes, x, &["y"], inits)
}

/// Runs `g` on every target: all must run and match.
fn check(g: &compiler::ir::Graph, what: &str) -> Vec<&'static str> {
    let ran = run_everywhere(g, 11, what, &[]);
    assert_eq!(ran.len(), targets::all().len(), "{what}: {ran:?}");
    ran
}

fn conv(attrs: Vec<AttributeProto>, bias: bool) -> NodeProto {
    let ins: &[&str] = if bias { &["x", "w", "b"] } else { &["x", "w"] };
    attrs
        .into_iter()
        .fold(NodeProto::new("Conv", "conv", ins, &["y"]), NodeProto::with)
}

#[test]
fn convolutions_with_padding_strides_dilations_and_groups() {
    let ints = AttributeProto::ints;
    // (what, attributes, x shape, w shape)
    type Case = (&'static str, Vec<AttributeProto>, [i64; 4], [i64; 4]);
    let cases: Vec<Case> = vec![
        (
            "3x3 same",
            vec![ints("pads", &[1, 1, 1, 1])],
            [2, 3, 8, 8],
            [4, 3, 3, 3],
        ),
        (
            "stride 2",
            vec![ints("pads", &[1, 1, 1, 1]), ints("strides", &[2, 2])],
            [1, 3, 9, 9],
            [4, 3, 3, 3],
        ),
        (
            "dilation, asymmetric pads",
            vec![ints("pads", &[0, 1, 2, 0]), ints("dilations", &[2, 1])],
            [1, 2, 7, 6],
            [3, 2, 2, 3],
        ),
        (
            "groups",
            vec![AttributeProto::int("group", 2), ints("pads", &[0, 1, 0, 1])],
            [1, 4, 6, 7],
            [6, 2, 2, 3],
        ),
        (
            "auto_pad SAME_UPPER",
            vec![
                AttributeProto::string("auto_pad", "SAME_UPPER"),
                ints("strides", &[2, 2]),
            ],
            [1, 2, 6, 6],
            [2, 2, 3, 3],
        ),
        ("1x1", vec![], [2, 8, 4, 4], [5, 8, 1, 1]),
    ];
    for (what, attrs, x, w) in cases {
        let inits = vec![ramp("w", &w, -0.5, 0.03), ramp("b", &[w[0]], 0.1, 0.05)];
        let g = build(vec![conv(attrs, true)], &x, inits);
        check(&g, what);
    }
}

/// The regions vliw-systolic compiles `g` into, its outputs checked
/// against the interpreter.
fn vliw_regions(g: &compiler::ir::Graph) -> Vec<String> {
    run_checked("vliw-systolic", g)
        .compiled
        .regions
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// Channel counts that meet the transfer alignment take the channels-last
/// forms where the machine's transfers cannot start at any element: the
/// windows as rows read in place by the product, a depthwise convolution
/// as one window sum. Odd widths, strides, dilations, asymmetric pads, two
/// images, and computed weights, on every target.
#[test]
fn convolutions_over_aligned_channels_take_their_windows_as_rows() {
    let ints = AttributeProto::ints;
    type Case = (&'static str, Vec<AttributeProto>, [i64; 4], [i64; 4]);
    let cases: Vec<Case> = vec![
        (
            "3x3 same, two images",
            vec![ints("pads", &[1, 1, 1, 1])],
            [2, 16, 6, 8],
            [8, 16, 3, 3],
        ),
        (
            "stride 2, odd width",
            vec![ints("pads", &[1, 1, 1, 1]), ints("strides", &[2, 2])],
            [1, 16, 7, 9],
            [16, 16, 3, 3],
        ),
        (
            "dilation, asymmetric pads",
            vec![ints("pads", &[0, 2, 1, 0]), ints("dilations", &[2, 1])],
            [1, 16, 7, 5],
            [8, 16, 2, 3],
        ),
        (
            "depthwise, stride 2",
            vec![
                AttributeProto::int("group", 16),
                ints("pads", &[1, 1, 1, 1]),
                ints("strides", &[2, 2]),
            ],
            [1, 16, 9, 8],
            [16, 1, 3, 3],
        ),
        (
            "depthwise 5x5, asymmetric pads",
            vec![
                AttributeProto::int("group", 16),
                ints("pads", &[2, 1, 2, 3]),
            ],
            [1, 16, 6, 6],
            [16, 1, 5, 5],
        ),
    ];
    for (what, attrs, x, w) in cases {
        let inits = vec![ramp("w", &w, -0.5, 0.03), ramp("b", &[w[0]], 0.1, 0.05)];
        let g = build(vec![conv(attrs, true)], &x, inits);
        check(&g, what);
        let regions = vliw_regions(&g);
        let form = if w[1] == 1 { "WindowSum" } else { "MatMul" };
        assert!(
            regions.iter().any(|r| r.starts_with(form)),
            "{what}: {regions:?}"
        );
        assert!(
            !regions
                .iter()
                .any(|r| r.starts_with("Im2Col") || r.starts_with("Im2Row")),
            "{what}: the windows are read in place: {regions:?}"
        );
    }
    // One output pixel: a product of one row, on the vector unit, with its
    // windows written out (it reads no tiles of them): this was read from
    // an unwritten home (the Silero VAD's last strided 1-D convolution).
    let g = build(
        vec![conv(
            vec![ints("pads", &[0, 1, 0, 1]), ints("strides", &[1, 2])],
            true,
        )],
        &[1, 16, 1, 2],
        vec![
            // Weights of one sign's magnitude: pim-dram's one-row products
            // are in bf16, which cancellation would show.
            ramp("w", &[16, 16, 1, 3], 0.1, 0.001),
            ramp("b", &[16], 0.1, 0.05),
        ],
    );
    check(&g, "one output pixel");
    // Weights computed at run time: the product reads them reordered.
    let x = [1, 16, 5, 6];
    let w = NodeProto::new("Relu", "w", &["wi"], &["w"]);
    let inits = vec![
        ramp("wi", &[8, 16, 3, 3], -0.5, 0.03),
        ramp("b", &[8], 0.1, 0.05),
    ];
    let mut g = build(
        vec![w, conv(vec![ints("pads", &[1, 1, 1, 1])], true)],
        &x,
        inits,
    );
    check(&g, "computed weights");
    // The windows written out at home when the product may not read them in place.
    g = build(
        vec![conv(vec![ints("pads", &[1, 1, 1, 1])], true)],
        &x,
        vec![
            ramp("w", &[8, 16, 3, 3], -0.5, 0.03),
            ramp("b", &[8], 0.1, 0.05),
        ],
    );
    let t = targets::by_name("vliw-systolic").expect("target");
    let inputs = compiler::run::random_inputs(&g, 3);
    let opts = compiler::lower::Options {
        window_operands: false,
        ..Default::default()
    };
    let r = compiler::run::run_with(t, t.machine(), &g, &inputs, None, opts).expect("runs");
    assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
    assert!(
        r.compiled
            .regions
            .iter()
            .any(|(n, _)| n.starts_with("Im2Row"))
    );
}

#[test]
fn max_average_and_global_pooling() {
    let ints = AttributeProto::ints;
    let pools = vec![
        (
            "max 2x2/2",
            NodeProto::new("MaxPool", "p", &["x"], &["y"])
                .with(ints("kernel_shape", &[2, 2]))
                .with(ints("strides", &[2, 2])),
        ),
        (
            "max 3x3 padded",
            NodeProto::new("MaxPool", "p", &["x"], &["y"])
                .with(ints("kernel_shape", &[3, 3]))
                .with(ints("pads", &[1, 1, 1, 1])),
        ),
        (
            "average, pads excluded",
            NodeProto::new("AveragePool", "p", &["x"], &["y"])
                .with(ints("kernel_shape", &[3, 3]))
                .with(ints("pads", &[1, 1, 1, 1])),
        ),
        (
            "average, pads included, ceil",
            NodeProto::new("AveragePool", "p", &["x"], &["y"])
                .with(ints("kernel_shape", &[2, 2]))
                .with(ints("strides", &[2, 2]))
                .with(AttributeProto::int("ceil_mode", 1))
                .with(AttributeProto::int("count_include_pad", 1))
                .with(ints("pads", &[1, 1, 1, 1])),
        ),
        (
            "global average",
            NodeProto::new("GlobalAveragePool", "p", &["x"], &["y"]),
        ),
        (
            "global max",
            NodeProto::new("GlobalMaxPool", "p", &["x"], &["y"]),
        ),
    ];
    for (what, node) in pools {
        let g = build(vec![node], &[2, 3, 5, 5], vec![]);
        check(&g, what);
    }
}

#[test]
fn batch_normalization_after_a_convolution_is_folded_into_it() {
    let bn = NodeProto::new(
        "BatchNormalization",
        "bn",
        &["c", "s", "bb", "m", "v"],
        &["y"],
    );
    let c = NodeProto::new("Conv", "conv", &["x", "w"], &["c"])
        .with(AttributeProto::ints("pads", &[1, 1, 1, 1]));
    let inits = vec![
        ramp("w", &[4, 3, 3, 3], -0.5, 0.03),
        ramp("s", &[4], 0.5, 0.25),
        ramp("bb", &[4], -0.1, 0.1),
        ramp("m", &[4], 0.2, -0.1),
        ramp("v", &[4], 0.5, 0.5),
    ];
    let g = build(vec![c, bn], &[1, 3, 6, 6], inits);
    check(&g, "conv + batch norm");
    // No separate scale and shift: one region computes the convolution and its bias.
    let t = targets::by_name("systolic-os").expect("shipped");
    let compiled = compiler::lower::compile(t, t.machine(), &g).expect("compiles");
    assert!(
        compiled
            .regions
            .iter()
            .all(|(name, _)| !name.contains("bn/")),
        "{:?}",
        compiled.regions
    );
    // Alone, batch normalisation is a per-channel scale and shift.
    let bn = NodeProto::new(
        "BatchNormalization",
        "bn",
        &["x", "s", "bb", "m", "v"],
        &["y"],
    );
    let inits = vec![
        ramp("s", &[3], 0.5, 0.25),
        ramp("bb", &[3], -0.1, 0.1),
        ramp("m", &[3], 0.2, -0.1),
        ramp("v", &[3], 0.5, 0.5),
    ];
    let g = build(vec![bn], &[2, 3, 4, 4], inits);
    assert_eq!(check(&g, "batch norm").len(), targets::all().len());
}

#[test]
fn pooling_a_larger_image_keeps_its_taps_on_chip_and_runs() {
    // On simd-dsp the pooling taps, kept on chip, are written column block
    // by column block: two transfers into one buffer whose row ranges
    // interleave. The second used to start before the first had finished
    // (it waited for bandwidth), and the simulator faulted.
    let pool = NodeProto::new("MaxPool", "p", &["x"], &["y"])
        .with(AttributeProto::ints("kernel_shape", &[3, 3]))
        .with(AttributeProto::string("auto_pad", "SAME_UPPER"));
    let g = build(vec![pool], &[1, 3, 32, 32], vec![]);
    check(&g, "max 3x3 same, 32x32");
    let t = targets::by_name("simd-dsp").expect("target");
    let c = compiler::lower::compile(t, t.machine(), &g).expect("compiles");
    assert!(c.kept_on_chip > 0);
    assert!(c.notes.is_empty(), "{:?}", c.notes);
}

/// Depthwise convolutions with stride 1 along the width take tiles of
/// whole rows of output pixels on vliw-systolic (`--no-wide-windows` turns
/// that off): 16 channels fill 16 of a vector register's 128 lanes per
/// pixel otherwise. Both forms match the interpreter; the wide one takes
/// fewer instructions, and fewer cycles on the larger image. Also with dilation, a stride along the
/// height, asymmetric pads and two images, everywhere.
#[test]
fn depthwise_convolutions_take_whole_rows_of_pixels() {
    let ints = AttributeProto::ints;
    for (x, k, attrs) in [
        ([1, 16, 30, 36], 3, vec![ints("pads", &[1, 1, 1, 1])]),
        ([2, 8, 9, 11], 5, vec![ints("pads", &[2, 2, 2, 2])]),
        (
            [1, 16, 12, 40],
            3,
            vec![ints("pads", &[2, 2, 2, 2]), ints("dilations", &[2, 2])],
        ),
        (
            [1, 24, 13, 17],
            3,
            vec![ints("pads", &[1, 0, 1, 2]), ints("strides", &[2, 1])],
        ),
    ] {
        let c = x[1];
        let mut attrs = attrs;
        attrs.push(AttributeProto::int("group", c));
        let g = build(
            vec![conv(attrs, true)],
            &x,
            vec![
                ramp("w", &[c, 1, k, k], -0.5, 1.0 / (c * k * k) as f32),
                ramp("b", &[c], -0.25, 0.03),
            ],
        );
        let what = format!("depthwise {k}x{k} over {x:?}");
        check(&g, &what);
        let t = targets::by_name("vliw-systolic").expect("target");
        let inputs = compiler::run::random_inputs(&g, 3);
        let run = |wide: bool| {
            let opts = compiler::lower::Options {
                wide_windows: wide,
                ..Default::default()
            };
            let r = compiler::run::run_with(t, t.machine(), &g, &inputs, None, opts)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(r.checks.iter().all(|c| c.ok), "{what}: {:?}", r.checks);
            let sum = r
                .compiled
                .regions
                .iter()
                .find(|(name, _)| name.starts_with("WindowSum"))
                .map(|(_, n)| *n)
                .unwrap_or_else(|| panic!("{what}: no window sum"));
            (sum, r.report.cycles)
        };
        let (wide, narrow) = (run(true), run(false));
        // Fewer instructions always; on the smallest (13 x 17 at stride
        // 2) the cycles are even, within 1%.
        assert!(
            wide.0 < narrow.0 && wide.1 * 100 <= narrow.1 * 101,
            "{what}: wide {wide:?}, narrow {narrow:?} (instructions, cycles)"
        );
        if x[2] >= 30 {
            assert!(
                wide.1 < narrow.1,
                "{what}: wide {wide:?}, narrow {narrow:?}"
            );
        }
    }
}

/// The windows' padding comes from a block of the fill value brought on
/// chip once per region, not from home for every run of windows outside
/// the image: on vliw-systolic a padded convolution makes as many
/// transfers from home as the same convolution with the image already
/// padded, give or take the block's (every run from home is an HBM
/// latency and a semaphore; a 64→64 3×3 at 56×56 made 272 of them).
#[test]
fn padding_comes_from_chip_not_home() {
    let ints = AttributeProto::ints;
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let from_home = |g: &compiler::ir::Graph| {
        let c = compiler::lower::compile(t, m, g).expect("compiles");
        c.insts
            .iter()
            .filter(|i| m.instructions[i.inst.index()].name.starts_with("dma_ld"))
            .count()
    };
    for (c, hw, k) in [(64, 12, 3), (32, 10, 5)] {
        let weights = || {
            vec![
                ramp("w", &[c, c, k, k], -0.5, 1.0 / (c * k * k) as f32),
                ramp("b", &[c], 0.1, 0.05),
            ]
        };
        let p = k / 2;
        let padded = build(
            vec![conv(vec![ints("pads", &[p, p, p, p])], true)],
            &[1, c, hw, hw],
            weights(),
        );
        check(&padded, "padded");
        let unpadded = build(
            vec![conv(vec![], true)],
            &[1, c, hw + 2 * p, hw + 2 * p],
            weights(),
        );
        let (a, b) = (from_home(&padded), from_home(&unpadded));
        assert!(
            a <= b + 2,
            "{c} channels, {k}x{k}: {a} transfers from home padded, {b} unpadded"
        );
    }
}

/// The block of the fill value brought on chip for the padding is no
/// taller than the tile of windows it serves: a whole output row of it
/// (here 1,200 pixels × 16 channels, 77 KB) overflowed systolic-os's
/// 64 KiB `ofmap` where the window sum's tiles fit, and PP-OCR's
/// direction classifier was refused there.
#[test]
fn the_fill_block_on_chip_fits_beside_small_tiles() {
    let ints = AttributeProto::ints;
    let (c, w) = (16, 1200);
    let g = build(
        vec![conv(
            vec![AttributeProto::int("group", c), ints("pads", &[1, 1, 1, 1])],
            true,
        )],
        &[1, c, 3, w],
        vec![
            ramp("w", &[c, 1, 3, 3], -0.5, 1.0 / (c * 9) as f32),
            ramp("b", &[c], -0.25, 0.03),
        ],
    );
    run_checked("systolic-os", &g);
}

/// On a machine with several copies of the matrix unit, one tile more
/// than the copies starts before the oldest tile's result is read: on
/// vliw-systolic (four MXUs) the fifth output tile's first pass issues
/// before the first tile's result is popped. With one per extra copy it
/// waited for that pop (the tile's operands pass through registers the
/// oldest tile's epilogue used), and a 3×3 64→64 at 56×56 ran its chains
/// four at a time, then none while the oldest drained.
#[test]
fn a_tile_per_matrix_unit_waits_for_its_epilogue() {
    let ints = AttributeProto::ints;
    let c = 64;
    let g = build(
        vec![conv(vec![ints("pads", &[1, 1, 1, 1])], true)],
        &[1, c, 56, 56],
        vec![
            ramp("w", &[c, c, 3, 3], -0.5, 1.0 / (c * 9) as f32),
            ramp("b", &[c], 0.1, 0.05),
        ],
    );
    let t = targets::by_name("vliw-systolic").expect("target");
    let m = t.machine();
    let c = compiler::lower::compile(t, m, &g).expect("compiles");
    let named = |b: &isa_specs::target::Bundle, name: &str| {
        b.ops
            .iter()
            .any(|(_, i)| m.instructions[i.inst.index()].name == name)
    };
    let first_pop = c
        .bundles
        .iter()
        .position(|b| named(b, "mpop"))
        .expect("a pop");
    let started = c.bundles[..first_pop]
        .iter()
        .filter(|b| named(b, "mmul_tz"))
        .count();
    let mxus = m
        .units
        .iter()
        .find(|u| u.name == "mxu")
        .expect("mxu")
        .count
        .value as usize;
    assert!(
        started > mxus,
        "{started} output tiles started before the first pop, {mxus} MXUs"
    );
}

/// On a machine whose transfers start at any element (systolic-os), a
/// 3×3 convolution's products still read their windows in place from the
/// channels-last image (no `Im2Col` written at home), and between two
/// convolutions the result is not moved channels first and back again
/// around the activation: the activation runs channels last, in the first
/// product's epilogue. Outputs match on that machine and on every other.
#[test]
fn consecutive_convolutions_keep_their_windows_and_pixels_channels_last() {
    let ints = AttributeProto::ints;
    let c = 16;
    let pads = || vec![ints("pads", &[1, 1, 1, 1])];
    let conv_named = |name: &str, x: &str, w: &str, y: &str| {
        pads()
            .into_iter()
            .fold(NodeProto::new("Conv", name, &[x, w], &[y]), NodeProto::with)
    };
    let g = build(
        vec![
            conv_named("conv1", "x", "w1", "c1"),
            NodeProto::new("Relu", "relu1", &["c1"], &["r1"]),
            conv_named("conv2", "r1", "w2", "y"),
        ],
        &[1, c, 20, 24],
        vec![
            ramp("w1", &[c, c, 3, 3], -0.5, 1.0 / (c * 9) as f32),
            ramp("w2", &[c, c, 3, 3], 0.4, -0.9 / (c * 9) as f32),
        ],
    );
    let regions: Vec<String> = run_checked("systolic-os", &g)
        .compiled
        .regions
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert!(!regions.iter().any(|r| r.contains("Im2Col")), "{regions:?}");
    let between = |r: &&String| r.contains("conv1/channels_first") || r.contains("conv2/pixels");
    assert!(!regions.iter().any(|r| between(&r)), "{regions:?}");
    assert!(
        regions
            .iter()
            .any(|r| r.contains("MatMul(conv1/product)") && r.contains("Relu")),
        "{regions:?}"
    );
    check(&g, "two convolutions with an activation between");
}
