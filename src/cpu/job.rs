//! A job on the host: what is prepared once per table (G' or the transposed
//! table), and a batch of sequences run from their starts or resumed from a
//! prefix of every sequence.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rayon::prelude::*;

use super::bound::Factors;
use super::deps::{gram, Error, Result, Table};
use super::exact::{self, Transposed};
use super::filter::{Counts, Gram};
use super::rate::{self, Plan};

/// What a table's batches share: G' and the bound's factors, or the
/// transposed table. Build it once and run every batch of a job on it.
pub struct Prepared {
    plan: Plan,
    g: Vec<f32>,
    factors: Option<Factors>,
    tr: Option<Transposed>,
    /// Seconds the preparation took (G's build).
    pub setup_seconds: f64,
    /// Why the plan was chosen, in words.
    pub why: String,
}

/// A batch: `starts`, each sequence to `length` items; `prefix` holds the
/// first `from` items of every sequence, row-major (`starts.len() x from`),
/// or is empty with `from = 1` (the starts alone).
pub struct Job<'a> {
    pub starts: &'a [u32],
    pub length: usize,
    pub prefix: &'a [u32],
    pub from: usize,
    /// Test hook: also rescore every candidate of every step and record the
    /// largest |exact - approx| / bound (the instrumented ratio test).
    pub instrument: bool,
}

/// A batch's sequences, row-major `starts.len() x length`, and its figures.
pub struct Outcome {
    pub winners: Vec<u32>,
    pub counts: Counts,
    pub seconds: f64,
}

/// `f` on a pool of `threads` threads, or on rayon's global pool.
pub fn on_threads<R: Send>(threads: Option<usize>, f: impl FnOnce() -> R + Send) -> Result<R> {
    match threads {
        None | Some(0) => Ok(f()),
        Some(k) => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(k)
                .build()
                .map_err(|e| Error::Refused(format!("cannot start {k} threads: {e}")))?;
            Ok(pool.install(f))
        }
    }
}

impl Prepared {
    /// `plan` forces a plan (a Gram plan on a table the certificate refuses
    /// is an error); `None` lets `rate::choose` weigh them for a job of
    /// `job_steps` sequence-steps. `bound_scale` is 1 except in the tests.
    pub fn new(t: &Table, norms: &[f64], plan: Option<Plan>, job_steps: u64, threads: Option<usize>, bound_scale: f64) -> Result<Self> {
        let t0 = Instant::now();
        let admissible = gram::check_admissible(t, norms);
        let (plan, why) = match (plan, &admissible) {
            (Some(Plan::Gram), Err(why)) => return Err(Error::Refused(why.clone())),
            (Some(p), _) => (p, "asked for".to_string()),
            (None, Err(why)) => (Plan::Direct, why.clone()),
            (None, Ok(())) => rate::choose(&rate::DEFAULT, t.n, t.dim, job_steps),
        };
        let (g, factors, tr) = match plan {
            Plan::Gram => (on_threads(threads, || super::gram_matrix::build(t))?, Some(Factors::new(t, norms, bound_scale)), None),
            Plan::Direct => (Vec::new(), None, Some(exact::transpose(t))),
        };
        Ok(Prepared { plan, g, factors, tr, setup_seconds: t0.elapsed().as_secs_f64(), why })
    }

    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// One batch. `on_progress(done)` is called from the worker threads
    /// after each finished sequence with the number finished so far.
    pub fn run(&self, t: &Table, norms: &[f64], job: &Job, threads: Option<usize>, on_progress: Option<&(dyn Fn(usize) + Sync)>) -> Result<Outcome> {
        check(t, job)?;
        let t0 = Instant::now();
        let mut winners = vec![0u32; job.starts.len() * job.length];
        let done = AtomicUsize::new(0);
        let one = |(i, seq): (usize, &mut [u32])| -> Counts {
            fill_prefix(job, i, seq);
            let counts = self.sequence(t, norms, seq, job.from.min(job.length), job.instrument);
            let k = done.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some(f) = on_progress {
                f(k);
            }
            counts
        };
        let counts = on_threads(threads, || {
            winners.par_chunks_mut(job.length).enumerate().with_max_len(1).map(one).reduce(Counts::default, Counts::merge)
        })?;
        Ok(Outcome { winners, counts, seconds: t0.elapsed().as_secs_f64() })
    }

    fn sequence(&self, t: &Table, norms: &[f64], seq: &mut [u32], from: usize, instrument: bool) -> Counts {
        match (self.plan, &self.tr, &self.factors) {
            (Plan::Gram, _, Some(f)) => {
                let gm = Gram { t, g: &self.g, norms, f: *f };
                hot::gram(&gm, seq, from, instrument)
            }
            (_, Some(tr), _) => {
                hot::direct(t, tr, seq, from);
                Counts { steps: (seq.len() - from) as u64, ..Counts::default() }
            }
            _ => unreachable!("a plan is prepared with what it needs"),
        }
    }
}

/// The sequence's first items: the prefix's row, or the start.
fn fill_prefix(job: &Job, i: usize, seq: &mut [u32]) {
    if job.prefix.is_empty() {
        seq[0] = job.starts[i];
    } else {
        let k = job.from.min(job.length);
        seq[..k].copy_from_slice(&job.prefix[i * job.from..i * job.from + k]);
    }
}

/// The batch's arguments: starts in range, 1 <= from, length <= N, and a
/// prefix whose rows begin at their start and hold distinct items.
fn check(t: &Table, job: &Job) -> Result<()> {
    let usage = |m: String| Err(Error::Usage(m));
    if job.length == 0 || job.length > t.n {
        return usage(format!("length {} is out of range: it must be between 1 and the number of items, {}", job.length, t.n));
    }
    if let Some((i, s)) = job.starts.iter().enumerate().find(|(_, &s)| s as usize >= t.n) {
        return usage(format!("start {s} (entry {i} of the starts) is out of range: items are 0..{}", t.n));
    }
    if job.from == 0 || (job.prefix.is_empty() && job.from != 1) {
        return usage(format!("from = {} needs a prefix of that many items a sequence", job.from));
    }
    if !job.prefix.is_empty() && job.prefix.len() != job.starts.len() * job.from {
        return usage(format!("the prefix holds {} items, not {} starts x {}", job.prefix.len(), job.starts.len(), job.from));
    }
    let mut seen = vec![u32::MAX; t.n];
    for (i, row) in job.prefix.chunks(job.from.max(1)).enumerate() {
        if row[0] != job.starts[i] {
            return usage(format!("prefix row {i} begins with {}, not its start {}", row[0], job.starts[i]));
        }
        for &w in row {
            if w as usize >= t.n || seen[w as usize] == i as u32 {
                return usage(format!("prefix row {i} holds item {w} twice or out of range"));
            }
            seen[w as usize] = i as u32;
        }
    }
    Ok(())
}

/// The per-sequence loops, built for AVX2 + FMA where the CPU has them.
mod hot {
    use super::super::exact::{self, Transposed};
    use super::super::filter::{self, Counts, Gram};
    use super::Table;

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn gram_fma(gm: &Gram, seq: &mut [u32], from: usize, instrument: bool) -> Counts {
        filter::sequence(gm, seq, from, instrument)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn direct_fma(t: &Table, tr: &Transposed, seq: &mut [u32], from: usize) {
        exact::sequence(t, tr, seq, from)
    }

    pub fn gram(gm: &Gram, seq: &mut [u32], from: usize, instrument: bool) -> Counts {
        #[cfg(target_arch = "x86_64")]
        if super::super::has_fma() {
            // SAFETY: the CPU supports the features the function was compiled for.
            return unsafe { gram_fma(gm, seq, from, instrument) };
        }
        filter::sequence(gm, seq, from, instrument)
    }

    pub fn direct(t: &Table, tr: &Transposed, seq: &mut [u32], from: usize) {
        #[cfg(target_arch = "x86_64")]
        if super::super::has_fma() {
            // SAFETY: as above.
            return unsafe { direct_fma(t, tr, seq, from) };
        }
        exact::sequence(t, tr, seq, from)
    }
}

/// Sequences of `length` items from each start, row-major `[starts x length]`:
/// the mirror's bytes, by the plan `rate::choose` picks for this job.
pub fn run(t: &Table, norms: &[f64], starts: &[u32], length: usize, threads: Option<usize>, on_progress: Option<&(dyn Fn(usize) + Sync)>) -> Result<Vec<u32>> {
    let steps = starts.len() as u64 * length.saturating_sub(1) as u64;
    let prepared = Prepared::new(t, norms, None, steps, threads, 1.0)?;
    let job = Job { starts, length, prefix: &[], from: 1, instrument: false };
    Ok(prepared.run(t, norms, &job, threads, on_progress)?.winners)
}
