//! `embeddings.json` through `Table::parse_json`.
//! The checks live in divgpu's `contract::fuzz`, shared with the corpus replay.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| divgpu::contract::fuzz::embeddings_json(data));
