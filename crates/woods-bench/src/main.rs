//! `woods-bench`: the same as `woods bench`, as a binary of its own (the tests re-execute it).

use std::process::ExitCode;

fn main() -> ExitCode {
    woods_bench::cli::main_with(&[])
}
