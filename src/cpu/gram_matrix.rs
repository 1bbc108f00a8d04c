//! G' = G diag(inv_norm) on the host, as `shaders/gram.md` section 3(d)
//! allows: each entry the f64 sum of D exact products of two f32 (any order:
//! the bound's gamma64(D) |E_i| |E_j| holds for every summation order, and an
//! f64 fma of an exact product is one rounding of the sum), times inv_j in
//! f64, rounded once to f32. Computed in tiles of 4 rows by 8 columns (AVX2)
//! or 16 (AVX-512), the table transposed to f64 columns so that a tile's
//! columns are one or two vectors.

use rayon::prelude::*;

use super::deps::Table;

const ROWS: usize = 4;
/// Columns padded to a multiple of the widest tile.
const PAD: usize = 16;
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
    let n_pad = t.n.div_ceil(PAD) * PAD;
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
fn tile<const COLS: usize>(w: &Wide, dim: usize, rows: [usize; ROWS], j0: usize) -> [[f64; COLS]; ROWS] {
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

/// G' as the tasks write it: every task writes its own rows' entries at and
/// right of its first row, and their mirror images below its rows.
///
/// Disjointness (why the shared writes are sound): the task of rows I =
/// [s, s + k) writes (i, j) for i in I, j >= s, and (j, i) for i in I,
/// j >= s + k. For another task K = [s', s' + k') with s' >= s + k, an entry
/// (i, j) of I is never K's (k, j), as i is not in K, nor K's (j', k) for
/// j' >= s' + k', as i < s'; an entry (j, i) of I is not K's (k, j'), as
/// j' = i < s', nor K's (j', k), as i is not in K.
struct Out {
    ptr: *mut f32,
    n: usize,
}

// SAFETY: the tasks write disjoint entries (above), and `build` reads the
// matrix only after every task has finished.
unsafe impl Sync for Out {}

impl Out {
    /// # Safety
    /// `i, j < n`, and no other thread writes or reads entry (i, j) meanwhile.
    #[inline(always)]
    unsafe fn set(&self, i: usize, j: usize, x: f32) {
        // SAFETY: in bounds (the caller's i, j < n), and not shared (above).
        unsafe { *self.ptr.add(i * self.n + j) = x };
    }
}

/// One tile's results: G'_ij for the task's rows, and G'_ji past them.
#[inline(always)]
fn store<const COLS: usize>(out: &Out, inv: &[f64], rows: [usize; ROWS], live: usize, j0: usize, own_end: usize, acc: &[[f64; COLS]; ROWS]) {
    for r in 0..live {
        for k in 0..COLS.min(out.n.saturating_sub(j0)) {
            let (i, j) = (rows[r], j0 + k);
            // SAFETY: i, j < n, and (i, j), (j, i) for j >= own_end are this task's alone (`Out`).
            unsafe {
                out.set(i, j, (acc[r][k] * inv[j]) as f32);
                if j >= own_end {
                    out.set(j, i, (acc[r][k] * inv[i]) as f32);
                }
            }
        }
    }
}

/// Rows `first .. first + count` of G' and their mirror images.
#[inline(always)]
fn task<const COLS: usize>(t: &Table, inv: &[f64], w: &Wide, first: usize, count: usize, out: &Out) {
    for jb in (first..w.n_pad).step_by(COL_BLOCK) {
        let jend = (jb + COL_BLOCK).min(w.n_pad);
        for r0 in (0..count).step_by(ROWS) {
            // Rows past the task's end repeat its last row; their results are dropped.
            let rows = std::array::from_fn(|r| first + (r0 + r).min(count - 1));
            let live = ROWS.min(count - r0);
            for j0 in (jb..jend).step_by(COLS) {
                let acc = tile::<COLS>(w, t.dim, rows, j0);
                store(out, inv, rows, live, j0, first + count, &acc);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn task_fma(t: &Table, inv: &[f64], w: &Wide, first: usize, count: usize, out: &Out) {
    task::<8>(t, inv, w, first, count, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn task_avx512(t: &Table, inv: &[f64], w: &Wide, first: usize, count: usize, out: &Out) {
    task::<16>(t, inv, w, first, count, out)
}

fn task_best(t: &Table, inv: &[f64], w: &Wide, first: usize, count: usize, out: &Out) {
    #[cfg(target_arch = "x86_64")]
    if super::has_fma() {
        // SAFETY: the CPU supports the features the functions were compiled for.
        unsafe {
            if std::arch::is_x86_feature_detected!("avx512f") {
                task_avx512(t, inv, w, first, count, out)
            } else {
                task_fma(t, inv, w, first, count, out)
            }
        };
        return;
    }
    task::<8>(t, inv, w, first, count, out)
}

/// G' as N x N f32, row-major: `g[i * n + j] = fl32(G^_ij * inv_j)`. Each
/// G^_ij = G^_ji is computed once (the same products summed in the same
/// order either way) and stored twice.
pub fn build(t: &Table) -> Vec<f32> {
    let w = widen(t);
    let mut inv: Vec<f64> = t.inv_norm.iter().map(|&x| x as f64).collect();
    inv.resize(w.n_pad, 0.0);
    let mut g = vec![0.0f32; t.n * t.n];
    let out = Out { ptr: g.as_mut_ptr(), n: t.n };
    (0..t.n.div_ceil(ROW_TASK)).into_par_iter().for_each(|k| {
        let first = k * ROW_TASK;
        task_best(t, &inv, &w, first, ROW_TASK.min(t.n - first), &out);
    });
    g
}
