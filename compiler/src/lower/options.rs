//! The optimisations the lowering can switch off, declared once.
//!
//! The table at the end of this file (`declare_options!`) gives each
//! optimisation its field and JSON name, its variant of [`Opt`], its
//! command-line flag, its one-line help and, for those the compiler gives
//! up on when a model does not compile with them, its place in the fallback
//! order and the note it leaves. [`Options`], [`OPTIONS`] (which the CLI's
//! `--no-*` flags, the bench's ablation list and the docs' flag table are
//! made from) and [`fallbacks`] all come from that one table.

/// One optimisation: how the CLI, the bench and the docs name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionInfo {
    /// Which one.
    pub opt: Opt,
    /// Its field of [`Options`] and its key in JSON (bench ablations, reports).
    pub name: &'static str,
    /// The command-line flag that switches it off (without the leading `--`).
    pub flag: &'static str,
    /// Another name of that flag, if any (`strict` for `no-approximations`).
    pub alias: Option<&'static str>,
    /// What switching it off does, in one sentence (the flag's help).
    pub help: &'static str,
    /// Whether, and in which order, the compiler switches it off by itself
    /// when a model does not compile with it on.
    pub fallback: Option<Fallback>,
}

/// A step of the fallback order: an optimisation the compiler switches off
/// when the model does not compile with it, and the note it leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fallback {
    /// Steps are taken in increasing rank.
    pub rank: u8,
    /// When the step applies.
    pub when: When,
    /// The note left in the compiled model (followed by `: ` and the error).
    pub note: &'static str,
}

/// When a fallback step applies to a failed compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Whenever the optimisation is on.
    Always,
    /// When the graph has row groups (layer norms, softmaxes) and the error
    /// blames no node's on-chip values (those are evicted first).
    RowGroupsAndNoNodeBlamed,
    /// When the graph has an attention to fuse.
    Attention,
    /// When the graph has convolution windows (`Im2Row`).
    ConvWindows,
}

macro_rules! declare_options {
    ($(
        $(#[doc = $doc:literal])*
        $field:ident: $variant:ident, $flag:literal $(, alias $alias:literal)?, $help:literal
        $(, fallback $rank:literal $when:ident $note:literal)?;
    )*) => {
        /// Optimisations that can be switched off (all on by default).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
        pub struct Options {
            $($(#[doc = $doc])* pub $field: bool,)*
        }

        impl Default for Options {
            fn default() -> Self {
                Options { $($field: true,)* }
            }
        }

        /// An optimisation of [`Options`], by name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Opt {
            $(#[doc = concat!("[`Options::", stringify!($field), "`].")] $variant,)*
        }

        impl Options {
            /// Whether `o` is on.
            pub fn get(&self, o: Opt) -> bool {
                match o {
                    $(Opt::$variant => self.$field,)*
                }
            }

            /// Switches `o` on or off.
            pub fn set(&mut self, o: Opt, on: bool) {
                match o {
                    $(Opt::$variant => self.$field = on,)*
                }
            }
        }

        /// Every optimisation, in the order of [`Options`]' fields.
        pub const OPTIONS: &[OptionInfo] = &[
            $(OptionInfo {
                opt: Opt::$variant,
                name: stringify!($field),
                flag: $flag,
                alias: declare_options!(@alias $($alias)?),
                help: $help,
                fallback: declare_options!(@fallback $($rank $when $note)?),
            },)*
        ];
    };
    (@alias) => { None };
    (@alias $alias:literal) => { Some($alias) };
    (@fallback) => { None };
    (@fallback $rank:literal $when:ident $note:literal) => {
        Some(Fallback { rank: $rank, when: When::$when, note: $note })
    };
}

impl Options {
    /// These options with `o` switched off.
    #[must_use]
    pub fn without(mut self, o: Opt) -> Options {
        self.set(o, false);
        self
    }
}

impl Opt {
    /// What the table says of it.
    pub fn info(self) -> &'static OptionInfo {
        OPTIONS
            .iter()
            .find(|i| i.opt == self)
            .expect("every variant has a row in the table")
    }
}

/// The fallback order: the optimisations the compiler switches off by
/// itself, one at a time, in the order it tries them.
pub fn fallbacks() -> Vec<(Opt, Fallback)> {
    let mut v: Vec<(Opt, Fallback)> = OPTIONS
        .iter()
        .filter_map(|i| i.fallback.map(|f| (i.opt, f)))
        .collect();
    v.sort_by_key(|(_, f)| f.rank);
    v
}

/// The docs' table of flags (Markdown), one row per optimisation.
pub fn markdown_table() -> String {
    let mut s = String::from("| flag | what it switches off | fallback |\n|---|---|---|\n");
    for i in OPTIONS {
        let fallback = match i.fallback {
            Some(f) => format!("{}: {}", f.rank, f.note),
            None => String::new(),
        };
        let alias = i.alias.map(|a| format!(" (`--{a}`)")).unwrap_or_default();
        s.push_str(&format!(
            "| `--{}`{alias} | {} | {fallback} |\n",
            i.flag, i.help
        ));
    }
    s
}

declare_options! {
    /// Attention as one region with its intermediates kept on chip ([`crate::passes::fuse`]).
    fuse_attention: FuseAttention, "no-fuse-attention",
        "Do not fuse attention into one region with its intermediates kept on chip (scores, softmax steps and probabilities then go through the home memory between the steps).",
        fallback 4 Attention "attention not kept on chip";
    /// A matrix product's `A` operand, staged on chip (and converted) for one
    /// output tile, is read again by the next tiles of the same rows instead
    /// of being loaded from home each time.
    operand_reuse: OperandReuse, "no-operand-reuse",
        "Load a matrix product's A operand again for every output tile instead of reusing the run staged (and converted) on chip for the tile before.";
    /// A run of the reduction of a product's operand is brought on chip in
    /// one transfer (and one wait) even where the instruction reads it
    /// straight from memory, rather than one transfer per reduction step.
    stage_runs: StageRuns, "no-stage-runs",
        "Bring a product's operand on chip one reduction step at a time where the instruction reads it from memory, instead of a whole run at once.";
    /// A staged run comes on chip in bands of the reduction that grow (one
    /// step, one, two, four…), each with its own transfer and wait, so the
    /// first steps of a product start before the whole run has landed (and
    /// been converted) rather than after it; and a row group's first bands
    /// of rows grow from an eighth of its band, so its first block waits
    /// for a short transfer.
    band_runs: BandRuns, "no-band-runs",
        "Bring a staged run on chip whole, with one wait before its first reduction step, instead of in growing bands each waited for alone; and a row group's rows in bands of one size from the first.";
    /// Products of the next output tiles are computed before the epilogue of
    /// a tile (software pipelining of the tile loop, as deep as the
    /// contraction's unit has copies), so they overlap; and consecutive
    /// blocks of rows of a row group prefer alternate halves (and quarters)
    /// of the register file, and a region the other half than the region
    /// producing its inputs ([`crate::regalloc::allocate_sided`]), so they
    /// overlap too.
    pipeline_tiles: PipelineTiles, "no-pipeline-tiles",
        "Finish each output tile (epilogue and store) before computing the next, instead of computing the next tiles' products first; and let regions and consecutive blocks of rows of a row group take registers anywhere in the file, instead of the other half (or quarter) than the region or block before (so one need not wait for the registers the last instructions of the other read).";
    /// On-chip buffers whose lifetimes are close do not share bytes when the
    /// memory has room, so their transfers and uses can overlap.
    spread_buffers: SpreadBuffers, "no-spread-buffers",
        "Let on-chip buffers share bytes as soon as their lifetimes end, even where the memory has room to keep neighbours apart.";
    /// The scheduler lets what follows an asynchronous transfer move above
    /// it where nothing depends on it ([`crate::sched::Rules`]).
    overlap_transfers: OverlapTransfers, "no-overlap-transfers",
        "Schedule nothing above an asynchronous transfer (no overlap of the code after a transfer with it).";
    /// The tile search also weighs visiting output tiles column block by
    /// column block (the weights' runs stay on chip, the inputs stream)
    /// against row block by row block ([`super::mapping::Order`]).
    order_search: OrderSearch, "no-order-search",
        "Visit a product's output tiles row block by row block only, instead of also weighing column block by column block (weights kept on chip, inputs streamed) in the tile search.";
    /// A large transfer on an asynchronous unit with several copies (DMA
    /// engines) goes as one block of rows per copy, so they share it.
    spread_transfers: SpreadTransfers, "no-spread-transfers",
        "Move a large transfer with one engine of an asynchronous unit instead of one block of rows per engine.";
    /// Values passed between regions stay in on-chip memory from their
    /// producer to their last reader, instead of a round trip through the
    /// home memory, as many as fit beside the tiles (`docs/compiler.md`, "Regions").
    residency: Residency, "no-residency",
        "Pass every value between regions through the home memory, instead of keeping those that fit in on-chip memory from producer to last reader.",
        fallback 2 Always "values not kept on chip across regions";
    /// A row result (softmax's maximum and sum, layer normalisation's mean
    /// and scale) meets its row in registers through the machine's lane
    /// broadcast, instead of being widened to the full row by a product
    /// with a row of ones and read back.
    broadcast_rows: BroadcastRows, "no-broadcast-rows",
        "Widen a row result (softmax's maximum and sum, layer normalisation's mean and scale) to its full row by a product with a row of ones, instead of broadcasting it along the lanes in registers.",
        fallback 3 Always "row results widened by products instead of broadcast in registers";
    /// A product of one row (per batch) by constant weights, or by a
    /// computed matrix already on chip, runs on the vector unit (sublanes as
    /// partial sums) where it can, instead of the matrix unit streaming one
    /// row per weight tile ([`super::gemv`]).
    vector_gemv: VectorGemv, "no-vector-gemv",
        "Compute a product of one row (per batch) by a matrix on the matrix unit instead of the vector unit.";
    /// A layer normalisation, a softmax, a GELU (element-wise nodes and
    /// reductions over the last dimension of one shape) is one region that
    /// reads each row once and keeps everything in between in registers
    /// ([`super::rows`]), instead of a region per reduction and per chain. Needs
    /// [`Options::broadcast_rows`].
    fuse_rows: FuseRows, "no-fuse-rows",
        "Lower layer normalisations, softmaxes and GELUs one node (or chain) at a time, each reading and writing memory, instead of as one region per group that reads each row once and keeps the rest in registers.",
        fallback 1 RowGroupsAndNoNodeBlamed "layer norms and softmaxes not fused into row regions";
    /// Values are written in the layout and type their consumers read:
    /// kept values read only by matrix products stored in the products'
    /// operand type; a product's result read only by the transpose back to
    /// rows of tokens written in place of it; a transposed computed `B`
    /// read untransposed by a form taking `B` as rows of `N`. Without it,
    /// conversions and transposes are separate passes.
    layout_fusion: LayoutFusion, "no-layout-fusion",
        "Write values as they are computed (f32, in their own layout), and convert or transpose them in separate passes, instead of in the type and layout their matrix products read (bf16 operands, a product's result in place of its transpose, a transposed B read as it is).";
    /// A row group without reductions (GELU) computes its result a column
    /// chunk at a time down all the rows of a band, rather than row block by
    /// row block across all the columns, so a product reading it as its `A`
    /// may start its first reduction steps while the rest is computed.
    column_chunks: ColumnChunks, "no-column-chunks",
        "Compute a row group without reductions (GELU) row block by row block across all its columns, instead of a column chunk at a time down all the rows (which lets the product reading it start on the first chunks).";
    /// A join (`Concat`) kept on chip is laid out in dense rows, where its
    /// rows meet the transfer alignment, so the parts coming from home
    /// (a KV cache) are transferred straight into it instead of landing
    /// and being copied through the registers.
    dense_joins: DenseJoins, "no-dense-joins",
        "Keep a join (`Concat`) on chip in rows padded to whole registers, its parts from home landing first and copied into it through the registers, instead of in dense rows its parts are transferred into.";
    /// A product visits its column tiles in the order their readers are
    /// lowered (`Lowerer::column_needs`): attention's projection makes
    /// the keys and values, which the head splits copy, before the queries,
    /// which the scores read in place, so the copies overlap the rest of
    /// the product instead of following it.
    reader_order: ReaderOrder, "no-reader-order",
        "Visit a product's column tiles left to right, instead of in the order the nodes reading them are lowered (attention's keys and values, copied into heads, before its queries, read in place).";
    /// The scheduler ranks instructions by their critical path plus their
    /// distance from the end in a list schedule of the reversed program
    /// under the machine's units and bandwidth
    /// ([`crate::sched::Rules::reverse_priorities`]), so the work the end waits for
    /// behind a busy unit or memory (the last output tiles' pops and
    /// stores) comes first, rather than by the critical path alone.
    reverse_priorities: ReversePriorities, "no-reverse-priorities",
        "Rank instructions for scheduling by the latency-weighted critical path alone, instead of adding their distance from the end in a list schedule of the reversed program under the machine's units and memory bandwidth.";
    /// The scheduler finishes chains of accumulations one after another on
    /// each copy of a unit rather than advancing them all together
    /// ([`crate::sched::Rules::finish_chains`]), so their registers free, and their
    /// results drain, while the unit goes on.
    finish_chains: FinishChains, "no-finish-chains",
        "Advance a unit's chains of accumulations (a GEMM's output tiles) in critical-path order, all together, instead of finishing one per copy of the unit before starting the next.";
    /// Work a constant mask makes dead is skipped ([`super::rows::masked`]): a causal
    /// softmax computes each block of rows up to its diagonal's chunk and
    /// stores zeros beyond, the product making the scores skips the tiles
    /// above the diagonal, and the product reading the probabilities stops
    /// its reduction there. Attention's power-of-two scale goes into the
    /// query projection's epilogue (`canon`), so the mask holds 0 and 1 and
    /// the chunks it keeps whole cost no operation.
    skip_masked: SkipMasked, "no-skip-masked",
        "Compute what a constant mask makes dead (a causal softmax's upper triangle, the products making and reading it) instead of skipping it, and leave attention's scale on the scores instead of moving it into the query projection's epilogue (where the mask's kept chunks then cost no operation).";
    /// A causal mask is computed from element positions by an instruction
    /// that masks by position, where the machine has one
    /// (`rows::MaskByPosition`), instead of loaded as two constants
    /// (which mask, which bias) and applied by a multiply-add.
    mask_by_position: MaskByPosition, "no-mask-by-position",
        "Load a causal mask's two constants and apply them by a multiply-add, instead of masking by element position with the machine's instruction for it (`vcausal` on vliw-systolic), which loads nothing.";
    /// A product visiting its tiles row block by row block computes its
    /// last block of rows in two halves where two steps of half the rows
    /// take the contraction's unit no longer than one of all
    /// (`Lowerer::halves_cost_nothing`): the output tiles finishing
    /// together at the end, whose drain and store nothing overlaps, are
    /// half as large.
    split_last_rows: SplitLastRows, "no-split-last-rows",
        "Compute a product's last block of rows whole, instead of in two halves where that costs its unit no time (so fewer results are left to drain and store at the end).";
    /// A convolution of one group over a number of channels that meets
    /// the home memory's transfer alignment takes its windows as rows of
    /// the channels-last image (`Im2Row`): each window position's channels
    /// are a run of one row, so the windows move as blocks however they
    /// are shifted, rather than as rows of one channel at column offsets
    /// the transfers cannot take (shifted element by element).
    conv_rows: ConvRows, "no-conv-rows",
        "Lay a convolution's windows out channel by channel (`Im2Col`, shifted element by element where a window's offset misses the transfer alignment), instead of as rows of the channels-last image moved in blocks.";
    /// A chain of views (transposes, reshapes) that undoes the views
    /// before the element-wise operations it reads is carried back
    /// through them: the operations run in the reader's layout and both
    /// chains go (`passes::layout`), e.g. a convolution's result moved
    /// channels first and, after its activation, channels last again for
    /// the next convolution.
    cancel_transposes: CancelTransposes, "no-cancel-transposes",
        "Keep transposes that undo each other across element-wise operations (a convolution's result moved channels first, then back channels last for the next one), instead of computing those operations in the later layout and dropping both.";
    /// A product reading a convolution's windows (`Im2Row`) brings each
    /// of its tiles together from the rows of the image, instead of the
    /// windows being written out at home (`KH·KW` times the image) and
    /// read back.
    window_operands: WindowOperands, "no-window-operands",
        "Write a convolution's windows out at home (the image's bytes times the kernel's size) and read them back, instead of bringing each tile of them together from the image's rows as the product reads it.",
        fallback 0 ConvWindows "convolution windows written out at home";
    /// A depthwise convolution with stride 1 along the width takes tiles
    /// of whole rows of output pixels, their channels side by side, so
    /// each vector instruction covers a register's width however few the
    /// channels (`Lowerer::window_sum_wide`).
    wide_windows: WideWindows, "no-wide-windows",
        "Compute a depthwise convolution over tiles of pixels by channels (as many lanes as channels), instead of over rows of pixels with their channels side by side (whole registers however few the channels).";
    /// A graph input joined along the rows (a decode step's key or value
    /// cache, the new token's row appended) and read by nothing else is
    /// written by the runner straight into its rows of the join's result
    /// (`Lowerer::joins_in_place`): the step appends and copies nothing.
    append_in_place: AppendInPlace, "no-append-in-place",
        "Copy a cache joined with the new rows (`Concat(past, new)`) into a fresh tensor every step, instead of having the runner write the cache into its rows of the result so that the step only appends.";
    /// A product of one row by the rows of a matrix (a decode step's
    /// attention scores against its key cache), or by a matrix whose
    /// columns are stored as rows (its context against the value cache),
    /// runs where the matrix lies at home, on a machine that computes in
    /// its home memory (pim-dram's `mac` over one DRAM row per bank): the
    /// matrix is written in the layout that instruction reads
    /// (`Lowerer::in_place_dot_homes`, `Lowerer::in_place_column_homes`),
    /// and each instruction gives one result per row it reads.
    in_place_rows: InPlaceRows, "no-in-place-rows",
        "Compute a product of one row by a computed matrix (attention's scores against the key cache, its context against the value cache) on the controller's vector unit, instead of where the matrix lies in a memory that computes (pim-dram's banks), written there in the layout its instruction reads.";
    /// An element-wise operation the machine has no instruction for is
    /// computed from those it has, by the identities of instruction
    /// selection ([`crate::passes::select`]: `sqrt(x) = 1/rsqrt(x)`,
    /// `sigmoid(x) = 1/(1+e^-x)`, `max(x, 0)` for `relu`, ...), the
    /// cheapest by the description's costs.
    identities: Identities, "no-identities",
        "Refuse an element-wise operation the machine has no instruction for, instead of computing it from the instructions it has by algebraic identities (`sqrt(x) = 1/rsqrt(x)`, `sigmoid(x) = 1/(1+e^-x)`, ...).";
    /// Identities may include approximations with a stated error bound:
    /// `exp` by squaring a polynomial, `log` from square roots, `erf` by a
    /// rational approximation, `round` by f32's own rounding
    /// (`docs/compiler.md`, "Instruction selection").
    approximations: Approximations, "no-approximations", alias "strict",
        "Refuse an operation the machine lacks that only an approximation computes (`exp`, `log`, `erf` from multiply-adds), instead of computing it within the error bound `docs/compiler.md` states.";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_option_once_and_flags_follow_the_names() {
        let mut names: Vec<&str> = OPTIONS.iter().map(|i| i.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), OPTIONS.len());
        for i in OPTIONS {
            assert_eq!(i.flag, format!("no-{}", i.name.replace('_', "-")));
            assert!(i.help.ends_with('.') || i.help.ends_with(')'), "{}", i.help);
            let mut o = Options::default();
            assert!(o.get(i.opt));
            o.set(i.opt, false);
            assert!(!o.get(i.opt));
            assert_eq!(
                OPTIONS.iter().filter(|j| !o.get(j.opt)).count(),
                1,
                "{} switches exactly its own field",
                i.name
            );
            let json = serde_json::to_value(o).expect("options serialise");
            assert_eq!(json[i.name], false, "the JSON name is the table's");
        }
    }

    #[test]
    fn the_fallback_order_is_the_ranks() {
        let order: Vec<&str> = fallbacks().iter().map(|(o, _)| o.info().name).collect();
        assert_eq!(
            order,
            [
                "window_operands",
                "fuse_rows",
                "residency",
                "broadcast_rows",
                "fuse_attention"
            ]
        );
    }
}
