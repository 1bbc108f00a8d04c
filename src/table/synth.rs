//! Clustered synthetic tables (docs/contract.md#reference-tables): k random unit centres, each
//! item a centre plus Gaussian noise, normalised. Never zeros or uniform
//! noise, which hide indexing bugs and near-ties.

use crate::contract::table::Table;
use crate::error::Result;

/// SplitMix64: tiny, fast and fully determined by its seed on every platform.
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

fn normalise(v: &mut [f64]) {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

pub fn clustered(n: usize, dim: usize, clusters: usize, seed: u64, noise: f64) -> Result<Table> {
    let mut rng = SplitMix64(seed);
    let clusters = clusters.max(1);
    let centres: Vec<Vec<f64>> = (0..clusters)
        .map(|_| {
            let mut c: Vec<f64> = (0..dim).map(|_| rng.normal()).collect();
            normalise(&mut c);
            c
        })
        .collect();
    let sigma = noise / (dim as f64).sqrt();
    let mut data = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let centre = &centres[(rng.next_u64() % clusters as u64) as usize];
        let mut v: Vec<f64> = centre.iter().map(|c| c + sigma * rng.normal()).collect();
        normalise(&mut v);
        data.extend(v.iter().map(|&x| x as f32));
    }
    let mut table = Table::from_rows("<synthetic>", n, dim, data, None)?;
    table.path = format!("<synthetic n={n} dim={dim} clusters={clusters} seed={seed}>");
    table.model = Some(format!("synthetic-clustered-k{clusters}-seed{seed}"));
    Ok(table)
}
