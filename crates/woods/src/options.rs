//! Options: what a user sets when opening a database, and which of them are persisted.

use std::fmt;
use std::sync::Arc;

use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::storage::Fs;

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Acknowledged once it is in the write-ahead log in the OS (survives a process crash).
    #[default]
    Buffered,
    /// Acknowledged once the write-ahead log is synced to the device (survives a power cut).
    /// Needs the log ([`Options::wal`]): without it a `Sync` write is
    /// [`Error::InvalidOption`], and [`crate::Db::sync`] makes writes durable instead.
    Sync,
}

/// Parameters of the copy-on-write B+-tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BTreeParams {
    /// Fill target of a leaf built by a split, in percent of the page (default 90). In
    /// 50..=100 (`btree fill_percent N not in 50..=100`).
    pub fill_percent: u32,
    /// An insertion buffer in front of the tree (seed 004 ch. 5; off by default). The kind's
    /// name is `btree-buffered` when set (`btree-buffered:POLICY` for a policy other than the
    /// default `adaptive`).
    pub insert_buffer: Option<InsertBuffer>,
}

impl Default for BTreeParams {
    fn default() -> Self {
        BTreeParams {
            fill_percent: 90,
            insert_buffer: None,
        }
    }
}

/// The `btree` kind's insertion buffer (`specs/hashing-aging-insert-buffers.md` §3.6):
/// absorbed memtables wait in it, durable as small sorted runs, and a full buffer flushes the
/// entries of one leaf at a time, chosen by `policy`, into the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsertBuffer {
    /// Which leaf a full buffer flushes.
    pub policy: crate::index::btree::buffer_policy::FlushPolicy,
    /// Bytes of entries (key + value + the memtable's per-entry overhead) the buffer holds
    /// before it flushes; its memory is charged to the page cache. 0 (the default): a quarter
    /// of `cache_bytes` (InnoDB's change buffer default, `innodb_change_buffer_max_size` 25).
    pub capacity_bytes: u64,
}

impl Default for InsertBuffer {
    /// The adaptive policy, a quarter of the cache.
    fn default() -> Self {
        InsertBuffer {
            policy: crate::index::btree::buffer_policy::FlushPolicy::Adaptive,
            capacity_bytes: 0,
        }
    }
}

/// Parameters of the leveled LSM-tree (LevelDB's rules).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LsmParams {
    /// Target size of one table (LevelDB: 2 MiB). At least 16 KiB (`lsm table_bytes below 16
    /// KiB`).
    pub table_bytes: u64,
    /// Size ratio between adjacent levels (LevelDB: 10). At least 2 (`lsm size_ratio below
    /// 2`).
    pub size_ratio: u64,
    /// Total size of level 1. 0 (the default) sizes it as L0 at its compaction trigger,
    /// `l0_compaction_trigger * memtable_bytes`, and at least LevelDB's 10 MiB: LevelDB's fixed
    /// 10 MiB suits its 4 MiB write buffer, and with larger memtables a small L1 only adds
    /// levels, and write amplification, to the tree (RocksDB sizes its L1 the same way).
    /// Other than 0, at least `table_bytes` (`lsm level1_bytes below table_bytes`).
    pub level1_bytes: u64,
    /// Level-0 file count that triggers a compaction (LevelDB: 4). The three level-0 counts
    /// must satisfy `1 <= l0_compaction_trigger <= l0_slowdown <= l0_stop` (the error says
    /// so).
    pub l0_compaction_trigger: u32,
    /// Level-0 file count at which each write is delayed by 1 ms (LevelDB: 8).
    pub l0_slowdown: u32,
    /// Level-0 file count at which writes stop until compaction catches up (LevelDB: 12).
    pub l0_stop: u32,
    /// Bloom filter bits per key (LevelDB's filter policy: 10). At most 64 (`lsm
    /// bloom_bits_per_key above 64`).
    pub bloom_bits_per_key: u32,
    /// Level targets from the last level's actual size (RocksDB's
    /// `level_compaction_dynamic_level_bytes`), not LevelDB's static ones: each level above the
    /// deepest non-empty one may hold a `size_ratio`-th of the level below it (at least one
    /// table), so that about a tenth of the data, not up to half, lies over older versions of
    /// it. Off by default (`lsm` is LevelDB's tree); the kind name `lsm-dynamic` sets it.
    /// Issue 23: with static targets a churned store of 13 MiB held 2.5 entries a live one.
    pub dynamic_level_bytes: bool,
}

impl LsmParams {
    /// The size of level 1 for a Db whose memtables hold `memtable_bytes`.
    pub fn level1_bytes_for(&self, memtable_bytes: u64) -> u64 {
        if self.level1_bytes != 0 {
            return self.level1_bytes;
        }
        u64::from(self.l0_compaction_trigger)
            .saturating_mul(memtable_bytes)
            .max(10 << 20)
            .max(self.table_bytes)
    }
}

impl Default for LsmParams {
    fn default() -> Self {
        LsmParams {
            table_bytes: 2 << 20,
            size_ratio: 10,
            level1_bytes: 0,
            l0_compaction_trigger: 4,
            l0_slowdown: 8,
            l0_stop: 12,
            bloom_bits_per_key: 10,
            dynamic_level_bytes: false,
        }
    }
}

/// Parameters of the Nested B-tree (specs/nbtree.md). σ, the most a d-tree holds, is the Db's
/// `memtable_bytes`: the root's d-tree is the memtable, and every s-tree level takes σ per
/// flush. The defaults are the paper's experimental setting (f = 3, 10 bits/key) and need no
/// memory beyond the bloom filters (about 1.25 bytes per key) and the s-tree (a few hundred
/// bytes per d-tree): on this 2-core, 24 GiB machine the Db's memtable (16 MiB by default, σ)
/// and the page cache are the budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbTreeParams {
    /// f, the s-tree fanout: the most children an s-node has (the paper's experiments: 3).
    /// Inserts cost grows linearly with f, queries fall logarithmically (the paper's Fig. 4).
    /// In 3..=64 (`nbtree fanout N not in 3..=64`).
    pub fanout: u32,
    /// Bloom filter bits per key of every d-tree (the paper: about 10); 0 builds no filters.
    /// At most 64 (`nbtree bloom_bits_per_key above 64`).
    pub bloom_bits_per_key: u32,
    /// c, the d-tree size σ in memtables: σ = c × `memtable_bytes`. With c = 1 the root's
    /// d-tree is the memtables (each frozen memtable drains straight into the root's
    /// children); with c > 1 the root also keeps up to c on-disk runs, one per absorbed
    /// memtable, and drains them together once they hold σ, paced over the next c memtables
    /// (`docs/engine.md`, *σ a multiple of the memtable*). A larger σ makes the tree shallower
    /// (less write amplification) at the cost of one more write of every entry and up to 2c
    /// root runs a lookup may search. Default 8 (measured against 1, 2 and 4). In 1..=64
    /// (`nbtree sigma_memtables N not in 1..=64`). A database keeps the c it was created with
    /// (databases made before this option have c = 1): open an existing one with
    /// [`crate::Options::index`] `None`, or with its own parameters; the new default given
    /// explicitly to an older database is [`crate::Error::OptionsMismatch`].
    pub sigma_memtables: u32,
}

impl Default for NbTreeParams {
    fn default() -> Self {
        NbTreeParams {
            fanout: 3,
            bloom_bits_per_key: 10,
            // Chosen by measurement (docs/results/nbtree.md, *σ a multiple of the memtable*):
            // of 1, 2, 4 and 8, 8 wrote least and inserted fastest.
            sigma_memtables: 8,
        }
    }
}

/// Parameters of the size-tiered Bε-tree of SplinterDB (`stbe`).
///
/// Sizes in bytes are in the memtable's accounting unit: key + value + 64 bytes per entry, so
/// that one full memtable (the spec's `m`) is `memtable_bytes`. A field left at 0 takes the
/// default derived from the fanout and the Db's `memtable_bytes`, as the spec states it.
///
/// Each field states its limits; a value outside them is [`Error::InvalidOption`] whose
/// message starts `stbe` and names the field and the limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StbeParams {
    /// Target fanout `F` of trunk nodes: a node with more children is split when a flush
    /// reaches it (SplinterDB's evaluation: 8). In 2..=64.
    pub fanout: u32,
    /// Spare child slots `H` above `F`: a node never holds more than `F + H` children
    /// (dissertation: about 10). At most 64.
    pub fanout_slack: u32,
    /// Hard cap on branch references per trunk node (dissertation: 84). From
    /// `2 * flush_branches + 4` to 4096.
    pub max_branches: u32,
    /// Trigger T2: a node flushes a child once more than this many of its branches are live
    /// for it. 0: `3F`. In 1..=1024 (after the default is applied).
    pub flush_branches: u32,
    /// Trigger T1: a node flushes its fullest child while its live data exceeds this. 0: `F·m`.
    /// Other than 0, at least 16 KiB.
    pub node_bytes: u64,
    /// Leaf size target: a leaf whose settled branches (a flushed batch counts once its
    /// compaction has installed) are estimated over this is split, at the next flush into it or
    /// compaction install in it, into pieces of at most this estimated size. 0: `F·m/2`. Other
    /// than 0, at least 16 KiB.
    pub leaf_bytes: u64,
    /// A leaf holding more than this many branches (pending batches counting one each) is
    /// compacted whole. 0: `3F`. At least 2, and `leaf_branches + 2 * flush_branches + 2` at
    /// most `max_branches`.
    pub leaf_branches: u32,
    /// Space reclamation: a leaf whose estimated dead (overwritten or deleted) data exceeds
    /// this percentage of its size is compacted whole. In 1..=100.
    pub dead_percent: u32,
    /// Quotient filter remainder bits: false-positive rate about 0.9 · 2⁻ʳ (8: SplinterDB's
    /// 1/256). In 1..=16.
    pub filter_remainder_bits: u32,
    /// Pages per allocation chunk while writing a branch (dissertation: 32 pages; 64 = 256 KiB
    /// matches the substrate's read-ahead window). In 1..=1024.
    pub extent_pages: u32,
    /// Scan-driven compaction, an extension of the paper (docs/engine.md, `stbe`, *Scan-driven
    /// compaction*): every branch past the first that a range scan reads in a leaf's range
    /// (branches under an eighth of a memtable, at most 1 MiB, aside) credits the leaf with
    /// this many bytes of compaction. Once a leaf's credit reaches the data of the branches
    /// above it, those are flushed down its path; once it reaches the data of every branch
    /// read there, the leaf is compacted whole too, so that later scans there read one branch.
    /// The default, 16 KiB, is LevelDB's rate for seek-triggered compaction (one wasted read is
    /// worth about 16 KiB compacted). 0: off. At most 1 GiB.
    pub scan_credit_bytes: u64,
}

/// [`StbeParams::scan_credit_bytes`]'s default.
pub const DEFAULT_SCAN_CREDIT_BYTES: u64 = 16 << 10;

impl Default for StbeParams {
    fn default() -> Self {
        StbeParams {
            fanout: 8,
            fanout_slack: 10,
            max_branches: 84,
            flush_branches: 0,
            node_bytes: 0,
            leaf_bytes: 0,
            leaf_branches: 0,
            dead_percent: 50,
            filter_remainder_bits: 8,
            extent_pages: 64,
            scan_credit_bytes: DEFAULT_SCAN_CREDIT_BYTES,
        }
    }
}

impl StbeParams {
    /// T2's branch count (`flush_branches`, or `3F`).
    pub fn flush_branches(&self) -> u32 {
        if self.flush_branches == 0 {
            3 * self.fanout
        } else {
            self.flush_branches
        }
    }

    /// T1's live-data limit for memtables of `memtable_bytes` (`node_bytes`, or `F·m`).
    pub fn node_bytes(&self, memtable_bytes: u64) -> u64 {
        if self.node_bytes == 0 {
            u64::from(self.fanout).saturating_mul(memtable_bytes)
        } else {
            self.node_bytes
        }
    }

    /// The leaf size target (`leaf_bytes`, or `F·m/2`).
    pub fn leaf_bytes(&self, memtable_bytes: u64) -> u64 {
        if self.leaf_bytes == 0 {
            (u64::from(self.fanout).saturating_mul(memtable_bytes) / 2).max(1)
        } else {
            self.leaf_bytes
        }
    }

    /// The whole-leaf compaction trigger (`leaf_branches`, or `3F`).
    pub fn leaf_branches(&self) -> u32 {
        if self.leaf_branches == 0 {
            3 * self.fanout
        } else {
            self.leaf_branches
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidOption(format!("stbe {m}")));
        if !(2..=64).contains(&self.fanout) {
            return bad(format!("fanout {} not in 2..=64", self.fanout));
        }
        if self.fanout_slack > 64 {
            return bad(format!("fanout_slack {} above 64", self.fanout_slack));
        }
        let t2 = self.flush_branches();
        if t2 == 0 || t2 > 1024 {
            return bad(format!("flush_branches {t2} not in 1..=1024"));
        }
        // A flush brings up to about T2 + 1 references; a node must hold two such batches
        // besides what it keeps.
        if self.max_branches < 2 * t2 + 4 || self.max_branches > 4096 {
            return bad(format!(
                "max_branches {} not in 2 * flush_branches + 4 ({})..=4096",
                self.max_branches,
                2 * t2 + 4
            ));
        }
        let lb = self.leaf_branches();
        if lb < 2 || lb + 2 * t2 + 2 > self.max_branches {
            return bad(format!(
                "leaf_branches {lb} must be at least 2 and leave room for two batches under max_branches"
            ));
        }
        if !(1..=100).contains(&self.dead_percent) {
            return bad(format!("dead_percent {} not in 1..=100", self.dead_percent));
        }
        if !(1..=16).contains(&self.filter_remainder_bits) {
            return bad(format!(
                "filter_remainder_bits {} not in 1..=16",
                self.filter_remainder_bits
            ));
        }
        if !(1..=1024).contains(&self.extent_pages) {
            return bad(format!(
                "extent_pages {} not in 1..=1024",
                self.extent_pages
            ));
        }
        if self.node_bytes != 0 && self.node_bytes < 16 << 10 {
            return bad("node_bytes below 16 KiB".into());
        }
        if self.leaf_bytes != 0 && self.leaf_bytes < 16 << 10 {
            return bad("leaf_bytes below 16 KiB".into());
        }
        if self.scan_credit_bytes > 1 << 30 {
            return bad(format!(
                "scan_credit_bytes {} above 1 GiB",
                self.scan_credit_bytes
            ));
        }
        Ok(())
    }
}

/// Parameters of the LSA-tree and the IAM-tree (`lsa`, `iam`; specs/lsa-iam-tree.md). A field
/// left at 0 takes the default the spec derives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IamParams {
    /// `t`, the growth factor: level `L_i` holds about `t^i` nodes, a node flushes to about
    /// `t` children and is split at `2t` (the paper: 10).
    pub fanout: u32,
    /// `C_t`, a node's capacity in user bytes (key + value). 0: the Db's `memtable_bytes`
    /// (the paper's memtable threshold equals `C_t`).
    pub node_bytes: u64,
    /// A node is full at this percentage of `C_t` (the code's 95).
    pub full_percent: u32,
    /// A full leaf that receives a flush is merged and cut into pieces of `C_t / this`.
    /// 0: `(t + 1) / 2` (the code's; `C_t/5` at t = 10, spec P1).
    pub leaf_split_div: u32,
    /// `iam` only: a fixed mixed level `m` (1-based; above the last level: none). 0: chosen
    /// at run time from half the cache (§3.8).
    pub fixed_m: u32,
    /// `iam` only: a fixed `k`, the most sequences of a mixed-level node. 0: chosen at run time.
    pub fixed_k: u32,
    /// Bloom filter bits per key of every sequence (the paper: 14).
    pub bloom_bits_per_key: u32,
}

impl Default for IamParams {
    fn default() -> Self {
        IamParams {
            fanout: 10,
            node_bytes: 0,
            full_percent: 95,
            leaf_split_div: 0,
            fixed_m: 0,
            fixed_k: 0,
            bloom_bits_per_key: 14,
        }
    }
}

/// Parameters of the partitioned B-tree (`pbt`, specs/partitioned-btree.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PbtParams {
    /// The PBT-Buffer: the share of `cache_bytes`, in percent (5..=75), reserved for the leaves
    /// of the ACTIVE and CLOSING partitions (spec §2.7: 25 %). The partition switches while a
    /// memtable's worth of leaf room is still free in it.
    pub buffer_percent: u32,
    /// Fill target of a leaf built by a split in the ACTIVE partition, in percent (50..=100).
    /// Merged partitions are written full.
    pub fill_percent: u32,
    /// Bloom filter bits per key of each closed partition (spec §2.7: 10, about 0.8 % false
    /// positives); 0 builds no filters.
    pub bloom_bits_per_key: u32,
    /// Pages per write while a partition is evicted or merged (its pages are written in order,
    /// into extents allocated this many pages at a time, and written this many at a time).
    pub write_pages: u32,
    /// Partition merge (spec §3.9): the most persisted partitions kept before the newest ones
    /// are merged; with merge on, newer partitions are also merged as soon as together they
    /// reach half the size of the next older one (tiering). 0: no merge (the paper's build).
    pub max_partitions: u32,
}

impl Default for PbtParams {
    fn default() -> Self {
        PbtParams {
            buffer_percent: 25,
            fill_percent: 90,
            bloom_bits_per_key: 10,
            write_pages: 64,
            max_partitions: 8,
        }
    }
}

/// Parameters of the bundle of arrays (`boa`, specs/hashing-aging-insert-buffers.md §1.5,
/// §1.11): a size-tiered log of runs laid out by key fingerprint, with one routing filter per
/// level. A point-only kind: it keeps no key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoaParams {
    /// λ: a level holds at most λ − 1 runs, and before a λ-th would be registered its λ − 1
    /// runs are merged into one run of the next level (spec correction 3), so run sizes grow by
    /// λ − 1 a level. A power of two in 4..=256 (default 16; the spec's optimality needs
    /// λ ≳ log N / log log N, 8 to 16; λ = 2 would merge one run at a time and never combine).
    pub lambda: u32,
    /// Bits of the check character each routing-filter entry keeps (1..=16; default 4, one
    /// character of log₂ 16 bits, spec §1.5). A wider check cuts the filter's false positives
    /// per level from k/λ² towards k/(λ·2^check_bits) at that many bits per entry.
    pub check_bits: u32,
    /// Pages per chunk a run is written in (8..=1024, default 64).
    pub extent_pages: u32,
}

impl Default for BoaParams {
    fn default() -> Self {
        BoaParams {
            lambda: 16,
            check_bits: 4,
            extent_pages: 64,
        }
    }
}

/// Parameters of the FD-tree (`fdtree`, specs/fdtree.md): a head tree (the Db's memtables) over
/// sorted runs L1..Ll whose capacities grow by `k`, linked by fences. A field left at 0 takes
/// the default the spec's cost model (§5.4) or the memtable size gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdTreeParams {
    /// De-amortized merges (spec §4.8): merge work is done in bounded steps paced by inserts,
    /// so that no insert waits for a whole cascade. `false`: the paper's amortized tree, where
    /// the insert that fills the head tree waits for the whole cascade. The kind's name is
    /// `fdtree-d` when set.
    pub deamortized: bool,
    /// k, the capacity ratio of adjacent levels (`|L_i| = k^i·|L0|`); must be below
    /// `f − 1` (f: entries per page). 0 (the default): chosen by the cost model for
    /// `expected_entries` and `search_percent`, then kept in the index metadata.
    pub ratio: u32,
    /// |L0|, the head tree's capacity in entries. 0 (the default): the entries of 16 bytes
    /// (8-byte key and value, the paper's key and record id) a full memtable holds,
    /// `memtable_bytes / 80`.
    pub head_entries: u64,
    /// n, the index size the cost model plans for (default 100 million entries).
    pub expected_entries: u64,
    /// Share of searches in the workload the cost model plans for, in percent (default 50,
    /// the paper's Fig. 5(e) mix).
    pub search_percent: u32,
}

impl Default for FdTreeParams {
    fn default() -> Self {
        FdTreeParams {
            deamortized: false,
            ratio: 0,
            head_entries: 0,
            expected_entries: 100_000_000,
            search_percent: 50,
        }
    }
}

impl IamParams {
    fn validate(&self, name: &str) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidOption(format!("{name} {what}")));
        if !(2..=64).contains(&self.fanout) {
            return bad(format!("fanout {} not in 2..=64", self.fanout));
        }
        if self.node_bytes != 0 && self.node_bytes < 16 << 10 {
            return bad("node_bytes below 16 KiB".into());
        }
        if !(50..=100).contains(&self.full_percent) {
            return bad(format!(
                "full_percent {} not in 50..=100",
                self.full_percent
            ));
        }
        if self.leaf_split_div > 64 {
            return bad(format!("leaf_split_div {} above 64", self.leaf_split_div));
        }
        if self.fixed_k > self.fanout {
            return bad(format!("fixed_k {} above the fanout", self.fixed_k));
        }
        if self.bloom_bits_per_key > 64 {
            return bad("bloom_bits_per_key above 64".into());
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        codec::put_u32(out, self.fanout);
        codec::put_u64(out, self.node_bytes);
        for v in [
            self.full_percent,
            self.leaf_split_div,
            self.fixed_m,
            self.fixed_k,
            self.bloom_bits_per_key,
        ] {
            codec::put_u32(out, v);
        }
    }

    fn decode(r: &mut Reader) -> Result<IamParams> {
        Ok(IamParams {
            fanout: r.u32()?,
            node_bytes: r.u64()?,
            full_percent: r.u32()?,
            leaf_split_div: r.u32()?,
            fixed_m: r.u32()?,
            fixed_k: r.u32()?,
            bloom_bits_per_key: r.u32()?,
        })
    }
}

/// Which index structure organises the data file, with its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexKind {
    /// Copy-on-write B+-tree: the read-optimal baseline.
    BTree(BTreeParams),
    /// Leveled LSM-tree following LevelDB's rules: the write-optimized baseline.
    Lsm(LsmParams),
    /// Nested B-tree (Zeighami and Wong, PVLDB 2020): de-amortized inserts, bloom filters.
    NbTree(NbTreeParams),
    /// SplinterDB's size-tiered Bε-tree: pointer-only flushes, quotient filters.
    Stbe(StbeParams),
    /// The LSA-tree (Gong et al., ICPP 2019): nodes of appended sequences, low write
    /// amplification.
    Lsa(IamParams),
    /// The IAM-tree (Gong et al., ICPP 2019): appends in the upper levels, merges below, the
    /// split chosen from the memory budget.
    Iam(IamParams),
    /// FD-tree (Li et al., PVLDB 2010): sorted runs linked by fences, plain or de-amortized.
    FdTree(FdTreeParams),
    /// Partitioned B-tree (Riegger, Vinçon, Petrov, iiWAS 2017): partitions as key prefixes of
    /// one B+-tree, the newest buffered and written out sequentially.
    Pbt(PbtParams),
    /// Bundle of arrays (Conway, Farach-Colton, Shilane, ICALP 2018): an external-memory hash
    /// index, runs laid out by key fingerprint and routing filters; point operations only.
    Boa(BoaParams),
}

/// The kind name of a buffered `btree` with `policy`: `btree-buffered` for the default
/// (adaptive), `btree-buffered:POLICY` for the others.
fn buffered_name(policy: crate::index::btree::buffer_policy::FlushPolicy) -> &'static str {
    use crate::index::btree::buffer_policy::FlushPolicy;
    match policy {
        FlushPolicy::Adaptive => "btree-buffered",
        FlushPolicy::FullestLeaf => "btree-buffered:fullest-leaf",
        FlushPolicy::RandomBall => "btree-buffered:random-ball",
        FlushPolicy::GoldenGate => "btree-buffered:golden-gate",
    }
}

/// The flush policy a buffered `btree` kind name ([`buffered_name`]) names.
fn buffered_policy(name: &str) -> Option<crate::index::btree::buffer_policy::FlushPolicy> {
    use crate::index::btree::buffer_policy::FlushPolicy;
    FlushPolicy::ALL
        .into_iter()
        .find(|p| buffered_name(*p) == name || format!("btree-buffered:{}", p.name()) == name)
}

impl IndexKind {
    /// Whether the kind keeps keys in order: `false` for a point-only kind (`boa`), on which
    /// range scans and iterators return [`Error::Unsupported`].
    pub fn ordered(&self) -> bool {
        !matches!(self, IndexKind::Boa(_))
    }

    /// The short name used on the command line and in stats (`btree`, `lsm`).
    pub fn name(&self) -> &'static str {
        match self {
            IndexKind::BTree(p) => match &p.insert_buffer {
                None => "btree",
                Some(b) => buffered_name(b.policy),
            },
            IndexKind::Lsm(p) if p.dynamic_level_bytes => "lsm-dynamic",
            IndexKind::Lsm(_) => "lsm",
            IndexKind::NbTree(_) => "nbtree",
            IndexKind::Stbe(_) => "stbe",
            IndexKind::Lsa(_) => "lsa",
            IndexKind::Iam(_) => "iam",
            IndexKind::FdTree(p) if p.deamortized => "fdtree-d",
            IndexKind::FdTree(_) => "fdtree",
            IndexKind::Pbt(_) => "pbt",
            IndexKind::Boa(_) => "boa",
        }
    }

    /// The kind with default parameters for a command-line name.
    pub fn from_name(name: &str) -> Result<IndexKind> {
        match name {
            "btree" => Ok(IndexKind::BTree(BTreeParams::default())),
            b if buffered_policy(b).is_some() => Ok(IndexKind::BTree(BTreeParams {
                insert_buffer: buffered_policy(b).map(|policy| InsertBuffer {
                    policy,
                    ..InsertBuffer::default()
                }),
                ..BTreeParams::default()
            })),
            "lsm" => Ok(IndexKind::Lsm(LsmParams::default())),
            "lsm-dynamic" => Ok(IndexKind::Lsm(LsmParams {
                dynamic_level_bytes: true,
                ..LsmParams::default()
            })),
            "nbtree" => Ok(IndexKind::NbTree(NbTreeParams::default())),
            "stbe" => Ok(IndexKind::Stbe(StbeParams::default())),
            "lsa" => Ok(IndexKind::Lsa(IamParams::default())),
            "iam" => Ok(IndexKind::Iam(IamParams::default())),
            "fdtree" => Ok(IndexKind::FdTree(FdTreeParams::default())),
            "fdtree-d" => Ok(IndexKind::FdTree(FdTreeParams {
                deamortized: true,
                ..FdTreeParams::default()
            })),
            "pbt" => Ok(IndexKind::Pbt(PbtParams::default())),
            "boa" => Ok(IndexKind::Boa(BoaParams::default())),
            other => Err(Error::InvalidOption(format!(
                "unknown index kind {other:?} (known: btree, btree-buffered[:POLICY], lsm, \
                 lsm-dynamic, nbtree, stbe, lsa, iam, fdtree, fdtree-d, pbt, boa)"
            ))),
        }
    }

    /// Every kind, with default parameters.
    pub fn all() -> Vec<IndexKind> {
        vec![
            IndexKind::BTree(BTreeParams::default()),
            IndexKind::BTree(BTreeParams {
                insert_buffer: Some(InsertBuffer::default()),
                ..BTreeParams::default()
            }),
            IndexKind::Lsm(LsmParams::default()),
            IndexKind::Lsm(LsmParams {
                dynamic_level_bytes: true,
                ..LsmParams::default()
            }),
            IndexKind::NbTree(NbTreeParams::default()),
            IndexKind::Stbe(StbeParams::default()),
            IndexKind::Lsa(IamParams::default()),
            IndexKind::Iam(IamParams::default()),
            IndexKind::FdTree(FdTreeParams::default()),
            IndexKind::FdTree(FdTreeParams {
                deamortized: true,
                ..FdTreeParams::default()
            }),
            IndexKind::Pbt(PbtParams::default()),
            IndexKind::Boa(BoaParams::default()),
        ]
    }

    fn validate(&self) -> Result<()> {
        match self {
            IndexKind::BTree(p) => {
                if !(50..=100).contains(&p.fill_percent) {
                    return Err(Error::InvalidOption(format!(
                        "btree fill_percent {} not in 50..=100",
                        p.fill_percent
                    )));
                }
            }
            IndexKind::Lsm(p) => {
                if p.table_bytes < 16 << 10 {
                    return Err(Error::InvalidOption("lsm table_bytes below 16 KiB".into()));
                }
                if p.size_ratio < 2 {
                    return Err(Error::InvalidOption("lsm size_ratio below 2".into()));
                }
                if p.level1_bytes != 0 && p.level1_bytes < p.table_bytes {
                    return Err(Error::InvalidOption(
                        "lsm level1_bytes below table_bytes".into(),
                    ));
                }
                if !(1 <= p.l0_compaction_trigger
                    && p.l0_compaction_trigger <= p.l0_slowdown
                    && p.l0_slowdown <= p.l0_stop)
                {
                    return Err(Error::InvalidOption(
                        "lsm needs 1 <= l0_compaction_trigger <= l0_slowdown <= l0_stop".into(),
                    ));
                }
                if p.bloom_bits_per_key > 64 {
                    return Err(Error::InvalidOption(
                        "lsm bloom_bits_per_key above 64".into(),
                    ));
                }
            }
            IndexKind::NbTree(p) => {
                // The paper needs f >= 3 (a split of f + 1 children leaves ceil(f/2) in each
                // half) and f a small fraction of σ (spec P12).
                if !(3..=64).contains(&p.fanout) {
                    return Err(Error::InvalidOption(format!(
                        "nbtree fanout {} not in 3..=64",
                        p.fanout
                    )));
                }
                if p.bloom_bits_per_key > 64 {
                    return Err(Error::InvalidOption(
                        "nbtree bloom_bits_per_key above 64".into(),
                    ));
                }
                if !(1..=64).contains(&p.sigma_memtables) {
                    return Err(Error::InvalidOption(format!(
                        "nbtree sigma_memtables {} not in 1..=64",
                        p.sigma_memtables
                    )));
                }
            }
            IndexKind::Stbe(p) => p.validate()?,
            IndexKind::Lsa(p) => p.validate("lsa")?,
            IndexKind::Iam(p) => p.validate("iam")?,
            IndexKind::FdTree(p) => {
                let f = crate::index::fdtree::cost::fanout();
                if p.ratio != 0 && !(2..f.saturating_sub(1)).contains(&u64::from(p.ratio)) {
                    return Err(Error::InvalidOption(format!(
                        "fdtree ratio {} not in 2..{} (k < f - 1, f = {f} entries a page)",
                        p.ratio,
                        f - 1
                    )));
                }
                if p.expected_entries == 0 {
                    return Err(Error::InvalidOption("fdtree expected_entries is 0".into()));
                }
                if p.search_percent > 100 {
                    return Err(Error::InvalidOption(format!(
                        "fdtree search_percent {} above 100",
                        p.search_percent
                    )));
                }
            }
            IndexKind::Pbt(p) => {
                let bad = |d: String| Err(Error::InvalidOption(format!("pbt {d}")));
                if !(5..=75).contains(&p.buffer_percent) {
                    return bad(format!("buffer_percent {} not in 5..=75", p.buffer_percent));
                }
                if !(50..=100).contains(&p.fill_percent) {
                    return bad(format!("fill_percent {} not in 50..=100", p.fill_percent));
                }
                if p.bloom_bits_per_key > 64 {
                    return bad("bloom_bits_per_key above 64".into());
                }
                if !(1..=1024).contains(&p.write_pages) {
                    return bad(format!("write_pages {} not in 1..=1024", p.write_pages));
                }
                if p.max_partitions == 1 {
                    return bad("max_partitions 1 (0 turns merge off; at least 2)".into());
                }
            }
            IndexKind::Boa(p) => {
                let bad = |d: String| Err(Error::InvalidOption(format!("boa {d}")));
                if !(4..=256).contains(&p.lambda) || !p.lambda.is_power_of_two() {
                    return bad(format!("lambda {} not a power of two in 4..=256", p.lambda));
                }
                if !(1..=16).contains(&p.check_bits) {
                    return bad(format!("check_bits {} not in 1..=16", p.check_bits));
                }
                if !(8..=1024).contains(&p.extent_pages) {
                    return bad(format!("extent_pages {} not in 8..=1024", p.extent_pages));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            IndexKind::BTree(p) => match &p.insert_buffer {
                None => {
                    out.push(1);
                    codec::put_u32(out, p.fill_percent);
                }
                Some(b) => {
                    out.push(10);
                    codec::put_u32(out, p.fill_percent);
                    out.push(b.policy as u8);
                    codec::put_u64(out, b.capacity_bytes);
                }
            },
            // Tag 2 is static level targets (the layout from before `dynamic_level_bytes`), 12
            // dynamic ones; the fields are the same.
            IndexKind::Lsm(p) => {
                out.push(if p.dynamic_level_bytes { 12 } else { 2 });
                codec::put_u64(out, p.table_bytes);
                codec::put_u64(out, p.size_ratio);
                codec::put_u64(out, p.level1_bytes);
                codec::put_u32(out, p.l0_compaction_trigger);
                codec::put_u32(out, p.l0_slowdown);
                codec::put_u32(out, p.l0_stop);
                codec::put_u32(out, p.bloom_bits_per_key);
            }
            // Tag 3 (c = 1) is the layout from before `sigma_memtables`, so that such a database
            // reads back its own options; tag 11 adds c.
            IndexKind::NbTree(p) => {
                out.push(if p.sigma_memtables == 1 { 3 } else { 11 });
                codec::put_u32(out, p.fanout);
                codec::put_u32(out, p.bloom_bits_per_key);
                if p.sigma_memtables != 1 {
                    codec::put_u32(out, p.sigma_memtables);
                }
            }
            IndexKind::FdTree(p) => {
                out.push(4);
                out.push(u8::from(p.deamortized));
                codec::put_u32(out, p.ratio);
                codec::put_u64(out, p.head_entries);
                codec::put_u64(out, p.expected_entries);
                codec::put_u32(out, p.search_percent);
            }
            // Tag 8 is the layout from before `scan_credit_bytes` (a database written then reads
            // back with the default credit); tag 13 adds it.
            IndexKind::Stbe(p) => {
                let credit = p.scan_credit_bytes != DEFAULT_SCAN_CREDIT_BYTES;
                out.push(if credit { 13 } else { 8 });
                for v in [p.fanout, p.fanout_slack, p.max_branches, p.flush_branches] {
                    codec::put_u32(out, v);
                }
                codec::put_u64(out, p.node_bytes);
                codec::put_u64(out, p.leaf_bytes);
                for v in [
                    p.leaf_branches,
                    p.dead_percent,
                    p.filter_remainder_bits,
                    p.extent_pages,
                ] {
                    codec::put_u32(out, v);
                }
                if credit {
                    codec::put_u64(out, p.scan_credit_bytes);
                }
            }
            IndexKind::Lsa(p) => {
                out.push(6);
                p.encode(out);
            }
            IndexKind::Iam(p) => {
                out.push(7);
                p.encode(out);
            }
            IndexKind::Pbt(p) => {
                out.push(5);
                for v in [
                    p.buffer_percent,
                    p.fill_percent,
                    p.bloom_bits_per_key,
                    p.write_pages,
                    p.max_partitions,
                ] {
                    codec::put_u32(out, v);
                }
            }
            IndexKind::Boa(p) => {
                out.push(9);
                for v in [p.lambda, p.check_bits, p.extent_pages] {
                    codec::put_u32(out, v);
                }
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<IndexKind> {
        match r.u8()? {
            1 => Ok(IndexKind::BTree(BTreeParams {
                fill_percent: r.u32()?,
                insert_buffer: None,
            })),
            10 => {
                let fill_percent = r.u32()?;
                let tag = r.u8()?;
                let policy = crate::index::btree::buffer_policy::FlushPolicy::ALL
                    .into_iter()
                    .find(|p| *p as u8 == tag)
                    .ok_or_else(|| {
                        Error::corruption("options", None, format!("unknown flush policy {tag}"))
                    })?;
                Ok(IndexKind::BTree(BTreeParams {
                    fill_percent,
                    insert_buffer: Some(InsertBuffer {
                        policy,
                        capacity_bytes: r.u64()?,
                    }),
                }))
            }
            tag @ (2 | 12) => Ok(IndexKind::Lsm(LsmParams {
                table_bytes: r.u64()?,
                size_ratio: r.u64()?,
                level1_bytes: r.u64()?,
                l0_compaction_trigger: r.u32()?,
                l0_slowdown: r.u32()?,
                l0_stop: r.u32()?,
                bloom_bits_per_key: r.u32()?,
                dynamic_level_bytes: tag == 12,
            })),
            3 => Ok(IndexKind::NbTree(NbTreeParams {
                fanout: r.u32()?,
                bloom_bits_per_key: r.u32()?,
                sigma_memtables: 1,
            })),
            11 => Ok(IndexKind::NbTree(NbTreeParams {
                fanout: r.u32()?,
                bloom_bits_per_key: r.u32()?,
                sigma_memtables: r.u32()?,
            })),
            4 => Ok(IndexKind::FdTree(FdTreeParams {
                deamortized: r.u8()? != 0,
                ratio: r.u32()?,
                head_entries: r.u64()?,
                expected_entries: r.u64()?,
                search_percent: r.u32()?,
            })),
            tag @ (8 | 13) => Ok(IndexKind::Stbe(StbeParams {
                fanout: r.u32()?,
                fanout_slack: r.u32()?,
                max_branches: r.u32()?,
                flush_branches: r.u32()?,
                node_bytes: r.u64()?,
                leaf_bytes: r.u64()?,
                leaf_branches: r.u32()?,
                dead_percent: r.u32()?,
                filter_remainder_bits: r.u32()?,
                extent_pages: r.u32()?,
                scan_credit_bytes: if tag == 13 {
                    r.u64()?
                } else {
                    DEFAULT_SCAN_CREDIT_BYTES
                },
            })),
            6 => Ok(IndexKind::Lsa(IamParams::decode(r)?)),
            7 => Ok(IndexKind::Iam(IamParams::decode(r)?)),
            5 => Ok(IndexKind::Pbt(PbtParams {
                buffer_percent: r.u32()?,
                fill_percent: r.u32()?,
                bloom_bits_per_key: r.u32()?,
                write_pages: r.u32()?,
                max_partitions: r.u32()?,
            })),
            9 => Ok(IndexKind::Boa(BoaParams {
                lambda: r.u32()?,
                check_bits: r.u32()?,
                extent_pages: r.u32()?,
            })),
            k => Err(Error::corruption(
                "options",
                None,
                format!("unknown index kind tag {k}"),
            )),
        }
    }
}

/// A user merge operator: folds Merge operands onto a base value (counters, appends).
///
/// Folds happen on reads and when the index reorganises (flushes, compactions, B-tree absorbs).
/// A fold may return a value of any length, also one over [`crate::MAX_VALUE_LEN`]: a
/// reorganisation then keeps the base and operands as they are (each within the limit) instead
/// of storing the folded value, and every read folds them again, so such a key costs a fold of
/// all its operands per read until a Put or Delete replaces them. The same operands may be
/// folded several times, in several groupings (`full_merge(full_merge(b, [x]), [y])` as well as
/// `full_merge(b, [x, y])`): the operator must give the same result either way.
pub trait MergeOperator: Send + Sync {
    /// A stable name, persisted with the database; reopening with a different name is an error.
    fn name(&self) -> &str;
    /// Folds `operands` (oldest first) onto `base` (None when the key had no value).
    fn full_merge(&self, key: &[u8], base: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8>;
}

/// Options for [`crate::Db::open`]. Fields marked *persisted* are stored in the database; leaving
/// them `None` on open means "what the database has", and an explicit different value is
/// [`Error::OptionsMismatch`]. The others apply to this handle only and may change from one
/// open to the next.
///
/// Every limit is checked by [`crate::Db::open`] before it touches the directory: a value
/// outside the limits its field states is [`Error::InvalidOption`], whose message names the
/// field and the limit (for instance `memtable_bytes 8192 below 16 KiB`).
///
/// Keys and values have fixed limits, not options: a key is 1 to [`crate::MAX_KEY_LEN`]
/// bytes ([`Error::InvalidKey`]), a value or merge operand at most [`crate::MAX_VALUE_LEN`]
/// ([`Error::ValueTooLarge`]).
#[derive(Clone)]
pub struct Options {
    /// The index structure (*persisted*). `None` (the default) means "the kind the database
    /// has", and only opens an existing database: on a directory holding no database it is
    /// [`Error::InvalidOption`] naming the kinds, and nothing is created. A kind other than
    /// the stored one is [`Error::OptionsMismatch`]. Each kind's parameters give their own
    /// limits ([`Error::InvalidOption`] outside them).
    pub index: Option<IndexKind>,
    /// Bytes of the cache (default 64 MiB): pages, the in-memory filters of open runs and the
    /// row cache together. At least 64 KiB (`cache_bytes N below 64 KiB`); no upper limit
    /// but the memory there is.
    pub cache_bytes: u64,
    /// The most of `cache_bytes` the row cache may take (point lookup results per key and
    /// immutable run; the pages make room for what it holds). Default 0: no row cache (under
    /// YCSB's zipfian it did not measurably reduce device reads here: docs/engine.md). At most
    /// half of `cache_bytes`. The `btree` kind, whose pages are rewritten in place of a run,
    /// and the `fdtree` kinds, whose searches follow fences a page per level, do not use it.
    pub row_cache_bytes: u64,
    /// Bytes of one memtable (default 16 MiB), counted as key + value + 64 bytes per entry.
    /// Two may exist at once (active and frozen). From 16 KiB (`memtable_bytes N below 16
    /// KiB`) to 16 GiB (`memtable_bytes N above 16 GiB`). It also bounds one write: a
    /// [`crate::WriteBatch`] (or single write) larger than half of it, or than the 64 MiB one
    /// log record carries, is [`Error::BatchTooLarge`] with the limit. Not persisted, but the
    /// `nbtree` kind's σ and the `stbe` kind's derived sizes follow it.
    pub memtable_bytes: u64,
    /// Let a sorted run's entry begin in the room its data page has left and continue on the
    /// next page (default true; docs/format.md, *Split entries*). Off, an entry that does not
    /// fit whole goes to the next page and the room stays empty: entries of a 24-byte key and a
    /// 1 KiB value then fill only 77% of each page (1.3 times their size on disk, written 1.3
    /// times), but no point lookup reads a second page for a split entry. Not persisted: runs
    /// written either way read the same. Kinds built of sorted runs only (every kind but
    /// `btree` and `pbt`, whose leaves are B-tree nodes; `fdtree` levels never split).
    pub split_entries: bool,
    /// Use direct I/O for the data file where the file system supports it (default true).
    /// Where it does not, the file is opened buffered instead, and
    /// [`crate::Db::direct_io_fallback`] says so.
    pub direct_io: bool,
    /// Default durability of writes (default [`Durability::Buffered`]); `put_with`,
    /// `delete_with`, `merge_with` and `write_with` choose per write. [`Durability::Sync`]
    /// needs `wal`: [`crate::Db::open`] refuses it without ([`Error::InvalidOption`] naming
    /// `Options::wal`).
    pub durability: Durability,
    /// Threads doing index work in the background (default 1; 0 = writers do all work
    /// inline). At most 64 (`background_threads above 64`). Either way `nbtree`, `stbe`,
    /// `lsa`, `iam` and `fdtree` make their work durable (data-file sync, manifest commit) in a
    /// committer thread of their own, so a writer never syncs for them; with threads, a writer
    /// also leaves the removal of log files (and its directory sync) to them.
    pub background_threads: usize,
    /// Merge operator; its name is *persisted* once a Merge entry has been written. A merge
    /// without one is [`Error::MergeOperator`]; so is opening a database that holds merge
    /// operands without it, and one of another name is [`Error::OptionsMismatch`].
    pub merge_operator: Option<Arc<dyn MergeOperator>>,
    /// Write the write-ahead log (default true). Without it, only data moved into the index by
    /// `sync`, `flush` or `close` survives a crash: for bulk loads. No write can then be
    /// acknowledged as synced: [`Durability::Sync`], as the default or for one write, is
    /// [`Error::InvalidOption`].
    pub wal: bool,
    /// The file system (default: the real one). Tests pass a [`crate::storage::FaultFs`].
    pub fs: Option<Arc<dyn Fs>>,
    /// A test hook (default none): while the gate is closed the background threads do no
    /// index work, so that a test sees what pacing makes the writers do alone.
    #[doc(hidden)]
    pub background_gate: Option<Arc<crate::db::BackgroundGate>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            index: None,
            cache_bytes: 64 << 20,
            row_cache_bytes: 0,
            memtable_bytes: 16 << 20,
            split_entries: true,
            direct_io: true,
            durability: Durability::Buffered,
            background_threads: 1,
            merge_operator: None,
            wal: true,
            fs: None,
            background_gate: None,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("index", &self.index)
            .field("cache_bytes", &self.cache_bytes)
            .field("row_cache_bytes", &self.row_cache_bytes)
            .field("memtable_bytes", &self.memtable_bytes)
            .field("split_entries", &self.split_entries)
            .field("direct_io", &self.direct_io)
            .field("durability", &self.durability)
            .field("background_threads", &self.background_threads)
            .field(
                "merge_operator",
                &self.merge_operator.as_ref().map(|m| m.name().to_string()),
            )
            .field("wal", &self.wal)
            .finish()
    }
}

/// Why a `Sync` write needs the log.
pub(crate) const NO_WAL_SYNC: &str = "Durability::Sync needs the write-ahead log (Options::wal): \
     without it no write is on the device when it is acknowledged; write with \
     Durability::Buffered and call Db::sync (or Db::flush) to make writes durable";

impl Options {
    /// Options for an index kind, everything else default.
    pub fn with_index(kind: IndexKind) -> Options {
        Options {
            index: Some(kind),
            ..Options::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.memtable_bytes < 16 << 10 {
            return Err(Error::InvalidOption(format!(
                "memtable_bytes {} below 16 KiB",
                self.memtable_bytes
            )));
        }
        if self.memtable_bytes > 1 << 34 {
            return Err(Error::InvalidOption(format!(
                "memtable_bytes {} above 16 GiB",
                self.memtable_bytes
            )));
        }
        if self.cache_bytes < 64 << 10 {
            return Err(Error::InvalidOption(format!(
                "cache_bytes {} below 64 KiB",
                self.cache_bytes
            )));
        }
        if self.row_cache_bytes > self.cache_bytes / 2 {
            return Err(Error::InvalidOption(format!(
                "row_cache_bytes {} above half of cache_bytes {}",
                self.row_cache_bytes, self.cache_bytes
            )));
        }
        if self.durability == Durability::Sync && !self.wal {
            return Err(Error::InvalidOption(NO_WAL_SYNC.into()));
        }
        if self.background_threads > 64 {
            return Err(Error::InvalidOption("background_threads above 64".into()));
        }
        if let Some(k) = &self.index {
            k.validate()?;
        }
        Ok(())
    }
}

/// What the database persists about its own shape (the manifest's config record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PersistedConfig {
    pub index: IndexKind,
    /// Always "bytewise" today; persisted so that another comparator is never silently mixed.
    pub comparator: String,
    /// Name of the merge operator the data was written with, if any Merge entry was written.
    pub merge_operator: Option<String>,
}

impl PersistedConfig {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.index.encode(&mut out);
        codec::put_bytes(&mut out, self.comparator.as_bytes());
        match &self.merge_operator {
            Some(n) => {
                out.push(1);
                codec::put_bytes(&mut out, n.as_bytes());
            }
            None => out.push(0),
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<PersistedConfig> {
        let mut r = Reader::new(buf, "persisted options");
        let index = IndexKind::decode(&mut r)?;
        let comparator = String::from_utf8_lossy(r.bytes()?).into_owned();
        let merge_operator = match r.u8()? {
            0 => None,
            _ => Some(String::from_utf8_lossy(r.bytes()?).into_owned()),
        };
        Ok(PersistedConfig {
            index,
            comparator,
            merge_operator,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(kind: &IndexKind) -> (u8, IndexKind) {
        let mut out = Vec::new();
        kind.encode(&mut out);
        let back = IndexKind::decode(&mut Reader::new(&out, "test")).expect("decode");
        (out[0], back)
    }

    #[test]
    fn stbe_scan_credit_is_persisted_only_when_not_the_default() {
        // The default keeps the layout databases were written with before the field (tag 8),
        // which read back with the default credit.
        let default = IndexKind::Stbe(StbeParams::default());
        assert_eq!(round_trip(&default), (8, default.clone()));
        for credit in [0, 64 << 10] {
            let k = IndexKind::Stbe(StbeParams {
                scan_credit_bytes: credit,
                ..StbeParams::default()
            });
            assert_eq!(round_trip(&k), (13, k.clone()));
            assert_ne!(k, default);
        }
        let too_much = StbeParams {
            scan_credit_bytes: (1 << 30) + 1,
            ..StbeParams::default()
        };
        assert!(matches!(too_much.validate(), Err(Error::InvalidOption(_))));
    }
}
