//! `flotilla bench`: its flags, and the table of what the scenarios of
//! `flotilla-bench` (orchestrator/bench) measured. Results and their setup
//! are recorded in docs/PERFORMANCE.md.

use clap::Args as ClapArgs;

/// Measure orchestration overhead, throughput, fan-out and footprint.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Tasks per overhead/throughput run.
    #[arg(long, default_value_t = 300)]
    pub tasks: usize,
    /// Only these scenarios (overhead, throughput, fanout, footprint, mcp;
    /// scale, load, resume and concurrency run only when named here).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Tasks per job of the `scale` scenario.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 10_000, 100_000])]
    pub scale_sizes: Vec<usize>,
    /// Concurrent jobs of the `load` scenario.
    #[arg(long, default_value_t = 1_000)]
    pub load_jobs: usize,
    /// Tasks per job of the `load` scenario.
    #[arg(long, default_value_t = 5)]
    pub load_tasks: usize,
    /// Times the `load` scenario runs its jobs (memory is read after each).
    #[arg(long, default_value_t = 1)]
    pub load_rounds: usize,
    /// Finished jobs in history when the `load` scenario times listings.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000])]
    pub load_history: Vec<usize>,
}

/// Runs the selected scenarios and prints the table.
pub async fn run(args: Args) -> anyhow::Result<i32> {
    let options = flotilla_bench::Options {
        tasks: args.tasks,
        only: args.only,
        scale_sizes: args.scale_sizes,
        load_jobs: args.load_jobs,
        load_tasks: args.load_tasks,
        load_rounds: args.load_rounds,
        load_history: args.load_history,
    };
    let rows = flotilla_bench::run(&options).await?;
    let mut t = super::table::new(&["measure", "result", "target"]);
    super::table::align_right(&mut t, &[1]);
    for (m, r, target) in rows {
        t.add_row([m, r, target]);
    }
    super::out::out!("{}", super::table::render(t, ""))?;
    Ok(0)
}
