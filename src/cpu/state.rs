//! A sequence's centroid: the f64 running sum of the chosen rows (the order of
//! the steps) and its f32 rounding `c`, kept current after every add.

pub struct Centroid {
    csum: Vec<f64>,
    c: Vec<f32>,
}

impl Centroid {
    /// An empty sum: -0.0, so that the first add copies the start's row
    /// exactly (-0 + x = x for every x, -0 included), as the contract's
    /// `csum = (f64) E_s` does.
    pub fn new(dim: usize) -> Self {
        Centroid { csum: vec![-0.0; dim], c: vec![-0.0; dim] }
    }

    /// csum_d += (f64) E_wd, then c_d = (f32) csum_d, d ascending.
    #[inline(always)]
    pub fn add(&mut self, row: &[f32]) {
        for ((s, cd), &x) in self.csum.iter_mut().zip(self.c.iter_mut()).zip(row) {
            *s += x as f64;
            *cd = *s as f32;
        }
    }

    pub fn rounded(&self) -> &[f32] {
        &self.c
    }

    pub fn sum(&self) -> &[f64] {
        &self.csum
    }
}
