//! `embeddings_fp16.meta.json`, a NUL byte, then `embeddings_fp16.bin`, through `fp16::parse`.
//! The checks live in divgpu's `fuzz` module (src/fuzz.rs), shared with the corpus replay.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| divgpu::fuzz::fp16(data));
