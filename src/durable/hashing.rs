//! The one hashing reader and writer: bytes pass through unchanged while
//! their sha256 (and, read, their count) is kept, so a file is checked in
//! the same pass that reads or writes it (`.npy` tables, checkpoint batches).

use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

/// A reader that hashes and counts what passes through it.
pub struct Hashing<R> {
    pub inner: R,
    pub hasher: Sha256,
    pub count: u64,
}

impl<R> Hashing<R> {
    pub fn new(inner: R) -> Self {
        Hashing { inner, hasher: Sha256::new(), count: 0 }
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let got = self.inner.read(buf)?;
        self.hasher.update(&buf[..got]);
        self.count += got as u64;
        Ok(got)
    }
}

/// A writer that hashes what passes through it.
pub struct HashingWriter<W> {
    pub inner: W,
    pub hasher: Sha256,
}

impl<W> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter { inner, hasher: Sha256::new() }
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let put = self.inner.write(buf)?;
        self.hasher.update(&buf[..put]);
        Ok(put)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
