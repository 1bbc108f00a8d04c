//! The one way divgpu writes a file. Every output of every command
//! (the cache, a part, a merge, a table, the FP16 files, a chart, the stats,
//! the checkpoint's state) goes through here:
//!
//! - the target is resolved first: a symbolic link is followed (the link
//!   stays, its target gets the bytes), and a target that exists but is not
//!   a regular file (a folder, a FIFO, a device node, a socket) is refused, as
//!   is a folder that is missing or not writable: before any work, since the
//!   CLI checks every output with `check_files` first;
//! - the bytes go to a temporary file created exclusively (`O_EXCL`, so a
//!   planted link is never followed) under an unpredictable name in the
//!   resolved target's folder, `.divgpu-tmp.HOST.PID.RANDOM`;
//! - the file is synced, renamed onto the target, and the folder synced, so
//!   the target is the old file or the whole new one, even after a crash;
//! - a temporary left by a killed command (its host is this one and its pid is
//!   gone) is removed by the next command that writes in that folder.
//!
//! `-` is standard output: the bytes are streamed there (no temporary).
//! `check_files` also refuses an output that is the same file as an input or
//! as another output (the same device and inode, or the same resolved path).

use std::ffi::CString;
use std::fs::{self, File, Permissions};
use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The name an output given as `-` has: standard output.
pub const STDOUT: &str = "-";
/// How every temporary file's name starts (then host, pid and random letters).
pub const TEMP_PREFIX: &str = ".divgpu-tmp.";
/// Symbolic links followed before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Where an output's bytes go.
#[derive(Debug, Clone)]
pub struct Target {
    /// The path as given.
    pub given: String,
    /// The file written: the given path with every symbolic link resolved.
    pub file: PathBuf,
    /// Its folder (where the temporary file is made).
    pub folder: PathBuf,
    /// Whether `given` is a symbolic link (then `file` is its target).
    pub through_link: bool,
}

impl Target {
    /// A file beside the target named like it plus `suffix` (`OUT.lock`,
    /// `OUT.checkpoint`): beside the given path, or beside the link's target
    /// when the output is a link (so that the file renamed onto the target is
    /// on its file system).
    pub fn sibling(&self, suffix: &str) -> PathBuf {
        if self.through_link {
            let mut name = self.file.clone().into_os_string();
            name.push(suffix);
            PathBuf::from(name)
        } else {
            PathBuf::from(format!("{}{suffix}", self.given))
        }
    }

    /// The given path, and the resolved one where a link was followed.
    pub fn describe(&self) -> String {
        if self.through_link {
            format!("{} (a link to {})", self.given, self.file.display())
        } else {
            self.given.clone()
        }
    }
}

/// The file a path names once every symbolic link is followed: the links of
/// the path itself (not only of its folders, which the kernel follows), so a
/// dangling link names the file it would create.
fn follow_links(path: &str) -> Result<(PathBuf, bool)> {
    let mut p = PathBuf::from(path);
    for hop in 0..=MAX_LINKS {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                if hop == MAX_LINKS {
                    return Err(Error::input(path, "too many levels of symbolic links"));
                }
                let link = fs::read_link(&p).map_err(|e| Error::io(path, e))?;
                let base = p.parent().map(Path::to_path_buf).unwrap_or_default();
                p = if link.is_absolute() { link } else { base.join(link) };
            }
            Ok(_) => return Ok((p, hop > 0)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((p, hop > 0)),
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Err(Error::input(path, "too many levels of symbolic links"))
}

/// What a file that is not a regular file is, for the refusal.
fn kind_of(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() || t.is_block_device() {
        "a device node"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Resolves an output path (not `-`) and checks, before any work, that it can
/// be written the safe way: its folder exists and is writable, and what is at
/// the path now, if anything, is a regular file.
pub fn resolve(path: &str) -> Result<Target> {
    if path.is_empty() {
        return Err(Error::input("''", "an empty path"));
    }
    if path.ends_with('/') {
        return Err(Error::input(path, "ends with '/': it names a folder, not a file"));
    }
    let (followed, through_link) = follow_links(path)?;
    let Some(name) = followed.file_name().map(|n| n.to_owned()) else {
        return Err(Error::input(path, "not a file path (it names a folder)"));
    };
    let parent = match followed.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let folder = match fs::canonicalize(&parent) {
        Ok(f) if f.is_dir() => f,
        Ok(f) => return Err(Error::input(path, format!("{} is not a folder", f.display()))),
        Err(_) => return Err(Error::input(path, format!("folder {} does not exist", parent.display()))),
    };
    let target = Target { given: path.to_string(), file: folder.join(&name), folder, through_link };
    if let Ok(meta) = fs::symlink_metadata(&target.file) {
        if !meta.file_type().is_file() {
            return Err(Error::input(
                target.describe(),
                format!("{}, not a regular file: divgpu writes only regular files (and never replaces anything else)", kind_of(&meta)),
            ));
        }
    }
    check_writable(&target)?;
    Ok(target)
}

/// The folder accepts a new file and a rename (write and search permission,
/// for the effective user: root passes the mode bits, but not a read-only
/// file system), and an existing target in a sticky folder (/tmp) is ours.
fn check_writable(t: &Target) -> Result<()> {
    let folder = CString::new(t.folder.as_os_str().as_bytes())
        .map_err(|_| Error::input(t.describe(), "the folder's path holds a NUL byte"))?;
    // SAFETY: `folder` is a valid NUL-terminated string for the call's duration.
    let rc = unsafe { libc::faccessat(libc::AT_FDCWD, folder.as_ptr(), libc::W_OK | libc::X_OK, libc::AT_EACCESS) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        let why = match e.raw_os_error() {
            Some(libc::EROFS) => "is on a read-only file system".to_string(),
            Some(libc::EACCES) | Some(libc::EPERM) => "is not writable (permission denied)".to_string(),
            _ => format!("cannot be written ({e})"),
        };
        return Err(Error::input(t.describe(), format!("folder {} {why}", t.folder.display())));
    }
    let folder_meta = fs::metadata(&t.folder).map_err(|e| Error::io(t.folder.display().to_string(), e))?;
    if let Ok(meta) = fs::metadata(&t.file) {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let sticky = folder_meta.mode() & libc::S_ISVTX != 0;
        if sticky && me != 0 && meta.uid() != me && folder_meta.uid() != me {
            return Err(Error::input(
                t.describe(),
                "belongs to another user in a sticky folder: it cannot be replaced (write elsewhere)",
            ));
        }
    }
    Ok(())
}

/// This machine's name, as temporaries and locks record it (characters other
/// than letters, digits, '-' and '_' become '_', so the name parses back).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = if rc == 0 { String::from_utf8_lossy(&buf[..len]).into_owned() } else { String::new() };
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if clean.is_empty() { "unknown-host".into() } else { clean }
}

/// Whether process `pid` of this machine is alive (EPERM: it is, as another user's).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The prefix of this process's temporary names.
fn temp_prefix() -> String {
    format!("{TEMP_PREFIX}{}.{}.", host_name(), std::process::id())
}

/// Whether a folder entry is a temporary of a dead process of this machine.
fn is_stale_temporary(name: &str, host: &str) -> bool {
    let Some(rest) = name.strip_prefix(TEMP_PREFIX) else { return false };
    let mut fields = rest.rsplitn(3, '.');
    let (Some(_random), Some(pid), Some(owner)) = (fields.next(), fields.next(), fields.next()) else { return false };
    owner == host && pid.parse::<u32>().is_ok_and(|pid| !process_alive(pid))
}

/// Removes the temporaries that killed divgpu commands of this machine left
/// in `folder` (regular files only; a name that is anything else is left).
/// Returns how many were removed.
pub fn remove_stale_temporaries(folder: &Path) -> usize {
    let host = host_name();
    let Ok(entries) = fs::read_dir(folder) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if regular && is_stale_temporary(name, &host) && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Syncs a folder, so that a rename in it survives a crash. File systems
/// that cannot sync a folder (EINVAL) have nothing to sync.
pub fn sync_folder(folder: &Path) -> Result<()> {
    let name = folder.display().to_string();
    let dir = File::open(folder).map_err(|e| Error::io(&name, e))?;
    match dir.sync_all() {
        Err(e) if e.raw_os_error() != Some(libc::EINVAL) => Err(Error::io(name, e)),
        _ => Ok(()),
    }
}

/// Syncs `file` (written at `from`), renames it onto the target, syncs the
/// folder: the commit of every output, the checkpoint's finished cache too.
pub fn install(file: &File, from: &Path, target: &Target) -> Result<()> {
    let failed = |step: &str, e: std::io::Error| {
        Error::input(target.describe(), format!("{step} failed ({e}); the old file is kept, {} is removed", from.display()))
    };
    fault::at(fault::Step::Sync).and_then(|()| file.sync_all()).map_err(|e| failed("sync", e))?;
    fault::at(fault::Step::Rename).and_then(|()| fs::rename(from, &target.file)).map_err(|e| failed("rename", e))?;
    sync_folder(&target.folder)
}

/// Faults of the commit for the tests: with the cargo feature
/// `fault-injection` (build/fault/divgpu.so, never shipped),
/// `divgpu.inject_write_fault(kind)` makes the next commit's sync
/// ("write-sync": EIO) or rename ("write-rename": ENOSPC) fail, as a failing
/// disk would; without the feature `at` is always Ok and compiles away.
pub mod fault {
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Step {
        Sync = 1,
        Rename = 2,
    }

    #[cfg(feature = "fault-injection")]
    static ARMED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

    /// Arms one fault (replacing any armed one); it fires once.
    #[cfg(feature = "fault-injection")]
    pub fn arm(kind: &str) -> crate::error::Result<()> {
        let step = match kind {
            "write-sync" => Step::Sync as u8,
            "write-rename" => Step::Rename as u8,
            "none" => 0,
            other => {
                return Err(crate::error::Error::Usage(format!(
                    "inject_write_fault: unknown fault '{other}' (write-sync, write-rename or none)"
                )))
            }
        };
        ARMED.store(step, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Err (once) where the fault armed is `step`'s.
    #[inline]
    pub fn at(step: Step) -> std::io::Result<()> {
        #[cfg(feature = "fault-injection")]
        {
            use std::sync::atomic::Ordering::SeqCst;
            if ARMED.compare_exchange(step as u8, 0, SeqCst, SeqCst).is_ok() {
                let errno = if step == Step::Sync { libc::EIO } else { libc::ENOSPC };
                return Err(std::io::Error::from_raw_os_error(errno));
            }
        }
        let _ = step;
        Ok(())
    }
}

/// An output being written: a temporary file beside its target, renamed onto
/// it by `commit`; dropped without a commit, the temporary is removed.
pub struct Output {
    target: Target,
    temp: tempfile::NamedTempFile,
}

impl Output {
    /// Resolves and checks `path`, removes stale temporaries in its folder,
    /// and creates the temporary (mode: the replaced file's, else 0666 less
    /// the umask; not tempfile's 0600, since readers are often other users).
    pub fn create(path: &str) -> Result<Output> {
        let target = resolve(path)?;
        remove_stale_temporaries(&target.folder);
        let mode = fs::metadata(&target.file).map(|m| m.mode() & 0o7777).unwrap_or(0o666);
        let temp = tempfile::Builder::new()
            .prefix(&temp_prefix())
            .rand_bytes(10)
            .permissions(Permissions::from_mode(mode))
            .tempfile_in(&target.folder)
            .map_err(|e| Error::input(target.describe(), format!("cannot create a temporary file in {}: {e}", target.folder.display())))?;
        if fs::metadata(&target.file).is_ok() {
            // An existing file keeps its mode exactly (creation applied the umask).
            let _ = temp.as_file().set_permissions(Permissions::from_mode(mode));
        }
        Ok(Output { target, temp })
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The temporary file's path (the stats are streamed there: `tail -f` it).
    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }

    pub fn file(&mut self) -> &mut File {
        self.temp.as_file_mut()
    }

    /// Synced, renamed onto the target, the folder synced.
    pub fn commit(self) -> Result<()> {
        let Output { target, temp } = self;
        install(temp.as_file(), temp.path(), &target)?;
        // Renamed: the temporary's name is gone, nothing left to remove.
        let _ = temp.into_temp_path().keep();
        Ok(())
    }
}

/// A failed write's message; a crate error raised by the writer (merge: a part
/// found bad while it is copied) is passed on as it is.
fn write_error(path: &str, e: Box<dyn std::error::Error>) -> Error {
    match e.downcast::<Error>() {
        Ok(e) => *e,
        Err(e) => Error::input(path, format!("write failed: {e}")),
    }
}

/// Writes `path` the safe way (module comment): all of it or nothing; the
/// old file stays as it was on any error. `-` streams to standard output.
pub fn write_atomically(
    path: &str,
    write: impl FnOnce(&mut BufWriter<File>) -> std::result::Result<(), Box<dyn std::error::Error>>,
) -> Result<()> {
    if path == STDOUT {
        return write_stdout(write);
    }
    let mut out = Output::create(path)?;
    let temp = out.temp_path().display().to_string();
    let file = out.file().try_clone().map_err(|e| Error::io(&temp, e))?;
    let mut w = BufWriter::new(file);
    write(&mut w).map_err(|e| write_error(path, e))?;
    w.flush().map_err(|e| Error::input(path, format!("write failed: {e}")))?;
    drop(w);
    out.commit()
}

/// Standard output as a `File` (a duplicate of descriptor 1).
pub fn stdout_file() -> Result<File> {
    use std::os::fd::AsFd;
    let fd = std::io::stdout().as_fd().try_clone_to_owned().map_err(|e| Error::io("standard output", e))?;
    Ok(File::from(fd))
}

fn write_stdout(
    write: impl FnOnce(&mut BufWriter<File>) -> std::result::Result<(), Box<dyn std::error::Error>>,
) -> Result<()> {
    std::io::stdout().flush().map_err(|e| Error::io("standard output", e))?;
    let mut w = BufWriter::new(stdout_file()?);
    write(&mut w).map_err(|e| write_error("standard output", e))?;
    w.flush().map_err(|e| Error::input("standard output", format!("write failed: {e}")))
}

/// The proof, before any work, that the target's folder takes a file: a
/// temporary made and removed there (a folder like /proc/self/fd, where
/// /dev/stdout on a pipe leads, passes the mode bits but takes no file).
fn probe(t: &Target) -> Result<()> {
    match tempfile::Builder::new().prefix(&temp_prefix()).tempfile_in(&t.folder) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::input(
            t.describe(),
            format!("folder {} takes no new file ({e}); for standard output give -", t.folder.display()),
        )),
    }
}

/// A file's identity: device and inode.
fn identity(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// An output or input named on the command line: its option and path.
pub struct Named<'a> {
    pub option: &'a str,
    pub path: &'a str,
}

/// Checks, before any work, every output (`resolve`, unless `-` where
/// `stdout_ok`) and that no output is the same file as an input or as another
/// output. Errors are one line starting with the option and path at fault.
pub fn check_files(outputs: &[Named], inputs: &[Named], stdout_ok: bool) -> Result<Vec<Option<Target>>> {
    let mut targets = Vec::with_capacity(outputs.len());
    for out in outputs {
        if out.path == STDOUT {
            if !stdout_ok {
                return Err(Error::Refused(format!("{} -: standard output is not an output of this command; name a file", out.option)));
            }
            targets.push(None);
            continue;
        }
        let named = |e: Error| Error::Refused(format!("{} {e}", out.option));
        let t = resolve(out.path).map_err(named)?;
        probe(&t).map_err(named)?;
        let same = |path: &str| {
            let p = Path::new(path);
            fs::canonicalize(p).is_ok_and(|c| c == t.file) || identity(p).is_some_and(|id| identity(&t.file) == Some(id))
        };
        for input in inputs {
            if same(input.path) {
                return Err(Error::Refused(format!(
                    "{} {} is the same file as {} {}: divgpu never writes over its input",
                    out.option, out.path, input.option, input.path
                )));
            }
        }
        for (earlier, seen) in outputs.iter().zip(&targets) {
            let clash = |s: &Target| s.file == t.file || identity(&s.file).is_some_and(|id| identity(&t.file) == Some(id));
            if seen.as_ref().is_some_and(clash) {
                return Err(Error::Refused(format!(
                    "{} {} is the same file as {} {}: each output needs a file of its own",
                    out.option, out.path, earlier.option, earlier.path
                )));
            }
        }
        targets.push(Some(t));
    }
    Ok(targets)
}

#[cfg(test)]
mod tests;
