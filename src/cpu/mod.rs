//! `--method cpu`: the contract (docs/contract.md#fp32-chain) on the host,
//! fast, with the bytes of the CPU mirror (`contract::mirror`, the oracle).
//!
//! **The filter.** The Gram method of docs/contract.md#gram, host side: G' =
//! G diag(inv_norm), G = E Eᵀ from f64 products and f64 sums rounded once to
//! f32, is built once (`gram_matrix.rs`, blocked, on every core). Each
//! sequence keeps `approx_j`, the f64 sum of the chosen items' rows of G'
//! (one row added a step: N adds, a vector loop), and each step one bound
//! B-hat covers `|score_j - approx_j|` for every unchosen j (`bound.rs`, term
//! for term `step_bound` of `shaders/gram.comp`, from the job factors of
//! `contract::gram::bound_factors`). The window `{ j : approx_j <= min approx
//! + 2 B-hat }` holds the contract's winner and every candidate tied with it
//! (the window theorem), so rescoring the window with the contract's own
//! chain (`exact.rs`: one f32 fma chain per candidate, d ascending, times
//! inv_j; smaller score, then smaller index) gives the contract's winner; a
//! window of one is the winner with no chain at all. The proof, reviewed like
//! code, is `shaders/gram.md` (sections 2-5): one proof, two implementations
//! (the shader and this). The table must pass the same no-overflow
//! certificate (`contract::gram::check_admissible`). The host keeps gradual
//! underflow (nothing here sets flush-to-zero), so the bound's eta terms are
//! the proof's own.
//!
//! **The direct path.** Where G does not fit (N² x 4 bytes over a quarter of
//! the memory), the certificate refuses the table, or the job is too short
//! for G's build to pay (`rate.rs` weighs the two), every step scores every
//! unchosen candidate with the contract's chain, 32 candidates side by side
//! (`exact.rs`), as the mirror does.
//!
//! Sequences run in parallel (rayon), each on one thread; the hot loops are
//! compiled for AVX2 and FMA where the CPU has them (checked at run time) and
//! are plain loops over contiguous slices that LLVM vectorizes.

mod bound;
mod deps;
mod exact;
mod filter;
mod gram_matrix;
mod job;
pub mod measure;
pub mod rate;
mod simd;
mod state;
#[cfg(test)]
mod tests;

pub use filter::Counts;
pub use job::{run, Job, Outcome, Prepared};
pub use rate::Plan;

/// Whether the CPU runs the AVX2 + FMA builds of the hot loops.
pub(crate) fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
