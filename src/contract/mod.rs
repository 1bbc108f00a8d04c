//! The contract of SPEC.md on the host: tables and their validation,
//! `inv_norm`, FP16 conversion, synthetic data, the CPU mirror, the cache
//! file and the checkpoint of an interrupted run. Nothing here needs a GPU.
pub mod atomic;
pub mod cache;
pub mod checkpoint;
pub mod fp16;
pub mod fuzz;
pub mod gram;
pub mod mirror;
pub mod subnormal;
pub mod synth;
pub mod table;
