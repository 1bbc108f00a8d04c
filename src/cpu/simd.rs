//! The Gram step's add pass with AVX2 intrinsics: `approx_j += G'_wj` and,
//! per lane, the smallest value, its index and the second smallest, exactly
//! as `filter::add_and_least`'s portable loop computes them (the tests
//! compare the two). Indices ride in f64 lanes (exact below 2^53).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Per lane (8): smallest, second smallest, index of the smallest.
pub type Lanes = ([f64; 8], [f64; 8], [u64; 8]);

/// # Safety
/// The CPU has AVX2 (the caller checks), and `approx.len() == g.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn add_and_lanes(approx: &mut [f64], g: &[f32]) -> Lanes {
    let inf = _mm256_set1_pd(f64::INFINITY);
    let (mut m1, mut m2) = ([inf; 2], [inf; 2]);
    let mut i1 = [_mm256_setzero_pd(); 2];
    let mut at = [_mm256_setr_pd(0.0, 1.0, 2.0, 3.0), _mm256_setr_pd(4.0, 5.0, 6.0, 7.0)];
    let eight = _mm256_set1_pd(8.0);
    let whole = approx.len() / 8 * 8;
    for c in (0..whole).step_by(8) {
        for h in 0..2 {
            let j = c + 4 * h;
            // SAFETY: j + 4 <= whole <= len of both slices.
            let (pa, pg) = unsafe { (approx.as_mut_ptr().add(j), g.as_ptr().add(j)) };
            // SAFETY: as above; unaligned loads and stores.
            let x = unsafe { _mm256_add_pd(_mm256_loadu_pd(pa), _mm256_cvtps_pd(_mm_loadu_ps(pg))) };
            // SAFETY: as above.
            unsafe { _mm256_storeu_pd(pa, x) };
            let lt = _mm256_cmp_pd::<_CMP_LT_OQ>(x, m1[h]);
            let up = _mm256_blendv_pd(x, m1[h], lt);
            m2[h] = _mm256_min_pd(up, m2[h]);
            i1[h] = _mm256_blendv_pd(i1[h], at[h], lt);
            m1[h] = _mm256_blendv_pd(m1[h], x, lt);
            at[h] = _mm256_add_pd(at[h], eight);
        }
    }
    let mut out: Lanes = ([0.0; 8], [0.0; 8], [0; 8]);
    let mut idx = [0.0f64; 8];
    for h in 0..2 {
        // SAFETY: each array holds 8 f64; 4 are written at 4 * h.
        unsafe {
            _mm256_storeu_pd(out.0.as_mut_ptr().add(4 * h), m1[h]);
            _mm256_storeu_pd(out.1.as_mut_ptr().add(4 * h), m2[h]);
            _mm256_storeu_pd(idx.as_mut_ptr().add(4 * h), i1[h]);
        }
    }
    for k in 0..8 {
        out.2[k] = idx[k] as u64;
    }
    tail(approx, g, whole, &mut out);
    out
}

/// The last `len % 8` candidates, one lane each, as the portable loop does.
#[inline(always)]
pub fn tail(approx: &mut [f64], g: &[f32], whole: usize, l: &mut Lanes) {
    for (k, (x, &y)) in approx[whole..].iter_mut().zip(&g[whole..]).enumerate() {
        *x += y as f64;
        if *x < l.0[k] {
            l.1[k] = l.0[k];
            l.0[k] = *x;
            l.2[k] = (whole + k) as u64;
        } else if *x < l.1[k] {
            l.1[k] = *x;
        }
    }
}
