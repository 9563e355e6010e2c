//! What `woods stress` writes: keys and values that describe themselves, so that any read can
//! be checked alone, and the merge operator whose fold the expected state models.
//!
//! A key's state is a `u32`: the number of writes made to it (its version) in the low 31 bits,
//! and [`DELETED`] when its last write deleted it. State 0 is a key never written. Every write
//! to a key (put, merge or delete, alone or in a batch) advances its version by one, so the
//! value of version `v` of key `id` is a pure function of `(id, v)`: [`value`].

use crate::gen::splitmix64;
use woods::MergeOperator;

/// The flag of a state whose last write was a delete.
pub const DELETED: u32 = 1 << 31;

/// The name of the merge operator, persisted in the database.
pub const MERGE_OPERATOR: &str = "woods-stress";

/// The version part of a state.
pub fn version(state: u32) -> u32 {
    state & !DELETED
}

/// Whether a key in `state` has no value (never written, or deleted).
pub fn absent(state: u32) -> bool {
    state == 0 || state & DELETED != 0
}

/// What a read of a key in `state` returns: its version, or `None` when absent.
pub fn visible(state: u32) -> Option<u32> {
    (!absent(state)).then_some(version(state))
}

/// Words for a state in messages.
pub fn describe(state: u32) -> String {
    match state {
        0 => "never written".into(),
        s if s & DELETED != 0 => format!("deleted at version {}", version(s)),
        s => format!("version {s}"),
    }
}

fn key_filler(id: u32) -> usize {
    (splitmix64(u64::from(id) ^ 0x6b65_7973) % 12) as usize
}

/// The key of record `id`: its big-endian number (so keys sort as ids), then 0 to 11 filler
/// bytes that vary the key length.
pub fn key(id: u32) -> Vec<u8> {
    let mut k = id.to_be_bytes().to_vec();
    let n = key_filler(id);
    k.extend((0..n).map(|i| b'a' + ((u64::from(id) + i as u64) % 26) as u8));
    k
}

/// The id of a key written by [`key`], or `None` for any other byte string.
pub fn key_id(k: &[u8]) -> Option<u32> {
    let id = u32::from_be_bytes(k.get(..4)?.try_into().ok()?);
    (key(id) == k).then_some(id)
}

const VALUE_MAGIC: u8 = 0xa5;
const OPERAND_MAGIC: u8 = 0xb7;
/// Bytes of a value before its payload: magic, flags, key id, version, detail.
const HEADER: usize = 1 + 1 + 4 + 4 + 4;
/// The largest payload; eight such values in a batch stay well under half of the smallest
/// memtable `woods stress` accepts (64 KiB).
pub const MAX_PAYLOAD: usize = 3000;

/// Flags of a value a broken fold made (zero in a value written by the stress writers).
const BROKEN_VERSION: u8 = 1;
const BROKEN_BASE: u8 = 2;
const BROKEN_OPERAND: u8 = 3;

fn fnv1a32(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ u32::from(x)).wrapping_mul(0x0100_0193)
    })
}

fn payload_len(h: u64) -> usize {
    // One value in 64 is long (up to MAX_PAYLOAD, across page boundaries); the rest 0..200.
    if h.is_multiple_of(64) {
        200 + ((h >> 8) % (MAX_PAYLOAD as u64 - 199)) as usize
    } else {
        ((h >> 8) % 200) as usize
    }
}

fn encode(flags: u8, id: u32, version: u32, detail: u32, payload_seed: Option<u64>) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + 4 + 200);
    v.push(VALUE_MAGIC);
    v.push(flags);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&detail.to_le_bytes());
    if let Some(h) = payload_seed {
        let mut x = h;
        for _ in 0..payload_len(h) {
            x = splitmix64(x);
            v.push(x as u8);
        }
    }
    let c = fnv1a32(&v);
    v.extend_from_slice(&c.to_le_bytes());
    v
}

fn payload_seed(id: u32, version: u32) -> u64 {
    splitmix64((u64::from(id) << 32 | u64::from(version)) ^ 0x7374_7265_7373)
}

/// The value of version `version` (> 0) of key `id`.
pub fn value(id: u32, version: u32) -> Vec<u8> {
    encode(0, id, version, 0, Some(payload_seed(id, version)))
}

/// The version a value of key `id` holds, or what is wrong with it.
pub fn decode(id: u32, v: &[u8]) -> Result<u32, String> {
    if v.len() < HEADER + 4 || v[0] != VALUE_MAGIC {
        return Err(format!("not a stress value ({} bytes)", v.len()));
    }
    let (body, sum) = v.split_at(v.len() - 4);
    if fnv1a32(body) != u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]) {
        return Err(format!("checksum mismatch ({} bytes)", v.len()));
    }
    let word = |at: usize| u32::from_le_bytes([v[at], v[at + 1], v[at + 2], v[at + 3]]);
    let (flags, vid, ver, detail) = (v[1], word(2), word(6), word(10));
    if vid != id {
        return Err(format!("value of key {vid} stored under key {id}"));
    }
    match flags {
        0 => {}
        BROKEN_VERSION => {
            return Err(format!(
                "a merge fold found version {ver} where its operand expected {}",
                describe(detail)
            ))
        }
        BROKEN_BASE => return Err("a merge fold found an undecodable base value".into()),
        BROKEN_OPERAND => return Err("a merge fold found an undecodable operand".into()),
        f => return Err(format!("unknown flags {f}")),
    }
    if ver == 0 || ver & DELETED != 0 {
        return Err(format!("impossible version {ver}"));
    }
    if v != value(id, ver) {
        return Err(format!(
            "version {ver}: payload differs from the one written"
        ));
    }
    Ok(ver)
}

/// A merge operand taking a key from state `from` (0 for absent) to version `to`.
pub fn operand(from: Option<u32>, to: u32) -> Vec<u8> {
    let mut v = vec![OPERAND_MAGIC];
    v.extend_from_slice(&from.unwrap_or(0).to_le_bytes());
    v.extend_from_slice(&to.to_le_bytes());
    v
}

fn decode_operand(o: &[u8]) -> Option<(u32, u32)> {
    if o.len() != 9 || o[0] != OPERAND_MAGIC {
        return None;
    }
    let w = |at: usize| u32::from_le_bytes([o[at], o[at + 1], o[at + 2], o[at + 3]]);
    Some((w(1), w(5)))
}

/// The stress merge operator: each operand says which version it expects the key at (0:
/// absent) and which version it makes; the fold checks the chain from the base through every
/// operand, in order, and yields [`value`] of the last version. A fold that finds the chain
/// broken (an operand lost, applied twice or out of order, a wrong base) yields a value flagged
/// as broken, which every read reports.
pub struct StressMerge;

impl MergeOperator for StressMerge {
    fn name(&self) -> &str {
        MERGE_OPERATOR
    }

    fn full_merge(&self, key: &[u8], base: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
        let id = key_id(key).unwrap_or(u32::MAX);
        let mut cur = match base.map(|b| decode(id, b)) {
            None => 0,
            Some(Ok(v)) => v,
            Some(Err(_)) => return encode(BROKEN_BASE, id, 0, 0, None),
        };
        for o in operands {
            match decode_operand(o) {
                Some((from, to)) if from == cur => cur = to,
                Some((from, _)) => return encode(BROKEN_VERSION, id, cur, from, None),
                None => return encode(BROKEN_OPERAND, id, cur, 0, None),
            }
        }
        value(id, cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_as_ids_and_decode_back() {
        let keys: Vec<Vec<u8>> = (0..2000).map(key).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        for (id, k) in keys.iter().enumerate() {
            assert_eq!(key_id(k), Some(id as u32));
        }
        assert_eq!(key_id(b"abc"), None);
        let mut k = key(7);
        k.push(b'z');
        assert_eq!(key_id(&k), None);
    }

    #[test]
    fn values_validate_alone_and_catch_any_change() {
        for id in [0, 1, 99] {
            for ver in 1..200 {
                let v = value(id, ver);
                assert_eq!(decode(id, &v), Ok(ver));
                assert!(decode(id + 1, &v).is_err(), "a value under another key");
                let mut bad = v.clone();
                let at = (ver as usize * 7) % bad.len();
                bad[at] ^= 0x10;
                assert!(decode(id, &bad).is_err(), "flipped byte {at}");
                assert!(decode(id, &v[..v.len() - 1]).is_err());
            }
        }
        let long = (1..5000).filter(|&v| value(3, v).len() > 300).count();
        assert!(long > 20, "long values are drawn ({long})");
    }

    #[test]
    fn the_fold_follows_the_chain_and_flags_a_broken_one() {
        let k = key(5);
        let base = value(5, 3);
        let (a, b) = (operand(Some(3), 4), operand(Some(4), 5));
        let m = StressMerge;
        assert_eq!(m.full_merge(&k, Some(&base), &[&a, &b]), value(5, 5));
        assert_eq!(
            m.full_merge(&k, None, &[&operand(None, 8), &operand(Some(8), 9)]),
            value(5, 9)
        );
        let skipped = m.full_merge(&k, Some(&base), &[&b]);
        assert!(decode(5, &skipped).unwrap_err().contains("found version 3"));
        let twice = m.full_merge(&k, Some(&base), &[&a, &a]);
        assert!(decode(5, &twice).is_err());
        let no_base = m.full_merge(&k, None, &[&a]);
        assert!(decode(5, &no_base).is_err());
        assert!(decode(5, &m.full_merge(&k, Some(b"junk"), &[&a])).is_err());
    }
}
