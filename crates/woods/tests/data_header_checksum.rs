//! The data file's header page (page 0 of `data.woods`) is checksummed like every other page
//! (format 1.1 on, docs/format.md "Data file header"): a damaged header is `Error::Corruption`
//! naming page 0, never a database opened on a header nobody checked. Until 1.1 the header had
//! no checksum, and a flipped byte outside the three fields checked one by one (magic, major,
//! page size) went unnoticed. Format 2 (page stamps) refuses every major-1 database, 1.0 and
//! 1.1 alike, as an unsupported format (`format_fixtures.rs`).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use woods::db::DATA_FILE;
use woods::storage::{FaultFs, Fs, OpenMode, PAGE_BODY, PAGE_SIZE, PAGE_TRAILER};
use woods::{Db, Error, Options};

fn options(kind: &woods::IndexKind) -> Options {
    Options {
        direct_io: false,
        ..common::small_options(kind)
    }
}

/// A closed database of `kind` holding a few keys; returns its data file.
fn make(dir: &Path, kind: &woods::IndexKind) -> PathBuf {
    let db = Db::open(dir, options(kind)).expect("create");
    for i in 0..100u32 {
        db.put(format!("key-{i:03}"), format!("value-{i}"))
            .expect("put");
    }
    db.close().expect("close");
    dir.join(DATA_FILE)
}

fn open(dir: &Path) -> woods::Result<Db> {
    let kind = common::kind("lsm");
    Db::open(
        dir,
        Options {
            index: None,
            ..options(&kind)
        },
    )
}

fn header(data: &Path) -> Vec<u8> {
    let bytes = std::fs::read(data).expect("read data file");
    bytes[..PAGE_SIZE].to_vec()
}

/// What opening a database whose header is damaged must give: corruption of page 0.
fn assert_page0_corruption(r: woods::Result<Db>, what: &str) {
    match r {
        Err(Error::Corruption { page: Some(0), .. }) => {}
        Err(e) => panic!("{what}: expected corruption of page 0, got {e}"),
        Ok(_) => panic!("{what}: opened a database with a damaged header"),
    }
}

#[test]
fn a_new_header_is_format_2_0_with_a_page_checksum() {
    assert_eq!((PAGE_BODY, PAGE_TRAILER), (4076, 20));
    for kind in common::kinds() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let h = header(&make(tmp.path(), &kind));
        assert_eq!(&h[..8], b"WOODSDAT");
        assert_eq!(u16::from_le_bytes([h[8], h[9]]), 2, "major");
        assert_eq!(u16::from_le_bytes([h[10], h[11]]), 0, "minor");
        // The trailer every page has: the stamp (zeros: the header is unstamped), then the
        // crc32c over the page number (0, u64 LE), the body and the stamp.
        assert!(
            h[PAGE_BODY..PAGE_SIZE - 4].iter().all(|&b| b == 0),
            "stamp 0.0"
        );
        let want = crc32c::crc32c_append(crc32c::crc32c(&0u64.to_le_bytes()), &h[..PAGE_SIZE - 4]);
        let got = u32::from_le_bytes(h[PAGE_SIZE - 4..].try_into().expect("4 bytes"));
        assert_eq!(got, want, "{}: header checksum", kind.name());
    }
}

/// Every single-byte change of the header page is refused: the major version's two bytes as an
/// unsupported format (a newer major may lay its header out otherwise), every other byte as
/// corruption of page 0 (the body, the stamp, the checksum itself, and the minor version). In memory
/// ([`FaultFs`]): 4096 opens of a real directory took 35 s of syncs.
#[test]
fn every_damaged_header_byte_is_refused() {
    let fs = Arc::new(FaultFs::new());
    let dir = Path::new("/db");
    let opts = |index| Options {
        index,
        fs: Some(fs.clone() as Arc<dyn Fs>),
        ..options(&common::kind("lsm"))
    };
    let db = Db::open(dir, opts(Some(common::kind("lsm")))).expect("create");
    for i in 0..100u32 {
        db.put(format!("key-{i:03}"), format!("value-{i}"))
            .expect("put");
    }
    db.close().expect("close");
    let data = fs
        .open(&dir.join(DATA_FILE), OpenMode::default())
        .expect("open data file");
    let mut h = vec![0u8; PAGE_SIZE];
    data.read_exact_at(&mut h, 0).expect("read header");
    for off in 0..PAGE_SIZE {
        // Flip one bit, a different one from byte to byte.
        let b = h[off] ^ (1 << (off % 8));
        data.write_all_at(&[b], off as u64).expect("damage");
        let r = Db::open(dir, opts(None));
        if off == 8 || off == 9 {
            assert!(
                matches!(r, Err(Error::UnsupportedFormat { .. })),
                "byte {off}: expected UnsupportedFormat, got {:?}",
                r.err()
            );
        } else {
            assert_page0_corruption(r, &format!("byte {off} of the header flipped"));
        }
        data.write_all_at(&h[off..off + 1], off as u64)
            .expect("restore");
    }
    // Restored: it opens, with its contents.
    let db = Db::open(dir, opts(None)).expect("open the restored database");
    assert_eq!(db.get("key-042").expect("get"), Some(b"value-42".to_vec()));
    db.close().expect("close");
}

/// A major-1 header (here a 1.0 fixture's) is refused as an unsupported format naming both
/// majors: its pages have another layout (a 4092-byte body, no stamp).
#[test]
fn a_major_1_header_is_refused_naming_both_versions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1.0/lsm");
    for e in std::fs::read_dir(&fixture).expect("fixture") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), tmp.path().join(e.file_name())).expect("copy");
    }
    let h = header(&tmp.path().join(DATA_FILE));
    assert_eq!(u16::from_le_bytes([h[8], h[9]]), 1, "a major-1 fixture");
    match open(tmp.path()) {
        Err(
            e @ Error::UnsupportedFormat {
                found_major: 1,
                supported_major: 2,
            },
        ) => {
            let msg = e.to_string();
            assert!(msg.contains('1') && msg.contains('2'), "{msg}");
        }
        Err(e) => panic!("expected UnsupportedFormat 1 vs 2, got {e}"),
        Ok(_) => panic!("opened a major-1 database"),
    }
}
