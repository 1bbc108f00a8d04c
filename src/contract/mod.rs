//! The contract of SPEC.md on the host: tables and their validation,
//! `inv_norm`, FP16 conversion, synthetic data, the CPU mirror and the cache
//! file. Nothing here needs a GPU.
pub mod atomic;
pub mod cache;
pub mod fp16;
pub mod fuzz;
pub mod gram;
pub mod mirror;
pub mod synth;
pub mod table;
