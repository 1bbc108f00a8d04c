//! G' = G diag(inv_norm) on the host, as `shaders/gram.md` section 3(d)
//! allows: each entry the f64 sum of D exact products of two f32 (any order:
//! the bound's gamma64(D) |E_i| |E_j| holds for every summation order, and an
//! f64 fma of an exact product is one rounding of the sum), times inv_j in
//! f64, rounded once to f32. Computed in tiles of 4 rows by 8 columns, the
//! table transposed to f64 columns so that the 8 columns are one vector.

use rayon::prelude::*;

use super::deps::Table;

const ROWS: usize = 4;
const COLS: usize = 8;
/// Columns a tile pass keeps in cache: 256 columns x D f64.
const COL_BLOCK: usize = 256;
/// Rows of G' one task writes.
const ROW_TASK: usize = 16;

/// The table as f64, row-major (rows) and transposed with padded columns (cols).
struct Wide {
    n_pad: usize,
    rows: Vec<f64>,
    cols: Vec<f64>,
}

fn widen(t: &Table) -> Wide {
    let n_pad = t.n.div_ceil(COLS) * COLS;
    let rows: Vec<f64> = t.data.iter().map(|&x| x as f64).collect();
    let mut cols = vec![0.0f64; t.dim * n_pad];
    for j in 0..t.n {
        for (d, &x) in t.row(j).iter().enumerate() {
            cols[d * n_pad + j] = x as f64;
        }
    }
    Wide { n_pad, rows, cols }
}

/// The f64 dot products of rows `i0 .. i0 + ROWS` (clamped to n by the
/// caller's padding) with columns `j0 .. j0 + COLS`.
#[inline(always)]
fn tile(w: &Wide, dim: usize, rows: [usize; ROWS], j0: usize) -> [[f64; COLS]; ROWS] {
    let mut acc = [[0.0f64; COLS]; ROWS];
    for d in 0..dim {
        let b = &w.cols[d * w.n_pad + j0..d * w.n_pad + j0 + COLS];
        for r in 0..ROWS {
            let a = w.rows[rows[r] * dim + d];
            for k in 0..COLS {
                acc[r][k] = a.mul_add(b[k], acc[r][k]);
            }
        }
    }
    acc
}

/// Rows `first ..` of G' into `out` (whole rows of n).
#[inline(always)]
fn task(t: &Table, inv: &[f64], w: &Wide, first: usize, out: &mut [f32]) {
    let (n, dim) = (t.n, t.dim);
    let count = out.len() / n;
    for jb in (0..w.n_pad).step_by(COL_BLOCK) {
        let jend = (jb + COL_BLOCK).min(w.n_pad);
        for r0 in (0..count).step_by(ROWS) {
            // Rows past the task's end repeat its last row; their results are dropped.
            let rows = std::array::from_fn(|r| first + (r0 + r).min(count - 1));
            for j0 in (jb..jend).step_by(COLS) {
                let acc = tile(w, dim, rows, j0);
                for r in 0..ROWS.min(count - r0) {
                    let row = &mut out[(r0 + r) * n..(r0 + r + 1) * n];
                    for k in 0..COLS.min(n.saturating_sub(j0)) {
                        row[j0 + k] = (acc[r][k] * inv[j0 + k]) as f32;
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn task_fma(t: &Table, inv: &[f64], w: &Wide, first: usize, out: &mut [f32]) {
    task(t, inv, w, first, out)
}

fn task_best(t: &Table, inv: &[f64], w: &Wide, first: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_fma() {
        // SAFETY: the CPU supports the features the function was compiled for.
        unsafe { task_fma(t, inv, w, first, out) };
        return;
    }
    task(t, inv, w, first, out)
}

/// G' as N x N f32, row-major: `g[i * n + j] = fl32(G^_ij * inv_j)`.
pub fn build(t: &Table) -> Vec<f32> {
    let w = widen(t);
    let mut inv: Vec<f64> = t.inv_norm.iter().map(|&x| x as f64).collect();
    inv.resize(w.n_pad, 0.0);
    let mut g = vec![0.0f32; t.n * t.n];
    g.par_chunks_mut(ROW_TASK * t.n)
        .enumerate()
        .for_each(|(k, out)| task_best(t, &inv, &w, k * ROW_TASK, out));
    g
}
