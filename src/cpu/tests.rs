//! The CPU method against the mirror (the oracle), its filter's bound
//! against every candidate (the instrumented ratio), and the twins that must
//! fail: a shrunken bound fails the ratio test, a bound of zero (trust the
//! smallest approx) fails parity.

use super::deps::{clustered, gram, mirror, Result, Table};
use super::job::{Job, Prepared};
use super::rate::Plan;
use super::{gram_matrix, run};

fn prepared(t: &Table, plan: Plan, scale: f64) -> Result<(Prepared, Vec<f64>)> {
    let norms = gram::row_norm_bounds(t);
    Ok((Prepared::new(t, &norms, Some(plan), 0, Some(2), scale)?, norms))
}

fn batch(t: &Table, p: &Prepared, norms: &[f64], starts: &[u32], length: usize, instrument: bool) -> Result<super::Outcome> {
    let job = Job { starts, length, prefix: &[], from: 1, instrument };
    p.run(t, norms, &job, Some(2), None)
}

/// Both plans give the mirror's bytes for every start.
fn assert_parity(t: &Table, starts: &[u32], length: usize, what: &str) -> Result<()> {
    let want = mirror::run(t, starts, length)?;
    for plan in [Plan::Gram, Plan::Direct] {
        let (p, norms) = prepared(t, plan, 1.0)?;
        let got = batch(t, &p, &norms, starts, length, false)?.winners;
        for (i, s) in starts.iter().enumerate() {
            let r = i * length..(i + 1) * length;
            assert!(got[r.clone()] == want[r], "{what}: plan {} start {s} differs from the mirror", plan.name());
        }
    }
    Ok(())
}

#[test]
fn plans_equal_the_mirror_on_clustered_tables() -> Result<()> {
    for &(n, dim, clusters, noise) in &[(40, 3, 3, 0.3), (300, 16, 8, 0.2), (257, 384, 6, 0.1), (150, 512, 4, 0.05)] {
        let t = clustered(n, dim, clusters, n as u64 + dim as u64, noise)?;
        let starts: Vec<u32> = (0..n as u32).step_by(5).collect();
        assert_parity(&t, &starts, n, &format!("{n}x{dim}"))?;
    }
    Ok(())
}

#[test]
fn duplicate_rows_and_near_ties_go_to_the_smallest_index() -> Result<()> {
    // Rows repeated three times, and copies nudged by one ulp.
    let base = clustered(30, 16, 3, 7, 0.2)?;
    let mut data = Vec::new();
    for j in 0..30 {
        data.extend_from_slice(base.row(j));
        data.extend_from_slice(base.row(j));
        data.extend(base.row(j).iter().map(|&x| f32::from_bits(x.to_bits() + 1)));
    }
    let t = Table::from_rows("dups", 90, 16, data, None)?;
    let starts: Vec<u32> = (0..90).collect();
    assert_parity(&t, &starts, 90, "duplicates")
}

#[test]
fn the_subnormal_witness_keeps_gradual_underflow() -> Result<()> {
    let t = Table::from_rows("witness", 3, 1, vec![4.64458274e-39, 4.83849653e-05, 1.19138513e-05], None)?;
    assert_eq!(run(&t, &gram::row_norm_bounds(&t), &[0], 3, Some(1), None)?, vec![0, 2, 1]);
    assert_parity(&t, &[0, 1, 2], 3, "witness")
}

#[test]
fn a_resumed_batch_gives_the_uninterrupted_bytes() -> Result<()> {
    let t = clustered(200, 24, 5, 3, 0.2)?;
    let starts: Vec<u32> = vec![0, 17, 199, 64];
    for plan in [Plan::Gram, Plan::Direct] {
        let (p, norms) = prepared(&t, plan, 1.0)?;
        let whole = batch(&t, &p, &norms, &starts, 120, false)?.winners;
        let head = batch(&t, &p, &norms, &starts, 37, false)?.winners;
        let job = Job { starts: &starts, length: 120, prefix: &head, from: 37, instrument: false };
        assert!(p.run(&t, &norms, &job, Some(2), None)?.winners == whole, "plan {}", plan.name());
    }
    Ok(())
}

#[test]
fn the_bound_covers_every_candidate_and_its_shrunken_twin_does_not() -> Result<()> {
    let t = clustered(180, 384, 6, 11, 0.1)?;
    let starts: Vec<u32> = (0..180).step_by(9).collect();
    let (p, norms) = prepared(&t, Plan::Gram, 1.0)?;
    let ratio = batch(&t, &p, &norms, &starts, 180, true)?.counts.worst_ratio;
    assert!(ratio > 0.0 && ratio <= 1.0, "max |exact - approx| / bound = {ratio}");
    let (twin, norms) = prepared(&t, Plan::Gram, 0.01)?;
    let shrunk = batch(&t, &twin, &norms, &starts, 180, true)?.counts.worst_ratio;
    assert!(shrunk > 1.0, "a bound at 1% must be exceeded somewhere: ratio {shrunk}");
    Ok(())
}

/// Sequences of `got` that differ from `want`'s, `length` items each.
fn differing(got: &[u32], want: &[u32], length: usize) -> usize {
    got.chunks(length).zip(want.chunks(length)).filter(|(a, b)| a != b).count()
}

/// `n` rows of one value in [0.5, 2): every score is about |c|, and the
/// approx order and the contract's part at the last bits.
fn magnitudes(n: usize) -> Result<Table> {
    let mut x: u64 = 12345;
    let data = (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            0.5 + 1.5 * ((x >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect();
    Table::from_rows("magnitudes", n, 1, data, None)
}

#[test]
fn trusting_the_smallest_approx_breaks_parity() -> Result<()> {
    let t = magnitudes(64)?;
    let starts: Vec<u32> = (0..64).collect();
    let want = mirror::run(&t, &starts, 64)?;
    let (twin, norms) = prepared(&t, Plan::Gram, 0.0)?;
    let bad = differing(&batch(&t, &twin, &norms, &starts, 64, false)?.winners, &want, 64);
    assert!(bad > 0, "the twin (bound 0) must give other sequences than the mirror");
    let (p, norms) = prepared(&t, Plan::Gram, 1.0)?;
    assert_eq!(differing(&batch(&t, &p, &norms, &starts, 64, false)?.winners, &want, 64), 0);
    Ok(())
}

#[test]
fn g_prime_is_the_shaders_g_prime_bit_for_bit() -> Result<()> {
    let t = clustered(77, 33, 4, 2, 0.3)?;
    let g = gram_matrix::build(&t);
    assert!(g == gram::scaled_gram_rows(&t, 0, 77), "G' differs from contract::gram's");
    Ok(())
}

#[test]
fn the_batch_arguments_are_checked() -> Result<()> {
    let t = clustered(10, 3, 2, 1, 0.5)?;
    let (p, norms) = prepared(&t, Plan::Gram, 1.0)?;
    assert!(batch(&t, &p, &norms, &[0], 11, false).is_err());
    assert!(batch(&t, &p, &norms, &[10], 2, false).is_err_and(|e| e.to_string().contains("start 10")));
    let bad = Job { starts: &[3], length: 5, prefix: &[4, 1], from: 2, instrument: false };
    assert!(p.run(&t, &norms, &bad, None, None).is_err_and(|e| e.to_string().contains("not its start 3")));
    let twice = Job { starts: &[3], length: 5, prefix: &[3, 3], from: 2, instrument: false };
    assert!(p.run(&t, &norms, &twice, None, None).is_err());
    Ok(())
}

#[test]
fn choose_prefers_direct_for_tiny_jobs_and_gram_for_long_ones() {
    use super::rate::{choose, DEFAULT};
    assert_eq!(choose(&DEFAULT, 4000, 384, 50).0, Plan::Direct);
    assert_eq!(choose(&DEFAULT, 4000, 384, 512 * 199).0, Plan::Gram);
}
