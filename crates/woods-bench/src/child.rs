//! Each engine runs in a child process of its own, so that its `/proc` I/O counters, CPU time
//! and peak memory are its own. The parent re-executes its own binary with `--child SPEC`
//! (the [`RunSpec`] as JSON) and `--child-setup SETUP` (a [`ChildSetup`]); the child runs the
//! workloads and prints one line of JSON, the [`EngineResult`], on stdout. Progress goes to
//! stderr, which the child shares with the parent. Before that, the child prints each phase's
//! figures as it ends (a [`PHASE_LINE`] line), so that a child killed in a later phase (by its
//! memory cgroup, say) still gives the phases it finished.
//!
//! With a memory cgroup, the child waits for a `go` line on its stdin before it does anything,
//! and the parent writes it once it has moved the child into the group: everything the engine
//! allocates or brings into the page cache is then charged to the group.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::cgroup::{self, CgroupHandle, MemoryCgroup};
use crate::engine::{BenchError, BenchResult, ExtraEngines};
use crate::report;
use crate::workload::{self, EngineResult, Phase, PhaseHooks, PhaseResult, RunSpec};

/// The argument that puts the bench into child mode.
pub const CHILD_FLAG: &str = "--child";
/// The argument that passes the child its [`ChildSetup`].
pub const SETUP_FLAG: &str = "--child-setup";
/// The line the parent writes on a waiting child's stdin once the child is in its cgroup.
pub const GO: &str = "go";
/// The start of the line, on stdout, that gives a finished phase's figures: the prefix, then
/// a [`PhaseLine`] as JSON.
pub const PHASE_LINE: &str = "phase ";

/// A finished phase, as the child reports it before the run ends.
#[derive(Serialize, Deserialize)]
pub struct PhaseLine {
    pub version: Option<String>,
    pub result: PhaseResult,
}

/// A child that failed: why, and the phases it finished before (as an [`EngineResult`] with
/// those phases only, `None` if it finished none).
#[derive(Debug)]
pub struct ChildFailure {
    pub error: BenchError,
    pub finished: Option<Box<EngineResult>>,
}

impl std::fmt::Display for ChildFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.finished {
            Some(r) => write!(
                f,
                "{} (after {} finished phase(s): {})",
                self.error,
                r.phases.len(),
                r.phases
                    .iter()
                    .map(|p| p.workload.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => write!(f, "{}", self.error),
        }
    }
}

impl From<BenchError> for ChildFailure {
    fn from(error: BenchError) -> ChildFailure {
        ChildFailure {
            error,
            finished: None,
        }
    }
}

/// The phases a child reported finished on `stdout`, as the run's result.
fn finished_phases(spec: &RunSpec, stdout: &str) -> Option<Box<EngineResult>> {
    let mut version = None;
    let mut phases = Vec::new();
    for l in stdout.lines() {
        if let Some(line) = l
            .strip_prefix(PHASE_LINE)
            .and_then(|j| serde_json::from_str::<PhaseLine>(j).ok())
        {
            version = version.or(line.version);
            phases.push(line.result);
        }
    }
    (!phases.is_empty()).then(|| {
        Box::new(EngineResult {
            engine: spec.engine.clone(),
            version,
            spec: spec.clone(),
            phases,
            enforcement: Default::default(),
            cgroup_limit_bytes: None,
        })
    })
}

/// What the parent arranges around a child besides its spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSetup {
    /// Wait for a [`GO`] line on stdin before running (the parent moves the child into its
    /// memory cgroup first).
    pub wait_for_go: bool,
    /// Write dirty pages and drop the OS page cache before each phase (when no cgroup bounds
    /// the page cache, so that each phase at least starts without the engine's data cached).
    pub drop_caches: bool,
    /// The child's memory cgroup, whose peak it reads after each phase.
    pub cgroup: Option<CgroupHandle>,
    /// For tests of a child that dies part-way: the child aborts (as if killed) before the
    /// phase with this 0-based number.
    #[serde(default)]
    pub die_before_phase: Option<u64>,
}

/// `MALLOC_ARENA_MAX` of every engine's child, unless the bench's own environment sets it.
pub const MALLOC_ARENAS: &str = "2";

/// `MALLOC_MMAP_THRESHOLD_` of every engine's child (glibc's initial threshold, fixed), unless
/// the bench's own environment sets it.
pub const MALLOC_MMAP_THRESHOLD: &str = "131072";

/// Runs `spec` in a child: `exe PREFIX... --child JSON`. `prefix` is what the binary needs
/// before the bench's own arguments (`["bench"]` for `woods`, nothing for `woods-bench`).
pub fn run_in_child(exe: &Path, prefix: &[OsString], spec: &RunSpec) -> BenchResult<EngineResult> {
    run_in_child_with(exe, prefix, spec, &ChildSetup::default(), None).map_err(|f| f.error)
}

/// Like [`run_in_child`], with the setup and, where there is one, the memory cgroup the child
/// runs in: the child is moved into it before it starts (`setup.wait_for_go` must then be set),
/// and a child the OOM killer killed there is reported as such. A child that failed gives the
/// phases it finished with its error.
pub fn run_in_child_with(
    exe: &Path,
    prefix: &[OsString],
    spec: &RunSpec,
    setup: &ChildSetup,
    cgroup: Option<&MemoryCgroup>,
) -> Result<EngineResult, ChildFailure> {
    if cgroup.is_some() && !setup.wait_for_go {
        return Err(BenchError::new("a child in a cgroup must wait to be moved there").into());
    }
    let json = serde_json::to_string(spec).map_err(|e| BenchError::new(e.to_string()))?;
    let setup_json = serde_json::to_string(setup).map_err(|e| BenchError::new(e.to_string()))?;
    let mut cmd = Command::new(exe);
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // glibc's malloc gives each thread that allocates an arena of its own, and blocks freed
        // into one arena are not reused by another: RocksDB's reads through its block cache
        // grew its memory 60% past the cache this way. Two arenas, for every engine alike.
        cmd.env("MALLOC_ARENA_MAX", MALLOC_ARENAS);
    }
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // And a fixed mmap threshold: glibc raises it to the size of each large mapping freed
        // (up to 32 MiB), after which large buffers come from the heap and fragment it (a woods
        // `stbe` child grew past its cgroup's limit at 50 million records this way). The
        // setting woods documents for its users (woods::heap), for every engine alike.
        cmd.env("MALLOC_MMAP_THRESHOLD_", MALLOC_MMAP_THRESHOLD);
    }
    let mut child = cmd
        .args(prefix)
        .arg(CHILD_FLAG)
        .arg(json)
        .arg(SETUP_FLAG)
        .arg(setup_json)
        .stdin(if setup.wait_for_go {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| BenchError::new(format!("starting {}: {e}", exe.display())))?;
    if let Some(g) = cgroup {
        if let Err(e) = g.add(child.id()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BenchError::new(format!(
                "cannot move engine {}'s process into {}: {e}",
                spec.engine,
                g.dir().display()
            ))
            .into());
        }
    }
    if let Some(mut stdin) = child.stdin.take() {
        // A child that died already shows in its status below.
        let _ = writeln!(stdin, "{GO}");
    }
    let out = child
        .wait_with_output()
        .map_err(|e| BenchError::new(format!("waiting for engine {}: {e}", spec.engine)))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed = |error: BenchError| ChildFailure {
        error,
        finished: finished_phases(spec, &stdout),
    };
    if !out.status.success() {
        if let Some(g) = cgroup.filter(|g| g.oom_kills().unwrap_or(0) > 0) {
            let budget = spec.config.memory_bytes;
            return Err(failed(BenchError::new(format!(
                "engine {} was OOM-KILLED in its memory cgroup ({}): it needed more than the \
                 limit of {} (budget {} + allowance {} for the bench and the engine's fixed \
                 costs); peak {}",
                spec.engine,
                g.version().enforcement().name(),
                report::bytes(g.limit_bytes() as f64),
                report::bytes(budget as f64),
                report::bytes(g.limit_bytes().saturating_sub(budget) as f64),
                g.peak_bytes()
                    .map_or("unknown".into(), |p| report::bytes(p as f64)),
            ))));
        }
        let why = match out.status.signal() {
            Some(s) => format!(
                "killed by signal {s}{}",
                if s == libc::SIGKILL {
                    " (SIGKILL: not by the bench's memory cgroup; the system's OOM killer?)"
                } else {
                    ""
                }
            ),
            None => format!("{}; its error is above", out.status),
        };
        return Err(failed(BenchError::new(format!(
            "engine {} failed: {why}",
            spec.engine
        ))));
    }
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
        failed(BenchError::new(format!(
            "engine {}: result line is not valid JSON: {e}",
            spec.engine
        )))
    })
}

/// The child's work around each phase, from its setup, and the phases started so far.
struct ChildHooks<'a>(&'a ChildSetup, std::cell::Cell<u64>);

impl PhaseHooks for ChildHooks<'_> {
    fn before_phase(&self, phase: &Phase) -> BenchResult<()> {
        let n = self.1.get();
        self.1.set(n + 1);
        if self.0.die_before_phase == Some(n) {
            std::process::abort();
        }
        if self.0.drop_caches {
            cgroup::drop_page_cache().map_err(|e| {
                BenchError::new(format!(
                    "dropping the page cache before {}: {e}",
                    phase.workload.name()
                ))
            })?;
        }
        if let Some(g) = &self.0.cgroup {
            g.reset_peak();
        }
        Ok(())
    }

    fn after_phase(&self, r: &mut PhaseResult) {
        r.memory_peak_bytes = self.0.cgroup.as_ref().and_then(|g| g.peak_bytes());
    }

    fn phase_done(&self, result: &PhaseResult, version: Option<&str>) {
        let line = PhaseLine {
            version: version.map(str::to_string),
            result: result.clone(),
        };
        if let Ok(json) = serde_json::to_string(&line) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{PHASE_LINE}{json}").and_then(|_| out.flush());
        }
    }
}

/// Child mode: runs the spec given as JSON and prints the result line. Returns the process
/// exit status (0, or 3 after printing the error on stderr).
pub fn child_main(spec_json: &str, setup_json: Option<&str>) -> u8 {
    child_main_with(spec_json, setup_json, &[])
}

/// Like [`child_main`], knowing the `extra` engines of the binary too.
pub fn child_main_with(spec_json: &str, setup_json: Option<&str>, extra: ExtraEngines) -> u8 {
    let result = child_setup(setup_json).and_then(|setup| {
        let spec = serde_json::from_str::<RunSpec>(spec_json)
            .map_err(|e| BenchError::new(format!("bad child spec: {e}")))?;
        if setup.wait_for_go {
            wait_for_go()?;
        }
        workload::run_hooked_with_engines(&spec, &ChildHooks(&setup, Default::default()), extra)
    });
    match result.and_then(|r| serde_json::to_string(&r).map_err(|e| BenchError(e.to_string()))) {
        Ok(line) => {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
                return 3;
            }
            0
        }
        Err(e) => {
            workload::end_bar();
            eprintln!("woods bench: error: {e}");
            3
        }
    }
}

fn child_setup(json: Option<&str>) -> BenchResult<ChildSetup> {
    match json {
        None => Ok(ChildSetup::default()),
        Some(j) => {
            serde_json::from_str(j).map_err(|e| BenchError::new(format!("bad child setup: {e}")))
        }
    }
}

/// Blocks until the parent writes [`GO`] on stdin.
fn wait_for_go() -> BenchResult<()> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| BenchError::new(format!("reading the go-ahead on stdin: {e}")))?;
    if line.trim() != GO {
        return Err(BenchError::new(format!(
            "the parent did not give the go-ahead (stdin: {line:?})"
        )));
    }
    Ok(())
}
