//! Atomic file writes: a temporary file in the same folder, renamed into place
//! only after it was written and flushed completely, so an interrupted run
//! never leaves a truncated output and never touches an existing one.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use crate::error::{Error, Result};

pub fn write_atomically(
    path: &str,
    write: impl FnOnce(&mut BufWriter<File>) -> std::result::Result<(), Box<dyn std::error::Error>>,
) -> Result<()> {
    let target = Path::new(path);
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::input(path, format!("folder {} does not exist", dir.display())));
    }
    let file_name = target.file_name().ok_or_else(|| Error::input(path, "not a file path"))?;
    let tmp = dir.join(format!(".{}.{}.tmp", file_name.to_string_lossy(), std::process::id()));
    let tmp_str = tmp.display().to_string();
    let result = (|| -> Result<()> {
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp_str, e))?;
        let mut w = BufWriter::new(file);
        // A crate error raised by `write` (merge: a part found bad while it
        // is copied) is passed on as it is; any other is a failed write.
        write(&mut w).map_err(|e| match e.downcast::<Error>() {
            Ok(e) => *e,
            Err(e) => Error::input(path, format!("write failed: {e}")),
        })?;
        let file = w.into_inner().map_err(|e| Error::io(&tmp_str, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(&tmp_str, e))?;
        std::fs::rename(&tmp, target).map_err(|e| Error::io(path, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
