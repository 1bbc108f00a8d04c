//! The contract (docs/contract.md) on the host: tables and their validation,
//! `inv_norm`, FP16 conversion, synthetic data, the CPU mirror, the cache
//! file in its two forms (`cache` JSON, `binary_cache`, both streamed through
//! `cache_io`), the checkpoint of an interrupted run, the parts of a sharded
//! run (split and merge), seeded samples of a cache (`sample`), and starts
//! from a file or a seeded sample (`starts`). Nothing here needs a GPU.
pub mod atomic;
pub mod binary_cache;
pub mod cache;
pub mod cache_io;
pub mod checkpoint;
pub mod fp16;
pub mod fuzz;
pub mod gram;
pub mod lock;
pub mod mirror;
pub mod npy;
pub mod npy_header;
pub mod safe_write;
pub mod sample;
pub mod shard;
pub mod starts;
pub mod subnormal;
pub mod synth;
pub mod tensor;
pub mod verify;
pub mod table;
pub mod table_file;
#[cfg(test)]
mod test_support;
