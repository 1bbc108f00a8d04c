//! The CPU mirror: the fp32 contract of docs/contract.md#fp32-chain on the host, one
//! sequence per rayon task. It is the oracle of the tests and of `verify`, so
//! it is written to be obviously the contract: one f32 accumulator per
//! candidate, `mul_add` (a fused multiply-add, one rounding) over d ascending,
//! one f32 multiply by `inv_norm`, ties to the smallest index, centroid in f64.
//!
//! Speed comes only from doing many candidates side by side: the table is
//! transposed so that 32 candidates' accumulators sit in vector registers and
//! each takes its own FMA chain, which changes no bit of any chain.

use rayon::prelude::*;

use crate::contract::table::Table;
use crate::error::{Error, Result};

const BLOCK: usize = 32;

/// The table transposed to `dim` rows of `n_pad` candidates, padded with zeros
/// (padding candidates are never chosen: they are past `n`).
struct Transposed {
    n_pad: usize,
    et: Vec<f32>,
    inv: Vec<f32>,
}

fn transpose(table: &Table) -> Transposed {
    let n_pad = table.n.div_ceil(BLOCK) * BLOCK;
    let mut et = vec![0.0f32; n_pad * table.dim];
    for j in 0..table.n {
        for (d, &x) in table.row(j).iter().enumerate() {
            et[d * n_pad + j] = x;
        }
    }
    let mut inv = table.inv_norm.clone();
    inv.resize(n_pad, 0.0);
    Transposed { n_pad, et, inv }
}

#[inline(always)]
fn scores_portable(c: &[f32], t: &Transposed, out: &mut [f32]) {
    for jb in (0..t.n_pad).step_by(BLOCK) {
        let mut acc = [0.0f32; BLOCK];
        for (d, &cd) in c.iter().enumerate() {
            let row = &t.et[d * t.n_pad + jb..d * t.n_pad + jb + BLOCK];
            for k in 0..BLOCK {
                acc[k] = cd.mul_add(row[k], acc[k]);
            }
        }
        for k in 0..BLOCK {
            out[jb + k] = acc[k] * t.inv[jb + k];
        }
    }
}

/// The same code compiled with hardware FMA: `mul_add` is then a `vfmadd`
/// instead of a call to libm's `fmaf`; both are the correctly rounded fma.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn scores_fma(c: &[f32], t: &Transposed, out: &mut [f32]) {
    scores_portable(c, t, out)
}

fn scores(c: &[f32], t: &Transposed, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports the features the function was compiled for.
        unsafe { scores_fma(c, t, out) };
        return;
    }
    scores_portable(c, t, out)
}

fn one_sequence(table: &Table, t: &Transposed, start: usize, out: &mut [u32]) {
    let dim = table.dim;
    let mut csum: Vec<f64> = table.row(start).iter().map(|&x| x as f64).collect();
    let mut masked = vec![false; table.n];
    let mut c = vec![0.0f32; dim];
    let mut score = vec![0.0f32; t.n_pad];
    masked[start] = true;
    out[0] = start as u32;
    for slot in out.iter_mut().skip(1) {
        for (cd, &s) in c.iter_mut().zip(&csum) {
            *cd = s as f32;
        }
        scores(&c, t, &mut score);
        let mut best: Option<(f32, usize)> = None;
        for (j, &s) in score[..table.n].iter().enumerate() {
            // Strictly smaller only: on equal scores the earlier (smaller) j stays.
            if !masked[j] && best.map_or(true, |(b, _)| s < b) {
                best = Some((s, j));
            }
        }
        // length <= n always leaves an unmasked candidate.
        let Some((_, w)) = best else { return };
        masked[w] = true;
        *slot = w as u32;
        for (s, &x) in csum.iter_mut().zip(table.row(w)) {
            *s += x as f64;
        }
    }
}

/// Sequences of `length` items from each start, row-major `[starts.len() × length]`.
pub fn run(table: &Table, starts: &[u32], length: usize) -> Result<Vec<u32>> {
    check_job(table, starts, length)?;
    let t = transpose(table);
    let mut out = vec![0u32; starts.len() * length];
    out.par_chunks_mut(length).zip(starts.par_iter()).for_each(|(seq, &s)| one_sequence(table, &t, s as usize, seq));
    Ok(out)
}

/// The job's arguments against the table: starts in range, 1 <= L <= N.
pub fn check_job(table: &Table, starts: &[u32], length: usize) -> Result<()> {
    if length == 0 || length > table.n {
        return Err(Error::Usage(format!(
            "length {length} is out of range: it must be between 1 and the number of items, {}",
            table.n
        )));
    }
    if let Some((i, s)) = starts.iter().enumerate().find(|(_, &s)| s as usize >= table.n) {
        return Err(Error::Usage(format!(
            "start {s} (entry {i} of the starts) is out of range: items are 0..{}",
            table.n
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::synth::clustered;

    /// The contract written the plainest way: row-major, one candidate at a time.
    fn naive(table: &Table, start: usize, length: usize) -> Vec<u32> {
        let mut csum: Vec<f64> = table.row(start).iter().map(|&x| x as f64).collect();
        let mut masked = vec![false; table.n];
        masked[start] = true;
        let mut out = vec![start as u32];
        while out.len() < length {
            let c: Vec<f32> = csum.iter().map(|&s| s as f32).collect();
            let mut best = (f32::INFINITY, usize::MAX);
            for j in 0..table.n {
                if masked[j] {
                    continue;
                }
                let mut acc = 0.0f32;
                for d in 0..table.dim {
                    acc = c[d].mul_add(table.row(j)[d], acc);
                }
                let s = acc * table.inv_norm[j];
                if s < best.0 || (s == best.0 && j < best.1) {
                    best = (s, j);
                }
            }
            masked[best.1] = true;
            out.push(best.1 as u32);
            for d in 0..table.dim {
                csum[d] += table.row(best.1)[d] as f64;
            }
        }
        out
    }

    #[test]
    fn vectorised_mirror_equals_the_naive_contract() -> Result<()> {
        for &(n, dim) in &[(37, 5), (70, 1), (129, 33)] {
            let t = clustered(n, dim, 4, n as u64, 0.5)?;
            let starts: Vec<u32> = (0..n as u32).step_by(7).collect();
            let got = run(&t, &starts, n)?;
            for (i, &s) in starts.iter().enumerate() {
                assert_eq!(&got[i * n..(i + 1) * n], naive(&t, s as usize, n).as_slice(), "n={n} dim={dim} start={s}");
            }
        }
        Ok(())
    }

    #[test]
    fn ties_go_to_the_smallest_index() -> Result<()> {
        // Rows 1, 2 and 3 are identical: from start 0 the first pick among them is 1.
        let data = vec![1.0, 0.0, -1.0, 0.5, -1.0, 0.5, -1.0, 0.5];
        let t = Table::from_rows("t", 4, 2, data, None)?;
        assert_eq!(run(&t, &[0], 4)?, vec![0, 1, 2, 3]);
        Ok(())
    }

    #[test]
    fn job_arguments_are_checked() -> Result<()> {
        let t = clustered(10, 3, 2, 1, 0.5)?;
        assert!(run(&t, &[0], 11).is_err());
        assert!(run(&t, &[0], 0).is_err());
        assert!(run(&t, &[10], 2).is_err_and(|e| e.to_string().contains("start 10")));
        Ok(())
    }
}
