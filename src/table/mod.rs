//! The inputs: an embedding table read from (and written to) its files,
//! `embeddings.json` (`json`), `.npy` with its sidecar (`npy`,
//! `npy_header`), the FP16 files (`fp16_file`, the JSON's shape they are
//! checked against: `fp16_shape`), chosen by extension
//! (`table_file`); synthetic tables (`synth`); and the whole `--starts`
//! grammar: ranges, lists, a file, a seeded sample (`starts`). The table itself is
//! `contract::table::Table`.
pub mod fp16_file;
pub mod fp16_shape;
pub mod json;
pub mod npy;
pub mod npy_header;
pub mod starts;
pub mod synth;
pub mod table_file;
