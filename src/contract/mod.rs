//! The contract's arithmetic on the host (docs/contract.md), nothing else:
//! the table in memory and its `inv_norm` (`table`), FP16 rounding (`fp16`),
//! the CPU mirror of the fp32 chain (`mirror`), the certificates that let a
//! kernel skip work (`gram`, `tensor`, `subnormal`), and `verify`, which
//! re-checks a cache against the mirror (reading the cache through
//! `cache::cache_io`). Files are read and written by `table/` (inputs),
//! `cache/` (outputs) and `durable/`. Nothing here needs a GPU.
pub mod fp16;
pub mod gram;
pub mod mirror;
pub mod subnormal;
pub mod table;
pub mod tensor;
pub mod verify;
