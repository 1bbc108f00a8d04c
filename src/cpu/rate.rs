//! What a CPU job costs, for `auto` and for choosing between the Gram filter
//! and the direct path: three rates (seconds per unit of work on the whole
//! machine) and the estimate they give. `measure` times them on a small
//! table on this machine; `DEFAULT` is a 2-core development machine's.

use std::time::Instant;

use super::deps::{Result, Table};
use super::job::{on_threads, Job, Plan, Prepared};

/// Seconds per unit of work, all threads together.
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    /// G's build, per N² x D (one f64 fma of one G entry).
    pub build: f64,
    /// A Gram step, per N (one approx add, the window's pass) per sequence-step.
    pub step: f64,
    /// A direct step, per N x D (one f32 fma) per sequence-step.
    pub direct: f64,
}

/// Measured by `measure(2048, 384, None)` (the lowest of three) on the 2-core
/// development machine (Intel Xeon, AVX2/FMA/AVX-512) the CPU method was
/// written on, 2026-12-05, under a load average of 14 from other work: wall
/// times about 3x an idle machine's, but their ratios, which choose the plan,
/// hold (a Gram step about 50x cheaper than a direct one at D = 384; G's
/// build worth it past about 0.6 N sequence-steps).
pub const DEFAULT: Rates = Rates { build: 2.4e-10, step: 3.1e-9, direct: 4.2e-10 };

/// A quarter of the machine's memory (from /proc/meminfo; 4 GiB where it
/// cannot be read): the most G may take.
pub fn memory_limit() -> u64 {
    let total_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines().find(|l| l.starts_with("MemTotal:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
    });
    total_kib.map_or(4 << 30, |k| k * 1024 / 4)
}

/// Estimated seconds of a job of `steps` sequence-steps by `plan`.
pub fn estimate(r: &Rates, plan: Plan, n: usize, dim: usize, steps: u64) -> f64 {
    let (n, dim, s) = (n as f64, dim as f64, steps as f64);
    match plan {
        Plan::Gram => r.build * n * n * dim + r.step * n * s,
        Plan::Direct => r.direct * n * dim * s,
    }
}

/// The cheaper plan for a table the Gram certificate admits, and why.
pub fn choose(r: &Rates, n: usize, dim: usize, steps: u64) -> (Plan, String) {
    let g_bytes = (n as u64) * (n as u64) * 4;
    if g_bytes > memory_limit() {
        return (Plan::Direct, format!("G would take {g_bytes} bytes, over a quarter of the memory"));
    }
    let (g, d) = (estimate(r, Plan::Gram, n, dim, steps), estimate(r, Plan::Direct, n, dim, steps));
    let why = format!("estimated gram {g:.3} s, direct {d:.3} s");
    (if g <= d { Plan::Gram } else { Plan::Direct }, why)
}

/// A deterministic table of `n` rows of `dim` values in [-1, 1) (an LCG).
fn probe_table(n: usize, dim: usize) -> Result<Table> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let data = (0..n * dim)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect();
    Table::from_rows("cpu-rate-probe", n, dim, data, None)
}

fn timed_batch(t: &Table, norms: &[f64], p: &Prepared, seqs: usize, length: usize, threads: Option<usize>) -> Result<f64> {
    let starts: Vec<u32> = (0..seqs as u32).map(|i| i * 7 % t.n as u32).collect();
    let job = Job { starts: &starts, length, prefix: &[], from: 1, instrument: false };
    let t0 = Instant::now();
    p.run(t, norms, &job, threads, None)?;
    Ok(t0.elapsed().as_secs_f64())
}

/// The three rates on this machine, on an `n x dim` table (a second or two
/// at 2,048 x 384 on 2 cores).
pub fn measure(n: usize, dim: usize, threads: Option<usize>) -> Result<Rates> {
    let t = probe_table(n.max(64), dim.max(1))?;
    let norms = super::deps::gram::row_norm_bounds(&t);
    let workers = threads.unwrap_or_else(|| on_threads(None, rayon::current_num_threads).unwrap_or(1)).max(1);
    let seqs = 2 * workers;
    let g = Prepared::new(&t, &norms, Some(Plan::Gram), 0, threads, 1.0)?;
    let (nf, df) = (t.n as f64, t.dim as f64);
    let build = g.setup_seconds / (nf * nf * df);
    let gram_len = 65.min(t.n);
    let step = timed_batch(&t, &norms, &g, seqs, gram_len, threads)? / (nf * (seqs * (gram_len - 1)) as f64);
    drop(g);
    let d = Prepared::new(&t, &norms, Some(Plan::Direct), 0, threads, 1.0)?;
    let direct_len = 9.min(t.n);
    let direct = timed_batch(&t, &norms, &d, seqs, direct_len, threads)? / (nf * df * (seqs * (direct_len - 1)) as f64);
    Ok(Rates { build, step, direct })
}
