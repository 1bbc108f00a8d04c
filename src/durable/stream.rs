//! Streams: `-`, `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` and
//! `/proc/PID/fd/N` name a descriptor, written where it stands (appending
//! where it was opened to append), never a file replaced.

use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::fs::MetadataExt;

use crate::durable::folder::stat_of;
use crate::error::{Error, Result};

/// The name an output given as `-` has: standard output.
pub const STDOUT: &str = "-";
/// The descriptor a stream's path names: `-` and `/dev/stdout` 1,
/// `/dev/stderr` 2, `/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N`
/// and `/proc/PID/fd/N` N (PID this process, or another one whose
/// descriptor N is this process's N: the same open file, inherited). None:
/// the path is not a stream; Err: it names a descriptor divgpu cannot write.
pub fn stream_descriptor(path: &str) -> Option<std::result::Result<i32, String>> {
    let number = |s: &str| s.parse::<i32>().ok().filter(|n| *n >= 0 && s.bytes().all(|b| b.is_ascii_digit()));
    match path {
        STDOUT | "/dev/stdout" => return Some(Ok(1)),
        "/dev/stderr" => return Some(Ok(2)),
        "/dev/stdin" => return Some(Err("standard input is not an output".into())),
        _ => {}
    }
    let rest = path.strip_prefix("/dev/fd/").or_else(|| path.strip_prefix("/proc/self/fd/")).or_else(|| path.strip_prefix("/proc/thread-self/fd/"));
    if let Some(n) = rest {
        return Some(number(n).ok_or_else(|| "not a descriptor number".to_string()));
    }
    let (pid, n) = path.strip_prefix("/proc/")?.split_once("/fd/")?;
    let (pid, n) = (number(pid)?, number(n)?);
    if pid as u32 == std::process::id() {
        return Some(Ok(n));
    }
    // Another process's descriptor: written only where it is ours too.
    let theirs = std::fs::metadata(path).ok();
    let ours = stat_of(n).ok();
    match (theirs, ours) {
        (Some(t), Some(o)) if t.dev() == o.dev && t.ino() == o.ino => Some(Ok(n)),
        _ => Some(Err(format!(
            "descriptor {n} of process {pid}, which this process does not share; give -, or a descriptor this command inherits"
        ))),
    }
}

/// Whether `path` is written as a stream (`-` or a descriptor's name).
pub fn is_stream(path: &str) -> bool {
    stream_descriptor(path).is_some()
}

/// The stream `path` names (`is_stream`), as a `File`: a duplicate of the
/// descriptor, open for writing (checked), written where it stands (its
/// own offset, or the end where it was opened to append).
pub fn stream_file(path: &str) -> Result<File> {
    let shown = if path == STDOUT { "standard output".to_string() } else { path.to_string() };
    let fd = match stream_descriptor(path) {
        Some(Ok(fd)) => fd,
        Some(Err(why)) => return Err(Error::input(shown, why)),
        None => return Err(Error::input(shown, "not a stream")),
    };
    if fd == 1 {
        std::io::stdout().flush().map_err(|e| Error::io(&shown, e))?;
    }
    // SAFETY: F_GETFL on any number: EBADF where it is not open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(Error::input(shown, format!("descriptor {fd} is not open")));
    }
    if flags & libc::O_ACCMODE == libc::O_RDONLY {
        return Err(Error::input(shown, format!("descriptor {fd} is open for reading only")));
    }
    // SAFETY: a descriptor just checked open; the duplicate is owned by the File.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(Error::io(shown, std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just made, owned from here.
    Ok(unsafe { File::from_raw_fd(dup) })
}

/// Standard output as a `File` (a duplicate of descriptor 1).
pub fn stdout_file() -> Result<File> {
    stream_file(STDOUT)
}

