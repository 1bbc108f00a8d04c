//! The one header of a cache and of a shard's part (docs/formats.md#shard-parts):
//! `PartHeader`, the cache header (`json::CacheHeader`) and, in a part,
//! `shard`: the part's place among the parts and the whole run's starts.
//! Both forms (`json`, `binary_cache`) write and read it through `cache_io`.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::cache::json::{starts_sha256, CacheHeader};
use crate::error::{Error, Result};

/// What a part is: its place among the parts, and the whole run's starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
    /// How many starts the whole run has.
    pub starts: usize,
    /// sha256 of the whole run's starts (u32, little-endian, in order).
    pub starts_sha256: String,
}

/// A part's header: the cache header, then `shard` (absent in a plain cache).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartHeader {
    #[serde(flatten)]
    pub header: CacheHeader,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

impl PartHeader {
    /// Its sha256s in lower case, as divgpu writes them: a hash is compared
    /// case-insensitively (`3A7F...` is `3a7f...`), and a cache read back is
    /// written as a run would have written it.
    pub fn lowercase_hashes(&mut self) {
        self.header.embeddings_sha256.make_ascii_lowercase();
        if let Some(s) = &mut self.header.starts_sha256 {
            s.make_ascii_lowercase();
        }
        if let Some(shard) = &mut self.shard {
            shard.starts_sha256.make_ascii_lowercase();
        }
    }
}

/// Positions of the starts that part `index` of `count` holds, out of `total`.
pub fn block(total: usize, index: usize, count: usize) -> Result<Range<usize>> {
    if count == 0 {
        return Err(Error::Usage("shard: the number of parts must be at least 1".into()));
    }
    if index >= count {
        return Err(Error::Usage(format!("shard {index}/{count}: the index is 0-based and must be below the count")));
    }
    if count > total {
        return Err(Error::Usage(format!("shard {index}/{count}: {count} parts of {total} starts would leave a part empty")));
    }
    // u128: total x count cannot wrap.
    let at = |i: usize| (i as u128 * total as u128 / count as u128) as usize;
    Ok(at(index)..at(index + 1))
}

impl Shard {
    /// Part `index` of `count` of a run of `all` starts.
    pub fn new(index: usize, count: usize, all: &[u32]) -> Result<Shard> {
        block(all.len(), index, count)?;
        Ok(Shard { index, count, starts: all.len(), starts_sha256: starts_sha256(all) })
    }

    /// The positions of this part's starts in the whole run's list.
    pub fn block(&self) -> Result<Range<usize>> {
        block(self.starts, self.index, self.count)
    }
}
