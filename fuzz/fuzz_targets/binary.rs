//! The binary cache through `binary_cache::BinaryCache`.
//! The checks live in divgpu's `contract::fuzz`, shared with the corpus replay.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| divgpu::contract::fuzz::binary(data));
