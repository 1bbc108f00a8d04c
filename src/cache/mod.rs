//! The outputs: the cache file (docs/formats.md#cache) in its two forms,
//! JSON (`json`, and its streaming reader `json_reader`) and binary (its
//! layout and writing `binary_cache`, its reader `binary_reader`); both
//! written through `cache_io` (`Form`, `CacheWriter`), read through
//! `cache_reader` (`CacheReader`) and turned into each other by `convert`;
//! the one header of a cache or a shard's part (`header`); the parts of a
//! sharded run and their merge (`shard`); seeded samples of a cache
//! (`sample`).
pub mod binary_cache;
pub mod binary_reader;
pub mod cache_io;
pub mod cache_reader;
pub mod convert;
pub mod header;
pub mod json;
pub mod json_reader;
pub mod sample;
pub mod shard;
