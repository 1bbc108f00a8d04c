//! `BatchSink`, what the Lua handle drives, and `StdoutCache`, the sink of
//! `run --out -` (the cache streamed to standard output, no checkpoint).



use crate::cache::json::CacheHeader;
use crate::cache::cache_io::{CacheWriter, Form};
use crate::cache::header::{PartHeader, Shard};
use crate::error::Result;

/// What the Lua handle drives: the checkpoint, or the stream to standard output.
pub trait BatchSink: Send {
    /// Commits the next whole sequences (`[count × length]`, in the order of the starts).
    fn append(&mut self, sequences: &[u32]) -> Result<()>;
    /// Writes the finished cache.
    fn finish(self: Box<Self>) -> Result<()>;
    fn done(&self) -> usize;
    fn total(&self) -> usize;
    fn path(&self) -> String;
    /// Lines for the user: a stale lock taken over, batches recomputed.
    fn notes(&self) -> Vec<String>;
}

/// `run --out -`: the cache streamed to standard output, batch by batch.
pub struct StdoutCache {
    writer: CacheWriter,
}

impl StdoutCache {
    pub fn new(header: &CacheHeader, shard: Option<Shard>, starts: &[u32]) -> Result<StdoutCache> {
        StdoutCache::new_form(header, shard, starts, Form::Json)
    }

    /// The cache of the job (`header`, its `shard`, `starts`) in `form` on standard output.
    pub fn new_form(header: &CacheHeader, shard: Option<Shard>, starts: &[u32], form: Form) -> Result<StdoutCache> {
        StdoutCache::to_stream(crate::durable::safe_write::STDOUT, header, shard, starts, form)
    }

    /// `new_form` on the stream `out` names (`-`, `/dev/stdout`, `/dev/fd/N`...:
    /// `safe_write::is_stream`).
    pub fn to_stream(out: &str, header: &CacheHeader, shard: Option<Shard>, starts: &[u32], form: Form) -> Result<StdoutCache> {
        let h = CacheHeader::new(&header.contract, header.num_items, header.dim, header.length, &header.embeddings_sha256, starts);
        let writer = CacheWriter::create(out, &PartHeader { header: h, shard }, form, starts)?;
        Ok(StdoutCache { writer })
    }
}

impl BatchSink for StdoutCache {
    fn append(&mut self, sequences: &[u32]) -> Result<()> {
        self.writer.append(sequences)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        self.writer.finish()
    }

    fn done(&self) -> usize {
        self.writer.done()
    }

    fn total(&self) -> usize {
        self.writer.total()
    }

    fn path(&self) -> String {
        "standard output".into()
    }

    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}
