//! `woods` says once, on stderr, when the file system refused the direct I/O it asked for (the
//! figures of `stats`, `load` and `read` then include the OS page cache), and only then: on
//! the temporary directory's file system and on tmpfs (`/dev/shm`, which refused `O_DIRECT`
//! before Linux 6.6), the warning appears exactly when `woods stats` reports direct I/O not in
//! effect, and never with `--no-direct-io`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_woods");
const WARNING: &str = "refuses direct I/O";

fn woods(args: &[&str]) -> Output {
    let o = Command::new(BIN)
        .args(args)
        .output()
        .expect("running woods");
    assert_eq!(
        o.status.code(),
        Some(0),
        "woods {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn warnings(o: &Output) -> usize {
    String::from_utf8_lossy(&o.stderr).matches(WARNING).count()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

#[test]
fn the_direct_io_fallback_is_warned_about_once_per_run() {
    for base in [std::env::temp_dir(), PathBuf::from("/dev/shm")] {
        let Ok(tmp) = tempfile::tempdir_in(&base) else {
            continue;
        };
        let db = tmp.path().join("db");
        let db = path(&db);
        let put = woods(&["put", db, "k", "v"]);
        let stats = woods(&["stats", db]);
        let direct = String::from_utf8_lossy(&stats.stdout).contains("direct I/O        in effect");
        println!("{}: direct I/O in effect: {direct}", base.display());
        let want = usize::from(!direct);
        assert_eq!(warnings(&put), want, "{}: put", base.display());
        assert_eq!(warnings(&stats), want, "{}: stats", base.display());
        assert_eq!(
            warnings(&woods(&["get", db, "k"])),
            want,
            "{}: get",
            base.display()
        );
        let buffered = woods(&["--no-direct-io", "put", db, "k2", "v"]);
        assert_eq!(warnings(&buffered), 0, "{}: --no-direct-io", base.display());
    }
}
