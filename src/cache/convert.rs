//! `divgpu convert`: a cache turned into the other form, streaming.

use sha2::{Digest, Sha256};

use crate::cache::cache_io::{CacheWriter, Form};
use crate::cache::cache_reader::{batch_sequences, stop_if_interrupted, Batch, CacheReader};
use crate::durable::safe_write::{check_files, Named};
use crate::error::Result;
use crate::util::hex;

/// What `convert` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    pub form: Form,
    pub sequences: usize,
    pub length: usize,
    /// The input was version 1: the output is version 2, its starts counted
    /// and hashed and its `divgpu_version` this program's.
    pub upgraded: bool,
}

/// Writes the cache at `input` to `output` in `form`, streaming: the bytes a
/// run writing that form would have written (the header's fields, the
/// writer's version and a part's `shard` included, are kept). A version 1
/// input becomes version 2 (`Converted::upgraded`). The output is checked
/// first (`safe_write::check_files`) and written atomically.
pub fn convert(input: &str, output: &str, form: Form) -> Result<Converted> {
    let outputs = [Named { option: "--out", path: output }];
    check_files(&outputs, &[Named { option: "the input", path: input }], form == Form::Json)?;
    let mut reader = CacheReader::open(input)?;
    let mut part = reader.part().clone();
    let upgraded = part.header.version < 2;
    if upgraded {
        let mut firsts = Sha256::new();
        let count = CacheReader::open(input)?.for_each_start(|_, s| {
            firsts.update(s.to_le_bytes());
            Ok(())
        })?;
        part.header = part.header.with_starts(count, &hex(&firsts.finalize()));
    }
    let mut writer = CacheWriter::create_streamed(output, &part, form, |push| {
        CacheReader::open(input)?.for_each_start(|_, s| push(s)).map(|_| ())
    })?;
    let mut batch = Batch::default();
    while reader.next_batch(batch_sequences(part.header.length), &mut batch)? > 0 {
        stop_if_interrupted()?;
        writer.append(&batch.sequences)?;
    }
    let sequences = writer.done();
    writer.finish()?;
    Ok(Converted { form, sequences, length: part.header.length, upgraded })
}

