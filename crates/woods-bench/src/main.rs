//! `woods-bench`: the same as `woods bench`, as a binary of its own (the tests re-execute it).

use std::process::ExitCode;

use clap::Parser;
use woods_bench::cli::{self, BenchArgs};

#[derive(Parser)]
#[command(name = "woods-bench", version, about = "Benchmark woods index kinds and peer engines", long_about = cli::BENCH_HELP)]
struct Cli {
    /// Do not ask the engines for direct I/O.
    #[arg(long)]
    no_direct_io: bool,
    #[command(flatten)]
    bench: BenchArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("woods-bench: error: cannot find this binary to run the engines: {e}");
            return ExitCode::from(2);
        }
    };
    // The child reads direct I/O from its spec, so it needs no flags before `--child`.
    ExitCode::from(cli::run(&cli.bench, !cli.no_direct_io, &exe, &[]))
}
