//! The TPC-C-like key-value workload (`woods bench --tpcc-warehouses W`): the key patterns of
//! TPC-C's order-entry transactions over one ordered key space, for the partitioned B-tree's
//! reproduction (issue 21; the paper ran TPC-C on Apache Derby).
//!
//! Tables are key prefixes (one tag byte, then big-endian numbers, so that key order is the
//! tables' primary-key order); every row's value starts with its key, which every read checks.
//! The scale factor is the number of warehouses W; each warehouse holds a tenth of TPC-C's
//! cardinalities ([`Scale`]), so that a small cache is outgrown at small W:
//!
//! | tag | table | key | value bytes | rows |
//! |---|---|---|---:|---|
//! | `W` | warehouse | w | 90 | W |
//! | `D` | district (holds the next order number) | w, d | 100 | 10 W |
//! | `C` | customer | w, d, c | 500 | 3,000 W |
//! | `N` | customer-name index (secondary) | w, d, last name, c | 24 | 3,000 W |
//! | `I` | item (read only) | i | 80 | 10,000 |
//! | `S` | stock | w, i | 300 | 10,000 W |
//! | `O` | order | w, d, o | 40 | appended per district |
//! | `X` | a customer's orders (secondary) | w, d, c, o | 20 | appended |
//! | `L` | order line | w, d, o, line | 60 | 5 to 15 per order, appended |
//! | `Q` | new-order queue | w, d, o | 16 | appended at the tail, deleted from the head |
//! | `H` | history | w, d, n | 50 | appended |
//!
//! The load writes W warehouses, their districts, customers and name index, the items, the
//! stock, and 300 orders per district (the last 90 of them queued as new orders). The run then
//! draws transactions with TPC-C's mix from one client thread, each against a home warehouse
//! drawn uniformly: New-Order 45 % (district read and update, customer read, 5 to 15 order lines
//! each reading an item and reading and updating a stock row, 1 % of them from another
//! warehouse; the order, its new-order entry, its lines and the customer-order entry appended),
//! Payment 43 % (warehouse, district and customer updated, the customer found by last name
//! through the name index 60 % of the time, a history row appended), Order-Status 4 % (a
//! customer's last order and its lines, by scans), Delivery 4 % (in each district the oldest
//! new order deleted from the queue's head, its order and lines updated, its customer updated),
//! Stock-Level 4 % (the last 20 orders' lines scanned, their stock rows read). Customers and
//! items are drawn with TPC-C's NURand, scaled. A lookup that finds nothing where a row must
//! be, a row whose value does not start with its key, or a district's order number or queue
//! head other than the bench's own account of it fails the run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::device::{sync_tree, BlockDevice};
use crate::dist::Rng;
use crate::engine::{self, BenchError, BenchResult, Engine, EngineConfig, ExtraEngines};
use crate::metrics::{disk_bytes, Latency, ProcIo, Recorder, Usage};
use crate::report;

/// Districts per warehouse (TPC-C's).
pub const DISTRICTS: u32 = 10;

/// A warehouse's cardinalities: a tenth of TPC-C's, except its 10 districts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scale {
    pub customers_per_district: u32,
    pub items: u32,
    pub initial_orders_per_district: u32,
    /// Of the initial orders, the newest this many are in the new-order queue.
    pub initial_new_orders: u32,
    /// Distinct customer last names per district.
    pub last_names: u32,
}

impl Default for Scale {
    fn default() -> Scale {
        Scale {
            customers_per_district: 300,
            items: 10_000,
            initial_orders_per_district: 300,
            initial_new_orders: 90,
            last_names: 100,
        }
    }
}

/// One engine's TPC-C-like run: passed to the child as JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TpccSpec {
    pub engine: String,
    pub dir: PathBuf,
    pub config: EngineConfig,
    pub warehouses: u32,
    pub scale: Scale,
    /// How long the transactions run (after the load, drained).
    pub secs: u64,
    /// At most this many transactions (0: no limit but the time).
    pub max_txns: u64,
    pub seed: u64,
}

/// Write I/O over one span (the load, or the transactions with their drain and close).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WriteIo {
    /// The engine's own count of every byte it wrote, log included.
    pub own_written: Option<u64>,
    pub own_wal_written: Option<u64>,
    /// woods only: the index's data-file writes (flush and merge purposes), bytes and requests.
    pub own_index_write_bytes: Option<u64>,
    pub own_index_writes: Option<u64>,
    /// /proc/self/io of the engine's process: bytes written (less cancelled) and write system
    /// calls (every file: data, log, manifest, the engine's info log).
    pub proc_written: Option<u64>,
    pub proc_write_calls: Option<u64>,
    /// The block device under the directory (every process's writes on it, and the file
    /// system's own): bytes and completed write requests.
    pub device_written: Option<u64>,
    pub device_writes: Option<u64>,
    /// The engine's index counters at the end (woods), for the report's details.
    #[serde(default)]
    pub index: std::collections::BTreeMap<String, u64>,
}

/// Transactions of each type.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Mix {
    pub new_order: u64,
    pub payment: u64,
    pub order_status: u64,
    pub delivery: u64,
    pub stock_level: u64,
    /// New-Orders rolled back by an unused item number (TPC-C's 1 %): they read but write
    /// nothing.
    pub rolled_back: u64,
}

/// What one engine's run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TpccResult {
    pub engine: String,
    pub version: Option<String>,
    pub warehouses: u32,
    pub direct_io: bool,
    /// Key and value bytes the load wrote.
    pub loaded_bytes: u64,
    pub load_secs: f64,
    pub load_io: WriteIo,
    pub txns: u64,
    pub mix: Mix,
    /// Seconds of the transactions, their drain and close included.
    pub secs: f64,
    pub txns_per_sec: f64,
    /// New-Orders per minute (TPC-C's tpmC, of this key-value rendering).
    pub new_orders_per_min: f64,
    pub latency: Latency,
    pub per_second: Vec<u64>,
    /// Engine operations of the transactions: gets, puts, deletes, scans.
    pub ops: [u64; 4],
    /// Key and value bytes the transactions wrote.
    pub user_bytes: u64,
    pub run_io: WriteIo,
    /// Rows read whose value was checked against their key.
    pub checked: u64,
    /// Bytes allocated under the engine's directory at the end.
    pub disk_bytes: u64,
    pub cpu_secs: f64,
    pub peak_rss_bytes: u64,
    /// Wall-clock time (seconds since the epoch) when the transactions started and ended:
    /// where a write trace's run part begins and ends.
    pub run_start_unix: f64,
    pub run_end_unix: f64,
}

// ---- keys and rows --------------------------------------------------------------------------

fn key(tag: u8, parts: &[u32]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + 4 * parts.len());
    k.push(tag);
    for p in parts {
        k.extend_from_slice(&p.to_be_bytes());
    }
    k
}

/// The name-index key: the name sorts before the customer number.
fn name_key(w: u32, d: u32, name: u32, c: u32) -> Vec<u8> {
    let mut k = key(b'N', &[w, d]);
    k.extend_from_slice(last_name(name).as_bytes());
    k.extend_from_slice(&c.to_be_bytes());
    k
}

/// TPC-C's last name of number `n` (three syllables, padded to 16 bytes).
fn last_name(n: u32) -> String {
    const SYL: [&str; 10] = [
        "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
    ];
    let s = format!(
        "{}{}{}",
        SYL[(n / 100 % 10) as usize],
        SYL[(n / 10 % 10) as usize],
        SYL[(n % 10) as usize]
    );
    format!("{s:-<16}")
}

/// A row of `len` bytes: its key, then `field` (a number the transactions keep), then filler
/// that changes with `version`.
fn row(k: &[u8], field: u64, version: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(k.len() + 16));
    v.extend_from_slice(k);
    v.extend_from_slice(&field.to_be_bytes());
    v.extend_from_slice(&version.to_be_bytes());
    let mut x = version.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ field;
    while v.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.push(b'a' + (x >> 59) as u8);
    }
    v
}

/// The number a row keeps after its key.
fn field(k: &[u8], v: &[u8]) -> Option<u64> {
    let b = v.get(k.len()..k.len() + 8)?;
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

const WAREHOUSE_LEN: usize = 90;
const DISTRICT_LEN: usize = 100;
const CUSTOMER_LEN: usize = 500;
const NAME_LEN: usize = 24;
const ITEM_LEN: usize = 80;
const STOCK_LEN: usize = 300;
const ORDER_LEN: usize = 40;
const CUST_ORDER_LEN: usize = 20;
const LINE_LEN: usize = 60;
const NEW_ORDER_LEN: usize = 16;
const HISTORY_LEN: usize = 50;

// ---- the client ---------------------------------------------------------------------------

/// The bench's own account of each district: its next order number and its queue's head.
#[derive(Clone, Copy)]
struct District {
    next_o: u32,
    queue_head: u32,
    history: u32,
}

struct Client<'a> {
    db: &'a dyn Engine,
    engine: String,
    w: u32,
    scale: Scale,
    rng: Rng,
    districts: Vec<District>,
    /// TPC-C's run-time constants C of NURand.
    c_cust: u64,
    c_item: u64,
    c_name: u64,
    ops: [u64; 4],
    checked: u64,
    user_bytes: u64,
    version: u64,
    mix: Mix,
}

fn wrong(engine: &str, what: String) -> BenchError {
    BenchError::new(format!(
        "WRONG ANSWER from {engine} (tpcc): {what}; a fast wrong engine is not a result"
    ))
}

impl<'a> Client<'a> {
    fn new(db: &'a dyn Engine, spec: &TpccSpec) -> Client<'a> {
        let mut rng = Rng::new(spec.seed, 0x7bcc);
        let s = spec.scale;
        let districts = vec![
            District {
                next_o: s.initial_orders_per_district + 1,
                queue_head: s.initial_orders_per_district - s.initial_new_orders + 1,
                history: 0,
            };
            (spec.warehouses * DISTRICTS) as usize
        ];
        let (c_cust, c_item, c_name) = (rng.below(128), rng.below(1024), rng.below(32));
        Client {
            db,
            engine: spec.engine.clone(),
            w: spec.warehouses,
            scale: s,
            rng,
            districts,
            c_cust,
            c_item,
            c_name,
            ops: [0; 4],
            checked: 0,
            user_bytes: 0,
            version: 1,
            mix: Mix::default(),
        }
    }

    fn rand(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.rng.below(u64::from(hi - lo + 1)) as u32
    }

    /// TPC-C's NURand(A, x, y) with run constant `c`.
    fn nurand(&mut self, a: u32, x: u32, y: u32, c: u64) -> u32 {
        let r1 = self.rand(0, a);
        let r2 = self.rand(x, y);
        (((u64::from(r1 | r2) + c) % u64::from(y - x + 1)) as u32) + x
    }

    fn customer_id(&mut self) -> u32 {
        let n = self.scale.customers_per_district;
        self.nurand(127, 1, n, self.c_cust)
    }

    fn item_id(&mut self) -> u32 {
        let n = self.scale.items;
        self.nurand(1023, 1, n, self.c_item)
    }

    fn name_no(&mut self) -> u32 {
        let n = self.scale.last_names;
        self.nurand(31, 0, n - 1, self.c_name)
    }

    fn put(&mut self, k: &[u8], v: &[u8]) -> BenchResult<()> {
        self.ops[1] += 1;
        self.user_bytes += (k.len() + v.len()) as u64;
        self.db.put(k, v)
    }

    fn delete(&mut self, k: &[u8]) -> BenchResult<()> {
        self.ops[2] += 1;
        self.user_bytes += k.len() as u64;
        self.db.delete(k)
    }

    /// The row under `k`, which must exist; returns its field.
    fn get(&mut self, k: &[u8]) -> BenchResult<u64> {
        self.ops[0] += 1;
        let Some(v) = self.db.get(k)? else {
            return Err(wrong(&self.engine, format!("row {k:?} not found")));
        };
        self.check(k, &v)
    }

    fn check(&mut self, k: &[u8], v: &[u8]) -> BenchResult<u64> {
        if !v.starts_with(k) {
            return Err(wrong(
                &self.engine,
                format!("row {k:?} holds another row's value"),
            ));
        }
        self.checked += 1;
        field(k, v).ok_or_else(|| wrong(&self.engine, format!("row {k:?} is too short")))
    }

    /// Rows whose key starts with `prefix`, from `start` (at least `prefix`), at most `limit`.
    fn scan(
        &mut self,
        prefix: &[u8],
        start: &[u8],
        limit: usize,
    ) -> BenchResult<Vec<(Vec<u8>, u64)>> {
        self.ops[3] += 1;
        let mut out = Vec::new();
        let mut bad = None;
        self.db.scan(start, limit, &mut |k, v| {
            if k.starts_with(prefix) {
                if !v.starts_with(k) {
                    bad = Some(k.to_vec());
                }
                let f = field(k, v).unwrap_or(u64::MAX);
                out.push((k.to_vec(), f));
            }
        })?;
        if let Some(k) = bad {
            return Err(wrong(
                &self.engine,
                format!("scanned row {k:?} holds another value"),
            ));
        }
        self.checked += out.len() as u64;
        Ok(out)
    }

    fn next_version(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    fn update(&mut self, k: &[u8], len: usize, f: impl FnOnce(u64) -> u64) -> BenchResult<()> {
        let old = self.get(k)?;
        let v = self.next_version();
        self.put(k, &row(k, f(old), v, len))
    }

    // ---- the load ----

    fn load(&mut self) -> BenchResult<()> {
        let s = self.scale;
        for i in 1..=s.items {
            let k = key(b'I', &[i]);
            self.put(&k, &row(&k, u64::from(i), 0, ITEM_LEN))?;
        }
        for w in 1..=self.w {
            let k = key(b'W', &[w]);
            self.put(&k, &row(&k, 0, 0, WAREHOUSE_LEN))?;
            for i in 1..=s.items {
                let k = key(b'S', &[w, i]);
                let q = u64::from(self.rand(10, 100));
                self.put(&k, &row(&k, q, 0, STOCK_LEN))?;
            }
            for d in 1..=DISTRICTS {
                let next = s.initial_orders_per_district + 1;
                let k = key(b'D', &[w, d]);
                self.put(&k, &row(&k, u64::from(next), 0, DISTRICT_LEN))?;
                for c in 1..=s.customers_per_district {
                    let k = key(b'C', &[w, d, c]);
                    self.put(&k, &row(&k, 0, 0, CUSTOMER_LEN))?;
                    // Every name is used once before names repeat (TPC-C's first 1,000).
                    let name = if c <= s.last_names {
                        c - 1
                    } else {
                        self.name_no()
                    };
                    let k = name_key(w, d, name, c);
                    self.put(&k, &row(&k, u64::from(c), 0, NAME_LEN))?;
                }
                // Orders of a random permutation of customers, as TPC-C's load.
                let mut custs: Vec<u32> = (1..=s.customers_per_district).collect();
                for i in (1..custs.len()).rev() {
                    let j = self.rng.below(i as u64 + 1) as usize;
                    custs.swap(i, j);
                }
                for o in 1..=s.initial_orders_per_district {
                    let c = custs[(o as usize - 1) % custs.len()];
                    let queued = o > s.initial_orders_per_district - s.initial_new_orders;
                    self.write_order(w, d, o, c, queued, &[])?;
                }
            }
        }
        Ok(())
    }

    /// Appends order `o` of customer `c`: the order, its lines (items given, or drawn), the
    /// customer-order entry and, if `queued`, its new-order entry.
    fn write_order(
        &mut self,
        w: u32,
        d: u32,
        o: u32,
        c: u32,
        queued: bool,
        items: &[u32],
    ) -> BenchResult<()> {
        let lines = if items.is_empty() {
            self.rand(5, 15)
        } else {
            items.len() as u32
        };
        let k = key(b'O', &[w, d, o]);
        let f = u64::from(c) << 8 | u64::from(lines);
        self.put(&k, &row(&k, f, 0, ORDER_LEN))?;
        for l in 1..=lines {
            let item = match items.get(l as usize - 1) {
                Some(&i) => i,
                None => self.rand(1, self.scale.items),
            };
            let k = key(b'L', &[w, d, o, l]);
            self.put(&k, &row(&k, u64::from(item), 0, LINE_LEN))?;
        }
        let k = key(b'X', &[w, d, c, o]);
        self.put(&k, &row(&k, u64::from(o), 0, CUST_ORDER_LEN))?;
        if queued {
            let k = key(b'Q', &[w, d, o]);
            self.put(&k, &row(&k, u64::from(o), 0, NEW_ORDER_LEN))?;
        }
        Ok(())
    }

    // ---- the transactions ----

    fn district(&mut self, w: u32, d: u32) -> &mut District {
        &mut self.districts[((w - 1) * DISTRICTS + d - 1) as usize]
    }

    /// Reads district (w, d) and checks its next order number against the bench's account.
    fn read_district(&mut self, w: u32, d: u32) -> BenchResult<u32> {
        let next = self.get(&key(b'D', &[w, d]))?;
        let mine = self.district(w, d).next_o;
        if next != u64::from(mine) {
            return Err(wrong(
                &self.engine,
                format!("district {w}/{d}: next order {next}, the bench wrote {mine}"),
            ));
        }
        Ok(mine)
    }

    fn new_order(&mut self, w: u32) -> BenchResult<()> {
        let d = self.rand(1, DISTRICTS);
        let c = self.customer_id();
        let lines = self.rand(5, 15);
        let mut items: Vec<(u32, u32)> = Vec::with_capacity(lines as usize);
        for _ in 0..lines {
            let i = self.item_id();
            let supply = if self.w > 1 && self.rand(1, 100) == 1 {
                loop {
                    let o = self.rand(1, self.w);
                    if o != w {
                        break o;
                    }
                }
            } else {
                w
            };
            items.push((i, supply));
        }
        let rollback = self.rand(1, 100) == 1;
        self.get(&key(b'W', &[w]))?;
        let o = self.read_district(w, d)?;
        self.get(&key(b'C', &[w, d, c]))?;
        for &(i, _) in &items {
            self.get(&key(b'I', &[i]))?;
        }
        if rollback {
            // TPC-C's unused item number: the transaction reads and rolls back.
            self.mix.rolled_back += 1;
            return Ok(());
        }
        let k = key(b'D', &[w, d]);
        let v = self.next_version();
        self.put(&k, &row(&k, u64::from(o + 1), v, DISTRICT_LEN))?;
        self.district(w, d).next_o = o + 1;
        for &(i, supply) in &items {
            self.update(&key(b'S', &[supply, i]), STOCK_LEN, |q| {
                if q >= 15 {
                    q - 5
                } else {
                    q + 86
                }
            })?;
        }
        let ids: Vec<u32> = items.iter().map(|p| p.0).collect();
        self.write_order(w, d, o, c, true, &ids)?;
        self.mix.new_order += 1;
        Ok(())
    }

    /// A customer by last name (the middle one of those with the name, TPC-C's rule).
    fn customer_by_name(&mut self, w: u32, d: u32) -> BenchResult<u32> {
        let name = self.name_no();
        let mut prefix = key(b'N', &[w, d]);
        prefix.extend_from_slice(last_name(name).as_bytes());
        let found = self.scan(&prefix.clone(), &prefix, 64)?;
        if found.is_empty() {
            return Err(wrong(
                &self.engine,
                format!("no customer named {} in {w}/{d}", last_name(name)),
            ));
        }
        let (_, c) = found[found.len().div_ceil(2) - 1];
        Ok(c as u32)
    }

    fn payment(&mut self, w: u32) -> BenchResult<()> {
        let d = self.rand(1, DISTRICTS);
        // 15 % of payments are to a customer of another warehouse.
        let (cw, cd) = if self.w > 1 && self.rand(1, 100) <= 15 {
            let o = loop {
                let o = self.rand(1, self.w);
                if o != w {
                    break o;
                }
            };
            (o, self.rand(1, DISTRICTS))
        } else {
            (w, d)
        };
        let c = if self.rand(1, 100) <= 60 {
            self.customer_by_name(cw, cd)?
        } else {
            self.customer_id()
        };
        let amount = u64::from(self.rand(1, 5000));
        self.update(&key(b'W', &[w]), WAREHOUSE_LEN, |y| y + amount)?;
        self.update(&key(b'D', &[w, d]), DISTRICT_LEN, |n| n)?;
        self.update(&key(b'C', &[cw, cd, c]), CUSTOMER_LEN, |b| {
            b.wrapping_add(amount)
        })?;
        let h = {
            let dist = self.district(w, d);
            dist.history += 1;
            dist.history
        };
        let k = key(b'H', &[w, d, h]);
        self.put(&k, &row(&k, amount, 0, HISTORY_LEN))?;
        self.mix.payment += 1;
        Ok(())
    }

    fn order_status(&mut self, w: u32) -> BenchResult<()> {
        let d = self.rand(1, DISTRICTS);
        let c = if self.rand(1, 100) <= 60 {
            self.customer_by_name(w, d)?
        } else {
            self.customer_id()
        };
        self.get(&key(b'C', &[w, d, c]))?;
        let prefix = key(b'X', &[w, d, c]);
        let orders = self.scan(&prefix, &prefix, 1000)?;
        if let Some(&(_, o)) = orders.last() {
            let o = o as u32;
            let lines = self.get(&key(b'O', &[w, d, o]))? & 0xff;
            let prefix = key(b'L', &[w, d, o]);
            let got = self.scan(&prefix, &prefix, 16)?;
            if got.len() as u64 != lines {
                return Err(wrong(
                    &self.engine,
                    format!("order {w}/{d}/{o}: {} lines, it has {lines}", got.len()),
                ));
            }
        }
        self.mix.order_status += 1;
        Ok(())
    }

    fn delivery(&mut self, w: u32) -> BenchResult<()> {
        for d in 1..=DISTRICTS {
            let prefix = key(b'Q', &[w, d]);
            let head = self.scan(&prefix, &prefix, 1)?;
            let mine = *self.district(w, d);
            let expect = (mine.queue_head < mine.next_o).then_some(mine.queue_head);
            let got = head.first().map(|&(_, o)| o as u32);
            if got != expect {
                return Err(wrong(
                    &self.engine,
                    format!("new-order queue {w}/{d}: head {got:?}, the bench has {expect:?}"),
                ));
            }
            let Some(o) = got else { continue };
            self.delete(&key(b'Q', &[w, d, o]))?;
            self.district(w, d).queue_head = o + 1;
            let order = self.get(&key(b'O', &[w, d, o]))?;
            let k = key(b'O', &[w, d, o]);
            let v = self.next_version();
            self.put(&k, &row(&k, order, v, ORDER_LEN))?;
            let prefix = key(b'L', &[w, d, o]);
            for (k, item) in self.scan(&prefix, &prefix, 16)? {
                let v = self.next_version();
                self.put(&k, &row(&k, item, v, LINE_LEN))?;
            }
            let c = (order >> 8) as u32;
            self.update(&key(b'C', &[w, d, c]), CUSTOMER_LEN, |b| b.wrapping_add(1))?;
        }
        self.mix.delivery += 1;
        Ok(())
    }

    fn stock_level(&mut self, w: u32) -> BenchResult<()> {
        let d = self.rand(1, DISTRICTS);
        let next = self.read_district(w, d)?;
        let from = next.saturating_sub(20).max(1);
        let prefix = key(b'L', &[w, d]);
        let start = key(b'L', &[w, d, from]);
        let lines = self.scan(&prefix, &start, 20 * 15)?;
        let mut items: Vec<u32> = lines.iter().map(|&(_, i)| i as u32).collect();
        items.sort_unstable();
        items.dedup();
        for i in items {
            self.get(&key(b'S', &[w, i]))?;
        }
        self.mix.stock_level += 1;
        Ok(())
    }

    /// One transaction of TPC-C's mix.
    fn transaction(&mut self) -> BenchResult<()> {
        let w = self.rand(1, self.w);
        match self.rand(1, 100) {
            1..=45 => self.new_order(w),
            46..=88 => self.payment(w),
            89..=92 => self.order_status(w),
            93..=96 => self.delivery(w),
            _ => self.stock_level(w),
        }
    }
}

// ---- one engine, in the child ----------------------------------------------------------------

/// Figures at one point of the run, to take differences of.
struct Snapshot {
    own: crate::engine::OwnCounters,
    proc: Option<(ProcIo, u64)>,
    device: Option<(u64, u64)>,
}

/// Write system calls of this process (`syscw` of /proc/self/io).
fn write_calls() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The block device's sectors written × 512 and completed write requests.
fn device_counts(dev: &BlockDevice) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(&dev.source).ok()?;
    let f: Vec<u64> = if dev.diskstats {
        let line = text.lines().find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9 && f[0] == dev.major.to_string() && f[1] == dev.minor.to_string()
        })?;
        line.split_whitespace()
            .skip(3)
            .filter_map(|x| x.parse().ok())
            .collect()
    } else {
        text.split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect()
    };
    // reads merged sectors ticks writes merged sectors ...
    Some((f.get(6)? * 512, *f.get(4)?))
}

impl Snapshot {
    fn take(db: &dyn Engine, dir: &Path, dev: Option<&BlockDevice>) -> Snapshot {
        let _ = sync_tree(dir);
        Snapshot {
            own: db.counters(),
            proc: ProcIo::now().zip(write_calls()),
            device: dev.and_then(device_counts),
        }
    }

    /// What happened between `self` and `later`.
    fn until(&self, later: &Snapshot) -> WriteIo {
        let d = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        let idx = |s: &Snapshot, k: &str| s.own.index.get(k).copied();
        WriteIo {
            own_written: d(self.own.written, later.own.written),
            own_wal_written: d(self.own.wal_written, later.own.wal_written),
            own_index_write_bytes: d(
                idx(self, "io_index_write_bytes"),
                idx(later, "io_index_write_bytes"),
            ),
            own_index_writes: d(idx(self, "io_index_writes"), idx(later, "io_index_writes")),
            proc_written: match (&self.proc, &later.proc) {
                (Some((a, _)), Some((b, _))) => Some(a.net_written_until(b)),
                _ => None,
            },
            proc_write_calls: d(
                self.proc.as_ref().map(|p| p.1),
                later.proc.as_ref().map(|p| p.1),
            ),
            device_written: d(self.device.map(|x| x.0), later.device.map(|x| x.0)),
            device_writes: d(self.device.map(|x| x.1), later.device.map(|x| x.1)),
            index: later.own.index.clone(),
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Runs one engine through the load and the transactions, in this process.
pub fn run_one(spec: &TpccSpec, extra: ExtraEngines) -> BenchResult<TpccResult> {
    if spec.warehouses == 0 {
        return Err(BenchError::new("--tpcc-warehouses must be at least 1"));
    }
    std::fs::create_dir_all(&spec.dir)
        .map_err(|e| BenchError::new(format!("creating {}: {e}", spec.dir.display())))?;
    let dev = BlockDevice::of(&spec.dir).ok();
    let zero = Snapshot {
        own: crate::engine::OwnCounters {
            written: Some(0),
            wal_written: Some(0),
            index: [("io_index_write_bytes", 0), ("io_index_writes", 0)]
                .map(|(k, v)| (k.to_string(), v))
                .into(),
            ..Default::default()
        },
        proc: ProcIo::now().zip(write_calls()),
        device: dev.as_ref().and_then(device_counts),
    };
    let mut db = engine::open_with(&spec.engine, &spec.dir, &spec.config, extra)?;
    let version = db.version();
    let direct_io = db.direct_io();
    let t0 = Instant::now();
    let mut client = Client::new(db.as_ref(), spec);
    client.load()?;
    let loaded_bytes = client.user_bytes;
    let (mut client_state, rng) = (client.districts.clone(), client.rng.clone());
    drop(client);
    db.drain()?;
    let load_secs = t0.elapsed().as_secs_f64();
    let after_load = Snapshot::take(db.as_ref(), &spec.dir, dev.as_ref());
    let load_io = zero.until(&after_load);
    let _ = writeln!(
        std::io::stderr(),
        "  {} W={}: loaded {} in {load_secs:.1} s; transactions for {} s",
        spec.engine,
        spec.warehouses,
        report::bytes(loaded_bytes as f64),
        spec.secs
    );

    let u0 = Usage::now();
    let mut client = Client::new(db.as_ref(), spec);
    std::mem::swap(&mut client.districts, &mut client_state);
    client.rng = rng;
    let start = Instant::now();
    let run_start_unix = unix_now();
    let deadline = start + Duration::from_secs(spec.secs);
    let mut rec = Recorder::starting_at(start);
    let mut txns = 0u64;
    loop {
        let t = Instant::now();
        if t >= deadline || (spec.max_txns > 0 && txns >= spec.max_txns) {
            break;
        }
        client.transaction()?;
        rec.record(t, Instant::now());
        txns += 1;
    }
    let (mix, ops, checked, user_bytes) = (
        client.mix.clone(),
        client.ops,
        client.checked,
        client.user_bytes,
    );
    drop(client);
    db.drain()?;
    let end = Snapshot::take(db.as_ref(), &spec.dir, dev.as_ref());
    db.close()?;
    let secs = start.elapsed().as_secs_f64();
    let run_end_unix = unix_now();
    let closed = Snapshot {
        own: end.own.clone(),
        proc: ProcIo::now().zip(write_calls()),
        device: {
            let _ = sync_tree(&spec.dir);
            dev.as_ref().and_then(device_counts)
        },
    };
    let mut run_io = after_load.until(&closed);
    // The engine's counters end at the drain; its close writes a little more.
    run_io.index = end.own.index.clone();
    let u1 = Usage::now();
    let disk = disk_bytes(&spec.dir)
        .map_err(|e| BenchError::new(format!("measuring {}: {e}", spec.dir.display())))?;
    Ok(TpccResult {
        engine: spec.engine.clone(),
        version,
        warehouses: spec.warehouses,
        direct_io,
        loaded_bytes,
        load_secs,
        load_io,
        txns,
        new_orders_per_min: mix.new_order as f64 * 60.0 / secs.max(1e-9),
        mix,
        secs,
        txns_per_sec: txns as f64 / secs.max(1e-9),
        latency: rec.latency(),
        per_second: rec.per_second().to_vec(),
        ops,
        user_bytes,
        run_io,
        checked,
        disk_bytes: disk,
        cpu_secs: (u1.user + u1.system)
            .saturating_sub(u0.user + u0.system)
            .as_secs_f64(),
        peak_rss_bytes: u1.max_rss_bytes,
        run_start_unix,
        run_end_unix,
    })
}

/// The child: runs the spec (JSON) and prints the result as one JSON line; the exit status.
pub fn child_main(spec_json: &str, extra: ExtraEngines) -> u8 {
    let spec: TpccSpec = match serde_json::from_str(spec_json) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("woods bench: error: bad tpcc child spec: {e}");
            return 2;
        }
    };
    match run_one(&spec, extra) {
        Ok(r) => match serde_json::to_string(&r) {
            Ok(line) => {
                println!("{line}");
                0
            }
            Err(e) => {
                eprintln!("woods bench: error: {e}");
                2
            }
        },
        Err(e) => {
            eprintln!(
                "woods bench: error: {} W={}: {e}",
                spec.engine, spec.warehouses
            );
            1
        }
    }
}

// ---- the parent ------------------------------------------------------------------------------

/// The flag that makes a bench binary a tpcc child.
pub const CHILD_FLAG: &str = "--tpcc-child";

/// How the parent runs the engines.
pub struct ParentArgs<'a> {
    pub engines: Vec<String>,
    pub warehouses: u32,
    pub secs: u64,
    pub max_txns: u64,
    pub config: EngineConfig,
    pub seed: u64,
    pub dir: PathBuf,
    pub keep: bool,
    /// Directory for bench.json, summary.md and, with `trace`, the write traces and charts.
    pub out: Option<PathBuf>,
    pub json: Option<PathBuf>,
    /// Run each child under `strace` recording its writes (slow: for Figure 4 only).
    pub trace: bool,
    pub exe: &'a Path,
    pub prefix: &'a [std::ffi::OsString],
}

/// Runs every engine in a child of its own, prints the tables, writes the files; the exit
/// status.
pub fn run_parent(a: &ParentArgs) -> u8 {
    let mut results = Vec::new();
    if let Some(out) = &a.out {
        if let Err(e) = std::fs::create_dir_all(out) {
            eprintln!("woods bench: error: creating {}: {e}", out.display());
            return 2;
        }
    }
    for (n, engine) in a.engines.iter().enumerate() {
        let dir = a.dir.join(format!("{n}-{}", engine.replace(':', "-")));
        let _ = std::fs::remove_dir_all(&dir);
        let spec = TpccSpec {
            engine: engine.clone(),
            dir: dir.clone(),
            config: a.config.clone(),
            warehouses: a.warehouses,
            scale: Scale::default(),
            secs: a.secs,
            max_txns: a.max_txns,
            seed: a.seed,
        };
        let trace = a.out.as_ref().filter(|_| a.trace).map(|o| {
            o.join(format!(
                "trace-{}-w{}.txt",
                engine.replace(':', "-"),
                a.warehouses
            ))
        });
        match run_child(a, &spec, trace.as_deref()) {
            Ok(r) => {
                if let Some(t) = &trace {
                    if let Err(e) = draw_trace(t, &r, &dir) {
                        eprintln!("woods bench: trace of {engine}: {e}");
                    }
                }
                results.push(r);
            }
            Err(e) => {
                eprintln!("woods bench: error: {engine}: {e}");
                return 1;
            }
        }
        if !a.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let text = tables(&results, a);
    println!("{text}");
    let json = serde_json::to_string_pretty(&results).unwrap_or_default();
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    if let Some(j) = &a.json {
        files.push((j.clone(), json.clone()));
    }
    if let Some(o) = &a.out {
        files.push((o.join(format!("tpcc-w{}.json", a.warehouses)), json));
        files.push((o.join(format!("tpcc-w{}.md", a.warehouses)), text));
    }
    for (p, body) in files {
        if let Err(e) = std::fs::write(&p, body) {
            eprintln!("woods bench: error: writing {}: {e}", p.display());
            return 2;
        }
    }
    0
}

fn run_child(a: &ParentArgs, spec: &TpccSpec, trace: Option<&Path>) -> BenchResult<TpccResult> {
    let json = serde_json::to_string(spec).map_err(|e| BenchError::new(e.to_string()))?;
    let mut cmd = match trace {
        Some(t) => {
            let mut c = Command::new("strace");
            c.args([
                "-f",
                "-ttt",
                "-y",
                "-s",
                "0",
                "-e",
                "trace=pwrite64,pwritev,pwritev2",
            ])
            .arg("-o")
            .arg(t)
            .arg(a.exe);
            c
        }
        None => Command::new(a.exe),
    };
    cmd.env("MALLOC_ARENA_MAX", "2");
    let out = cmd
        .args(a.prefix)
        .arg(CHILD_FLAG)
        .arg(json)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| BenchError::new(format!("starting {}: {e}", a.exe.display())))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(BenchError::new(format!("child failed: {}", out.status)));
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| BenchError::new("the child printed no result line"))?;
    serde_json::from_str(line).map_err(|e| BenchError::new(format!("result line: {e}")))
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

fn pages(bytes: Option<u64>, n: Option<u64>) -> String {
    match (bytes, n) {
        (Some(b), Some(n)) if n > 0 => format!("{:.1}", b as f64 / 4096.0 / n as f64),
        _ => "-".into(),
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

/// The report: Table 1's and Table 2's shapes as markdown.
pub fn tables(results: &[TpccResult], a: &ParentArgs) -> String {
    let mut s = String::new();
    let loaded = results.first().map_or(0, |r| r.loaded_bytes);
    let split = a.config.split();
    s.push_str(&format!(
        "TPC-C-like, W = {} warehouses ({} loaded), budget {} (cache {}, write buffers 2 × {}), \
         direct I/O {}, {} s of transactions, seed {}\n\n",
        a.warehouses,
        report::bytes(loaded as f64),
        report::bytes(a.config.memory_bytes as f64),
        report::bytes(split.cache_bytes as f64),
        report::bytes(split.write_buffer_bytes as f64),
        if a.config.direct_io { "on" } else { "off" },
        a.secs,
        a.seed
    ));
    s.push_str(
        "| engine | txns | txns/s | new orders/min | p50 | p99 | max | disk | ratio txns/s |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let base = results.first().map_or(0.0, |r| r.txns_per_sec);
    for r in results {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} |\n",
            r.engine,
            r.txns,
            r.txns_per_sec,
            r.new_orders_per_min,
            report::ns(r.latency.p50_ns as f64),
            report::ns(r.latency.p99_ns as f64),
            report::ns(r.latency.max_ns as f64),
            report::bytes(r.disk_bytes as f64),
            ratio(r.txns_per_sec, base)
        ));
    }
    s.push_str(
        "\nWrite I/O of the transactions (drain and close included):\n\n\
         | engine | own bytes | own WAL bytes | index bytes | index writes | index pages/write \
         | proc bytes | proc write calls | proc KiB/call | device bytes | device writes \
         | device pages/write |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let io = &r.run_io;
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.engine,
            opt(io.own_written),
            opt(io.own_wal_written),
            opt(io.own_index_write_bytes),
            opt(io.own_index_writes),
            pages(io.own_index_write_bytes, io.own_index_writes),
            opt(io.proc_written),
            opt(io.proc_write_calls),
            match (io.proc_written, io.proc_write_calls) {
                (Some(b), Some(n)) if n > 0 => format!("{:.1}", b as f64 / 1024.0 / n as f64),
                _ => "-".into(),
            },
            opt(io.device_written),
            opt(io.device_writes),
            pages(io.device_written, io.device_writes),
        ));
    }
    s
}

// ---- Figure 4: the write trace -------------------------------------------------------------

/// One write of the trace: seconds since the run started, the file, page offset, pages.
struct TraceWrite {
    t: f64,
    file: String,
    page: u64,
    pages: u64,
}

/// Parses strace lines `PID 1700000000.123456 pwrite64(5</dir/data>, ""..., 262144, 4096) =
/// 262144` (pwritev: `pwritev(5</dir/data>, [...], 3, 4096)`).
fn parse_trace(text: &str, t0: f64, dir: &Path) -> Vec<TraceWrite> {
    // strace prints absolute paths; the engine's directory is named by its last component,
    // which the parent makes unique.
    let name = dir.file_name().map_or("".into(), |n| n.to_string_lossy());
    let inside = format!("/{name}/");
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(_pid), Some(ts)) = (f.next(), f.next()) else {
            continue;
        };
        let Ok(ts) = ts.parse::<f64>() else { continue };
        let Some(open) = line.find('<') else { continue };
        let Some(close) = line[open..].find('>') else {
            continue;
        };
        let file = &line[open + 1..open + close];
        if !file.contains(&inside) {
            continue;
        }
        let Some(eq) = line.rfind(") = ") else {
            continue;
        };
        let Ok(size) = line[eq + 4..].trim().parse::<u64>() else {
            continue;
        };
        let Some(comma) = line[..eq].rfind(", ") else {
            continue;
        };
        let Ok(off) = line[comma + 2..eq].trim().parse::<u64>() else {
            continue;
        };
        out.push(TraceWrite {
            t: ts - t0,
            file: file.rsplit('/').next().unwrap_or(file).to_string(),
            page: off / 4096,
            pages: size.div_ceil(4096),
        });
    }
    out
}

/// Draws Figure 4's shape for one engine: the page offset of every write to its largest data
/// file against time, over the transactions.
fn draw_trace(trace: &Path, r: &TpccResult, dir: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    let text = std::fs::read_to_string(trace).map_err(|e| e.to_string())?;
    let all = parse_trace(&text, r.run_start_unix, dir);
    let run_len = r.run_end_unix - r.run_start_unix;
    let writes: Vec<&TraceWrite> = all
        .iter()
        .filter(|w| w.t >= 0.0 && w.t <= run_len)
        .collect();
    // The file most written to: woods' data file, a RocksDB table the most.
    let mut by_file: std::collections::BTreeMap<&str, u64> = Default::default();
    for w in &writes {
        *by_file.entry(&w.file).or_default() += w.pages;
    }
    let Some((file, _)) = by_file.iter().max_by_key(|e| e.1) else {
        return Err("no writes under the engine's directory in the trace".into());
    };
    let pts: Vec<(f64, u64, u64)> = writes
        .iter()
        .filter(|w| w.file == *file)
        .map(|w| (w.t, w.page, w.pages))
        .collect();
    let n = pts.len() as u64;
    let total: u64 = pts.iter().map(|p| p.2).sum();
    let max_page = pts.iter().map(|p| p.1 + p.2).max().unwrap_or(1);
    let svg = trace.with_extension("svg");
    let root = SVGBackend::new(&svg, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let title = format!(
        "{} W={}: writes to {file} ({n} writes, {total} pages, {:.1} pages/write)",
        r.engine,
        r.warehouses,
        total as f64 / n.max(1) as f64
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..run_len.max(1e-3), 0u64..max_page + 1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds of the transactions")
        .y_desc("page offset written")
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(pts.iter().map(|&(t, p, len)| {
            // A write of several pages is a vertical bar over the pages it covers.
            PathElement::new(vec![(t, p), (t, p + len.max(1))], BLUE.stroke_width(2))
        }))
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    let summary = format!(
        "{} W={}: {n} writes to {file} during the transactions, {total} pages, {:.2} pages a \
         write; chart {}\n",
        r.engine,
        r.warehouses,
        total as f64 / n.max(1) as f64,
        svg.display()
    );
    eprint!("{summary}");
    std::fs::write(trace.with_extension("summary"), summary).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_in_primary_key_order() {
        assert!(key(b'L', &[1, 2, 9, 15]) < key(b'L', &[1, 2, 10, 1]));
        assert!(key(b'O', &[1, 10, 5]) < key(b'O', &[2, 1, 1]));
        // One name's customers lie together, in customer order.
        assert!(name_key(1, 1, 5, 1) < name_key(1, 1, 5, 300));
        assert!(name_key(1, 1, 5, 300).starts_with(&name_key(1, 1, 5, 1)[..25]));
        assert_eq!(last_name(371), "PRICALLYOUGHT---");
    }

    #[test]
    fn a_row_keeps_its_key_and_field() {
        let k = key(b'D', &[3, 7]);
        let v = row(&k, 3001, 9, DISTRICT_LEN);
        assert_eq!(v.len(), DISTRICT_LEN);
        assert!(v.starts_with(&k));
        assert_eq!(field(&k, &v), Some(3001));
    }

    #[test]
    fn strace_lines_parse() {
        let dir = Path::new("/tmp/b/0-woods-pbt");
        let text =
            "12 100.5 pwrite64(5</tmp/b/0-woods-pbt/data>, \"\"..., 262144, 1048576) = 262144\n\
                    12 100.6 pwrite64(6</tmp/b/0-woods-pbt/wal-1>, \"\"..., 100, 0) = 100\n\
                    12 100.7 pwrite64(7</elsewhere>, \"\"..., 4096, 0) = 4096\n";
        let w = parse_trace(text, 100.0, dir);
        assert_eq!(w.len(), 2);
        assert_eq!(
            (w[0].page, w[0].pages, w[0].file.as_str()),
            (256, 64, "data")
        );
        assert!((w[0].t - 0.5).abs() < 1e-9);
        assert_eq!(w[1].file, "wal-1");
    }

    /// A small run against woods' btree: every transaction type runs and every check passes.
    #[test]
    fn a_small_run_checks_every_answer() {
        let dir = std::env::temp_dir().join(format!("woods-tpcc-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spec = TpccSpec {
            engine: "woods:pbt".into(),
            dir: dir.clone(),
            config: EngineConfig::new(2 << 20, false),
            warehouses: 2,
            scale: Scale {
                customers_per_district: 30,
                items: 200,
                initial_orders_per_district: 30,
                initial_new_orders: 9,
                last_names: 10,
            },
            secs: 60,
            max_txns: 1500,
            seed: 3,
        };
        let r = run_one(&spec, &[]).expect("run");
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(r.txns, 1500);
        let m = &r.mix;
        assert!(m.new_order > 0 && m.payment > 0 && m.order_status > 0);
        assert!(m.delivery > 0 && m.stock_level > 0);
        assert!(r.checked > r.txns);
        assert!(r.run_io.own_index_writes.is_some_and(|n| n > 0));
    }
}
