//! The binary cache through `binary_cache::BinaryCache`.
//! The checks live in divgpu's `fuzz` module (src/fuzz.rs), shared with the corpus replay.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| divgpu::fuzz::binary(data));
