//! Who last wrote each place and who read it since: the records the edge
//! pass keeps per register and per memory, and the page index that finds a
//! memory's records overlapping an access.

use targets::sim::Span;

/// Who last wrote a place and who read it since, with the bytes each
/// reader read (a register's readers read all of it).
#[derive(Clone, Debug)]
pub(super) struct Record {
    /// The bytes the writer wrote (of a memory; everything for a register).
    pub(super) span: Span,
    pub(super) writer: Option<usize>,
    pub(super) readers: Vec<(usize, Span)>,
}

/// All of a register.
pub(super) const WHOLE: Span = Span {
    start: i64::MIN,
    end: i64::MAX,
    pitch: 0,
    width: 0,
};

impl Default for Record {
    fn default() -> Record {
        Record {
            span: WHOLE,
            writer: None,
            readers: Vec::new(),
        }
    }
}

/// Bytes of a page of the records' index ([`MemRecords`]) at most: 32
/// KiB.
pub(super) const PAGE_BITS: u32 = 15;

/// A memory of `bytes` is indexed in about 4096 pages, of 256 bytes to
/// [`PAGE_BITS`]: a 128 KiB memory in 32 KiB pages would list most live
/// records under every access. Measured against 1024 pages on
/// vliw-systolic's 32 MiB (8 KiB pages, not 32): PP-LCNet's compile 0.69
/// times, an ALBERT encoder's 0.62, GPT-2 decode's the same.
pub(super) fn page_bits(bytes: u64) -> u32 {
    (bytes.max(1).ilog2().saturating_sub(12)).clamp(8, PAGE_BITS)
}

/// Bytes beyond which a record is kept in a list of its own rather than
/// under every page it touches (4 MiB).
const LARGE_BYTES: i64 = 4 << 20;

/// The records of one memory, indexed by the pages each touches: the ones
/// overlapping an access are among those listed under its pages (and the
/// few large ones).
pub(super) struct MemRecords {
    /// Bytes of a page: `1 << page_bits`.
    page_bits: u32,
    /// Every record made, by id; `None` once retired.
    recs: Vec<Option<Record>>,
    /// The records touching each page, by id.
    pages: rustc_hash::FxHashMap<i64, Vec<u32>>,
    /// The records spanning more than [`LARGE_PAGES`] pages.
    large: Vec<u32>,
    /// The last search that found each record (a record under several
    /// pages is taken once).
    seen: Vec<u32>,
    search: u32,
    /// The candidates of the last search, by id.
    hits: Vec<u32>,
}

impl Default for MemRecords {
    fn default() -> MemRecords {
        MemRecords::new(PAGE_BITS)
    }
}

impl MemRecords {
    /// An empty index in pages of `1 << page_bits` bytes.
    pub(super) fn new(page_bits: u32) -> MemRecords {
        MemRecords {
            page_bits,
            recs: Vec::new(),
            pages: Default::default(),
            large: Vec::new(),
            seen: Vec::new(),
            search: 0,
            hits: Vec::new(),
        }
    }

    /// The first and last page of `span`.
    fn pages_of(&self, span: &Span) -> (i64, i64) {
        (
            span.start >> self.page_bits,
            (span.end - 1).max(span.start) >> self.page_bits,
        )
    }

    /// Whether a record of pages `p0..=p1` is kept among the large ones.
    fn large(&self, (p0, p1): (i64, i64)) -> bool {
        p1 - p0 >= LARGE_BYTES >> self.page_bits
    }

    /// The live records listed under the pages of `span` (and the large
    /// ones) into `hits`, by id.
    fn candidates(&mut self, span: Span) {
        self.hits.clear();
        self.search = self.search.wrapping_add(1);
        let (p0, p1) = self.pages_of(&span);
        let (seen, hits, search) = (&mut self.seen, &mut self.hits, self.search);
        let mut take = |id: u32| {
            if seen[id as usize] != search {
                seen[id as usize] = search;
                hits.push(id);
            }
        };
        if p1 - p0 >= self.pages.len() as i64 {
            // Wider than the index: every page is as good.
            for ids in self.pages.values() {
                ids.iter().copied().for_each(&mut take);
            }
        } else {
            for p in p0..=p1 {
                if let Some(ids) = self.pages.get(&p) {
                    ids.iter().copied().for_each(&mut take);
                }
            }
        }
        self.large.iter().copied().for_each(&mut take);
    }

    /// Calls `f` with every record sharing a byte with `span`, in no
    /// particular order.
    pub(super) fn for_each_overlapping(&mut self, span: Span, mut f: impl FnMut(&mut Record)) {
        self.candidates(span);
        for &id in &self.hits {
            if let Some(r) = self.recs[id as usize].as_mut()
                && r.span.overlaps(&span)
            {
                f(r);
            }
        }
    }

    pub(super) fn push(&mut self, rec: Record) {
        let id = self.recs.len() as u32;
        let (p0, p1) = self.pages_of(&rec.span);
        if self.large((p0, p1)) {
            self.large.push(id);
        } else {
            for p in p0..=p1 {
                self.pages.entry(p).or_default().push(id);
            }
        }
        self.recs.push(Some(rec));
        self.seen.push(0);
    }

    /// Drops the records whose bytes `span` covers.
    pub(super) fn retire_within(&mut self, span: Span) {
        self.candidates(span);
        let hits = std::mem::take(&mut self.hits);
        for &id in &hits {
            let Some(rec) = self.recs[id as usize].take_if(|r| span.covers(&r.span)) else {
                continue;
            };
            let (p0, p1) = self.pages_of(&rec.span);
            if self.large((p0, p1)) {
                self.large.retain(|&x| x != id);
            } else {
                for p in p0..=p1 {
                    if let Some(ids) = self.pages.get_mut(&p) {
                        ids.retain(|&x| x != id);
                        if ids.is_empty() {
                            self.pages.remove(&p);
                        }
                    }
                }
            }
        }
        self.hits = hits;
    }
}
