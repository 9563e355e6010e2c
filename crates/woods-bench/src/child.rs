//! Each engine runs in a child process of its own, so that its `/proc` I/O counters, CPU time
//! and peak memory are its own. The parent re-executes its own binary with `--child SPEC`
//! (the [`RunSpec`] as JSON); the child runs the workloads and prints one line of JSON, the
//! [`EngineResult`], on stdout. Progress goes to stderr, which the child shares with the parent.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::engine::{BenchError, BenchResult};
use crate::workload::{self, EngineResult, RunSpec};

/// The argument that puts the bench into child mode.
pub const CHILD_FLAG: &str = "--child";

/// Runs `spec` in a child: `exe PREFIX... --child JSON`. `prefix` is what the binary needs
/// before the bench's own arguments (`["bench"]` for `woods`, nothing for `woods-bench`).
pub fn run_in_child(exe: &Path, prefix: &[OsString], spec: &RunSpec) -> BenchResult<EngineResult> {
    let json = serde_json::to_string(spec).map_err(|e| BenchError::new(e.to_string()))?;
    let out = Command::new(exe)
        .args(prefix)
        .arg(CHILD_FLAG)
        .arg(json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| BenchError::new(format!("starting {}: {e}", exe.display())))?;
    if !out.status.success() {
        return Err(BenchError::new(format!(
            "engine {} failed ({}); its error is above",
            spec.engine, out.status
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| {
            BenchError::new(format!(
                "engine {} printed no result line (stdout: {stdout:?})",
                spec.engine
            ))
        })?;
    serde_json::from_str(line).map_err(|e| {
        BenchError::new(format!(
            "engine {}: result line is not valid JSON: {e}",
            spec.engine
        ))
    })
}

/// Child mode: runs the spec given as JSON and prints the result line. Returns the process
/// exit status (0, or 3 after printing the error on stderr).
pub fn child_main(spec_json: &str) -> u8 {
    let result = serde_json::from_str::<RunSpec>(spec_json)
        .map_err(|e| BenchError::new(format!("bad child spec: {e}")))
        .and_then(|spec| workload::run(&spec));
    match result.and_then(|r| serde_json::to_string(&r).map_err(|e| BenchError(e.to_string()))) {
        Ok(line) => {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
                return 3;
            }
            0
        }
        Err(e) => {
            eprintln!("woods bench: error: {e}");
            3
        }
    }
}
