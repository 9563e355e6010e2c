//! The byte layout of run pages (specified in `docs/format-run.md`) and the bounds-checked
//! decoding of them. Nothing here panics on page contents: every malformed field is
//! `Error::Corruption` naming the page.

use crate::cache::PageRef;
use crate::entry::codec::{self, Reader};
use crate::entry::Kind;
use crate::error::{Error, Result};
use crate::storage::{PAGE_BODY, PAGE_SIZE};
use std::cmp::Ordering;

/// Page type byte of a data (leaf) page.
pub const PAGE_DATA: u8 = 1;
/// Page type byte of an index page.
pub const PAGE_INDEX: u8 = 2;
/// Page type byte of a blob page (part of an out-of-line value).
pub const PAGE_BLOB: u8 = 3;
/// Page type byte of a filter page.
pub const PAGE_FILTER: u8 = 4;
/// Page type byte of the run header page.
pub const PAGE_HEADER: u8 = 5;

/// Bytes of the common page header: type u8, level u8, count u16, aux u32.
pub const HEADER_LEN: usize = 8;
/// Payload bytes of a blob or filter page.
pub const PAYLOAD: usize = PAGE_BODY - HEADER_LEN;

/// Largest encoded data or index entry: three of them (with their offsets) fit in one page.
pub const MAX_ITEM: usize = (PAGE_BODY - HEADER_LEN - 2 * 4) / 3;

/// Flag in a data entry's kind byte: the value is a blob reference.
pub const BLOB_FLAG: u8 = 0x80;
/// Flag in a data item's kind byte: the item is a fence (FD-tree, `specs/fdtree.md` §3.2), not
/// an entry. The low bits give its class ([`FENCE_EXTERNAL`] or [`FENCE_INTERNAL`]); a seq,
/// a key and the u64 page number it points to follow.
pub const FENCE_FLAG: u8 = 0x40;
/// Fence class: an external fence (its key is the first key of the page it points to).
pub const FENCE_EXTERNAL: u8 = 0;
/// Fence class: an internal fence (at slot 0 only, with the key of the entry after it).
pub const FENCE_INTERNAL: u8 = 1;
/// Data page header `aux` bit: the page's first entry has the key of the previous data page's
/// last entry (a key's versions continue from the page before; `specs/fdtree.md` pitfall 3).
pub const AUX_CONT_PREV: u32 = 1;
/// Data page header `aux` bit: after the page's last item lie the first bytes of the value of
/// the next data page's first item (a split item, [`SPLIT_FLAG`]); their count is `aux >> 16`.
pub const AUX_SPILL: u32 = 2;
/// Flag in a data entry's kind byte (with [`BLOB_FLAG`] and [`FENCE_FLAG`] clear): the value is
/// split. Its first bytes lie after the last item of the data page before (that page's spill,
/// [`AUX_SPILL`]); the item holds that page's number, how many bytes lie there, and the rest
/// of the value. Items of about a quarter of a page would otherwise leave up to a quarter of
/// every page empty (three 1,054-byte items fill 77% of a page).
pub const SPLIT_FLAG: u8 = 0x20;
/// Least free room at the end of a data page, and least value, for the builder to fill that
/// room with the start of the next item's value instead of leaving it empty: below either the
/// page is left as it is, and no read of that item pays for a second page.
pub const SPLIT_MIN_ROOM: usize = 256;

/// Magic at the start of the run header page's payload.
pub const MAGIC: &[u8; 8] = b"WOODSRUN";
/// Format major version of runs written by this build.
pub const FORMAT_MAJOR: u16 = 1;
/// Format minor version of runs written by this build: 1 since split items ([`SPLIT_FLAG`]),
/// which a build of minor 0 reads as a corrupt entry kind.
pub const FORMAT_MINOR: u16 = 1;

/// Root page recorded in the header of an empty run (it has no tree).
pub const NO_ROOT: u64 = u64::MAX;

/// Sets a corruption error's page when the error does not name one yet.
pub fn at_page(e: Error, page: u64) -> Error {
    match e {
        Error::Corruption {
            what,
            page: None,
            detail,
        } => Error::Corruption {
            what,
            page: Some(page),
            detail,
        },
        other => other,
    }
}

/// A corruption error in a run page.
pub fn corrupt(page: u64, detail: impl Into<String>) -> Error {
    Error::corruption("run", Some(page), detail)
}

/// Writes the common page header into `body`.
pub fn put_header(body: &mut [u8], ty: u8, level: u8, count: u16, aux: u32) {
    body[0] = ty;
    body[1] = level;
    body[2..4].copy_from_slice(&count.to_le_bytes());
    body[4..8].copy_from_slice(&aux.to_le_bytes());
}

/// The common page header of a page read from disk.
#[derive(Clone, Copy, Debug)]
pub struct PageHeader {
    /// Page type byte.
    pub ty: u8,
    /// Tree level (0 for data pages).
    pub level: u8,
    /// Items in the page.
    pub count: u16,
    /// Type-specific: payload bytes of blob and filter pages.
    pub aux: u32,
}

/// Reads the common header, checking the page type.
pub fn header(page: u64, buf: &[u8], want: u8) -> Result<PageHeader> {
    let b = buf
        .get(..HEADER_LEN)
        .ok_or_else(|| corrupt(page, "page shorter than its header"))?;
    let h = PageHeader {
        ty: b[0],
        level: b[1],
        count: u16::from_le_bytes([b[2], b[3]]),
        aux: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
    };
    if h.ty != want {
        return Err(corrupt(
            page,
            format!("page type {} where type {want} was expected", h.ty),
        ));
    }
    Ok(h)
}

/// Builds slotted (data or index) pages: items with a u16 offset array.
#[derive(Default)]
pub struct SlottedPage {
    /// Encoded items, back to back.
    pub items: Vec<u8>,
    /// Start of each item within `items`.
    pub starts: Vec<u16>,
}

impl SlottedPage {
    /// Whether an item of `len` more bytes still fits.
    pub fn fits(&self, len: usize) -> bool {
        HEADER_LEN + 2 * (self.starts.len() + 2) + self.items.len() + len <= PAGE_BODY
    }

    /// Items so far.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Bytes the page's header, offset array and items take when written as they are.
    fn used(&self) -> usize {
        HEADER_LEN + 2 * (self.starts.len() + 1) + self.items.len()
    }

    /// Bytes free after the items when no item is added: what a spill can fill.
    pub fn room(&self) -> usize {
        PAGE_BODY.saturating_sub(self.used())
    }

    /// Appends one encoded item (the caller checked `fits`).
    pub fn push(&mut self, item: &[u8]) {
        self.starts.push(self.items.len() as u16);
        self.items.extend_from_slice(item);
    }

    /// Lays the page out into `body` (at least `PAGE_BODY` bytes, zeroed) and empties self.
    pub fn write_into(&mut self, body: &mut [u8], ty: u8, level: u8) {
        self.write_with_aux(body, ty, level, 0)
    }

    /// [`SlottedPage::write_with_aux`] of a data page followed by `spill` (at most
    /// [`SlottedPage::room`] bytes, at most `u16::MAX`): the first bytes of the next page's
    /// first value, recorded in `aux` ([`AUX_SPILL`], the count in its high 16 bits).
    pub fn write_with_spill(&mut self, body: &mut [u8], aux: u32, spill: &[u8]) {
        let end = self.used();
        let aux = if spill.is_empty() {
            aux
        } else {
            aux | AUX_SPILL | (spill.len() as u32) << 16
        };
        self.write_with_aux(body, PAGE_DATA, 0, aux);
        body[end..end + spill.len()].copy_from_slice(spill);
    }

    /// [`SlottedPage::write_into`] with the header's `aux` field set.
    pub fn write_with_aux(&mut self, body: &mut [u8], ty: u8, level: u8, aux: u32) {
        let n = self.starts.len();
        put_header(body, ty, level, n as u16, aux);
        let base = HEADER_LEN + 2 * (n + 1);
        for (i, s) in self
            .starts
            .iter()
            .chain(std::iter::once(&(self.items.len() as u16)))
            .enumerate()
        {
            let off = (base + *s as usize) as u16;
            body[HEADER_LEN + 2 * i..HEADER_LEN + 2 * i + 2].copy_from_slice(&off.to_le_bytes());
        }
        body[base..base + self.items.len()].copy_from_slice(&self.items);
        self.items.clear();
        self.starts.clear();
    }
}

/// Encodes one data entry whose value is stored inline.
pub fn encode_data_inline(out: &mut Vec<u8>, kind: Kind, seq: u64, key: &[u8], value: &[u8]) {
    out.push(kind as u8);
    codec::put_varint(out, seq);
    codec::put_bytes(out, key);
    codec::put_bytes(out, value);
}

/// Encodes one data entry whose value is split: its first `head` bytes are the spill of data
/// page `head_page` (the page before), `rest` the others.
pub fn encode_data_split(
    out: &mut Vec<u8>,
    kind: Kind,
    seq: u64,
    key: &[u8],
    head_page: u64,
    head: usize,
    rest: &[u8],
) {
    out.push(kind as u8 | SPLIT_FLAG);
    codec::put_varint(out, seq);
    codec::put_bytes(out, key);
    codec::put_u64(out, head_page);
    codec::put_varint(out, head as u64);
    codec::put_bytes(out, rest);
}

/// Encodes one fence item: `FENCE_FLAG | class`, seq, key, the page it points to.
pub fn encode_fence(out: &mut Vec<u8>, internal: bool, seq: u64, key: &[u8], pid: u64) {
    out.push(
        FENCE_FLAG
            | if internal {
                FENCE_INTERNAL
            } else {
                FENCE_EXTERNAL
            },
    );
    codec::put_varint(out, seq);
    codec::put_bytes(out, key);
    codec::put_u64(out, pid);
}

/// Encodes one data entry whose value lives in blob pages starting at `blob_page`.
pub fn encode_data_blob(
    out: &mut Vec<u8>,
    kind: Kind,
    seq: u64,
    key: &[u8],
    blob_page: u64,
    len: u32,
) {
    out.push(kind as u8 | BLOB_FLAG);
    codec::put_varint(out, seq);
    codec::put_bytes(out, key);
    codec::put_u64(out, blob_page);
    codec::put_u32(out, len);
}

/// One index entry: a child's separator and its subtree totals. The separator (key, seq)
/// orders at or before the child's first entry and after every entry of the children before
/// it: the child's first entry, or a shortened key (a prefix of it) with seq `u64::MAX`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexItem {
    /// Separator key.
    pub key: Vec<u8>,
    /// Separator seq.
    pub seq: u64,
    /// The child page.
    pub child: u64,
    /// Entries in the child's subtree.
    pub entries: u64,
    /// User bytes (key + value lengths) in the child's subtree.
    pub bytes: u64,
}

impl IndexItem {
    /// Encodes the item as an index page stores it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        codec::put_varint(out, self.seq);
        codec::put_bytes(out, &self.key);
        codec::put_u64(out, self.child);
        codec::put_varint(out, self.entries);
        codec::put_varint(out, self.bytes);
    }
}

/// A value as a data entry holds it.
#[derive(Clone, Copy, Debug)]
pub enum ValueRef<'a> {
    /// Stored in the entry.
    Inline(&'a [u8]),
    /// Stored in blob pages starting at `page`, `len` bytes.
    Blob { page: u64, len: u32 },
    /// Split: the first `head` bytes are the spill of data page `page` (the data page before
    /// the item's), `rest` follows them.
    Split {
        page: u64,
        head: usize,
        rest: &'a [u8],
    },
}

/// What makes a data item a fence: its class and the page it points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence {
    /// An internal fence (at a page's slot 0) rather than an external one.
    pub internal: bool,
    /// The page of the next lower level it points to.
    pub pid: u64,
}

/// A decoded data entry (or fence) borrowing the page.
#[derive(Clone, Copy, Debug)]
pub struct DataItem<'a> {
    /// `Some` for a fence item (whose kind is `Put` and value empty, both meaningless).
    pub fence: Option<Fence>,
    /// Entry kind.
    pub kind: Kind,
    /// Sequence number.
    pub seq: u64,
    /// User key.
    pub key: &'a [u8],
    /// The value or where it is.
    pub value: ValueRef<'a>,
}

impl DataItem<'_> {
    /// Length of the value in bytes.
    pub fn value_len(&self) -> u64 {
        match self.value {
            ValueRef::Inline(v) => v.len() as u64,
            ValueRef::Blob { len, .. } => u64::from(len),
            ValueRef::Split { head, rest, .. } => (head + rest.len()) as u64,
        }
    }
}

fn decode_data<'b>(r: &mut Reader<'b>, page: u64, i: usize) -> Result<DataItem<'b>> {
    let b = r.u8()?;
    if b & FENCE_FLAG != 0 && b & BLOB_FLAG == 0 {
        let class = b & !FENCE_FLAG;
        if class > FENCE_INTERNAL {
            return Err(corrupt(
                page,
                format!("entry {i} is a fence of class {class}"),
            ));
        }
        let seq = r.varint()?;
        let key = r.bytes()?;
        let pid = r.u64()?;
        if !r.is_empty() {
            return Err(corrupt(
                page,
                format!("{} stray bytes after fence {i}", r.remaining()),
            ));
        }
        return Ok(DataItem {
            fence: Some(Fence {
                internal: class == FENCE_INTERNAL,
                pid,
            }),
            kind: Kind::Put,
            seq,
            key,
            value: ValueRef::Inline(&[]),
        });
    }
    if b & BLOB_FLAG != 0 && b & SPLIT_FLAG != 0 {
        return Err(corrupt(
            page,
            format!("entry {i} is marked both blob and split"),
        ));
    }
    let kind = Kind::from_u8(b & !(BLOB_FLAG | SPLIT_FLAG))?;
    let seq = r.varint()?;
    let key = r.bytes()?;
    let value = if b & BLOB_FLAG != 0 {
        ValueRef::Blob {
            page: r.u64()?,
            len: r.u32()?,
        }
    } else if b & SPLIT_FLAG != 0 {
        let head_page = r.u64()?;
        let head = r.varint()?;
        if head == 0 || head > PAGE_BODY as u64 {
            return Err(corrupt(
                page,
                format!("entry {i} is split with {head} bytes on the page before"),
            ));
        }
        ValueRef::Split {
            page: head_page,
            head: head as usize,
            rest: r.bytes()?,
        }
    } else {
        ValueRef::Inline(r.bytes()?)
    };
    if !r.is_empty() {
        return Err(corrupt(
            page,
            format!("{} stray bytes after entry {i}", r.remaining()),
        ));
    }
    Ok(DataItem {
        fence: None,
        kind,
        seq,
        key,
        value,
    })
}

/// Moves `r` past a varint without decoding it: the first byte without the continuation bit
/// is found in one eight-byte word (bytes 9 and 10 of the longest varints looked at after it).
/// A varint of more than ten bytes is corruption, as [`Reader::varint`] finds it.
#[inline]
fn skip_varint(r: &mut Reader<'_>) -> Result<()> {
    let rest = r.buf.get(r.pos..).unwrap_or_default();
    let len = match rest.get(..8) {
        Some(w) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            let stops = !u64::from_le_bytes(a) & 0x8080_8080_8080_8080;
            if stops != 0 {
                Some(stops.trailing_zeros() as usize / 8 + 1)
            } else {
                rest[8..]
                    .iter()
                    .take(2)
                    .position(|&b| b < 0x80)
                    .map(|p| 9 + p)
            }
        }
        None => rest.iter().position(|&b| b < 0x80).map(|p| p + 1),
    };
    match len {
        Some(n) => {
            r.pos += n;
            Ok(())
        }
        // Decoding reports the truncation or overlength with the reader's own error.
        None => r.varint().map(|_| ()),
    }
}

/// The key of item `i` of a slotted page (`i` below its count), by the common shape only: both
/// offsets inside the body and after the offset array (which ends at `array_end`), a seq varint
/// of at most ten bytes after `skip` bytes (a data item's kind), a key of fewer than 128 bytes
/// (one length byte). `None` for anything else; [`Node::cmp_item`] then decodes the item in full
/// and reports what is wrong, if anything is. The key is found without decoding the seq: the
/// varint's last byte is the first without the continuation bit in an eight-byte word.
#[inline]
fn probe_key(page: &[u8], array_end: usize, i: usize, skip: usize) -> Option<&[u8]> {
    let p = HEADER_LEN + 2 * i;
    let w = page.get(p..p + 4)?;
    let start = usize::from(u16::from_le_bytes([w[0], w[1]]));
    let end = usize::from(u16::from_le_bytes([w[2], w[3]]));
    if start < array_end || start > end || end > PAGE_BODY {
        return None;
    }
    let item = page.get(start + skip..end)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(item.get(..8)?);
    let stops = !u64::from_le_bytes(word) & 0x8080_8080_8080_8080;
    let n = if stops != 0 {
        stops.trailing_zeros() as usize / 8 + 1
    } else if *item.get(8)? < 0x80 {
        9
    } else if *item.get(9)? < 0x80 {
        10
    } else {
        return None;
    };
    let len = *item.get(n)?;
    if len >= 0x80 {
        return None;
    }
    item.get(n + 1..n + 1 + usize::from(len))
}

/// A parsed slotted page (data or index), shared through the cache.
#[derive(Clone)]
pub struct Node {
    /// Page number.
    pub page: u64,
    /// The buffer holding the page: the page itself, or a read-ahead window the page lies in
    /// at byte `off` (shared, not copied, by the window's pages).
    buf: PageRef,
    off: usize,
    /// Tree level: 0 for data pages.
    pub level: u8,
    /// Number of items (at least one).
    pub count: usize,
    /// The header's `aux` field (data pages: [`AUX_CONT_PREV`]).
    pub aux: u32,
}

impl Node {
    /// Parses and validates the header of a data (`level == 0`) or index page at `level`, and
    /// that its offset array fits the page (its entries are checked as items are read).
    pub fn parse(page: u64, buf: PageRef, level: u8) -> Result<Node> {
        Node::parse_at(page, buf, 0, level)
    }

    /// [`Node::parse`] of the page at byte `off` of `buf` (a whole page must lie there).
    pub fn parse_at(page: u64, buf: PageRef, off: usize, level: u8) -> Result<Node> {
        if buf.len() < off + PAGE_SIZE {
            return Err(corrupt(page, "page lies past the end of its buffer"));
        }
        let want = if level == 0 { PAGE_DATA } else { PAGE_INDEX };
        let h = header(page, &buf[off..off + PAGE_SIZE], want)?;
        if h.level != level {
            return Err(corrupt(
                page,
                format!("page at level {} where level {level} was expected", h.level),
            ));
        }
        let count = h.count as usize;
        if count == 0 {
            return Err(corrupt(page, "page holds no entries"));
        }
        let base = HEADER_LEN + 2 * (count + 1);
        if base > PAGE_BODY {
            return Err(corrupt(
                page,
                format!("offset array of {count} entries overflows the page"),
            ));
        }
        Ok(Node {
            page,
            buf,
            off,
            level,
            count,
            aux: h.aux,
        })
    }

    /// Checks the whole offset array: ascending, past the array, within the body. A lookup
    /// does not pay for this (it parses pages on every visit, cache hits included): each item
    /// it reads checks its own two offsets ([`Node::item`]); `check` calls this for every page.
    pub fn validate_offsets(&self) -> Result<()> {
        let mut prev = self.array_end();
        for i in 0..=self.count {
            let off = self.offset(i);
            if off < prev || off > PAGE_BODY {
                return Err(corrupt(
                    self.page,
                    format!("entry offset {i} ({off}) out of order or out of the page"),
                ));
            }
            prev = off;
        }
        Ok(())
    }

    /// The page's bytes.
    fn bytes(&self) -> &[u8] {
        &self.buf[self.off..self.off + PAGE_SIZE]
    }

    /// Where the offset array ends and the items begin.
    fn array_end(&self) -> usize {
        HEADER_LEN + 2 * (self.count + 1)
    }

    /// Offset `i` of the array (`i <= count`, which `parse_at` keeps inside the body).
    fn offset(&self, i: usize) -> usize {
        let p = self.off + HEADER_LEN + 2 * i;
        u16::from_le_bytes([self.buf[p], self.buf[p + 1]]) as usize
    }

    /// The bytes of item `i` (`i < count`): between its offset and the next, past the offset
    /// array and inside the body, or a corruption error.
    fn item(&self, i: usize) -> Result<&[u8]> {
        if i < self.count {
            let (start, end) = (self.offset(i), self.offset(i + 1));
            if start >= self.array_end() && start <= end && end <= PAGE_BODY {
                return Ok(&self.bytes()[start..end]);
            }
        }
        Err(self.bad_item(i))
    }

    /// What is wrong with item `i`, which [`Node::item`] refused.
    #[cold]
    #[inline(never)]
    fn bad_item(&self, i: usize) -> Error {
        if i >= self.count {
            return corrupt(self.page, format!("entry {i} of {}", self.count));
        }
        let (start, end) = (self.offset(i), self.offset(i + 1));
        corrupt(
            self.page,
            format!("entry {i} at offsets {start}..{end} lies out of the page"),
        )
    }

    /// How item `i` (data or index) orders against `(key, seq)` in entry order: its key is
    /// compared first and its seq decoded only when the keys are equal. The binary searches
    /// call this: an index page's shortened separators carry seq `u64::MAX`, a ten-byte varint
    /// that decoding on every probe made the largest share of a lookup's instructions.
    fn cmp_item(&self, i: usize, key: &[u8], seq: u64) -> Result<Ordering> {
        let mut r = Reader::new(self.item(i)?, "run page");
        let inner = |r: &mut Reader<'_>| -> Result<Ordering> {
            if self.level == 0 {
                r.u8()?;
            }
            let seq_at = r.pos;
            skip_varint(r)?;
            match r.bytes()?.cmp(key) {
                Ordering::Equal => {
                    r.pos = seq_at;
                    Ok(seq.cmp(&r.varint()?))
                }
                o => Ok(o),
            }
        };
        inner(&mut r).map_err(|e| at_page(e, self.page))
    }

    /// The key and seq of item `i` (data or index).
    pub fn key_seq(&self, i: usize) -> Result<(&[u8], u64)> {
        let mut r = Reader::new(self.item(i)?, "run page");
        if self.level == 0 {
            r.u8().map_err(|e| at_page(e, self.page))?;
        }
        let seq = r.varint().map_err(|e| at_page(e, self.page))?;
        let key = r.bytes().map_err(|e| at_page(e, self.page))?;
        Ok((key, seq))
    }

    /// The spill of a data page ([`AUX_SPILL`]): the bytes after its last item that begin the
    /// next data page's first value; empty when it has none.
    pub fn spill(&self) -> Result<&[u8]> {
        if self.level != 0 || self.aux & AUX_SPILL == 0 {
            return Ok(&[]);
        }
        let len = (self.aux >> 16) as usize;
        let start = self.offset(self.count);
        if start < self.array_end() || start + len > PAGE_BODY || len == 0 {
            return Err(corrupt(
                self.page,
                format!("a spill of {len} bytes from offset {start} lies out of the page"),
            ));
        }
        Ok(&self.bytes()[start..start + len])
    }

    /// Decodes data item `i`.
    pub fn data(&self, i: usize) -> Result<DataItem<'_>> {
        let page = self.page;
        let mut r = Reader::new(self.item(i)?, "run data page");
        decode_data(&mut r, page, i).map_err(|e| at_page(e, page))
    }

    /// Decodes index item `i`.
    pub fn index(&self, i: usize) -> Result<IndexItem> {
        let page = self.page;
        let mut r = Reader::new(self.item(i)?, "run index page");
        let inner = |r: &mut Reader<'_>| -> Result<IndexItem> {
            let seq = r.varint()?;
            let key = r.bytes()?.to_vec();
            let child = r.u64()?;
            let entries = r.varint()?;
            let bytes = r.varint()?;
            if !r.is_empty() {
                return Err(corrupt(
                    page,
                    format!("{} stray bytes after index entry {i}", r.remaining()),
                ));
            }
            Ok(IndexItem {
                key,
                seq,
                child,
                entries,
                bytes,
            })
        };
        inner(&mut r).map_err(|e| at_page(e, page))
    }

    /// The child page of index item `i`, decoded without copying its separator (a lookup
    /// calls this once per index page it passes). The fields after the child are not read
    /// here; [`Node::index`] (which `check` calls on every item) validates them.
    pub fn child(&self, i: usize) -> Result<u64> {
        let mut r = Reader::new(self.item(i)?, "run index page");
        let inner = |r: &mut Reader<'_>| -> Result<u64> {
            skip_varint(r)?;
            r.bytes()?;
            r.u64()
        };
        inner(&mut r).map_err(|e| at_page(e, self.page))
    }

    /// Number of items whose (key, seq) orders before `(key, seq)`: the lower bound.
    pub fn lower_bound(&self, key: &[u8], seq: u64) -> Result<usize> {
        self.search(key, seq, |o| o == Ordering::Less)
    }

    /// Number of items whose (key, seq) orders at or before `(key, seq)`.
    pub fn upper_bound(&self, key: &[u8], seq: u64) -> Result<usize> {
        self.search(key, seq, |o| o != Ordering::Greater)
    }

    /// The binary search of both bounds: the number of leading items for which `before` holds
    /// of their order against `(key, seq)`. Each probe takes [`probe_key`]'s fast path and
    /// falls back to [`Node::cmp_item`] (equal keys, long keys, or anything malformed, which it
    /// reports).
    fn search(&self, key: &[u8], seq: u64, before: impl Fn(Ordering) -> bool) -> Result<usize> {
        let page = self.bytes();
        let (array_end, kind_byte) = (self.array_end(), usize::from(self.level == 0));
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let o = match probe_key(page, array_end, mid, kind_byte).map(|k| k.cmp(key)) {
                Some(o) if o != Ordering::Equal => o,
                _ => self.cmp_item(mid, key, seq)?,
            };
            if before(o) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }
}
